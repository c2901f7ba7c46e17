"""Tiled matrices on one rank: tile objects, the indirect table, geometry queries.

A rank makes a :class:`Tile` object (its owner, its shape, its version and the
head of its task list) for a tile when it first meets it: the tiles it owns and
those its tasks touch, so its tile metadata follows its share of the program,
not the matrix (a rank that walks the whole loop nest meets every tile). Only
the tiles it owns, or copies it received, carry data (``tile.data``, a
Fortran-ordered array: the indirect table of the seeds). The generated driver
uses :meth:`TiledMatrix.tile`, :meth:`TiledMatrix.rank_of` and the geometry
queries.
"""
from __future__ import annotations

import numpy as np

from .geometry import Geometry
from .scheduler import TileState
from .share import Lines


class TileIndexError(IndexError):
    """A tile or tile row/column that does not exist, named against the ``.tile`` line."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.line = line


def check_distinct_writes(call, tiles: tuple) -> None:
    """A :class:`TileIndexError` for a tile given twice to ``call`` (its flattened tiles) and written
    by it: the program's mistake, which the compiler cannot always prove (E204), found wherever
    a walk meets the task (a run's survey, ``explain``, ``graph``, ``simulate``)."""
    if len(set(tiles)) == len(tiles):
        return
    for index in call.writes:
        if sum(t is tiles[index] for t in tiles) > 1:
            raise TileIndexError(f"tile {tiles[index]} is passed twice to {call.kernel} and written", call.line)


class Tile(TileState):
    """One tile of a matrix, as seen from this rank."""

    __slots__ = ("matrix", "i", "j", "shape", "rank", "device", "data", "tag", "version", "delivered", "copies")

    def __init__(self, matrix: "TiledMatrix", i: int, j: int, rank: int, device: int, tag: int):
        super().__init__()
        self.matrix = matrix
        self.i, self.j = i, j
        self.shape = matrix.geometry.tile_shape(i, j)  # (rows, columns): asked of every task's tiles
        self.rank, self.device = rank, device
        self.data: np.ndarray | None = None
        self.tag = tag  # the MPI tag of its messages: unique per tile of the program
        self.version = 0  # writes to it so far, in program order (all ranks agree)
        self.delivered: dict = {}  # place -> parts of the current version sent or copied there
        self.copies: dict = {}  # (version, device, part) -> copy of a tile homed elsewhere

    def __str__(self):
        return f"{self.matrix.name}[{self.i}, {self.j}]"

    __repr__ = __str__


class TiledMatrix:
    """A matrix cut into tiles by ``geometry`` and placed by ``distribution``."""

    def __init__(self, name: str, geometry: Geometry, distribution, rank: int, first_tag: int = 0,
                 on_host: bool = False, workspace: bool = False):
        self.name = name
        self.workspace = workspace  # a workspace: its tiles start as zeros, which a task may read
        self.geometry = geometry
        self.distribution = distribution
        self.rank = rank
        self.mt, self.nt, self.m, self.n = geometry.mt, geometry.nt, geometry.m, geometry.n
        self._owner_rank = distribution.rank_of
        self.first_tag = first_tag
        self.on_host = on_host  # every tile on its rank's host, whatever the distribution's devices
        self._made: dict[int, Tile] = {}  # i·nt + j -> the tile, once this rank met it
        self._local: list | None = None
        self.advance = _advance  # replaced by the engine of a distributed run
        self.counts_foreign_writes = True  # False once the versions of foreign tiles come from elsewhere
        self.foreign_writes = 0  # the bumps skipped meanwhile
        self._lines = None

    # ---------------------------------------------------------------- driver surface
    def tile(self, i: int, j: int, line: int | None = None) -> Tile:
        """Tile ``(i, j)``; a :class:`TileIndexError` naming ``line`` if it does not exist."""
        tile = self._made.get(i * self.nt + j) if 0 <= j < self.nt else None
        if tile is not None:
            return tile
        if 0 <= i < self.mt and 0 <= j < self.nt:
            return self._make(i, j)
        raise TileIndexError(f"tile {self.name}[{i}, {j}] does not exist: {self._extent()}", line)

    def _extent(self) -> str:
        """``T, 96×250, has 1×3 tiles``: its size says which setting made it so (a parameter a file's
        shape gave, say), which its tiles alone do not."""
        return f"{self.name}, {self.m}×{self.n}, has {self.mt}×{self.nt} tiles"

    def _make(self, i: int, j: int) -> Tile:
        rank, device = self.distribution.owner(self.name, i, j)
        number = i * self.nt + j
        tile = self._made[number] = Tile(self, i, j, rank, 0 if self.on_host else device, self.first_tag + number)
        return tile

    def rank_of(self, i: int, j: int) -> int:
        """The rank that takes a task whose main tile is ``(i, j)``: its owner, or rank 0 for a
        tile outside the matrix, whose walk reaches every such call (:mod:`.share`) and fails there
        as one rank would (a distribution's own formula would give it to a rank that never meets it)."""
        if 0 <= i < self.mt and 0 <= j < self.nt:
            return self._owner_rank(i, j)
        return 0

    def sent_whole(self, i: int, j: int, rank: int) -> bool:
        """Whether the current version of tile ``(i, j)`` went whole to ``rank`` (:func:`already_sent`;
        False for a tile this rank has not met)."""
        tile = self._made.get(i * self.nt + j) if 0 <= i < self.mt and 0 <= j < self.nt else None
        return tile is not None and already_sent(tile, rank, None)

    def made_tiles(self) -> list:
        """The tiles this rank has met so far (the only ones that can hold data, copies or tasks)."""
        return list(self._made.values())

    def _panel_fault(self, r0: int, r1: int, c0: int, c1: int, single: str) -> str:
        """What is wrong with a panel outside the matrix or empty: a single index outside it first (it
        is the cause, and may make the range empty too), then an empty range, then one that leaves it."""
        rows = str(r0) if single == "row" else f"{r0} : {r1}"
        cols = str(c0) if single == "column" else f"{c0} : {c1}"
        where = f"the tile range {self.name}[{rows}, {cols}]"
        for axis, start, count in (("row", r0, self.mt), ("column", c0, self.nt)):
            if axis == single and not 0 <= start < count:
                return f"{where} is in tile {axis} {start}, which does not exist: {self._extent()}"
        if r0 >= r1 or c0 >= c1:
            return f"{where} is empty"
        return f"{where} leaves {self.name}, which has {self.mt}×{self.nt} tiles"

    def panel(self, r0: int, r1: int | None, c0: int, c1: int | None, line: int | None = None) -> tuple:
        """The tiles of rows r0 .. r1 − 1 of columns c0 .. c1 − 1, one of the two ranges a single
        index (its stop None): a panel argument, in order along its range; TileIndexError if outside
        or empty."""
        if r1 is None or c1 is None:
            single = "row" if r1 is None else "column"
        else:  # a driver of format 4 or older gives both stops
            single = "column" if c1 - c0 == 1 else "row"
        r1 = r0 + 1 if r1 is None else r1
        c1 = c0 + 1 if c1 is None else c1
        if not (0 <= r0 < r1 <= self.mt and 0 <= c0 < c1 <= self.nt):  # once per panel argument: said only here
            raise TileIndexError(self._panel_fault(r0, r1, c0, c1, single), line)
        if single == "column":
            return tuple(self.tile(i, c0) for i in range(r0, r1))
        return tuple(self.tile(r0, j) for j in range(c0, c1))

    @property
    def lines(self):
        """The tile rows and columns of this rank's tiles (:class:`~.share.Lines`), or None
        when the distribution does not tell them apart."""
        if self._lines is None:
            found = self.distribution.lines_of(self.rank, self.mt, self.nt)
            self._lines = False if found is None else Lines(*found, edges=self.rank == 0)
        return self._lines or None

    def bump(self, i: int, j: int) -> None:
        """A task this rank takes no part in writes tile (i, j): count its new version.

        Out-of-range indices are ignored here: rank 0's walk, or one rank's, reports them.
        A rank guided by the program's dataflow only counts it (and makes no tile object).
        """
        if not self.counts_foreign_writes:
            self.foreign_writes += 1
        elif 0 <= i < self.mt and 0 <= j < self.nt:
            self.advance(self.tile(i, j))

    def height(self, i: int) -> int:
        self._check("height", i, self.mt, "row")
        return self.geometry.height(i)

    def width(self, j: int) -> int:
        self._check("width", j, self.nt, "column")
        return self.geometry.width(j)

    def offset(self, j: int) -> int:
        self._check("offset", j, self.nt, "column")
        return self.geometry.offset(j)

    def _check(self, query: str, index: int, count: int, what: str) -> None:
        if not 0 <= index < count:
            raise TileIndexError(f"{self.name}.{query}({index}): {self.name} has no tile {what} {index} "
                                 f"(its tile {what}s are 0 .. {count - 1})")

    def owned_extent(self) -> tuple[int, int]:
        """``(count, bytes)`` of the tiles this rank owns and of their values, from its lines where
        the distribution gives them: no tile is made (a memory estimate before the run's tiles, which
        tiny tiles make many)."""
        lines = self.lines
        if not lines:
            owned = self.local_tiles()
            return len(owned), sum(8 * h * w for tile in owned for h, w in [tile.shape])
        rows, cols = self.geometry.row_starts, self.geometry.col_starts
        height = sum(rows[i + 1] - rows[i] for i in lines.rows)
        width = sum(cols[j + 1] - cols[j] for j in lines.cols)
        return len(lines.rows) * len(lines.cols), 8 * height * width

    # ---------------------------------------------------------------- storage
    def local_tiles(self) -> list:
        """The tiles this rank owns, row by row (found from its lines where the distribution
        gives them, so a rank never visits the others' tiles)."""
        if self._local is None:
            lines = self.lines
            rows, cols = (lines.rows, lines.cols) if lines else (range(self.mt), range(self.nt))
            owner, name, rank = self.distribution.owner, self.name, self.rank
            self._local = [self.tile(i, j) for i in rows for j in cols if owner(name, i, j)[0] == rank]
        return self._local

    def allocate(self, fill, needed=None, by_columns: bool = False) -> None:
        """Give local tiles data: ``fill(r0, r1, c0, c1)`` returns a block.

        Only tiles in ``needed`` (all when None) are stored; the others are never
        touched by a task, so :meth:`block` makes them from ``fill`` when asked. Each
        tile is an array of its own, unless ``by_columns`` (a matrix of which built-in
        kernels take column panels): then the stored tiles of one tile column are views
        of one column-major array, in row order, and a panel of adjacent stored tiles is
        one matrix to LAPACK, factored and row-swapped in place (``panels.stacked``)
        rather than gathered first. Not for every matrix: user kernels written for a
        tile of their own (``np.asfortranarray(A)`` then writing, a raw pointer with the
        row count as leading dimension) would lose writes or write into the next tile.
        """
        self.fill = fill
        stored = [tile for tile in self.local_tiles() if needed is None or tile in needed]
        if not by_columns:
            for tile in stored:
                tile.data = self._filled(tile)
            return
        for column in _by_column(stored):
            heights = [tile.shape[0] for tile in column]
            storage = np.empty((_leading_dimension(sum(heights)), column[0].shape[1]), order="F")
            top = 0
            for tile, height in zip(column, heights):
                tile.data = storage[top:top + height]
                tile.data[...] = self._filled(tile)
                top += height

    def _filled(self, tile: Tile) -> np.ndarray:
        g = self.geometry
        (r0, r1), (c0, c1) = g.row_range(tile.i), g.col_range(tile.j)
        return np.asfortranarray(self.fill(r0, r1, c0, c1), dtype=np.float64)

    def block(self, tile: Tile) -> np.ndarray:
        """A local tile's values: its data, or its input for a tile no task touched."""
        return tile.data if tile.data is not None else self._filled(tile)

    def assemble(self) -> np.ndarray:
        """The whole matrix from local tiles (single-rank use: the Python API, tests)."""
        g = self.geometry
        full = np.zeros((self.m, self.n), order="F")
        for tile in self.local_tiles():
            (r0, r1), (c0, c1) = g.row_range(tile.i), g.col_range(tile.j)
            full[r0:r1, c0:c1] = self.block(tile)
        return full

    def local_bytes(self) -> int:
        return sum(t.data.nbytes for t in self.local_tiles() if t.data is not None)

    def discard(self) -> None:
        """Let go of every tile's data, the run over and its result copied out: a tile and its
        matrix refer to each other, so without this the data waits for the cyclic garbage
        collector (a service that disables it grew by the matrices' size each run)."""
        for tile in self._made.values():
            tile.data = None


def _leading_dimension(rows: int) -> int:
    """Rows rounded up to whole cache lines, off multiples of 256 doubles: columns 2 KiB·2^k
    apart share cache sets, which slowed dgemm and dtrsm on 448×448 tiles by 7–20%."""
    padded = rows + -rows % 8
    return padded + 8 if padded % 256 == 0 else padded


def _by_column(tiles: list) -> list:
    """``tiles`` grouped by tile column, each group in row order."""
    columns: dict[int, list] = {}
    for tile in sorted(tiles, key=lambda tile: (tile.j, tile.i)):
        columns.setdefault(tile.j, []).append(tile)
    return list(columns.values())


def _advance(tile: Tile) -> None:
    tile.version += 1


def region_view(tile: Tile, region) -> tuple:
    """Slices for ``region`` = (r0, r1, c0, c1) of ``tile`` (None ends mean the edge).

    Raises ValueError with a readable message when the region leaves the tile.
    """
    height, width = tile.shape
    r0, r1, c0, c1 = region
    r0 = 0 if r0 is None else r0
    r1 = height if r1 is None else r1
    c0 = 0 if c0 is None else c0
    c1 = width if c1 is None else c1
    if (r0 > r1 and r0 <= height) or (c0 > c1 and c0 <= width):  # a start past the tile is outside it
        what, start, end = ("rows", r0, r1) if r0 > r1 else ("columns", c0, c1)
        raise TileIndexError(f"sub-range [{r0}:{r1}, {c0}:{c1}] of tile {tile} is reversed: its {what} start at "
                             f"{start} and end before, at {end}")
    if not (0 <= r0 <= height and r1 <= height and 0 <= c0 <= width and c1 <= width):
        written = "[{}:{}, {}:{}]".format(*("" if end is None else end for end in region))  # as the call gave it
        raise TileIndexError(f"sub-range {written} is outside tile {tile} ({height}×{width})")
    return slice(r0, r1), slice(c0, c1)


def part_of(tile: Tile, view) -> tuple | None:
    """The sub-range ``(r0, r1, c0, c1)`` that ``view`` (slices from :func:`region_view`, or None)
    covers of ``tile``; None when it is the whole tile."""
    if view is None:
        return None
    rows, cols = view
    part = (rows.start, rows.stop, cols.start, cols.stop)
    return None if part == (0, tile.shape[0], 0, tile.shape[1]) else part


def part_text(part: tuple | None) -> str:
    """``[r0:r1, c0:c1]`` for a sub-range key of :func:`part_of`; nothing for the whole tile."""
    return "" if part is None else f"[{part[0]}:{part[1]}, {part[2]}:{part[3]}]"


def already_sent(tile: Tile, rank: int, part: tuple | None) -> bool:
    """Whether ``part`` (None: the whole) of the current version of this rank's ``tile`` already went
    to ``rank``'s host, as the exchange records it (:func:`.protocol.delivery`): a task there that
    reads it needs nothing more from here. Never for a workspace tile no task wrote yet: its owner
    notes every task that reads its zeros (:meth:`.engine.Engine._note_reads_of_zeros`)."""
    parts = tile.delivered.get((rank, 0))
    return parts is not None and (None in parts or part in parts) and (tile.version or not tile.matrix.workspace)


def sends_nothing(call, tiles, views, rank: int) -> bool:
    """Whether a task gives ``rank`` nothing to do: it runs on another rank, which already has
    what it reads of ``rank``'s tiles (:func:`already_sent`), and writes none of them."""
    runner = tiles[call.main].rank
    if runner == rank:
        return False
    for index, tile in enumerate(tiles):
        if tile.rank == rank and (call.modes[index] != "in" or
                                  not already_sent(tile, runner, moved_part(call, tiles, views, index))):
            return False
    return True


def moved_part(call, tiles, views, index: int) -> tuple | None:
    """What of argument ``index``'s tile moves to a task run elsewhere: the sub-range an ``in``
    argument names; the whole tile for a written one (it goes home whole)."""
    if views is None or call.modes[index] != "in":
        return None
    return part_of(tiles[index], views[index])


def call_views(call, tiles, regions) -> tuple | None:
    """The slices of each argument's sub-range (None: the whole tile; None for a call without
    any); a :class:`TileIndexError` naming the call's line for a sub-range outside its tile."""
    if regions is None:
        return None
    try:
        return tuple(None if r is None else region_view(t, r) for t, r in zip(tiles, regions))
    except TileIndexError as error:
        error.line = call.line
        raise
