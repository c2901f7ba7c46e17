"""CPU bodies of the kernels of placement.tile (the GPU tests add GPU bodies to a copy)."""


def mix(a, b, c):
    """C += A·Bᵀ / 2."""
    c += a @ b.T * 0.5


def pair(a, b):
    """A = 1.5·A, then B's first rows += A."""
    a *= 1.5
    b[:a.shape[0]] += a


def fresh(a, b):
    """B = A + 1 (B is `out`: every element written)."""
    b[:] = a + 1.0
