"""cuBLAS and cuSOLVER called in place on views of column-major device tiles (:class:`CublasOps`).

The GPU kernels (:mod:`.gpu_kernels`) make every BLAS-3, Cholesky, LU and QR step one of
these calls. Each view is passed with its own address and leading dimension, never
copied; a view that is not column-major goes through a dense temporary and back. CuPy
binds gemm, syrk, trsm, ger, potrf, getrf and geqrf; symm, syr2k, trmm, laswp, trtri and
lauum come from NVIDIA's nvmath-python, imported when first needed.

The array module and the CUDA libraries are arguments (:class:`.cupy_backend._CupyLibraries`
on a GPU), so the tests also make these calls on numpy arrays with the host BLAS/LAPACK
standing in for cuBLAS/cuSOLVER (same pointers, leading dimensions and enums).
"""
from __future__ import annotations

import contextlib

import numpy as np

from .kernel_checks import DOUBLE, leading_dimension

#: cudaDataType's CUDA_R_64F, for cuSOLVER's 64-bit API (Xtrtri)
_CUDA_R_64F = 1


class CublasOps:
    """In-place cuBLAS/cuSOLVER calls on views of column-major tiles.

    ``xp`` is the array module, ``cuda`` what :class:`.cupy_backend._CupyLibraries` provides.
    Arguments are passed with their own address and leading dimension; a view that
    is not column-major goes through a dense copy. Callers skip empty products.
    """

    def __init__(self, xp, cuda):
        self.xp, self.cuda = xp, cuda
        lib = cuda.cublas
        # cuBLAS's enums, which nvmath's routines and cuSOLVER's take too
        self._op = {"N": lib.CUBLAS_OP_N, "T": lib.CUBLAS_OP_T}
        self._fill = {"L": lib.CUBLAS_FILL_MODE_LOWER, "U": lib.CUBLAS_FILL_MODE_UPPER}
        self._side = {"L": lib.CUBLAS_SIDE_LEFT, "R": lib.CUBLAS_SIDE_RIGHT}
        self._diag = {"N": lib.CUBLAS_DIAG_NON_UNIT, "U": lib.CUBLAS_DIAG_UNIT}

    def gemm(self, transa: str, transb: str, alpha: float, A, B, beta: float, C) -> None:
        """C <- alpha·op(A)·op(B) + beta·C."""
        m, n = C.shape
        k = A.shape[1] if transa == "N" else A.shape[0]
        with self._dense(A) as (a, lda), self._dense(B) as (b, ldb), self._dense(C, True) as (c, ldc):
            alpha_, beta_ = _host_double(alpha), _host_double(beta)
            self.cuda.cublas.dgemm(self._blas_handle(), self._op[transa], self._op[transb], m, n, k,
                                   alpha_.ctypes.data, self._at(a), lda, self._at(b), ldb,
                                   beta_.ctypes.data, self._at(c), ldc)

    def symm(self, side: str, uplo: str, alpha: float, A, B, beta: float, C) -> None:
        """C <- alpha·A·B + beta·C (side 'L') or alpha·B·A + beta·C ('R'), A symmetric (its ``uplo`` triangle)."""
        m, n = C.shape
        library, handle = self.cuda.nvmath_cublas()
        with self._dense(A) as (a, lda), self._dense(B) as (b, ldb), self._dense(C, True) as (c, ldc):
            alpha_, beta_ = _host_double(alpha), _host_double(beta)
            library.dsymm(handle, self._side[side], self._fill[uplo], m, n, alpha_.ctypes.data, self._at(a), lda,
                          self._at(b), ldb, beta_.ctypes.data, self._at(c), ldc)

    def syrk(self, uplo: str, trans: str, alpha: float, A, beta: float, C) -> None:
        """C <- alpha·op(A)·op(A)ᵀ + beta·C on the ``uplo`` triangle; the other is not touched."""
        n = C.shape[0]
        k = A.shape[1] if trans == "N" else A.shape[0]
        with self._dense(A) as (a, lda), self._dense(C, True) as (c, ldc):
            alpha_, beta_ = _host_double(alpha), _host_double(beta)
            self.cuda.cublas.dsyrk(self._blas_handle(), self._fill[uplo], self._op[trans], n, k,
                                   alpha_.ctypes.data, self._at(a), lda, beta_.ctypes.data, self._at(c), ldc)

    def syr2k(self, uplo: str, trans: str, alpha: float, A, B, beta: float, C) -> None:
        """C <- alpha·(op(A)·op(B)ᵀ + op(B)·op(A)ᵀ) + beta·C on the ``uplo`` triangle."""
        n = C.shape[0]
        k = A.shape[1] if trans == "N" else A.shape[0]
        library, handle = self.cuda.nvmath_cublas()
        with self._dense(A) as (a, lda), self._dense(B) as (b, ldb), self._dense(C, True) as (c, ldc):
            alpha_, beta_ = _host_double(alpha), _host_double(beta)
            library.dsyr2k(handle, self._fill[uplo], self._op[trans], n, k, alpha_.ctypes.data, self._at(a), lda,
                           self._at(b), ldb, beta_.ctypes.data, self._at(c), ldc)

    def trsm(self, side: str, uplo: str, trans: str, diag: str, alpha: float, A, B) -> None:
        """B <- alpha·op(A)⁻¹·B (side 'L') or alpha·B·op(A)⁻¹ (side 'R'), A triangular."""
        m, n = B.shape
        with self._dense(A) as (a, lda), self._dense(B, True) as (b, ldb):
            alpha_ = _host_double(alpha)
            self.cuda.cublas.dtrsm(self._blas_handle(), self._side[side], self._fill[uplo], self._op[trans],
                                   self._diag[diag], m, n, alpha_.ctypes.data, self._at(a), lda, self._at(b), ldb)

    def trmm(self, side: str, uplo: str, trans: str, diag: str, alpha: float, A, B) -> None:
        """B <- alpha·op(A)·B (side 'L') or alpha·B·op(A) (side 'R'), A triangular: cuBLAS's
        out-of-place trmm, in place by giving B as its output too (which cuBLAS allows)."""
        m, n = B.shape
        library, handle = self.cuda.nvmath_cublas()
        with self._dense(A) as (a, lda), self._dense(B, True) as (b, ldb):
            alpha_ = _host_double(alpha)
            library.dtrmm(handle, self._side[side], self._fill[uplo], self._op[trans], self._diag[diag], m, n,
                          alpha_.ctypes.data, self._at(a), lda, self._at(b), ldb, self._at(b), ldb)

    def ger(self, alpha: float, x, y, A) -> None:
        """A <- A + alpha·x·yᵀ for vectors (1-D views) x and y."""
        m, n = A.shape
        (x, incx), (y, incy) = self._vector(x), self._vector(y)
        with self._dense(A, True) as (a, lda):
            alpha_ = _host_double(alpha)
            self.cuda.cublas.dger(self._blas_handle(), m, n, alpha_.ctypes.data, self._at(x), incx,
                                  self._at(y), incy, self._at(a), lda)

    def potrf(self, A, uplo: str):
        """Cholesky of the ``uplo`` triangle of square A in place; LAPACK's info (0: success), left
        on the device."""
        n = A.shape[0]
        with self._dense(A, True) as (a, lda):
            handle = self.cuda.cusolver_handle()
            fill = self._fill[uplo]
            lwork = self.cuda.cusolver.dpotrf_bufferSize(handle, fill, n, self._at(a), lda)
            work = self.xp.empty(max(1, lwork))
            info = self.xp.zeros(1, dtype=np.int32)
            self.cuda.cusolver.dpotrf(handle, fill, n, self._at(a), lda, self._at(work), lwork, self._at(info))
        return info

    def trtri(self, A, uplo: str, diag: str) -> int:
        """The inverse of the ``uplo`` triangle of square A in place (cuSOLVER Xtrtri); LAPACK's info."""
        n = A.shape[0]
        library, handle = self.cuda.nvmath_cusolver()
        fill, unit = self._fill[uplo], self._diag[diag]
        with self._dense(A, True) as (a, lda):
            device_bytes, host_bytes = library.xtrtri_buffer_size(handle, fill, unit, n, _CUDA_R_64F, self._at(a), lda)
            work = self.xp.empty(max(1, device_bytes), dtype=np.uint8)
            host_work = np.empty(max(1, host_bytes), dtype=np.uint8)
            info = self.xp.zeros(1, dtype=np.int32)
            library.xtrtri(handle, fill, unit, n, _CUDA_R_64F, self._at(a), lda, self._at(work), device_bytes,
                           host_work.ctypes.data, host_bytes, self._at(info))
            return int(self.cuda.fetch(info)[0])

    def lauum(self, A, uplo: str) -> None:
        """Lᵀ·L or U·Uᵀ of the ``uplo`` triangle of square A in place (cuSOLVER lauum; info only
        flags an illegal argument, and is not read: that would wait for the GPU)."""
        n = A.shape[0]
        library, handle = self.cuda.nvmath_cusolver()
        fill = self._fill[uplo]
        with self._dense(A, True) as (a, lda):
            lwork = library.dlauum_buffer_size(handle, fill, n, self._at(a), lda)
            work, info = self.xp.empty(max(1, lwork)), self.xp.empty(1, dtype=np.int32)
            library.dlauum(handle, fill, n, self._at(a), lda, self._at(work), lwork, self._at(info))

    def getrf(self, A, pivoting: bool = True):
        """LU of A (m×n) in place (cuSOLVER getrf): (pivots, info), both left on the device. With
        ``pivoting``, partial pivoting, the pivots LAPACK's 1-based rows (min(m, n) int32); without,
        no interchange (cuSOLVER's getrf given no pivot array) and None. info is LAPACK's."""
        m, n = A.shape
        with self._dense(A, True) as (a, lda):
            handle = self.cuda.cusolver_handle()
            lwork = self.cuda.cusolver.dgetrf_bufferSize(handle, m, n, self._at(a), lda)
            work = self.xp.empty(max(1, lwork))
            pivots = self.xp.empty(min(m, n), dtype=np.int32) if pivoting else None
            info = self.xp.empty(1, dtype=np.int32)
            self.cuda.cusolver.dgetrf(handle, m, n, self._at(a), lda, self._at(work),
                                      self._at(pivots) if pivoting else 0, self._at(info))
        return pivots, info

    def laswp(self, A, k1: int, k2: int, pivots) -> None:
        """LAPACK DLASWP, forward (cuSOLVER laswp): rows j and pivots[j−1] of A swapped for
        j = k1, ..., k2 (1-based, as the int32 device vector ``pivots``)."""
        library, handle = self.cuda.nvmath_cusolver()
        with self._dense(A, True) as (a, lda):
            library.dlaswp(handle, A.shape[1], self._at(a), lda, k1, k2, self._at(pivots), 1)

    def geqrf(self, A, tau) -> None:
        """QR of A (m×n) in place (LAPACK DGEQRF): V below the diagonal, R on and above it,
        tau[:min(m, n)] <- the reflectors' scalars.

        Its info is never read: it only flags an illegal argument (QR has no numerical
        failure), and reading it would make the host wait for the GPU.
        """
        m, n = A.shape
        with self._dense(A, True) as (a, lda):
            handle = self.cuda.cusolver_handle()
            lwork = self.cuda.cusolver.dgeqrf_bufferSize(handle, m, n, self._at(a), lda)
            work = self.xp.empty(max(1, lwork))
            info = self.xp.empty(1, dtype=np.int32)
            self.cuda.cusolver.dgeqrf(handle, m, n, self._at(a), lda, self._at(tau), self._at(work), lwork,
                                      self._at(info))

    def fetch(self, array) -> np.ndarray:
        """A Fortran-ordered host copy of a device array (waits for it)."""
        return self.cuda.fetch(array)

    # ---------------------------------------------------------------- arguments
    def _blas_handle(self) -> int:
        """The current device's cuBLAS handle, reading alpha and beta from host memory."""
        handle = self.cuda.cublas_handle()
        self.cuda.cublas.setPointerMode(handle, self.cuda.cublas.CUBLAS_POINTER_MODE_HOST)
        return handle

    def _at(self, array) -> int:
        return self.cuda.address(array)

    @contextlib.contextmanager
    def _dense(self, array, written: bool = False):
        """(array, leading dimension) for BLAS: the view itself when column-major, else a
        dense copy, written back on exit when ``written``."""
        ld = leading_dimension(array)
        if ld is not None:
            yield array, ld
            return
        dense = self.xp.asfortranarray(array)
        yield dense, max(1, dense.shape[0])
        if written:
            array[...] = dense

    def _vector(self, x):
        """(vector, increment) for BLAS level 2: a positive stride in doubles, else a copy."""
        if x.shape[0] <= 1:
            return x, 1
        step, remainder = divmod(x.strides[0], DOUBLE)
        if step > 0 and not remainder:
            return x, step
        return self.xp.ascontiguousarray(x), 1


def _host_double(value: float) -> np.ndarray:
    """A float64 in host memory for cuBLAS to read alpha or beta from (kept alive by the caller)."""
    return np.array(value, dtype=np.float64)
