"""Tile geometry: where every tile of a matrix starts and ends (DESIGN §2, §5).

A :class:`Geometry` is the list of tile-row and tile-column boundaries of one
matrix. Three shapes exist:

* ``uniform(m, n, nb)``: square ``nb`` tiles, the last row/column ragged;
* ``hybrid(m, n, B, b, s)``: tile rows of height ``B``; every ``B``-wide block
  column cut into ``s`` slices (``s - 1`` of width ``b`` and one of the rest), so
  tile column ``j`` is slice ``j % s`` of block ``j // s`` (Song et al., ICS'12);
* ``workspace(like, rows)``: the columns of ``like`` with tiles ``rows`` high
  (for example the T factors of QR).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..language import hybrid_slices_advice, hybrid_slices_fit


def _cuts(total: int, step: int) -> tuple[int, ...]:
    """Boundaries 0, step, 2·step, ..., total (the last piece ragged)."""
    return tuple(range(0, total, step)) + (total,)


#: Most tiles one matrix may have: a walk of the whole loop nest (one rank, explain,
#: simulate, programs without a share plan) makes an object for every tile it meets
#: (a few hundred bytes and a microsecond or two apiece).
MAX_TILES = 1 << 22


def _require_makeable(m: int, n: int, tile_rows: int, tile_cols: int) -> None:
    """Refuse, before making any boundary, a matrix whose tiles could not all be made."""
    tiles = tile_rows * tile_cols
    _require(tiles <= MAX_TILES,
             f"a {m}×{n} matrix would have {tile_rows}×{tile_cols} = {tiles} tiles "
             f"({8 * m * n:.3g} bytes); at most {MAX_TILES} tiles can be made: use larger tiles or a smaller size")


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _require(ok: bool, message: str) -> None:
    """Raise ValueError(message) unless ``ok``."""
    if not ok:
        raise ValueError(message)


@dataclass(frozen=True)
class Geometry:
    """Tile boundaries of one matrix.

    Tile ``(i, j)`` spans rows ``row_starts[i]:row_starts[i+1]`` and columns
    ``col_starts[j]:col_starts[j+1]``. Tile columns come in groups of ``s`` that
    share one top-level block (``s == 1`` for uniform tiles); columns may be empty
    (the zero-width slices of a ragged last block), so that ``j // s`` is always the
    block index.
    """

    row_starts: tuple[int, ...]
    col_starts: tuple[int, ...]
    s: int = 1

    def __post_init__(self) -> None:
        for name, starts in (("row_starts", self.row_starts), ("col_starts", self.col_starts)):
            _require(len(starts) >= 2 and starts[0] == 0,
                     f"{name} must start at 0 and hold at least one tile, got {starts}")
            _require(all(a <= b for a, b in zip(starts, starts[1:])),
                     f"{name} must not decrease, got {starts}")
        _require(self.s >= 1 and self.nt % self.s == 0,
                 f"{self.nt} tile columns do not form whole blocks of s={self.s} slices")

    @classmethod
    def uniform(cls, m: int, n: int, nb: int) -> Geometry:
        """Square ``nb``×``nb`` tiles; the last tile row and column may be smaller."""
        _require(m >= 1 and n >= 1, f"matrix size must be at least 1x1, got {m}x{n}")
        _require(nb >= 1, f"tile size nb must be at least 1, got {nb}")
        _require_makeable(m, n, _ceil_div(m, nb), _ceil_div(n, nb))
        return cls(_cuts(m, nb), _cuts(n, nb))

    @classmethod
    def hybrid(cls, m: int, n: int, B: int, b: int, s: int) -> Geometry:
        """Hybrid tiles: rows of height ``B``; each block column cut into ``s`` slices.

        Within a block of width ``W`` (``B``, or the remainder for the last block),
        slice ``d < s - 1`` spans ``[min(d·b, W), min((d+1)·b, W))`` and the last
        slice spans ``[min((s-1)·b, W), W)``. Slices of a narrow last block may be
        empty.
        """
        _require(m >= 1 and n >= 1, f"matrix size must be at least 1x1, got {m}x{n}")
        _require(B >= 1 and b >= 1 and s >= 1,
                 f"hybrid tiling needs B >= 1, b >= 1, s >= 1, got B={B}, b={b}, s={s}")
        if not hybrid_slices_fit(B, b, s):  # (the advice divides by s - 1, which is then at least 1)
            raise ValueError(f"hybrid tiling needs (s-1)*b < B so the last slice is not empty, "
                             f"got (s-1)*b = ({s}-1)*{b} = {(s - 1) * b} with B={B}: {hybrid_slices_advice(B, b, s)}")
        _require_makeable(m, n, _ceil_div(m, B), _ceil_div(n, B) * s)
        cols = []
        for start in range(0, n, B):
            width = min(B, n - start)
            cols.extend(start + min(d * b, width) for d in range(s))
        cols.append(n)
        return cls(_cuts(m, B), tuple(cols), s)

    @classmethod
    def workspace(cls, like: Geometry, rows: int) -> Geometry:
        """The tile columns of ``like``, with ``like.mt`` tile rows each ``rows`` high."""
        _require(rows >= 1, f"tile height must be at least 1, got {rows}")
        return cls(tuple(range(0, (like.mt + 1) * rows, rows)), like.col_starts, like.s)

    @property
    def m(self) -> int:
        """Number of rows of the matrix."""
        return self.row_starts[-1]

    @property
    def n(self) -> int:
        """Number of columns of the matrix."""
        return self.col_starts[-1]

    @property
    def mt(self) -> int:
        """Number of tile rows."""
        return len(self.row_starts) - 1

    @property
    def nt(self) -> int:
        """Number of tile columns (``s`` per top-level block)."""
        return len(self.col_starts) - 1

    def height(self, i: int) -> int:
        """Rows in tile row ``i``."""
        return self.row_starts[i + 1] - self.row_starts[i]

    def width(self, j: int) -> int:
        """Columns in tile column ``j`` (0 for an empty slice)."""
        return self.col_starts[j + 1] - self.col_starts[j]

    def offset(self, j: int) -> int:
        """Column offset of tile column ``j`` inside its top-level block (0 for uniform)."""
        return self.col_starts[j] - self.col_starts[j - j % self.s]

    def row_range(self, i: int) -> tuple[int, int]:
        """Global rows ``(r0, r1)`` of tile row ``i``."""
        return self.row_starts[i], self.row_starts[i + 1]

    def col_range(self, j: int) -> tuple[int, int]:
        """Global columns ``(c0, c1)`` of tile column ``j``."""
        return self.col_starts[j], self.col_starts[j + 1]

    def tile_shape(self, i: int, j: int) -> tuple[int, int]:
        """``(height, width)`` of tile ``(i, j)``."""
        return self.height(i), self.width(j)
