"""Tests of the CuPy backend (runtime/cupy_backend.py) against the CPU kernels.

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
import importlib
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from tiledsl.runtime import Options, blas, cupy_backend, execute
from tiledsl.runtime import kernels as cpu
from tiledsl.runtime.cupy_backend import CublasOps, PinnedPool, TileKernels
from tiledsl.runtime.backends import backend
from tiledsl.runtime.errors import KernelError

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


class FakeCusolver:
    """cuSOLVER's potrf and geqrf as CuPy binds them, done by the host LAPACK; info written to "device" memory."""

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

    def dgeqrf(self, handle, m, n, A, lda, tau, work, lwork, info):
        _check_ld(lda, m)
        assert lwork == self.geqrf_work(n) and work and tau
        ctypes.c_int32.from_address(info).value = blas.dgeqrf(
            m, n, ctypes.c_void_p(A), lda, ctypes.c_void_p(tau), ctypes.c_void_p(work), lwork)


class HostCuda:
    """What CublasOps needs from CUDA, played by the host: "device" arrays are numpy arrays."""

    def __init__(self):
        self.cublas, self.cusolver = FakeCublas(), FakeCusolver()
        self.fetches = 0  # host round trips: each would wait for the GPU

    def cublas_handle(self):
        return 1

    def cusolver_handle(self):
        return 2

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
        getattr(self.kernels, name)(*args)


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


def compare(implementation, name, arrays, layout, rng, *extra):
    """Run kernel ``name`` on the CPU and on ``implementation``; every argument must agree."""
    expected = [np.asfortranarray(a.copy()) for a in arrays]
    getattr(cpu, name)(*expected, *extra)
    placed = [Placed(a, layout, rng) for a in arrays]
    devices = [implementation.put(p.parent) for p in placed]
    implementation.run(name, *[d[p.region] for d, p in zip(devices, placed)], *extra)
    for p, device, e in zip(placed, devices, expected):
        p.check(implementation.get(device), e)


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


# --------------------------------------------------------------------------- LU


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


@pytest.mark.parametrize("trans", ["N", "T"])
@pytest.mark.parametrize("m,nv,nc,ib", [(7, 3, 5, 2), (100, 64, 30, 32), (30, 40, 8, 7)])
def test_gemqrt_apply_both_ways(rng, trans, m, nv, nc, ib):
    v, t = geqrt_factors(rng, m, nv, ib)
    compare(HostImplementation(), "gemqrt_apply", [v, t, random(rng, m, nc)], "block", rng, trans)


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


@pytest.mark.parametrize("trans", ["N", "T"])
@pytest.mark.parametrize("m,k,nc,ib", [(7, 3, 5, 2), (100, 64, 30, 32), (30, 40, 8, 7)])
def test_tpmqrt_apply_both_ways(rng, trans, m, k, nc, ib):
    v, t = tpqrt_factors(rng, m, k, ib)
    compare(HostImplementation(), "tpmqrt_apply", [v, t, random(rng, k + 2, nc), random(rng, m, nc)],
            "rows", rng, trans)


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
def test_tpqrt_with_identity_reflectors(implementation, rng, layout, ib, tile):
    """A zero tile under any triangle, or zero columns under a diagonal, stay zero: tau = 0 there."""
    m, n = (int(x) for x in tile.split()[-1].split("x"))
    r = random(rng, n + 2, n)
    a = np.zeros((m, n))
    if tile.startswith("zero columns"):
        r[np.triu_indices(n, 1)] = 0.0
        a = random(rng, m, n)
        a[:, ZERO_COLUMNS] = 0.0
    compare(implementation, "tpqrt", [r, a, np.full((ib, n), np.nan)], layout, rng)


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
    """gemqrt and tpmqrt merge narrow T blocks into groups of about APPLY_WIDTH reflectors."""
    monkeypatch.setattr(cupy_backend, "APPLY_WIDTH", width)
    (v, t), (a, w) = factors_with_identity_reflectors(rng, ib)
    compare(implementation, "gemqrt", [v, t, random(rng, 40, 6)], "block", rng)
    compare(implementation, "tpmqrt", [a, w, random(rng, 15, 6), random(rng, 9, 6)], "block", rng)


@pytest.mark.parametrize("trans", ["N", "T"])
def test_groups_of_blocks_are_applied_in_op_q_order(rng, monkeypatch, trans):
    monkeypatch.setattr(cupy_backend, "APPLY_WIDTH", 4)
    (v, t), (a, w) = factors_with_identity_reflectors(rng, 2)
    compare(HostImplementation(), "gemqrt_apply", [v, t, random(rng, 40, 6)], "rows", rng, trans)
    compare(HostImplementation(), "tpmqrt_apply", [a, w, random(rng, 15, 6), random(rng, 9, 6)], "rows", rng, trans)


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
    """geqrt and tpqrt run on the device alone: a host fetch would wait for the GPU."""
    cuda = HostCuda()
    kernels = HostImplementation(cuda).kernels
    a = np.asfortranarray(random(rng, 100, 64))
    kernels.geqrt(a[:64], np.zeros((16, 64), order="F"))
    kernels.tpqrt(a[:64], a[64:], np.zeros((16, 64), order="F"))
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
        cpu.gemqrt_apply(v, t, q, "N")
        r = np.triu(v)
    else:  # the triangle of a rank-deficient tile over another tile of that rank
        a[:n] = np.linalg.qr(a[:n], mode="r")
        top, v = np.asfortranarray(a[:n]), np.asfortranarray(a[n:])
        HostImplementation().run("tpqrt", top, v, t)
        cpu.tpmqrt_apply(v, t, q[:n], q[n:], "N")
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
    with pytest.raises(KernelError, match=r"leading minor 3 of 4 is not positive"):
        HostImplementation(cuda).run("potrf", a)


@pytest.mark.parametrize("position", [0, 5, 40])
def test_getrf_nopiv_zero_pivot_names_the_position(implementation, rng, position):
    a = diagonally_dominant(rng, 64, 64)
    a[position, :] = a[:, position] = 0.0
    with np.errstate(divide="ignore", invalid="ignore"), \
            pytest.raises(KernelError, match=rf"U\[{position}, {position}\] is exactly 0"):
        implementation.run("getrf_nopiv", implementation.put(np.asfortranarray(a)))


def test_getrf_nopiv_subnormal_pivot_does_not_overflow(implementation):
    a = implementation.put(np.asfortranarray([[1e-310, 1.0], [1e-310, 1.0 + 2.0**-20]]))
    implementation.run("getrf_nopiv", a)
    np.testing.assert_array_equal(implementation.get(a), [[1e-310, 1.0], [1.0, 2.0**-20]])


def test_shape_errors_are_the_cpu_kernels():
    kernels = HostImplementation().kernels
    with pytest.raises(ValueError, match="trsm: L of shape"):
        kernels.trsm(np.zeros((2, 2), order="F"), np.zeros((4, 3), order="F"))
    with pytest.raises(ValueError, match="gemqrt: trans must be"):
        kernels.gemqrt_apply(np.zeros((4, 4), order="F"), np.zeros((2, 4), order="F"),
                             np.zeros((4, 4), order="F"), "C")


def test_every_prelude_kernel_has_a_gpu_body():
    for name in cpu.CPU_KERNELS:
        assert getattr(TileKernels, name).__doc__, name


def test_warm_up_runs_every_prelude_kernel(monkeypatch):
    assert set(TileKernels.WARM_UP_SHAPES) == set(cpu.CPU_KERNELS)
    kernels, ran = HostImplementation().kernels, []
    for name in cpu.CPU_KERNELS:
        kernel = getattr(kernels, name)
        monkeypatch.setattr(kernels, name, lambda *tiles, name=name, kernel=kernel: (ran.append(name), kernel(*tiles)))
    kernels.warm_up()
    assert set(ran) == set(cpu.CPU_KERNELS)  # kernels call each other too


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
    with pytest.raises(ValueError, match=r"^install tiledsl\[gpu\] \(CuPy\) for --gpu-backend cupy$"):
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
    for name in ["dpotrf", "dpotrf_bufferSize", "dgeqrf", "dgeqrf_bufferSize"]:
        assert hasattr(cusolver, name), name


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
    np.testing.assert_array_equal(gpu.to_host(gpu.empty(shape, 1)), np.zeros(shape))


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
