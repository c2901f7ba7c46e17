"""What an expression is made of and how it reads: its nodes, the names it uses, its
constant value as a kernel argument, and its text (for messages, symbols and generated code);
also how a kernel parameter's declaration reads.

The compiler's analysis, its data-flow planner and its code generator all read expressions
so; nothing here checks or changes one.
"""
from __future__ import annotations

from . import nodes as n
from .diagnostics import printable


def constant_of(expr, kind: str):
    """The constant value of ``expr`` for a ``kind`` parameter, or None: a (negated) number
    literal for int and float (an int literal for int), a string literal for char."""
    negated = isinstance(expr, n.Unary) and expr.op == "-"
    literal = expr.operand if negated else expr
    if kind == "char":
        return literal.value if isinstance(literal, n.StrLit) and not negated else None
    allowed = (n.IntLit,) if kind == "int" else (n.IntLit, n.FloatLit)
    if not isinstance(literal, allowed):
        return None
    return -literal.value if negated else literal.value


def expression_nodes(expr):
    """Every node of an expression, outermost first."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        match node:
            case n.Method(arg=arg):
                stack.append(arg)
            case n.Func(args=args):
                stack.extend(args)
            case n.Unary(operand=operand):
                stack.append(operand)
            case n.Binary(left=left, right=right):
                stack.extend((left, right))


def names(expr):
    """Every plain name used in ``expr``."""
    return (node.ident.text for node in expression_nodes(expr) if isinstance(node, n.Name))


def canonical_text(expr) -> str:
    """Source-like text of an expression with every operation in parentheses (spans ignored):
    one text per expression tree, for symbols and comparisons."""
    return _render(expr, 0, canonical=True)


_PRECEDENCE = {"or": 1, "and": 2, "==": 4, "!=": 4, "<": 4, "<=": 4, ">": 4, ">=": 4,
               "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6, "**": 8}


def precedence(expr) -> int:
    """The binding strength of the expression's outermost operator, the language's as Python's
    (7: unary minus, 8: '**', 9: an atom)."""
    if isinstance(expr, n.Binary):
        return _PRECEDENCE[expr.op]
    if isinstance(expr, n.Unary):
        return 3 if expr.op == "not" else 7
    return 9


def unparse(expr) -> str:
    """Source-like text of an expression with the parentheses its operators need and no
    others (for messages), but those of an 'and' inside an 'or', which a reader needs
    (``(a and b) or c``, as linters ask of Python)."""
    return _render(expr, 0, canonical=False)


def _render(expr, outer: int, canonical: bool, in_or: bool = False) -> str:
    """``expr`` inside an operator binding ``outer`` strongly (an operand of 'or' where ``in_or``);
    ``canonical``: every operation in parentheses."""
    match expr:
        case n.IntLit(value=value) | n.FloatLit(value=value):
            return str(value)
        case n.StrLit(value=value):
            return quoted(value)
        case n.Range(start=start, stop=stop):
            return f"{unparse(start)} : {unparse(stop)}"
        case n.Name(ident=ident):
            return ident.text
        case n.Attr(matrix=m, attr=a):
            return f"{m.text}.{a.text}"
        case n.Method(matrix=m, method=q, arg=arg):
            return f"{m.text}.{q.text}({_render(arg, 0, canonical)})"
        case n.Func(func=f, args=args):
            return f"{f.text}({', '.join(_render(a, 0, canonical) for a in args)})"
        case n.Unary(op=op, operand=operand):
            mine = precedence(expr)
            inner = _render(operand, mine, canonical)
            # a negation of a negation is "- -3.0", not "--3.0", which reads as another operator
            text = "not " + inner if op == "not" else f"- {inner}" if inner.startswith("-") else "-" + inner
        case n.Binary(op=op, left=left, right=right):
            mine = precedence(expr)
            # operators of one level group from the left (a right operand of that level needs
            # parentheses), but '**' from the right, and its right operand may be a negation
            sides = (mine + 1, mine - 1) if op == "**" else (mine, mine + 1)
            operands = (_render(side, level, canonical, op == "or") for side, level in zip((left, right), sides))
            text = f" {op} ".join(operands)
        case _:
            return "?"
    bracketed = canonical and isinstance(expr, n.Binary) or mine < outer or in_or and getattr(expr, "op", "") == "and"
    return f"({text})" if bracketed else text


def param_text(param: n.KernelParam) -> str:
    """A kernel parameter as its declaration reads: ``inout A``, ``char side in "LR" = "L"``."""
    if param.kind == "tile":
        return f"{param.mode} {param.name.text}"
    default = f" = {unparse(param.default)}" if param.default is not None else ""
    choices = f" in {quoted(param.choices)}" if param.choices is not None else ""  # an empty list too, as written
    return f"{param.kind} {param.name.text}{choices}{default}"


def quoted(text: str) -> str:
    """``text`` as a string literal of the language writes it: double-quoted, with its quotes,
    backslashes and control characters as Python escapes (a newline among a char parameter's
    choices was printed raw, breaking the note that showed the declaration in two)."""
    return '"' + "".join(_ESCAPES.get(char) or printable(char) for char in text) + '"'


#: what :func:`printable` leaves as it is and a string literal escapes
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\t": "\\t"}


def unparse_tile(tile: n.TileRef) -> str:
    """A tile argument as written: ``A[k, j]``, a panel ``A[k : A.mt, k]``, a part ``A[i, j][0 : 1]``."""
    text = f"{tile.matrix.text}[{unparse(tile.row)}, {unparse(tile.col)}]"
    parts = []
    for part in (tile.rows, tile.cols):
        if part is not None:
            parts.append(f"{unparse(part.start) if part.start else ''}:{unparse(part.stop) if part.stop else ''}")
    return text + (f"[{', '.join(parts)}]" if parts else "")


def is_panel(tile: n.TileRef) -> bool:
    """Whether a tile argument is a panel: a range of tiles along one index."""
    return isinstance(tile.row, n.Range) or isinstance(tile.col, n.Range)
