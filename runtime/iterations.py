"""An upper bound on the iterations of a driver's loop nest, known before walking it.

A loop nest whose bounds are astronomically large (a loop to 10**18 with no call
in it) would keep the survey walking for hours without a word. A driver states
its loop nest a second time as ``loop_bounds(bound, p)``: every loop's start and
stop are evaluated once, over :class:`Interval` values of the enclosing loop
variables, never iterated; :func:`check_iterations` refuses a run whose bound
passes :data:`MAX_ITERATIONS`, naming the ``.tile`` line of the largest loop.
Anything the intervals cannot tell (a geometry query of a varying index, a
division by a varying value) is :data:`UNKNOWN`, and the loops it bounds count
for nothing: the check refuses only what it can prove is too long.
"""
from __future__ import annotations

from .errors import TaskFailure

#: Most loop iterations a run may walk (the survey walks each once, at ~1 µs apiece).
MAX_ITERATIONS = 10**10


class _Unknown:
    """A value intervals cannot bound: every operation on it is unknown too."""

    def _unknown(self, *args):
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _unknown
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __neg__ = _unknown


UNKNOWN = _Unknown()


class Interval:
    """The integers ``lo .. hi`` (both included) a loop variable or a let may take."""

    __slots__ = ("lo", "hi")

    def __init__(self, lo: int, hi: int):
        self.lo, self.hi = lo, hi

    def __add__(self, other):
        other = _interval(other)
        return UNKNOWN if other is UNKNOWN else Interval(self.lo + other.lo, self.hi + other.hi)

    __radd__ = __add__

    def __neg__(self):
        return Interval(-self.hi, -self.lo)

    def __sub__(self, other):
        return self + -_interval(other)

    def __rsub__(self, other):
        return -self + other

    def __mul__(self, other):
        other = _interval(other)
        if other is UNKNOWN:
            return UNKNOWN
        corners = [a * b for a in (self.lo, self.hi) for b in (other.lo, other.hi)]
        return Interval(min(corners), max(corners))

    __rmul__ = __mul__

    def __floordiv__(self, other):
        if not isinstance(other, int) or other == 0:
            return UNKNOWN
        ends = (self.lo // other, self.hi // other)
        return Interval(min(ends), max(ends))

    def __mod__(self, other):
        return Interval(0, other - 1) if isinstance(other, int) and other > 0 else UNKNOWN

    def __rfloordiv__(self, other):
        return UNKNOWN

    __rmod__ = __rfloordiv__


def _interval(value):
    """``value`` (an int, an Interval or UNKNOWN) as an Interval or UNKNOWN."""
    return Interval(value, value) if isinstance(value, int) else value


class LoopBound:
    """What a driver's ``loop_bounds`` reports to: the matrices, and every loop's trip count."""

    def __init__(self, matrices: dict):
        self.matrices = matrices
        self.total = 0
        self.largest = (0, None)  # (iterations, .tile line) of the loop with the most

    def matrix(self, name: str):
        return self.matrices[name]

    def loop(self, start, stop, outer, line: int):
        """The interval of a loop's variable and its iterations in all (``outer``: those
        of the enclosing loop); adds them to the total."""
        start, stop = _interval(start), _interval(stop)
        if UNKNOWN in (start, stop, outer):
            return UNKNOWN, UNKNOWN
        count = max(0, stop.hi - start.lo)
        iterations = outer * count
        self.total += iterations
        self.largest = max(self.largest, (iterations, line), key=lambda pair: pair[0])
        return Interval(start.lo, max(start.lo, stop.hi - 1)), iterations

    @staticmethod
    def min(*values):
        return _extreme(min, values)

    @staticmethod
    def max(*values):
        return _extreme(max, values)

    @staticmethod
    def query(method, index):
        """A geometry query (``A.height`` ...) of one known index, else UNKNOWN."""
        if isinstance(index, Interval) and index.lo == index.hi:
            index = index.lo
        if not isinstance(index, int):
            return UNKNOWN
        try:
            return method(index)
        except Exception:  # an index out of range: the survey reports it, with its line
            return UNKNOWN


def _extreme(pick, values):
    intervals = [_interval(v) for v in values]
    if UNKNOWN in intervals:
        return UNKNOWN
    return Interval(pick(i.lo for i in intervals), pick(i.hi for i in intervals))


def check_iterations(driver, matrices: dict, params, rank: int) -> None:
    """Refuse, before the loop nest is walked, one that would run more than MAX_ITERATIONS."""
    bounds = getattr(driver, "loop_bounds", None)
    if bounds is None:  # a driver from before the bound existed
        return
    found = LoopBound(matrices)
    try:
        bounds(found, params)
    except Exception:  # e.g. a division by zero: the survey reports it, with its line
        return
    if found.total > MAX_ITERATIONS:
        iterations, line = found.largest
        raise TaskFailure(f"the loop nest would run up to {found.total:.3g} loop iterations "
                          f"(at most {MAX_ITERATIONS:.0e} are run); this loop alone up to {iterations:.3g}: "
                          f"check its bounds and the parameters", rank, line)
