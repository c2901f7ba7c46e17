"""CPU tile kernels: in-place BLAS/LAPACK operations on column-major float64 tiles.

Every kernel works in place on numpy ``float64`` arrays stored column-major with a
leading dimension (``a.strides[0] == 8`` and ``a.strides[1] >= 8 * max(1, rows)``),
which includes row sub-ranges ``X[r0:r1, :]`` of a Fortran-ordered array: those are
passed to BLAS as they are, with ``lda = strides[1] // 8``, never copied. Anything
else raises :class:`ValueError`. A tile with a zero dimension makes a kernel a no-op
(hybrid tilings produce empty tiles). Numerical failures raise
:class:`~.errors.KernelError`.

All calls go through :mod:`.blas`, which releases the GIL, so CPU worker threads run
kernels in parallel. ``CPU_KERNELS`` maps the kernel names used by ``.tile`` programs
to these functions.
"""
from __future__ import annotations

import ctypes

import numpy as np

from . import blas
from .errors import KernelError

_DOUBLE = np.dtype(np.float64).itemsize
_SAFE_MINIMUM = np.finfo(np.float64).tiny  # LAPACK's dlamch('S'): 1/x does not overflow

# getrf_nopiv switches from recursion to column-by-column elimination below this many
# columns: the recursion turns the work into dtrsm/dgemm, the base case keeps the
# number of Python-level foreign calls small.
_LU_BASE_COLUMNS = 16
_SAFE_MINIMUM = np.finfo(np.float64).tiny  # LAPACK's dlamch('S'): 1/x does not overflow


def require_triangle(kernel: str, name: str, tri, k: int, other_name: str, other) -> None:
    """``tri`` must hold a k×k triangle for ``other`` (shape checks shared by CPU and GPU kernels)."""
    _require(tri.shape[0] >= k and tri.shape[1] >= k,
             f"{kernel}: {name} of shape {tri.shape} has no {k}x{k} triangle for {other_name} of shape {other.shape}")


def require_syrk(A, C) -> None:
    _require(C.shape == (A.shape[0], A.shape[0]), f"syrk: C of shape {C.shape} does not match A of shape {A.shape}")


def require_gemqrt(V, C) -> None:
    _require(C.shape[0] == V.shape[0], f"gemqrt: C of shape {C.shape} does not match V of shape {V.shape}")


def require_tpmqrt(V, C1, C2) -> None:
    m, k = V.shape
    _require(C2.shape[0] == m and C1.shape[0] >= k and C1.shape[1] == C2.shape[1],
             f"tpmqrt: shapes V {V.shape}, C1 {C1.shape}, C2 {C2.shape} do not conform")


def _ld(a: np.ndarray, name: str, writable: bool = False) -> int:
    """The leading dimension of tile ``a``; ValueError unless it is column-major float64."""
    if not isinstance(a, np.ndarray) or a.ndim != 2 or a.dtype != np.float64:
        raise ValueError(f"{name}: expected a 2-D float64 array, got {_describe(a)}")
    if writable and not a.flags.writeable:
        raise ValueError(f"{name}: the array is read-only")
    rows, cols = a.shape
    if a.size == 0:
        return max(1, rows)  # numpy gives empty arrays arbitrary strides; never used
    # A stride along a dimension of extent 1 is never used, so it may be anything.
    col_stride = a.strides[1] if cols > 1 else _DOUBLE * rows
    if ((rows > 1 and a.strides[0] != _DOUBLE)
            or col_stride % _DOUBLE or col_stride < _DOUBLE * rows):
        raise ValueError(f"{name}: not column-major with a leading dimension: {_describe(a)}")
    return col_stride // _DOUBLE


def _describe(a) -> str:
    """A short description of an argument for error messages."""
    if isinstance(a, np.ndarray):
        return f"{a.dtype} array of shape {a.shape}, strides {a.strides}"
    return type(a).__name__


def _require(condition: bool, message: str) -> None:
    """Raise ValueError(message) unless ``condition`` (a shape mismatch is a caller bug)."""
    if not condition:
        raise ValueError(message)


def _work(size: int) -> np.ndarray:
    """A LAPACK workspace of ``size`` doubles (at least one)."""
    return np.empty(max(1, size))


def _inner_block(T: np.ndarray, k: int, kernel: str) -> int:
    """The inner block size nb = min(ib, k) for k reflectors with T of shape (ib, >= k)."""
    ib, cols = T.shape
    _require(cols >= k and (ib >= 1 or k == 0),
             f"{kernel}: T of shape {T.shape} cannot hold the factors of {k} reflectors")
    return min(ib, k)


def _check_trans(trans: str, kernel: str) -> None:
    """Only Q (``'N'``) and Qᵀ (``'T'``) are meaningful for real reflectors."""
    _require(trans in ("N", "T"), f"{kernel}: trans must be 'N' or 'T', got {trans!r}")


# --------------------------------------------------------------------------- Cholesky


def potrf(A: np.ndarray) -> None:
    """Cholesky of a tall tile: A[:n,:n] <- L11 (lower), then A[n:,:] <- A[n:,:]·L11⁻ᵀ.

    A is m×n with m >= n. The strict upper triangle of A[:n,:n] is left untouched.
    Raises KernelError if A[:n,:n] is not positive definite.
    """
    lda = _ld(A, "potrf: A", writable=True)
    m, n = A.shape
    _require(m >= n, f"potrf: tile is {m}x{n}; it needs at least as many rows as columns")
    if n == 0:
        return
    info = blas.dpotrf("L", n, A, lda)
    if info > 0:
        raise KernelError(f"matrix is not positive definite "
                          f"(leading minor {info} of {n} is not positive)")
    trsm(A[:n, :], A[n:, :])


def trsm(L: np.ndarray, B: np.ndarray) -> None:
    """B (m×w) <- B·L⁻ᵀ with L the lower triangle of the top-left w×w block of L."""
    ldl = _ld(L, "trsm: L")
    ldb = _ld(B, "trsm: B", writable=True)
    m, w = B.shape
    require_triangle("trsm", "L", L, w, "B", B)
    if m and w:
        blas.dtrsm("R", "L", "T", "N", m, w, 1.0, L, ldl, B, ldb)


def syrk(A: np.ndarray, C: np.ndarray) -> None:
    """C (w×w) <- C − A·Aᵀ on the lower triangle of C only; A is w×k."""
    lda = _ld(A, "syrk: A")
    ldc = _ld(C, "syrk: C", writable=True)
    w, k = A.shape
    require_syrk(A, C)
    if w and k:
        blas.dsyrk("L", "N", w, k, -1.0, A, lda, 1.0, C, ldc)


def gemm(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> None:
    """C (m×w) <- C − A·Bᵀ with A m×k and B w×k (A and B may overlap; C must not)."""
    _gemm("T", A, B, C, "gemm")


def gemm_nn(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> None:
    """C (m×n) <- C − A·B with A m×k and B k×n."""
    _gemm("N", A, B, C, "gemm_nn")


def _gemm(trans_b: str, A: np.ndarray, B: np.ndarray, C: np.ndarray, kernel: str) -> None:
    """C <- C − A·op(B), op(B) = B or Bᵀ as ``trans_b`` says."""
    lda = _ld(A, f"{kernel}: A")
    ldb = _ld(B, f"{kernel}: B")
    ldc = _ld(C, f"{kernel}: C", writable=True)
    m, k = A.shape
    n = B.shape[0] if trans_b == "T" else B.shape[1]
    k_b = B.shape[1] if trans_b == "T" else B.shape[0]
    _require(k_b == k and C.shape == (m, n),
             f"{kernel}: shapes A {A.shape}, B {B.shape}, C {C.shape} do not conform")
    if m and n and k:
        blas.dgemm("N", trans_b, m, n, k, -1.0, A, lda, B, ldb, 1.0, C, ldc)


# --------------------------------------------------------------------------- LU


def getrf_nopiv(A: np.ndarray) -> None:
    """LU without pivoting in place: A (m×n) <- L\\U, L unit lower, U upper, min(m,n) steps.

    LAPACK's dgetrf is tried first: when partial pivoting exchanges no rows (the usual
    case for the diagonally dominant matrices this kernel is for) its result *is* an
    LU without pivoting, five times faster than ours. Otherwise the tile is restored
    and factored recursively (split the columns in two, factor the left half, dtrsm
    + dgemm, factor the trailing block). Raises KernelError on an exactly zero pivot.
    """
    lda = _ld(A, "getrf_nopiv: A", writable=True)
    m, n = A.shape
    if m == 0 or n == 0:
        return
    saved = A.copy(order="F")
    pivots = np.empty(min(m, n), dtype=np.int32)
    info = blas.dgetrf(m, n, A, lda, pivots)
    unpivoted = np.array_equal(pivots, np.arange(1, min(m, n) + 1, dtype=np.int32))
    # OpenBLAS scales by 1/pivot, which overflows below the safe minimum
    if info == 0 and unpivoted and np.abs(np.diagonal(A)).min() >= _SAFE_MINIMUM:
        return
    A[...] = saved
    _lu_recursive(A, 0)


def _lu_recursive(A: np.ndarray, offset: int) -> None:
    """Factor A in place; ``offset`` is A's diagonal position in the kernel's tile."""
    m, n = A.shape
    k = min(m, n)
    if k <= _LU_BASE_COLUMNS:
        _lu_unblocked(A, offset)
        return
    h = k // 2
    _lu_recursive(A[:, :h], offset)
    trsm_l(A[:h, :h], A[:h, h:])
    gemm_nn(A[h:, :h], A[:h, h:], A[h:, h:])
    _lu_recursive(A[h:, h:], offset + h)


def _lu_unblocked(A: np.ndarray, offset: int) -> None:
    """Right-looking elimination, one column at a time (dscal + dger).

    Pointers into A are computed from its base address rather than by slicing: this
    loop makes two foreign calls per column, and numpy views plus their ``.ctypes``
    lookups would cost several times more than the calls. A stays alive meanwhile.
    """
    lda = _ld(A, "getrf_nopiv: A")
    m, n = A.shape
    base = A.ctypes.data
    for j in range(min(m, n)):
        pivot = A[j, j]
        if pivot == 0.0:
            position = offset + j
            raise KernelError(f"zero pivot in LU without pivoting "
                              f"(U[{position}, {position}] is exactly 0)")
        diagonal = base + _DOUBLE * (j + j * lda)
        column = ctypes.c_void_p(diagonal + _DOUBLE)           # A[j+1:, j]
        row = ctypes.c_void_p(diagonal + _DOUBLE * lda)        # A[j, j+1:]
        trailing = ctypes.c_void_p(diagonal + _DOUBLE * (lda + 1))  # A[j+1:, j+1:]
        below, right = m - j - 1, n - j - 1
        if abs(pivot) >= _SAFE_MINIMUM:
            blas.dscal(below, 1.0 / pivot, column, 1)
        else:  # 1/pivot would overflow; divide instead, as LAPACK's dgetf2 does
            A[j + 1:, j] /= pivot
        blas.dger(below, right, -1.0, column, 1, row, lda, trailing, lda)


def trsm_l(LU: np.ndarray, B: np.ndarray) -> None:
    """B (k×n) <- L⁻¹·B with L the unit lower triangle of the top-left k×k block of LU."""
    ldl = _ld(LU, "trsm_l: LU")
    ldb = _ld(B, "trsm_l: B", writable=True)
    k, n = B.shape
    require_triangle("trsm_l", "LU", LU, k, "B", B)
    if k and n:
        blas.dtrsm("L", "L", "N", "U", k, n, 1.0, LU, ldl, B, ldb)


def trsm_u(LU: np.ndarray, B: np.ndarray) -> None:
    """B (m×k) <- B·U⁻¹ with U the non-unit upper triangle of the top-left k×k block of LU."""
    ldu = _ld(LU, "trsm_u: LU")
    ldb = _ld(B, "trsm_u: B", writable=True)
    m, k = B.shape
    require_triangle("trsm_u", "LU", LU, k, "B", B)
    if m and k:
        blas.dtrsm("R", "U", "N", "N", m, k, 1.0, LU, ldu, B, ldb)


# --------------------------------------------------------------------------- QR


def geqrt(A: np.ndarray, T: np.ndarray) -> None:
    """Blocked QR of a tile (LAPACK DGEQRT): A (m×n) <- V\\R, T <- block reflector factors.

    T has shape (ib, n) with ib >= 1 the inner block size. With k = min(m, n) reflectors
    and nb = min(ib, k), DGEQRT writes ceil(k/nb) upper triangular nb×nb factors (the
    last one possibly narrower) side by side into T[:nb, :k]; the rest of T, including
    the part below each factor's diagonal, is not written.
    V is unit lower trapezoidal, stored below the diagonal of A; R is on and above it.
    """
    lda = _ld(A, "geqrt: A", writable=True)
    ldt = _ld(T, "geqrt: T", writable=True)
    m, n = A.shape
    k = min(m, n)
    nb = _inner_block(T, k, "geqrt")
    if k:
        blas.dgeqrt(m, n, nb, A, lda, T, ldt, _work(nb * n))


def gemqrt(V: np.ndarray, T: np.ndarray, C: np.ndarray) -> None:
    """C <- Qᵀ·C with Q from :func:`geqrt` (V, T); see :func:`gemqrt_apply`."""
    gemqrt_apply(V, T, C, "T")


def gemqrt_apply(V: np.ndarray, T: np.ndarray, C: np.ndarray, trans: str) -> None:
    """C (m×nc) <- op(Q)·C (LAPACK DGEMQRT, side 'L'), op = identity ('N') or transpose ('T').

    V is the m×nv tile that geqrt factored (k = min(m, nv) reflectors below its
    diagonal) and T its factors, with the same nb = min(T.shape[0], k).
    """
    ldv = _ld(V, "gemqrt: V")
    ldt = _ld(T, "gemqrt: T")
    ldc = _ld(C, "gemqrt: C", writable=True)
    _check_trans(trans, "gemqrt")
    m, nv = V.shape
    nc = C.shape[1]
    k = min(m, nv)
    require_gemqrt(V, C)
    nb = _inner_block(T, k, "gemqrt")
    if k and nc:
        blas.dgemqrt("L", trans, m, nc, k, nb, V, ldv, T, ldt, C, ldc, _work(nc * nb))


def tpqrt(R: np.ndarray, A: np.ndarray, T: np.ndarray) -> None:
    """QR of a triangle on top of a square tile (LAPACK DTPQRT with l=0).

    [R; A] = Q·[R'; 0]: R' overwrites the upper triangle of the top-left n×n block of R
    (R may be taller: only its first n rows are used; its strict lower part is never
    touched), A (m×n) is overwritten by the reflectors V, and T (ib, n) receives the
    factors in T[:nb, :n] with nb = min(ib, n).
    """
    ldr = _ld(R, "tpqrt: R", writable=True)
    lda = _ld(A, "tpqrt: A", writable=True)
    ldt = _ld(T, "tpqrt: T", writable=True)
    m, n = A.shape
    require_triangle("tpqrt", "R", R, n, "A", A)
    nb = _inner_block(T, n, "tpqrt")
    if m and n:
        blas.dtpqrt(m, n, 0, nb, R, ldr, A, lda, T, ldt, _work(nb * n))


def tpmqrt(V: np.ndarray, T: np.ndarray, C1: np.ndarray, C2: np.ndarray) -> None:
    """[C1[:k,:]; C2] <- Qᵀ·[C1[:k,:]; C2], Q from :func:`tpqrt`; see :func:`tpmqrt_apply`."""
    tpmqrt_apply(V, T, C1, C2, "T")


def tpmqrt_apply(V: np.ndarray, T: np.ndarray, C1: np.ndarray, C2: np.ndarray,
                 trans: str) -> None:
    """[C1[:k,:]; C2] <- op(Q)·[C1[:k,:]; C2] (LAPACK DTPMQRT, side 'L', l=0).

    V (m×k) and T are what tpqrt left in its A and T; nb = min(T.shape[0], k). C1 has
    at least k rows (only the first k are used) and C2 is m×nc.
    """
    ldv = _ld(V, "tpmqrt: V")
    ldt = _ld(T, "tpmqrt: T")
    ldc1 = _ld(C1, "tpmqrt: C1", writable=True)
    ldc2 = _ld(C2, "tpmqrt: C2", writable=True)
    _check_trans(trans, "tpmqrt")
    m, k = V.shape
    nc = C2.shape[1]
    require_tpmqrt(V, C1, C2)
    nb = _inner_block(T, k, "tpmqrt")
    if m and k and nc:
        blas.dtpmqrt("L", trans, m, nc, k, 0, nb, V, ldv, T, ldt, C1, ldc1, C2, ldc2,
                     _work(nc * nb))


CPU_KERNELS = {
    "potrf": potrf,
    "trsm": trsm,
    "syrk": syrk,
    "gemm": gemm,
    "getrf_nopiv": getrf_nopiv,
    "trsm_l": trsm_l,
    "trsm_u": trsm_u,
    "gemm_nn": gemm_nn,
    "geqrt": geqrt,
    "gemqrt": gemqrt,
    "tpqrt": tpqrt,
    "tpmqrt": tpmqrt,
}
