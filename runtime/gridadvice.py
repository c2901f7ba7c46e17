"""The grids to advise when some rank would have nothing to do: those on which every rank
runs a task, found by walking the program's loop nest as each grid places its tiles.

Owning tiles is not enough: a rank computes only where it owns the tile a task writes
first (its main tile), so a grid that gives every rank tiles may still leave a rank
only sending them (a column of tiles whose tasks all write one row's tiles). The
warnings of :func:`.resources.ranks_without_tiles` and
:func:`.reporting.idle_ranks_warning` name these grids (:func:`.resources.grid_advice`), or
say that none helps.
"""
from __future__ import annotations

from .errors import TaskFailure
from .layout import grids_by_squareness, make_distribution, make_matrices
from .program import flatten
from .recording import LoopNestTarget, walk
from .world import UsageError


class _EveryRankSeen(Exception):
    """Stops a walk once every rank has run a task: the rest cannot change the answer."""


class _Runners(LoopNestTarget):
    """A stand-in for the runtime that notes the rank running each task (its main tile's owner)."""

    def __init__(self, matrices: dict, ranks: int):
        super().__init__(matrices)  # as Everyone: the driver submits every task
        self.ranks = ranks
        self.running: set = set()

    def submit(self, call, tiles, regions, priority, values=(), at=None):
        call, tiles, _ = flatten(call, tiles, regions)
        self.running.add(tiles[call.main].rank)
        if len(self.running) == self.ranks:
            raise _EveryRankSeen


def every_rank_computes(driver, params, grid: tuple, gpus: int = 0, ratio: tuple | None = None) -> bool:
    """Whether every rank of ``grid`` runs a task of the program at ``params``."""
    try:
        distribution = make_distribution(driver.PROGRAM, params, grid, gpus, ratio)
        walk(driver, _Runners(make_matrices(driver, params, distribution, 0), grid[0] * grid[1]), params, 0)
    except _EveryRankSeen:
        return True
    except (TaskFailure, UsageError):  # not a grid to advise: the run's own walk reports the mistake
        pass
    return False


def grids_where_every_rank_computes(driver, params, ranks: int, gpus: int = 0, ratio: tuple | None = None) -> list:
    """The grids P×Q of ``ranks`` on which every rank runs a task, the squarest first
    (one walk of the loop nest per grid, made only when a warning needs them)."""
    return [grid for grid in grids_by_squareness(ranks) if every_rank_computes(driver, params, grid, gpus, ratio)]

