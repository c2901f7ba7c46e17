"""Lower bounds of a simulated run, from the modelled task times (DESIGN §6; RR-8513 §4.4).

* critical path: the longest chain of tasks each reading what the one before wrote
  (:class:`tiledsl.runtime.trace.CriticalPath`), built as the walk streams the tasks
  past, with each task's time on the device it runs on; no communication;
* area bound: the least time in which the machine's CPU workers and GPUs could run
  every task, each call site's tasks split freely between the kinds of worker
  that can run them, at the modelled speeds (a linear program, as the runtime's
  bound over measured times, :func:`tiledsl.runtime.trace.least_time`).
"""
from __future__ import annotations

from collections import defaultdict

from ..runtime.trace import least_time


class Area:
    """Seconds of work per call site and kind of worker ("cpu", "gpu")."""

    def __init__(self):
        self.work: dict = defaultdict(float)

    def add(self, line: int, kind: str, seconds: float) -> None:
        self.work[line, kind] += seconds

    def bound(self, capacity: dict) -> float:
        """Least time for all tasks on ``capacity`` workers per kind (:func:`.least_time`)."""
        return least_time(self.work, capacity)
