"""Lower bounds of a simulated run, from the modelled task times (DESIGN §6; RR-8513 §4.4).

* critical path: the longest chain of dependent tasks (read after write, write
  after read, write after write), built as the walk streams the tasks past, with
  each task's time on the device it runs on; no communication;
* area bound: the least time in which the machine's CPU workers and GPUs could run
  every task, each call site's tasks split freely between the kinds of worker
  that can run them, at the modelled speeds (a linear program, as the runtime's
  bound over measured times, :func:`tiledsl.runtime.trace.least_time`).
"""
from __future__ import annotations

from collections import defaultdict

from ..runtime.trace import least_time


class CriticalPath:
    """The longest chain so far: fed every task in program order."""

    def __init__(self):
        self.writer_end: dict = {}  # tile -> when its last writer ends
        self.readers_end: dict = {}  # tile -> when its readers since that writer end, at the latest
        self.longest = 0.0

    def add(self, modes, tiles, seconds: float) -> None:
        writer_end, readers_end = self.writer_end, self.readers_end
        start = 0.0
        for tile, mode in zip(tiles, modes):
            end = writer_end.get(tile, 0.0)
            if end > start:
                start = end
            if mode != "in":
                end = readers_end.get(tile, 0.0)
                if end > start:
                    start = end
        end = start + seconds
        for tile, mode in zip(tiles, modes):
            if mode == "in":
                if end > readers_end.get(tile, 0.0):
                    readers_end[tile] = end
            else:
                writer_end[tile] = end
                readers_end[tile] = 0.0
        if end > self.longest:
            self.longest = end


class Area:
    """Seconds of work per call site and kind of worker ("cpu", "gpu")."""

    def __init__(self):
        self.work: dict = defaultdict(float)

    def add(self, line: int, kind: str, seconds: float) -> None:
        self.work[line, kind] += seconds

    def bound(self, capacity: dict) -> float:
        """Least time for all tasks on ``capacity`` workers per kind (:func:`.least_time`)."""
        return least_time(self.work, capacity)
