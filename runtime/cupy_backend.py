"""Real NVIDIA GPUs through CuPy: device memory, copies and the prelude kernels.

:class:`CupyBackend` is the ``cupy`` backend of :func:`.backends.backend` (DESIGN §4
items 5 and 7). GPU ``g`` of the runtime is CUDA device ``g - 1``; a tile there is a
Fortran-ordered float64 ``cupy.ndarray``. Each device has non-blocking streams:

* ``streams`` compute streams (``--gpu-streams``, 1 by default), on which the GPU's
  management thread launches kernels;
* an in-stream (``start_to_device``, ``empty``, the target side of ``start_copy``)
  and an out-stream (``start_to_host``, the source side of ``start_copy``), on
  which the engine's copy thread starts copies without waiting for them: each
  records a CUDA event the copy thread polls (:class:`StreamCopy`), and host
  data goes through pinned staging buffers (:class:`PinnedPool`) so that the DMA
  runs at full speed and overlaps the kernels and the other direction. Host
  tiles already pinned (``pinned``: those of an out-of-core run, up to
  :data:`PINNED_SHARE` of the host's memory) are copied from and into directly.

Kernels do not wait for the GPU: the management thread launches one, records a
CUDA event on its compute stream and goes on to the next task. Tasks on one GPU
are ordered by its compute streams and events (:class:`.streams.StreamOrder`: a
kernel waits for the kernels of other streams that wrote what it reads, or
touched what it writes). A copy from the device first makes its stream wait for
the event of the tile's last writer, so it never reads a tile before that kernel
has run; a copy or an allocation on the in-stream waits for the latest event of
every compute stream, so that it never reuses memory (CuPy's pool recycles freed
blocks) that a launched kernel still reads. A copy
is handed to other threads only once its event has completed;
:meth:`CupyBackend.synchronize` ends the timed run.
With ``synchronous`` set (traced runs), each kernel is waited for, so the trace
shows kernel times rather than launch times.

The kernels (:class:`TileKernels`) have the names and semantics of
:data:`.kernels.CPU_KERNELS` and work in place on views, because tiles move between
CPU and GPU workers in the middle of a factorization:

* BLAS-3 kernels, Cholesky, trtri and lauum are single cuBLAS/cuSOLVER calls on the
  views, with their leading dimensions (:class:`CublasOps`); a view that is not
  column-major is copied to a dense temporary and back. CuPy binds gemm, syrk, trsm,
  potrf, getrf and geqrf; symm, syr2k, trmm, laswp, trtri and lauum come from NVIDIA's
  nvmath-python, imported when first needed;
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

CuPy is imported only when a :class:`CupyBackend` is made. :class:`TileKernels`
and :class:`CublasOps` take the array module and the CUDA libraries as arguments,
so the tests also run them on numpy arrays with the host BLAS/LAPACK standing in
for cuBLAS/cuSOLVER (same pointers, leading dimensions and enums).
"""
from __future__ import annotations

import contextlib
import importlib
import threading

import numpy as np

from . import kernels as host
from .devices import Backend, copied_into, launch_keys, missing_copy, tiles_in
from .errors import KernelError
from .panels import Panel, taking_matrices
from .resources import meminfo
from .streams import StreamOrder
# The CPU kernels' argument checks, shared so that both raise the same messages.
from .kernels import (_SAFE_MINIMUM as SAFE_MINIMUM, _inner_block, add_absolute_sums, add_to_sum_of_squares,
                      check_number, check_option, gemm_dims, getrf_dims, laswp_range, merge_sums_of_squares,
                      not_positive_definite, potrf_dims, qr_apply_dims, rank_k_dims, record_pivots, require_square,
                      require_sums, require_tpmqrt, require_triangle, scale_by, singular_triangle, symm_dims,
                      triangular_dims)

#: Columns of an LU panel eliminated one at a time before a BLAS-3 update.
LU_PANEL = 32
#: Reflectors gemqrt, tpmqrt and ttmqrt apply at once: narrower T blocks (small ib) are merged up to this
#: width, since each block costs several launches and a narrow GEMM (H100, n = 16384, nb = 2048:
#: ib = 64 took 2.45 s, ib = 512 0.73 s)
APPLY_WIDTH = 512

_DOUBLE = np.dtype(np.float64).itemsize
#: The share of the host's memory that out-of-core tiles may pin (pinned pages cannot be swapped
#: out, and the rest of the process and the system need room too)
PINNED_SHARE = 0.5


# --------------------------------------------------------------------------- backend


class CupyBackend(Backend):
    """``gpus`` CUDA devices through CuPy; ValueError (one line) when they cannot be had."""

    name = "cupy"
    synchronous = False  # wait for each kernel (traced runs)

    def __init__(self, gpus: int, streams: int = 1):
        cupy, cupyx = _import_cupy()
        visible = _visible_devices(cupy)
        if visible < gpus:
            raise ValueError(f"--gpus {gpus} but CuPy sees {visible} GPU{'' if visible == 1 else 's'}")
        cublas, cusolver = _import_libraries()
        self.gpus, self.streams = gpus, streams
        self._cupy, self._cupyx = cupy, cupyx
        self._streams = {"in": {}, "out": {}, "compute": {}}  # compute: a list per device
        self._orders = {device: StreamOrder(streams) for device in range(gpus)}  # by CUDA device
        for device in range(gpus):
            try:
                with cupy.cuda.Device(device):
                    # non-blocking: none waits for work on the legacy default stream
                    for direction in ("in", "out"):
                        self._streams[direction][device] = cupy.cuda.Stream(non_blocking=True)
                    self._streams["compute"][device] = [cupy.cuda.Stream(non_blocking=True) for _ in range(streams)]
            except cupy.cuda.runtime.CUDARuntimeError as error:
                raise ValueError(f"GPU {device + 1} (CUDA device {device}) cannot be used: {error}") from None
        self._pinned = PinnedPool(cupyx)
        self._pinnable = int(PINNED_SHARE * (meminfo("MemTotal") or 0))  # bytes ``pinned`` may still pin
        self._tile_kernels = TileKernels(cupy, CublasOps(cupy, _CupyLibraries(cupy, cublas, cusolver)))
        self._bound, self.notes = prelude_on_gpu()
        # every panel as one matrix: a GPU's tiles are apart, gathered on the task's stream
        self.kernels = {name: self._on_gpu(taking_matrices(getattr(self._tile_kernels, name)), name)
                        for name in self._bound}

    def prepare(self, device: int) -> None:
        """Ready GPU ``device`` for the calling thread, its management thread, before a timed run.

        CuPy's cuBLAS and cuSOLVER handles belong to a thread, and making them, like the
        first launch of each CUDA module, costs tens of milliseconds: every kernel runs
        once here on tiny tiles so that the run does not pay for it.
        """
        stream = self._streams["compute"][device - 1][0]
        with self._cupy.cuda.Device(device - 1), stream:
            self._tile_kernels.warm_up(self._bound)
            stream.synchronize()

    # ---------------------------------------------------------------- memory and copies
    def pinned(self, host: np.ndarray) -> np.ndarray:
        """A pinned copy of host tile ``host`` while the pinning budget lasts and CUDA gives one, else ``host``."""
        if host.nbytes > self._pinnable or self._is_pinned(host):
            return host
        try:
            copy = self._cupyx.empty_pinned(host.shape, dtype=np.float64, order="F")
        except self._cupy.cuda.runtime.CUDARuntimeError:  # the driver refused: copies stage instead
            self._pinnable = 0
            return host
        np.copyto(copy, host)
        self._pinnable -= host.nbytes
        return copy

    def _is_pinned(self, host: np.ndarray) -> bool:
        """Whether ``host`` is a whole pinned allocation, column-major, that a DMA may use directly."""
        return isinstance(host.base, self._cupy.cuda.PinnedMemoryPointer) and host.flags.f_contiguous

    def start_to_device(self, host: np.ndarray, device: int) -> "StreamCopy":
        """Start copying host ``host`` to GPU ``device``: staged in a pinned buffer now unless it is pinned,
        DMA on the in-stream."""
        buffer = None if self._is_pinned(host) else self._pinned.take(host.size)
        if buffer is not None:
            np.copyto(_shaped(buffer, host.shape), host)
        with self._on_stream(device - 1, "in") as stream:
            result = self._cupy.empty(host.shape, order="F")
            if result.size:
                source = host if buffer is None else buffer
                result.data.copy_from_host_async(source.ctypes.data, result.nbytes, stream)
            arrived = self._record(stream)

        def finish():
            if buffer is not None:
                self._pinned.give(buffer)
            return result
        return StreamCopy(arrived, finish, keep=host)

    def start_to_host(self, array, into: np.ndarray | None = None) -> "StreamCopy":
        """Start copying a device tile to the host, on its device's out-stream: into ``into`` (the
        same shape) or a new array, directly if ``into`` is pinned, else through a pinned buffer."""
        direct = into is not None and self._is_pinned(into)
        buffer = None if direct else self._pinned.take(array.size)
        with self._on_stream(array.device.id, "out", array) as stream:
            dense = self._cupy.asfortranarray(array)  # a view is made dense on the out-stream first
            if dense.size:
                target = into if direct else buffer
                dense.data.copy_to_host_async(target.ctypes.data, dense.nbytes, stream)
            arrived = self._record(stream)

        def finish():
            if direct:
                return into
            staged = _shaped(buffer, array.shape)
            host = np.array(staged, order="F", copy=True) if into is None else copied_into(into, staged)
            self._pinned.give(buffer)
            return host
        return StreamCopy(arrived, finish, keep=dense)

    def write_into(self, array, host: np.ndarray) -> None:
        """Copy host ``host`` into device tile (or view) ``array``, after the kernels launched on its
        device, and wait: a GPU task a CPU worker ran (``--host-takes``) writes its results back."""
        with self._on_stream(array.device.id, "in") as stream:
            array[...] = self._cupy.asarray(host)
            stream.synchronize()

    def start_zeros(self, shape, device: int) -> "StreamCopy":
        """Start making a zeroed tile on GPU ``device``, on its in-stream."""
        with self._on_stream(device - 1, "in") as stream:
            zeros = self._cupy.zeros(shape, order="F")
            arrived = self._record(stream)
        return StreamCopy(arrived, lambda: zeros)

    def start_copy(self, array, device: int) -> "StreamCopy":
        """Start copying a device tile to GPU ``device`` (the same or another one), on its in-stream."""
        with self._on_stream(array.device.id, "out", array) as out:  # after the tile's writer
            source = self._cupy.asfortranarray(array)
            dense = self._record(out)
        with self._on_stream(device - 1, "in") as stream:
            stream.wait_event(dense)
            result = self._cupy.empty(array.shape, order="F")
            if result.size:
                result.data.copy_from_device_async(source.data, result.nbytes, stream)
            arrived = self._record(stream)
        return StreamCopy(arrived, lambda: result, keep=source)

    def free_memory(self, device: int) -> int:
        """Bytes GPU ``device`` can still give: free on the device plus CuPy's pool of freed blocks."""
        with self._cupy.cuda.Device(device - 1):  # CuPy's default pool is the current device's
            free, _ = self._cupy.cuda.runtime.memGetInfo()
            return free + self._cupy.get_default_memory_pool().free_bytes()

    def first_nonfinite(self, array) -> tuple | None:
        """(row, column, value) of the first NaN or infinity of a device tile, or None (--check-finite).

        Called by the GPU's management thread after a kernel, on the stream of the tile's writer.
        """
        cupy = self._cupy
        device = array.device.id
        writer = self._orders[device].writer(_memory_key(array))
        with cupy.cuda.Device(device), self._streams["compute"][device][0 if writer is None else writer[0]]:
            bad = ~cupy.isfinite(array.T)
            if not bool(bad.any()):
                return None
            col, row = (int(x) for x in cupy.argwhere(bad)[0])
            return row, col, float(array[row, col])

    def synchronize(self) -> None:
        """Wait until every kernel launched on every GPU has run (the end of a timed run)."""
        for device, streams in self._streams["compute"].items():
            with self._cupy.cuda.Device(device):
                for stream in streams:
                    stream.synchronize()

    def _record(self, stream):
        """An event recorded on ``stream`` now: without timing, which costs less to record and query."""
        return stream.record(self._cupy.cuda.Event(disable_timing=True))

    @contextlib.contextmanager
    def _on_stream(self, cuda_device: int, direction: str, source=None):
        """CUDA device ``cuda_device`` and its ``direction`` ("in" or "out") copy stream current:
        after the kernel that last wrote tile ``source``, or (none given) after every kernel
        launched on the device so far."""
        stream = self._streams[direction][cuda_device]
        order = self._orders[cuda_device]
        with self._cupy.cuda.Device(cuda_device), stream:
            if source is None:
                for event in order.latest():
                    stream.wait_event(event)
            else:
                writer = order.writer(_memory_key(source))
                if writer is not None:
                    stream.wait_event(writer[1])
            yield stream

    # ---------------------------------------------------------------- kernels
    def _on_gpu(self, kernel, name: str):
        """The GPU body of kernel ``name`` (the prelude's, or a user's ``NAME_gpu``: any callable, a
        ``functools.partial`` too): launched on its tiles' device and compute stream, so that it is
        ordered with the other kernels there."""
        def run(*arguments, written=None):
            device = self._device_of(arguments)
            reads, writes = launch_keys(list(tiles_in(arguments)), written, _memory_key)
            order = self._orders[device]
            number, waits = order.plan(reads, writes)
            stream = self._streams["compute"][device][number]
            with self._cupy.cuda.Device(device), stream:
                for event in waits:
                    stream.wait_event(event)
                returned = kernel(*arguments)  # the engine refuses a new array: a kernel writes in place
                if self.synchronous:
                    stream.synchronize()
                order.launched(number, self._record(stream), reads, writes)
            return returned
        run.__name__, run.__doc__ = name, kernel.__doc__
        return run

    def _device_of(self, arguments) -> int:
        """The CUDA device holding every tile of a kernel call (panels' tiles too; values aside);
        TypeError if one is elsewhere."""
        devices = set()
        for array in tiles_in(arguments):
            if not isinstance(array, self._cupy.ndarray):
                raise missing_copy(array)
            devices.add(array.device.id)
        if len(devices) > 1:
            raise TypeError(f"a GPU kernel got tiles on GPUs {sorted(d + 1 for d in devices)}: a copy is missing")
        return devices.pop()


def _memory_key(array) -> int:
    """The allocation a device tile (or a view of it) lies in: the start of its memory."""
    return array.data.mem.ptr


class StreamCopy:
    """A copy enqueued on a stream: arrived once the event recorded after it has.

    ``keep`` holds the device memory the copy reads until then: CuPy's pool would
    otherwise hand it out again while the DMA still reads it.
    """

    __slots__ = ("_arrived", "_finish", "_keep")

    def __init__(self, arrived, finish, keep=None):
        self._arrived, self._finish, self._keep = arrived, finish, keep

    def ready(self) -> bool:
        return self._arrived.done

    def result(self):
        self._arrived.synchronize()
        self._keep = None
        return self._finish()


class PinnedPool:
    """Pinned host buffers for copies under way, reused (pinning memory costs milliseconds).

    Buffers come in powers of two of doubles, and at most :data:`KEEP` of a size are
    kept free; the copy thread has at most ``exchange.IN_FLIGHT`` copies under way.
    """

    KEEP = 8

    def __init__(self, cupyx):
        self._cupyx = cupyx
        self._free: dict[int, list] = {}
        self._lock = threading.Lock()

    def take(self, size: int) -> np.ndarray:
        """A flat pinned float64 buffer of at least ``size`` elements."""
        capacity = 1 << max(int(size) - 1, 0).bit_length()
        with self._lock:
            free = self._free.get(capacity)
            if free:
                return free.pop()
        return self._cupyx.empty_pinned((capacity,), dtype=np.float64)

    def give(self, buffer: np.ndarray) -> None:
        with self._lock:
            free = self._free.setdefault(buffer.size, [])
            if len(free) < self.KEEP:
                free.append(buffer)


def _shaped(buffer: np.ndarray, shape) -> np.ndarray:
    """The first elements of a flat buffer as a Fortran-ordered array of ``shape``."""
    return buffer[:int(np.prod(shape))].reshape(shape, order="F")


def _import_cupy():
    """CuPy and cupyx, or ValueError saying how to install them."""
    try:
        import cupy
        import cupyx
    except ImportError:
        raise ValueError("install CuPy for the cupy GPU backend: pip install -e '.[gpu]' in tiledsl's checkout "
                         "('.[gpu-cuda13]' for CUDA 13)") from None
    return cupy, cupyx


def _visible_devices(cupy) -> int:
    """CUDA devices CuPy can use; 0 without a driver or a device."""
    try:
        return cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError:
        return 0


def _import_libraries():
    """CuPy's cuBLAS and cuSOLVER bindings, which load the CUDA libraries on import."""
    try:
        from cupy_backends.cuda.libs import cublas, cusolver
    except ImportError as error:
        raise ValueError(f"CuPy cannot load cuBLAS/cuSOLVER ({error}); "
                         f"install the CUDA libraries, e.g. pip install 'cupy-cuda12x[ctk]'") from None
    return cublas, cusolver


class _CupyLibraries:
    """What :class:`CublasOps` needs from CUDA: handles, addresses, host round trips.

    Everything runs on the current device and stream (the kernel's). The routines CuPy
    does not bind (cuBLAS symm, syr2k, trmm; cuSOLVER laswp, trtri, lauum) come from
    NVIDIA's nvmath-python, imported on first use, with handles of its own: it may
    have loaded its own copy of the CUDA libraries, where CuPy's handles mean nothing.
    """

    def __init__(self, cupy, cublas, cusolver):
        self._cupy, self.cublas, self.cusolver = cupy, cublas, cusolver
        self._threads = threading.local()  # this thread's nvmath handles, per (library, device)

    def cublas_handle(self) -> int:
        """This thread's cuBLAS handle for the current device, bound to the current stream."""
        return self._on_current_stream(self.cublas, self._cupy.cuda.device.get_cublas_handle())

    def cusolver_handle(self) -> int:
        """This thread's cuSOLVER handle for the current device, bound to the current stream."""
        return self._on_current_stream(self.cusolver, self._cupy.cuda.device.get_cusolver_handle())

    def _on_current_stream(self, library, handle: int) -> int:
        # CuPy's bindings rebind handles to the current stream themselves, but not every
        # release has done so for every routine; being explicit costs one cheap call.
        library.setStream(handle, self._cupy.cuda.get_current_stream().ptr)
        return handle

    def nvmath_cublas(self):
        """(nvmath.bindings.cublas, this thread's handle for the current device on the current stream)."""
        return self._nvmath("cublas")

    def nvmath_cusolver(self):
        """(nvmath.bindings.cusolverDn, this thread's handle for the current device on the current stream)."""
        return self._nvmath("cusolverDn")

    def _nvmath(self, name: str):
        library = _import_nvmath(name)
        handles = self._threads.__dict__.setdefault("handles", {})
        key = (name, self._cupy.cuda.Device().id)
        if key not in handles:
            handles[key] = _Handle(library)
        handle = handles[key].handle
        library.set_stream(handle, self._cupy.cuda.get_current_stream().ptr)
        return library, handle

    @staticmethod
    def address(array) -> int:
        """The device address of an array's first element (a view's own, not its base's)."""
        return array.data.ptr

    def fetch(self, array) -> np.ndarray:
        """A Fortran-ordered host copy of ``array`` once the current stream has computed it."""
        stream = self._cupy.cuda.get_current_stream()
        dense = self._cupy.asfortranarray(array)
        result = np.empty(array.shape, dtype=array.dtype, order="F")
        if result.size:
            # pageable memory: CUDA stages it, and the copy is ordered on the stream
            dense.data.copy_to_host_async(result.ctypes.data, result.nbytes, stream)
        stream.synchronize()
        return result


class _Handle:
    """An nvmath cuBLAS or cuSOLVER handle, destroyed with the thread that made it."""

    def __init__(self, library):
        self._library, self.handle = library, library.create()
        if hasattr(library, "PointerMode"):  # cuBLAS: alpha and beta are read from host memory
            library.set_pointer_mode(self.handle, library.PointerMode.HOST)

    def __del__(self):
        try:
            self._library.destroy(self.handle)
        except Exception:  # the CUDA context may be gone already at interpreter exit
            pass


#: The prelude kernels whose cuBLAS/cuSOLVER routines CuPy does not bind: nvmath-python's
NVMATH_KERNELS = ("symm", "syr2k", "trmm", "trtri", "lauum", "laswp")
_NVMATH_INSTALL = "pip install 'nvmath-python[cu12]' (or [cu13] beside cupy-cuda13x)"
_NVMATH_MISSING = ("NVIDIA's nvmath-python is not installed, so {kernels} run on the CPU cores "
                   "(their tiles copied there and back): " + _NVMATH_INSTALL)


def _import_nvmath(name: str):
    """``nvmath.bindings.<name>``; KernelError saying how to install it."""
    try:
        return importlib.import_module(f"nvmath.bindings.{name}")
    except ImportError:
        raise KernelError("this GPU kernel needs NVIDIA's nvmath-python for the cuBLAS/cuSOLVER routines "
                          f"CuPy does not bind: {_NVMATH_INSTALL}") from None


def prelude_on_gpu() -> tuple[list, list]:
    """The prelude kernels that have a GPU body here, and what a run should be told: without
    nvmath-python, the kernels that need it have none, so they run on the host."""
    unbound = () if _nvmath_importable() else NVMATH_KERNELS
    notes = [_NVMATH_MISSING.format(kernels=", ".join(unbound))] if unbound else []
    return [name for name in host.CPU_KERNELS if name not in unbound], notes


def _nvmath_importable() -> bool:
    """Whether nvmath-python's cuBLAS and cuSOLVER bindings import (they load the CUDA libraries)."""
    try:
        for name in ("cublas", "cusolverDn"):
            importlib.import_module(f"nvmath.bindings.{name}")
    except Exception:  # not installed, or its CUDA libraries do not load: either way, not usable
        return False
    return True


# --------------------------------------------------------------------------- BLAS on views


#: cudaDataType's CUDA_R_64F, for cuSOLVER's 64-bit API (Xtrtri)
_CUDA_R_64F = 1


class CublasOps:
    """In-place cuBLAS/cuSOLVER calls on views of column-major tiles.

    ``xp`` is the array module, ``cuda`` what :class:`_CupyLibraries` provides.
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
        ld = _leading_dimension(array)
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
        step, remainder = divmod(x.strides[0], _DOUBLE)
        if step > 0 and not remainder:
            return x, step
        return self.xp.ascontiguousarray(x), 1


def _leading_dimension(a) -> int | None:
    """The leading dimension of a column-major 2-D view, or None if it has none."""
    rows, cols = a.shape
    if a.size == 0:
        return max(1, rows)
    # a stride along an extent of 1 is never used, so it may be anything
    col_stride = a.strides[1] if cols > 1 else _DOUBLE * rows
    if (rows > 1 and a.strides[0] != _DOUBLE) or col_stride % _DOUBLE or col_stride < _DOUBLE * rows:
        return None
    return col_stride // _DOUBLE


def _host_double(value: float) -> np.ndarray:
    """A float64 in host memory for cuBLAS to read alpha or beta from (kept alive by the caller)."""
    return np.array(value, dtype=np.float64)


# --------------------------------------------------------------------------- the kernels


class TileKernels:
    """The prelude kernels on device tiles: same names, arguments and results as :mod:`.kernels`.

    ``xp`` is the array module of the tiles (CuPy), ``ops`` a :class:`CublasOps`.
    Every kernel works in place on views; a zero dimension makes it a no-op. The
    argument checks are the CPU kernels' own.
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
        nb = _inner_block(T, k, "geqrt")
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
        nb = _inner_block(T, n, "tpqrt")
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
        nb = _inner_block(T, n, "ttqrt")
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
