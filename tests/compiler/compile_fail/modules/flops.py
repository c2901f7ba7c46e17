"""Kernels whose flop counts hold float constants, for the compile-fail tests of flop counts."""


def fill(A, v):
    A[:] = v


negated = subtracted = halved = least = signed = fill


def product(A, B, C):
    C += A @ B


def cube(Y, v):
    Y *= v
