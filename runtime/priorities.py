"""Priorities derived from a program's task graph, for programs that state none.

A task's priority is its *bottom level*: the longest chain of dependent work
from its start to the end of the program, itself included (the classic list
scheduling rank of HEFT; StarPU and PaRSEC schedulers use the same idea). Ready
tasks that many others wait on, transitively, go first, so the critical path
is worked on as early as it can be.

The graph is the program's own: every task in program order with the tiles it
reads and writes (read after write, write after read, write after write). Each
task's work is estimated from its largest tile, as ``(rows × cols)^1.5``: the
cube of a square tile's order, which is what a BLAS-3 tile kernel costs up to
a constant, so that hybrid programs weigh a GPU's large tile above a core's
small one. One pass in reverse program order computes every bottom level.

``--priorities`` chooses: ``program`` (the program's own; derived when it
gives none), ``auto`` (derived always) or ``none`` (all equal: oldest first).
"""
from __future__ import annotations

from .program import WRITE_MODES

MODES = ("program", "auto", "none")


def bottom_levels(tasks: list) -> list[float]:
    """The bottom level of each ``(call, tiles)`` of ``tasks``, given in program order."""
    levels = [0.0] * len(tasks)
    next_writer: dict = {}  # tile -> bottom level of its next writer (later in program order)
    readers_before_it: dict = {}  # tile -> the largest bottom level of its readers up to that writer
    for index in range(len(tasks) - 1, -1, -1):
        call, tiles = tasks[index]
        after = 0.0
        for tile, mode in zip(tiles, call.modes):
            after = max(after, next_writer.get(tile, 0.0))
            if mode in WRITE_MODES:
                after = max(after, readers_before_it.get(tile, 0.0))
        level = levels[index] = work(tiles) + after
        for tile, mode in zip(tiles, call.modes):
            if mode in WRITE_MODES:
                next_writer[tile] = level
                readers_before_it[tile] = 0.0
            else:
                readers_before_it[tile] = max(readers_before_it.get(tile, 0.0), level)
    return levels


def work(tiles) -> float:
    """A task's estimated work: its largest tile's ``(rows × cols)^1.5``."""
    largest = max(h * w for h, w in (t.shape for t in tiles))
    return float(largest) ** 1.5


class PriorityTable:
    """The priority of each task a rank will submit, looked up by ``(call, tiles)``.

    A program may submit the same call on the same tiles more than once; such
    keys hold their priorities in program order and hand them out in turn.
    """

    def __init__(self, tasks: list, levels: list[float], keep=None):
        self._table: dict = {}
        for (call, tiles), level in zip(tasks, levels):
            key = (id(call), tiles)
            if keep is not None and key not in keep:
                continue
            if key in self._table:
                held = self._table[key]
                self._table[key] = (held if isinstance(held, list) else [held]) + [level]
            else:
                self._table[key] = level

    def take(self, call, tiles, given):
        """The derived priority of the next ``call`` on ``tiles``; ``given`` for a task not in the table."""
        held = self._table.get((id(call), tiles))
        if held is None:
            return given
        if isinstance(held, list):
            return held.pop(0) if len(held) > 1 else held[0]
        return held


def equal(call, tiles, given) -> int:
    """``--priorities none``: every task the same, so the oldest ready task runs first."""
    return 0
