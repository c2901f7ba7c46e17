"""The emulated GPU backend (runtime/devices.py): its memory, and copies that arrive after they start."""
from __future__ import annotations

import numpy as np
import pytest

from tiledsl.runtime.devices import EmulatedArray, backend

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
    np.testing.assert_array_equal(gpus.to_host(gpus.empty((2, 3), 1)), np.zeros((2, 3)))  # the engine goes on


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
