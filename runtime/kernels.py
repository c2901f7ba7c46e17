"""CPU tile kernels: in-place BLAS/LAPACK operations on column-major float64 tiles.

These are the prelude's kernels (``tiledsl/compiler/prelude.tile`` declares them):

* BLAS-3: gemm, symm, syrk, syr2k, trsm, trmm, with BLAS's options (side, uplo,
  trans, diag, alpha, beta); gemm_nn, trsm_l and trsm_u are the LU-without-pivoting
  special cases that programs name;
* Cholesky and triangular inverses: potrf, trtri, lauum;
* LU: getrf_nopiv, getrf (partial pivoting, of a tile or a panel) and laswp (its
  row interchanges, applied to other tiles or panels);
* QR with block reflectors: geqrt, gemqrt, tpqrt, tpmqrt, ttqrt, ttmqrt (LAPACK's, side and trans);
* norms over tiles: lassq and lassq_merge (Frobenius, as LAPACK's overflow-safe
  (scale, sumsq) pairs), amax (max |a_ij|) and asum (column or row sums of |a_ij|, for
  the one and infinity norms).

The runtime calls a kernel with its arguments in declaration order: a tile is a 2-D
float64 numpy array, a panel (a range of tiles) the matrix of its tiles stacked along
the range (``CPU_KERNELS`` wrap the functions below with
:func:`.panels.taking_matrices`; laswp takes a column panel as its list of tiles), an
``int``/``float``/``char`` value a Python int, float or one-character str. The Python
signatures carry the declarations' defaults, which are the kernels' original meanings
(gemm is C − A·Bᵀ, trsm is B·L⁻ᵀ, ...).

Every kernel works in place on numpy ``float64`` arrays stored column-major with a
leading dimension (``a.strides[0] == 8`` and ``a.strides[1] >= 8 * max(1, rows)``),
which includes row sub-ranges ``X[r0:r1, :]`` of a Fortran-ordered array: those are
passed to BLAS as they are, with ``lda = strides[1] // 8``, never copied. Anything
else, a shape that does not conform or an option that is not one of the allowed
characters raises :class:`ValueError`. A tile with a zero dimension makes a kernel a
no-op (hybrid tilings produce empty tiles), except that C = beta·C still holds when
the inner dimension of a product is zero. Where a triangle is read from a tile, it is
the top-left k×k block with k the dimension of the other operand (hybrid tilings
pass taller diagonal tiles). Numerical failures raise :class:`~.errors.KernelError`.

All calls go through :mod:`.blas`, which releases the GIL, so CPU worker threads run
kernels in parallel. ``CPU_KERNELS`` maps the kernel names used by ``.tile`` programs
to these functions. Their argument checks are :mod:`.kernel_checks`', shared with the
GPU kernels (:mod:`.gpu_kernels`) so that both raise the same messages.
"""
from __future__ import annotations

import ctypes

import numpy as np

from . import blas
from .errors import KernelError
from .kernel_checks import (DOUBLE, SAFE_MINIMUM, add_absolute_sums, add_to_sum_of_squares, check_number, check_option,
                            gemm_dims, getrf_dims, inner_block, laswp_range, leading_dimension, merge_sums_of_squares,
                            not_positive_definite, potrf_dims, qr_apply_dims, rank_k_dims, record_pivots, require,
                            require_square, require_sums, require_tpmqrt, require_triangle, scale_by,
                            singular_triangle, symm_dims, triangular_dims)
from .notes import note
from .panels import stacked, taking_matrices


# getrf_nopiv switches from recursion to column-by-column elimination below this many
# columns: the recursion turns the work into dtrsm/dgemm, the base case keeps the
# number of Python-level foreign calls small.
_LU_BASE_COLUMNS = 16


# --------------------------------------------------------------------------- arguments


def _ld(a: np.ndarray, name: str, writable: bool = False) -> int:
    """The leading dimension of tile ``a``; ValueError unless it is column-major float64."""
    if not isinstance(a, np.ndarray) or a.ndim != 2 or a.dtype != np.float64:
        raise ValueError(f"{name}: expected a 2-D float64 array, got {_describe(a)}")
    if writable and not a.flags.writeable:
        raise ValueError(f"{name}: the array is read-only")
    ld = leading_dimension(a)
    if ld is None:
        raise ValueError(f"{name}: not column-major with a leading dimension: {_describe(a)}")
    return ld


def _describe(a) -> str:
    """A short description of an argument for error messages."""
    if isinstance(a, np.ndarray):
        return f"{a.dtype} array of shape {a.shape}, strides {a.strides}"
    return type(a).__name__


def _work(size: int) -> np.ndarray:
    """A LAPACK workspace of ``size`` doubles (at least one)."""
    return np.empty(max(1, size))


def _row_offsets(tiles) -> list[int]:
    """The first row of each tile of a panel in the stacked matrix, and the total."""
    offsets = [0]
    for tile in tiles:
        offsets.append(offsets[-1] + tile.shape[0])
    return offsets


def panel_tiles(A, name: str) -> list:
    """The tiles of a panel (a list stacked top to bottom) or of one tile, all as wide."""
    tiles = list(A) if isinstance(A, (list, tuple)) else [A]
    require(len(tiles) > 0, f"{name}: the panel has no tiles")
    widths = sorted({tile.shape[1] for tile in tiles})
    require(len(widths) == 1,
            f"{name}: the panel's tiles have {', '.join(map(str, widths))} columns; they must all have the same")
    return tiles


# --------------------------------------------------------------------------- BLAS-3


def gemm(A: np.ndarray, B: np.ndarray, C: np.ndarray, transa: str = "N", transb: str = "T",
         alpha: float = -1.0, beta: float = 1.0) -> None:
    """C (m×n) <- alpha·op(A)·op(B) + beta·C, op(X) = X or Xᵀ as transa/transb say.

    The defaults give C − A·Bᵀ, the Cholesky update. A and B may overlap; C must not.
    """
    _gemm("gemm", A, B, C, transa, transb, alpha, beta)


def gemm_nn(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> None:
    """C (m×n) <- C − A·B with A m×k and B k×n."""
    _gemm("gemm_nn", A, B, C, "N", "N", -1.0, 1.0)


def _gemm(kernel: str, A, B, C, transa: str, transb: str, alpha, beta) -> None:
    lda = _ld(A, f"{kernel}: A")
    ldb = _ld(B, f"{kernel}: B")
    ldc = _ld(C, f"{kernel}: C", writable=True)
    m, n, k = gemm_dims(kernel, A, B, C, transa, transb)
    alpha, beta = check_number(kernel, "alpha", alpha), check_number(kernel, "beta", beta)
    if alpha == 0.0:  # A and B not read, as reference BLAS and cuBLAS (OpenBLAS let their NaN through)
        scale_by(C, beta)
    elif m and n and (k or beta != 1.0):
        blas.dgemm(transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)


def symm(A: np.ndarray, B: np.ndarray, C: np.ndarray, side: str = "L", uplo: str = "L",
         alpha: float = 1.0, beta: float = 1.0) -> None:
    """C (m×n) <- alpha·A·B + beta·C (side 'L') or alpha·B·A + beta·C (side 'R').

    A is symmetric, given by the ``uplo`` triangle of its top-left m×m (n×n) block.
    """
    lda = _ld(A, "symm: A")
    ldb = _ld(B, "symm: B")
    ldc = _ld(C, "symm: C", writable=True)
    m, n = symm_dims(A, B, C, side, uplo)
    alpha, beta = check_number("symm", "alpha", alpha), check_number("symm", "beta", beta)
    if m and n:
        blas.dsymm(side, uplo, m, n, alpha, A, lda, B, ldb, beta, C, ldc)


def syrk(A: np.ndarray, C: np.ndarray, uplo: str = "L", trans: str = "N",
         alpha: float = -1.0, beta: float = 1.0) -> None:
    """C (n×n) <- alpha·op(A)·op(A)ᵀ + beta·C on the ``uplo`` triangle of C only.

    op(A) (n×k) is A (trans 'N') or Aᵀ ('T'). The defaults give C − A·Aᵀ, lower.
    """
    lda = _ld(A, "syrk: A")
    ldc = _ld(C, "syrk: C", writable=True)
    n, k = rank_k_dims("syrk", A, A, C, uplo, trans)
    alpha, beta = check_number("syrk", "alpha", alpha), check_number("syrk", "beta", beta)
    if n and (k or beta != 1.0):
        blas.dsyrk(uplo, trans, n, k, alpha, A, lda, beta, C, ldc)


def syr2k(A: np.ndarray, B: np.ndarray, C: np.ndarray, uplo: str = "L", trans: str = "N",
          alpha: float = -1.0, beta: float = 1.0) -> None:
    """C (n×n) <- alpha·(op(A)·op(B)ᵀ + op(B)·op(A)ᵀ) + beta·C on the ``uplo`` triangle of C only.

    op(X) (n×k) is X (trans 'N') or Xᵀ ('T'); A and B have the same shape.
    """
    lda = _ld(A, "syr2k: A")
    ldb = _ld(B, "syr2k: B")
    ldc = _ld(C, "syr2k: C", writable=True)
    n, k = rank_k_dims("syr2k", A, B, C, uplo, trans)
    alpha, beta = check_number("syr2k", "alpha", alpha), check_number("syr2k", "beta", beta)
    if n and (k or beta != 1.0):
        blas.dsyr2k(uplo, trans, n, k, alpha, A, lda, B, ldb, beta, C, ldc)


def trsm(A: np.ndarray, B: np.ndarray, side: str = "R", uplo: str = "L", transa: str = "T",
         diag: str = "N", alpha: float = 1.0) -> None:
    """B (m×n) <- alpha·op(A)⁻¹·B (side 'L') or alpha·B·op(A)⁻¹ (side 'R').

    A is the ``uplo`` triangle of the top-left m×m (n×n) block of A, with a unit
    diagonal that is not read if ``diag`` is 'U'. The defaults give B·L⁻ᵀ (Cholesky).
    """
    _triangular("trsm", _solve_recursive, A, B, side, uplo, transa, diag, alpha)


def trmm(A: np.ndarray, B: np.ndarray, side: str = "L", uplo: str = "L", transa: str = "N",
         diag: str = "N", alpha: float = 1.0) -> None:
    """B (m×n) <- alpha·op(A)·B (side 'L') or alpha·B·op(A) (side 'R'), A triangular as in :func:`trsm`."""
    _triangular("trmm", _multiply, A, B, side, uplo, transa, diag, alpha)


def trsm_l(LU: np.ndarray, B: np.ndarray) -> None:
    """B (k×n) <- L⁻¹·B with L the unit lower triangle of the top-left k×k block of LU."""
    _triangular("trsm_l", _solve_recursive, LU, B, "L", "L", "N", "U", 1.0, "LU")


def trsm_u(LU: np.ndarray, B: np.ndarray) -> None:
    """B (m×k) <- B·U⁻¹ with U the non-unit upper triangle of the top-left k×k block of LU."""
    _triangular("trsm_u", _solve_recursive, LU, B, "R", "U", "N", "N", 1.0, "LU")


def _triangular(kernel: str, apply, A, B, side, uplo, transa, diag, alpha, a_name: str = "A") -> None:
    """B <- op(A)⁻¹ or op(A) applied to B by ``apply`` (:func:`_solve_recursive` or
    :func:`_multiply`), given the triangle's block of A once the arguments are checked."""
    _ld(A, f"{kernel}: {a_name}")
    _ld(B, f"{kernel}: B", writable=True)
    m, n = triangular_dims(kernel, A, B, side, uplo, transa, diag, a_name)
    alpha = check_number(kernel, "alpha", alpha)
    if m and n:
        order = m if side == "L" else n
        if apply is _solve_recursive and diag == "N" and alpha != 0:  # (alpha 0: A is not read)
            _note_singular(A[:order, :order], a_name)
        apply(side, uplo, transa, diag, alpha, A[:order, :order], B)


def _note_singular(triangle: np.ndarray, a_name: str) -> None:
    """A solve with an exact zero on the triangle's diagonal divides by it (LAPACK's dtrsm does
    not look): the run says so (:mod:`.notes`), as for getrf's, rather than only the NaN after."""
    zeros = np.flatnonzero(np.diagonal(triangle) == 0)
    if zeros.size:
        i = int(zeros[0])
        note(f"the triangle of {a_name} it was given has an exact zero on its diagonal, at ({i}, {i}): the "
             f"triangle is singular and the solve divides by zero")


def _blas_triangular(routine, side: str, uplo: str, transa: str, diag: str, alpha: float,
                     A: np.ndarray, B: np.ndarray) -> None:
    """dtrsm or dtrmm on B with the triangle A, in LAPACK's argument order."""
    routine(side, uplo, transa, diag, B.shape[0], B.shape[1], alpha, A, _ld(A, "A"), B, _ld(B, "B"))


def _multiply(side: str, uplo: str, transa: str, diag: str, alpha: float, A: np.ndarray, B: np.ndarray) -> None:
    """B <- alpha·op(A)·B or alpha·B·op(A): one dtrmm, which runs at dgemm's speed."""
    _blas_triangular(blas.dtrmm, side, uplo, transa, diag, alpha, A, B)


# OpenBLAS's single-threaded dtrsm runs at a third of dgemm's speed on a 384×384
# tile (25-30 against 74 GFLOP/s here) and at 29 on a 3840×384 column panel.
# Halving the triangle until it is this small turns most of the solve into dgemm:
# 36-48 GFLOP/s on the tile and 52-58 on the panel, with LAPACK's own (backward
# stable) blocking rather than inverted diagonal blocks.
_TRSM_BASE_ORDER = 48


def _solve_recursive(side: str, uplo: str, transa: str, diag: str, alpha: float,
                     A: np.ndarray, B: np.ndarray) -> None:
    """B <- alpha·op(A)⁻¹·B or alpha·B·op(A)⁻¹, A the order-k triangle, split in two.

    With op(A) = [[T11, 0], [T21, T22]] (lower after op) and side 'L', X1 = T11⁻¹·αB1
    comes first, then B2 <- αB2 − T21·X1 (dgemm) and X2 = T22⁻¹·B2; an upper op(A)
    runs the other way round, and side 'R' mirrors both.
    """
    order = A.shape[0]
    if order <= _TRSM_BASE_ORDER or alpha == 0.0:  # dtrsm reads no A for a zero alpha: zeros, whatever A holds
        _blas_triangular(blas.dtrsm, side, uplo, transa, diag, alpha, A, B)
        return
    half = (order // 2 + 15) // 16 * 16   # keep the blocks' columns aligned
    top, bottom = A[:half, :half], A[half:, half:]
    coupling = A[half:, :half] if uplo == "L" else A[:half, half:]
    forward = (uplo == "L") == (transa == "N")   # op(A) is lower: solve the top block first
    if side == "L":
        first, second = (B[:half], B[half:]) if forward else (B[half:], B[:half])
        solve_first, solve_second = (top, bottom) if forward else (bottom, top)
        _solve_recursive(side, uplo, transa, diag, alpha, solve_first, first)
        _gemm_update(transa, "N", coupling, first, alpha, second)
    else:
        first, second = (B[:, half:], B[:, :half]) if forward else (B[:, :half], B[:, half:])
        solve_first, solve_second = (bottom, top) if forward else (top, bottom)
        _solve_recursive(side, uplo, transa, diag, alpha, solve_first, first)
        _gemm_update("N", transa, first, coupling, alpha, second)
    _solve_recursive(side, uplo, transa, diag, 1.0, solve_second, second)


def _gemm_update(transa: str, transb: str, X: np.ndarray, Y: np.ndarray, beta: float, C: np.ndarray) -> None:
    """C <- beta·C − op(X)·op(Y)."""
    m, n = C.shape
    k = X.shape[0] if transa == "T" else X.shape[1]
    blas.dgemm(transa, transb, m, n, k, -1.0, X, _ld(X, "trsm: A"), Y, _ld(Y, "trsm: B"), beta,
               C, _ld(C, "trsm: B"))


# --------------------------------------------------------------------------- Cholesky, inverses


def potrf(A: np.ndarray, uplo: str = "L") -> None:
    """Cholesky factor of a tile, in place.

    Lower (the default): A is m×n with m >= n; A[:n,:n] <- L11 with A[:n,:n] = L11·L11ᵀ,
    then A[n:,:] <- A[n:,:]·L11⁻ᵀ (a tall tile of a hybrid tiling). Upper: A is square
    and A <- U with A = Uᵀ·U. The other strict triangle is left untouched. Raises
    KernelError if A[:n,:n] is not positive definite.
    """
    lda = _ld(A, "potrf: A", writable=True)
    m, n = potrf_dims(A, uplo)
    if n == 0:
        return
    info = blas.dpotrf(uplo, n, A, lda)
    if info == 0:  # LAPACK's reference dpotrf fails a minor whose diagonal is NaN; OpenBLAS's goes on
        bad = np.flatnonzero(~(np.diagonal(A[:n, :n]) > 0))
        info = int(bad[0]) + 1 if bad.size else 0
    if info > 0:
        raise not_positive_definite(info, n, bool(np.isnan(A[info - 1, info - 1])))
    trsm(A[:n, :], A[n:, :])


def trtri(A: np.ndarray, uplo: str = "L", diag: str = "N") -> None:
    """A (n×n) <- the inverse of its ``uplo`` triangle, in place (unit diagonal, not read, if
    ``diag`` is 'U'); the other strict triangle is untouched. KernelError on an exactly zero diagonal."""
    _ld(A, "trtri: A", writable=True)  # a column-major, writable tile, or ValueError
    check_option("trtri", "uplo", uplo, "LU")
    check_option("trtri", "diag", diag, "NU")
    n = require_square("trtri", A)
    if diag == "N":
        zeros = np.flatnonzero(np.diagonal(A) == 0.0)
        if zeros.size:
            raise singular_triangle(int(zeros[0]) + 1)
    if n:
        _invert_recursive(uplo, diag, A)


# LAPACK's dtrtri runs at 15 GFLOP/s on a 384×384 tile here, its blocks' dtrsm
# being slow (see _TRSM_BASE_ORDER); halving the triangle as ReLAPACK does gives 22-24.
_TRTRI_BASE_ORDER = 96


def _invert_recursive(uplo: str, diag: str, A: np.ndarray) -> None:
    """A <- A⁻¹ for a triangle with no zero on its diagonal, split in two.

    Lower: [[L11, 0], [L21, L22]]⁻¹ has L21 <- −L22⁻¹·L21·L11⁻¹, made by dtrmm with
    the inverted L11 and a solve with the original L22 (as LAPACK's dtrtri, for
    stability), then L22 is inverted; upper mirrors it.
    """
    n = A.shape[0]
    if n <= _TRTRI_BASE_ORDER:
        blas.dtrtri(uplo, diag, n, A, _ld(A, "trtri: A"))
        return
    half = (n // 2 + 15) // 16 * 16
    top, bottom = A[:half, :half], A[half:, half:]
    if uplo == "L":
        coupling, inverted_first, solved_with = A[half:, :half], top, bottom
    else:
        coupling, inverted_first, solved_with = A[:half, half:], bottom, top
    _invert_recursive(uplo, diag, inverted_first)
    _multiply("R", uplo, "N", diag, -1.0, inverted_first, coupling)
    _solve_recursive("L", uplo, "N", diag, 1.0, solved_with, coupling)
    _invert_recursive(uplo, diag, solved_with)


def lauum(A: np.ndarray, uplo: str = "L") -> None:
    """A (n×n) <- Lᵀ·L (lower, stored in the lower triangle) or U·Uᵀ (upper), in place;
    the other strict triangle is untouched (with trtri, the inverse from a Cholesky factor)."""
    lda = _ld(A, "lauum: A", writable=True)
    check_option("lauum", "uplo", uplo, "LU")
    n = require_square("lauum", A)
    if n:
        blas.dlauum(uplo, n, A, lda)


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
    if info == 0 and unpivoted and np.abs(np.diagonal(A)).min() >= SAFE_MINIMUM:
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
                              f"(U({position}, {position}) of the matrix it was given is exactly 0)")
        diagonal = base + DOUBLE * (j + j * lda)
        column = ctypes.c_void_p(diagonal + DOUBLE)           # A[j+1:, j]
        row = ctypes.c_void_p(diagonal + DOUBLE * lda)        # A[j, j+1:]
        trailing = ctypes.c_void_p(diagonal + DOUBLE * (lda + 1))  # A[j+1:, j+1:]
        below, right = m - j - 1, n - j - 1
        if abs(pivot) >= SAFE_MINIMUM:
            blas.dscal(below, 1.0 / pivot, column, 1)
        else:  # 1/pivot would overflow; divide instead, as LAPACK's dgetf2 does
            A[j + 1:, j] /= pivot
        blas.dger(below, right, -1.0, column, 1, row, lda, trailing, lda)


def getrf(A: np.ndarray, P: np.ndarray) -> None:
    """LU with partial pivoting (LAPACK DGETRF) of a tile or a panel: P·A = L·U in place.

    A is m×n (a panel arrives as one matrix: :func:`.panels.taking_matrices`); L (unit
    lower) and U overwrite it as in LAPACK. P (1×w, w >= k = min(m, n)) receives in
    P[0, j] the row, counted from A's first row, that row j was interchanged with
    (LAPACK's ipiv − 1), and j itself for k <= j < w. An exactly singular A is no
    error: U then has a zero on its diagonal, and the factorization is still valid
    (the run says so: :mod:`.notes`); NaNs spread as they do.
    """
    lda = _ld(A, "getrf: A", writable=True)
    _ld(P, "getrf: P", writable=True)
    m, n, k = getrf_dims(A, P)
    ipiv = np.empty(k, dtype=np.int32)
    info = blas.dgetrf(m, n, A, lda, ipiv) if k else 0
    if info > 0:  # the factorization stands; a solve with it would divide by zero
        note(f"U({info - 1}, {info - 1}) of the matrix it was given is exactly zero: the matrix is singular")
    record_pivots(np, P, ipiv, k)


def laswp(P: np.ndarray, A, first: int = 0, direction: str = "F") -> None:
    """Apply getrf's row interchanges to a tile or a panel (LAPACK DLASWP on the stacked rows).

    For j = first, ..., w − 1 (direction 'F', as getrf made them) or in reverse order
    (direction 'B', undoing them), rows j and P[0, j] of A are swapped, rows counted
    from the panel's first row as getrf counts them; entries equal to their own index
    (and any at j >= A's rows) are no interchange. So a tile LU with partial pivoting
    applies a panel's P to the same rows of every other column (laswp(P, A[k:mt, j])),
    and a solve applies it to the right-hand side, forward for A·x = b (P·b) and
    backward for Aᵀ·x = b (Pᵀ·y). ``first`` skips interchanges already applied, when one
    P is applied in parts.

    A tile, or a column panel whose tiles are adjacent in memory (:func:`.panels.stacked`),
    is swapped where it is (4096×448 with getrf's pivots: 0.4 ms). Other panels' swaps
    run on a compact copy of the rows they touch: the block of rows first..end−1 (copied
    by slices) and the rows their partners name elsewhere (gathered), swapped there by
    DLASWP and written back (2.0 ms for the same panel: numpy's gathers dominate).
    """
    _ld(P, "laswp: P")
    tiles = panel_tiles(A, "laswp: A")
    for tile in tiles:
        _ld(tile, "laswp: A", writable=True)
    offsets = _row_offsets(tiles)
    start, end = laswp_range(P, offsets[-1], first, direction)
    partners = _partners(P, start, end, offsets[-1])
    columns = tiles[0].shape[1]
    if not columns or not np.any(partners != np.arange(start, end)):
        return
    increment = 1 if direction == "F" else -1
    matrix = stacked(tiles)
    if matrix is not None:
        blas.dlaswp(columns, matrix, _ld(matrix, "laswp: A"), start + 1, end, _fortran_pivots(partners, start),
                    increment)
        return
    _laswp_compact(tiles, offsets, partners, start, end, increment)


def _laswp_compact(tiles, offsets, partners: np.ndarray, start: int, end: int, increment: int) -> None:
    """laswp's interchanges start..end−1 on a panel, by DLASWP on a compact copy of the rows they
    touch: rows start..end−1 (copied by slices), then the partners outside them (gathered)."""
    elsewhere = np.unique(partners[(partners < start) | (partners >= end)])
    compact = np.empty((end - start + len(elsewhere), tiles[0].shape[1]), order="F")
    block = [(tile, max(start, low) - low, min(end, high) - low, max(start, low) - start)
             for tile, low, high in zip(tiles, offsets, offsets[1:]) if low < end and high > start]
    for tile, top, bottom, at in block:
        compact[at:at + bottom - top] = tile[top:bottom]
    below = compact[end - start:]
    for tile, rows, at in _by_tile(tiles, offsets, elsewhere):
        below[at] = tile[rows]
    in_compact = np.where((partners >= start) & (partners < end), partners - start,
                          end - start + np.searchsorted(elsewhere, partners))
    blas.dlaswp(compact.shape[1], compact, compact.shape[0], 1, end - start, _fortran_pivots(in_compact, 0),
                increment)
    for tile, top, bottom, at in block:
        tile[top:bottom] = compact[at:at + bottom - top]
    for tile, rows, at in _by_tile(tiles, offsets, elsewhere):
        tile[rows] = below[at]


def _fortran_pivots(partners: np.ndarray, base: int) -> np.ndarray:
    """DLASWP's IPIV for interchanges k1 = base + 1, ...: 1-based int32 rows, entries before
    base + 1 unused."""
    ipiv = np.zeros(base + len(partners), dtype=np.int32)
    ipiv[base:] = partners + 1
    return ipiv


def _by_tile(tiles, offsets, rows: np.ndarray):
    """For each tile of the panel holding some of the stacked ``rows`` (sorted): (the tile,
    those rows counted in the tile, the slice of ``rows`` they are)."""
    bounds = np.searchsorted(rows, offsets).tolist()
    for tile, offset, low, high in zip(tiles, offsets, bounds, bounds[1:]):
        if low < high:
            yield tile, rows[low:high] - offset, slice(low, high)


def _partners(P, start: int, end: int, rows: int) -> np.ndarray:
    """P[0, j] for j in start..end−1 as row numbers (int64); ValueError naming an entry of
    P that is not a row of the panel."""
    pivots = P[0, start:end] if end > start else np.empty(0)
    bad = ~((pivots >= 0) & (pivots < rows) & (pivots == np.floor(pivots)))
    if bad.any():
        j = start + int(np.argmax(bad))
        raise ValueError(f"laswp: P[0, {j}] = {float(P[0, j])!r} is not a row of the panel (it has {rows} rows)")
    return pivots.astype(np.int64)


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
    nb = inner_block(T, k, "geqrt")
    if k:
        blas.dgeqrt(m, n, nb, A, lda, T, ldt, _work(nb * n))


def gemqrt(V: np.ndarray, T: np.ndarray, C: np.ndarray, side: str = "L", trans: str = "T") -> None:
    """C <- op(Q)·C (side 'L') or C·op(Q) (side 'R') with Q from :func:`geqrt` (LAPACK DGEMQRT).

    op(Q) is Q (trans 'N') or Qᵀ ('T'); the defaults give Qᵀ·C. V is the tile that geqrt
    factored (k = min of its dimensions reflectors below its diagonal), with as many
    rows as C has rows (side 'L') or columns ('R'); T its factors, with the same
    nb = min(T.shape[0], k).
    """
    ldv = _ld(V, "gemqrt: V")
    ldt = _ld(T, "gemqrt: T")
    ldc = _ld(C, "gemqrt: C", writable=True)
    k, nb = qr_apply_dims("gemqrt", V, T, C, side, trans)
    m, n = C.shape
    if k and m and n:
        blas.dgemqrt(side, trans, m, n, k, nb, V, ldv, T, ldt, C, ldc, _work((n if side == "L" else m) * nb))


def tpqrt(R: np.ndarray, A: np.ndarray, T: np.ndarray) -> None:
    """QR of a triangle on top of a square tile (LAPACK DTPQRT with l=0).

    [R; A] = Q·[R'; 0]: R' overwrites the upper triangle of the top-left n×n block of R
    (R may be taller: only its first n rows are used; its strict lower part is never
    touched), A (m×n) is overwritten by the reflectors V, and T (ib, n) receives the
    factors in T[:nb, :n] with nb = min(ib, n).
    """
    _pair_qr("tpqrt", R, A, T, triangle=False)


def tpmqrt(V: np.ndarray, T: np.ndarray, C1: np.ndarray, C2: np.ndarray, side: str = "L",
           trans: str = "T") -> None:
    """Q from :func:`tpqrt` applied to a pair of tiles (LAPACK DTPMQRT with l=0).

    Side 'L': [C1[:k, :]; C2] <- op(Q)·[C1[:k, :]; C2], C2 with V's rows. Side 'R':
    [C1[:, :k], C2] <- [C1[:, :k], C2]·op(Q), C2 with as many columns as V has rows.
    op(Q) is Q (trans 'N') or Qᵀ ('T'); the defaults give Qᵀ·[C1; C2]. V (m×k) and T
    are what tpqrt left in its A and T, nb = min(T.shape[0], k); only the first k rows
    (columns) of C1 are used.
    """
    _pair_apply("tpmqrt", V, T, C1, C2, side, trans, triangle=False)


def ttqrt(R: np.ndarray, A: np.ndarray, T: np.ndarray) -> None:
    """QR of a triangle on top of a triangle (LAPACK DTPQRT with l = m), which merges two R
    factors in a reduction tree.

    [R; A] = Q·[R'; 0] for the upper triangle of R's top-left n×n block and the upper
    trapezoid of A's first m = min(rows, n) rows (n = A's columns; m < n for a short last
    tile row): R' overwrites R's triangle and the reflectors V A's trapezoid. Neither
    tile's strict lower part, nor A's rows past m, is read or written (a tile that geqrt
    factored keeps its reflectors there); T (ib, n) receives the factors in T[:nb, :n]
    with nb = min(ib, n).
    """
    _pair_qr("ttqrt", R, A, T, triangle=True)


def ttmqrt(V: np.ndarray, T: np.ndarray, C1: np.ndarray, C2: np.ndarray, side: str = "L",
           trans: str = "T") -> None:
    """Q from :func:`ttqrt` applied to a pair of tiles (LAPACK DTPMQRT with l = m).

    V (rows×k) and T are what ttqrt left in its A and T; its reflectors fill the upper
    trapezoid of V's first m = min(rows, k) rows. Side 'L': [C1[:k, :]; C2[:m, :]] <-
    op(Q)·[C1[:k, :]; C2[:m, :]], C2 with V's rows. Side 'R': [C1[:, :k], C2[:, :m]] <-
    [C1[:, :k], C2[:, :m]]·op(Q), C2 with as many columns as V has rows. op(Q) is Q
    (trans 'N') or Qᵀ ('T'); the defaults give Qᵀ·[C1; C2]. The rest of C1 and C2 is
    not touched.
    """
    _pair_apply("ttmqrt", V, T, C1, C2, side, trans, triangle=True)


def _pair_qr(kernel: str, R, A, T, triangle: bool) -> None:
    """DTPQRT of R's triangle on A: all of A (l = 0), or the upper trapezoid of its first
    m = min(rows, n) rows (``triangle``, l = m)."""
    ldr = _ld(R, f"{kernel}: R", writable=True)
    lda = _ld(A, f"{kernel}: A", writable=True)
    ldt = _ld(T, f"{kernel}: T", writable=True)
    rows, n = A.shape
    m = min(rows, n) if triangle else rows
    require_triangle(kernel, "R", R, n, "A", A)
    nb = inner_block(T, n, kernel)
    if m and n:
        blas.dtpqrt(m, n, m if triangle else 0, nb, R, ldr, A, lda, T, ldt, _work(nb * n))


def _pair_apply(kernel: str, V, T, C1, C2, side: str, trans: str, triangle: bool) -> None:
    """DTPMQRT of the reflectors :func:`_pair_qr` left in V and T on [C1; C2] (side 'L') or
    [C1, C2] ('R'): all of C2 (l = 0), or its first m = min(V's rows, k) rows or columns
    (``triangle``, l = m)."""
    ldv = _ld(V, f"{kernel}: V")
    ldt = _ld(T, f"{kernel}: T")
    ldc1 = _ld(C1, f"{kernel}: C1", writable=True)
    ldc2 = _ld(C2, f"{kernel}: C2", writable=True)
    k, nb = qr_apply_dims(kernel, V, T, C2, side, trans)
    require_tpmqrt(V, C1, C2, side, kernel)
    rows, cols = C2.shape
    trapezoid = min(V.shape[0], k) if triangle else 0  # DTPMQRT's l
    if triangle:
        rows, cols = (trapezoid, cols) if side == "L" else (rows, trapezoid)
    if k and rows and cols:
        blas.dtpmqrt(side, trans, rows, cols, k, trapezoid, nb, V, ldv, T, ldt, C1, ldc1, C2, ldc2,
                     _work((cols if side == "L" else rows) * nb))


# --------------------------------------------------------------------------- norms


def lassq(A: np.ndarray, S: np.ndarray) -> None:
    """S[0, :2] = (scale, sumsq) <- the pair with A's entries added: scale²·sumsq grows by Σ a_ij².

    A zeroed S is an empty sum. Over tiles, ‖A‖_F = scale·√sumsq without overflow: sum
    each tile into a pair (per tile column, say), merge the pairs with :func:`lassq_merge`.
    """
    lda = _ld(A, "lassq: A")
    _ld(S, "lassq: S", writable=True)
    require_sums("lassq", S, 2)
    m, n = A.shape
    if m and n:  # the tile's own norm is finite unless the whole sum overflows
        add_to_sum_of_squares(np, S, blas.dlange("F", m, n, A, lda, _work(1)))


def lassq_merge(R: np.ndarray, S: np.ndarray) -> None:
    """S[0, :2] <- the (scale, sumsq) pair of the sums of both pairs R[0, :2] and S[0, :2]."""
    _ld(R, "lassq_merge: R")
    _ld(S, "lassq_merge: S", writable=True)
    require_sums("lassq_merge", R, 2)
    require_sums("lassq_merge", S, 2)
    merge_sums_of_squares(np, R, S)


def amax(A: np.ndarray, S: np.ndarray) -> None:
    """S[0, 0] <- max(S[0, 0], max |a_ij|); a NaN in A makes it NaN.

    Merging partial results is amax again (they are >= 0): the max norm over tiles.
    """
    lda = _ld(A, "amax: A")
    _ld(S, "amax: S", writable=True)
    require_sums("amax", S, 1)
    m, n = A.shape
    if m and n:
        S[0, 0] = np.maximum(S[0, 0], blas.dlange("M", m, n, A, lda, _work(1)))


def asum(A: np.ndarray, S: np.ndarray, trans: str = "N") -> None:
    """S[0, j] += Σ_i |op(A)_ij| for each column j of op(A): A's column sums (trans 'N') or row sums ('T').

    Summed over a tile column (row) into one S, then the largest by :func:`amax`: the
    one-norm (infinity norm) over tiles.
    """
    _ld(A, "asum: A")
    _ld(S, "asum: S", writable=True)
    check_option("asum", "trans", trans, "NT")
    m, n = A.shape
    count = n if trans == "N" else m
    require_sums("asum", S, count)
    if m and n:
        add_absolute_sums(np, A, S, trans)


_KERNELS = {
    "gemm": gemm, "symm": symm, "syrk": syrk, "syr2k": syr2k, "trsm": trsm, "trmm": trmm,
    "potrf": potrf, "trtri": trtri, "lauum": lauum,
    "getrf_nopiv": getrf_nopiv, "trsm_l": trsm_l, "trsm_u": trsm_u, "gemm_nn": gemm_nn,
    "getrf": getrf, "laswp": laswp,
    "geqrt": geqrt, "gemqrt": gemqrt, "tpqrt": tpqrt, "tpmqrt": tpmqrt, "ttqrt": ttqrt, "ttmqrt": ttmqrt,
    "lassq": lassq, "lassq_merge": lassq_merge, "amax": amax, "asum": asum,
}

#: The kernels that take a column panel as its list of tiles: laswp swaps only the rows it
#: touches when they are apart (:func:`_laswp_compact`), cheaper than gathering them all.
TAKE_COLUMN_LISTS = frozenset({"laswp"})

CPU_KERNELS = {name: taking_matrices(kernel, name in TAKE_COLUMN_LISTS) for name, kernel in _KERNELS.items()}
