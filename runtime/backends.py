"""The GPU backend of a run, by name.

The factory sits above the backends' own modules: :mod:`.cupy_backend` builds on
:mod:`.devices` (the interface and the emulated backend), so neither imports the
other, and CuPy is imported only when the ``cupy`` backend is asked for.
"""
from __future__ import annotations

from .devices import EmulatedBackend

NAMES = ("emulated", "cupy")


def backend(name: str, gpus: int, streams: int = 1):
    """The backend called ``name`` for ``gpus`` GPUs of ``streams`` compute streams each; ValueError
    naming what is missing."""
    if name == "emulated":
        return EmulatedBackend(gpus, streams)
    if name == "cupy":
        from .cupy_backend import CupyBackend

        return CupyBackend(gpus, streams)
    raise ValueError(f"unknown GPU backend {name!r} (available: {', '.join(map(repr, NAMES))})")
