"""The emulated GPU backend (runtime/devices.py): its memory, copies that arrive after they start, and
the call convention of GPU kernels (tiles, panels, values) on the emulated and the CuPy backend."""
from __future__ import annotations

import contextlib
import os
import sys
import types

import numpy as np
import pytest

from tiledsl.runtime.backends import backend
from tiledsl.runtime.devices import EmulatedArray
from tiledsl.runtime.panels import Panel

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def gpus():
    return backend("emulated", 2)


def test_copies_round_trip_between_host_and_gpus(gpus):
    a = np.arange(12.0).reshape(3, 4)
    on_first = gpus.to_device(a, 1)
    assert isinstance(on_first, EmulatedArray) and on_first.device == 1
    on_second = gpus.copy(on_first, 2)
    assert on_second.device == 2
    back = gpus.to_host(on_second)
    assert back.flags.f_contiguous
    np.testing.assert_array_equal(back, a)
    a[0, 0] = -1.0  # the device copies are copies
    np.testing.assert_array_equal(gpus.to_host(on_first)[0], [0.0, 1.0, 2.0, 3.0])


def test_started_copies_arrive_in_the_order_they_started(gpus):
    tiles = [np.full((4, 4), float(i)) for i in range(50)]
    transfers = [gpus.start_to_device(tile, 1) for tile in tiles]
    results = [transfer.result() for transfer in transfers]
    assert all(transfer.ready() for transfer in transfers)
    assert [gpus.to_host(r)[0, 0] for r in results] == list(range(50))


def test_a_failing_copy_raises_where_it_is_waited_for(gpus):
    transfer = gpus.start_to_host(np.zeros((2, 2)))  # host memory where device memory should be
    with pytest.raises(AttributeError):
        transfer.result()
    assert transfer.ready()
    np.testing.assert_array_equal(gpus.to_host(gpus.start_zeros((2, 3), 1).result()), np.zeros((2, 3)))  # the engine goes on


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_copies_on_engines_of_its_own(gpus):
    """The parent's copy threads do not survive a fork: the child starts its own (it waited forever
    on copies queued to a thread that was not there)."""
    np.testing.assert_array_equal(gpus.to_host(gpus.to_device(np.eye(2), 1)), np.eye(2))  # the parent's threads
    child = os.fork()
    if child == 0:  # pragma: no cover (the child's outcome is its exit status)
        try:
            copied = backend("emulated", 1).start_to_device(np.eye(3), 1)
            os._exit(0 if copied._arrived.wait(10) and np.array_equal(copied.result()._array, np.eye(3)) else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_gpu_kernels_refuse_host_memory(gpus):
    tile = gpus.to_device(np.eye(3), 1)
    with pytest.raises(TypeError, match="copy is missing"):
        gpus.kernels["gemm"](tile, tile, np.zeros((3, 3)))


def test_an_in_argument_on_an_emulated_gpu_is_read_only_and_not_copied():
    """17.4: the engine hands `in` tiles to GPU kernels through ``read_only``, as on the host."""
    from tiledsl.runtime.devices import EmulatedBackend

    gpu = EmulatedBackend(1)
    a, c = gpu.to_device(np.eye(4), 1), gpu.to_device(np.ones((4, 4)), 1)
    fixed = gpu.read_only(a)
    assert np.shares_memory(fixed._array, a._array) and fixed.device == 1
    gpu.kernels["gemm"](fixed, fixed, c)  # the prelude reads its inputs only
    assert np.array_equal(gpu.to_host(c), np.ones((4, 4)) - np.eye(4))
    with pytest.raises(ValueError, match="read-only"):
        gpu.kernels["potrf"](fixed)


@pytest.mark.parametrize("part", [np.s_[:, :], np.s_[1:3, 0:2], np.s_[::2, :], np.s_[0:0, :]])
def test_an_in_argument_cannot_be_made_writable(part):
    """A plain read-only view of a writable tile took setflags(write=True), and a kernel's write through it
    changed an `in` tile silently."""
    from tiledsl.runtime.devices import read_only

    tile = np.asfortranarray(np.arange(16.0).reshape(4, 4))
    fixed = read_only(tile[part])
    assert np.array_equal(fixed, tile[part]) and fixed.strides == tile[part].strides
    assert not fixed.flags.writeable
    if fixed.size:  # nothing can be written into an empty one
        assert np.shares_memory(fixed, tile)
        with pytest.raises(ValueError):
            fixed.setflags(write=True)


# ---------------------------------------------------------------- the call convention on GPUs
def test_an_emulated_gpu_kernel_takes_panels_and_values_in_declaration_order(gpus):
    """Tiles and panels' tiles arrive unwrapped, values as they are; a host tile anywhere is refused."""
    got = []
    gpus.add_kernel("k", lambda *arguments: got.append(arguments))
    a, b, c = (gpus.to_device(np.full((2, 2), float(i)), 1) for i in range(3))
    gpus.kernels["k"](Panel([a, b], 1, False), 2.5, 3, "T", c)
    (panel, alpha, count, trans, tile), = got
    assert [p[0, 0] for p in panel] == [0.0, 1.0] and all(type(p) is np.ndarray for p in panel)
    assert isinstance(panel, Panel) and (panel.axis, panel.written) == (1, False)
    assert (alpha, count, trans) == (2.5, 3, "T") and type(tile) is np.ndarray and tile[0, 0] == 2.0
    with pytest.raises(TypeError, match=r"host array of shape \(2, 2\): a copy is missing"):
        gpus.kernels["k"](Panel([a, np.zeros((2, 2))], 0, False), 1.0, c)


class _FakeCupyArray:
    """A stand-in for a cupy.ndarray on CUDA device ``device``, its memory at ``ptr``."""

    def __init__(self, device, ptr=0):
        self.device = types.SimpleNamespace(id=device)
        self.data = types.SimpleNamespace(mem=types.SimpleNamespace(ptr=ptr))


class _FakeStream:
    def __init__(self, name):
        self.name, self.current, self.waited, self.recorded = name, False, [], 0

    def __enter__(self):
        self.current = True

    def __exit__(self, *_):
        self.current = False

    def record(self, event):
        assert event == "untimed event"  # cheaper to record and query than a timed one
        self.recorded += 1
        return f"{self.name}#{self.recorded}"

    def wait_event(self, event):
        self.waited.append(event)


def test_a_cupy_gpu_body_runs_on_its_tiles_device_and_compute_streams_with_panels_and_values():
    """CupyBackend._on_gpu without CuPy: the device is the one of every tile, panels' tiles included;
    the stream and the events waited for are StreamOrder's."""
    from tiledsl.runtime.cupy_backend import CupyBackend
    from tiledsl.runtime.streams import StreamOrder

    gpu = object.__new__(CupyBackend)  # no CUDA here: just what _on_gpu uses
    cuda = types.SimpleNamespace(Device=lambda device: contextlib.nullcontext(),
                                 Event=lambda disable_timing=False: "untimed event" if disable_timing else "timed")
    gpu._cupy = types.SimpleNamespace(ndarray=_FakeCupyArray, cuda=cuda)
    streams = [_FakeStream("s0"), _FakeStream("s1")]
    gpu._streams, gpu._orders, gpu.kernels = {"compute": {0: [], 1: streams}}, {1: StreamOrder(2)}, {}
    gpu.synchronous = False
    seen = []
    gpu.add_kernel("k", lambda *arguments: seen.append((arguments, [s.current for s in streams])))
    panel, tile, other = [_FakeCupyArray(1, 8), _FakeCupyArray(1, 16)], _FakeCupyArray(1, 24), _FakeCupyArray(1, 32)
    gpu.kernels["k"](panel, -1.0, "N", tile, written=[tile])
    assert seen == [((panel, -1.0, "N", tile), [False, True])]  # a tile new to the GPU: the next stream
    gpu.kernels["k"](other, written=[other])  # on the other stream
    gpu.kernels["k"](other, tile, written=[tile])  # on tile's writer's stream, after other's writer
    assert [s.current for s in streams] == [False, False] and [x[1] for x in seen[1:]] == [[True, False], [False, True]]
    assert streams[1].waited == ["s0#1"] and streams[0].waited == []
    assert gpu._orders[1].writer(24) == (1, "s1#2") and gpu._orders[1].latest() == ["s1#2", "s0#1"]
    with pytest.raises(TypeError, match=r"tiles on GPUs \[1, 2\]: a copy is missing"):
        gpu.kernels["k"]([_FakeCupyArray(0)], 1.0, tile)
    with pytest.raises(TypeError, match="host array of shape"):
        gpu.kernels["k"]([np.zeros(2)], 1.0, tile)


def test_array_module_is_numpy_or_cupy_imported_only_then(monkeypatch):
    from tiledsl.runtime import array_module

    assert array_module(np.eye(2)) is np and array_module([np.eye(2)]) is np
    stand_in = types.ModuleType("cupy")
    monkeypatch.setitem(sys.modules, "cupy", stand_in)
    assert array_module(type("ndarray", (), {"__module__": "cupy._core.core"})()) is stand_in
    with pytest.raises(TypeError, match="array_module takes a numpy or CuPy array, not EmulatedArray"):
        array_module(EmulatedArray(np.eye(2), 1))
