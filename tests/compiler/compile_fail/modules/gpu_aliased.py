"""A CPU body of the wrong arity, and the GPU body bound to it by another name."""


def f(A):
    pass


f_gpu = f
