"""Flop counts of the prelude's kernels, from their arguments' shapes and values.

``PRELUDE_FLOPS[name](*args)`` takes a kernel's arguments in declaration order with
every tile replaced by its (rows, cols) shape, a panel by the shape of its tiles
stacked (a column panel: total rows × cols), and values as they are (each defaults
as the prelude declares it), and returns the kernel's flops as a float.

The counts are LAPACK's (LAWN 41, leading terms), the ones the testers of PLASMA and
Chameleon use: gemm 2mnk; symm 2m²n (side L) or 2mn² (R); syrk k·n² (a tile Cholesky's
counts add up to n³/3 exactly); syr2k 2k·n²; trsm and trmm m²n (side L) or mn² (R); potrf
n³/3, plus the trsm of the rows below n in a tall tile; trtri and lauum n³/3; getrf (with
or without pivoting) 2mnk − (m+n)k² + 2k³/3 with k = min(m, n) (mn² − n³/3 for m >= n);
geqrt 2mnk − 2k³/3; gemqrt 4mnk − 2nk² (side L, C m×n, k reflectors) or 4mnk − 2mk² (R);
tpqrt 2mn² (m×n under an n×n triangle); tpmqrt 4mnk with C2 m×n; ttqrt and ttmqrt the
exact sums over their reflectors (2n³/3 and 2k²n to leading order, for a triangle under a
triangle; a trapezoid too). laswp moves data and counts none; the norm kernels count a
flop or two per entry (amax and asum m·n, lassq 2mn) and lassq_merge none.
"""
from __future__ import annotations

import math


def _gemm(a, b, c, transa="N", transb="T", alpha=-1.0, beta=1.0) -> float:
    k = a[1] if transa == "N" else a[0]
    return 2.0 * c[0] * c[1] * k


def _gemm_nn(a, b, c) -> float:
    return 2.0 * c[0] * c[1] * a[1]


def _symm(a, b, c, side="L", uplo="L", alpha=1.0, beta=1.0) -> float:
    m, n = c
    return 2.0 * m * n * (m if side == "L" else n)


def _syrk(a, c, uplo="L", trans="N", alpha=-1.0, beta=1.0) -> float:
    n = c[0]
    k = a[1] if trans == "N" else a[0]
    return float(k) * n * n


def _syr2k(a, b, c, uplo="L", trans="N", alpha=-1.0, beta=1.0) -> float:
    n = c[0]
    k = a[1] if trans == "N" else a[0]
    return 2.0 * k * n * n


def _triangular(b, side: str) -> float:
    """trsm/trmm on B (m×n): the triangle has B's rows (side L) or columns (R)."""
    m, n = b
    return float(m) * n * (m if side == "L" else n)


def _trsm(a, b, side="R", uplo="L", transa="T", diag="N", alpha=1.0) -> float:
    return _triangular(b, side)


def _trmm(a, b, side="L", uplo="L", transa="N", diag="N", alpha=1.0) -> float:
    return _triangular(b, side)


def _trsm_l(lu, b) -> float:
    return _triangular(b, "L")


def _trsm_u(lu, b) -> float:
    return _triangular(b, "R")


def _potrf(a, uplo="L") -> float:
    m, n = a
    return n ** 3 / 3.0 + _triangular((m - n, n), "R")


def _cubic(a, uplo="L", diag="N") -> float:
    """trtri and lauum of an n×n triangle."""
    return a[1] ** 3 / 3.0


def _lu(a, *pivots) -> float:
    """getrf_nopiv and getrf (whose pivots P count nothing)."""
    m, n = a
    k = min(m, n)
    return 2.0 * m * n * k - (m + n) * k * k + 2.0 * k ** 3 / 3.0


def _laswp(p, a, first=0, direction="F") -> float:
    return 0.0


def _geqrt(a, t) -> float:
    m, n = a
    k = min(m, n)
    return 2.0 * m * n * k - 2.0 * k ** 3 / 3.0


def _gemqrt(v, t, c, side="L", trans="T") -> float:
    m, n = c
    k = min(v)
    return 4.0 * m * n * k - 2.0 * (n if side == "L" else m) * k * k


def _tpqrt(r, a, t) -> float:
    m, n = a
    return 2.0 * m * n * n


def _tpmqrt(v, t, c1, c2, side="L", trans="T") -> float:
    return 4.0 * c2[0] * c2[1] * v[1]


def _ttqrt(r, a, t) -> float:
    """Σ over the n columns of 4·(reflector length)·(columns right of it, and its own):
    reflector j is min(j + 1, m) long below R, m = min(rows, n); 2n³/3 to leading order for m = n."""
    m, n = min(a[0], a[1]), a[1]
    return 4.0 * ((n + 1) * m * (m + 1) / 2 - m * (m + 1) * (2 * m + 1) / 6) + 2.0 * m * (n - m) * (n - m + 1)


def _ttmqrt(v, t, c1, c2, side="L", trans="T") -> float:
    """4·(reflector length)·(C's other dimension) per reflector: 2k²·c to leading order for m = k."""
    k, m = v[1], min(v[0], v[1])
    other = c2[1] if side == "L" else c2[0]
    return 4.0 * other * (m * (m + 1) / 2 + m * (k - m))


def _entries(a, s, trans="N") -> float:
    """amax and asum: one flop per entry of A."""
    return float(a[0]) * a[1]


def _lassq(a, s) -> float:
    return 2.0 * a[0] * a[1]


def _lassq_merge(r, s) -> float:
    return 0.0


PRELUDE_FLOPS = {
    "gemm": _gemm, "symm": _symm, "syrk": _syrk, "syr2k": _syr2k, "trsm": _trsm, "trmm": _trmm,
    "potrf": _potrf, "trtri": _cubic, "lauum": _cubic,
    "getrf_nopiv": _lu, "trsm_l": _trsm_l, "trsm_u": _trsm_u, "gemm_nn": _gemm_nn,
    "getrf": _lu, "laswp": _laswp,
    "geqrt": _geqrt, "gemqrt": _gemqrt, "tpqrt": _tpqrt, "tpmqrt": _tpmqrt,
    "ttqrt": _ttqrt, "ttmqrt": _ttmqrt,
    "lassq": _lassq, "lassq_merge": _lassq_merge, "amax": _entries, "asum": _entries,
}


def modelled_flops(call, arguments: list, values: tuple) -> tuple[float, bool]:
    """``(flops, counted)`` of one task for timing it (``arguments``: its arguments' shapes, as
    :meth:`~.program.Call.shapes` gives them): its kernel's count, or, for a kernel without one,
    a gemm's on its largest argument (``counted`` False)."""
    count = call.flops or PRELUDE_FLOPS.get(call.kernel)
    if count is None:
        return 2.0 * max(r * c for r, c in arguments) ** 1.5, False
    return task_flops(call, count, arguments, values), True


class FlopCountError(ArithmeticError):
    """A kernel's flop count that fails for a task (A.m / k at k = 0), is negative (k·A.m at
    k = -1, which a sum would hide) or is no finite number (1e308 · 10, inf - inf): the program's
    mistake, at the call's line."""


def task_flops(call, count, shapes: list, values: tuple) -> float:
    """One task's flops by its kernel's ``count``, given its arguments' ``shapes`` and ``values``."""
    try:
        flops = float(count(*call.interleave(shapes, values)))
    except (ArithmeticError, ValueError) as error:  # ValueError: a negative exponent of '**', a math domain
        raise FlopCountError(f"the flop count of kernel {call.kernel} failed: {error}") from None
    if flops < 0:
        if call.flops is None:  # the prelude's count, on shapes its kernel refuses: the kernel names them
            return 0.0
        raise FlopCountError(f"the flop count of kernel {call.kernel} is {flops:g}, below zero")
    if not math.isfinite(flops):  # the overflow a run's values stop at (an inf count made the rate "inf")
        raise FlopCountError(f"the flop count of kernel {call.kernel} is {flops:g}, no finite number")
    return flops
