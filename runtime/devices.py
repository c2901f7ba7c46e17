"""GPUs as the runtime sees them: a backend per kind of device, and device arrays.

A backend gives the engine three things (DESIGN §4, §7): memory on a device
(``empty``, ``to_device``, ``free_memory``), copies back to the host (``to_host``),
``first_nonfinite`` for ``--check-finite``, ``synchronize`` (wait for every
kernel launched; ``synchronous`` asks for kernels that finish before returning,
for traces), and the tile
kernels that run there (``kernels``, the prelude's names, same arguments and
semantics as :mod:`.kernels`). The backends:

* ``emulated``: "device memory" is numpy arrays wrapped in :class:`EmulatedArray`,
  which no host kernel accepts, so a missing copy fails loudly; its kernels run
  the CPU kernels on the wrapped arrays. CI runs every GPU code path with it.
* ``cupy``: real NVIDIA GPUs through CuPy (:mod:`.cupy_backend`), imported only
  when asked for, so that nothing else needs CuPy.
"""
from __future__ import annotations

import numpy as np

from .kernels import CPU_KERNELS


class EmulatedArray:
    """A tile in an emulated GPU's memory: reachable only through copies and GPU kernels."""

    __slots__ = ("_array", "device")

    def __init__(self, array: np.ndarray, device: int):
        self._array = array
        self.device = device

    @property
    def shape(self):
        return self._array.shape

    @property
    def nbytes(self) -> int:
        return self._array.nbytes

    def __getitem__(self, region) -> "EmulatedArray":
        return EmulatedArray(self._array[region], self.device)


class EmulatedBackend:
    """GPUs emulated on the host: separate memory, explicit copies, the CPU kernels."""

    name = "emulated"
    synchronous = True  # its kernels finish before they return

    def synchronize(self) -> None:
        """Nothing is left running: the emulated kernels are synchronous."""

    def __init__(self, gpus: int):
        self.gpus = gpus
        self.kernels = {name: _on_device(kernel) for name, kernel in CPU_KERNELS.items()}

    def empty(self, shape, device: int) -> EmulatedArray:
        return EmulatedArray(np.zeros(shape, order="F"), device)

    def to_device(self, host: np.ndarray, device: int) -> EmulatedArray:
        return EmulatedArray(np.array(host, order="F", copy=True), device)

    def to_host(self, array: EmulatedArray) -> np.ndarray:
        return np.array(array._array, order="F", copy=True)

    def free_memory(self, device: int) -> None:
        """Emulated devices share the host's memory, which the host's check covers."""
        return None

    def first_nonfinite(self, array: EmulatedArray):
        return first_nonfinite(array._array)

    def copy(self, array: EmulatedArray, device: int) -> EmulatedArray:
        """A device-to-device copy."""
        return EmulatedArray(np.array(array._array, order="F", copy=True), device)


def first_nonfinite(array: np.ndarray) -> tuple | None:
    """(row, column, value) of the first NaN or infinity of a host tile (column-major order), or None."""
    if np.isfinite(array).all():
        return None
    col, row = np.argwhere(~np.isfinite(array.T))[0]
    return int(row), int(col), float(array[row, col])


def _on_device(kernel):
    """The emulated GPU body of a CPU kernel: the same code on the wrapped arrays."""
    def run(*arrays):
        for array in arrays:
            if not isinstance(array, EmulatedArray):
                raise TypeError(f"a GPU kernel got a host array of shape {np.shape(array)}: a copy is missing")
        kernel(*[array._array for array in arrays])
    run.__name__ = kernel.__name__
    return run


def backend(name: str, gpus: int):
    """The backend called ``name`` for ``gpus`` GPUs; ValueError naming what is missing."""
    if name == "emulated":
        return EmulatedBackend(gpus)
    if name == "cupy":
        from .cupy_backend import CupyBackend

        return CupyBackend(gpus)
    raise ValueError(f"unknown GPU backend {name!r} (available: 'emulated', 'cupy')")
