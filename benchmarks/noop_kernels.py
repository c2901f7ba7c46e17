"""Kernels that do nothing: they measure the runtime's own cost per task."""


def touch(a):
    """Read-modify-write nothing: the task exists only for its dependencies."""


def touch2(a, b):
    """Read one tile, write another, do nothing."""
