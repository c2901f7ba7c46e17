"""An upper bound on the iterations of a driver's loop nest, known before walking it.

A loop nest whose bounds are astronomically large (a loop to 10**18 with no call
in it) would keep the survey walking for hours without a word. A driver states
its loop nest a second time as ``loop_bounds(bound, p)``: every loop's start and
stop are evaluated once, over :class:`Interval` values of the enclosing loop
variables, never iterated; :func:`check_iterations` refuses a run whose bound
passes :data:`MAX_ITERATIONS`, naming the ``.tile`` line of the largest loop.
Anything the intervals cannot tell (a geometry query of a varying index, a
division by a varying value) is :data:`UNKNOWN`, and the loops it bounds count
for nothing: the check refuses only what it can prove is too long. An ``if``'s
conditions are evaluated over the intervals too, three-valued (True, False,
:data:`MAYBE`): a branch whose condition is certainly false counts nothing.
"""
from __future__ import annotations

from pathlib import Path

from ..language import MAX_ITERATIONS
from .errors import TaskFailure



class _Maybe:
    """A condition that may hold or not over the intervals (True and False are certain)."""

    def __bool__(self):
        raise TypeError("an uncertain condition has no truth value: combine it with and_, or_, not_")


MAYBE = _Maybe()


class _Unknown:
    """A value intervals cannot bound: every operation on it is unknown too."""

    def _unknown(self, *args):
        return self

    def _maybe(self, other):
        return MAYBE

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _unknown
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __neg__ = _unknown
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _maybe
    __hash__ = object.__hash__


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

    # comparisons: True or False when every value of the intervals agrees, else MAYBE
    def __eq__(self, other):
        other = _interval(other)
        if other is UNKNOWN:
            return MAYBE
        if self.lo == self.hi == other.lo == other.hi:
            return True
        return MAYBE if self.lo <= other.hi and other.lo <= self.hi else False

    def __ne__(self, other):
        return not_(self == other)

    def __lt__(self, other):
        other = _interval(other)
        if other is UNKNOWN:
            return MAYBE
        return True if self.hi < other.lo else False if self.lo >= other.hi else MAYBE

    def __ge__(self, other):
        return not_(self < other)

    def __gt__(self, other):
        other = _interval(other)
        return MAYBE if other is UNKNOWN else other < self

    def __le__(self, other):
        return not_(self > other)

    __hash__ = object.__hash__


def not_(condition):
    """``not`` of a condition that may be MAYBE."""
    return MAYBE if condition is MAYBE else not condition


def and_(left, right):
    """``and`` of conditions that may be MAYBE."""
    if left is False or right is False:
        return False
    return True if left is True and right is True else MAYBE


def or_(left, right):
    """``or`` of conditions that may be MAYBE."""
    if left is True or right is True:
        return True
    return False if left is False and right is False else MAYBE


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

    def loop(self, start, stop, outer, line: int, step: int = 1, width=None):
        """The interval of a loop's variable and its iterations in all (``outer``: those
        of the enclosing loop); adds them to the total. A negative ``step`` counts down.
        ``width``, when the compiler knows it, is stop − start at every outer iteration:
        the count then comes from it rather than from the intervals' extremes."""
        start, stop = _interval(start), _interval(stop)
        if any(value is UNKNOWN for value in (start, stop, outer)):
            return UNKNOWN, UNKNOWN
        if step > 0:
            count, values = -(-max(0, stop.hi - start.lo) // step), Interval(start.lo, max(start.lo, stop.hi - 1))
        else:
            count, values = -(-max(0, start.hi - stop.lo) // -step), Interval(min(start.hi, stop.lo + 1), start.hi)
        width = _interval(width) if width is not None else UNKNOWN
        if width is not UNKNOWN:
            count = min(count, -(-max(0, width.hi if step > 0 else -width.lo) // abs(step)))
        iterations = outer * count
        self.total += iterations
        self.largest = max(self.largest, (iterations, line), key=lambda pair: pair[0])
        return values, iterations

    @staticmethod
    def when(condition, outer):
        """The iterations of an if's branch: none when its condition is certainly false."""
        return 0 if condition is False else outer

    not_, and_, or_ = staticmethod(not_), staticmethod(and_), staticmethod(or_)

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
    if any(i is UNKNOWN for i in intervals):
        return UNKNOWN
    return Interval(pick(i.lo for i in intervals), pick(i.hi for i in intervals))


def iteration_bound(driver, matrices: dict, params) -> LoopBound | None:
    """The bound on the loop nest's iterations (``total``, and the ``largest`` loop), or None where
    the driver states none or its bounds fail (a division by zero: the walk reports it, with its line)."""
    bounds = getattr(driver, "loop_bounds", None)
    if bounds is None:  # a driver from before the bound existed
        return None
    found = LoopBound(matrices)
    try:
        bounds(found, params)
    except Exception:
        return None
    return found


def check_iterations(driver, matrices: dict, params, rank: int) -> str | None:
    """Refuse, before the loop nest is walked, one that would run more than MAX_ITERATIONS; the warning
    of one that would run more than :data:`LONG_ITERATIONS` (None for a shorter one)."""
    found = iteration_bound(driver, matrices, params)
    if found is None or found.total <= LONG_ITERATIONS:
        return None
    iterations, line = found.largest
    where = f"{Path(driver.PROGRAM.source).name}:{line}" if line else "one loop"
    if found.total > MAX_ITERATIONS:
        raise TaskFailure(f"the loop nest would run up to {count_text(found.total)} loop iterations (at most "
                          f"{count_text(MAX_ITERATIONS)} are run); this loop alone up to {count_text(iterations)}: "
                          f"check its bounds and the parameters", rank, line)
    return (f"the loop nest runs up to {count_text(found.total)} loop iterations ({where} alone up to "
            f"{count_text(iterations)}): at some {SECONDS_PER_TASK * 1e6:.0f} µs a task, tiledsl's own work may take "
            f"up to {duration_text(found.total)}, the first minutes of it before the run, without a word (larger "
            f"tiles do the same work in fewer tasks; Ctrl-C stops it)")


#: iterations of a loop nest past which a run is warned to be long (at 50 µs a task, more than an hour)
LONG_ITERATIONS = 10 ** 8
#: seconds tiledsl's own work takes a task at least, run or simulated (the walk, the scheduler, the messages)
SECONDS_PER_TASK = 50e-6


def duration_text(tasks: int) -> str:
    """How long ``tasks`` tasks take at :data:`SECONDS_PER_TASK`: ``3 hour(s)``, ``40 minutes``."""
    hours = tasks * SECONDS_PER_TASK / 3600
    return f"{hours:.0f} hour(s)" if hours >= 1.5 else f"{hours * 60:.0f} minutes"


def count_text(value) -> str:
    """``10,000,100,000``: every digit while a count has few enough to read (rounded, a count just
    over the limit read as the limit itself), else ``1.2e+18``."""
    return f"{int(value):,}" if value < 10 ** 15 else f"{value:.3g}"
