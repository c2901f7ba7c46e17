"""Flop counts of the prelude's kernels, from their arguments' shapes and values.

``PRELUDE_FLOPS[name](*args)`` takes a kernel's arguments with every tile replaced
by its (rows, cols) shape (a panel by the shape of its tiles stacked) and values as
they are, and returns the kernel's flops (LAPACK's counts).
"""
from __future__ import annotations


def _gemm(a, b, c, *options) -> float:
    return 2.0 * c[0] * c[1] * a[1]


def _syrk(a, c, *options) -> float:
    return float(a[1]) * c[0] * (c[0] + 1)


def _trsm(l, b, *options) -> float:
    return float(b[0]) * b[1] * b[1]


def _potrf(a, *options) -> float:
    m, n = a
    return n ** 3 / 3.0 + (m - n) * n * n


def _getrf_nopiv(a) -> float:
    m, n = a
    k = min(m, n)
    return m * n * k - (m + n) * k * k / 2.0 + k ** 3 / 3.0


def _trsm_l(lu, b) -> float:
    return float(b[0]) * b[0] * b[1]


def _geqrt(a, t) -> float:
    m, n = a
    k = min(m, n)
    return 2.0 * m * n * k - (m + n) * k * k + 2.0 * k ** 3 / 3.0


def _gemqrt(v, t, c, *options) -> float:
    return 4.0 * c[0] * c[1] * v[1] - 2.0 * c[1] * v[1] * v[1]


def _tpqrt(r, a, t) -> float:
    return 2.0 * a[0] * r[1] * r[1]


def _tpmqrt(v, t, c1, c2, *options) -> float:
    return 4.0 * c2[0] * c2[1] * v[1]


PRELUDE_FLOPS = {
    "potrf": _potrf, "trsm": _trsm, "syrk": _syrk, "gemm": _gemm,
    "getrf_nopiv": _getrf_nopiv, "trsm_l": _trsm_l, "trsm_u": _trsm, "gemm_nn": _gemm,
    "geqrt": _geqrt, "gemqrt": _gemqrt, "tpqrt": _tpqrt, "tpmqrt": _tpmqrt,
}
