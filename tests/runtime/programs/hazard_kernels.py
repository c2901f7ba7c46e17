"""Kernels for the hazard tests: each leaves a trace of the order it ran in."""
import time


def fill(a):
    """Overwrite A with (the previous value of its first element) + 1, slowly."""
    value = a[0, 0] + 1
    time.sleep(0.002)
    a[:] = value


def copy(a, b):
    """B = A, slowly, so a racing writer of A would be caught."""
    value = a[0, 0]
    time.sleep(0.002)
    b[:] = value


def scale(a):
    """A = 10 · A."""
    a *= 10
