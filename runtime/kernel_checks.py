"""What the CPU and GPU tile kernels share, so that both accept the same arguments and fail alike.

:mod:`.kernels` (numpy tiles) and :mod:`.gpu_kernels` (CuPy tiles) check each kernel's options and
shapes here and raise the same messages (ValueError for a caller's mistake, KernelError for a
numerical failure); the few steps that both take on their tiles (recording pivots, the norms'
accumulators, C <- beta·C) take the array module ``xp`` so that they give the same results on either.
"""
from __future__ import annotations

import numbers

import numpy as np

from .errors import KernelError
from .notes import note, on_whole_tiles

SAFE_MINIMUM = np.finfo(np.float64).tiny  # LAPACK's dlamch('S'): 1/x does not overflow
DOUBLE = np.dtype(np.float64).itemsize  # bytes of a float64: the unit of BLAS strides


def leading_dimension(a) -> int | None:
    """The leading dimension of a column-major 2-D float64 view (numpy or CuPy), None if it has none."""
    rows, cols = a.shape
    if a.size == 0:
        return max(1, rows)  # numpy gives empty arrays arbitrary strides; never used
    # a stride along an extent of 1 is never used, so it may be anything
    col_stride = a.strides[1] if cols > 1 else DOUBLE * rows
    if (rows > 1 and a.strides[0] != DOUBLE) or col_stride % DOUBLE or col_stride < DOUBLE * rows:
        return None
    return col_stride // DOUBLE


def check_option(kernel: str, name: str, value, allowed: str) -> None:
    """``value`` must be one of the characters of ``allowed`` (a char parameter)."""
    if not (isinstance(value, str) and len(value) == 1 and value in allowed):
        choices = ", ".join(f'"{c}"' for c in allowed)  # as the language writes a char
        got = f'"{value}"' if isinstance(value, str) else repr(value)
        raise ValueError(f"{kernel}: {name} must be one of {choices}, got {got}")


def check_number(kernel: str, name: str, value) -> float:
    """``value`` as a float (a float parameter); ValueError unless it is a real number."""
    if type(value) is float:  # the usual case, and the fast one: kernels are called thousands of times
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{kernel}: {name} must be a number, got {value!r}")
    return float(value)


def require_triangle(kernel: str, name: str, tri, k: int, other_name: str, other) -> None:
    """``tri`` must hold a k×k triangle for ``other``: its top-left block. One taller than k (a hybrid tiling's
    diagonal tile, a tall panel) is as meant, and so is one wider too for a sub-range of a tile (the first rows
    of a forward substitution); on whole tiles that is noted (:func:`.notes.note`): it is the tile of another
    row or column than meant, or the triangle of the other side, and the result is no error."""
    if tri.shape[0] < k or tri.shape[1] < k:
        raise ValueError(f"{kernel}: {name} of shape {tri.shape} has no {k}x{k} triangle "
                         f"for {other_name} of shape {other.shape}")
    if tri.shape[1] > k and tri.shape[0] > k and on_whole_tiles():
        note(f"{name} is {tri.shape[0]}x{tri.shape[1]}, larger than {other_name} ({other.shape[0]}x{other.shape[1]}) "
             f"needs: its top-left {k}x{k} triangle was used (a tile of another row or column than meant, or the "
             f"other side, does that)")


def require_square(kernel: str, A) -> int:
    """The order of square tile ``A``."""
    require(A.shape[0] == A.shape[1], f"{kernel}: A is {A.shape[0]}x{A.shape[1]}; it must be square")
    return A.shape[0]


def gemm_dims(kernel: str, A, B, C, transa: str, transb: str) -> tuple[int, int, int]:
    """(m, n, k) of C (m×n) = op(A) (m×k) · op(B) (k×n)."""
    check_option(kernel, "transa", transa, "NT")
    check_option(kernel, "transb", transb, "NT")
    m, k = A.shape if transa == "N" else A.shape[::-1]
    k_b, n = B.shape if transb == "N" else B.shape[::-1]
    if k_b != k or C.shape != (m, n):
        raise ValueError(f"{kernel}: shapes A {A.shape}, B {B.shape}, C {C.shape} do not conform "
                         f"(transa {transa!r}, transb {transb!r})")
    return m, n, k


def symm_dims(A, B, C, side: str, uplo: str) -> tuple[int, int]:
    """(m, n) of C for symm; A holds the symmetric m×m (side 'L') or n×n (side 'R') block."""
    check_option("symm", "side", side, "LR")
    check_option("symm", "uplo", uplo, "LU")
    require(B.shape == C.shape, f"symm: B of shape {B.shape} does not match C of shape {C.shape}")
    m, n = C.shape
    require_triangle("symm", "A", A, m if side == "L" else n, "C", C)
    return m, n


def rank_k_dims(kernel: str, A, B, C, uplo: str, trans: str) -> tuple[int, int]:
    """(n, k) of a rank-k update of C (n×n) by op(A) (n×k), and op(B) for syr2k."""
    check_option(kernel, "uplo", uplo, "LU")
    check_option(kernel, "trans", trans, "NT")
    n, k = A.shape if trans == "N" else A.shape[::-1]
    if C.shape != (n, n):
        raise ValueError(f"{kernel}: C of shape {C.shape} does not match A of shape {A.shape} (trans {trans!r})")
    if B.shape != A.shape:
        raise ValueError(f"{kernel}: B of shape {B.shape} does not match A of shape {A.shape}")
    return n, k


def triangular_dims(kernel: str, A, B, side: str, uplo: str, transa: str, diag: str,
                    a_name: str = "A") -> tuple[int, int]:
    """(m, n) of B for trsm/trmm; the triangle is A's top-left block of B's matching order."""
    check_option(kernel, "side", side, "LR")
    check_option(kernel, "uplo", uplo, "LU")
    check_option(kernel, "transa", transa, "NT")
    check_option(kernel, "diag", diag, "NU")
    m, n = B.shape
    require_triangle(kernel, a_name, A, m if side == "L" else n, "B", B)
    return m, n


def potrf_dims(A, uplo: str) -> tuple[int, int]:
    """(m, n) of potrf's tile: lower, m >= n (the rows below are solved); upper, square."""
    check_option("potrf", "uplo", uplo, "LU")
    m, n = A.shape
    if uplo == "U":
        require(m == n, f"potrf: A is {m}x{n}; uplo 'U' needs it square")
    require(m >= n, f"potrf: A is {m}x{n}; it needs at least as many rows as columns")
    return m, n


def not_positive_definite(info: int, n: int, nan: bool = False) -> KernelError:
    """``nan``: the failed minor's diagonal entry is NaN, which the tile held or was computed from."""
    said = "is NaN: the tile holds a NaN" if nan else "is not positive"
    return KernelError(f"matrix is not positive definite (leading minor {info} of {n} {said})")


def singular_triangle(info: int) -> KernelError:
    return KernelError(f"trtri: the triangle is singular (entry ({info - 1}, {info - 1}) of the matrix it was "
                       f"given is exactly 0)")


def getrf_dims(A, P) -> tuple[int, int, int]:
    """(m, n, k = min(m, n)) of A; P must hold k pivots in its first row."""
    m, n = A.shape
    k = min(m, n)
    require(P.shape[1] >= k and (P.shape[0] >= 1 or P.shape[1] == 0),
            f"getrf: P of shape {P.shape} cannot hold the {k} pivots of a {m}x{n} panel (1x{k} at least)")
    return m, n, k


def record_pivots(xp, P, ipiv, k: int) -> None:
    """P[0, :k] <- LAPACK's 1-based ``ipiv`` − 1; P[0, k:] <- their own indices (no interchange)."""
    if P.shape[0]:
        if k:
            P[0, :k] = ipiv[:k] - 1
        P[0, k:] = xp.arange(k, P.shape[1])


def laswp_range(P, rows: int, first, direction: str) -> tuple[int, int]:
    """The interchanges laswp applies: (first, end) of the entries of P[0, :]."""
    check_option("laswp", "direction", direction, "FB")
    require(isinstance(first, numbers.Integral) and not isinstance(first, bool) and first >= 0,
            f"laswp: first must be an integer >= 0, got {first!r}")
    width = P.shape[1] if P.shape[0] else 0
    return min(int(first), width), min(width, rows)


def qr_apply_dims(kernel: str, V, T, C, side: str, trans: str) -> tuple[int, int]:
    """(k, nb) of gemqrt/tpmqrt/ttmqrt: k reflectors (gemqrt: min(rows, cols) of V, below its
    diagonal; tpmqrt and ttmqrt: a column of V each) applied to C's rows (side 'L') or columns (side 'R'), which
    must be as many as V's rows."""
    check_option(kernel, "side", side, "LR")
    check_option(kernel, "trans", trans, "NT")
    q = V.shape[0]
    require(C.shape[0 if side == "L" else 1] == q,
            f"{kernel}: C{'' if kernel == 'gemqrt' else '2'} of shape {C.shape} does not match V of shape {V.shape} "
            f"(side {side!r})")
    k = min(V.shape) if kernel == "gemqrt" else V.shape[1]
    return k, inner_block(T, k, kernel)


def require_tpmqrt(V, C1, C2, side: str, kernel: str = "tpmqrt") -> None:
    """C1 holds the k rows (side 'L') or columns (side 'R') that pair with C2's, k = V's columns."""
    k = V.shape[1]
    fits = (C1.shape[0] >= k and C1.shape[1] == C2.shape[1] if side == "L"
            else C1.shape[1] >= k and C1.shape[0] == C2.shape[0])
    require(fits, f"{kernel}: shapes V {V.shape}, C1 {C1.shape}, C2 {C2.shape} do not conform (side {side!r})")


def require_sums(kernel: str, S, width: int) -> None:
    """S must hold ``width`` accumulators in its first row."""
    require(S.shape[0] >= 1 and S.shape[1] >= width,
            f"{kernel}: S of shape {S.shape} cannot hold {width} value{'' if width == 1 else 's'} "
            f"(1x{width} at least)")


def add_absolute_sums(xp, A, S, trans: str) -> None:
    """S[0, :count] += A's column sums of |a_ij| (trans 'N') or its row sums ('T').

    numpy's sums (pairwise, in an order fixed by the shape) give the same bits wherever
    the tile lies in memory; BLAS's dasum does not (its vector loops start on aligned
    addresses, so a column's sum moved with its offset in a stacked panel).
    """
    sums = xp.abs(A).sum(axis=0 if trans == "N" else 1)
    S[0, :sums.shape[0]] += sums


def add_to_sum_of_squares(xp, S, x) -> None:
    """(S[0,0], S[0,1]) = (scale, sumsq) <- the pair for scale²·sumsq + x², x >= 0 (LAPACK's DLASSQ
    update: the larger of scale and x becomes the scale, so nothing is squared that could overflow).

    A NaN in x or in S stays a NaN. Works on numpy and CuPy tiles alike (no host round trip).
    """
    scale, sumsq = S[0, 0], S[0, 1]
    big, small = xp.maximum(scale, x), xp.minimum(scale, x)
    ratio = xp.where(big > 0, small / xp.where(big > 0, big, 1.0), small)  # small is 0 or NaN
    S[0, 1] = xp.where(x > scale, 1.0 + sumsq * ratio * ratio, sumsq + ratio * ratio)
    S[0, 0] = big


def merge_sums_of_squares(xp, R, S) -> None:
    """S <- the (scale, sumsq) pair of both pairs' sums: R's sum enters as its norm, which is
    finite whenever the total is."""
    add_to_sum_of_squares(xp, S, R[0, 0] * xp.sqrt(R[0, 1]))


def require(condition: bool, message: str) -> None:
    """Raise ValueError(message) unless ``condition`` (a shape mismatch is a caller bug).

    The checks on the BLAS-3 kernels' path raise directly instead: formatting a message
    that is not needed costs as much as the rest of a small kernel's Python.
    """
    if not condition:
        raise ValueError(message)


def inner_block(T: np.ndarray, k: int, kernel: str) -> int:
    """The inner block size nb = min(ib, k) for k reflectors with T of shape (ib, >= k)."""
    ib, cols = T.shape
    require(cols >= k and (ib >= 1 or k == 0),
            f"{kernel}: T of shape {T.shape} cannot hold the factors of {k} reflectors")
    return min(ib, k)


def scale_by(C, beta: float) -> None:
    """C <- beta·C (a numpy or CuPy array), a beta of 0 giving zeros whatever C held (as BLAS)."""
    if beta == 0.0:
        C[...] = 0.0
    elif beta != 1.0:
        C *= beta
