"""Kernels named as statements begin (tests: e207_kernel_named_as_a_statement*)."""


def let(A):
    A += 1.0


def release(A):
    A += 1.0


def out(A):
    A += 1.0
