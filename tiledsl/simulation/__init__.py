"""``tiledsl simulate``: a run predicted without running its kernels (issue 15).

The real scheduler state machine of every rank (:mod:`tiledsl.runtime.scheduler`) and
the real protocol's decisions (:mod:`tiledsl.runtime.exchange`) are driven by a
discrete-event clock, with kernel times and links modelled from a machine file
(:mod:`.machine`): :mod:`.walk` walks the loop nest once for all ranks, :mod:`.engine`
replays every rank's share, :mod:`.bounds` gives the bounds, :mod:`.run` puts it
together.
"""
from .machine import Machine, MachineError, load, this_machine
from .run import simulate

__all__ = ["Machine", "MachineError", "load", "simulate", "this_machine"]
