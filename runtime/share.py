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
hybrid tile column), or modulo one (``MOD``, the same pair: a periodic row
``(i + 1) % U.mt``). :func:`among` returns the union over the terms of the values
whose row and column index this rank owns, in the loop's order: a superset of
the values that lead to this rank's tasks (the driver's own ownership test
still decides each task), whose size follows the rank's share rather than the
whole program. A tile only read may come with its call's main tile as a term of
its own (both known at the loop): the rank that reads it. A value that only such
terms admit is passed over where each of those tiles' current version already
went whole to its reader: the task would send nothing, and this rank, which owns
the tile, sees every new version of it in its own walk. A value whose tile lies outside its matrix is no rank's: rank 0
walks those too (:attr:`Lines.edges`), so that the tile check meets it and the
run fails there, as on one rank. A rank that walks the whole nest (one rank, a distribution
without lines, ``explain``) uses :func:`every_value`, a plain ``range``.
"""
from __future__ import annotations

from bisect import bisect_left

ANY, AT, PLUS, MINUS, DIV, MOD = 0, 1, 2, 3, 4, 5


def every_value(start: int, stop: int, step: int, terms=()) -> range:
    """Every value of the loop, whatever the terms."""
    return range(start, stop, step)


def among(start: int, stop: int, step: int, terms):
    """The values of ``range(start, stop, step)`` that some term admits (see the module);
    ``terms`` computes them (a tuple: a driver of format 1). Terms that cannot be computed (a
    division by zero in an index) give every value: the walk then meets the statement whose
    index it is, which fails at its own line, as on one rank."""
    low, high = (start, stop) if step > 0 else (stop + 1, start + 1)  # the values lie in [low, high)
    if high <= low:
        return ()
    if callable(terms):
        try:
            terms = terms()
        except ArithmeticError:
            return range(start, stop, step)
    found: set = set()
    reads: list = []  # the terms of tiles only read whose reader is known here, with their values
    for matrix, row_kind, row, col_kind, col, *reader in terms:
        lines = matrix.lines
        if lines.edges:
            outside = [_outside(kind, value, extent, low, high)
                       for kind, value, extent in ((row_kind, row, matrix.mt), (col_kind, col, matrix.nt))]
            if None in outside:
                return range(start, stop, step)
            found.update(*outside)
        rows = _axis(lines.rows, lines.row_set, row_kind, row, low, high)
        if rows == ():
            continue
        cols = _axis(lines.cols, lines.col_set, col_kind, col, low, high)
        if cols == ():
            continue
        if rows is None and cols is None:
            values = range(low, high)
        elif rows is None or cols is None:
            values = set(cols if rows is None else rows)
        else:
            values = set(rows).intersection(cols)
        if reader and _computable((row_kind, row, col_kind, col, *reader[0][1:])):
            reads.append((values, matrix, row_kind, row, col_kind, col, reader[0]))
        elif isinstance(values, range):
            return range(start, stop, step)
        else:
            found.update(values)
    candidates = found.union(*(values for values, *_ in reads))
    if step not in (1, -1):
        candidates = {v for v in candidates if (v - start) % step == 0}
    ordered = sorted(candidates, reverse=step < 0)
    return _unless_sent(ordered, found, reads) if reads else ordered


def _computable(spec: tuple) -> bool:
    """Whether the indices of ``spec`` (kind, value, kind, value, ...) can be computed at every loop
    value: a quotient or a modulo by a value that is not zero (the driver's own test meets the rest)."""
    return all(kind not in (DIV, MOD) or value[1] != 0 for kind, value in zip(spec[::2], spec[1::2]))


def _unless_sent(ordered: list, found: set, reads: list):
    """The values of ``ordered`` in ``found``, and those of a read's term (``reads``) whose tile's
    current version has not yet gone whole to the rank that reads it, decided as the loop reaches
    each value: this rank's earlier tasks may have written or sent the tile since the loop began.
    Where the rank takes part only by owning such a tile (the only rank that writes or releases
    it, so its walk sees every new version), the task would send nothing: it is passed over."""
    for v in ordered:
        if v in found:
            yield v
            continue
        for values, matrix, row_kind, row, col_kind, col, (runner, *where) in reads:
            if v in values:
                i, j = _index(row_kind, row, v), _index(col_kind, col, v)
                reader = runner.rank_of(_index(where[0], where[1], v), _index(where[2], where[3], v))
                if reader == matrix.rank or not matrix.sent_whole(i, j, reader):
                    yield v
                    break


def _index(kind: int, value, v: int) -> int:
    """A tile index at loop value ``v`` by its term's kind (not ANY)."""
    if kind == AT:
        return value
    if kind == PLUS:
        return v + value
    if kind == MINUS:
        return value - v
    offset, divisor = value
    return (v + offset) // divisor if kind == DIV else (v + offset) % divisor


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
    if kind == MOD:
        return _modulo(owned, *value, low, high)
    return _divided(owned, *value, low, high)


def _outside(kind: int, value, extent: int, low: int, high: int):
    """The loop values in [low, high) whose index on this axis leaves [0, extent): None for all
    of them, an empty list where none does or the index is not known here."""
    if kind == ANY:
        return []
    if kind == AT:
        return None if not 0 <= value < extent else []
    if kind == PLUS:  # index = v + value
        below, above = -value, extent - value
    elif kind == MINUS:  # index = value - v: below 0 for v > value, beyond for v <= value - extent
        return [*range(max(low, value + 1), high), *range(low, min(high, value - extent + 1))]
    elif kind == MOD:  # index = (v + offset) % divisor: outside where its residue is past the extent
        offset, divisor = value
        if divisor == 0:
            return None
        if 0 < divisor <= extent:
            return []
        return [v for v in range(low, high) if not 0 <= (v + offset) % divisor < extent]
    else:  # DIV: index = (v + offset) // divisor
        offset, divisor = value
        if divisor < 1:
            return None
        below, above = -offset, extent * divisor - offset
    return [*range(low, min(high, below)), *range(max(low, above), high)]


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


def _modulo(owned: list, offset: int, divisor: int, low: int, high: int):
    """MOD: the v in [low, high) with (v + offset) % divisor owned (None: all of them, for a divisor
    of 0: the driver's own test decides)."""
    if divisor == 0:
        return None
    values = []
    for x in owned:
        if 0 <= x < divisor or divisor < x <= 0:  # a value of the modulo
            values.extend(range(low + (x - offset - low) % abs(divisor), high, abs(divisor)))
    return sorted(values) or ()


class Lines:
    """The tile rows and columns of a matrix whose tiles a rank owns (it owns tile (i, j)
    exactly when it owns row i and column j), sorted and as sets; ``edges``: the rank also
    walks the loop values that lead outside the matrix (rank 0), to report them."""

    __slots__ = ("rows", "row_set", "cols", "col_set", "edges")

    def __init__(self, rows, cols, edges: bool = False):
        self.rows, self.cols = sorted(rows), sorted(cols)
        self.row_set, self.col_set = frozenset(self.rows), frozenset(self.cols)
        self.edges = edges
