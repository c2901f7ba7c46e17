def scale():
    pass


def look(A):
    pass
