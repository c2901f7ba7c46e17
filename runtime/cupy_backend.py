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

The kernels are :class:`.gpu_kernels.TileKernels` on :class:`.cublas_ops.CublasOps`, given
CuPy and the CUDA libraries (:class:`_CupyLibraries`: handles bound to the current device and
stream, with nvmath-python's for the routines CuPy does not bind). CuPy is imported only when a
:class:`CupyBackend` is made.
"""
from __future__ import annotations

import contextlib
import importlib
import threading

import numpy as np

from . import kernels as host
from .cublas_ops import CublasOps
from .devices import Backend, copied_into, launch_keys, missing_copy, tiles_in
from .errors import KernelError
from .gpu_kernels import TileKernels
from .panels import taking_matrices
from .resources import meminfo
from .streams import StreamOrder

#: The share of the host's memory that out-of-core tiles may pin (pinned pages cannot be swapped
#: out, and the rest of the process and the system need room too)
PINNED_SHARE = 0.5


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
        run.__wrapped__ = kernel  # the kernel's own signature, for messages naming its parameters
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
