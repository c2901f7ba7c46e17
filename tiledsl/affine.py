"""Affine forms over loop variables and size symbols, to prove tile indices out of range.

An index such as ``A[k, k + 1]`` inside ``for k in 0 .. A.nt`` reaches ``A.nt`` at the
last iteration, whatever the size: that is reported at compile time. The test is
conservative: it needs affine indices and bounds with numeric coefficients, no
enclosing ``if``, an extreme point of the iteration space where every enclosing
loop runs once sizes are large enough, and an index there that is out of range
for every size (sizes and tile counts are at least 1; the program's own
parameters have no known sign, so no proof rests on them). Everything else is
checked at run time.
"""
from __future__ import annotations

from . import nodes as n

Form = dict  # symbol -> integer coefficient; "" holds the constant


def out_of_range_witness(tile: n.TileRef, loops, converter: "Converter", guarded: bool) -> str | None:
    """A sentence explaining why ``tile`` is provably out of range, or None."""
    if guarded:
        return None
    extent_symbol = converter.extent_symbol
    bounds = [(loop.var.text, converter.form(loop.start), converter.form(loop.stop)) for loop in loops]
    if any(lo is None or hi is None for _, lo, hi in bounds):
        return None
    for axis, index, count, noun in ((0, tile.row, "mt", "row"), (1, tile.col, "nt", "column")):
        form = converter.form(index)
        if form is None:
            continue
        extent = {extent_symbol(tile.matrix.text, count): 1}
        converter.display[next(iter(extent))] = f"{tile.matrix.text}.{count}"
        for direction in (+1, -1):
            value, point = _extreme(form, bounds, direction)
            if value is None:
                continue
            beyond = _add(value, _scale(extent, -1), {"": 1}) if direction > 0 else _scale(value, -1)
            if _provably_at_least(beyond, 1):
                where = ", ".join(f"{v} = {converter.render(point[v])}" for v, _, _ in bounds if v in point)
                limit = f"{converter.render(_add(extent, {'': -1}))}" if direction > 0 else "0"
                return (f"the tile {noun} index reaches {converter.render(value)} "
                        f"({'past' if direction > 0 else 'below'} {limit})" + (f" when {where}" if where else ""))
    return None


def _extreme(form: Form, bounds, direction: int):
    """Maximise (direction +1) or minimise (-1) ``form`` over the loop box, innermost first.

    Returns the symbol-only value and the point (variable -> symbol-only form), or
    (None, None) when the point is not provably inside every loop's range.
    """
    chosen = {}
    current = dict(form)
    for var, lo, hi in reversed(bounds):
        coefficient = current.get(var, 0) * direction
        chosen[var] = _add(hi, {"": -1}) if coefficient > 0 else lo
        current = _substitute(current, var, chosen[var])
    point = {}
    for var, lo, hi in bounds:
        resolved = lambda f: _resolve(f, point)
        if not _runs_for_large_sizes(_add(resolved(hi), _scale(resolved(lo), -1))):
            return None, None
        point[var] = resolved(chosen[var])
    return current, point


def _resolve(form: Form, point: dict) -> Form:
    for var, value in point.items():
        form = _substitute(form, var, value)
    return form


def _substitute(form: Form, var: str, value: Form) -> Form:
    coefficient = form.get(var, 0)
    rest = {k: v for k, v in form.items() if k != var}
    return _add(rest, _scale(value, coefficient)) if coefficient else rest


def _add(*forms: Form) -> Form:
    total: Form = {}
    for form in forms:
        for key, value in form.items():
            total[key] = total.get(key, 0) + value
    return {k: v for k, v in total.items() if v or k == ""}


def _scale(form: Form, factor: int) -> Form:
    return {k: v * factor for k, v in form.items()}


_AT_LEAST_ONE = {"n", "nb", "B", "b", "s"}  # sizes and tile settings, validated by run


def _lowest(symbol: str) -> int | None:
    """The least value of a symbol: sizes and tile counts are at least 1; the program's
    own parameters may take any value (None)."""
    return 1 if symbol in _AT_LEAST_ONE or "(" in symbol else None


def _runs_for_large_sizes(trip_count: Form) -> bool:
    """True when a loop with this trip count runs once sizes are large enough."""
    terms = {k: v for k, v in trip_count.items() if k and v}
    if any(v < 0 or _lowest(k) is None for k, v in terms.items()):
        return False
    return bool(terms) or trip_count.get("", 0) >= 1


def _provably_at_least(form: Form, bound: int) -> bool:
    """True when ``form >= bound`` for every admissible value of its symbols."""
    terms = {k: v for k, v in form.items() if k and v}
    if any(v < 0 or _lowest(k) is None for k, v in terms.items()):
        return False
    return sum(v * _lowest(k) for k, v in terms.items()) + form.get("", 0) >= bound


class Converter:
    """Turns expressions into affine forms; None for anything non-affine.

    ``let_form(name)`` gives ``(True, form)`` for a ``let`` (its form computed once,
    when it was declared: long chains of lets cost linear time, no recursion) and
    ``(False, None)`` for any other name, which becomes a symbol.
    """

    def __init__(self, let_form, extent_symbol):
        self.let_form = let_form
        self.extent_symbol = extent_symbol
        self.display: dict[str, str] = {}

    def form(self, expr) -> Form | None:
        match expr:
            case n.IntLit(value=value):
                return {"": value}
            case n.Name(ident=ident):
                is_let, form = self.let_form(ident.text)
                if is_let:
                    return None if form is None else dict(form)
                return {ident.text: 1, "": 0}
            case n.Attr(matrix=matrix, attr=attr) if attr.text in ("mt", "nt"):
                symbol = self.extent_symbol(matrix.text, attr.text)
                self.display.setdefault(symbol, f"{matrix.text}.{attr.text}")
                return {symbol: 1, "": 0}
            case n.Unary(op="-", operand=operand):
                inner = self.form(operand)
                return None if inner is None else _scale(inner, -1)
            case n.Binary(op=op, left=left, right=right) if op in ("+", "-", "*"):
                return self._binary(op, self.form(left), self.form(right))
        return None

    @staticmethod
    def _binary(op, a, b):
        if a is None or b is None:
            return None
        if op == "+":
            return _add(a, b)
        if op == "-":
            return _add(a, _scale(b, -1))
        if a.keys() == {""}:
            return _scale(b, a[""])
        if b.keys() == {""}:
            return _scale(a, b[""])
        return None

    def render(self, form: Form) -> str:
        terms = []
        for key, value in form.items():
            if key == "" or not value:
                continue
            name = self.display.get(key, key)
            terms.append(name if value == 1 else f"-{name}" if value == -1 else f"{value}*{name}")
        constant = form.get("", 0)
        if constant or not terms:
            terms.append(str(constant))
        text = " + ".join(terms).replace("+ -", "- ")
        return text
