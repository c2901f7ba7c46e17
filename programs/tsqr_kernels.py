"""Kernels of programs/tsqr.tile: the QR of one triangle on top of another and its
application (LAPACK dtpqrt/dtpmqrt with l = n: the prelude's tpqrt/tpmqrt take a
full tile below the triangle), which merge two R factors in the reduction tree,
and the least-squares check (LAPACK's dqrt17 ratio).

Like the prelude's, the kernels call LAPACK through :mod:`tiledsl.runtime.blas`,
which releases the GIL, on column-major float64 tiles or row ranges of them.
"""
import numpy as np

from tiledsl.runtime import blas
from tiledsl.runtime.checks import EPS


def _ld(a) -> int:
    """The leading dimension of a column-major tile (a row range of one included)."""
    return max(1, a.strides[1] // a.itemsize)


def ttqrt(R, A, T):
    """[R; A] = Q·[R'; 0] for the upper trapezoids of the first n rows of R and the first
    m = min(rows, n) of A (n = A's columns; m < n where A is the short last tile row): R'
    overwrites R's, the reflectors V A's (the rows below, and the strict lower triangles,
    are not touched); T (ib×n) receives the block factors."""
    n = A.shape[1]
    m, nb = min(A.shape[0], n), min(T.shape[0], n)
    if n and m:
        blas.dtpqrt(m, n, m, nb, R, _ld(R), A, _ld(A), T, _ld(T), np.empty(nb * n))


def ttmqrt(V, T, C1, C2):
    """[C1; C2] = Qᵀ·[C1; C2] on the first k rows of C1 and the first m = min(rows, k) of C2
    (k = V's columns, m as :func:`ttqrt` took them of V), Q from :func:`ttqrt`."""
    k, n = V.shape[1], C2.shape[1]
    m, nb = min(V.shape[0], k), min(T.shape[0], k)
    if k and m and n:
        blas.dtpmqrt("L", "T", m, n, k, m, nb, V, _ld(V), T, _ld(T), C1, _ld(C1), C2, _ld(C2),
                     np.empty(n * nb))


def least_squares(before, after):
    """‖(B − A·X)ᵀ·A‖₁ / (‖A‖₁·‖B‖₁·max(m, n, nrhs)·ε), X the first n rows of B's final
    value: LAPACK's test ratio of a least-squares solution (dqrt17, normal equations)."""
    a, b = before["A"], before["B"]
    (m, n), nrhs = a.shape, b.shape[1]
    x = after["B"][:n]
    residual = b - a @ x
    scale = np.abs(residual).max()
    if scale == 0.0:
        return 0.0
    error = np.abs((residual / scale).T @ a).sum(axis=1).max() * scale
    one_norm = np.abs(a).sum(axis=0).max() * np.abs(b).sum(axis=0).max()
    return float(error / (one_norm * max(m, n, nrhs) * EPS)) if one_norm else float("inf")
