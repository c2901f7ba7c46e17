"""GPUs as the runtime sees them: a backend per kind of device, and device arrays.

A backend gives the engine (DESIGN §4, §7): what a device can still hold
(``free_memory``) and host memory the copies read fastest (``pinned``, for the
tiles of an out-of-core run); copies that start and arrive later (``start_to_device``,
``start_to_host``, into a given host array or a new one, ``start_copy`` between
devices, and ``start_zeros``, a zeroed tile), each returning a transfer
with ``ready()`` (has it arrived? never waits) and ``result()`` (waits, then the
copy), which the copy thread overlaps; the same copies waited for
(``to_device``, ``to_host``, ``copy``, from :class:`Backend`);
``first_nonfinite`` for ``--check-finite``; ``synchronize`` (wait for every
kernel launched; ``synchronous`` asks for kernels that finish before returning,
for traces); and the tile kernels that run there (``kernels``, the prelude's
names, same arguments and semantics as :mod:`.kernels`, to which ``add_kernel``
adds the GPU bodies of user kernels). The backends (made by :func:`.backends.backend`):

* ``emulated``: "device memory" is numpy arrays wrapped in :class:`EmulatedArray`,
  which no host kernel accepts, so a missing copy fails loudly; its kernels run
  the CPU kernels on the wrapped arrays, and its copies run on two copy engines
  of their own (threads standing for a GPU's in- and out-streams), so they
  arrive after they are started, as on a GPU. Its kernels finish before they
  return, but they are placed on compute streams (``streams`` per GPU) and
  ordered by events as on a GPU (:mod:`.streams`), and vector clocks check that
  order: a kernel or a copy that a real GPU could run before, or beside, one it
  conflicts with fails the run (:class:`.streams.StreamRace`). CI runs every
  GPU code path with it.
* ``cupy``: real NVIDIA GPUs through CuPy (:mod:`.cupy_backend`), imported only
  when asked for, so that nothing else needs CuPy.

A GPU kernel is called as a CPU kernel is, with its arguments in declaration order
(and, from the engine, ``written=``: the tiles it writes, which decides what it waits
for on other streams; without it every tile is taken as written):
a tile is a device array, a panel a :class:`.panels.Panel` of them (a built-in kernel
takes it as one matrix), and a value (an int, a float, a one-character str) passes
through as it is. :func:`.panels.array_module` lets a user's GPU body be written once
for numpy (the emulated backend hands it host arrays) and CuPy.
"""
from __future__ import annotations

import itertools
import os
import queue
import threading

import numpy as np

from . import threadstart
from .kernels import CPU_KERNELS
from .panels import Panel
from .streams import StreamOrder, VectorClocks


class EmulatedArray:
    """A tile in an emulated GPU's memory: reachable only through copies and GPU kernels.
    ``memory`` names its allocation (views share it), never reused, unlike ``id``."""

    __slots__ = ("_array", "device", "memory")

    def __init__(self, array: np.ndarray, device: int, memory: int | None = None):
        self._array = array
        self.device = device
        self.memory = next(_ALLOCATIONS) if memory is None else memory

    @property
    def shape(self):
        return self._array.shape

    @property
    def nbytes(self) -> int:
        return self._array.nbytes

    def __getitem__(self, region) -> "EmulatedArray":
        return EmulatedArray(self._array[region], self.device, self.memory)


_ALLOCATIONS = itertools.count()


class Backend:
    """What every backend shares: the copies waited for (for inputs, outputs and checks, outside
    the copy thread), and ``prepare``."""

    notes: tuple | list = ()  # what a run on this backend should be told (kernels it cannot run on a GPU)

    def prepare(self, device: int) -> None:
        """Ready GPU ``device`` for the calling thread (its management thread) before a timed run."""

    def to_device(self, host: np.ndarray, device: int):
        """A copy of host ``host`` on GPU ``device``."""
        return self.start_to_device(host, device).result()

    def to_host(self, array) -> np.ndarray:
        """A Fortran-ordered host copy of a device tile."""
        return self.start_to_host(array).result()

    def copy(self, array, device: int):
        """A copy of a device tile on GPU ``device`` (the same or another one)."""
        return self.start_copy(array, device).result()

    def read_only(self, array):
        """``array`` (a tile) as a kernel's ``in`` argument: device arrays have no
        read-only flag (CuPy)."""
        return array

    def pinned(self, host: np.ndarray) -> np.ndarray:
        """``host``'s values in memory the backend copies from and to fastest (itself here)."""
        return host

    def add_kernel(self, name: str, body) -> None:
        """Run ``body`` (a user kernel's GPU body, same arguments) as GPU kernel ``name``."""
        self.kernels[name] = self._on_gpu(body, name)


class EmulatedBackend(Backend):
    """GPUs emulated on the host: separate memory, explicit copies, the CPU kernels, and
    ``streams`` compute streams per GPU whose order is checked (see the module)."""

    name = "emulated"
    synchronous = True  # its kernels finish before they return

    def __init__(self, gpus: int, streams: int = 1):
        self.gpus = gpus
        self.streams = streams
        self._orders = {device: StreamOrder(streams) for device in range(1, gpus + 1)}
        self._clocks = VectorClocks()
        self._lock = threading.Lock()  # the management threads launch, the copy thread copies
        self.kernels = {name: self._on_gpu(kernel, name) for name, kernel in CPU_KERNELS.items()}

    def _on_gpu(self, kernel, name: str):
        """The emulated GPU body of kernel ``name`` (:func:`_on_device`), placed on a stream of its tiles'
        GPU (``kernel``: any callable, a ``functools.partial`` too, which has no ``__name__``)."""
        body = _on_device(kernel)

        def run(*arguments, written=None):
            tiles = list(tiles_in(arguments))
            if not tiles or not all(isinstance(tile, EmulatedArray) for tile in tiles):
                return body(*arguments)  # which says what is missing
            reads, writes = launch_keys(tiles, written, _memory_key)
            device = tiles[0].device
            order = self._orders[device]
            with self._lock:
                stream, waits = order.plan(reads, writes)
                for event in waits:
                    self._clocks.wait((device, stream), event)
                self._clocks.access((device, stream), reads, writes, f"kernel {name}")
            returned = body(*arguments)
            with self._lock:
                order.launched(stream, self._clocks.record((device, stream)), reads, writes)
            return returned
        run.__name__ = name
        run.__wrapped__ = body  # the kernel's own signature, for messages naming its parameters
        return run

    def _copy_from(self, array: EmulatedArray, copy, engine: str = "out") -> "CopyUnderWay":
        """Start ``copy`` (a job of copy engine ``engine``) reading ``array``, ordered on its GPU's
        out-stream after the tile's last writer. Host memory where a device tile should be fails when
        waited for, as the copy runs."""
        if not isinstance(array, EmulatedArray):
            return _COPY_ENGINES[engine].start(copy)
        key, stream = _memory_key(array), (array.device, "out")
        with self._lock:
            writer = self._orders[array.device].writer(key)
            if writer is not None:
                self._clocks.wait(stream, writer[1])
            self._clocks.access(stream, (key,), (), f"a copy from GPU {array.device}")
        return self._arrived(_COPY_ENGINES[engine].start(copy), stream)

    def _arrived(self, transfer: "CopyUnderWay", stream) -> "CopyUnderWay":
        """``transfer``, which tells the clocks when the host sees it arrive (what is launched after
        is ordered after it)."""
        event = self._clocks.record(stream)
        transfer.on_arrival = lambda: self._synchronized(event)
        return transfer

    def _synchronized(self, event) -> None:
        with self._lock:
            self._clocks.host_saw(event)

    def synchronize(self) -> None:
        """Nothing is left running: the emulated kernels are synchronous."""

    def start_to_device(self, host: np.ndarray, device: int) -> "CopyUnderWay":
        return _COPY_ENGINES["in"].start(lambda: EmulatedArray(np.array(host, order="F", copy=True), device))

    def start_to_host(self, array: EmulatedArray, into: np.ndarray | None = None) -> "CopyUnderWay":
        if into is None:
            return self._copy_from(array, lambda: np.array(array._array, order="F", copy=True))
        return self._copy_from(array, lambda: copied_into(into, array._array))

    def start_zeros(self, shape, device: int) -> "CopyUnderWay":
        return _COPY_ENGINES["in"].start(lambda: EmulatedArray(np.zeros(shape, order="F"), device))

    def start_copy(self, array: EmulatedArray, device: int) -> "CopyUnderWay":
        return self._copy_from(array, lambda: EmulatedArray(np.array(array._array, order="F", copy=True), device),
                               "in")

    def write_into(self, array: EmulatedArray, host: np.ndarray) -> None:
        """Copy host ``host`` into device tile (or view) ``array`` and wait (a GPU task a CPU worker ran)."""
        stream = (array.device, "in")
        with self._lock:
            for event in self._orders[array.device].latest():
                self._clocks.wait(stream, event)
            self._clocks.access(stream, (), (_memory_key(array),), f"a copy to GPU {array.device}")
        self._arrived(_COPY_ENGINES["in"].start(lambda: np.copyto(array._array, host)), stream).result()

    def read_only(self, array):
        return EmulatedArray(read_only(array._array), array.device, array.memory)

    def free_memory(self, device: int) -> None:
        """Emulated devices share the host's memory, which the host's check covers."""
        return None

    def first_nonfinite(self, array: EmulatedArray):
        return first_nonfinite(array._array)


class CopyUnderWay:
    """A copy started on an emulated copy engine."""

    __slots__ = ("_arrived", "_data", "_error", "on_arrival")

    def __init__(self):
        self._arrived = threading.Event()
        self._data = self._error = None
        self.on_arrival = None  # called once the host sees the copy arrived

    def ready(self) -> bool:
        if not self._arrived.is_set():
            return False
        self._seen()
        return True

    def result(self):
        self._arrived.wait()
        self._seen()
        if self._error is not None:
            raise self._error
        return self._data

    def _seen(self) -> None:
        seen, self.on_arrival = self.on_arrival, None
        if seen is not None:
            seen()


class _CopyEngine:
    """An emulated GPU copy engine: a thread that makes the copies started on it, in order (a stream)."""

    def __init__(self, name: str):
        self.name = name
        self.forget()

    def forget(self) -> None:
        """No thread, no copies queued: a forked child has neither its parent's thread nor a use for
        what it had queued (a started thread would be taken as alive, and its copies never made)."""
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self, make) -> CopyUnderWay:
        """``make()`` run on the engine's thread; its result is the transfer's."""
        with self._lock:
            if self._thread is None:  # started on first use: most processes never copy
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                threadstart.start(self._thread)
        transfer = CopyUnderWay()
        self._jobs.put((make, transfer))
        return transfer

    def _run(self) -> None:
        while True:
            make, transfer = self._jobs.get()
            try:
                transfer._data = make()
            except BaseException as error:  # handed to whoever waits for the copy (17.3)
                transfer._error = error
            transfer._arrived.set()


# Shared by every emulated backend of the process: they hold no state of a run.
_COPY_ENGINES = {"in": _CopyEngine("emulated-copy-in"), "out": _CopyEngine("emulated-copy-out")}


def _forget_copy_engines() -> None:
    for engine in _COPY_ENGINES.values():
        engine.forget()


os.register_at_fork(after_in_child=_forget_copy_engines)


def copied_into(into: np.ndarray, array: np.ndarray) -> np.ndarray:
    """``into``, given ``array``'s values (a copy to the host into a given array)."""
    np.copyto(into, array)
    return into


def read_only(array):
    """A read-only view of ``array`` (no copy), for a kernel's ``in`` argument, which the kernel cannot
    make writable: a plain view of a writable array took ``setflags(write=True)``, and the write then
    changed an ``in`` tile silently. A view through a read-only buffer refuses it (an empty array,
    which nothing can be written into, keeps its strides as a plain view)."""
    if not array.size:
        view = array.view()
        view.flags.writeable = False
        return view
    return np.asarray(memoryview(array).toreadonly())


def first_nonfinite(array: np.ndarray) -> tuple | None:
    """(row, column, value) of the first NaN or infinity of a host tile (column-major order), or None."""
    if np.isfinite(array).all():
        return None
    col, row = np.argwhere(~np.isfinite(array.T))[0]
    return int(row), int(col), float(array[row, col])


def is_value(argument) -> bool:
    """Whether a kernel argument is a value (an int, a float, a char), not a tile or a panel."""
    return isinstance(argument, (int, float, str, np.generic))


def tiles_in(arguments):
    """The tiles among a kernel's arguments: tile arguments and every tile of each panel."""
    for argument in arguments:
        if isinstance(argument, list):
            yield from argument
        elif not is_value(argument):
            yield argument


def launch_keys(tiles: list, written, key) -> tuple[list, list]:
    """(read, written) keys of a kernel's ``tiles`` (panels' spread out), ``written`` being the
    engine's list of the tiles it writes (None: all of them); a tile both read and written is written."""
    keys = list(dict.fromkeys(key(tile) for tile in tiles))
    if written is None:
        return [], keys
    writes = list(dict.fromkeys(key(tile) for tile in tiles_in(written)))
    return [k for k in keys if k not in writes], writes


def _memory_key(array: EmulatedArray) -> int:
    """The emulated allocation a device tile (or a view of it) lies in."""
    return array.memory


def missing_copy(array) -> TypeError:
    """The error of a GPU kernel given a tile that is not in its GPU's memory."""
    return TypeError(f"a GPU kernel got a host array of shape {np.shape(array)}: a copy is missing")


def _on_device(kernel):
    """The emulated GPU body of a kernel: the same code on the wrapped arrays, values as they are.
    What it returns goes back to the engine (which refuses a new array: a kernel writes in place),
    None standing for a view of one of its tiles (alone, or in a tuple, list or dict), as the arrays it
    returns are unwrapped ones."""
    def run(*arguments):
        unwrapped = [_unwrapped_argument(argument) for argument in arguments]
        returned = kernel(*unwrapped)
        for given, seen in zip(arguments, unwrapped):
            if isinstance(given, Panel) and _list_changed(given, seen):
                given[:] = seen  # what the body left in its panel's list, which the engine refuses as a CPU body's
        tiles = tiles_in(unwrapped)

        def new(result):  # a view of a tile is none of the engine's concern: a new array is
            return None if isinstance(result, np.ndarray) and any(np.shares_memory(result, t) for t in tiles) \
                else result
        if isinstance(returned, dict):
            return {key: new(value) for key, value in returned.items()}
        return type(returned)(map(new, returned)) if type(returned) in (tuple, list) else new(returned)
    run.__wrapped__ = kernel
    return run


def _list_changed(panel: Panel, seen: list) -> bool:
    """The body's list of ``panel``'s arrays no longer lists them (``P[k] = P[k] * 2`` for ``P[k] *= 2``)."""
    return len(seen) != len(panel) or any(not isinstance(tile, EmulatedArray) or array is not tile._array
                                          for array, tile in zip(seen, panel))


def _unwrapped_argument(argument):
    """A kernel argument as the wrapped code sees it: tiles unwrapped (a panel's too), values as they are."""
    if isinstance(argument, Panel):
        return argument.like([_unwrapped(tile) for tile in argument])
    return argument if is_value(argument) else _unwrapped(argument)


def _unwrapped(tile) -> np.ndarray:
    if not isinstance(tile, EmulatedArray):
        raise missing_copy(tile)
    return tile._array
