"""When a tile is next written or released, found from the loop nest's affine description.

A rank that walks only its share of the loop nest (:mod:`.share`) never sees the
tasks of other ranks that write a tile it reads. It need not: for a tile it does
not own, it asks when that tile is next written or released after the point it
has reached, and acts on that event (a new version: copies of the old one can
take no new reader; a release: they go once read) when its walk passes the
point. The owner takes part in every task that touches its tiles, so it counts
their versions as it submits them, as before.

The compiler describes every statement that writes or releases tiles as
:class:`Event` records: its loops (bounds affine in the enclosing loop variables), its
place in the program (the positions that make up its instances' *schedule
keys*) and the tile range it touches (affine too); a statement under an ``or``
(or a min or max that makes one) is several events, whose instances may
overlap (only the first event after a point matters, :class:`Tracker`), and
one under a comparison of sizes alone happens ``when`` the run finds it true;
an ``if`` that bounds no loop alone is a constraint (``2 * k < A.nt``) or a
modulus (``(i + j) % 2 == 0``; ``k % s != 0``: an excluded one) of the instances. A schedule key
``(β0, u1, β1, …, ud, βd)`` interleaves the statement's position in each block
with the iteration of each enclosing loop (``u = v`` for a loop counting up,
``-v`` for one counting down), so that Python's tuple order is program order.
:func:`next_event` finds the least key after a given one over every event of a
matrix whose tile range holds a given tile: per event, the equalities (tile
index = tile) are solved for the deepest variable they name where its
coefficient is ±1, the rest become bounds of the deepest variable each names,
and a depth-first search takes each variable at its least admissible value
(the exact lexicographic minimum, as a polyhedral library's ``lexmin`` would
give, for the affine nests the compiler accepts).
"""
from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, field

from .priorities import EXACT_LEVELS_RANKS, walks_every_task

Form = tuple  # (constant, coefficient of u1, …, coefficient of ud)


@dataclass(frozen=True)
class Loop:
    """``u`` ranges over ``max(lower) <= u < min(upper)`` in steps of ``step`` from ``lower[0]``,
    the loop's start (the other bounds from below are the ifs' around the statement)."""

    lower: tuple  # forms over the enclosing loops' variables
    upper: tuple
    step: int = 1


@dataclass(frozen=True)
class Event:
    """The instances of one statement that write (or release, ``release=True``) tiles of
    ``matrix``: tile rows ``rows[0] <= i < rows[1]`` and columns ``cols[0] <= j < cols[1]``."""

    matrix: str
    positions: tuple  # β0 … βd
    loops: tuple  # Loop per enclosing loop, outermost first
    rows: tuple  # (first, past) forms
    cols: tuple
    release: bool = False
    line: int = 0
    when: bool = True  # whether it happens at all: the run decides the ifs on sizes and parameters alone
    constraints: tuple = ()  # forms F: its instances are those where every F >= 0 (ifs that bound no loop alone)
    moduli: tuple = ()  # (F, d): ... and F % d == 0 (an if taking a loop variable modulo a number)
    off_moduli: tuple = ()  # (F, d): ... and F % d != 0 (the same under != or not)
    # (F, d, axis): ... and F − (the tile's row, axis 0, or column) ≡ 0 (mod d) (a tile index F % d)
    index_moduli: tuple = ()
    index_bounds: tuple = ()  # (F, a, axis): ... and F + a·(the tile's row or column) >= 0 (a tile index x // d)
    _system: "_System" = field(default=None, compare=False, repr=False)

    def system(self) -> "_System":
        if self._system is None:
            object.__setattr__(self, "_system", _System(self))
        return self._system


# a constraint is a list [constant, coefficient of r, coefficient of c, coefficient of u1, …]:
# an equality (== 0) or an inequality (>= 0) over the tile (r, c) asked about and the loops
_R, _C, _U = 1, 2, 3


class _System:
    """An event's constraints with the tile as two symbols, variables eliminated once."""

    def __init__(self, event: Event):
        depth = len(event.loops)
        self.depth = depth
        self.positions = event.positions
        width = _U + depth

        def lifted(form, symbol=None, scale=1, shift=0):
            row = [0] * width
            row[0] = scale * form[0] + shift
            for level, coefficient in enumerate(form[1:]):
                row[_U + level] = scale * coefficient
            if symbol is not None:
                row[symbol] = -scale
            return row

        equalities, inequalities = [], [lifted(form) for form in event.constraints]
        for (first, past), symbol in ((event.rows, _R), (event.cols, _C)):
            if _difference(past, first) == (1,) + (0,) * depth:  # a single index: index == tile
                equalities.append(lifted(first, symbol))
            else:
                inequalities.append(lifted(first, symbol, scale=-1))  # tile - first >= 0
                inequalities.append(lifted(past, symbol, shift=-1))  # past - 1 - tile >= 0
        for form, coefficient, axis in event.index_bounds:
            row = lifted(form)
            row[_C if axis else _R] = coefficient
            inequalities.append(row)
        self.steps = []
        for level, loop in enumerate(event.loops):
            for form in loop.lower:  # u - lower >= 0
                row = lifted(form, scale=-1)
                row[_U + level] += 1
                inequalities.append(row)
            for form in loop.upper:  # upper - 1 - u >= 0
                row = lifted(form, shift=-1)
                row[_U + level] -= 1
                inequalities.append(row)
        self.loops = event.loops
        # solved[level]: u at that level as a form of shallower variables (and r, c), or None
        self.solved: list = [None] * depth
        self.constant_equalities: list = []  # equalities over r and c alone
        self.divides: list = [[] for _ in range(depth)]  # (coefficient, rest) checks: coefficient·u + rest == 0
        for equality in equalities:
            self._eliminate(equality, equalities, inequalities)
        constant: list = []  # inequalities over r and c alone
        bounds: list = [[] for _ in range(depth)]  # inequalities whose deepest variable is that level
        for row in inequalities:
            level = _deepest(row)
            (constant if level is None else bounds[level]).append(row)
        _add_implied(bounds, constant)
        # the search evaluates these rows millions of times: kept sparse (see _sparse)
        self.constant = [_sparse(row) for row in constant]
        self.constant_equalities = [_sparse(row) for row in self.constant_equalities]
        self.solved = [None if row is None else _sparse(row) for row in self.solved]
        self.divides = [[_sparse(row) for row in rows] for rows in self.divides]
        # per level, the moduli whose deepest variable it is: checked once the variable has a value
        self.moduli: list = [[] for _ in range(depth)]
        self.impossible = False  # a modulus of no variable (its coefficients 0 at these sizes) that fails
        for moduli, divides in ((event.moduli, True), (event.off_moduli, False)):
            for form, divisor in moduli:
                levels = [level for level, a in enumerate(form[1:]) if a]
                if levels:
                    self.moduli[levels[-1]].append((form, divisor, divides))
                else:
                    self.impossible |= (form[0] % divisor == 0) != divides
        # tile indices modulo d: rows over the tile and the loops, each checked once its deepest variable has a
        # value (none: a check of the tile alone)
        self.index_moduli: list = [[] for _ in range(depth)]
        self.constant_moduli: list = []
        for form, divisor, axis in event.index_moduli:
            row = lifted(form, _C if axis else _R)
            level = _deepest(row)
            (self.constant_moduli if level is None else self.index_moduli[level]).append((_sparse(row), divisor))
        # levels with neither a divisibility check, a modulus nor a step: every value in range is admissible
        self.plain = [not rows and not moduli and not index_moduli and loop.step == 1
                      for rows, moduli, index_moduli, loop in zip(self.divides, self.moduli, self.index_moduli,
                                                                  event.loops)]
        # per level: (coefficient of its variable, the rest of the row)
        self.bounds = [[(row[_U + level], _sparse(row, without=level)) for row in rows]
                       for level, rows in enumerate(bounds)]

    def _eliminate(self, equality, equalities, inequalities) -> None:
        level = _deepest(equality)
        if level is None:
            self.constant_equalities.append(equality)
            return
        coefficient = equality[_U + level]
        if coefficient not in (1, -1) or self.solved[level] is not None:
            self.divides[level].append(equality)
            return
        # u = -(equality without u) / coefficient: substitute it everywhere else
        value = [-x * coefficient for x in equality]
        value[_U + level] = 0
        self.solved[level] = value
        others = itertools.chain(equalities, inequalities, self.constant_equalities,
                                 (v for v in self.solved if v is not None), *self.divides)
        for row in others:
            if row is not value and row is not equality and row[_U + level]:
                factor = row[_U + level]
                row[_U + level] = 0
                for index, x in enumerate(value):
                    row[index] += factor * x

    def holds(self, r: int, c: int) -> bool:
        """Whether some iteration may touch tile (r, c): the constraints on the tile alone hold."""
        if self.impossible:
            return False
        for row in self.constant:
            if _evaluate(row, r, c, ()) < 0:
                return False
        for row in self.constant_equalities:
            if _evaluate(row, r, c, ()) != 0:
                return False
        return all(_evaluate(row, r, c, ()) % divisor == 0 for row, divisor in self.constant_moduli)

    def first_after(self, r: int, c: int, after: tuple, before: tuple | None = None):
        """The least schedule key of this event's instances on tile (r, c) after ``after`` (and
        before ``before``, when given), or None; (r, c) is a tile it :meth:`holds`."""
        values = [0] * self.depth
        found = self._search(0, True, before is not None, r, c, after, before, values)
        return None if found is None else _key(self.positions, found)

    def _search(self, level: int, low: bool, high: bool, r: int, c: int, after: tuple, before, values: list):
        """Depth-first, least values first: the variables from ``level`` on, given shallower ones;
        ``low`` while the key so far equals ``after``'s beginning, ``high`` while it equals
        ``before``'s (a key past ``before`` is cut off where it leaves it: the search's bound).
        A solved variable has one value: the search goes on down without a branch."""
        while True:
            position, at = self.positions[level], 2 * level
            if low:
                theirs = after[at] if at < len(after) else None
                if theirs is None or position < theirs:
                    return None
                low = position == theirs
            if high:
                theirs = before[at] if at < len(before) else None
                if theirs is None or position > theirs:
                    return None
                high = position == theirs
            if level == self.depth:
                return None if low or (high and len(before) == at + 1) else list(values)
            least, most = self._range(level, r, c, values)
            floor = after[at + 1] if low and at + 1 < len(after) else None
            if floor is not None:
                least = max(least, floor)
            ceiling = None
            if high:
                if at + 1 >= len(before):
                    return None  # the key goes on where ``before`` ends: it is past it
                ceiling = before[at + 1]
                most = min(most, ceiling)
            solved = self.solved[level]
            if solved is None:
                break
            u = values[level] = _evaluate(solved, r, c, values)
            if not (least <= u <= most and (self.plain[level] or self._admissible(level, u, r, c, values))):
                return None
            low, high, level = low and u == floor, high and u == ceiling, level + 1
        step = self.loops[level].step
        if step != 1:
            least += (self._start(level, values) - least) % step
        plain = self.plain[level]
        for u in range(least, most + 1, step):
            values[level] = u
            if plain or self._admissible(level, u, r, c, values):
                found = self._search(level + 1, low and u == floor, high and u == ceiling, r, c, after, before, values)
                if found is not None:
                    return found
        return None

    def _admissible(self, level: int, u: int, r: int, c: int, values: list) -> bool:
        """Whether ``u`` (already in ``values[level]``) meets the level's divisibility checks, moduli and step."""
        for row in self.divides[level]:
            if _evaluate(row, r, c, values) != 0:
                return False
        for form, divisor, divides in self.moduli[level]:
            if (_evaluate_form(form, values) % divisor == 0) != divides:
                return False
        for row, divisor in self.index_moduli[level]:
            if _evaluate(row, r, c, values) % divisor:
                return False
        step = self.loops[level].step
        return step == 1 or (u - self._start(level, values)) % step == 0

    def _start(self, level: int, values: list) -> int:
        """The first value of the loop at ``level``, given the shallower ones (its steps count from it)."""
        return _evaluate_form(self.loops[level].lower[0], values)

    def _range(self, level: int, r: int, c: int, values: list) -> tuple[int, int]:
        """Bounds of the variable at ``level`` from the inequalities whose deepest variable it is."""
        low, high = -(1 << 62), 1 << 62
        for a, rest in self.bounds[level]:
            rest = _evaluate(rest, r, c, values)
            if a > 0:
                low = max(low, -(rest // a))  # a·u + rest >= 0  ⇔  u >= ceil(-rest / a)
            else:
                high = min(high, rest // -a)  # u <= floor(rest / -a)
        return low, high


#: the most bounds :func:`_add_implied` adds to one event's
_MOST_IMPLIED = 64


def _add_implied(bounds: list, constant: list) -> None:
    """Add to the shallower levels what each level's bounds imply of them (Fourier–Motzkin: a
    bound from below and one from above of a variable, scaled to cancel it, sum to a bound of
    the others), deepest first, so that the search cuts a variable's range where no deeper
    value exists instead of trying each of its values in turn (a statement deep in a nest
    that never again touches the tile asked about). Each holds at every point of the
    event's instances: the instances, and the search's answers, are the same."""
    added = 0
    for level in range(len(bounds) - 1, -1, -1):
        lower = [row for row in bounds[level] if row[_U + level] > 0]
        upper = [row for row in bounds[level] if row[_U + level] < 0]
        for a, b in itertools.product(lower, upper):
            p, q = -b[_U + level], a[_U + level]
            row = _tightened([p * x + q * y for x, y in zip(a, b)])
            if row is None:
                continue
            deeper = _deepest(row)
            target = constant if deeper is None else bounds[deeper]
            if row not in target:
                if added == _MOST_IMPLIED:
                    return
                target.append(row)
                added += 1


def _tightened(row: list) -> list | None:
    """``row >= 0`` over integers with its coefficients divided by their greatest common divisor
    (the constant rounded down: the same integer points); None where it always holds."""
    divisor = math.gcd(*row[1:])
    if divisor == 0:
        return None if row[0] >= 0 else row
    return [row[0] // divisor] + [x // divisor for x in row[1:]]


def _difference(a: Form, b: Form) -> tuple:
    return tuple(x - y for x, y in zip(a, b))


def _deepest(row) -> int | None:
    for index in range(len(row) - 1, _U - 1, -1):
        if row[index]:
            return index - _U
    return None


def _sparse(row, without: int | None = None) -> tuple:
    """``row`` as (constant, coefficient of r, of c, ((level, coefficient), ...)) over its nonzero
    variables (leaving out the one at ``without``)."""
    terms = tuple((level, a) for level, a in enumerate(row[_U:]) if a and level != without)
    return row[0], row[_R], row[_C], terms


def _evaluate(row: tuple, r: int, c: int, values: list) -> int:
    constant, at_r, at_c, terms = row
    total = constant + at_r * r + at_c * c
    for level, a in terms:
        total += a * values[level]
    return total


def _evaluate_form(form: Form, values: list) -> int:
    return form[0] + sum(a * u for a, u in zip(form[1:], values) if a)


def _key(positions: tuple, values) -> tuple:
    key = [positions[0]]
    for u, position in zip(values, positions[1:]):
        key += (u, position)
    return tuple(key)


def events_on(events, r: int, c: int) -> list:
    """The ``events`` (of one matrix) whose tile range may hold tile (r, c)."""
    return [event for event in events if event.system().holds(r, c)]


def next_event(events, r: int, c: int, after: tuple, memo: list | None = None):
    """``(key, event)`` of the first of ``events`` (of one matrix, :func:`events_on` tile (r, c))
    to touch tile (r, c) after the schedule key ``after``; None if none does.

    ``memo`` (an entry per event, None at first) keeps what each event's last search found, for
    a caller that asks about one tile at growing keys: its least key after the earlier point
    (still the answer while past ``after``), that it has none (it never will), or a key that
    bounded the search (its least key is no less): an event whose answer still holds, or cannot
    come first, is not searched again."""
    memo = [None] * len(events) if memo is None else memo
    best = None
    for index, known in enumerate(memo):
        if known is not None and known[1] and known[0] is not None and known[0] > after and \
                (best is None or known[0] < best[0]):
            best = (known[0], events[index])
    for index, event in enumerate(events):
        known = memo[index]
        if known is not None:
            bound, exact = known
            if exact and (bound is None or bound > after) or not exact and best is not None and bound >= best[0]:
                continue
        key = event.system().first_after(r, c, after, None if best is None else best[0])
        if key is not None:  # before the best so far: the search is bounded by it
            best, memo[index] = (key, event), (key, True)
        else:
            memo[index] = (None, True) if best is None else (best[0], False)
    return best


class _Matrices:
    """What ``dataflow(rt, p)`` asks of its ``rt``: the matrices."""

    def __init__(self, matrices: dict):
        self.matrices = matrices

    def matrix(self, name: str):
        return self.matrices[name]


def events_of(driver, matrices: dict, params) -> dict | None:
    """The driver's events by matrix name, for a rank that walks only its share; None when the
    driver has none (its loop nest is not affine), a matrix's distribution does not tell rows and
    columns apart, or a coefficient is not an integer at these sizes."""
    if not hasattr(driver, "dataflow") or any(m.lines is None for m in matrices.values()):
        return None
    try:
        described = driver.dataflow(_Matrices(matrices), params)
    except Exception:  # a coefficient the sizes make impossible (n // z with z = 0): the whole walk reports it
        return None
    events: dict = {}
    for event in filter(lambda event: event.when, described):
        forms = [f for loop in event.loops for f in loop.lower + loop.upper] + \
            list(event.rows + event.cols + event.constraints) + \
            [form for form, _ in event.moduli + event.off_moduli] + \
            [form for form, _, _ in event.index_moduli + event.index_bounds]
        divisors = [divisor for _, divisor in event.moduli + event.off_moduli] + [d for _, d, _ in event.index_moduli]
        if not all(isinstance(a, int) for _, a, _ in event.index_bounds):
            return None
        if not all(isinstance(x, int) for form in forms for x in form) or not all(isinstance(d, int) for d in divisors):
            return None
        if 0 in divisors:
            continue  # its if divides by zero: the statement never runs (the run fails where it is met)
        events.setdefault(event.matrix, []).append(event)
    return events


def whole_walk_reason(driver, matrices: dict, params, ranks: int, choice: str) -> str | None:
    """Why the ranks of a run walk the whole loop nest, not their shares; None where they walk
    their shares (several ranks, :func:`events_of` found the program's events) or where there
    is one rank, whose share is the whole. ``choice``: the run's ``--priorities``, whose derived
    priorities may need every task (:func:`.priorities.walks_every_task`). A loop nest outside the
    class is said first, where the priorities are derived too: priority clauses alone would not
    make the ranks walk their shares."""
    if ranks == 1:
        return None
    reasons = []
    if not hasattr(driver, "dataflow"):
        where = getattr(driver, "NOT_AFFINE", None)
        reasons.append("the program's loop nest has no affine description for a share walk to follow "
                       f"({f'{where}; ' if where else ''}docs/cluster.md)")
    if walks_every_task(driver.PROGRAM, choice, ranks):
        own = "" if driver.PROGRAM.derive_priorities else "leave it out for the program's own priority clauses, or "
        reasons.append(f"the program's priorities are derived from every task on up to {EXACT_LEVELS_RANKS} ranks: "
                       "give its calls priority clauses, or --priorities none" if choice != "auto" else
                       f"--priorities auto derives the priorities from every task on up to {EXACT_LEVELS_RANKS} "
                       f"ranks: {own}give --priorities none")
    if reasons:
        return "; and ".join(reasons)
    if any(m.lines is None for m in matrices.values()):
        return "a matrix's distribution does not deal its tiles by rows and columns (a custom distribution)"
    if events_of(driver, matrices, params) is None:
        return "the program's affine description does not hold at these sizes (a coefficient that is no integer)"
    return None


class Tracker:
    """A rank's view of the tiles it does not own, as its walk of its share goes on.

    Before the rank submits the task (or release) at schedule key ``at``, :meth:`reach`
    acts on every pending event before it (``advance(tile)`` for a write, ``release(tile)``
    for a release); after a task, :meth:`touched` makes sure each tile it does not own that
    the task touched has its next event pending. Only the first event after each touch is
    acted on: it closes the copies the rank holds of the tile (a closed copy is never read
    by a later task), so the ones after it, until the rank touches the tile again, would
    close nothing more; a release the rank walks leaves it no copy open either, so it is
    no touch. Nor is a task that leaves the rank nothing open of a tile (``holds(tile)``
    false: a task of another rank that this rank walks to send it an input, which writes
    that rank's tile): no event could close anything, and a tile's version number is the
    rank's own key for its copies. A tile never written or released again is asked about once.
    """

    def __init__(self, events: dict, rank: int, advance, release, holds=lambda tile: True):
        self.events = events  # matrix name -> its Events
        self.rank = rank
        self.advance, self.release, self.holds = advance, release, holds
        self.pending: dict = {}  # tile -> key of its next event
        self.on_tile: dict = {}  # tile -> the events that may touch it, and their memo (:func:`next_event`)
        self.heap: list = []
        self.order = itertools.count()
        self.queries = 0

    def reach(self, at: tuple) -> None:
        heap = self.heap
        while heap and heap[0][0] <= at:
            key, _, tile, event = heapq.heappop(heap)
            del self.pending[tile]
            if key < at:  # the task at ``at`` itself counts its own write
                (self.release if event.release else self.advance)(tile)

    def touched(self, at: tuple, tiles) -> None:
        for tile in tiles:
            if tile.rank != self.rank and tile not in self.pending and self.holds(tile):
                self.queries += 1
                if tile not in self.on_tile:
                    on = events_on(self.events.get(tile.matrix.name, ()), tile.i, tile.j)
                    self.on_tile[tile] = (on, [None] * len(on))
                on, memo = self.on_tile[tile]
                found = next_event(on, tile.i, tile.j, at, memo)
                self.pending[tile] = None if found is None else found[0]  # None: nothing happens to it again
                if found is not None:
                    heapq.heappush(self.heap, (found[0], next(self.order), tile, found[1]))

    def finish(self) -> None:
        """The walk is over: act on every event left (versions end where the program ends)."""
        self.reach((1 << 62,))
