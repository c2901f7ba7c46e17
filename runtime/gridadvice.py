"""The grids to advise when some rank would have nothing to do: those on which every rank
runs a task, found by walking the program's loop nest as each grid places its tiles.

Owning tiles is not enough: a rank computes only where it owns the tile a task writes
first (its main tile), so a grid that gives every rank tiles may still leave a rank
only sending them (a column of tiles whose tasks all write one row's tiles). The
warnings of :func:`.resources.ranks_without_tiles` and
:func:`.reporting.idle_ranks_warning` name these grids, or where none helps a smaller tile
size at which one does, or say that neither helps (:func:`idle_rank_advice`): a program
whose every task writes one tile (a sum into one block) keeps ranks idle at any tile size,
and 1x1 tiles have none smaller.
"""
from __future__ import annotations

from dataclasses import replace

from .errors import TaskFailure
from .layout import grids_by_squareness, make_distribution, make_matrices, make_params, matrix_shapes
from .options import Options
from .program import flatten
from .recording import LoopNestTarget, walk
from .world import UsageError, preferred_grid


class _EveryRankSeen(Exception):
    """Stops a walk once every rank has run a task: the rest cannot change the answer."""


class _Runners(LoopNestTarget):
    """A stand-in for the runtime that notes the rank running each task (its main tile's owner),
    and stops the walk once every rank ran one, or after ``most`` tasks."""

    def __init__(self, matrices: dict, ranks: int, most: int | None = None):
        super().__init__(matrices)  # as Everyone: the driver submits every task
        self.ranks, self.most, self.tasks = ranks, most, 0
        self.running: set = set()

    def submit(self, call, tiles, regions, priority, values=(), at=None):
        call, tiles, _ = flatten(call, tiles, regions)
        self.running.add(tiles[call.main].rank)
        self.tasks += 1
        if len(self.running) == self.ranks or self.tasks == self.most:
            raise _EveryRankSeen


#: the tasks walked at most to count the ranks computing on a grid (a rank first computing later is
#: not counted: block-cyclic tiles give most ranks a task early)
COUNTED_TASKS = 100_000


def computing_ranks(driver, params, matrices: dict, ranks: int) -> int:
    """How many of ``ranks`` run a task of the program whose tiles ``matrices`` place (among the
    first :data:`COUNTED_TASKS` tasks); 0 where the walk fails (the run's own walk says why)."""
    runners = _Runners(matrices, ranks, COUNTED_TASKS)
    try:
        walk(driver, runners, params, 0)
    except _EveryRankSeen:
        pass
    except (TaskFailure, UsageError):
        return 0
    return len(runners.running)


def every_rank_computes(driver, params, grid: tuple, gpus: int = 0, ratio: tuple | None = None) -> bool:
    """Whether every rank of ``grid`` runs a task of the program at ``params``."""
    try:
        distribution = make_distribution(driver.PROGRAM, params, grid, gpus, ratio)
        matrices = make_matrices(driver, params, distribution, 0)
    except UsageError:  # not a grid to advise: the run says the mistake
        return False
    return computing_ranks(driver, params, matrices, grid[0] * grid[1]) == grid[0] * grid[1]


def grids_where_every_rank_computes(driver, params, ranks: int, gpus: int = 0, ratio: tuple | None = None) -> list:
    """The grids P×Q of ``ranks`` on which every rank runs a task, the program's preferred one first
    (:func:`.world.preferred_grid`: P×1 for a program writing rows of tiles), then the squarest
    (one walk of the loop nest per grid, made only when a warning needs them)."""
    preferred = preferred_grid(driver.PROGRAM, ranks)
    grids = [preferred] + [grid for grid in grids_by_squareness(ranks) if grid != preferred]
    return [grid for grid in grids if every_rank_computes(driver, params, grid, gpus, ratio)]


#: tile sizes tried for the advice: the run's halved at most this many times...
HALVINGS = 3
#: ...while the largest matrix has at most this many tiles (each try walks the loop nest per grid)
TRIED_TILES = 16384


def idle_rank_advice(driver, options: Options, params, ranks: int, gpus: int = 0, ratio: tuple | None = None) -> str:
    """What a warning of ranks with nothing to do advises: the grids on which every rank runs a
    task; where there is none, a smaller uniform tile size at which one does (``options``: the
    run's, at ``params``), or that smaller tiles do not help either (as far as they were tried),
    or that none exists (tiles of one element)."""
    grids = grids_where_every_rank_computes(driver, params, ranks, gpus, ratio)
    if grids:
        return f"use {' or '.join(f'--grid {p}x{q}' for p, q in grids)}, on which every rank runs a task"
    none = f"no grid of {ranks} ranks gives every rank a task"
    effective = _effective_tile_size(driver, params)
    if effective == 1:
        return f"{none}, and each tile is a single element already: use fewer ranks"
    tried, failed = None, effective
    for smaller in _smaller_params(driver, options, effective):
        tried = smaller.nb
        grids = grids_where_every_rank_computes(driver, smaller, ranks, gpus, ratio)
        if grids:  # the largest tiles between this halving and the one before that work
            nb, (p, q) = _largest_working(driver, options, (smaller.nb, grids[0]), failed, ranks, gpus, ratio)
            return f"{none}: use fewer ranks, or smaller tiles (--nb {nb} on --grid {p}x{q})"
        failed = smaller.nb
    if tried is None:  # hybrid tiles, or too many tiles to try
        return f"{none}: use fewer ranks or smaller tiles"
    return f"{none}, nor at smaller tiles (down to --nb {tried}): use fewer ranks"


def _effective_tile_size(driver, params) -> int | None:
    """The run's uniform tile size, at most its largest matrix's larger side (n = 40 at nb = 256: 40, the
    tiles being no larger); for hybrid tiles 1 where that side is 1 (n = 1), else None."""
    shapes = matrix_shapes(driver, params)[0].values()
    side = max((max(int(m), int(n)) for m, n in shapes), default=None)
    if driver.PROGRAM.tiling.kind != "uniform":
        return 1 if side == 1 else None
    return min(params.nb, side or params.nb)


def _largest_working(driver, options: Options, working: tuple, failing: int, ranks: int, gpus: int,
                     ratio: tuple | None) -> tuple:
    """``(nb, grid)`` of the fewest tiles at which a grid gives every rank a task, the tiles as even as they then
    can be: the largest tile size below ``failing`` that works, by bisection from ``working`` (an ``(nb, grid)``
    that does; --nb 3 was advised as --nb 1, where 2 works), then the smallest size with as many tiles along
    the largest side (n = 100 on 2 ranks: 50 rather than 99, which leaves a tile of one column)."""
    (low, grid), high = working, failing
    while high - low > 1:
        middle = (low + high) // 2
        grids = _working_grids(driver, options, middle, ranks, gpus, ratio)
        if grids:
            low, grid = middle, grids[0]
        else:
            high = middle
    side = max(max(int(m), int(n)) for m, n in matrix_shapes(driver, _params_at(driver, options, low))[0].values())
    even = -(-side // -(-side // low))
    grids = _working_grids(driver, options, even, ranks, gpus, ratio) if even < low else []
    return (even, grids[0]) if grids else (low, grid)


def _working_grids(driver, options: Options, nb: int, ranks: int, gpus: int, ratio: tuple | None) -> list:
    """:func:`grids_where_every_rank_computes` at tile size ``nb`` (none where it cannot be tried)."""
    params = _params_at(driver, options, nb)
    return grids_where_every_rank_computes(driver, params, ranks, gpus, ratio) if params else []


def _params_at(driver, options: Options, nb: int):
    """The run's parameters at uniform tile size ``nb``; None where the program refuses it (a requirement on
    the tiles, n % nb == 0) or its largest matrix has more than :data:`TRIED_TILES` tiles."""
    try:
        params = make_params(driver, replace(options, tiles={**options.tiles, "nb": nb}))
        largest = max(-(-int(m) // nb) * -(-int(n) // nb) for m, n in matrix_shapes(driver, params)[0].values())
    except UsageError:
        return None
    return params if largest <= TRIED_TILES else None


def _smaller_params(driver, options: Options, nb: int | None):
    """The run's parameters at uniform tile size ``nb`` (:func:`_effective_tile_size`) halved, then halved
    again (:data:`HALVINGS` times at most), at each size the program accepts with few enough tiles to try
    (:func:`_params_at`)."""
    if nb is None:
        return
    for _ in range(HALVINGS):
        nb //= 2
        if nb < 1:
            return
        smaller = _params_at(driver, options, nb)
        if smaller is not None:
            yield smaller
