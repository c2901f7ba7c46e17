"""Checked program -> share plan: what lets a rank walk only its share of the loop nest.

Three things, for programs whose writes and releases are affine (below):

* the *schedule key* of every call and release: its position in each block
  interleaved with the enclosing loops' variables (negated for a loop counting
  down), so that keys in tuple order are program order;
* for every loop, a *term* per tile argument of the statements below it: how
  the tile's row and column index depend on the loop's variable (see
  :mod:`tiledsl.runtime.share`), from which a rank visits only values that can
  lead to its tasks;
* every statement that writes or releases tiles as affine data (loop bounds,
  tile ranges, positions), from which a rank finds when a tile it does not own
  is next written or released (:mod:`tiledsl.runtime.dataflow`) instead of
  walking the iterations of other ranks.

Affine here means: every loop that encloses a call or release has a constant
step and bounds that are affine in the enclosing loops' variables, or mins and
maxes of such forms, every tile index written or released is affine (or a min or max of such,
or one plus or minus an affine form modulo, or divided by, a value known before the run:
``(i + 1) % A.mt``, ``i // 2``), with
coefficients that the run knows before it starts (numbers, parameters, matrix
sizes: ``(t + 1) * s`` is affine), and an ``if`` over a call or release compares
such values, joined by ``and``, ``or`` and ``not`` (an ``else`` branch is the
condition negated); a comparison bounds the innermost loop variable it names
where its coefficient is ±1, is a constraint of the statement's instances
otherwise (``2 * k < A.nt``), one that names no loop variable is decided by
the run before it starts (as written: floats and chars compare as they do in the
loop nest), and ``x % d == y`` (x affine, d and y known before the
run) is a residue the instances keep (``!=``: one they leave out). ``let`` values count as their forms. An
``or``, or a min or max that makes one (``for m in min(k, 3) .. n``, ``if m >
min(k, 4)``, a written index ``A[min(k + 1, A.mt - 1), j]``), splits a statement
into alternatives, each an event: their union is the statement's (at most 64 per
statement; a loop of a step other than 1 counts its steps from its start, so a
min start of one is an alternative per form, where that form is the least, and a
min of maxes is outside). Indices that are only read may be anything (``j // s``):
their terms say nothing, and the driver's ownership test decides. A program outside this class gets
no plan (:func:`plan` returns None) and every rank walks its whole loop nest, as the
driver's docstring then says.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

from . import nodes as n
from .analysis import Checked
from .expressions import canonical_text, constant_of, names, unparse, unparse_tile

ANY, AT, PLUS, MINUS, DIV, MOD = "ANY", "AT", "PLUS", "MINUS", "DIV", "MOD"
Form = dict  # loop variable -> coefficient, "" -> constant; coefficients are ints or loop-invariant Exprs


@dataclass
class LoopPlan:
    var: str
    # (matrix, row kind, row value, col kind, col value), and for a tile only read where the rank that
    # runs its call is known at the loop, that call's main tile as such a term
    terms: list = field(default_factory=list)


@dataclass(frozen=True)
class EventPlan:
    """A statement's writes (or release) of one tile argument, over its enclosing loops."""

    matrix: str
    positions: tuple
    loops: tuple  # (lower forms, upper forms, step) in u-space, outermost first
    rows: tuple  # (first, past) forms in u-space
    cols: tuple
    release: bool
    line: int
    # (v, None) or (v, d), v loop-invariant, or an InvariantTest: it happens only where every v >= 0, v % d == 0
    # and every test holds
    when: tuple = ()
    constraints: tuple = ()  # forms F in u-space: its instances are those where every F >= 0
    moduli: tuple = ()  # (F, d): ... and F % d == 0
    off_moduli: tuple = ()  # (F, d): ... and F % d != 0
    index_moduli: tuple = ()  # (F, d, axis): ... and F - (the tile's row, axis 0, or column) ≡ 0 (mod d)
    index_bounds: tuple = ()  # (F, a, axis): ... and F + a·(the tile's row or column) >= 0


@dataclass(frozen=True)
class InvariantTest:
    """A comparison of loop-invariant values (``shift < 1.0``, ``mode == "N"``, ``A.nt > 3``), which
    the run decides as the loop nest would (``not (left op right)`` when ``negated``): a float's or
    a char's is no integer form's sign."""

    left: object  # an int or a loop-invariant expression
    op: str
    right: object
    negated: bool = False


@dataclass
class SharePlan:
    keys: dict = field(default_factory=dict)  # leaf span -> key template: ints and (var, sign)
    loops: dict = field(default_factory=dict)  # For span -> LoopPlan
    events: list = field(default_factory=list)


class NotAffine(Exception):
    """The program leaves the class this plan handles: at ``line``, the innermost statement's."""

    line: int | None = None


def plan(checked: Checked) -> SharePlan | None:
    """The share plan of ``checked``, or None when it is not affine (see the module)."""
    return planned(checked)[0]


def planned(checked: Checked) -> tuple[SharePlan | None, str | None]:
    """The share plan of ``checked`` and None; or None and why it has none (``line 6: k % 2 is
    not affine in the loop variables``)."""
    try:
        return _Planner(checked).build(), None
    except NotAffine as reason:
        return None, f"line {reason.line}: {reason}"


class _Planner:
    def __init__(self, checked: Checked):
        self.checked = checked
        self.summaries = {c.call.span: c for c in checked.calls}
        self.result = SharePlan()
        self.when: list = []  # the conditions of the ifs around that bound no loop (see _comparison)
        self.pieces = 1  # the alternatives the loops and ifs around have split the statements into

    def build(self) -> SharePlan:
        self._block(self.checked.program.body, [], [], {})
        return self.result

    def _block(self, stmts, loops: list, positions: list, lets: dict) -> list:
        """Plan a block; returns the tile references of every leaf in it, with the leaf's lets and loops."""
        refs: list = []
        self._statements(stmts, loops, positions, dict(lets), 0, refs)
        return refs

    def _statements(self, stmts, loops: list, positions: list, lets: dict, first: int, refs: list) -> int:
        """Plan statements of a block, numbered from ``first`` in program order; returns the next
        number. The statements of an ``if`` holding calls take their numbers in the enclosing
        block, then branch before else (at most one of them runs), and are planned once per
        alternative of the condition (:func:`_alternatives`), which bounds the loops around them."""
        number = first
        for stmt in stmts:
            try:
                number = self._statement(stmt, loops, positions, lets, number, refs)
            except NotAffine as reason:
                reason.line = reason.line or stmt.span.line
                raise
        return number

    def _statement(self, stmt, loops: list, positions: list, lets: dict, number: int, refs: list) -> int:
        """Plan one statement numbered ``number``; returns the next number (:meth:`_statements`)."""
        if isinstance(stmt, n.If) and (_has_leaf(stmt.then) or _has_leaf(stmt.orelse)):
            for branch, negated in ((stmt.then, False), (stmt.orelse, True)):
                if _has_leaf(branch):
                    number = self._branch(branch, _alternatives(stmt.cond, loops, lets, negated), loops,
                                          positions, lets, number, refs)
            return number
        here = positions + [number]
        if isinstance(stmt, n.Let):
            lets[stmt.name.text] = _let(stmt.value, loops, lets)
        elif isinstance(stmt, n.For):
            refs += self._for(stmt, loops, here, lets)
        elif isinstance(stmt, (n.Call, n.Release)):
            refs += self._leaf(stmt, loops, here, lets)
        return number + 1

    def _branch(self, branch, alternatives: list, loops: list, positions: list, lets: dict, first: int,
                refs: list) -> int:
        """Plan an if's branch once per alternative of its condition: its statements' events
        are the union of the alternatives' (they may overlap: only the first event after a
        point counts, :mod:`tiledsl.runtime.dataflow`)."""
        number = first
        with self._split(len(alternatives)):
            for guards, conditions in alternatives:
                with self._under(conditions):
                    number = self._statements(branch, _guarded(loops, guards), positions, dict(lets), first, refs)
        return number

    @contextmanager
    def _under(self, conditions: tuple):
        """Statements planned meanwhile happen only where ``conditions`` hold (:func:`_comparison`)."""
        self.when += conditions
        try:
            yield
        finally:
            del self.when[len(self.when) - len(conditions):]

    @contextmanager
    def _split(self, alternatives: int):
        self.pieces *= alternatives
        if self.pieces > _MOST_PIECES:
            raise NotAffine(f"loops and ifs that split a statement into more than {_MOST_PIECES} alternatives")
        try:
            yield
        finally:
            self.pieces //= alternatives

    def _for(self, stmt: n.For, loops: list, positions: list, lets: dict) -> list:
        step = 1 if stmt.step is None else _number(stmt.step)
        if step is None or step == 0:
            raise NotAffine(f"the step {unparse(stmt.step)} is not a constant (a number, or arithmetic of numbers)")
        sign = 1 if step > 0 else -1
        var = stmt.var.text
        start, stop = _tree(stmt.start, loops, lets), _tree(stmt.stop, loops, lets)
        # a loop runs while v >= start and v < stop (counting down, v <= start and v > stop): a min
        # or max makes that a bound per form, or alternatives (a min start counting up: v >= a or v >= b)
        inside = loops + [(var, sign, abs(step), ())]
        alternatives = _all([_starts(var, sign, abs(step), start, inside),
                             _compare("<" if sign > 0 else ">", {var: 1}, stop, inside)])
        refs = []
        with self._split(len(alternatives)):
            for guards, conditions in alternatives:
                mine = tuple((kind, form) for v, kind, form in guards if v == var)
                around = _guarded(loops, tuple(guard for guard in guards if guard[0] != var))
                with self._under(conditions):
                    refs += self._block(stmt.body, around + [(var, sign, abs(step), mine)], positions, lets)
        depth = len(loops)
        plan = LoopPlan(var)
        for tile, leaf_lets, leaf_loops, main in refs:
            term = self._tile_term(tile, depth, leaf_loops, leaf_lets)
            if main is not None and ANY not in term[1::2]:
                runner = self._tile_term(main, depth, leaf_loops, leaf_lets)
                if ANY not in runner[1::2]:  # the rank that reads the tile is known at this loop
                    term += (runner,)
            if term not in plan.terms:
                plan.terms.append(term)
        if any(t[1] == ANY and t[3] == ANY for t in plan.terms):
            plan.terms = []  # some statement below may take part at any value: walk them all
        self.result.loops[stmt.span] = plan
        return refs

    def _tile_term(self, tile: n.TileRef, depth: int, loops: list, lets: dict) -> tuple:
        """(matrix, row kind, row value, col kind, col value) of a tile at the loop at ``depth``."""
        return (tile.matrix.text,) + self._spec(tile.row, depth, loops, lets) + self._spec(tile.col, depth, loops, lets)

    def _spec(self, index, depth: int, loops: list, lets: dict) -> tuple:
        """How an index depends on the loop at ``depth``: (kind, value) with value a form or Expr."""
        if isinstance(index, n.Range):
            return (ANY, None)
        inner = {loop[0] for loop in loops[depth:]}
        try:
            form = _form(index, loops, lets)
        except NotAffine:
            for op, kind in (("//", DIV), ("%", MOD)):
                divided = self._divided(index, depth, loops, lets, op)
                if divided is not None:
                    return (kind, divided)
            # known at this loop when it depends on no loop from here in, through lets bound outside it
            used = set(names(index))
            if _depends(index, lets) & inner or any(lets[v].depth > depth for v in used if v in lets):
                return (ANY, None)
            return (AT, index)
        var = loops[depth][0]
        if any(v in inner and v != var and c != 0 for v, c in form.items()):
            return (ANY, None)
        coefficient = form.get(var, 0)
        rest = {v: c for v, c in form.items() if v != var}
        if coefficient == 0:
            return (AT, rest)
        if coefficient == 1:
            return (PLUS, rest)
        if coefficient == -1:
            return (MINUS, rest)
        return (ANY, None)

    def _divided(self, index, depth: int, loops: list, lets: dict, op: str) -> tuple | None:
        """``(rest, divisor)`` when ``index`` is ``(v + rest) // divisor`` (``op`` "//", such as the block
        row ``j // s`` of a hybrid tile column) or ``(v + rest) % divisor`` (a periodic row) for the
        loop variable v at ``depth``, the rest and the divisor known at that loop; else None."""
        if not (isinstance(index, n.Binary) and index.op == op):
            return None
        inner = {loop[0] for loop in loops[depth:]}
        used = set(names(index.right))
        if _depends(index.right, lets) & inner or any(lets[v].depth > depth for v in used if v in lets):
            return None
        try:
            form = _form(index.left, loops, lets)
        except NotAffine:
            return None
        var = loops[depth][0]
        if form.get(var, 0) != 1 or any(v in inner and v != var and c != 0 for v, c in form.items()):
            return None
        return {v: c for v, c in form.items() if v != var}, index.right

    def _leaf(self, stmt, loops: list, positions: list, lets: dict) -> list:
        key = []
        for position, loop in zip(positions, loops):
            key += [position, (loop[0], loop[1])]
        key.append(positions[-1])
        self.result.keys[stmt.span] = key
        if isinstance(stmt, n.Release):
            self._event(stmt.tile, loops, positions, lets, True, stmt.span.line)
            return [(stmt.tile, lets, loops, None)]
        summary = self.summaries[stmt.span]
        for access in summary.accesses:
            if access.mode != "in":
                self._event(access.tile, loops, positions, lets, False, stmt.span.line)
        main = summary.accesses[summary.main].tile
        # a tile only read comes with the call's main tile: the rank that runs the call, which a
        # version already sent to needs nothing more from its owner (:func:`tiledsl.runtime.share.among`)
        return [(access.tile, lets, loops, main if access.mode == "in" else None) for access in summary.accesses]

    def _event(self, tile: n.TileRef, loops: list, positions: list, lets: dict, release: bool, line: int) -> None:
        """The events of one tile argument written or released: one, or one per alternative where an
        index or a range bound is a min or max (``A[min(k + 1, A.mt - 1), j]``, ``A[k : min(k + 2, A.mt), j]``)."""
        extents = [n.Attr(tile.matrix, n.Ident(count, tile.span), tile.span) for count in ("mt", "nt")]
        try:
            pieces = [(rows, cols, _all([where_rows, where_cols]))
                      for rows, where_rows in _ranges(tile.row, 0, extents[0], loops, lets)
                      for cols, where_cols in _ranges(tile.col, 1, extents[1], loops, lets)]
        except NotAffine as reason:  # (a read index may be anything: say that this one is written)
            raise NotAffine(f"{reason}, in {unparse_tile(tile)}, which it {'releases' if release else 'writes'}") \
                from None
        with self._split(sum(len(alternatives) for *_, alternatives in pieces)):
            for rows, cols, alternatives in pieces:
                for guards, conditions in alternatives:
                    with self._under(conditions):
                        self._add_event(tile.matrix.text, (rows, cols), _guarded(loops, guards), positions, release,
                                        line)

    def _add_event(self, matrix: str, ranges: tuple, loops: list, positions: list, release: bool, line: int) -> None:
        """The event of tiles ``ranges`` ((first, past) forms of rows and columns) over ``loops``."""
        if _NEVER in self.when:
            return  # under a comparison of numbers that does not hold (one that holds is left out)
        space = [(v, sign) for v, sign, *_ in loops]
        bounds = []
        for var, sign, step, guards in loops:
            # in u = sign·v: v >= F is u >= F (u <= -F, counting down), v < F is u < F (u >= 1 - F)
            lower = [f for kind, f in guards if kind == "ge"]
            upper = [f for kind, f in guards if kind == "lt"]
            if sign < 0:
                lower, upper = ([_add(_scale(f, -1), {"": 1}) for f in upper],
                                [_add(_scale(f, -1), {"": 1}) for f in lower])
            bounds.append((tuple(_u(f, space) for f in lower), tuple(_u(f, space) for f in upper), step))
        rows, cols = (tuple(_u(form, space) for form in pair) for pair in ranges)
        moduli = [c for c in self.when if isinstance(c, _Modulus) and not _invariant(c.form)]
        event = EventPlan(matrix, tuple(positions), tuple(bounds), rows, cols, release, line,
                          tuple(_when_entry(c) for c in self.when
                                if _invariant(_condition_form(c)) and not isinstance(c, (_IndexModulus, _IndexBound))),
                          tuple(_u(c, space) for c in self.when if not _invariant(_condition_form(c))
                                and not isinstance(c, (_Modulus, _IndexModulus, _IndexBound))),
                          *(tuple((_u(c.form, space), c.divisor) for c in moduli if c.excluded == excluded)
                            for excluded in (False, True)),
                          tuple((_u(c.form, space), c.divisor, c.axis) for c in self.when
                                if isinstance(c, _IndexModulus)),
                          tuple((_u(c.form, space), c.coefficient, c.axis) for c in self.when
                                if isinstance(c, _IndexBound)))
        if event not in self.result.events:  # alternatives that differ only on other loops' bounds
            self.result.events.append(event)


def _when_entry(condition):
    """A condition of no loop variable as an :class:`EventPlan` ``when`` entry."""
    if isinstance(condition, InvariantTest):
        return condition
    if not isinstance(condition, _Modulus):
        return condition[""], None
    if condition.excluded:  # v % d != 0
        value = condition.form[""]
        return InvariantTest(n.Binary("%", _expr(value), _expr(condition.divisor), _span_of(value)), "!=", 0)
    return condition.form[""], condition.divisor


# ---------------------------------------------------------------- if conditions
_NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
_MOST_PIECES = 64
_NEVER = {"": -1}  # a comparison of numbers that does not hold (-1 >= 0): the statements under it never run


def invariant_width(start, stop, loops: list, lets: dict):
    """``stop − start`` of a loop whose bounds vary with the loops around it but whose width
    does not (``for i in t + r * s .. t + r * s + 1``: 1), as a loop-invariant value (an int
    or an expression); else None. ``loops`` are the enclosing loops (their variables first)
    and ``lets`` the :func:`let_info` of the lets in scope."""
    try:
        first, past = _form(start, loops, lets), _form(stop, loops, lets)
    except NotAffine:
        return None
    width = _add(past, _scale(first, -1))
    return width.get("", 0) if _invariant(width) and not (_invariant(first) and _invariant(past)) else None


def let_info(value, loops: list, lets: dict) -> "_LetInfo":
    """What :func:`invariant_width` needs to know of a ``let``."""
    return _let(value, loops, lets)


def _alternatives(cond, loops: list, lets: dict, negated: bool = False) -> list:
    """``cond`` (or its negation) as alternatives, any of which may hold: each ``(guards,
    conditions)``, the bounds it puts on the loops around it (loop variable, "ge" or "lt", F)
    for v >= F or v < F, F a form of shallower variables, and the comparisons of
    loop-invariant values it needs (:func:`_comparison`). A condition is comparisons of
    affine forms, or of mins and maxes of them, joined by ``and``, ``or`` and ``not``; else
    the program is not affine."""
    match cond:
        case n.Unary(op="not", operand=operand):
            return _alternatives(operand, loops, lets, not negated)
        case n.Binary(op="and" | "or", left=left, right=right):
            sides = [_alternatives(side, loops, lets, negated) for side in (left, right)]
            return _all(sides) if (cond.op == "and") != negated else _any(sides)
        case n.Binary(op="==" | "!=", left=left, right=right) if _is_modulus(left) or _is_modulus(right):
            return _residues(_NEGATED[cond.op] if negated else cond.op, left, right, loops, lets)
        case n.Binary(op="<" | "<=" | ">" | ">=", left=left, right=right) if _is_modulus(left) or _is_modulus(right):
            return _ordered_residues(_NEGATED[cond.op] if negated else cond.op, cond, loops, lets)
        case n.Binary(op="<" | "<=" | ">" | ">=" | "==" | "!=", left=left, right=right):
            trees = _tree(left, loops, lets), _tree(right, loops, lets)
            values = [tree.get("", 0) for tree in trees if isinstance(tree, dict) and _invariant(tree)]
            if len(values) == 2 and not all(isinstance(value, int) for value in values):
                return [((), (InvariantTest(values[0], cond.op, values[1], negated),))]
            return _compare(_NEGATED[cond.op] if negated else cond.op, *trees, loops)
    raise NotAffine(f"the condition {unparse(cond)} is not comparisons joined by and, or and not")


def _is_modulus(expr) -> bool:
    return isinstance(expr, n.Binary) and expr.op == "%"


def _residues(op: str, left, right, loops: list, lets: dict) -> list:
    """The alternatives of ``x % d == y`` (or ``!=``; the ``%`` on either side): x affine, d and y
    loop-invariant. ``==`` holds where x − y ≡ 0 (mod d) (a :data:`_Modulus`) and y is a value
    of x % d: 0 <= y < d, or d < y <= 0 (Python's modulo takes the divisor's sign; two
    alternatives where d is no number). ``!=`` holds where x − y ≢ 0 (mod d) (an excluded
    modulus), and everywhere where y is no value of x % d (``y % d != y``, decided by the run)."""
    modulus, other = (left, right) if _is_modulus(left) else (right, left)
    x, y, d = (_form(e, loops, lets) for e in (modulus.left, other, modulus.right))
    for value in (y, d):
        if not _invariant(value):
            varying = other if value is y else modulus.right
            raise NotAffine(f"{unparse(modulus)} == {unparse(other)}: {unparse(varying)} varies with the loops")
    divisor = d.get("", 0)
    if op == "==":
        residue = [_Modulus(_add(x, _scale(y, -1)), divisor)]
        # 0 <= y <= d - 1 (d > 0), or d + 1 <= y <= 0 (d < 0): else x % d is never y
        above = _decided([y, _add(d, _add(_scale(y, -1), {"": -1}))])
        below = _decided([_scale(y, -1), _add(y, _add(_scale(d, -1), {"": -1}))])
        pieces = [((), within + _decided(residue)) for within in (above, below) if _NEVER not in within]
        return pieces or [((), (_NEVER,))]
    value = y.get("", 0)
    off = [((), _decided([_Modulus(_add(x, _scale(y, -1)), divisor, excluded=True)]))]
    if isinstance(value, int) and isinstance(divisor, int):
        return off + ([((), ())] if divisor and value % divisor != value else [])
    return off + [((), (InvariantTest(n.Binary("%", _expr(value), _expr(divisor), _span_of(value, divisor)), "!=",
                                      value),))]


_FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _ordered_residues(op: str, written, loops: list, lets: dict) -> list:
    """The alternatives of ``x % d op y``, an order (the ``%`` on either side; ``op`` that of the
    comparison ``written``, or its negation): x affine, d a number, y loop-invariant. They are the
    values r of x % d (0 <= r < d, or d < r <= 0) that the order admits, each where x − r ≡ 0
    (mod d); or, where fewer are left out, one alternative that excludes those (x − r ≢ 0 for each).
    Where y is no number the run decides ``r op y`` for each r; where nothing varies, the whole."""
    left, right = written.left, written.right
    if not _is_modulus(left):
        left, right, op = right, left, _FLIPPED[op]
    x, y, d = (_form(e, loops, lets) for e in (left.left, right, left.right))
    divisor = d.get("", 0)
    if _invariant(x) and _invariant(y) and _invariant(d):  # sizes and parameters alone: decided as written
        value = x.get("", 0)
        return [((), (InvariantTest(n.Binary("%", _expr(value), _expr(divisor), _span_of(value, divisor)), op,
                                    y.get("", 0)),))]
    if not (_invariant(d) and isinstance(divisor, int)):
        raise NotAffine(f"{unparse(written)}: an order of a modulo by {unparse(left.right)}, which is not a number")
    if not _invariant(y):
        raise NotAffine(f"{unparse(written)}: {unparse(right)} varies with the loops")
    if divisor == 0:
        return [((), (_NEVER,))]  # (as x % 0 == y: the run fails where it evaluates it)
    residues = range(divisor) if divisor > 0 else range(divisor + 1, 1)
    value = y.get("", 0)
    if not isinstance(value, int):
        if len(residues) > _MOST_PIECES:
            raise NotAffine(f"a condition of more than {_MOST_PIECES} alternatives")
        return _any([[((), (InvariantTest(r, op, value),) + _decided([_Modulus(_add(x, {"": -r}), divisor)]))]
                     for r in residues])
    # the residues admitted are those below (or above) a cut: ranges, however large the divisor
    cut = min(max(value + (op in ("<=", ">")), residues.start), residues.stop)
    below, above = range(residues.start, cut), range(cut, residues.stop)
    admitted, left_out = (below, above) if op in ("<", "<=") else (above, below)
    if min(len(admitted), len(left_out)) > _MOST_PIECES:
        raise NotAffine(f"a condition of more than {_MOST_PIECES} alternatives")
    if len(left_out) < len(admitted):
        return [((), _decided([_Modulus(_add(x, {"": -r}), divisor, excluded=True) for r in left_out]))]
    return _any([[((), _decided([_Modulus(_add(x, {"": -r}), divisor)]))] for r in admitted]) or [((), (_NEVER,))]


@dataclass(frozen=True)
class _Modulus:
    """A condition ``form ≡ 0 (mod divisor)`` (``form ≢ 0`` where ``excluded``), beside the forms F
    of conditions F >= 0 (the divisor an int or a loop-invariant expression)."""

    form: dict
    divisor: object
    excluded: bool = False


def _decided(conditions: list) -> tuple:
    """``conditions`` (forms F >= 0, :class:`_Modulus`) without those of numbers that hold; a
    tuple of :data:`_NEVER` where one of numbers does not."""
    kept = []
    for condition in conditions:
        if isinstance(condition, (InvariantTest, _IndexModulus, _IndexBound)):
            kept.append(condition)
            continue
        form = _condition_form(condition)
        value, divisor = form.get("", 0), condition.divisor if isinstance(condition, _Modulus) else None
        excluded = isinstance(condition, _Modulus) and condition.excluded
        if excluded and divisor in (1, -1):
            return (_NEVER,)  # every integer is 0 modulo ±1
        if not (_invariant(form) and isinstance(value, int) and isinstance(divisor, (int, type(None)))):
            kept.append(condition)
        elif not (value >= 0 if divisor is None else divisor != 0 and (value % divisor == 0) != excluded):
            return (_NEVER,)
    return tuple(kept)


# where a min or max on one side of a comparison makes it hold when it holds for every
# argument: x < min(a, b) is x < a and x < b; the other comparisons, x < max(a, b), for one
_CONJUNCTIVE = {("right", "min"): ("<", "<="), ("right", "max"): (">", ">="),
                ("left", "min"): (">", ">="), ("left", "max"): ("<", "<=")}


def _compare(op: str, left, right, loops: list) -> list:
    """The alternatives (see :func:`_alternatives`) of ``left op right``, two trees of :func:`_tree`."""
    if op == "==":
        return _all([_compare("<=", left, right, loops), _compare(">=", left, right, loops)])
    if op == "!=":
        return _any([_compare("<", left, right, loops), _compare(">", left, right, loops)])
    for side, tree in (("left", left), ("right", right)):
        if not isinstance(tree, dict):
            func, args = tree
            parts = [_compare(op, arg, right, loops) if side == "left" else _compare(op, left, arg, loops)
                     for arg in args]
            return _all(parts) if op in _CONJUNCTIVE[(side, func)] else _any(parts)
    return [_comparison(op, _add(left, _scale(right, -1)), loops)]


def _all(parts: list) -> list:
    """The alternatives of a conjunction of ``parts`` (each a list of alternatives)."""
    combined = [((), ())]
    for part in parts:
        combined = [(guards + tuple(more), conditions + tuple(also)) for guards, conditions in combined
                    for more, also in part]
        if len(combined) > _MOST_PIECES:
            raise NotAffine(f"a condition of more than {_MOST_PIECES} alternatives")
    return combined


def _any(parts: list) -> list:
    """The alternatives of a disjunction of ``parts``."""
    combined = [alternative for part in parts for alternative in part]
    if len(combined) > _MOST_PIECES:
        raise NotAffine(f"a condition of more than {_MOST_PIECES} alternatives")
    return combined


def _comparison(op: str, difference: Form, loops: list) -> tuple:
    """The alternative of ``difference op 0`` (op not ``!=``): bounds on the innermost loop
    variable it names, where its coefficient is ±1; else conditions, forms F that it needs
    to be F >= 0 (``2 * k < A.nt``: A.nt - 1 - 2·k >= 0). A condition of sizes and
    parameters alone (``A.nt > 3``) the run decides before it starts; one of numbers is
    decided here (true: none; false: :data:`_NEVER`)."""
    named = [loop[0] for loop in loops if difference.get(loop[0], 0) != 0]
    if not named or difference[named[-1]] not in (1, -1):
        conditions = {"<": [_add(_scale(difference, -1), {"": -1})], "<=": [_scale(difference, -1)],
                      ">": [_add(difference, {"": -1})], ">=": [difference],
                      "==": [difference, _scale(difference, -1)]}[op]
        return (), _decided(conditions)
    var = named[-1]
    coefficient, rest = difference[var], {k: v for k, v in difference.items() if k != var}
    # coefficient·v + rest  >= 0  or  <= 0  (a strict comparison moves the bound by one)
    at_least = {"<": None, "<=": None, ">": 1, ">=": 0, "==": 0}[op]
    at_most = {"<": -1, "<=": 0, ">": None, ">=": None, "==": 0}[op]
    guards = []
    if at_least is not None:  # coefficient·v >= at_least − rest
        bound = _add({"": at_least}, _scale(rest, -1))
        guards.append((var, "ge", bound) if coefficient == 1 else (var, "lt", _add(_scale(bound, -1), {"": 1})))
    if at_most is not None:  # coefficient·v <= at_most − rest
        bound = _add({"": at_most}, _scale(rest, -1))
        guards.append((var, "lt", _add(bound, {"": 1})) if coefficient == 1 else (var, "ge", _scale(bound, -1)))
    return tuple(guards), ()


def _starts(var: str, sign: int, step: int, start, inside: list) -> list:
    """The alternatives of ``v >= start`` (counting down, ``v <= start``), each with the loop's
    start first among v's bounds from below (where a loop of a step other than 1 counts its
    steps from). At step 1, a min start counting up is the union of the ranges from each of
    its forms; at another step, the steps count from the least of them: an alternative per
    form, where it is the least and no form before it is as small (a max counting down alike)."""
    bound = ">=" if sign > 0 else "<="
    if step == 1 or isinstance(start, dict):
        return _compare(bound, {var: 1}, start, inside)
    func, forms = start[0], _flat(start)
    better = "<" if func == "min" else ">"
    loops = inside[:-1]
    pieces = []
    for i, form in enumerate(forms):
        parts = [_compare(better if j < i else better + "=", form, other, loops)
                 for j, other in enumerate(forms) if j != i]
        pieces.append(_all(parts + [_compare(bound, {var: 1}, form, inside)]))
    return _any(pieces)


def _number(expr) -> int | None:
    """The value of an integer expression of numbers alone (``2``, ``-1``, ``4 - 2``), else None."""
    try:
        form = _form(expr, [], {})
    except NotAffine:
        return None
    value = form.get("", 0)
    return value if _invariant(form) and isinstance(value, int) else None


def _flat(tree) -> list:
    """The forms of a min (or max) of forms, nested calls of the same one flattened; NotAffine
    for a min of maxes or the other way round."""
    func, args = tree
    forms = []
    for arg in args:
        if isinstance(arg, dict):
            forms.append(arg)
        elif arg[0] == func:
            forms += _flat(arg)
        else:
            raise NotAffine("the start of a loop of step other than 1 is a min of maxes, or a max of mins")
    return forms


def _ranges(index, axis: int, extent, loops: list, lets: dict) -> list:
    """The (first, past) forms of the tiles an index or a range names (of rows, ``axis`` 0, or
    columns, ``extent`` of them), each with the alternatives (:func:`_alternatives`) where it is
    those: one, unless an index or bound is a min or max, or holds an affine form modulo or
    divided by a value known before the run."""
    if isinstance(index, n.Range):
        try:
            starts, stops = (_selections(_tree(e, loops, lets), loops) for e in (index.start, index.stop))
        except NotAffine:
            pieces = _modulo_range(index, axis, loops, lets)
            if pieces is not None:
                return pieces
            starts, stops = (_side(e, upper, axis, extent, loops, lets)
                             for e, upper in ((index.start, False), (index.stop, True)))
        return [((first, past), _all([a, b])) for first, a in starts for past, b in stops]
    try:
        tree = _tree(index, loops, lets)
    except NotAffine:
        term = _modulus_term(index, loops, lets)
        if term is not None:
            return _modulo_index(*term, axis, loops, lets)
        term = _modulus_term(index, loops, lets, "//")
        if term is None:
            raise
        past = term[0], term[1], _add(term[2], {"": 1})
        return [((first, stop), _all([a, b])) for first, a in _quotient_side(term, False, axis, extent, loops, lets)
                for stop, b in _quotient_side(past, True, axis, extent, loops, lets)]
    return [((form, _add(form, {"": 1})), where) for form, where in _selections(tree, loops)]


def _side(bound, upper: bool, axis: int, extent, loops: list, lets: dict) -> list:
    """The forms a range's first (past, ``upper``) tile takes, each with its alternatives: a bound
    holding a quotient is a constraint on the tile (:func:`_quotient_side`)."""
    try:
        return _selections(_tree(bound, loops, lets), loops)
    except NotAffine:
        term = _modulus_term(bound, loops, lets, "//")
        if term is None:
            raise
        return _quotient_side(term, upper, axis, extent, loops, lets)


def _modulo_range(index: n.Range, axis: int, loops: list, lets: dict) -> list | None:
    """A range ``m + a : m + b``, m the same ``±(x % d)`` and b − a a number of tiles (at most 64):
    each of its tiles an index of :func:`_modulo_index`; None for a range of another kind."""
    start, stop = (_modulus_term(e, loops, lets) for e in (index.start, index.stop))
    if start is None or stop is None or (start[0], canonical_text(start[1])) != (stop[0], canonical_text(stop[1])):
        return None
    width = _add(stop[2], _scale(start[2], -1))
    if not (_invariant(width) and isinstance(width[""], int) and width[""] <= _MOST_PIECES):
        raise NotAffine(f"the range {unparse(index.start)} : {unparse(index.stop)} spans no number of tiles "
                        f"up to {_MOST_PIECES}")
    return [piece for offset in range(width[""])
            for piece in _modulo_index(start[0], start[1], _add(start[2], {"": offset}), axis, loops, lets)]


def _modulus_term(expr, loops: list, lets: dict, op: str = "%") -> tuple | None:
    """``(s, x % d, e)`` where ``expr`` is s·(x % d) + e, s = ±1 and e affine (``(i + 1) % A.mt``,
    ``k + 1 - j % s``; ``op`` "//": of ``x // d`` alike); None where it is no such sum."""
    match expr:
        case n.Binary(op=found_op) if found_op == op:
            return 1, expr, {}
        case n.Unary(op="-", operand=operand):
            found = _modulus_term(operand, loops, lets, op)
            return found and (-found[0], found[1], _scale(found[2], -1))
        case n.Binary(op="+" | "-", left=left, right=right):
            sign = 1 if expr.op == "+" else -1
            found = _modulus_term(left, loops, lets, op)
            if found is not None:
                return found[0], found[1], _add(found[2], _scale(_form(right, loops, lets), sign))
            found = _modulus_term(right, loops, lets, op)
            if found is not None:
                return sign * found[0], found[1], _add(_form(left, loops, lets), _scale(found[2], sign))
    return None


def _modulo_index(sign: int, modulus: n.Binary, rest: Form, axis: int, loops: list, lets: dict) -> list:
    """The alternatives of a tile index t = sign·(x % d) + rest (x affine, d known before the run,
    sign ±1): x % d lies in [0, d) where d > 0, in (d, 0] where d < 0 (Python's modulo takes the
    divisor's sign), which bounds t; and t is the index where sign·x + rest − t ≡ 0 (mod d) (an
    :class:`_IndexModulus`, t the tile asked about)."""
    x, d = _form(modulus.left, loops, lets), _form(modulus.right, loops, lets)
    if not _invariant(d):
        raise NotAffine(f"{unparse(modulus)}: {unparse(modulus.right)} varies with the loops")
    divisor = d.get("", 0)
    if _invariant(x):  # (through a let) x % d is known before the run
        value = _known_term(sign, modulus, x, divisor, rest)
        return [((value, _add(value, {"": 1})), [((), ())])]
    residue = (_IndexModulus(_add(_scale(x, sign), rest), divisor, axis),)
    pieces = []
    for positive in (True, False):
        # the values of x % d: [low, high) with low, high of d; of sign·(x % d): [-high + 1, -low + 1)
        low, high = ({"": 0}, d) if positive else (_add(d, {"": 1}), {"": 1})
        if sign < 0:
            low, high = _add(_scale(high, -1), {"": 1}), _add(_scale(low, -1), {"": 1})
        where = _decided([_add(d, {"": -1}) if positive else _add(_scale(d, -1), {"": -1})])
        if _NEVER not in where:
            pieces.append(((_add(low, rest), _add(high, rest)), [((), where + residue)]))
    return pieces


def _known_term(sign: int, term: n.Binary, x: Form, divisor, rest: Form) -> Form:
    """sign·(x op d) + rest as a form, x known before the run (``term``: its ``%`` or ``//``)."""
    return _add(rest, {"": _times(n.Binary(term.op, _expr(x.get("", 0)), _expr(divisor), term.span), sign)})


def _quotient_side(term: tuple, upper: bool, axis: int, extent, loops: list, lets: dict) -> list:
    """The first tile t of a range (the past one, ``upper``) at sign·(x // d) + rest (``term``: x
    affine, d known before the run, sign ±1), as a constraint on the tile over any of ``extent``
    tiles: t >= sign·m + rest, or t < sign·m + rest, m = x // d, is m <= y or m >= y for y = a·t + b
    (a = ±1), which is x <= d·y + d − 1 or x >= d·y where d > 0, their mirror images where d < 0
    (an alternative each, a :class:`_IndexBound`)."""
    sign, quotient, rest = term
    x, d = _form(quotient.left, loops, lets), _form(quotient.right, loops, lets)
    if not _invariant(d):
        raise NotAffine(f"{unparse(quotient)}: {unparse(quotient.right)} varies with the loops")
    divisor = d.get("", 0)
    if _invariant(x):  # (through a let) x // d is known before the run
        return [(_known_term(sign, quotient, x, divisor, rest), [((), ())])]
    # the constraint as m >= y (at_least) or m <= y, y = a·t + b
    a, b, at_least = {(False, 1): (1, _scale(rest, -1), False), (False, -1): (-1, rest, True),
                      (True, 1): (1, _add(_scale(rest, -1), {"": 1}), True),
                      (True, -1): (-1, _add(rest, {"": -1}), False)}[(upper, sign)]
    pieces = []
    for way in (1, -1):  # d > 0, d < 0
        d_b = _scale(b, divisor)
        if at_least:  # way·(x − d·y) >= 0
            bound = _IndexBound(_scale(_add(x, _scale(d_b, -1)), way), _times(divisor, -way * a), axis)
        else:  # way·(d·y + d − x) − 1 >= 0
            bound = _IndexBound(_add(_scale(_add(_add(d_b, d), _scale(x, -1)), way), {"": -1}),
                                _times(divisor, way * a), axis)
        where = _decided([_add(_scale(d, way), {"": -1})])
        if _NEVER not in where:
            pieces.append(({"": extent} if upper else {"": 0}, [((), where + (bound,))]))
    return pieces


@dataclass(frozen=True)
class _IndexBound:
    """``form + coefficient·t >= 0``, t the tile's index on ``axis`` (0: rows) (a tile index ``x // d``)."""

    form: dict
    coefficient: object
    axis: int


@dataclass(frozen=True)
class _IndexModulus:
    """A tile index ``form % divisor`` on ``axis`` (0: rows): the instances where ``form`` less the
    tile's index is ≡ 0 (mod divisor)."""

    form: dict
    divisor: object
    axis: int


def _selections(tree, loops: list) -> list:
    """The forms a tree of mins and maxes (:func:`_tree`) takes, each with the alternatives where it
    is the tree's value: an argument of a min where it is below those before it and not above
    those after (a max alike), nested trees through their own selections."""
    if isinstance(tree, dict):
        return [(tree, [((), ())])]
    func, args = tree
    better = "<" if func == "min" else ">"
    found = []
    for i, arg in enumerate(args):
        ahead = [_compare(better if j < i else better + "=", arg, other, loops)
                 for j, other in enumerate(args) if j != i]
        found += [(form, _all([where, *ahead])) for form, where in _selections(arg, loops)]
    return found


def _condition_form(condition) -> Form:
    if isinstance(condition, InvariantTest):
        return {"": 0}  # decided by the run: a condition of no loop variable
    return condition.form if isinstance(condition, (_Modulus, _IndexModulus, _IndexBound)) else condition


def _guarded(loops: list, guards: tuple) -> list:
    """``loops`` with each guard added to the loop of its variable."""
    out = []
    for var, sign, step, existing in loops:
        more = tuple((kind, form) for v, kind, form in guards if v == var)
        out.append((var, sign, step, existing + more))
    return out


# ---------------------------------------------------------------- affine forms
@dataclass(frozen=True)
class _LetInfo:
    form: dict | None  # its value as an affine form, or None
    depends: frozenset  # the loop variables it depends on, through other lets too
    depth: int  # the loops around it
    tree: tuple | None = None  # when it is no form, a min or max of them (:func:`_tree`), or None


def _let(value, loops: list, lets: dict) -> _LetInfo:
    try:
        form = _form(value, loops, lets)
    except NotAffine:
        form = None
    if form is not None and any(_size(c, 64) >= 64 for c in form.values()):
        form = None  # a coefficient built up by a chain of lets: not worth writing out
    tree = None
    if form is None:
        try:
            tree = _tree(value, loops, lets)
        except NotAffine:
            pass
    return _LetInfo(form, frozenset(_depends(value, lets)), len(loops), None if isinstance(tree, dict) else tree)


def _form(expr, loops: list, lets: dict) -> Form:
    """``expr`` as an affine form of the loop variables (NotAffine if it is not one)."""
    variables = {loop[0] for loop in loops}
    match expr:
        case n.IntLit(value=value):
            return {"": value}
        case n.Name(ident=ident) if ident.text in variables:
            return {ident.text: 1}
        case n.Name(ident=ident) if ident.text in lets:
            if lets[ident.text].form is None:
                raise NotAffine(f"the let {ident.text} is not affine")
            return lets[ident.text].form
        case n.Unary(op="-", operand=operand):
            return _scale(_form(operand, loops, lets), -1)
        case n.Binary(op="+" | "-", left=left, right=right):
            right_form = _form(right, loops, lets)
            return _add(_form(left, loops, lets), right_form if expr.op == "+" else _scale(right_form, -1))
        case n.Binary(op="*", left=left, right=right):
            a, b = _form(left, loops, lets), _form(right, loops, lets)
            if _invariant(a):
                return _scale(b, a.get("", 0))
            if _invariant(b):
                return _scale(a, b.get("", 0))
            raise NotAffine(f"{unparse(expr)} multiplies loop variables")
    if any(name in variables or name in lets for name in names(expr)):  # (not a set of every let: one per let)
        if isinstance(expr, n.Func) and expr.func.text in ("min", "max"):
            raise NotAffine(f"{unparse(expr)} is a {expr.func.text} of loop variables, which only loop bounds, "
                            f"compared values, written indices and lets of them take (with sums and number multiples)")
        raise NotAffine(f"{unparse(expr)} is not affine in the loop variables")
    return {"": expr}  # loop-invariant: the run knows it before it starts


def _tree(expr, loops: list, lets: dict):
    """``expr`` as an affine form, or as ``(func, trees)`` when it is a min or max (``func``) of
    such trees, directly or through lets (``min(k + kd + 1, A.mt)``: two forms; ``min(A.mt,
    A.nt)``, known before the run, is one), or a sum or number multiple of them (``min(k, 4) +
    1`` is ``min(k + 1, 5)``); NotAffine otherwise."""
    try:
        return _form(expr, loops, lets)
    except NotAffine:
        match expr:
            case n.Func(func=name, args=args) if name.text in ("min", "max"):
                return name.text, tuple(_tree(arg, loops, lets) for arg in args)
            case n.Name(ident=ident) if ident.text in lets and lets[ident.text].tree is not None:
                return lets[ident.text].tree
            case n.Binary(op="+" | "-", left=left, right=right):
                right_tree = _tree_scaled(_tree(right, loops, lets), 1 if expr.op == "+" else -1)
                return _tree_sum(_tree(left, loops, lets), right_tree)
            case n.Unary(op="-", operand=operand):
                return _tree_scaled(_tree(operand, loops, lets), -1)
            case n.Binary(op="*", left=left, right=right) if constant_of(left, "int") is not None:
                return _tree_scaled(_tree(right, loops, lets), constant_of(left, "int"))
            case n.Binary(op="*", left=left, right=right) if constant_of(right, "int") is not None:
                return _tree_scaled(_tree(left, loops, lets), constant_of(right, "int"))
        raise


def _tree_sum(a, b):
    """The tree of a + b (:func:`_tree`): min(x, y) + z is min(x + z, y + z)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return _add(a, b)
    if isinstance(a, dict):
        a, b = b, a
    return a[0], tuple(_tree_sum(arg, b) for arg in a[1])


def _tree_scaled(tree, factor: int):
    """The tree of factor · tree: a negative factor turns a min into a max."""
    if isinstance(tree, dict):
        return _scale(tree, factor)
    if factor == 0:
        return {"": 0}
    func = tree[0] if factor > 0 else {"min": "max", "max": "min"}[tree[0]]
    return func, tuple(_tree_scaled(arg, factor) for arg in tree[1])


def _size(value, cap: int) -> int:
    """Nodes of a coefficient's expression tree, counted up to ``cap``."""
    count, stack = 0, [value]
    while stack and count < cap:
        node = stack.pop()
        count += 1
        if isinstance(node, n.Binary):
            stack += [node.left, node.right]
        elif isinstance(node, n.Unary):
            stack.append(node.operand)
    return count


def _depends(expr, lets: dict) -> set:
    """The loop variables ``expr`` depends on, directly or through lets."""
    found = set()
    for name in names(expr):
        found |= lets[name].depends if name in lets else {name}
    return found


def _invariant(form: Form) -> bool:
    return set(form) <= {""}


def _add(a: Form, b: Form) -> Form:
    out = dict(a)
    for key, value in b.items():
        out[key] = _plus(out.get(key, 0), value)
    return {k: v for k, v in out.items() if not (isinstance(v, int) and v == 0) or k == ""}


def _scale(form: Form, factor) -> Form:
    return {k: _times(v, factor) for k, v in form.items()}


def _plus(a, b):
    """a + b, loop-invariant values (ints or expressions), folded: ``A.mt - 1``, not
    ``-1 + (1 + A.mt * -1) * -1``."""
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return _rebuild(_combined(_linear(a), _linear(b), 1))


def _times(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if isinstance(b, int) or isinstance(a, int):
        factor, value = (b, a) if isinstance(b, int) else (a, b)
        return _rebuild(_combined(({}, 0), _linear(value), factor))
    return n.Binary("*", _expr(a), _expr(b), _span_of(a, b))


def _linear(value) -> tuple[dict, int]:
    """``value`` as ({text: (term, coefficient)}, constant): a sum of integer multiples of the
    terms that are not sums, differences or integer multiples themselves."""
    match value:
        case int():
            return {}, value
        case n.IntLit(value=number):
            return {}, number
        case n.Unary(op="-", operand=operand):
            return _combined(({}, 0), _linear(operand), -1)
        case n.Binary(op="+" | "-", left=left, right=right):
            return _combined(_linear(left), _linear(right), 1 if value.op == "+" else -1)
        case n.Binary(op="*", left=left, right=right) if constant_of(left, "int") is not None:
            return _combined(({}, 0), _linear(right), constant_of(left, "int"))
        case n.Binary(op="*", left=left, right=right) if constant_of(right, "int") is not None:
            return _combined(({}, 0), _linear(left), constant_of(right, "int"))
    return {unparse(value): (value, 1)}, 0


def _combined(a: tuple, b: tuple, factor: int) -> tuple[dict, int]:
    """a + factor·b over linear values."""
    terms = dict(a[0])
    for text, (term, coefficient) in b[0].items():
        total = terms.get(text, (term, 0))[1] + factor * coefficient
        terms[text] = (term, total)
    return {k: v for k, v in terms.items() if v[1] != 0}, a[1] + factor * b[1]


def _rebuild(linear: tuple):
    """An int, or the expression of a linear value: its terms in order, then the constant."""
    terms, constant = linear
    out = None
    for term, coefficient in terms.values():
        scaled = term if abs(coefficient) == 1 else n.Binary("*", term, n.IntLit(abs(coefficient), term.span),
                                                                 term.span)
        if out is None:
            out = scaled if coefficient > 0 else n.Unary("-", scaled, term.span)
        else:
            out = n.Binary("+" if coefficient > 0 else "-", out, scaled, term.span)
    if out is None:
        return constant
    if constant:
        out = n.Binary("+" if constant > 0 else "-", out, n.IntLit(abs(constant), out.span), out.span)
    return out


def _expr(value):
    if isinstance(value, int):
        return n.IntLit(value, None) if value >= 0 else n.Unary("-", n.IntLit(-value, None), None)
    return value


def _span_of(*values):
    return next((v.span for v in values if not isinstance(v, int)), None)


def _u(form: Form, space: list) -> tuple:
    """A form as (constant, coefficient of u1, …) over ``space``'s loops (u = sign · v)."""
    return (form.get("", 0),) + tuple(_times(form.get(var, 0), sign) for var, sign in space)


def _has_leaf(stmts) -> bool:
    for stmt in stmts:
        if isinstance(stmt, (n.Call, n.Release)):
            return True
        if isinstance(stmt, n.For) and _has_leaf(stmt.body):
            return True
        if isinstance(stmt, n.If) and (_has_leaf(stmt.then) or _has_leaf(stmt.orelse)):
            return True
    return False
