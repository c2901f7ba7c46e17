"""Tests of the CuPy backend (runtime/cupy_backend.py, gpu_kernels.py, cublas_ops.py) against the CPU kernels.

Every kernel is compared with :mod:`tiledsl.runtime.kernels` on random data, on ragged
and empty shapes and on four placements of each argument: its own array, a row
range or a block of a larger Fortran array, and a block of a C-ordered array (not
column-major: the dense-copy path). Results must agree to 1e-12 of their size and
nothing outside a view may change. The comparisons run twice:

* ``host`` (everywhere): :class:`TileKernels` and :class:`CublasOps` on numpy arrays,
  with :class:`HostCuda` standing in for CUDA. It forwards each cuBLAS/cuSOLVER call
  to the host BLAS/LAPACK with the same raw pointers, leading dimensions and
  scalars, checks the leading dimensions as cuBLAS does, and uses distinct numbers
  for each enum family, so the algorithms and the calls they make are checked here;
* ``gpu`` (CuPy and an NVIDIA GPU, skipped otherwise): the backend's own kernels on
  device arrays, plus its copies and whole runs of the shipped programs.

The backend's setup errors, and that CuPy is imported only on demand, are checked
without a GPU.
"""
from __future__ import annotations

import ctypes
import gc
import importlib
import inspect
import itertools
import threading
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from tiledsl.runtime import Options, blas, cupy_backend, execute, gpu_kernels
from tiledsl.runtime import kernels as cpu
from tiledsl.runtime.cublas_ops import CublasOps
from tiledsl.runtime.cupy_backend import PinnedPool
from tiledsl.runtime.gpu_kernels import TileKernels
from tiledsl.runtime.backends import backend
from tiledsl.runtime.errors import KernelError
from tiledsl.runtime.panels import Panel, taking_matrices

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(300)


def _visible_gpus() -> int:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount()
    except Exception:  # no CuPy, no driver, no device: all mean no GPU test
        return 0


GPUS = _visible_gpus()
needs_gpu = pytest.mark.skipif(GPUS == 0, reason="needs CuPy and an NVIDIA GPU")
IMPLEMENTATIONS = ["host", pytest.param("gpu", marks=needs_gpu)]


# --------------------------------------------------------------------------- CUDA on the host

OP, FILL, SIDE, DIAG = {10: "N", 11: "T"}, {20: "L", 21: "U"}, {30: "L", 31: "R"}, {40: "N", 41: "U"}
HOST_POINTERS = 50
NVMATH_HANDLE = 7  # the stand-in's handle of nvmath's own; CuPy's are 1 (cuBLAS) and 2 (cuSOLVER)
CUDA_R_64F = 1


def _double_at(address: int) -> float:
    return ctypes.c_double.from_address(address).value


def _check_ld(ld: int, rows: int) -> None:
    """cuBLAS rejects a leading dimension below max(1, rows) (CUBLAS_STATUS_INVALID_VALUE)."""
    assert ld >= max(1, rows), f"leading dimension {ld} for {rows} rows"


class FakeCublas:
    """cuBLAS's calls as CuPy binds them, done by the host BLAS on host addresses."""

    CUBLAS_OP_N, CUBLAS_OP_T = 10, 11
    CUBLAS_FILL_MODE_LOWER, CUBLAS_FILL_MODE_UPPER = 20, 21
    CUBLAS_SIDE_LEFT, CUBLAS_SIDE_RIGHT = 30, 31
    CUBLAS_DIAG_NON_UNIT, CUBLAS_DIAG_UNIT = 40, 41
    CUBLAS_POINTER_MODE_HOST = HOST_POINTERS

    def __init__(self):
        self.pointer_mode = None

    def setPointerMode(self, handle, mode):
        self.pointer_mode = mode

    def dgemm(self, handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc):
        assert self.pointer_mode == HOST_POINTERS
        ta, tb = OP[transa], OP[transb]
        _check_ld(lda, m if ta == "N" else k)
        _check_ld(ldb, k if tb == "N" else n)
        _check_ld(ldc, m)
        blas.dgemm(ta, tb, m, n, k, _double_at(alpha), ctypes.c_void_p(A), lda, ctypes.c_void_p(B), ldb,
                   _double_at(beta), ctypes.c_void_p(C), ldc)

    def dsyrk(self, handle, uplo, trans, n, k, alpha, A, lda, beta, C, ldc):
        assert self.pointer_mode == HOST_POINTERS
        _check_ld(lda, n if OP[trans] == "N" else k)
        _check_ld(ldc, n)
        blas.dsyrk(FILL[uplo], OP[trans], n, k, _double_at(alpha), ctypes.c_void_p(A), lda,
                   _double_at(beta), ctypes.c_void_p(C), ldc)

    def dtrsm(self, handle, side, uplo, trans, diag, m, n, alpha, A, lda, B, ldb):
        assert self.pointer_mode == HOST_POINTERS
        _check_ld(lda, m if SIDE[side] == "L" else n)
        _check_ld(ldb, m)
        blas.dtrsm(SIDE[side], FILL[uplo], OP[trans], DIAG[diag], m, n, _double_at(alpha),
                   ctypes.c_void_p(A), lda, ctypes.c_void_p(B), ldb)

    def dger(self, handle, m, n, alpha, x, incx, y, incy, A, lda):
        assert self.pointer_mode == HOST_POINTERS and incx > 0 and incy > 0
        _check_ld(lda, m)
        blas.dger(m, n, _double_at(alpha), ctypes.c_void_p(x), incx, ctypes.c_void_p(y), incy,
                  ctypes.c_void_p(A), lda)


class FakeNvmathCublas:
    """nvmath-python's cuBLAS routines that CuPy lacks, as nvmath binds them (alpha and beta on the host)."""

    def dsymm(self, handle, side, uplo, m, n, alpha, A, lda, B, ldb, beta, C, ldc):
        assert handle == NVMATH_HANDLE
        _check_ld(lda, m if SIDE[side] == "L" else n)
        _check_ld(ldb, m)
        _check_ld(ldc, m)
        blas.dsymm(SIDE[side], FILL[uplo], m, n, _double_at(alpha), ctypes.c_void_p(A), lda, ctypes.c_void_p(B), ldb,
                   _double_at(beta), ctypes.c_void_p(C), ldc)

    def dsyr2k(self, handle, uplo, trans, n, k, alpha, A, lda, B, ldb, beta, C, ldc):
        assert handle == NVMATH_HANDLE
        _check_ld(lda, n if OP[trans] == "N" else k)
        _check_ld(ldb, n if OP[trans] == "N" else k)
        _check_ld(ldc, n)
        blas.dsyr2k(FILL[uplo], OP[trans], n, k, _double_at(alpha), ctypes.c_void_p(A), lda, ctypes.c_void_p(B), ldb,
                    _double_at(beta), ctypes.c_void_p(C), ldc)

    def dtrmm(self, handle, side, uplo, trans, diag, m, n, alpha, A, lda, B, ldb, C, ldc):
        """cuBLAS's trmm is out of place (C = op(A)·B); the kernels ask for it in place."""
        assert handle == NVMATH_HANDLE and C == B and ldc == ldb
        _check_ld(lda, m if SIDE[side] == "L" else n)
        _check_ld(ldb, m)
        blas.dtrmm(SIDE[side], FILL[uplo], OP[trans], DIAG[diag], m, n, _double_at(alpha),
                   ctypes.c_void_p(A), lda, ctypes.c_void_p(B), ldb)


class FakeCusolver:
    """cuSOLVER's potrf, getrf and geqrf as CuPy binds them, done by the host LAPACK; info in "device" memory."""

    WORK = 3

    def dpotrf_bufferSize(self, handle, uplo, n, A, lda):
        _check_ld(lda, n)
        return self.WORK

    def dpotrf(self, handle, uplo, n, A, lda, work, lwork, info):
        assert lwork == self.WORK and work
        ctypes.c_int32.from_address(info).value = blas.dpotrf(FILL[uplo], n, ctypes.c_void_p(A), lda)

    @staticmethod
    def geqrf_work(n):
        """Enough for LAPACK's blocked dgeqrf (n·64), so the workspace given is the one used."""
        return max(1, n) * 64

    def dgeqrf_bufferSize(self, handle, m, n, A, lda):
        _check_ld(lda, m)
        return self.geqrf_work(n)

    def dgetrf_bufferSize(self, handle, m, n, A, lda):
        _check_ld(lda, m)
        return self.WORK

    def dgetrf(self, handle, m, n, A, lda, work, ipiv, info):
        _check_ld(lda, m)
        assert work
        if not ipiv:  # cuSOLVER: "if devIpiv is null, no pivoting is performed"
            ctypes.c_int32.from_address(info).value = self.lu_without_pivoting(_matrix_at(A, lda, m, n))
            return
        pivots = np.ctypeslib.as_array((ctypes.c_int32 * min(m, n)).from_address(ipiv))
        ctypes.c_int32.from_address(info).value = blas.dgetrf(m, n, ctypes.c_void_p(A), lda, pivots)

    @staticmethod
    def lu_without_pivoting(a) -> int:
        """Right-looking elimination scaling by each pivot's inverse, as a GPU solver may (a
        subnormal pivot overflows); LAPACK's info: the first zero pivot, 1-based."""
        info = 0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for j in range(min(a.shape)):
                if a[j, j] == 0 and not info:
                    info = j + 1
                a[j + 1:, j] *= 1.0 / a[j, j]
                a[j + 1:, j + 1:] -= np.outer(a[j + 1:, j], a[j, j + 1:])
        return info

    def dgeqrf(self, handle, m, n, A, lda, tau, work, lwork, info):
        _check_ld(lda, m)
        assert lwork == self.geqrf_work(n) and work and tau
        ctypes.c_int32.from_address(info).value = blas.dgeqrf(
            m, n, ctypes.c_void_p(A), lda, ctypes.c_void_p(tau), ctypes.c_void_p(work), lwork)


def _matrix_at(address: int, ld: int, m: int, n: int) -> np.ndarray:
    """The m×n column-major matrix of leading dimension ``ld`` at host ``address``, as a view."""
    buffer = (ctypes.c_double * (ld * (n - 1) + m)).from_address(address)
    return np.lib.stride_tricks.as_strided(np.frombuffer(buffer, dtype=np.float64), (m, n), (8, 8 * ld))


class FakeNvmathCusolver:
    """nvmath-python's cuSOLVER routines that CuPy lacks, as nvmath binds them, done by the host LAPACK."""

    WORK, HOST_WORK = 5, 9

    def dlaswp(self, handle, n, A, lda, k1, k2, ipiv, incx):
        """DLASWP, forward (the kernels use nothing else), by the host's DLASWP on the raw pointers."""
        assert handle == NVMATH_HANDLE and incx == 1 and 1 <= k1 <= k2
        pivots = np.ctypeslib.as_array((ctypes.c_int32 * k2).from_address(ipiv))
        assert all(1 <= int(p) and max(j, int(p)) <= lda for j, p in enumerate(pivots[k1 - 1:], k1))
        blas.dlaswp(n, ctypes.c_void_p(A), lda, k1, k2, ctypes.c_void_p(ipiv), incx)

    def xtrtri_buffer_size(self, handle, uplo, diag, n, data_type, A, lda):
        assert data_type == CUDA_R_64F
        _check_ld(lda, n)
        return 8 * self.WORK, self.HOST_WORK

    def xtrtri(self, handle, uplo, diag, n, data_type, A, lda, work, work_bytes, host_work, host_bytes, info):
        assert handle == NVMATH_HANDLE and data_type == CUDA_R_64F
        assert (work_bytes, host_bytes) == (8 * self.WORK, self.HOST_WORK) and work and host_work
        ctypes.c_int32.from_address(info).value = blas.dtrtri(FILL[uplo], DIAG[diag], n, ctypes.c_void_p(A), lda)

    def dlauum_buffer_size(self, handle, uplo, n, A, lda):
        _check_ld(lda, n)
        return self.WORK

    def dlauum(self, handle, uplo, n, A, lda, work, lwork, info):
        assert handle == NVMATH_HANDLE and lwork == self.WORK and work
        ctypes.c_int32.from_address(info).value = blas.dlauum(FILL[uplo], n, ctypes.c_void_p(A), lda)


class HostCuda:
    """What CublasOps needs from CUDA, played by the host: "device" arrays are numpy arrays."""

    def __init__(self):
        self.cublas, self.cusolver = FakeCublas(), FakeCusolver()
        self.nvmath = {"cublas": FakeNvmathCublas(), "cusolverDn": FakeNvmathCusolver()}
        self.fetches = 0  # host round trips: each would wait for the GPU

    def cublas_handle(self):
        return 1

    def cusolver_handle(self):
        return 2

    def nvmath_cublas(self):
        return self.nvmath["cublas"], NVMATH_HANDLE

    def nvmath_cusolver(self):
        return self.nvmath["cusolverDn"], NVMATH_HANDLE

    @staticmethod
    def address(array):
        return array.ctypes.data

    def fetch(self, array):
        self.fetches += 1
        return np.array(array, order="F", copy=True)


# --------------------------------------------------------------------------- implementations


class HostImplementation:
    """The backend's kernels on numpy arrays through :class:`HostCuda`."""

    def __init__(self, cuda=None):
        self.kernels = TileKernels(np, CublasOps(np, cuda or HostCuda()))

    @staticmethod
    def put(parent):
        return np.array(parent, order="K", copy=True)

    @staticmethod
    def get(array):
        return np.array(array, copy=True)

    def run(self, name, *args):
        taking_matrices(getattr(self.kernels, name))(*args)  # as the backend's kernels are wrapped


class GpuImplementation:
    """The CuPy backend on GPU 1."""

    def __init__(self):
        import cupy

        self.cupy = cupy
        self.backend = backend("cupy", 1)

    def put(self, parent):
        array = self.backend.to_device(parent, 1)
        if parent.flags.c_contiguous and not parent.flags.f_contiguous:
            with self.cupy.cuda.Device(0):
                array = self.cupy.ascontiguousarray(array)
        return array

    def get(self, array):
        return self.backend.to_host(array)

    def run(self, name, *args):
        self.backend.kernels[name](*args)


@pytest.fixture(scope="module")
def gpu_implementation():
    return GpuImplementation()


@pytest.fixture(params=IMPLEMENTATIONS)
def implementation(request):
    if request.param == "host":
        return HostImplementation()
    return request.getfixturevalue("gpu_implementation")


# --------------------------------------------------------------------------- comparisons

LAYOUTS = ["own", "rows", "block", "C"]
RAGGED = [(1, 1), (7, 3), (3, 7), (100, 64), (64, 64), (0, 5), (5, 0), (0, 0)]
TALL = [(1, 1), (7, 3), (100, 64), (64, 64), (200, 200), (5, 0), (0, 0)]


@pytest.fixture
def rng():
    return np.random.default_rng(20250214)


class Placed:
    """Where an argument lives: ``a`` inside a parent array surrounded by random data."""

    MARGINS = {"own": (0, 0, 0, 0), "rows": (3, 2, 0, 0), "block": (3, 2, 2, 1), "C": (1, 1, 2, 0)}

    def __init__(self, a: np.ndarray, layout: str, rng):
        top, bottom, left, right = self.MARGINS[layout]
        m, n = a.shape
        parent = rng.standard_normal((top + m + bottom, left + n + right))
        self.parent = np.ascontiguousarray(parent) if layout == "C" else np.asfortranarray(parent)
        self.region = (slice(top, top + m), slice(left, left + n))
        self.parent[self.region] = a

    def check(self, result: np.ndarray, expected: np.ndarray) -> None:
        """``result`` (the parent after the kernel) holds ``expected`` in the view, the rest unchanged."""
        outside = np.ones(self.parent.shape, dtype=bool)
        outside[self.region] = False
        np.testing.assert_array_equal(result[outside], self.parent[outside])
        assert_matches(result[self.region], expected)


def assert_matches(actual, expected) -> None:
    """Equal to 1e-12 of the largest entry of ``expected``; NaNs in the same places."""
    finite = np.abs(expected[np.isfinite(expected)])
    scale = max(1.0, finite.max()) if finite.size else 1.0
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-12 * scale)


def compare(implementation, name, arguments, layout, rng, *values):
    """Run kernel ``name`` on the CPU and on ``implementation``; every argument must agree.

    An argument is an array or a list of arrays (a panel); ``values`` follow them.
    """
    expected = [[np.asfortranarray(a.copy()) for a in _tiles(argument)] for argument in arguments]
    cpu.CPU_KERNELS[name](*[_as_given(a, tiles) for a, tiles in zip(arguments, expected)], *values)
    placed = [[Placed(a, layout, rng) for a in _tiles(argument)] for argument in arguments]
    devices = [[implementation.put(p.parent) for p in tiles] for tiles in placed]
    views = [[d[p.region] for d, p in zip(on_device, tiles)] for on_device, tiles in zip(devices, placed)]
    implementation.run(name, *[_as_given(a, tiles) for a, tiles in zip(arguments, views)], *values)
    for tiles, on_device, expected_tiles in zip(placed, devices, expected):
        for p, device, e in zip(tiles, on_device, expected_tiles):
            p.check(implementation.get(device), e)


def _tiles(argument) -> list:
    return argument if isinstance(argument, list) else [argument]


def _as_given(argument, tiles):
    """``tiles`` as ``argument`` was given: a (written column) panel or one tile."""
    return Panel(tiles, 0, True) if isinstance(argument, list) else tiles[0]


def random(rng, m, n):
    return rng.standard_normal((m, n))


def spd(rng, n):
    b = rng.standard_normal((n, n))
    return b @ b.T + n * np.eye(n)


def diagonally_dominant(rng, m, n):
    a = random(rng, m, n)
    k = min(m, n)
    a[:k, :k] += 2 * max(m, n) * np.eye(k)
    return a


def with_nan(a, indices):
    a = a.copy()
    a[indices] = np.nan  # must be neither read nor written
    return a


# --------------------------------------------------------------------------- Cholesky and BLAS-3


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,n", TALL)
def test_potrf(implementation, rng, layout, m, n):
    a = random(rng, m, n)
    a[:n, :n] = with_nan(spd(rng, n), np.triu_indices(n, 1))
    compare(implementation, "potrf", [a], layout, rng)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,w", RAGGED)
def test_trsm(implementation, rng, layout, m, w):
    lower = with_nan(diagonally_dominant(rng, w + 3, w), np.triu_indices(w, 1))
    compare(implementation, "trsm", [lower, random(rng, m, w)], layout, rng)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("w,k", RAGGED)
def test_syrk(implementation, rng, layout, w, k):
    compare(implementation, "syrk", [random(rng, w, k), random(rng, w, w)], layout, rng)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,w,k", [(1, 1, 1), (7, 3, 5), (3, 7, 2), (100, 64, 64),
                                   (64, 64, 64), (0, 4, 4), (4, 0, 4), (4, 4, 0)])
def test_gemm(implementation, rng, layout, m, w, k):
    compare(implementation, "gemm", [random(rng, m, k), random(rng, w, k), random(rng, m, w)], layout, rng)


@pytest.mark.parametrize("transa, transb", [("N", "N"), ("T", "N"), ("N", "T"), ("T", "T")])
@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_a_zero_alpha_reads_no_input_as_on_the_host(implementation, rng, transa, transb, beta):
    """gemm: C = beta·C whatever A and B hold; trsm and trmm: zeros whatever the triangle holds."""
    nan = np.full((6, 6), np.nan)
    compare(implementation, "gemm", [nan, nan, random(rng, 6, 6)], "block", rng, transa, transb, 0.0, beta)
    for kernel in ("trsm", "trmm"):
        compare(implementation, kernel, [nan, random(rng, 6, 6)], "block", rng, "L", "L", transa, "N", 0.0)


def test_gemm_with_overlapping_inputs(implementation, rng):
    """The Cholesky update reads two row ranges of one tile as A and B."""
    panel, c = random(rng, 10, 4), random(rng, 6, 4)
    expected = c - panel[2:8] @ panel[4:8].T
    device_panel, device_c = implementation.put(np.asfortranarray(panel)), implementation.put(np.asfortranarray(c))
    implementation.run("gemm", device_panel[2:8], device_panel[4:8], device_c)
    assert_matches(implementation.get(device_c), expected)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 3, 5), (3, 7, 2), (100, 64, 64),
                                   (0, 4, 4), (4, 0, 4), (4, 4, 0)])
def test_gemm_nn(implementation, rng, layout, m, n, k):
    compare(implementation, "gemm_nn", [random(rng, m, k), random(rng, k, n), random(rng, m, n)], layout, rng)


NT = ["N", "T"]


def shaped(rng, shape, trans):
    """A random matrix whose op(·) has ``shape``."""
    return random(rng, *(shape if trans == "N" else shape[::-1]))


def other_triangle_nan(a, uplo):
    """``a`` with NaN in the strict triangle of its top square opposite ``uplo`` (neither read nor written)."""
    n = min(a.shape)
    return with_nan(a, np.triu_indices(n, 1) if uplo == "L" else np.tril_indices(n, -1))


@pytest.mark.parametrize("layout", ["block", "C"])
@pytest.mark.parametrize("transa,transb", list(itertools.product(NT, NT)))
@pytest.mark.parametrize("m,n,k,alpha,beta", [(7, 3, 5, 0.5, 2.0), (30, 20, 17, -1.0, 0.0), (4, 5, 0, 1.0, 3.0)])
def test_gemm_options(implementation, rng, layout, transa, transb, m, n, k, alpha, beta):
    compare(implementation, "gemm", [shaped(rng, (m, k), transa), shaped(rng, (k, n), transb), random(rng, m, n)],
            layout, rng, transa, transb, alpha, beta)


@pytest.mark.parametrize("layout", ["block", "C"])
@pytest.mark.parametrize("side,uplo", list(itertools.product("LR", "LU")))
@pytest.mark.parametrize("m,n", [(7, 3), (3, 7), (0, 3)])
def test_symm(implementation, rng, layout, side, uplo, m, n):
    order = m if side == "L" else n
    a = other_triangle_nan(random(rng, order + 2, order), uplo)
    compare(implementation, "symm", [a, random(rng, m, n), random(rng, m, n)], layout, rng, side, uplo, 0.5, -2.0)


@pytest.mark.parametrize("layout", ["block", "C"])
@pytest.mark.parametrize("kernel", ["syrk", "syr2k"])
@pytest.mark.parametrize("uplo,trans", list(itertools.product("LU", NT)))
@pytest.mark.parametrize("n,k,beta", [(7, 3, 1.0), (3, 7, 0.5), (4, 0, 2.0)])
def test_rank_k_updates(implementation, rng, layout, kernel, uplo, trans, n, k, beta):
    inputs = [shaped(rng, (n, k), trans) for _ in range(1 if kernel == "syrk" else 2)]
    compare(implementation, kernel, [*inputs, random(rng, n, n)], layout, rng, uplo, trans, 1.5, beta)


@pytest.mark.parametrize("layout", ["rows", "C"])
@pytest.mark.parametrize("kernel", ["trsm", "trmm"])
@pytest.mark.parametrize("side,uplo,transa,diag", list(itertools.product("LR", "LU", NT, "NU")))
def test_triangular_options(implementation, rng, layout, kernel, side, uplo, transa, diag):
    m, n = 7, 4
    order = m if side == "L" else n
    a = other_triangle_nan(diagonally_dominant(rng, order + 3, order), uplo)
    if diag == "U":
        a = with_nan(a, np.diag_indices(order))
    compare(implementation, kernel, [a, random(rng, m, n)], layout, rng, side, uplo, transa, diag, -2.0)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("n", [1, 40, 0])
def test_potrf_upper(implementation, rng, layout, n):
    compare(implementation, "potrf", [other_triangle_nan(spd(rng, n), "U")], layout, rng, "U")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("uplo,diag", list(itertools.product("LU", "NU")))
@pytest.mark.parametrize("n", [1, 30, 0])
def test_trtri(implementation, rng, layout, uplo, diag, n):
    a = other_triangle_nan(random(rng, n, n) / max(n, 1) + 2 * np.eye(n), uplo)
    compare(implementation, "trtri", [a], layout, rng, uplo, diag)


def test_trtri_of_a_singular_triangle_names_the_zero(implementation):
    a = implementation.put(np.asfortranarray(np.diag([2.0, 3.0, 0.0, 1.0])))
    with pytest.raises(KernelError, match=r"trtri: the triangle is singular \(entry \(2, 2\) of the matrix it was "
                                          r"given is "
                                          r"exactly 0\)"):
        implementation.run("trtri", a)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("uplo", "LU")
@pytest.mark.parametrize("n", [1, 40, 0])
def test_lauum(implementation, rng, layout, uplo, n):
    compare(implementation, "lauum", [other_triangle_nan(random(rng, n, n), uplo)], layout, rng, uplo)


# --------------------------------------------------------------------------- LU


PANELS = [[7], [40], [3, 12], [16, 16, 16], [10, 0, 13, 5]]


def panel(rng, heights, n):
    return [random(rng, h, n) for h in heights]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("heights", PANELS)
@pytest.mark.parametrize("n", [5, 16])
def test_getrf(implementation, rng, layout, heights, n):
    """Factors and pivots as the CPU's (hence lu_factor's), on a tile and on panels; P wider than needed."""
    tiles = panel(rng, heights, n)
    compare(implementation, "getrf", [tiles if len(tiles) > 1 else tiles[0], np.full((1, n + 2), np.nan)],
            layout, rng)


def lu_pivots(rng, rows, n):
    """P as getrf leaves it for a random rows×n panel, one entry wider."""
    p = np.zeros((1, n + 1), order="F")
    cpu.getrf(np.asfortranarray(random(rng, rows, n)), p)
    return p


@pytest.mark.parametrize("layout", ["block", "C"])
@pytest.mark.parametrize("heights", PANELS)
@pytest.mark.parametrize("first,direction", [(0, "F"), (0, "B"), (3, "F"), (2, "B")])
def test_laswp(implementation, rng, layout, heights, first, direction):
    tiles = panel(rng, heights, 3)
    compare(implementation, "laswp", [lu_pivots(rng, sum(heights), 6), tiles if len(tiles) > 1 else tiles[0]],
            layout, rng, first, direction)


@pytest.mark.parametrize("bad", [99.0, -1.0, 1.5, np.nan])
def test_laswp_with_a_pivot_outside_the_panel_poisons_rather_than_writes_out_of_bounds(rng, bad):
    """The CPU kernel refuses such a P; the GPU one cannot read P without waiting: it leaves that
    interchange out and makes A[0, 0] a NaN, which fails the run."""
    cuda = HostCuda()
    a = np.asfortranarray(random(rng, 4, 3))
    expected = a.copy()
    expected[[1, 2]] = expected[[2, 1]]
    HostImplementation(cuda).run("laswp", np.asfortranarray([[0.0, 2.0, bad]]), a)
    assert np.isnan(a[0, 0]) and cuda.fetches == 0
    np.testing.assert_array_equal(a[1:], expected[1:])


def test_pivoted_lu_makes_no_host_round_trip(rng):
    cuda = HostCuda()
    kernels = HostImplementation(cuda)
    tiles = Panel([np.asfortranarray(random(rng, 8, 4)) for _ in range(3)], 0, True)
    p = np.zeros((1, 4), order="F")
    kernels.run("getrf", tiles, p)
    kernels.run("laswp", p, Panel([np.asfortranarray(random(rng, 8, 2)) for _ in range(3)], 0, True), 0, "B")
    assert cuda.fetches == 0


# --------------------------------------------------------------------------- norms


@pytest.mark.parametrize("layout", ["block", "C"])
@pytest.mark.parametrize("m,n", [(7, 3), (1, 1), (0, 3)])
@pytest.mark.parametrize("magnitude", [1.0, 1e300, 1e-300])
def test_lassq(implementation, rng, layout, m, n, magnitude):
    compare(implementation, "lassq", [random(rng, m, n) * magnitude, np.array([[magnitude / 2, 3.0]])], layout, rng)
    compare(implementation, "lassq", [random(rng, m, n) * magnitude, np.zeros((1, 2))], layout, rng)


@pytest.mark.parametrize("pair", [(0.0, 0.0), (0.0, 1.0), (2.0, 5.0), (1e300, 2.0), (np.nan, 1.0)])
def test_lassq_merge(implementation, rng, pair):
    for other in [(1.0, 3.0), (3e300, 1.0), (0.0, 0.0)]:
        compare(implementation, "lassq_merge", [np.array([pair]), np.array([other])], "rows", rng)
        compare(implementation, "lassq_merge", [np.array([other]), np.array([pair])], "rows", rng)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,n", [(7, 3), (1, 1), (0, 3)])
def test_amax_and_asum(implementation, rng, layout, m, n):
    a = random(rng, m, n)
    compare(implementation, "amax", [a, np.array([[0.5]])], layout, rng)
    compare(implementation, "asum", [a, np.ones((1, n + 1))], layout, rng)
    compare(implementation, "asum", [a, np.ones((1, m))], layout, rng, "T")


def test_norms_keep_a_nan(implementation, rng):
    a = with_nan(random(rng, 4, 4), (2, 1))
    compare(implementation, "lassq", [a, np.zeros((1, 2))], "own", rng)
    compare(implementation, "amax", [a, np.zeros((1, 1))], "own", rng)


# --------------------------------------------------------------------------- LU without pivoting


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,n", RAGGED + [(200, 200), (150, 40), (40, 150), (33, 33)])
def test_getrf_nopiv(implementation, rng, layout, m, n):
    compare(implementation, "getrf_nopiv", [diagonally_dominant(rng, m, n)], layout, rng)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("k,n", RAGGED)
def test_trsm_l(implementation, rng, layout, k, n):
    lu = with_nan(diagonally_dominant(rng, k + 2, k), np.diag_indices(k))  # the unit diagonal is implicit
    compare(implementation, "trsm_l", [lu, random(rng, k, n)], layout, rng)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,k", RAGGED)
def test_trsm_u(implementation, rng, layout, m, k):
    lu = with_nan(diagonally_dominant(rng, k + 2, k), np.tril_indices(k, -1))
    compare(implementation, "trsm_u", [lu, random(rng, m, k)], layout, rng)


# --------------------------------------------------------------------------- QR


def geqrt_factors(rng, m, n, ib):
    """V and T of a random m×n tile, from the CPU kernel."""
    v, t = np.asfortranarray(random(rng, m, n)), np.asfortranarray(np.full((ib, n), np.nan))
    cpu.geqrt(v, t)
    return v, t


def tpqrt_factors(rng, m, n, ib):
    """V and T of a random triangle over a random m×n tile, from the CPU kernel."""
    r, v = np.asfortranarray(random(rng, n, n)), np.asfortranarray(random(rng, m, n))
    t = np.asfortranarray(np.full((ib, n), np.nan))
    cpu.tpqrt(r, v, t)
    return v, t


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("ib", [1, 4, 32])
@pytest.mark.parametrize("m,n", RAGGED + [(150, 100)])
def test_geqrt(implementation, rng, layout, ib, m, n):
    compare(implementation, "geqrt", [random(rng, m, n), np.full((ib, n), np.nan)], layout, rng)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,nv,nc,ib", [(1, 1, 1, 1), (7, 3, 5, 2), (3, 7, 4, 2), (100, 64, 30, 32),
                                        (64, 64, 64, 16), (40, 40, 1, 40), (5, 5, 0, 4), (0, 3, 3, 4)])
def test_gemqrt(implementation, rng, layout, m, nv, nc, ib):
    v, t = geqrt_factors(rng, m, nv, ib)
    compare(implementation, "gemqrt", [v, t, random(rng, m, nc)], layout, rng)


def facing(side, rows, cols):
    """The shape of a matrix that reflectors on ``rows`` rows apply to: rows×cols from the left, cols×rows
    from the right."""
    return (rows, cols) if side == "L" else (cols, rows)


@pytest.mark.parametrize("side,trans", [("L", "N"), ("R", "N"), ("R", "T")])
@pytest.mark.parametrize("m,nv,nc,ib", [(7, 3, 5, 2), (100, 64, 30, 32), (30, 40, 8, 7), (6, 4, 0, 4)])
def test_gemqrt_options(implementation, rng, side, trans, m, nv, nc, ib):
    v, t = geqrt_factors(rng, m, nv, ib)
    compare(implementation, "gemqrt", [v, t, random(rng, *facing(side, m, nc))], "block", rng, side, trans)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("ib", [1, 4, 32])
@pytest.mark.parametrize("m,n", RAGGED + [(150, 100)])
def test_tpqrt(implementation, rng, layout, ib, m, n):
    r = random(rng, n + 2, n)  # below the triangle: data that is not the kernel's
    compare(implementation, "tpqrt", [r, random(rng, m, n), np.full((ib, n), np.nan)], layout, rng)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,k,nc,ib", [(1, 1, 1, 1), (7, 3, 5, 2), (3, 7, 4, 2), (100, 64, 30, 32),
                                       (64, 64, 64, 16), (6, 4, 0, 4), (0, 4, 4, 4)])
def test_tpmqrt(implementation, rng, layout, m, k, nc, ib):
    v, t = tpqrt_factors(rng, m, k, ib)
    compare(implementation, "tpmqrt", [v, t, random(rng, k + 2, nc), random(rng, m, nc)], layout, rng)


@pytest.mark.parametrize("side,trans", [("L", "N"), ("R", "N"), ("R", "T")])
@pytest.mark.parametrize("m,k,nc,ib", [(7, 3, 5, 2), (100, 64, 30, 32), (30, 40, 8, 7), (6, 4, 0, 4)])
def test_tpmqrt_options(implementation, rng, side, trans, m, k, nc, ib):
    v, t = tpqrt_factors(rng, m, k, ib)
    compare(implementation, "tpmqrt", [v, t, random(rng, *facing(side, k + 2, nc)), random(rng, *facing(side, m, nc))],
            "rows", rng, side, trans)


def upper_trapezoid(a, fill=np.nan):
    """``a`` with ``fill`` below its diagonal (in rows past its width too): what ttqrt neither reads nor writes."""
    return np.where(np.triu(np.ones(a.shape, dtype=bool)), a, fill)


def ttqrt_factors(rng, m, n, ib):
    """V and T of a random triangle over the upper trapezoid of a random m×n tile, from the CPU kernel,
    with NaN below the trapezoid (ttmqrt must not read it)."""
    r, v = np.asfortranarray(random(rng, n, n)), np.asfortranarray(random(rng, m, n))
    t = np.asfortranarray(np.full((ib, n), np.nan))
    cpu.ttqrt(r, v, t)
    return np.asfortranarray(upper_trapezoid(v)), t


TT_SHAPES = RAGGED + [(150, 100), (40, 100)]  # (3, 7), (40, 100): a short last tile row, m < n


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("ib", [1, 4, 32])
@pytest.mark.parametrize("m,n", TT_SHAPES)
def test_ttqrt(implementation, rng, layout, ib, m, n):
    """Below either triangle (and in A's rows past n) is NaN: neither read nor written."""
    r = with_nan(random(rng, n + 2, n), np.tril_indices(n, -1))  # and rows past n: data that is not the kernel's
    compare(implementation, "ttqrt", [r, upper_trapezoid(random(rng, m, n)), np.full((ib, n), np.nan)], layout, rng)


@pytest.mark.parametrize("m,n,ib", [(64, 64, 16), (20, 48, 8), (100, 40, 32), (5, 5, 1)])
def test_ttqrt_keeps_the_reflectors_below_the_triangles(implementation, rng, m, n, ib):
    """Two tiles that geqrt factored, merged as in a reduction tree: their reflectors below the
    triangles, and A's rows past n, stay bit for bit."""
    r, _ = geqrt_factors(rng, n + 3, n, ib)
    a, _ = geqrt_factors(rng, m, n, ib)
    compare(implementation, "ttqrt", [r, a, np.full((ib, n), np.nan)], "own", rng)
    tiles = [implementation.put(np.asfortranarray(x)) for x in (r, a, np.zeros((ib, n)))]
    implementation.run("ttqrt", *tiles)
    for before, after in zip((r, a), tiles):
        below = ~np.triu(np.ones(before.shape, dtype=bool))
        np.testing.assert_array_equal(implementation.get(after)[below], before[below])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,k,nc,ib", [(1, 1, 1, 1), (7, 3, 5, 2), (3, 7, 4, 2), (100, 64, 30, 32),
                                       (64, 64, 64, 16), (40, 100, 20, 32), (6, 4, 0, 4), (0, 4, 4, 4)])
def test_ttmqrt(implementation, rng, layout, m, k, nc, ib):
    v, t = ttqrt_factors(rng, m, k, ib)
    compare(implementation, "ttmqrt", [v, t, random(rng, k + 2, nc), random(rng, m, nc)], layout, rng)


@pytest.mark.parametrize("side,trans", [("L", "N"), ("R", "N"), ("R", "T")])
@pytest.mark.parametrize("m,k,nc,ib", [(7, 3, 5, 2), (100, 64, 30, 32), (30, 40, 8, 7), (6, 4, 0, 4)])
def test_ttmqrt_options(implementation, rng, side, trans, m, k, nc, ib):
    v, t = ttqrt_factors(rng, m, k, ib)
    compare(implementation, "ttmqrt", [v, t, random(rng, *facing(side, k + 2, nc)), random(rng, *facing(side, m, nc))],
            "rows", rng, side, trans)


# Reflectors that are the identity: LAPACK's DLARFG gives tau = 0 when the column below
# the diagonal is exactly zero, and T then has a zero row and column there.
ZERO_COLUMNS = [0, 3, 4, 11]


def hessenberg(rng, m, n):
    """An upper Hessenberg tile with a zero below the diagonal in ZERO_COLUMNS: reflector j
    touches rows j and j+1 only, so tau = 0 exactly there, while reflector j-1 is nonzero in row j."""
    a = np.triu(random(rng, m, n), -1)
    for j in ZERO_COLUMNS:
        a[j + 1:, j] = 0.0
    return a


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("ib", [1, 4, 32])
@pytest.mark.parametrize("tile", ["identity 5x5", "identity 7x3", "identity 3x7", "hessenberg 13x12",
                                  "hessenberg 40x12"])
def test_geqrt_with_identity_reflectors(implementation, rng, layout, ib, tile):
    m, n = (int(x) for x in tile.split()[-1].split("x"))
    a = np.eye(m, n) if tile.startswith("identity") else hessenberg(rng, m, n)
    compare(implementation, "geqrt", [a, np.full((ib, n), np.nan)], layout, rng)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("ib", [1, 4, 32])
@pytest.mark.parametrize("tile", ["zero 5x4", "zero 3x7", "zero columns 9x12"])
@pytest.mark.parametrize("kernel", ["tpqrt", "ttqrt"])
def test_tpqrt_with_identity_reflectors(implementation, rng, layout, ib, tile, kernel):
    """A zero tile under any triangle, or zero columns under a diagonal, stay zero: tau = 0 there."""
    m, n = (int(x) for x in tile.split()[-1].split("x"))
    r = random(rng, n + 2, n)
    a = np.zeros((m, n))
    if tile.startswith("zero columns"):
        r[np.triu_indices(n, 1)] = 0.0
        a = random(rng, m, n)
        a[:, ZERO_COLUMNS] = 0.0
    compare(implementation, kernel, [r, a, np.full((ib, n), np.nan)], layout, rng)


def factors_with_identity_reflectors(rng, ib):
    """(V, T) of geqrt on a Hessenberg tile and of tpqrt over a tile with zero columns, from the
    CPU kernels: some tau are 0 in every block of ib."""
    v, t = np.asfortranarray(hessenberg(rng, 40, 13)), np.full((ib, 13), np.nan, order="F")
    cpu.geqrt(v, t)
    r, a = np.asfortranarray(np.triu(random(rng, 13, 13))), np.asfortranarray(random(rng, 9, 13))
    a[:, ZERO_COLUMNS] = 0.0
    r[np.triu_indices(13, 1)] = 0.0
    w = np.full((ib, 13), np.nan, order="F")
    cpu.tpqrt(r, a, w)
    return (v, t), (a, w)


@pytest.mark.parametrize("width", [4, 8, 512])  # groups of one block of 4, of two, of every block
@pytest.mark.parametrize("ib", [1, 4])
def test_reflectors_are_applied_in_groups_of_blocks(implementation, rng, monkeypatch, width, ib):
    """gemqrt, tpmqrt and ttmqrt merge narrow T blocks into groups of about APPLY_WIDTH reflectors."""
    monkeypatch.setattr(gpu_kernels, "APPLY_WIDTH", width)
    (v, t), (a, w) = factors_with_identity_reflectors(rng, ib)
    compare(implementation, "gemqrt", [v, t, random(rng, 40, 6)], "block", rng)
    compare(implementation, "tpmqrt", [a, w, random(rng, 15, 6), random(rng, 9, 6)], "block", rng)
    compare(implementation, "ttmqrt", [*ttqrt_factors(rng, 9, 13, ib), random(rng, 15, 6), random(rng, 9, 6)],
            "block", rng)


@pytest.mark.parametrize("side,trans", [("L", "N"), ("L", "T"), ("R", "N"), ("R", "T")])
def test_groups_of_blocks_are_applied_in_op_q_order(rng, monkeypatch, side, trans):
    monkeypatch.setattr(gpu_kernels, "APPLY_WIDTH", 4)
    (v, t), (a, w) = factors_with_identity_reflectors(rng, 2)
    compare(HostImplementation(), "gemqrt", [v, t, random(rng, *facing(side, 40, 6))], "rows", rng, side, trans)
    compare(HostImplementation(), "tpmqrt", [a, w, random(rng, *facing(side, 15, 6)), random(rng, *facing(side, 9, 6))],
            "rows", rng, side, trans)
    compare(HostImplementation(), "ttmqrt", [*ttqrt_factors(rng, 9, 13, 2), random(rng, *facing(side, 15, 6)),
                                             random(rng, *facing(side, 9, 6))], "rows", rng, side, trans)


def larft(V, tau):
    """LAPACK's T of reflectors V (unit lower) and tau, by DLARFT's recurrence (forward, columnwise)."""
    k = tau.size
    T = np.zeros((k, k))
    for i in range(k):
        T[:i, i] = -tau[i] * T[:i, :i] @ (V[:, :i].T @ V[:, i])
        T[i, i] = tau[i]
    return T


def test_an_identity_reflector_has_lapacks_zero_row_and_column_whatever_v_holds(rng):
    """tau_j = 0 means H_j = I whatever v_j holds below its 1 (LAPACK leaves it zero, a solver
    might not): T's row and column j are then zero, and the rest is the other reflectors' T."""
    m, k, nb = 15, 10, 4
    V = np.tril(random(rng, m, k), -1) + np.eye(m, k)
    tau = 1 + rng.random(k)  # DLARFG's tau is 0 or in [1, 2]
    tau[[0, 3, 4, 9]] = 0.0
    expected = np.full((nb, k), np.nan)
    for i in range(0, k, nb):
        end = min(i + nb, k)
        factor = larft(V[i:, i:end], tau[i:end])
        expected[:end - i, i:end] = np.where(np.triu(np.ones(factor.shape, dtype=bool)), factor, np.nan)
    padded, T = np.zeros(-(-k // nb) * nb), np.full((nb, k), np.nan, order="F")
    padded[:k] = tau
    HostImplementation().kernels._block_factors(padded, k, T, lambda i, end: V[i:, i:end])
    assert_matches(T, expected)


def test_qr_factorizations_make_no_host_round_trip(rng):
    """geqrt, tpqrt and ttqrt run on the device alone: a host fetch would wait for the GPU."""
    cuda = HostCuda()
    kernels = HostImplementation(cuda).kernels
    a = np.asfortranarray(random(rng, 100, 64))
    kernels.geqrt(a[:64], np.zeros((16, 64), order="F"))
    kernels.tpqrt(a[:64], a[64:], np.zeros((16, 64), order="F"))
    kernels.ttqrt(a[:64], a[64:], np.zeros((16, 64), order="F"))
    kernels.geqrt(np.asfortranarray(np.eye(6)), np.zeros((4, 6), order="F"))  # tau = 0 too
    assert cuda.fetches == 0
    kernels.potrf(np.asfortranarray(spd(rng, 8)))  # the count does see the fetches that there are
    assert cuda.fetches > 0


@pytest.mark.parametrize("kernel", ["geqrt", "tpqrt"])
def test_qr_of_a_rank_deficient_tile_is_one_the_cpu_kernels_can_apply(rng, kernel):
    """Below rank, the trailing reflectors come from rounding errors, so no two algorithms
    agree on them; V, R and T must still give A = Q·R with Q orthogonal, Q applied by the CPU."""
    m, n, rank, ib = 96, 48, 5, 16
    a = rng.standard_normal((m, rank)) @ rng.standard_normal((rank, n))
    t, q = np.zeros((ib, n), order="F"), np.asfortranarray(np.eye(m))
    if kernel == "geqrt":
        v = np.asfortranarray(a)
        HostImplementation().run("geqrt", v, t)
        cpu.gemqrt(v, t, q, "L", "N")
        r = np.triu(v)
    else:  # the triangle of a rank-deficient tile over another tile of that rank
        a[:n] = np.linalg.qr(a[:n], mode="r")
        top, v = np.asfortranarray(a[:n]), np.asfortranarray(a[n:])
        HostImplementation().run("tpqrt", top, v, t)
        cpu.tpmqrt(v, t, q[:n], q[n:], "L", "N")
        r = np.vstack([np.triu(top), np.zeros((m - n, n))])
    assert np.linalg.norm(a - q @ r) <= 1e-14 * n * np.linalg.norm(a)
    assert np.linalg.norm(np.eye(m) - q.T @ q) <= 1e-14 * n


# --------------------------------------------------------------------------- errors


def test_potrf_not_positive_definite_names_the_minor(implementation):
    a = implementation.put(np.asfortranarray(np.diag([4.0, 4.0, -1.0, 4.0, 4.0, 4.0])))
    with pytest.raises(KernelError, match=r"leading minor 3 of 6 is not positive"):
        implementation.run("potrf", a)


def test_potrf_reports_a_nan_the_solver_let_through():
    """Should cuSOLVER not flag a NaN, the diagonal check does, as LAPACK would."""
    cuda = HostCuda()
    cuda.cusolver.dpotrf = lambda handle, uplo, n, A, lda, work, lwork, info: None  # info stays 0
    a = np.asfortranarray(np.diag([4.0, 4.0, np.nan, 4.0]))
    with pytest.raises(KernelError, match=r"leading minor 3 of 4 is NaN: the tile holds a NaN"):
        HostImplementation(cuda).run("potrf", a)


@pytest.mark.parametrize("position", [0, 5, 40])
def test_getrf_nopiv_zero_pivot_names_the_position(implementation, rng, position):
    a = diagonally_dominant(rng, 64, 64)
    a[position, :] = a[:, position] = 0.0
    with np.errstate(divide="ignore", invalid="ignore"), \
            pytest.raises(KernelError, match=rf"U\({position}, {position}\) of the matrix it was given "
                                                     r"is exactly 0"):
        implementation.run("getrf_nopiv", implementation.put(np.asfortranarray(a)))


def test_lu_without_pivoting_is_one_solver_call_and_one_round_trip(rng):
    """cuSOLVER's getrf given no pivot array does the work; one fetch checks its info and pivots."""
    cuda = HostCuda()
    calls = []
    solver_getrf = cuda.cusolver.dgetrf
    cuda.cusolver.dgetrf = lambda *args: (calls.append(args[6]), solver_getrf(*args))
    a = diagonally_dominant(rng, 70, 50)
    expected = np.asfortranarray(a.copy())
    cpu.getrf_nopiv(expected)
    HostImplementation(cuda).run("getrf_nopiv", a)
    assert calls == [0] and cuda.fetches == 1
    np.testing.assert_allclose(a, expected, rtol=1e-12, atol=1e-12)


def test_getrf_nopiv_subnormal_pivot_does_not_overflow(implementation):
    a = implementation.put(np.asfortranarray([[1e-310, 1.0], [1e-310, 1.0 + 2.0**-20]]))
    implementation.run("getrf_nopiv", a)
    np.testing.assert_array_equal(implementation.get(a), [[1e-310, 1.0], [1.0, 2.0**-20]])


def test_shape_errors_are_the_cpu_kernels():
    kernels = HostImplementation().kernels
    with pytest.raises(ValueError, match="trsm: A of shape"):
        kernels.trsm(np.zeros((2, 2), order="F"), np.zeros((4, 3), order="F"))
    with pytest.raises(ValueError, match='gemqrt: trans must be one of "N", "T", got "C"'):
        kernels.gemqrt(np.zeros((4, 4), order="F"), np.zeros((2, 4), order="F"), np.zeros((4, 4), order="F"), "L", "C")
    with pytest.raises(ValueError, match="getrf: a panel's tiles have 3, 2 columns"):
        taking_matrices(kernels.getrf)(Panel([np.zeros((3, 3), order="F"), np.zeros((3, 2), order="F")], 0, True),
                                       np.zeros((1, 3), order="F"))
    with pytest.raises(ValueError, match="syr2k: B of shape"):
        kernels.syr2k(np.zeros((3, 2), order="F"), np.zeros((3, 3), order="F"), np.zeros((3, 3), order="F"))
    with pytest.raises(ValueError, match=r"ttqrt: R of shape \(2, 3\) has no 3x3 triangle"):
        kernels.ttqrt(np.zeros((2, 3), order="F"), np.zeros((2, 3), order="F"), np.zeros((2, 3), order="F"))
    with pytest.raises(ValueError, match="ttmqrt: C2 of shape"):
        kernels.ttmqrt(np.zeros((4, 3), order="F"), np.zeros((2, 3), order="F"), np.zeros((3, 2), order="F"),
                       np.zeros((3, 2), order="F"))
    with pytest.raises(ValueError, match="ttmqrt: shapes V"):
        kernels.ttmqrt(np.zeros((4, 3), order="F"), np.zeros((2, 3), order="F"), np.zeros((2, 2), order="F"),
                       np.zeros((4, 2), order="F"))


def test_python_signatures_are_the_cpu_kernels():
    """Same parameters, same defaults: a driver calls both alike."""
    def parameters(function):
        return [(p.name, p.default) for p in inspect.signature(function).parameters.values() if p.name != "self"]
    for name, kernel in cpu.CPU_KERNELS.items():
        assert parameters(getattr(TileKernels, name)) == parameters(kernel), name


def test_every_prelude_kernel_has_a_gpu_body():
    for name in cpu.CPU_KERNELS:
        assert getattr(TileKernels, name).__doc__, name


def test_warm_up_runs_every_prelude_kernel(monkeypatch):
    assert set(TileKernels.WARM_UP_SHAPES) == set(cpu.CPU_KERNELS)
    kernels, ran = HostImplementation().kernels, []
    for name in cpu.CPU_KERNELS:
        kernel = getattr(kernels, name)
        monkeypatch.setattr(kernels, name, lambda *tiles, name=name, kernel=kernel: (ran.append(name), kernel(*tiles)))
    kernels.warm_up(cpu.CPU_KERNELS)
    assert set(ran) == set(cpu.CPU_KERNELS)  # kernels call each other too


def test_without_nvmath_its_kernels_run_on_the_host(monkeypatch):
    """No nvmath-python: the kernels that need it have no GPU body (so they run on the CPU cores,
    as a user kernel without one does), the others warm up without it, and the run is told."""
    monkeypatch.setitem(sys.modules, "nvmath", None)  # what an absent package looks like to import
    names, notes = cupy_backend.prelude_on_gpu()
    assert set(names) == set(cpu.CPU_KERNELS) - set(cupy_backend.NVMATH_KERNELS)
    assert len(notes) == 1 and "nvmath-python is not installed, so symm, syr2k, trmm, trtri, lauum, laswp run on " \
        "the CPU cores" in notes[0] and "pip install 'nvmath-python[cu12]'" in notes[0]
    cuda = HostCuda()
    cuda.nvmath = None  # any use of nvmath fails
    HostImplementation(cuda).kernels.warm_up(names)


@needs_gpu
def test_prepare_readies_a_management_thread(gpu_implementation, rng):
    """After ``prepare`` on a fresh thread, that thread's kernels give the right answers."""
    import threading

    outcome = []

    def manage():
        gpu_implementation.backend.prepare(1)
        a, b, c = (random(rng, 64, 64) for _ in range(3))
        tiles = [gpu_implementation.put(x) for x in (a, b, c)]
        gpu_implementation.run("gemm", *tiles)
        gpu_implementation.backend.synchronize()
        outcome.append(np.abs(gpu_implementation.get(tiles[2]) - (c - a @ b.T)).max())

    thread = threading.Thread(target=manage)
    thread.start()
    thread.join(60)
    assert outcome and outcome[0] < 1e-12


# --------------------------------------------------------------------------- setup without a GPU


def test_missing_cupy_is_a_one_line_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # what an absent package looks like to import
    with pytest.raises(ValueError, match=r"^install CuPy for the cupy GPU backend: pip install -e '\.\[gpu\]' in "
                                         r"tiledsl's checkout \('\.\[gpu-cuda13\]' for CUDA 13\)$"):
        backend("cupy", 1)


def fake_cupy(count):
    """A module that passes for CuPy up to counting devices (``count`` an int or an exception)."""
    class CUDARuntimeError(RuntimeError):
        pass

    def get_device_count():
        if isinstance(count, int):
            return count
        raise CUDARuntimeError("cudaErrorNoDevice")

    runtime = types.SimpleNamespace(getDeviceCount=get_device_count, CUDARuntimeError=CUDARuntimeError)
    return types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime))


@pytest.mark.parametrize("gpus,count,message", [
    (2, 1, "--gpus 2 but CuPy sees 1 GPU"),
    (1, 0, "--gpus 1 but CuPy sees 0 GPUs"),
    (1, None, "--gpus 1 but CuPy sees 0 GPUs"),  # no driver
])
def test_too_few_gpus_is_a_one_line_error(monkeypatch, gpus, count, message):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(count))
    monkeypatch.setitem(sys.modules, "cupyx", types.SimpleNamespace())
    with pytest.raises(ValueError, match=f"^{message}$"):
        backend("cupy", gpus)


def test_cupy_is_imported_only_for_the_cupy_backend():
    code = ("import sys, tiledsl.runtime.devices, tiledsl.runtime.launch, tiledsl.runtime.cupy_backend; "
            "from tiledsl.runtime.backends import backend; backend('emulated', 1); "
            "assert 'cupy' not in sys.modules, 'cupy was imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)


@pytest.mark.skipif(GPUS > 0, reason="a GPU is present: the run would succeed")
def test_run_without_a_gpu_says_why_in_one_line():
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "programs/cholesky.tile", "--n", "64",
                          "--gpus", "1", "--gpu-backend", "cupy"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "CuPy" in lines[0], lines[0]


def test_the_cupy_api_the_backend_uses_exists():
    """Names only (no device needed): catches a CuPy release that renamed what we call."""
    cupy = pytest.importorskip("cupy")
    cupyx = importlib.import_module("cupyx")
    for owner, names in [(cupy, ["ndarray", "zeros", "empty", "array", "asfortranarray", "ascontiguousarray",
                                 "diagonal", "tril", "triu", "eye", "ones", "where", "tile"]),
                         (cupy.ndarray, ["reshape"]),
                         (cupy.cuda, ["Device", "Stream", "get_current_stream"]),
                         (cupy.cuda.device, ["get_cublas_handle", "get_cusolver_handle"]),
                         (cupy.cuda.runtime, ["getDeviceCount", "CUDARuntimeError", "memGetInfo"]),
                         (cupy, ["isfinite", "argwhere", "get_default_memory_pool"]),
                         (cupy.cuda.MemoryPointer, ["copy_from_host_async", "copy_to_host_async",
                                                    "copy_from_device_async"]),
                         (cupy.cuda.Stream, ["synchronize", "record", "wait_event"]),
                         (cupy.cuda.Event, ["done", "synchronize"]),
                         (cupyx, ["empty_pinned"])]:
        for name in names:
            assert hasattr(owner, name), f"{owner.__name__}.{name}"
    try:
        from cupy_backends.cuda.libs import cublas, cusolver
    except ImportError:
        pytest.skip("the CUDA libraries (cuBLAS, cuSOLVER) are not installed")
    for name in ["dgemm", "dsyrk", "dtrsm", "dger", "setPointerMode", "CUBLAS_OP_N", "CUBLAS_OP_T",
                 "CUBLAS_FILL_MODE_LOWER", "CUBLAS_FILL_MODE_UPPER", "CUBLAS_SIDE_LEFT", "CUBLAS_SIDE_RIGHT",
                 "CUBLAS_DIAG_NON_UNIT", "CUBLAS_DIAG_UNIT", "CUBLAS_POINTER_MODE_HOST"]:
        assert hasattr(cublas, name), name
    for name in ["dpotrf", "dpotrf_bufferSize", "dgetrf", "dgetrf_bufferSize", "dgeqrf", "dgeqrf_bufferSize"]:
        assert hasattr(cusolver, name), name


def test_the_nvmath_api_the_backend_uses_exists():
    """Names only, as above, for the routines that come from nvmath-python."""
    blas_library = pytest.importorskip("nvmath.bindings.cublas")
    solver_library = importlib.import_module("nvmath.bindings.cusolverDn")
    for owner, names in [(blas_library, ["create", "destroy", "set_stream", "set_pointer_mode", "PointerMode",
                                         "dsymm", "dsyr2k", "dtrmm"]),
                         (solver_library, ["create", "destroy", "set_stream", "dlaswp", "xtrtri", "xtrtri_buffer_size",
                                           "dlauum", "dlauum_buffer_size"])]:
        for name in names:
            assert hasattr(owner, name), f"{owner.__name__}.{name}"
    assert blas_library.PointerMode.HOST == 0


class FakeNvmathLibrary(types.ModuleType):
    """nvmath.bindings.cublas or .cusolverDn as far as handles go; ``log`` records the calls."""

    def __init__(self, name, log, pointer_modes):
        super().__init__(f"nvmath.bindings.{name}")
        self.made, self.log = 0, log
        if pointer_modes:
            self.PointerMode = types.SimpleNamespace(HOST=0)
            self.set_pointer_mode = lambda handle, mode: log.append(("pointer mode", handle, mode))

    def create(self):
        self.made += 1
        return f"{self.__name__.rsplit('.', 1)[1]} {self.made}"

    def set_stream(self, handle, stream):
        self.log.append(("stream", handle, stream))

    def destroy(self, handle):
        self.log.append(("destroy", handle))


def fake_cupy_device(state):
    """Just enough of CuPy for _CupyLibraries: the current device and stream come from ``state``."""
    cuda = types.SimpleNamespace(Device=lambda: types.SimpleNamespace(id=state["device"]),
                                 get_current_stream=lambda: types.SimpleNamespace(ptr=state["stream"]))
    return types.SimpleNamespace(cuda=cuda)


def test_nvmath_handles_are_per_thread_and_device_on_the_current_stream(monkeypatch):
    log, state = [], {"device": 0, "stream": 111}
    blas_library = FakeNvmathLibrary("cublas", log, pointer_modes=True)
    solver_library = FakeNvmathLibrary("cusolverDn", log, pointer_modes=False)
    for name, module in [("nvmath", types.ModuleType("nvmath")),
                         ("nvmath.bindings", types.ModuleType("nvmath.bindings")),
                         ("nvmath.bindings.cublas", blas_library), ("nvmath.bindings.cusolverDn", solver_library)]:
        monkeypatch.setitem(sys.modules, name, module)
    cuda = cupy_backend._CupyLibraries(fake_cupy_device(state), None, None)
    assert cuda.nvmath_cublas() == (blas_library, "cublas 1")
    state["stream"] = 222
    assert cuda.nvmath_cublas() == (blas_library, "cublas 1")  # the same handle, on the new stream
    assert log == [("pointer mode", "cublas 1", 0), ("stream", "cublas 1", 111), ("stream", "cublas 1", 222)]
    state["device"] = 1
    assert cuda.nvmath_cublas()[1] == "cublas 2"
    assert cuda.nvmath_cusolver() == (solver_library, "cusolverDn 1")
    other = []
    thread = threading.Thread(target=lambda: other.append(cuda.nvmath_cublas()[1]))
    thread.start()
    thread.join(10)
    assert other == ["cublas 3"]
    gc.collect()
    assert ("destroy", "cublas 3") in log  # with its thread
    assert not any(entry[0] == "destroy" and entry[1] != "cublas 3" for entry in log)


def test_missing_nvmath_is_a_one_line_kernel_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "nvmath", None)  # what an absent package looks like to import
    cuda = cupy_backend._CupyLibraries(fake_cupy_device({"device": 0, "stream": 1}), None, None)
    with pytest.raises(KernelError, match=r"needs NVIDIA's nvmath-python .*pip install 'nvmath-python\[cu12\]'"):
        cuda.nvmath_cusolver()


def test_pinned_buffers_are_reused_by_size_class():
    allocated = []

    class HostPinned:  # cupyx.empty_pinned's contract: a flat numpy array
        @staticmethod
        def empty_pinned(shape, dtype):
            allocated.append(shape[0])
            return np.empty(shape, dtype)
    pool = PinnedPool(HostPinned)
    first = pool.take(100)
    assert first.size == 128 and first.dtype == np.float64
    pool.give(first)
    assert pool.take(65) is first  # the same class of size: no new pinned memory
    assert pool.take(0).size == 1 and pool.take(129).size == 256
    assert allocated == [128, 1, 256]
    buffers = [pool.take(128) for _ in range(PinnedPool.KEEP + 3)]
    for buffer in buffers:
        pool.give(buffer)
    assert len({id(pool.take(128)) for _ in range(PinnedPool.KEEP + 1)} & {id(b) for b in buffers}) == PinnedPool.KEEP


# --------------------------------------------------------------------------- GPU only


@needs_gpu
@pytest.mark.parametrize("shape", [(300, 200), (1, 1), (0, 5), (5, 0)])
def test_copies_round_trip(gpu_implementation, rng, shape):
    gpu = gpu_implementation.backend
    a = rng.standard_normal(shape)
    on_gpu = gpu.to_device(a, 1)
    assert on_gpu.device.id == 0 and on_gpu.flags.f_contiguous
    back = gpu.to_host(gpu.copy(on_gpu, 1))
    assert isinstance(back, np.ndarray) and back.flags.f_contiguous
    np.testing.assert_array_equal(back, a)
    np.testing.assert_array_equal(gpu.to_host(gpu.start_zeros(shape, 1).result()), np.zeros(shape))


@needs_gpu
def test_copies_of_views(gpu_implementation, rng):
    gpu = gpu_implementation.backend
    a = rng.standard_normal((40, 30))
    on_gpu = gpu.to_device(a, 1)
    np.testing.assert_array_equal(gpu.to_host(on_gpu[5:20, 3:9]), a[5:20, 3:9])
    np.testing.assert_array_equal(gpu.to_host(gpu.copy(on_gpu[5:20, 3:9], 1)), a[5:20, 3:9])


@needs_gpu
def test_a_copy_waits_for_the_kernel_that_writes_its_tile(rng):
    """Kernels only launch; the copy back must still see their result (the out-stream waits)."""
    gpu = backend("cupy", 1)
    a, b = rng.standard_normal((2000, 2000)), rng.standard_normal((2000, 2000))
    c = np.zeros((2000, 2000), order="F")
    on_gpu = [gpu.to_device(x, 1) for x in (a, b, c)]
    for _ in range(3):  # long enough to still run when the copy is asked for
        gpu.kernels["gemm_nn"](*on_gpu)
    np.testing.assert_allclose(gpu.to_host(on_gpu[2]), -3 * a @ b, rtol=1e-10, atol=1e-8)
    gpu.synchronize()


@needs_gpu
def test_copies_under_way_in_both_directions_arrive_intact(rng):
    gpu = backend("cupy", 1)
    tiles = [rng.standard_normal((512, 384)) for _ in range(12)]
    on_gpu = [transfer.result() for transfer in [gpu.start_to_device(t, 1) for t in tiles]]
    downs = [gpu.start_to_host(a) for a in on_gpu]
    ups = [gpu.start_to_device(2 * t, 1) for t in tiles]  # while the copies back are under way
    for tile, down, up in zip(tiles, downs, ups):
        np.testing.assert_array_equal(down.result(), tile)
        np.testing.assert_array_equal(gpu.to_host(up.result()), 2 * tile)
        assert down.ready() and up.ready()


@needs_gpu
def test_free_memory_is_what_the_device_reports():
    import cupy

    gpu = backend("cupy", 1)
    with cupy.cuda.Device(0):
        free, total = cupy.cuda.runtime.memGetInfo()
    assert free <= gpu.free_memory(1) <= total


@pytest.mark.skipif(GPUS < 2, reason="needs two GPUs")
def test_copy_between_gpus(rng):
    gpu = backend("cupy", 2)
    a = rng.standard_normal((64, 48))
    second = gpu.copy(gpu.to_device(a, 1), 2)
    assert second.device.id == 1
    np.testing.assert_array_equal(gpu.to_host(second), a)


@needs_gpu
def test_a_kernel_refuses_host_memory(gpu_implementation):
    gpu = gpu_implementation.backend
    tile = gpu.to_device(np.eye(4), 1)
    with pytest.raises(TypeError, match="copy is missing"):
        gpu.kernels["gemm"](tile, tile, np.zeros((4, 4), order="F"))


TILES = {"cholesky": {"nb": 96}, "lu": {"nb": 96}, "qr": {"nb": 96},
         "hetero_cholesky": {"B": 160, "b": 48, "s": 3}, "hetero_qr": {"B": 160, "b": 48, "s": 3}}


@needs_gpu
@pytest.mark.parametrize("program", list(TILES))
def test_programs_on_a_real_gpu(compiled, program):
    options = Options(n=517, tiles=TILES[program], check=True, gpus=1, gpu_backend="cupy", watchdog=120)
    result = execute(compiled(f"programs/{program}.tile"), options)
    assert result.passed, result.residuals
    assert result.stats["device_copies"] > 0
