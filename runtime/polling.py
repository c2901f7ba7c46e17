"""How long a thread that polls for completions sleeps between two polls.

The MPI thread (:mod:`.comm`) and the copy thread (:class:`.exchange.Mover`) wait
for work that no blocking call can wait for without spinning (MPICH's progress
engine, CUDA events of several streams). Right after any activity they poll back
to back for ``spin`` seconds, since work comes in bursts; then they sleep for as
long as they have been quiet, between :data:`MIN_INTERVAL` and ``max_interval``,
so that a long wait costs the compute threads almost nothing (measurements in
:mod:`.comm`).
"""
from __future__ import annotations

MIN_INTERVAL = 50e-6  # about the kernel's timer slack: a shorter sleep is not shorter
SPIN = 50e-6
MAX_INTERVAL = 1e-3


def interval(quiet: float, spin: float = SPIN, max_interval: float = MAX_INTERVAL) -> float:
    """Seconds to sleep before the next poll after ``quiet`` seconds without activity (0: poll now)."""
    if quiet < spin:
        return 0.0
    return min(max_interval, max(MIN_INTERVAL, quiet))
