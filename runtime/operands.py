"""op(M) in a check: what the qualifiers written before a matrix's name make of it.

A check reads a stored matrix M as a matrix op(M): ``lower`` / ``upper`` keep one
triangle (``unit``: its diagonal is 1, whatever is stored), ``symmetric`` mirrors
the stored lower triangle, ``transposed`` reads Mᵀ (of the triangle, if one is
named). Every such op is a :class:`View`: op[i, j] is M[i, j] where the ``direct``
part holds, M[j, i] where the ``mirror`` part holds, 1 on the diagonal when
``unit``, and 0 elsewhere, the parts named in global coordinates of op(M).

An ORIGINAL matrix (an operand of the check) is rebuilt tile by tile, on the
tile's owner, from the input's source, which can give any block: op(M₀) costs no
message. A FINAL matrix (the run's result) lives in distributed tiles: op(M) is
copied into a check matrix by tasks (:func:`materialize`), one per piece of a
stored tile that a tile of op(M) needs; the engine moves the pieces.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from ..language import CHECK_QUALIFIERS
from .geometry import Geometry
from .world import UsageError


@dataclass(frozen=True)
class View:
    """op(M) as parts of the stored M (see the module docstring)."""

    direct: str | None = "all"
    mirror: str | None = None
    unit: bool = False

    @property
    def plain(self) -> bool:
        return self == View()

    def zero(self, r0: int, r1: int, c0: int, c1: int) -> bool:
        """Block [r0:r1, c0:c1] of op(M) is zero whatever M holds (or empty)."""
        diagonal = self.unit and max(r0, c0) < min(r1, c1)
        return not (diagonal or any(p is not None and meets(p, r0, r1, c0, c1) for p in (self.direct, self.mirror)))

    def geometry(self, stored: Geometry) -> Geometry:
        """The tiles of op(M) for M tiled by ``stored``: transposed when op only mirrors."""
        if self.direct is None:
            return Geometry(stored.col_starts, stored.row_starts)
        return stored


def view_of(words: tuple, where: str) -> View:
    """The :class:`View` that ``words`` (the qualifiers of one argument) describe; a
    :class:`~.world.UsageError` naming ``where`` for a combination that means nothing."""
    given = set(words)
    triangles = given & {"lower", "upper"}
    unknown = given - set(CHECK_QUALIFIERS)
    if unknown or len(triangles) > 1 or ("unit" in given and not triangles) or \
            ("symmetric" in given and "unit" in given):
        raise UsageError(f"{where}: the qualifiers {' '.join(words)!r} mean nothing together (one of lower or "
                         f"upper, with unit if its diagonal is 1; or symmetric, with upper if M stores its upper "
                         f"triangle; transposed with either)")
    if "symmetric" in given:  # the stored triangle, and its mirror; transposed changes nothing
        stored = triangles.pop() if triangles else "lower"
        return View(stored, "strict " + _flipped(stored))
    unit = "unit" in given
    part = "all"
    if triangles:
        part = ("strict " if unit else "") + triangles.pop()
    if "transposed" in given:
        return View(None, _flipped(part), unit)
    return View(part, None, unit)


def _flipped(part: str) -> str:
    """The part of Mᵀ that a part of M becomes."""
    return part.replace("lower", "UPPER").replace("upper", "lower").replace("UPPER", "upper")


def meets(part: str, r0: int, r1: int, c0: int, c1: int) -> bool:
    """The nonempty block [r0:r1, c0:c1] has an element in ``part`` (global row i, column j)."""
    if r0 >= r1 or c0 >= c1:
        return False
    return {"all": True, "lower": r1 - 1 >= c0, "strict lower": r1 - 1 > c0,
            "upper": r0 <= c1 - 1, "strict upper": r0 < c1 - 1}[part]


def part_of(block, row0: int, col0: int, part: str):
    """``block`` (its first element at global (row0, col0)) with only ``part`` kept."""
    if part == "all":
        return block
    return triangle(block, row0, col0, upper=part.endswith("upper"), strict=part.startswith("strict"))


def triangle(block, row0: int, col0: int, upper: bool, strict: bool = False, unit: bool = False):
    """``block`` (first element at global (row0, col0)) with one global triangle kept.

    ``upper`` keeps row <= col, else row >= col; ``strict`` drops the diagonal;
    ``unit`` puts ones on the diagonal (the implicit diagonal of LU's L). A block
    wholly inside the kept triangle is returned as it is (no copy): only the
    tiles on the diagonal pay for a masked copy.
    """
    height, width = block.shape
    shift = row0 - col0  # global row − column = local row − column + shift
    drop_diagonal = strict or unit
    if upper and height - 1 + shift < (0 if drop_diagonal else 1):
        return block
    if not upper and shift - (width - 1) > (0 if drop_diagonal else -1):
        return block
    if upper:
        result = np.triu(block, shift + 1 if drop_diagonal else shift)
    else:
        result = np.tril(block, shift - 1 if drop_diagonal else shift)
    result = np.asfortranarray(result)
    if unit:
        set_diagonal(result, row0, col0)
    return result


def set_diagonal(block: np.ndarray, row0: int, col0: int, value: float = 1.0) -> np.ndarray:
    """Put ``value`` on the global diagonal elements of ``block`` (first element at (row0, col0))."""
    height, width = block.shape
    shift = row0 - col0
    rows = np.arange(max(0, -shift), min(height, width - shift))
    block[rows, rows + shift] = value
    return block


def original_block(source, view: View, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
    """Block [r0:r1, c0:c1] of op(M₀), M₀ given by ``source(r0, r1, c0, c1)`` (any block)."""
    if view.plain:
        return source(r0, r1, c0, c1)
    block = np.zeros((r1 - r0, c1 - c0), order="F")
    if view.direct is not None and meets(view.direct, r0, r1, c0, c1):
        block += part_of(source(r0, r1, c0, c1), r0, c0, view.direct)
    if view.mirror is not None and meets(view.mirror, r0, r1, c0, c1):
        block += part_of(np.asarray(source(c0, c1, r0, r1)).T, r0, c0, view.mirror)
    return set_diagonal(block, r0, c0) if view.unit else block


def unit_block(view: View):
    """``fill`` of a check matrix that :func:`materialize` completes: zeros, and 1 on a unit diagonal."""
    def block(tile, r0, r1, c0, c1):
        zeros = np.zeros((r1 - r0, c1 - c0), order="F")
        return set_diagonal(zeros, r0, c0) if view.unit else zeros
    return block


@dataclass(frozen=True)
class Operand:
    """A factor of a check's products: the tiles of op(M) and where op(M) is zero for sure."""

    matrix: object  # a TiledMatrix holding op(M)
    view: View = View()

    def zero(self, i: int, j: int) -> bool:
        g = self.matrix.geometry
        return self.view.zero(*g.row_range(i), *g.col_range(j))


def materialize(stream, stored, view: View, target) -> None:
    """Tasks adding to ``target`` (tiled as ``view.geometry(stored.geometry)``, filled by
    :func:`unit_block`) the pieces of the final matrix ``stored`` that make it op(M)."""
    g, t = stored.geometry, target.geometry
    for i in range(t.mt):
        (r0, r1) = t.row_range(i)
        for j in range(t.nt):
            (c0, c1) = t.col_range(j)
            for part, mirrored in ((view.direct, False), (view.mirror, True)):
                if part is None or not meets(part, r0, r1, c0, c1):
                    continue
                rows, cols = ((c0, c1), (r0, r1)) if mirrored else ((r0, r1), (c0, c1))
                for a, b, (x0, x1), (y0, y1) in _covering(g, *rows, *cols):
                    (ra, _), (cb, _) = g.row_range(a), g.col_range(b)
                    here = (y0 - r0, y1 - r0, x0 - c0, x1 - c0) if mirrored else (x0 - r0, x1 - r0, y0 - c0, y1 - c0)
                    corner = (y0, x0) if mirrored else (x0, y0)
                    stream.task("check_op", ("in", "inout"), (stored.tile(a, b), target.tile(i, j)),
                                _add_part(part, *corner, mirrored), ((x0 - ra, x1 - ra, y0 - cb, y1 - cb), here))


def _covering(g: Geometry, r0: int, r1: int, c0: int, c1: int):
    """The tiles of ``g`` meeting [r0:r1, c0:c1]: ``(i, j, rows, columns)`` of each overlap (global)."""
    for i in range(bisect.bisect_right(g.row_starts, r0) - 1, g.mt):
        (a0, a1) = g.row_range(i)
        if a0 >= r1:
            break
        for j in range(bisect.bisect_right(g.col_starts, c0) - 1, g.nt):
            (b0, b1) = g.col_range(j)
            if b0 >= c1:
                break
            rows, cols = (max(a0, r0), min(a1, r1)), (max(b0, c0), min(b1, c1))
            if rows[0] < rows[1] and cols[0] < cols[1]:
                yield i, j, rows, cols


def _add_part(part: str, row0: int, col0: int, mirrored: bool):
    """Kernel: ``y += part(x or xᵀ)``, y's first element at global (row0, col0) of op(M)."""
    def kernel(x, y):
        y += part_of(x.T if mirrored else x, row0, col0, part)
    return kernel
