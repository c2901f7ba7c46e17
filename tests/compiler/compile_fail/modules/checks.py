def one(C):
    C += 1.0


def same(before, after):
    return 0.0
