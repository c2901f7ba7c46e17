"""Affine forms over loop variables and size symbols, to prove tile indices out of range.

An index such as ``A[k, k + 1]`` inside ``for k in 0 .. A.nt`` reaches ``A.nt`` at the
last iteration, whatever the size: that is reported at compile time. The test is
conservative: it needs affine indices and bounds, an extreme point of the iteration space
where every enclosing loop runs once sizes are large enough and every enclosing ``if``
condition holds (affine comparisons joined by and/or/not), and an index there that is out
of range for every size (sizes and tile counts are at least 1; the program's own
parameters have no known sign, nor has a let of no form of its own, ``A.offset(k)``, so no
proof rests on them). A form may hold products of symbols (``t * s + d`` of a hybrid
tiling): a loop variable's coefficient may be one of sizes (``s``, at least 1, whose sign
is known), not one of parameters. Everything else is checked at run time.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import fields, is_dataclass, replace

from . import nodes as n

# monomial -> integer coefficient: "" holds the constant, a symbol its own, a sorted tuple of two
# symbols or more (``("s", "t")``: s·t) that of their product
Form = dict


def out_of_range_witness(tile: n.TileRef, loops, converter: "Converter", guards=(),
                         several_slices: bool = False) -> tuple[str, n.Expr] | None:
    """A sentence explaining why ``tile`` is provably out of range, and the index that leaves it
    (where a diagnostic points), or None.

    ``guards`` are the enclosing ``if`` conditions, ``(condition, branch taken)``: the
    extreme point must satisfy each of them once sizes are large enough (affine
    comparisons joined by and/or/not; anything else proves nothing). ``several_slices``: proved
    for every hybrid tiling of two slices a block or more, not for all (see :func:`with_s_above_one`)."""
    extent_symbol = converter.extent_symbol
    bounds = _box(loops, converter)
    if bounds is None:
        return None
    for axis, index, count, noun in ((0, tile.row, "mt", "row"), (1, tile.col, "nt", "column")):
        form = converter.form(index)
        if form is None:
            continue
        extent = {extent_symbol(tile.matrix.text, count): 1}
        # a square matrix's A.mt and A.nt are one symbol: each value keeps the name the program
        # wrote where it comes from (k = A.nt from the loop, A.mt + 1 from the index), and the
        # limit names this axis (past A.mt - 1)
        converter.display.setdefault(next(iter(extent)), f"{tile.matrix.text}.{count}")
        for direction in (+1, -1):
            value, point = _extreme(form, bounds, direction, converter)
            if value is None:
                continue
            beyond = _add(value, _scale(extent, -1), {"": 1}) if direction > 0 else _scale(value, -1)
            # the guards last: a call under many else-ifs has as many guards, and most tiles are in range
            past = slices_expanded(beyond)
            if _provably_at_least(with_s_above_one(past) if several_slices else past, 1) \
                    and all(_holds_at(cond, taken, point, converter) for cond, taken in guards):
                # the names the program wrote where the value comes from: the index, then the bounds of the
                # loops whose variables it names, then the others', each from the innermost out (m = A.mt
                # from `for m in k + 1 .. A.mt + 1`, not A.nt; k + 1 = A.nt from `for k in 0 .. A.nt`,
                # whatever the loop inside it writes)
                named = sorted(reversed(loops), key=lambda loop: not _mentions(form, loop.var.text))
                written = _written_extents((index, *[(loop.start, loop.stop) for loop in named]), converter)
                where = _where(form, loops, point, converter)
                limit = f"{tile.matrix.text}.{count} - 1" if direction > 0 else "0"
                return (f"the tile {noun} index reaches {converter.render(value, written)} "
                        f"({'past' if direction > 0 else 'below'} {limit})" + (f" when {where}" if where else ""),
                        index)
    return None


def empty_panel_witness(panel: n.Range, loops, converter: "Converter", guards=()) -> str | None:
    """Why the panel ``start : stop`` provably holds no tile at some iteration (start >= stop:
    empty, or written backwards), as a sentence, or None. The iteration is the extreme point of
    the loop box where stop - start is least, found as :func:`out_of_range_witness` finds its."""
    bounds, start, stop = _box(loops, converter), converter.form(panel.start), converter.form(panel.stop)
    if start is None or stop is None or bounds is None:
        return None
    gap, point = _extreme(difference(start, stop), bounds, +1, converter)  # start - stop at its largest
    if gap is None or not _provably_at_least(gap, 0) \
            or not all(_holds_at(cond, taken, point, converter) for cond, taken in guards):
        return None
    written = _written_extents((panel, *[(loop.start, loop.stop) for loop in reversed(loops)]), converter)
    where = _where(difference(start, stop), loops, point, converter)
    backwards = not _provably_at_least(_scale(gap, -1), 0)  # start > stop somewhere: written backwards
    return (f"the panel {converter.render(start, written)} : {converter.render(stop, written)} holds no tile"
            + (f" when {where}" if where else "")
            + (": a range is first : past the last, counting up" if backwards else ""))


def _box(loops, converter: "Converter", single: bool = False) -> list | None:
    """``(variable, lows, highs)`` of each loop, outermost first: the affine forms of its start (the
    terms of a ``max``) and of its stop (of a ``min``); None if one is not affine, or (``single``)
    is a ``min`` or ``max``. What is true at some point of the box holds at some iteration; what
    holds at every point only of a box of ``single`` bounds: a loop of another step than ±1 is
    seen at its first value alone (bounded by a ``min`` or ``max``), not at all it visits."""
    bounds = [(loop.var.text, bound_forms(loop.start, "max", converter), bound_forms(loop.stop, "min", converter))
              for loop in loops]
    if any(lows is None or highs is None or single and len(lows) + len(highs) > 2 for _, lows, highs in bounds):
        return None
    return bounds


def _where(form: Form, loops, point: dict, converter: "Converter") -> str:
    """``k = 0, m = A.mt``: the loop values of ``point``, each as its loop's bounds write the tile
    counts; empty for a ``form`` that no loop variable moves (it is so at every iteration)."""
    if not any(_mentions(form, loop.var.text) for loop in loops):
        return ""
    return ", ".join(f"{v} = {converter.render(point[v], _written_extents((loop.start, loop.stop), converter))}"
                     for loop in loops if (v := loop.var.text) in point)


def _written_extents(expr, converter: "Converter") -> dict:
    """Symbol -> ``A.mt`` or ``A.nt`` as ``expr`` writes it, for the tile counts it names (the
    first written, in the order of ``expr``'s nodes, where one symbol is written two ways)."""
    found, pending = {}, [expr]
    while pending:  # depth first, left to right: the order the program writes them
        node = pending.pop()
        if isinstance(node, n.Attr) and node.attr.text in ("mt", "nt"):
            found.setdefault(converter.extent_symbol(node.matrix.text, node.attr.text),
                             f"{node.matrix.text}.{node.attr.text}")
        elif is_dataclass(node):
            pending.extend(reversed([getattr(node, f.name) for f in fields(node)]))
        elif isinstance(node, (tuple, list)):
            pending.extend(reversed(node))
    return found


def coincidence_witness(a: n.TileRef, b: n.TileRef, loops, converter: "Converter", guards=()) -> str | None:
    """Why tile references ``a`` and ``b`` of one matrix are provably the same tile (or, when
    either is a panel, share a tile), or None.

    ``""`` when their indices are equal at every iteration; else ``"when k = 0, m = 0"``
    (``"whatever the sizes"`` outside every loop):
    an iteration of the enclosing loops (one that runs once sizes are large enough, where the
    enclosing ``if``s, ``guards`` as :func:`out_of_range_witness` takes them, provably take the
    call's branch) where both index pairs are equal whatever the sizes, the first such
    found from the loops' first values and, where it is another, from their last ones
    (``"when j = 0 and when j = A.nt - 1"``: not one iteration to guard against). The index
    differences must be affine; they are solved for the innermost loop variable with a
    coefficient of ±1, and the other variables tried at their first, second and last
    values. A panel's range index is a variable of its own over the range, innermost
    (not shown in the sentence). Anything else is left to the run-time check.
    """
    panels: list = []
    a, b = _pointwise(a, panels), _pointwise(b, panels)
    found = _coincidence(a, b, (*loops, *panels), converter, guards)
    if found is None or found == "":
        return None if found == "" and panels else found
    if not loops:  # panels outside every loop: nothing to name but that they do
        return "whatever the sizes"
    points, solved = found
    free = [loop for loop in loops if loop.var.text not in solved]
    iterations = list(dict.fromkeys(", ".join(f"{loop.var.text} = {converter.render(point[loop.var.text])}"
                                              for loop in loops) for point in points))
    named = " and ".join(f"when {iteration}" for iteration in iterations)
    # with a loop variable left free, two iterations found may be two of many: not the only ones to guard against
    # (between two iterations an 'if' may part them: under one, only those found are said)
    every = None if guards else _every_iteration(points, solved, loops, free, converter)
    return every or named + (", for instance" if free and len(iterations) > 1 else "")


def meets_everywhere(witness: str) -> bool:
    """Whether a :func:`coincidence_witness` says the arguments meet at every iteration of every
    loop around the call (no loop variable pinned to another): no 'if' can part them."""
    return witness.startswith("at every ") and "(with " not in witness


def _every_iteration(points: list, solved: dict, loops, free: list, converter: "Converter") -> str | None:
    """``"at every k from 0 to A.nt - 2 (with m = k)"`` when the coincidence leaves one loop
    variable free and holds at two of its values, the least and the greatest it may take (its
    last is its loop's last, a stop of one form): the conditions are affine, so it holds at every
    value between. None otherwise."""
    if len(free) != 1 or len(points) != 2:
        return None
    var = free[0].var.text
    first, last = points[0][var], points[1][var]
    highs = bound_forms(free[0].stop, "min", converter) or ()
    if first == last or len(highs) != 1 or _resolve(_add(highs[0], {"": -1}), points[1]) != last:
        return None  # (a stop of min(...): its last value is not one form for every size)
    pinned = [f"{loop.var.text} = {converter.render(solved[loop.var.text])}" for loop in loops
              if loop.var.text in solved]
    return (f"at every {var} from {converter.render(first)} to {converter.render(last)}"
            + (f" (with {', '.join(pinned)})" if pinned else ""))


def _pointwise(tile: n.TileRef, panels: list) -> n.TileRef:
    """``tile`` with its range index (a panel's) replaced by a new variable over the range,
    appended to ``panels`` as a loop."""
    for axis in ("row", "col"):
        index = getattr(tile, axis)
        if isinstance(index, n.Range):
            var = n.Ident(f" panel {len(panels)}", index.span)  # a name no program can write
            panels.append(n.For(var, index.start, index.stop, None, (), index.span))
            return replace(tile, **{axis: n.Name(var, index.span)})
    return tile


def _coincidence(a: n.TileRef, b: n.TileRef, loops, converter: "Converter", guards):
    """``""``, or ``(points, solved)``: the points (loop variable -> form; the first found from the
    loops' first values, then from their last ones) where ``a`` and ``b`` are the same tile, and
    the loop variables solved for (the others are free), or None (see :func:`coincidence_witness`)."""
    forms = [converter.form(index) for index in (a.row, b.row, a.col, b.col)]
    if any(form is None for form in forms):
        return None
    diffs = [_add(forms[0], _scale(forms[1], -1)), _add(forms[2], _scale(forms[3], -1))]
    if all(is_zero(diff) for diff in diffs):
        return ""
    depth = {loop.var.text: level for level, loop in enumerate(loops)}
    solved: dict = {}  # loop variable -> form in outer loop variables and sizes
    for diff in diffs:
        diff = _resolve(diff, solved)
        variables = [v for v in depth if _mentions(diff, v)]
        if not variables:
            if is_zero(diff):
                continue
            return None  # they differ by a constant or by sizes: not provably equal
        var = max(variables, key=depth.get)
        coefficient = _coefficient(diff, var)
        if coefficient is None or coefficient.keys() != {""} or abs(coefficient[""]) != 1:
            return None  # (a coefficient of sizes, s·t = j: not one iteration for every size)
        value = _scale(_substitute(diff, var, {"": 0}), -coefficient[""])
        solved = {v: _substitute(f, var, value) for v, f in solved.items()}
        solved[var] = value
    bounds = []
    for loop in loops:
        lows, highs = bound_forms(loop.start, "max", converter), bound_forms(loop.stop, "min", converter)
        if lows is None or highs is None:
            return None
        bounds.append((loop.var.text, lows, highs))
    def made(point: dict) -> bool:  # the call is made there: its 'if's take its branch
        return all(_holds_at(cond, taken, point, converter) for cond, taken in guards)
    first = _search(bounds, solved, {}, [200], accept=made)
    if first is None:
        return None
    last = _search(bounds, solved, {}, [200], True, accept=made)
    return [first] + ([last] if last is not None and last != first else []), solved


_NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


def _holds_at(cond, taken: bool, point: dict, converter: "Converter") -> bool:
    """True when ``cond`` (negated when not ``taken``) holds at ``point`` once sizes are
    large enough; False when it does not or cannot be told."""
    match cond:
        case n.Unary(op="not", operand=inner):
            return _holds_at(inner, not taken, point, converter)
        case n.Binary(op="and" | "or" as op, left=left, right=right):
            parts = (_holds_at(left, taken, point, converter), _holds_at(right, taken, point, converter))
            return all(parts) if (op == "and") == taken else any(parts)
        case n.Binary(op=op, left=left, right=right) if op in _NEGATED:
            a, b = converter.form(left), converter.form(right)
            if a is None or b is None:
                return False
            gap = _resolve(difference(a, b), point)  # left - right
            relation = op if taken else _NEGATED[op]
            if relation == "==":
                return is_zero(gap)
            if relation == "!=":
                return _holds_for_large_sizes(gap, 1) or _holds_for_large_sizes(_scale(gap, -1), 1)
            sign, bound = {">=": (1, 0), ">": (1, 1), "<=": (-1, 0), "<": (-1, 1)}[relation]
            return _holds_for_large_sizes(_scale(gap, sign), bound)
    return False


def never_runs(low, high, converter: "Converter") -> bool:
    """True when a loop whose values lie from the expression ``low`` up to (not including)
    ``high`` runs no iteration whatever the sizes: low ≥ high. A ``max`` at the low end or a
    ``min`` at the high end needs one of its terms to show it, a ``min`` at the low end or
    a ``max`` at the high end all of them."""
    if _is_call(low, "max"):
        return any(never_runs(term, high, converter) for term in low.args)
    if _is_call(high, "min"):
        return any(never_runs(low, term, converter) for term in high.args)
    if _is_call(low, "min"):
        return all(never_runs(term, high, converter) for term in low.args)
    if _is_call(high, "max"):
        return all(never_runs(low, term, converter) for term in high.args)
    start, stop = converter.form(low), converter.form(high)
    return start is not None and stop is not None and _provably_at_least(
        counts_lowered(difference(start, stop), converter), 0)


def never_runs_within(low, high, loops, converter: "Converter") -> bool:
    """True when a loop from ``low`` up to ``high`` runs no iteration at any iteration of the
    enclosing ``loops`` (their ranges of values), whatever the sizes: low − high is at least 0
    at its least over the loops' box (``k + 3 .. 2`` inside ``k`` from 0)."""
    bounds, start, stop = _box(loops, converter, single=True), converter.form(low), converter.form(high)
    if start is None or stop is None or bounds is None:
        return False
    least, _ = _extreme(difference(start, stop), bounds, -1, converter)
    return least is not None and _provably_at_least(counts_lowered(least, converter), 0)


def counts_lowered(form: Form, converter: "Converter") -> Form:
    """A form at most ``form`` for every size, with the tile counts it subtracts cancelled against
    those it adds that count as many tiles or more: ``tiles(2*n) - tiles(n)`` is at least 0.

    A tile count is a count of one kind (:attr:`Converter.lengths`: ⌈rows / nb⌉, or a hybrid
    tiling's blocks or slices) of a length, and never falls as its length grows: where the length
    added is provably at least the length subtracted (2·n ≥ n, n + 1 ≥ n, sizes being at least
    1), c·more − c·fewer ≥ 0, and dropping both terms leaves a form no larger. Counts of other
    kinds, or of lengths not so ordered (a parameter's), are left as they are."""
    lowered, lengths = dict(form), converter.lengths
    for fewer in [symbol for symbol, c in form.items() if c < 0 and symbol in lengths]:
        for more in [symbol for symbol, c in form.items() if c > 0 and symbol in lengths]:
            (kind, length), (other_kind, other_length) = lengths[more], lengths[fewer]
            if lowered[fewer] >= 0 or lowered[more] <= 0 or kind != other_kind or length is None \
                    or other_length is None or not _provably_at_least(difference(length, other_length), 0):
                continue
            cancelled = min(lowered[more], -lowered[fewer])
            lowered[more] -= cancelled
            lowered[fewer] += cancelled
    return {symbol: c for symbol, c in lowered.items() if c or symbol == ""}


def _is_call(expr, func: str) -> bool:
    return isinstance(expr, n.Func) and expr.func.text == func


def provably_nonzero(form: Form) -> bool:
    """True when ``form`` differs from 0 for every admissible value of its symbols."""
    return _provably_at_least(form, 1) or provably_negative(form)


def provably_negative(form: Form) -> bool:
    """True when ``form`` is below 0 for every admissible value of its symbols (a constant
    form may hold a float: ``-0.5``)."""
    least = _least(_scale(form, -1))
    return least is not None and least > 0


def difference(a: Form, b: Form) -> Form:
    return _add(a, _scale(b, -1))


def value_range(expr, known) -> tuple | None:
    """``(least, greatest)`` of the values ``expr`` takes, as the run computes it (``-inf``, ``inf``: no
    bound), for an expression of number literals, names and ``A.m``, ``A.n`` (whose ranges
    ``known(node)`` gives, or None) joined by ``+ - * /``, ``min`` and ``max``; None for anything else.

    Where a form does not hold, this bounds a flop count that holds a float (``-1.0 * A.m``: a form
    trusts no float, since x + x + x - 3 * x is not 0 for x = 0.1). Each bound is the operation of
    the bounds of its operands, computed in floats as the run computes the expression: rounding is
    monotone (a <= b rounds to fl(a) <= fl(b)), so no value the run computes falls outside them.
    Operands are bounded apart (``A.m - A.m`` is in -inf .. inf): the bounds prove a sign where every
    term has its own (``0.5 - A.m``), no more."""
    try:
        return _range(expr, known)
    except (OverflowError, ZeroDivisionError):  # an integer past a float's range: no bound told
        return None


def _range(expr, known) -> tuple | None:
    match expr:
        case n.IntLit(value=value) | n.FloatLit(value=value):
            return value, value
        case n.Name() | n.Attr():
            return known(expr)
        case n.Unary(op="-", operand=operand):
            inner = _range(operand, known)
            return None if inner is None else (-inner[1], -inner[0])
        case n.Binary(op="+" | "-" | "*" | "/" as op, left=left, right=right):
            a, b = _range(left, known), _range(right, known)
            if a is None or b is None:
                return None
            if op in "+-":  # (a least bound is inf, or a greatest -inf, only where one overflowed: inf - inf)
                bounds = (a[0] + b[0], a[1] + b[1]) if op == "+" else (a[0] - b[1], a[1] - b[0])
                return None if any(map(math.isnan, bounds)) else bounds
            if op == "/" and b[0] <= 0 <= b[1]:  # a divisor that may be 0 (E214 where it always is)
                return None
            ends = [_corner(x, y, op) for x in a for y in b]
            if any(math.isnan(end) for pair in ends for end in pair):  # a bound overflowed to inf before
                return None
            return min(end[0] for end in ends), max(end[1] for end in ends)
        case n.Func(func=func, args=args) if func.text in ("min", "max"):
            ranges = [_range(arg, known) for arg in args]
            if any(r is None for r in ranges):
                return None
            pick = min if func.text == "min" else max
            return pick(r[0] for r in ranges), pick(r[1] for r in ranges)
    return None


def _corner(x, y, op: str) -> tuple:
    """The least and greatest values of ``x * y`` or ``x / y`` near the bounds ``x`` and ``y``: the
    product itself where it is a number; 0 for 0 times an unbounded operand (the operand is finite),
    and inf / inf anything between 0 and inf of its sign."""
    if op == "*":
        return (0, 0) if x == 0 or y == 0 else (x * y, x * y)
    if math.isinf(x) and math.isinf(y):
        end = math.copysign(math.inf, x) * math.copysign(1, y)
        return min(0, end), max(0, end)
    return x / y, x / y


def bound_forms(expr, func: str, converter: "Converter") -> list | None:
    """The affine forms of a loop bound; ``min``/``max`` (``func``) of several give them all, and one
    shifted by an affine term gives them shifted (``min(a, b) + 1`` as ``min(a + 1, b + 1)``)."""
    if _is_call(expr, func):
        parts = [bound_forms(arg, func, converter) for arg in expr.args]
        return None if any(p is None for p in parts) else [form for part in parts for form in part]
    if isinstance(expr, n.Binary) and expr.op in ("+", "-") and (
            _is_call(expr.left, func) or expr.op == "+" and _is_call(expr.right, func)):
        call, term = (expr.left, expr.right) if _is_call(expr.left, func) else (expr.right, expr.left)
        forms, shift = bound_forms(call, func, converter), converter.form(term)
        if forms is None or shift is None:
            return None
        return [_add(form, shift if expr.op == "+" else _scale(shift, -1)) for form in forms]
    form = converter.form(expr)
    return None if form is None else [form]


def _search(bounds, solved: dict, point: dict, budget: list, from_end: bool = False,
            accept=lambda point: True) -> dict | None:
    """Values of the loop variables (outermost first) inside every loop's range once sizes
    are large enough, with the ``solved`` variables at their solutions, that ``accept`` takes;
    None if none found. The values near each loop's first value are tried first, or its last
    (``from_end``)."""
    if len(point) == len(bounds):
        return point if accept(point) else None
    var, lows, highs = bounds[len(point)]
    lows = [_resolve(f, point) for f in lows]
    highs = [_resolve(f, point) for f in highs]
    if var in solved:
        candidates = [_resolve(solved[var], point)]
    else:
        candidates = lows + [_add(f, {"": 1}) for f in lows] + [_add(f, {"": -1}) for f in highs]
        if from_end:
            candidates.reverse()
    loop_vars = {v for v, _, _ in bounds}
    tried = []
    for value in candidates:
        if value in tried or any(_mentions(value, v) for v in loop_vars):
            continue
        tried.append(value)
        budget[0] -= 1
        if budget[0] < 0:
            return None
        if (all(_holds_for_large_sizes(_add(value, _scale(low, -1)), 0) for low in lows)
                and all(_holds_for_large_sizes(_add(high, _scale(value, -1)), 1) for high in highs)):
            found = _search(bounds, solved, {**point, var: value}, budget, from_end, accept)
            if found is not None:
                return found
    return None


def is_zero(form: Form) -> bool:
    return not any(form.values())


def _growable(symbol) -> bool:
    """A size that can be as large as one likes: n, a tile setting, a tile count of a
    dimension that depends on a parameter (not of a constant dimension), or a product of
    sizes one of which is."""
    if isinstance(symbol, tuple):
        return any(_growable(factor) for factor in symbol)
    if symbol in _AT_LEAST_ONE:
        return True
    return "(" in symbol and any(c.isalpha() or c == "_" for c in symbol[symbol.index("("):])


def _holds_for_large_sizes(form: Form, bound: int) -> bool:
    """True when ``form >= bound`` for every size large enough (all sizes growing together)."""
    terms = {k: v for k, v in form.items() if k and v}
    if any(v < 0 or _lowest(k) is None for k, v in terms.items()):
        return False
    return any(_growable(k) for k in terms) or _provably_at_least(form, bound)


def _extreme(form: Form, bounds, direction: int, converter: "Converter | None" = None):
    """Maximise (direction +1) or minimise (-1) ``form`` over the loop box, innermost first.

    Returns the symbol-only value and the point (variable -> symbol-only form), or
    (None, None) when the point is not provably inside every loop's range. A loop bounded by
    a ``min`` (``max``) of several forms is at one of them: each choice is tried, and kept
    when it is provably the least (greatest) of them (``converter``: comparing tile counts
    as :func:`counts_lowered` does, ``A.mt <= A.nt`` of ``A[n, 2 * n]``). A loop whose variable
    the form no longer names may be at any of its ends: one that puts the loops inside it at
    the bound chosen for them (``m`` at ``A.mt - 1`` below ``min(k + 2, A.mt)`` needs
    ``k`` at its last value) is tried after the first end.
    """
    first = [range(max(len(lows), len(highs))) for _, lows, highs in bounds]
    every = [range(len(lows) + len(highs)) for _, lows, highs in bounds]
    later = (picks for picks in itertools.product(*every) if any(p >= len(r) for p, r in zip(picks, first)))
    for picks in itertools.islice(itertools.chain(itertools.product(*first), later), MAX_CHOICES):
        value, point = _extreme_at(form, bounds, direction, picks, converter)
        if value is not None:
            return value, point
    return None, None


def _extreme_at(form: Form, bounds, direction: int, picks, converter=None):
    """:func:`_extreme` with each loop at the bound ``picks`` says (its index among the loop's; of
    a loop the form does not move with, among its lower ends, then its upper ones)."""
    chosen = {}
    current = dict(form)
    for (var, lows, highs), pick in zip(reversed(bounds), reversed(picks)):
        coefficient = _coefficient(current, var)
        if coefficient is not None and is_zero(coefficient):  # any value of it gives the form's
            ends = [*lows, *(_add(high, {"": -1}) for high in highs)]
            if pick >= len(ends):
                return None, None
            chosen[var] = ends[pick]
            continue
        rising = _rises(coefficient, direction)
        ends = highs if rising else lows
        if rising is None or pick >= len(ends):
            return None, None
        chosen[var] = _add(ends[pick], {"": -1}) if rising else ends[pick]
        current = _substitute(current, var, chosen[var])
    lowered = (lambda f: counts_lowered(f, converter)) if converter is not None else (lambda f: f)
    point = {}
    for var, lows, highs in bounds:
        resolved = lambda f: _resolve(f, point)
        if not all(_runs_for_large_sizes(lowered(_add(resolved(hi), _scale(resolved(lo), -1))))
                   for lo in lows for hi in highs):
            return None, None
        value = resolved(chosen[var])
        if len(lows) + len(highs) > 2 and not (  # one of several bounds: within all of them (as the loop runs)
                all(_holds_for_large_sizes(lowered(_add(value, _scale(resolved(lo), -1))), 0) for lo in lows)
                and all(_holds_for_large_sizes(lowered(_add(resolved(hi), _scale(value, -1))), 1) for hi in highs)):
            return None, None
        point[var] = value
    return current, point


def _rises(coefficient: Form | None, direction: int) -> bool | None:
    """Whether a loop variable of ``coefficient`` moves a form in ``direction`` (+1 up, -1 down) as
    it grows, for every admissible value of the sizes (``s``: at least 1): True, False when it moves
    it the other way or not at all, None when that depends on a value (``p * t``: a parameter's sign)
    or the form is not linear in it (``None``: ``t * t``)."""
    if coefficient is None:
        return None
    scaled = _scale(coefficient, direction)
    if is_zero(scaled) or _provably_at_least(_scale(scaled, -1), 0):
        return False
    return True if _provably_at_least(scaled, 0) else None


#: the combinations of bounds :func:`_extreme` tries, at most (loops bounded by min or max of several)
MAX_CHOICES = 64


def _resolve(form: Form, point: dict) -> Form:
    for var, value in point.items():
        form = _substitute(form, var, value)
    return form


def _substitute(form: Form, var: str, value: Form) -> Form:
    """``form`` with the symbol ``var`` replaced by the form ``value``, in every product it is a factor of."""
    if not _mentions(form, var):
        return dict(form)
    total: Form = {"": 0}
    for key, coefficient in form.items():
        factors = _factors(key)
        term = {_monomial(f for f in factors if f != var): coefficient}
        for _ in range(factors.count(var)):
            term = _multiply(term, value)
        total = _add(total, term)
    return total


def _coefficient(form: Form, var: str) -> Form | None:
    """The form ``c`` of ``form = c·var + rest`` (``rest`` without ``var``); None when ``var`` is a
    factor twice in a product (``t * t``: not linear in it)."""
    coefficient: Form = {"": 0}
    for key, value in form.items():
        factors = _factors(key)
        if factors.count(var) > 1:
            return None
        if var in factors:
            coefficient = _add(coefficient, {_monomial(f for f in factors if f != var): value})
    return coefficient


def _mentions(form: Form, var: str) -> bool:
    """Whether the symbol ``var`` is a factor of a term of ``form``."""
    return any(value and var in _factors(key) for key, value in form.items())


def _factors(monomial) -> tuple:
    """The symbols multiplied in ``monomial``: none in the constant's."""
    return monomial if isinstance(monomial, tuple) else (monomial,) if monomial else ()


def _monomial(factors):
    """The key of the product of the symbols ``factors``: "" for none, the symbol for one."""
    factors = tuple(sorted(factors))
    return "" if not factors else factors[0] if len(factors) == 1 else factors


def _multiply(a: Form, b: Form) -> Form:
    total: Form = {"": 0}
    for key_a, value_a in a.items():
        for key_b, value_b in b.items():
            key = _monomial(_factors(key_a) + _factors(key_b))
            total[key] = total.get(key, 0) + value_a * value_b
    return {k: v for k, v in total.items() if v or k == ""}


def _add(*forms: Form) -> Form:
    total: Form = {}
    for form in forms:
        for key, value in form.items():
            total[key] = total.get(key, 0) + value
    return {k: v for k, v in total.items() if v or k == ""}


def _scale(form: Form, factor: int) -> Form:
    return {k: v * factor for k, v in form.items()}


_AT_LEAST_ONE = {"n", "nb", "B", "b", "s"}  # sizes and tile settings, validated by run


def slices_expanded(form: Form) -> Form:
    """``form`` with each hybrid tiling's count of slices written as the ``s`` slices of each block
    (``slices(X)`` = ``s·blocks(X)``, a narrow last block keeping its s slices, empty or not): an
    index of one kind of count is compared with a count of the other (``A[t, t * s + s]`` reaches
    A.nt = s·A.mt for every size)."""
    if not any(factor.startswith("slices(") for key in form for factor in _factors(key)):
        return form
    expanded: Form = {}
    for key, value in form.items():
        factors = [("s", "blocks" + f[len("slices"):]) if f.startswith("slices(") else (f,) for f in _factors(key)]
        monomial = _monomial([part for factor in factors for part in factor])
        expanded[monomial] = expanded.get(monomial, 0) + value
    return {k: v for k, v in expanded.items() if v or k == ""}


def with_s_above_one(form: Form) -> Form:
    """``form`` with a hybrid tiling's ``s`` written as s + 1, so that what holds of it for s ≥ 1 holds of
    ``form`` for s ≥ 2: a tile row index running to A.nt − 1 = s·A.mt − 1 (a uniform tiling's loop
    ported to hybrid tiles) leaves the matrix at every s but 1."""
    raised: Form = {}
    for key, value in form.items():
        factors = list(_factors(key))
        raised[key] = raised.get(key, 0) + value
        if "s" in factors:
            factors.remove("s")
            lower = _monomial(factors)
            raised[lower] = raised.get(lower, 0) + value
    return {k: v for k, v in raised.items() if v or k == ""}


def surely_reached(form: Form, loops, converter: "Converter", guards=()) -> int | None:
    """How far ``form`` reaches whatever the sizes: its greatest value over the loops' values (once
    sizes are large enough, where the ``guards`` hold), at its least over the admissible values of
    the sizes and settings; None when unknown."""
    bounds = _box(loops, converter)
    if bounds is None:
        return None
    value, point = _extreme(form, bounds, +1, converter)
    if value is None or not all(_holds_at(cond, taken, point, converter) for cond, taken in guards):
        return None
    return _least(slices_expanded(value))


def _lowest(symbol) -> int | None:
    """The least value of a symbol: sizes and tile counts are at least 1; the program's
    own parameters may take any value (None); a product of sizes is at least 1."""
    if isinstance(symbol, tuple):
        lows = [_lowest(factor) for factor in symbol]
        return None if None in lows else math.prod(lows)
    return 1 if symbol in _AT_LEAST_ONE or "(" in symbol else None


def _runs_for_large_sizes(trip_count: Form) -> bool:
    """True when a loop with this trip count runs once sizes are large enough."""
    terms = {k: v for k, v in trip_count.items() if k and v}
    if any(v < 0 or _lowest(k) is None for k, v in terms.items()):
        return False
    return bool(terms) or trip_count.get("", 0) >= 1


def _provably_at_least(form: Form, bound: int) -> bool:
    """True when ``form >= bound`` for every admissible value of its symbols."""
    least = _least(form)
    return least is not None and least >= bound


def _least(form: Form):
    """The least value of ``form`` over the admissible values of its symbols; None when it has
    none (a symbol of unknown sign, or one it decreases with)."""
    terms = {k: v for k, v in form.items() if k and v}
    if any(v < 0 or _lowest(k) is None for k, v in terms.items()):
        return None
    return sum(v * _lowest(k) for k, v in terms.items()) + form.get("", 0)


#: Limits on the forms worth reasoning about: past them a form is "not affine" (no proof),
#: so that chains of lets cannot make forms grow without bound (time linear in the program).
MAX_COEFFICIENT = 2**63 - 1
MAX_TERMS = 64
MAX_DEGREE = 4  # symbols in a product


def _bounded(form: Form) -> Form | None:
    if len(form) > MAX_TERMS or any(abs(v) > MAX_COEFFICIENT or len(_factors(k)) > MAX_DEGREE
                                    for k, v in form.items()):
        return None
    return form


class Converter:
    """Turns expressions into forms, affine but for products of symbols (``t * s``, exact); None for
    anything else (``//``, ``%``, a float's name).

    ``let_form(name)`` gives ``(True, form)`` for a ``let`` (its form computed once,
    when it was declared: long chains of lets cost linear time, no recursion; an integer let
    whose value has no form is :meth:`opaque`) and
    ``(False, None)`` for any other name, which becomes a symbol: ``name_symbol(name)``,
    the name itself for a size (``n``, a tile setting: at least 1) or a loop variable,
    another symbol for the program's own parameter (any value, even when it is named
    like another tiling's setting), None for a name of no integer (a float's form would
    prove what rounding undoes: ``x + x + x - 3 * x`` is not 0 for x = 0.1).
    ``extent_symbol(matrix, query)`` names ``A.mt``, ``A.nt`` (and in a flop count ``A.m``,
    ``A.n``), None for a query of no form; ``dimension(matrix, query)`` gives the expression a
    matrix's ``A.m`` or ``A.n`` is declared with (its form is theirs), or None. ``constant(expr)``
    gives the value the analysis folded for an expression of constants that is not affine in form
    (``2 ** 3``, ``7 // 2``), or None.
    """

    def __init__(self, let_form, extent_symbol, name_symbol, constant, dimension=lambda matrix, query: None):
        self.let_form = let_form
        self.extent_symbol = extent_symbol
        self.name_symbol = name_symbol
        self.constant = constant
        self.dimension = dimension
        self.display: dict[str, str] = {}
        #: tile count symbol -> (its kind, the affine form of the length it counts, or None), as
        #: ``extent_symbol`` names them: what :func:`counts_lowered` compares
        self.lengths: dict[str, tuple[str, Form | None]] = {}

    def opaque(self, name: n.Ident) -> Form:
        """The form of the integer let ``name`` whose value has none (``A.offset(k)``, ``k // 2``): a
        symbol of its own, of no known sign (nothing is proved from its value), equal to itself, so
        that it cancels where the let is written twice (``[z + 2 : z + 1]`` is reversed whatever z
        is). One symbol per let statement, by where it is declared: no program can write it."""
        symbol = f"let {name.text} at {name.span.line}:{name.span.column}"
        self.display[symbol] = name.text
        return {symbol: 1, "": 0}

    def form(self, expr) -> Form | None:
        match expr:
            case n.IntLit(value=value):
                return {"": value}
            case n.Name(ident=ident):
                is_let, form = self.let_form(ident.text)
                if is_let:
                    return None if form is None else dict(form)
                symbol = self.name_symbol(ident.text)
                if symbol is None:
                    return None
                self.display.setdefault(symbol, ident.text)
                return {symbol: 1, "": 0}
            case n.Attr(matrix=matrix, attr=attr):
                symbol = self.extent_symbol(matrix.text, attr.text)
                dimension = self.dimension(matrix.text, attr.text) if symbol is None else None
                if dimension is not None:  # A.m is the rows A is declared with: their form, exactly
                    return self.form(dimension)
                if symbol is None:
                    return None
                self.display.setdefault(symbol, f"{matrix.text}.{attr.text}")
                return {symbol: 1, "": 0}
            case n.Unary(op="-", operand=operand):
                inner = self.form(operand)
                return None if inner is None else _scale(inner, -1)
            case n.Binary(op=op, left=left, right=right) if op in ("+", "-", "*"):
                return self._binary(op, self.form(left), self.form(right))
        value = self.constant(expr)
        return None if value is None else {"": value}

    @staticmethod
    def _binary(op, a, b):
        if a is None or b is None:
            return None
        if op == "+":
            return _bounded(_add(a, b))
        if op == "-":
            return _bounded(_add(a, _scale(b, -1)))
        return _bounded(_multiply(a, b))

    def render(self, form: Form, names: dict | None = None) -> str:
        """``form`` as text, each symbol as ``names`` (else the program first) writes it."""
        terms = []
        for key, value in form.items():
            if key == "" or not value:
                continue
            # as the language writes them: 2 * A.nt, A.mt * s
            name = " * ".join((names or {}).get(factor) or self.display.get(factor, factor) for factor in _factors(key))
            terms.append(name if value == 1 else f"-{name}" if value == -1 else f"{value} * {name}")
        constant = form.get("", 0)
        if constant or not terms:
            terms.append(str(constant))
        text = " + ".join(terms).replace("+ -", "- ")
        return text
