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
step and bounds that are affine in the enclosing loops' variables (or, where that
makes one bound per argument, a min or max of such forms), every tile
index written or released is affine, with coefficients that the run knows
before it starts (numbers, parameters, matrix sizes: ``(t + 1) * s`` is
affine), and a call or release under an ``if`` is so only under comparisons of
affine forms joined by ``and`` (or ``or`` under ``not``; an ``else`` branch is the
condition negated), each naming a loop variable with coefficient ±1, whose bounds
join that loop's. ``let`` values count
as their forms. Indices that are only read may be anything (``j // s``): their
terms say nothing, and the driver's ownership test decides. A program outside
this class gets no plan (:func:`plan` returns None) and every rank walks its
whole loop nest, as the driver's docstring then says.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from . import nodes as n
from .analysis import Checked
from .expressions import constant_of, names, unparse

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
        refs: list = []
        self._statements(stmts, loops, positions, dict(lets), itertools.count(), refs)
        return refs

    def _statements(self, stmts, loops: list, positions: list, lets: dict, numbers, refs: list) -> None:
        """Plan statements of a block, numbered from ``numbers`` in program order. The
        statements of an ``if`` holding calls take their numbers in the enclosing block,
        then branch before else (at most one of them runs), and its condition bounds the
        loops around them (:func:`_guards`)."""
        for stmt in stmts:
            if isinstance(stmt, n.If) and (_has_leaf(stmt.then) or _has_leaf(stmt.orelse)):
                for branch, negated in ((stmt.then, False), (stmt.orelse, True)):
                    if _has_leaf(branch):
                        guarded = _guarded(loops, _guards(stmt.cond, loops, lets, negated))
                        self._statements(branch, guarded, positions, dict(lets), numbers, refs)
                continue
            here = positions + [next(numbers)]
            if isinstance(stmt, n.Let):
                lets[stmt.name.text] = _let(stmt.value, loops, lets)
            elif isinstance(stmt, n.For):
                refs += self._for(stmt, loops, here, lets)
            elif isinstance(stmt, (n.Call, n.Release)):
                refs += self._leaf(stmt, loops, here, lets)

    def _for(self, stmt: n.For, loops: list, positions: list, lets: dict) -> list:
        step = 1 if stmt.step is None else constant_of(stmt.step, "int")
        if step is None or step == 0:
            raise NotAffine("a loop step that is not a constant")
        sign = 1 if step > 0 else -1
        # a loop runs while every one of its bounds holds: max(a, b) .. min(c, d) counting up is from a,
        # below c, and the guards v >= b and v < d (counting down, min(a, b) .. max(c, d): v <= b, v > d)
        start, *later = _bounds(stmt.start, "max" if sign > 0 else "min", loops, lets)
        stop, *sooner = _bounds(stmt.stop, "min" if sign > 0 else "max", loops, lets)
        shift = 0 if sign > 0 else 1
        guards = tuple(("ge" if sign > 0 else "lt", _add(f, {"": shift})) for f in later) + \
            tuple(("lt" if sign > 0 else "ge", _add(f, {"": shift})) for f in sooner)
        loop = (stmt.var.text, sign, start, stop, abs(step), guards)
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

    def _divided(self, index, depth: int, loops: list, lets: dict) -> tuple | None:
        """``(rest, divisor)`` when ``index`` is ``(v + rest) // divisor`` for the loop variable v at
        ``depth`` (such as the block row ``j // s`` of a hybrid tile column), the rest and the
        divisor known at that loop; else None."""
        if not (isinstance(index, n.Binary) and index.op == "//"):
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
            return [(stmt.tile, lets, loops)]
        summary = self.summaries[stmt.span]
        for access in summary.accesses:
            if access.mode != "in":
                self._event(access.tile, loops, positions, lets, False, stmt.span.line)
        return [(access.tile, lets, loops) for access in summary.accesses]

    def _event(self, tile: n.TileRef, loops: list, positions: list, lets: dict, release: bool, line: int) -> None:
        space = [(v, sign) for v, sign, *_ in loops]
        bounds = []
        for var, sign, start, stop, step, guards in loops:
            # in u = sign·v: v >= F is u >= F (u <= -F, counting down), v < F is u < F (u >= 1 - F)
            lower = [start] + [f for kind, f in guards if kind == "ge"]
            upper = [stop] + [f for kind, f in guards if kind == "lt"]
            if sign < 0:  # u = -v runs from -start while u < -stop
                lower, upper = ([_scale(start, -1)] + [_add(_scale(f, -1), {"": 1}) for f in upper[1:]],
                                [_scale(stop, -1)] + [_add(_scale(f, -1), {"": 1}) for f in lower[1:]])
            if step != 1 and len(lower) > 1:
                raise NotAffine("an if bounding a loop of step other than 1 from below")  # its start would move
            bounds.append((tuple(_u(f, space) for f in lower), tuple(_u(f, space) for f in upper), step))
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


# ---------------------------------------------------------------- if conditions
_NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


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


def _guards(cond, loops: list, lets: dict, negated: bool = False) -> list:
    """The bounds a condition puts on the loops around it: (loop variable, "ge" or "lt", F) for
    v >= F or v < F, F a form of shallower variables. A condition is comparisons of affine
    forms joined by ``and`` (``or`` under ``not``), each bounding the innermost loop variable
    it names, with coefficient ±1 (a ``min`` on the greater side of ``<``, ``>`` or their
    ``=`` forms, or a ``max`` on the lesser, is a comparison per argument); else the
    program is not affine."""
    match cond:
        case n.Unary(op="not", operand=operand):
            return _guards(operand, loops, lets, not negated)
        case n.Binary(op="and" | "or", left=left, right=right) if (cond.op == "and") != negated:
            return _guards(left, loops, lets, negated) + _guards(right, loops, lets, negated)
        case n.Binary(op="<" | "<=" | ">" | ">=", left=left, right=right) if not negated and _splits(cond):
            return [bound for side in _split(cond) for bound in _guards(side, loops, lets)]
        case n.Binary(op="<" | "<=" | ">" | ">=" | "==", left=left, right=right) if not negated:
            return _comparison(cond.op, _add(_form(left, loops, lets), _scale(_form(right, loops, lets), -1)),
                               loops)
        case n.Binary(op="<" | "<=" | ">" | ">=" | "!=", left=left, right=right) if negated:
            return _guards(n.Binary(_NEGATED[cond.op], left, right, cond.span), loops, lets)
    raise NotAffine("an if condition that is not affine comparisons joined by and")


# a comparison with min or max on one side that holds when it holds for every argument:
# x < min(a, b) is x < a and x < b; x < max(a, b) is an or, outside the class
_CONJUNCTIVE = {("right", "min"): ("<", "<="), ("right", "max"): (">", ">="),
                ("left", "min"): (">", ">="), ("left", "max"): ("<", "<=")}


def _splits(cond: n.Binary) -> bool:
    return any(isinstance(e, n.Func) and cond.op in _CONJUNCTIVE.get((side, e.func.text), ())
               for side, e in (("left", cond.left), ("right", cond.right)))


def _split(cond: n.Binary) -> list:
    """The comparisons, one per argument of the min or max on one side, that hold together
    exactly when ``cond`` holds (see :data:`_CONJUNCTIVE`)."""
    if isinstance(cond.left, n.Func) and cond.op in _CONJUNCTIVE.get(("left", cond.left.func.text), ()):
        return [n.Binary(cond.op, arg, cond.right, cond.span) for arg in cond.left.args]
    return [n.Binary(cond.op, cond.left, arg, cond.span) for arg in cond.right.args]


def _comparison(op: str, difference: Form, loops: list) -> list:
    """The bounds of ``difference op 0``: on the innermost loop variable it names."""
    named = [loop[0] for loop in loops if difference.get(loop[0], 0) != 0]
    if not named or difference[named[-1]] not in (1, -1):
        raise NotAffine("a comparison bounding no loop variable with coefficient ±1")
    var = named[-1]
    coefficient, rest = difference[var], {k: v for k, v in difference.items() if k != var}
    # coefficient·v + rest  >= 0  or  <= 0  (a strict comparison moves the bound by one)
    at_least = {"<": None, "<=": None, ">": 1, ">=": 0, "==": 0}[op]
    at_most = {"<": -1, "<=": 0, ">": None, ">=": None, "==": 0}[op]
    bounds = []
    if at_least is not None:  # coefficient·v >= at_least − rest
        bound = _add({"": at_least}, _scale(rest, -1))
        bounds.append((var, "ge", bound) if coefficient == 1 else (var, "lt", _add(_scale(bound, -1), {"": 1})))
    if at_most is not None:  # coefficient·v <= at_most − rest
        bound = _add({"": at_most}, _scale(rest, -1))
        bounds.append((var, "lt", _add(bound, {"": 1})) if coefficient == 1 else (var, "ge", _scale(bound, -1)))
    return bounds


def _guarded(loops: list, guards: list) -> list:
    """``loops`` with each guard added to the loop of its variable."""
    out = []
    for var, sign, start, stop, step, existing in loops:
        more = tuple((kind, form) for v, kind, form in guards if v == var)
        out.append((var, sign, start, stop, step, existing + more))
    return out


# ---------------------------------------------------------------- affine forms
@dataclass(frozen=True)
class _LetInfo:
    form: dict | None  # its value as an affine form, or None
    depends: frozenset  # the loop variables it depends on, through other lets too
    depth: int  # the loops around it
    bounds: tuple = (None, ())  # ("min" or "max", its forms) when it is a min or max of affine forms


def _let(value, loops: list, lets: dict) -> _LetInfo:
    try:
        form = _form(value, loops, lets)
    except NotAffine:
        form = None
    if form is not None and any(_size(c, 64) >= 64 for c in form.values()):
        form = None  # a coefficient built up by a chain of lets: not worth writing out
    bounds = (None, ())
    if isinstance(value, n.Func) and value.func.text in ("min", "max"):
        try:
            bounds = (value.func.text, tuple(_bounds(value, value.func.text, loops, lets)))
        except NotAffine:
            pass
    return _LetInfo(form, frozenset(_depends(value, lets)), len(loops), bounds)


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
    if any(name in variables or name in lets for name in names(expr)):  # (not a set of every let: one per let)
        raise NotAffine("a loop variable or let under a non-affine operation")
    return {"": expr}  # loop-invariant: the run knows it before it starts


def _bounds(expr, func: str, loops: list, lets: dict) -> list:
    """The forms whose ``func`` (min or max) ``expr`` is, nested calls and lets of them
    flattened (``min(k + kd + 1, A.mt)``: two forms); a single form when it is no such call
    or names no loop variable (``min(A.mt, A.nt)`` is known before the run)."""
    try:
        return [_form(expr, loops, lets)]
    except NotAffine:
        pass
    match expr:
        case n.Func(func=name, args=args) if name.text == func:
            return [form for arg in args for form in _bounds(arg, func, loops, lets)]
        case n.Name(ident=ident) if ident.text in lets and lets[ident.text].bounds[0] == func:
            return list(lets[ident.text].bounds[1])
    return [_form(expr, loops, lets)]


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
        case n.Binary(op="*", left=left, right=right) if constant_of(left, "int") is not None or constant_of(right, "int") is not None:
            factor, other = (constant_of(left, "int"), right) if constant_of(left, "int") is not None else (constant_of(right, "int"), left)
            return _combined(({}, 0), _linear(other), factor)
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
