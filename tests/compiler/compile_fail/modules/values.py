"""Kernels with value parameters, for the compile-fail tests of value arguments."""


def scale(A, alpha, side):
    A *= alpha


def step(A, k, by):
    A[0, 0] += k * by


def one(A, alpha):
    A *= alpha


two = three = four = five = six = seven = eight = nine = ten = one


def panel(A, P):
    pass


def with_gpu(A, alpha):
    A *= alpha


def with_gpu_gpu(A):
    pass


broken = with_gpu
broken_gpu = "fast"


def residual(before, after):
    return 0.0
