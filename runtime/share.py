"""A rank's share of the loop nest: the values of each loop that can lead to its tasks.

A rank takes part in a task when it owns one of the task's tiles. With a
distribution where that is a matter of the tile's row and column apart
(:meth:`~.distribution.Distribution.lines_of`: block cyclic and hybrid ones
are), a loop need only visit the values for which some statement below it
could touch a tile of this rank. The compiler states, for each loop, one
*term* per tile argument below it: for each of the tile's row and column
index, either nothing known at this loop (``ANY``: it depends on a deeper
loop, or is not affine), its value (``AT``: it depends only on enclosing
loops), the loop variable plus (``PLUS``) or minus (``MINUS``) a value
known here, or the loop variable plus a value, divided by a positive value
(``DIV``, with the pair ``(value, divisor)``: the block row ``j // s`` of a
hybrid tile column). :func:`among` returns the union over the terms of the values
whose row and column index this rank owns, in the loop's order: a superset of
the values that lead to this rank's tasks (the driver's own ownership test
still decides each task), whose size follows the rank's share rather than the
whole program. A rank that walks the whole nest (one rank, a distribution
without lines, ``explain``) uses :func:`every_value`, a plain ``range``.
"""
from __future__ import annotations

from bisect import bisect_left

ANY, AT, PLUS, MINUS, DIV = 0, 1, 2, 3, 4


def every_value(start: int, stop: int, step: int, terms=()) -> range:
    """Every value of the loop, whatever the terms."""
    return range(start, stop, step)


def among(start: int, stop: int, step: int, terms):
    """The values of ``range(start, stop, step)`` that some term admits (see the module)."""
    low, high = (start, stop) if step > 0 else (stop + 1, start + 1)  # the values lie in [low, high)
    if high <= low:
        return ()
    found: set = set()
    for matrix, row_kind, row, col_kind, col in terms:
        lines = matrix.lines
        rows = _axis(lines.rows, lines.row_set, row_kind, row, low, high)
        if rows == ():
            continue
        cols = _axis(lines.cols, lines.col_set, col_kind, col, low, high)
        if cols == ():
            continue
        if rows is None and cols is None:
            return range(start, stop, step)
        if rows is None or cols is None:
            found.update(cols if rows is None else rows)
        else:
            found.update(set(rows).intersection(cols))
    if step not in (1, -1):
        found = {v for v in found if (v - start) % step == 0}
    return sorted(found, reverse=step < 0)


def _axis(owned: list, owned_set, kind: int, value: int, low: int, high: int):
    """The loop values in [low, high) that this axis admits: None for all of them."""
    if kind == ANY:
        return None
    if kind == AT:
        return None if value in owned_set else ()
    if kind == PLUS:  # index = v + value
        first, past = bisect_left(owned, low + value), bisect_left(owned, high + value)
        return [x - value for x in owned[first:past]] or ()
    if kind == MINUS:  # index = value - v, v in [low, high)  ⇔  index in (value - high, value - low]
        first, past = bisect_left(owned, value - high + 1), bisect_left(owned, value - low + 1)
        return [value - x for x in owned[first:past]] or ()
    return _divided(owned, *value, low, high)


def _divided(owned: list, offset: int, divisor: int, low: int, high: int):
    """DIV: the v in [low, high) with (v + offset) // divisor owned (None: all of them, for a
    divisor that is not positive: the driver's own test decides)."""
    if divisor < 1:
        return None
    first = bisect_left(owned, (low + offset) // divisor)
    past = bisect_left(owned, (high - 1 + offset) // divisor + 1)
    values = []
    for x in owned[first:past]:
        values.extend(range(max(low, x * divisor - offset), min(high, (x + 1) * divisor - offset)))
    return values or ()


class Lines:
    """The tile rows and columns of a matrix whose tiles a rank owns (it owns tile (i, j)
    exactly when it owns row i and column j), sorted and as sets."""

    __slots__ = ("rows", "row_set", "cols", "col_set")

    def __init__(self, rows, cols):
        self.rows, self.cols = sorted(rows), sorted(cols)
        self.row_set, self.col_set = frozenset(self.rows), frozenset(self.cols)
