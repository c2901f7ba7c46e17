"""The prelude kernels on GPU tiles (:class:`TileKernels`), which :class:`.cupy_backend.CupyBackend` launches.

They have the names and semantics of :data:`.kernels.CPU_KERNELS` and work in place on
views, because tiles move between CPU and GPU workers in the middle of a factorization:

* BLAS-3 kernels, Cholesky, trtri and lauum are single cuBLAS/cuSOLVER calls on the
  views (:class:`.cublas_ops.CublasOps`);
* LU with partial pivoting (getrf) is cuSOLVER's getrf on the panel stacked into one
  matrix; laswp lets cuSOLVER's laswp permute the row numbers, then moves the
  panel's rows in one gather (or scatter, backward);
* the norm kernels are array expressions (no host round trip);
* LU without pivoting is cuSOLVER's getrf given no pivot array, checked by one host round
  trip; a zero, subnormal or NaN pivot makes it eliminate again, blocked right-looking as the
  CPU kernel does (a panel of :data:`LU_PANEL` columns column by column, a division and a
  ``dger`` each, then ``dtrsm`` and ``dgemm`` on the rest), so that it fails and names the
  pivot alike;
* QR runs on the GPU alone (no host round trip, no synchronization): cuSOLVER's
  geqrf factors the whole tile (geqrt), or the dense stack of the triangle on the
  tile (tpqrt: under a triangle each reflector's top part stays exactly e_j) or on
  the tile's upper trapezoid (ttqrt: below the trapezoid each reflector's bottom part
  stays exactly zero too), which gives DGEQRT's and DTPQRT's reflectors, hence their
  V and R. Each T block of ``ib`` reflectors is then built from V and the scalars tau by
  T⁻¹ = diag(1/tau) + strict_upper(VᵀV) (Joffrain et al., 2006): a GEMM and a TRSM
  on the identity per block, with tau = 0 (H_j = I) handled by elementwise masks.
  V, R and T thus mean what LAPACK's do, so a tile can go on to a CPU worker in the
  middle of a factorization. Q is applied by GEMMs, as DLARFB/DTPRFB do (gemqrt,
  tpmqrt; ttmqrt on a dense copy of V's trapezoid), a group of :data:`APPLY_WIDTH`
  reflectors at a time: narrower T blocks are merged by the same formula, tau being
  T's diagonal.

The array module and the BLAS calls are arguments, so the tests also run these kernels on
numpy arrays, with the host BLAS/LAPACK standing in for cuBLAS/cuSOLVER.
"""
from __future__ import annotations

import numpy as np

from .cublas_ops import CublasOps
from .errors import KernelError
from .kernel_checks import (SAFE_MINIMUM, add_absolute_sums, add_to_sum_of_squares, check_number, check_option,
                            gemm_dims, getrf_dims, inner_block, laswp_range, merge_sums_of_squares,
                            not_positive_definite, potrf_dims, qr_apply_dims, rank_k_dims, record_pivots,
                            require_square, require_sums, require_tpmqrt, require_triangle, scale_by,
                            singular_triangle, symm_dims, triangular_dims)
from .panels import Panel, taking_matrices

#: Columns of an LU panel eliminated one at a time before a BLAS-3 update.
LU_PANEL = 32
#: Reflectors gemqrt, tpmqrt and ttmqrt apply at once: narrower T blocks (small ib) are merged up to this
#: width, since each block costs several launches and a narrow GEMM (H100, n = 16384, nb = 2048:
#: ib = 64 took 2.45 s, ib = 512 0.73 s)
APPLY_WIDTH = 512


class TileKernels:
    """The prelude kernels on device tiles: same names, arguments and results as :mod:`.kernels`.

    ``xp`` is the array module of the tiles (CuPy), ``ops`` a :class:`CublasOps`.
    Every kernel works in place on views; a zero dimension makes it a no-op. The
    argument checks are the CPU kernels' own (:mod:`.kernel_checks`).
    """

    #: argument shapes of each kernel for :meth:`warm_up` (a list: a panel): tiny, but through every code path
    WARM_UP_SHAPES = {
        "gemm": ((3, 2), (2, 2), (3, 2)), "symm": ((3, 3), (3, 2), (3, 2)), "syrk": ((2, 2), (2, 2)),
        "syr2k": ((2, 2), (2, 2), (2, 2)), "trsm": ((2, 2), (3, 2)), "trmm": ((3, 3), (3, 2)),
        "potrf": ((3, 2),), "trtri": ((2, 2),), "lauum": ((2, 2),),
        "getrf_nopiv": ((3, 3),), "trsm_l": ((2, 2), (2, 3)), "trsm_u": ((2, 2), (3, 2)),
        "gemm_nn": ((3, 2), (2, 2), (3, 2)), "getrf": ([(2, 2), (1, 2)], (1, 2)), "laswp": ((1, 2), [(2, 2), (1, 2)]),
        "geqrt": ((4, 3), (2, 3)), "gemqrt": ((4, 3), (2, 3), (4, 2)),
        "tpqrt": ((3, 3), (4, 3), (2, 3)), "tpmqrt": ((4, 3), (2, 3), (3, 2), (4, 2)),
        "ttqrt": ((3, 3), (4, 3), (2, 3)), "ttmqrt": ((4, 3), (2, 3), (3, 2), (4, 2)),
        "lassq": ((2, 2), (1, 2)), "lassq_merge": ((1, 2), (1, 2)), "amax": ((2, 2), (1, 1)), "asum": ((2, 2), (1, 2)),
    }

    def __init__(self, xp, ops: CublasOps):
        self.xp, self.ops = xp, ops

    def warm_up(self, names) -> None:
        """Run each kernel of ``names`` once as the runtime calls it (a panel gathered) on identity
        tiles of :data:`WARM_UP_SHAPES` (on the current device)."""
        for name in names:
            taking_matrices(getattr(self, name))(*(self._identity(shape) for shape in self.WARM_UP_SHAPES[name]))

    def _identity(self, shape):
        if isinstance(shape, list):
            return Panel([self._identity(s) for s in shape], 0, True)
        return self.xp.asfortranarray(self.xp.eye(*shape))

    # ---------------------------------------------------------------- BLAS-3
    def gemm(self, A, B, C, transa: str = "N", transb: str = "T", alpha: float = -1.0, beta: float = 1.0) -> None:
        """C (m×n) <- alpha·op(A)·op(B) + beta·C; the defaults give C − A·Bᵀ (A and B may overlap)."""
        self._gemm("gemm", A, B, C, transa, transb, alpha, beta)

    def gemm_nn(self, A, B, C) -> None:
        """C (m×n) <- C − A·B with A m×k and B k×n."""
        self._gemm("gemm_nn", A, B, C, "N", "N", -1.0, 1.0)

    def _gemm(self, kernel: str, A, B, C, transa: str, transb: str, alpha, beta) -> None:
        m, n, k = gemm_dims(kernel, A, B, C, transa, transb)
        alpha, beta = check_number(kernel, "alpha", alpha), check_number(kernel, "beta", beta)
        if alpha == 0.0:  # A and B not read, as on the host (kernels._gemm)
            scale_by(C, beta)
        elif m and n and (k or beta != 1.0):
            self.ops.gemm(transa, transb, alpha, A, B, beta, C)

    def symm(self, A, B, C, side: str = "L", uplo: str = "L", alpha: float = 1.0, beta: float = 1.0) -> None:
        """C (m×n) <- alpha·A·B + beta·C (side 'L') or alpha·B·A + beta·C ('R'), A symmetric."""
        m, n = symm_dims(A, B, C, side, uplo)
        alpha, beta = check_number("symm", "alpha", alpha), check_number("symm", "beta", beta)
        order = m if side == "L" else n
        if m and n:
            self.ops.symm(side, uplo, alpha, A[:order, :order], B, beta, C)

    def syrk(self, A, C, uplo: str = "L", trans: str = "N", alpha: float = -1.0, beta: float = 1.0) -> None:
        """C (n×n) <- alpha·op(A)·op(A)ᵀ + beta·C on the ``uplo`` triangle (defaults: C − A·Aᵀ, lower)."""
        n, k = rank_k_dims("syrk", A, A, C, uplo, trans)
        alpha, beta = check_number("syrk", "alpha", alpha), check_number("syrk", "beta", beta)
        if n and (k or beta != 1.0):
            self.ops.syrk(uplo, trans, alpha, A, beta, C)

    def syr2k(self, A, B, C, uplo: str = "L", trans: str = "N", alpha: float = -1.0, beta: float = 1.0) -> None:
        """C (n×n) <- alpha·(op(A)·op(B)ᵀ + op(B)·op(A)ᵀ) + beta·C on the ``uplo`` triangle."""
        n, k = rank_k_dims("syr2k", A, B, C, uplo, trans)
        alpha, beta = check_number("syr2k", "alpha", alpha), check_number("syr2k", "beta", beta)
        if n and (k or beta != 1.0):
            self.ops.syr2k(uplo, trans, alpha, A, B, beta, C)

    def trsm(self, A, B, side: str = "R", uplo: str = "L", transa: str = "T", diag: str = "N",
             alpha: float = 1.0) -> None:
        """B <- alpha·op(A)⁻¹·B (side 'L') or alpha·B·op(A)⁻¹ ('R'), A's top-left triangle (defaults: B·L⁻ᵀ)."""
        self._triangular("trsm", self.ops.trsm, A, B, side, uplo, transa, diag, alpha)

    def trmm(self, A, B, side: str = "L", uplo: str = "L", transa: str = "N", diag: str = "N",
             alpha: float = 1.0) -> None:
        """B <- alpha·op(A)·B (side 'L') or alpha·B·op(A) ('R'), A's top-left triangle."""
        self._triangular("trmm", self.ops.trmm, A, B, side, uplo, transa, diag, alpha)

    def trsm_l(self, LU, B) -> None:
        """B (k×n) <- L⁻¹·B with L the unit lower triangle of the top-left k×k block of LU."""
        self._triangular("trsm_l", self.ops.trsm, LU, B, "L", "L", "N", "U", 1.0, "LU")

    def trsm_u(self, LU, B) -> None:
        """B (m×k) <- B·U⁻¹ with U the non-unit upper triangle of the top-left k×k block of LU."""
        self._triangular("trsm_u", self.ops.trsm, LU, B, "R", "U", "N", "N", 1.0, "LU")

    def _triangular(self, kernel: str, routine, A, B, side, uplo, transa, diag, alpha, a_name: str = "A") -> None:
        m, n = triangular_dims(kernel, A, B, side, uplo, transa, diag, a_name)
        alpha = check_number(kernel, "alpha", alpha)
        order = m if side == "L" else n
        if alpha == 0.0:  # zeros, the triangle not read (BLAS)
            B[...] = 0.0
        elif m and n:
            routine(side, uplo, transa, diag, alpha, A[:order, :order], B)

    # ---------------------------------------------------------------- Cholesky, inverses
    def potrf(self, A, uplo: str = "L") -> None:
        """Cholesky factor in place: lower, of a tall tile (A[:n,:n] <- L11, then A[n:,:] <- A[n:,:]·L11⁻ᵀ);
        upper, of a square tile (A <- U). The other strict triangle is left untouched.
        Raises KernelError if A[:n,:n] is not positive definite.
        """
        m, n = potrf_dims(A, uplo)
        if n == 0:
            return
        info = self.ops.potrf(A[:n, :n], uplo)
        # one wait for the GPU: cuSOLVER's info, the first diagonal entry that is not positive
        # (LAPACK reports a NaN on the diagonal as a failed minor; so do we, should cuSOLVER not),
        # and whether that entry is NaN
        diagonal = self.xp.diagonal(A[:n, :n])
        bad = ~(diagonal > 0)
        first_bad = self.xp.argmax(bad)
        status = self.ops.fetch(self.xp.stack([info[0], self.xp.where(bad.any(), first_bad + 1, 0).astype(np.int32),
                                               self.xp.isnan(diagonal[first_bad]).astype(np.int32)]))
        info, first, nan = int(status[0]), int(status[1]), bool(status[2])
        if info or first:
            raise not_positive_definite(info or first, n, nan and (info or first) == first)
        self.trsm(A[:n, :], A[n:, :])

    def trtri(self, A, uplo: str = "L", diag: str = "N") -> None:
        """A (n×n) <- the inverse of its ``uplo`` triangle in place; KernelError on an exactly zero diagonal."""
        check_option("trtri", "uplo", uplo, "LU")
        check_option("trtri", "diag", diag, "NU")
        if require_square("trtri", A):
            info = self.ops.trtri(A, uplo, diag)
            if info > 0:
                raise singular_triangle(info)

    def lauum(self, A, uplo: str = "L") -> None:
        """A (n×n) <- Lᵀ·L (lower) or U·Uᵀ (upper) of its ``uplo`` triangle, in place."""
        check_option("lauum", "uplo", uplo, "LU")
        if require_square("lauum", A):
            self.ops.lauum(A, uplo)

    # ---------------------------------------------------------------- LU
    def getrf_nopiv(self, A) -> None:
        """LU without pivoting in place: A (m×n) <- L\\U, L unit lower, U upper, min(m,n) steps.

        Raises KernelError on an exactly zero pivot, naming its position as the CPU
        kernel does: the first zero on U's diagonal is where elimination met it, since
        a diagonal entry is final once its step is done.
        """
        m, n = A.shape
        k = min(m, n)
        if k == 0:
            return
        saved = A.copy(order="F")
        _, info = self.ops.getrf(A, pivoting=False)
        # one wait for the GPU: cuSOLVER's info, and the smallest pivot (its inverse may overflow)
        smallest = self.xp.abs(self.xp.diagonal(A)).min()
        status = self.ops.fetch(self.xp.stack([info[0].astype(np.float64), smallest]))
        if status[0] == 0 and status[1] >= SAFE_MINIMUM:
            return
        # a zero, subnormal or NaN pivot: eliminate again as the CPU kernel does, to name it alike
        A[...] = saved
        for j in range(0, k, LU_PANEL):
            width = min(LU_PANEL, k - j)
            end = j + width
            self._lu_panel(A[j:, j:end])
            if end < n:
                self.trsm_l(A[j:end, j:end], A[j:end, end:])
                if end < m:
                    self.gemm_nn(A[end:, j:end], A[j:end, end:], A[end:, end:])
        diagonal = self.ops.fetch(self.xp.diagonal(A))
        zeros = np.flatnonzero(diagonal == 0)
        if zeros.size:
            position = int(zeros[0])
            raise KernelError(f"zero pivot in LU without pivoting "
                              f"(U({position}, {position}) of the matrix it was given is exactly 0)")

    def _lu_panel(self, P) -> None:
        """Eliminate the columns of a panel (at least as many rows as columns), one at a time.

        Division by the pivot rather than multiplication by its inverse: no overflow for
        a subnormal pivot, and no host round trip to test it.
        """
        rows, width = P.shape
        for j in range(width):
            column = P[j + 1:, j]
            if column.size == 0:
                break
            column /= P[j, j]
            if j + 1 < width:
                self.ops.ger(-1.0, column, P[j, j + 1:], P[j + 1:, j + 1:])

    def getrf(self, A, P) -> None:
        """LU with partial pivoting of a tile or a panel (tiles stacked), as :func:`.kernels.getrf`:
        cuSOLVER's getrf on the stacked matrix; no host round trip (a singular panel is no error)."""
        m, n, k = getrf_dims(A, P)
        record_pivots(self.xp, P, self.ops.getrf(A)[0] if k else None, k)

    def laswp(self, P, A, first: int = 0, direction: str = "F") -> None:
        """getrf's row interchanges applied to a tile or a panel, as :func:`.kernels.laswp`.

        cuSOLVER's laswp applies them, forward, to the row numbers 0..m−1; the panel's rows
        are then gathered in that order (forward) or scattered to it (backward, the
        inverse). Reading P to check it would wait for the GPU: an entry that is not a row
        of the panel is no interchange (never a write out of bounds), and A[0, 0] becomes
        a NaN, so that the run fails (or stops at the task, with --check-finite).
        """
        rows = A.shape[0]
        start, end = laswp_range(P, rows, first, direction)
        if end <= start or not A.shape[1]:
            return
        xp = self.xp
        rows_named = P[0, :end]
        valid = (rows_named >= 0) & (rows_named < rows) & (rows_named == xp.floor(rows_named))
        pivots = xp.where(valid, rows_named, xp.arange(end)) + 1
        A[0, 0] = xp.where(valid[start:].all(), A[0, 0], np.nan)
        order = xp.arange(rows, dtype=np.float64).reshape((rows, 1))
        self.ops.laswp(order, start + 1, end, pivots.astype(np.int32))
        source = order[:, 0].astype(np.int64)
        if direction == "F":
            A[...] = A[source]
        else:
            A[source] = A.copy()

    # ---------------------------------------------------------------- QR
    def geqrt(self, A, T) -> None:
        """Blocked QR of a tile (LAPACK DGEQRT): A (m×n) <- V\\R, T <- block reflector factors.

        cuSOLVER's geqrf factors the whole tile at once: its reflectors are DGEQRT's (the
        same Householder vectors, made the same way, in the same order), so V and R are
        too. Each nb×nb upper triangular factor T[:nb, i:i+nb], nb = min(T.shape[0], k)
        with k = min(m, n), is then built from V and the reflectors' scalars
        (:meth:`_block_factors`); as in DGEQRT, nothing else of T is written.
        """
        m, n = A.shape
        k = min(m, n)
        nb = inner_block(T, k, "geqrt")
        if k == 0:
            return
        tau = self._scalars(k, nb)
        self.ops.geqrf(A, tau[:k])
        V = self._unit_lower(A[:, :k])
        self._block_factors(tau, k, T, lambda i, end: V[i:, i:end])

    def gemqrt(self, V, T, C, side: str = "L", trans: str = "T") -> None:
        """C <- op(Q)·C (side 'L') or C·op(Q) ('R'), Q from :meth:`geqrt` (LAPACK DGEMQRT).

        V is the tile geqrt factored (k = min of its dimensions reflectors), T its
        factors, with the same nb = min(T.shape[0], k); the defaults give Qᵀ·C.
        """
        k, nb = qr_apply_dims("gemqrt", V, T, C, side, trans)
        if not (k and C.size):
            return
        for i, end in _groups(k, nb, side, trans):
            reflectors = self._unit_lower(V[i:, i:end])
            factor = self._group_factor(T, nb, i, end, reflectors)
            self._larfb(side, trans, reflectors, factor, C[i:, :] if side == "L" else C[:, i:])

    def tpqrt(self, R, A, T) -> None:
        """QR of a triangle on top of a square tile (LAPACK DTPQRT with l=0).

        [R; A] = Q·[R'; 0]: R' overwrites the upper triangle of the top-left n×n block
        of R, A (m×n) is overwritten by the reflectors V, and T (ib, n) receives the
        factors in T[:nb, :n] with nb = min(ib, n). See :meth:`_stacked_qr`.
        """
        m, n = A.shape
        require_triangle("tpqrt", "R", R, n, "A", A)
        nb = inner_block(T, n, "tpqrt")
        if m and n:
            A[...] = self._stacked_qr(R[:n, :n], A, T, nb)

    def ttqrt(self, R, A, T) -> None:
        """QR of a triangle on top of a triangle (LAPACK DTPQRT with l = m), as :func:`.kernels.ttqrt`.

        The upper triangle of R's top-left n×n block and the upper trapezoid of A's first
        m = min(rows, n) rows (n = A's columns): R' overwrites R's triangle, the reflectors
        V A's trapezoid; both strict lower parts and A's rows past m are not touched, and
        T (ib, n) receives the factors in T[:nb, :n], nb = min(ib, n). The trapezoid is
        factored as a dense tile (:meth:`_stacked_qr`): below it, each reflector's part
        stays exactly zero, so V is DTPQRT's.
        """
        n = A.shape[1]
        m = min(A.shape[0], n)
        require_triangle("ttqrt", "R", R, n, "A", A)
        nb = inner_block(T, n, "ttqrt")
        if m and n:
            xp, block = self.xp, A[:m]
            V = self._stacked_qr(R[:n, :n], xp.triu(block), T, nb)
            block[...] = xp.where(xp.triu(xp.ones((m, n), dtype=bool)), V, block)

    def _stacked_qr(self, top, bottom, T, nb: int):
        """QR of the n×n triangle ``top`` on the dense m×n ``bottom`` (DTPQRT): R' into ``top``'s
        upper triangle, T's blocks of nb as in :meth:`geqrt`; returns V (m×n, a new array).

        cuSOLVER's geqrf factors the dense (n+m)×n stack of the triangle on ``bottom``: the
        part of the stack below the triangle stays exactly zero, so each reflector's top
        part is e_j and its bottom part, its scalar and R' are DTPQRT's.
        """
        xp = self.xp
        n, m = top.shape[0], bottom.shape[0]
        stack = xp.empty((n + m, n), order="F")
        stack[:n] = xp.triu(top)
        stack[n:] = bottom
        tau = self._scalars(n, nb)
        self.ops.geqrf(stack, tau[:n])
        # R' on the triangle only: below its diagonal is not the kernel's
        top[...] = xp.where(xp.triu(xp.ones((n, n), dtype=bool)), stack[:n], top)
        # [e_i..e_end-1; V] has Gram matrix I + VᵀV: the identity adds nothing above the diagonal
        self._block_factors(tau, n, T, lambda i, end: stack[n:, i:end], first_column=True)
        return stack[n:]

    def tpmqrt(self, V, T, C1, C2, side: str = "L", trans: str = "T") -> None:
        """Q from :meth:`tpqrt` applied to [C1[:k, :]; C2] from the left (side 'L') or to
        [C1[:, :k], C2] from the right ('R') (LAPACK DTPMQRT with l=0); the defaults give Qᵀ·[C1; C2]."""
        k, nb = qr_apply_dims("tpmqrt", V, T, C2, side, trans)
        require_tpmqrt(V, C1, C2, side)
        if k and C2.size:
            self._apply_stacked(V, T, nb, C1, C2, side, trans)

    def ttmqrt(self, V, T, C1, C2, side: str = "L", trans: str = "T") -> None:
        """Q from :meth:`ttqrt` applied to [C1[:k, :]; C2[:m, :]] from the left (side 'L') or to
        [C1[:, :k], C2[:, :m]] from the right ('R') (LAPACK DTPMQRT with l = m), m = min(V's rows, k);
        the defaults give Qᵀ·[C1; C2]. The reflectors are the upper trapezoid of V[:m], applied
        as :meth:`tpmqrt` applies a dense V; the rest of C1 and C2 is not touched."""
        k, nb = qr_apply_dims("ttmqrt", V, T, C2, side, trans)
        require_tpmqrt(V, C1, C2, side, "ttmqrt")
        m = min(V.shape[0], k)
        bottom = C2[:m, :] if side == "L" else C2[:, :m]
        if k and bottom.size:
            dense = self.xp.asfortranarray(self.xp.triu(V[:m]))  # zero below the trapezoid, for GEMMs
            self._apply_stacked(dense, T, nb, C1, bottom, side, trans)

    def _apply_stacked(self, V, T, nb: int, C1, C2, side: str, trans: str) -> None:
        """op(Q) of the k reflectors [e_j; V[:, j]] (V dense, k columns) applied to [C1[:k, :]; C2]
        (side 'L') or [C1[:, :k], C2] ('R'), a group of T's blocks at a time (DTPMQRT with l=0)."""
        for i, end in _groups(V.shape[1], nb, side, trans):
            # [e_i..e_end-1; V] has Gram matrix I + VᵀV: the identity adds nothing above the diagonal
            factor = self._group_factor(T, nb, i, end, V[:, i:end])
            self._tprfb(side, trans, V[:, i:end], factor, C1[i:end, :] if side == "L" else C1[:, i:end], C2)

    # ---------------------------------------------------------------- norms
    def lassq(self, A, S) -> None:
        """S[0, :2] = (scale, sumsq) <- the pair with A's entries added, as :func:`.kernels.lassq`.

        The tile's own norm, max|a|·‖A/max|a|‖_F, does not overflow unless the sum does.
        """
        require_sums("lassq", S, 2)
        if A.size:
            xp = self.xp
            magnitude = xp.abs(A)
            big = magnitude.max()
            scaled = magnitude / xp.where(big > 0, big, 1.0)
            # an infinite entry makes the norm infinite (inf/inf would make it NaN); a NaN stays
            norm = xp.where(big < np.inf, big * xp.sqrt((scaled * scaled).sum()), big)
            add_to_sum_of_squares(xp, S, norm)

    def lassq_merge(self, R, S) -> None:
        """S[0, :2] <- the (scale, sumsq) pair of the sums of the pairs R[0, :2] and S[0, :2]."""
        require_sums("lassq_merge", R, 2)
        require_sums("lassq_merge", S, 2)
        merge_sums_of_squares(self.xp, R, S)

    def amax(self, A, S) -> None:
        """S[0, 0] <- max(S[0, 0], max |a_ij|); a NaN in A makes it NaN."""
        require_sums("amax", S, 1)
        if A.size:
            S[0, 0] = self.xp.maximum(S[0, 0], self.xp.abs(A).max())

    def asum(self, A, S, trans: str = "N") -> None:
        """S[0, j] += Σ_i |op(A)_ij|: A's column sums (trans 'N') or row sums ('T')."""
        check_option("asum", "trans", trans, "NT")
        count = A.shape[1] if trans == "N" else A.shape[0]
        require_sums("asum", S, count)
        if A.size:
            add_absolute_sums(self.xp, A, S, trans)

    # ---------------------------------------------------------------- QR building blocks
    def _scalars(self, k: int, nb: int):
        """A zeroed vector for the scalars tau of k reflectors, padded to whole blocks of nb."""
        return self.xp.zeros(-(-k // nb) * nb)

    def _block_factors(self, tau, k: int, T, reflectors, first_column: bool = False) -> None:
        """T[:w, i:i+w] <- LAPACK's triangular factor of each block of reflectors i..i+w.

        Blocks of nb = min(T.shape[0], k) reflectors (the last one possibly narrower);
        ``tau`` holds the k scalars, padded with zeros to whole blocks (:meth:`_scalars`).
        With V_blk the block's unit lower columns from its first row,
        T⁻¹ = diag(1/tau) + strict_upper(V_blkᵀ·V_blk) (Joffrain et al., 2006): one GEMM
        per block for the product, of ``reflectors(i, end)`` (the rows of V[:, i:end]
        whose product has that strict upper part), then :meth:`_factors`. Only device
        operations: no host round trip, no synchronization.
        ``first_column``: see :meth:`_store_factors`.
        """
        nb = min(T.shape[0], k)
        starts = range(0, k, nb)
        gram = self.xp.zeros((nb, tau.size), order="F")
        for i in starts:
            end = min(i + nb, k)
            V = reflectors(i, end)
            self.ops.gemm("T", "N", 1.0, V, V, 0.0, gram[:end - i, i:end])
        self._store_factors(self._factors(gram, tau), k, T, first_column)

    def _factors(self, gram, tau):
        """The triangular factor of each nb×nb block of ``gram`` (nb × K, the blocks' Gram
        matrices) and ``tau`` (K scalars): the inverse of :meth:`_inverse_factors`, by one
        TRSM per block on the identity, with column j zero where tau_j = 0, as LAPACK has it.
        A narrower last block is padded with the identity: inverting nb×nb inverts its w×w.
        """
        nb, size = gram.shape
        inverse = self._inverse_factors(gram, tau)
        factors = self.xp.asfortranarray(self.xp.tile(self.xp.eye(nb), size // nb))
        for i in range(0, size, nb):
            self.ops.trsm("L", "U", "N", "N", 1.0, inverse[:, i:i + nb], factors[:, i:i + nb])
        factors *= tau != 0
        return factors

    def _store_factors(self, factors, k: int, T, first_column: bool) -> None:
        """T[:w, i:i+w] <- the upper triangle of each block of ``factors`` (nb × padded k).

        As in LAPACK, T below each block's diagonal is not written, except with
        ``first_column``, where the first column of each block is zero there as
        DTPQRT leaves it (DTPQRT2 keeps the scalars tau in it, then zeroes them).
        """
        xp = self.xp
        nb, size = factors.shape
        written = xp.triu(xp.ones((nb, nb), dtype=bool))
        if first_column:
            written[:, 0] = True
        written = xp.tile(written, size // nb)
        whole = k - k % nb
        # the whole blocks at once, then the narrower last one (an empty range does nothing)
        for rows, cols in ((nb, slice(0, whole)), (k - whole, slice(whole, k))):
            T[:rows, cols] = xp.where(written[:rows, cols], factors[:rows, cols], T[:rows, cols])

    def _inverse_factors(self, gram, tau):
        """The inverses of the T blocks: diag(1/tau) + strict_upper(gram) per nb×nb block of gram (nb×K).

        tau_j = 0 means H_j = I (DLARFG gives it when the column below the diagonal is
        exactly zero), and LAPACK's T then has row and column j zero: the factor of the
        other reflectors. So 1/tau_j is replaced by 1 and row j of the strict upper part
        zeroed (it is zero already when v_j is zero below its 1, as in LAPACK): row j of
        the inverse is then zero, so that column j of this matrix reaches no other column
        of it, and :meth:`_factors` zeroes column j. All blocks at once, through an
        (nb, nb, blocks) view: no host test.
        """
        xp = self.xp
        nb, size = gram.shape
        blocks = size // nb
        scalars = tau.reshape((nb, blocks), order="F")  # [r, b]: reflector b·nb + r
        kept = scalars != 0
        strict = xp.triu(xp.ones((nb, nb), dtype=bool), 1)[:, :, None] & kept[:, None, :]
        diagonal = xp.eye(nb)[:, :, None] / xp.where(kept, scalars, 1.0)[None, :, :]
        inverse = xp.where(strict, gram.reshape((nb, nb, blocks), order="F"), 0.0) + diagonal
        return xp.asfortranarray(inverse).reshape((nb, size), order="F")

    def _group_factor(self, T, nb: int, i: int, end: int, reflectors):
        """The triangular factor of reflectors i..end, a group of whole nb-wide blocks of T.

        A single block's factor is T's own. Wider groups are merged (a GPU applies a few
        wide blocks far faster than many narrow ones): LAPACK's T has the scalars tau on
        its diagonal, so the group's factor follows from them and the strict upper part
        of ``reflectors``ᵀ·``reflectors`` as in :meth:`_block_factors`.
        """
        width = end - i
        if width <= nb:
            return T[:width, i:end]
        columns = self.xp.arange(i, end)
        gram = self.xp.empty((width, width), order="F")
        self.ops.gemm("T", "N", 1.0, reflectors, reflectors, 0.0, gram)
        return self._factors(gram, T[columns % nb, columns])

    def _unit_lower(self, panel):
        """V of a factored panel as a dense matrix: ones on the diagonal, zeros above."""
        width = panel.shape[1]
        V = self.xp.array(panel, order="F")
        top = V[:width]
        top[...] = self.xp.tril(top, -1) + self.xp.eye(width)
        return V

    def _times_triangle(self, side: str, trans: str, T, W):
        """op(triu(T))·W (side 'L') or W·op(triu(T)) (side 'R'), op from ``trans``, as a new array."""
        result = self.xp.empty(W.shape, order="F")
        if side == "L":
            self.ops.gemm(trans, "N", 1.0, self.xp.triu(T), W, 0.0, result)
        else:
            self.ops.gemm("N", trans, 1.0, W, self.xp.triu(T), 0.0, result)
        return result

    def _larfb(self, side: str, trans: str, V, T, C) -> None:
        """C <- op(I − V·T·Vᵀ)·C (side 'L') or C·op(I − V·T·Vᵀ) ('R') (DLARFB, forward, columnwise)."""
        if side == "L":
            W = self.xp.empty((T.shape[0], C.shape[1]), order="F")
            self.ops.gemm("T", "N", 1.0, V, C, 0.0, W)               # W = Vᵀ·C
            W = self._times_triangle(side, trans, T, W)                # W = op(T)·W
            self.ops.gemm("N", "N", -1.0, V, W, 1.0, C)                # C = C − V·W
        else:
            W = self.xp.empty((C.shape[0], T.shape[0]), order="F")
            self.ops.gemm("N", "N", 1.0, C, V, 0.0, W)                 # W = C·V
            W = self._times_triangle(side, trans, T, W)                # W = W·op(T)
            self.ops.gemm("N", "T", -1.0, W, V, 1.0, C)                # C = C − W·Vᵀ

    def _tprfb(self, side: str, trans: str, V, T, top, bottom) -> None:
        """op(Q_b) = op(I − [I; V]·T·[I; V]ᵀ) applied to [top; bottom] from the left (side 'L')
        or to [top, bottom] from the right ('R') (LAPACK DTPRFB with l=0)."""
        W = self.xp.array(top, order="F")
        if side == "L":
            self.ops.gemm("T", "N", 1.0, V, bottom, 1.0, W)          # W = top + Vᵀ·bottom
        else:
            self.ops.gemm("N", "N", 1.0, bottom, V, 1.0, W)          # W = top + bottom·V
        W = self._times_triangle(side, trans, T, W)                   # W = op(T)·W or W·op(T)
        top -= W
        if side == "L":
            self.ops.gemm("N", "N", -1.0, V, W, 1.0, bottom)          # bottom = bottom − V·W
        else:
            self.ops.gemm("N", "T", -1.0, W, V, 1.0, bottom)          # bottom = bottom − W·Vᵀ


def _groups(k: int, nb: int, side: str, trans: str):
    """(first, end) of the groups of whole nb-wide blocks of k reflectors that gemqrt, tpmqrt and ttmqrt
    apply at once (about :data:`APPLY_WIDTH` wide), in the order op(Q) applies them: Q = H_1···H_k,
    so Qᵀ·C and C·Q take the first group first, Q·C and C·Qᵀ the last."""
    width = nb * max(1, APPLY_WIDTH // nb)
    starts = range(0, k, width)
    forward = (side == "L") == (trans == "T")
    return [(i, min(i + width, k)) for i in (starts if forward else reversed(starts))]
