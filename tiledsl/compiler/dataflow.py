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

Affine here means: every loop that encloses a call or release has constant
step and bounds that are affine in the enclosing loops' variables, every tile
index written or released is affine, with coefficients that the run knows
before it starts (numbers, parameters, matrix sizes: ``(t + 1) * s`` is
affine), and no call or release sits under an ``if``. ``let`` values count
as their forms. Indices that are only read may be anything (``j // s``): their
terms say nothing, and the driver's ownership test decides. A program outside
this class gets no plan (:func:`plan` returns None) and every rank walks its
whole loop nest, as the driver's docstring then says.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import nodes as n
from .analysis import Checked

ANY, AT, PLUS, MINUS, DIV = "ANY", "AT", "PLUS", "MINUS", "DIV"
Form = dict  # loop variable -> coefficient, "" -> constant; coefficients are ints or loop-invariant Exprs


@dataclass
class LoopPlan:
    var: str
    terms: list = field(default_factory=list)  # (matrix, row kind, row value, col kind, col value)


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


@dataclass
class SharePlan:
    keys: dict = field(default_factory=dict)  # leaf span -> key template: ints and (var, sign)
    loops: dict = field(default_factory=dict)  # For span -> LoopPlan
    events: list = field(default_factory=list)


class NotAffine(Exception):
    """The program leaves the class this plan handles."""


def plan(checked: Checked) -> SharePlan | None:
    """The share plan of ``checked``, or None when it is not affine (see the module)."""
    try:
        return _Planner(checked).build()
    except NotAffine:
        return None


class _Planner:
    def __init__(self, checked: Checked):
        self.checked = checked
        self.summaries = {c.call.span: c for c in checked.calls}
        self.result = SharePlan()

    def build(self) -> SharePlan:
        self._block(self.checked.program.body, [], [], {})
        return self.result

    def _block(self, stmts, loops: list, positions: list, lets: dict) -> list:
        """Plan a block; returns the tile references of every leaf in it, with the leaf's lets and loops."""
        refs = []
        lets = dict(lets)
        for position, stmt in enumerate(stmts):
            here = positions + [position]
            if isinstance(stmt, n.Let):
                lets[stmt.name.text] = _let(stmt.value, loops, lets)
            elif isinstance(stmt, n.For):
                refs += self._for(stmt, loops, here, lets)
            elif isinstance(stmt, n.If):
                if _has_leaf(stmt.then) or _has_leaf(stmt.orelse):
                    raise NotAffine("a call or release under an if")
            elif isinstance(stmt, (n.Call, n.Release)):
                refs += self._leaf(stmt, loops, here, lets)
        return refs

    def _for(self, stmt: n.For, loops: list, positions: list, lets: dict) -> list:
        step = 1 if stmt.step is None else _integer(stmt.step)
        if step is None or step == 0:
            raise NotAffine("a loop step that is not a constant")
        sign = 1 if step > 0 else -1
        start, stop = (_form(e, loops, lets) for e in (stmt.start, stmt.stop))
        loop = (stmt.var.text, sign, start, stop, abs(step))
        refs = self._block(stmt.body, loops + [loop], positions, lets)
        depth = len(loops)
        plan = LoopPlan(stmt.var.text)
        for tile, leaf_lets, leaf_loops in refs:
            term = (tile.matrix.text,) + self._spec(tile.row, depth, leaf_loops, leaf_lets) + \
                self._spec(tile.col, depth, leaf_loops, leaf_lets)
            if term not in plan.terms:
                plan.terms.append(term)
        if any(t[1] == ANY and t[3] == ANY for t in plan.terms):
            plan.terms = []  # some statement below may take part at any value: walk them all
        self.result.loops[stmt.span] = plan
        return refs

    def _spec(self, index, depth: int, loops: list, lets: dict) -> tuple:
        """How an index depends on the loop at ``depth``: (kind, value) with value a form or Expr."""
        if isinstance(index, n.Range):
            return (ANY, None)
        inner = {loop[0] for loop in loops[depth:]}
        try:
            form = _form(index, loops, lets)
        except NotAffine:
            divided = self._divided(index, depth, loops, lets)
            if divided is not None:
                return (DIV, divided)
            # known at this loop when it depends on no loop from here in, through lets bound outside it
            names = _names(index)
            if _depends(index, lets) & inner or any(lets[v].depth > depth for v in names if v in lets):
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

    def _divided(self, index, depth: int, loops: list, lets: dict) -> tuple | None:
        """``(rest, divisor)`` when ``index`` is ``(v + rest) // divisor`` for the loop variable v at
        ``depth`` (such as the block row ``j // s`` of a hybrid tile column), the rest and the
        divisor known at that loop; else None."""
        if not (isinstance(index, n.Binary) and index.op == "//"):
            return None
        inner = {loop[0] for loop in loops[depth:]}
        names = _names(index.right)
        if _depends(index.right, lets) & inner or any(lets[v].depth > depth for v in names if v in lets):
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
            return [(stmt.tile, lets, loops)]
        summary = self.summaries[stmt.span]
        for access in summary.accesses:
            if access.mode != "in":
                self._event(access.tile, loops, positions, lets, False, stmt.span.line)
        return [(access.tile, lets, loops) for access in summary.accesses]

    def _event(self, tile: n.TileRef, loops: list, positions: list, lets: dict, release: bool, line: int) -> None:
        space = [(v, sign) for v, sign, *_ in loops]
        bounds = []
        for var, sign, start, stop, step in loops:
            if sign > 0:
                bounds.append(((_u(start, space),), (_u(stop, space),), step))
            else:  # u = -v runs from -start while u < -stop
                bounds.append(((_u(_scale(start, -1), space),), (_u(_scale(stop, -1), space),), step))
        ranges = []
        for index in (tile.row, tile.col):
            if isinstance(index, n.Range):
                first, past = (_form(e, loops, lets) for e in (index.start, index.stop))
            else:
                first = _form(index, loops, lets)
                past = _add(first, {"": 1})
            ranges.append((_u(first, space), _u(past, space)))
        self.result.events.append(EventPlan(tile.matrix.text, tuple(positions), tuple(bounds), ranges[0],
                                            ranges[1], release, line))


# ---------------------------------------------------------------- affine forms
@dataclass(frozen=True)
class _LetInfo:
    form: dict | None  # its value as an affine form, or None
    depends: frozenset  # the loop variables it depends on, through other lets too
    depth: int  # the loops around it


def _let(value, loops: list, lets: dict) -> _LetInfo:
    try:
        form = _form(value, loops, lets)
    except NotAffine:
        form = None
    if form is not None and any(_size(c, 64) >= 64 for c in form.values()):
        form = None  # a coefficient built up by a chain of lets: not worth writing out
    return _LetInfo(form, frozenset(_depends(value, lets)), len(loops))


def _form(expr, loops: list, lets: dict) -> Form:
    """``expr`` as an affine form of the loop variables (NotAffine if it is not one)."""
    names = {loop[0] for loop in loops}
    match expr:
        case n.IntLit(value=value):
            return {"": value}
        case n.Name(ident=ident) if ident.text in names:
            return {ident.text: 1}
        case n.Name(ident=ident) if ident.text in lets:
            if lets[ident.text].form is None:
                raise NotAffine("a let that is not affine")
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
            raise NotAffine("a product of loop variables")
    if _names(expr) & (names | set(lets)):
        raise NotAffine("a loop variable or let under a non-affine operation")
    return {"": expr}  # loop-invariant: the run knows it before it starts


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
    for name in _names(expr):
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
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    if isinstance(a, int) and a == 0:
        return b
    if isinstance(b, int) and b == 0:
        return a
    return n.Binary("+", _expr(a), _expr(b), _span_of(a, b))


def _times(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if (isinstance(a, int) and a == 0) or (isinstance(b, int) and b == 0):
        return 0
    if isinstance(a, int) and a == 1:
        return b
    if isinstance(b, int) and b == 1:
        return a
    return n.Binary("*", _expr(a), _expr(b), _span_of(a, b))


def _expr(value):
    if isinstance(value, int):
        return n.IntLit(value, None) if value >= 0 else n.Unary("-", n.IntLit(-value, None), None)
    return value


def _span_of(*values):
    return next((v.span for v in values if not isinstance(v, int)), None)


def _u(form: Form, space: list) -> tuple:
    """A form as (constant, coefficient of u1, …) over ``space``'s loops (u = sign · v)."""
    return (form.get("", 0),) + tuple(_times(form.get(var, 0), sign) for var, sign in space)


def _integer(expr) -> int | None:
    if isinstance(expr, n.IntLit):
        return expr.value
    if isinstance(expr, n.Unary) and expr.op == "-" and isinstance(expr.operand, n.IntLit):
        return -expr.operand.value
    return None


def _names(expr) -> set:
    match expr:
        case n.Name(ident=ident):
            return {ident.text}
        case n.Unary(operand=operand):
            return _names(operand)
        case n.Binary(left=left, right=right):
            return _names(left) | _names(right)
        case n.Method(arg=arg):
            return _names(arg)
        case n.Func(args=args):
            return set().union(*map(_names, args))
    return set()


def _has_leaf(stmts) -> bool:
    for stmt in stmts:
        if isinstance(stmt, (n.Call, n.Release)):
            return True
        if isinstance(stmt, n.For) and _has_leaf(stmt.body):
            return True
        if isinstance(stmt, n.If) and (_has_leaf(stmt.then) or _has_leaf(stmt.orelse)):
            return True
    return False
