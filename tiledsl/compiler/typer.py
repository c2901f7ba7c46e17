"""Names and expressions: the program's scopes, and the type, constant value and affine form of
every expression the analysis meets.

:class:`ExpressionTyper` is the analysis's expression checker (as mypy's ``ExpressionChecker``
is its ``TypeChecker``'s): it binds names, resolves them (an unknown one is an E200 saying
where the name is declared, if anywhere), gives each expression its type (int, float, char or
a condition) after the E205/E211/E214 its operators call for, folds constants, and answers
the affine questions the proofs ask (which loops an expression depends on, its affine form).
Problems go to the diagnostic bag; nothing is raised.
"""
from __future__ import annotations

import math
import operator
from fractions import Fraction

from ..language import INT64_MAX, OPERATOR_WORDS, TILING_SETTINGS
from . import nodes as n
from .affine import Converter, difference, is_zero, provably_negative, provably_nonzero
from .diagnostics import DiagnosticBag, suggestion_notes
from .expressions import canonical_text, expression_nodes, names, quoted, unparse
from .scope import TYPE_NOUN, Scope, Symbol
from .source import Span

GEOMETRY_ATTRS = ("mt", "nt", "m", "n")
GEOMETRY_METHODS = ("height", "width", "offset")
FUNCTIONS = ("min", "max")
#: What to write instead of a function the language does not have
_FUNCTION_ADVICE = {"abs": ("the absolute value of x is max(x, -x)",), "pow": ("a power is a ** b",),
                    "sqrt": ("compute a square root in a kernel, or pass it as a float parameter (param, --set)",)}
#: Why a parameter's value or a size cannot use a matrix's geometry, and what a size is written with
_TILED_FIRST = "geometry queries such as A.nt exist once the matrices are tiled"
_SIZED_BY_PARAMETERS = "write it with n, the tiling settings and the parameters"
#: a comparison of -a with -b, as one of a with b
_MIRRORED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_COMPARISONS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
                ">=": operator.ge}
_ARITHMETIC = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
               "//": operator.floordiv, "%": operator.mod}


class ExpressionTyper:
    """The scopes of one program and the facts known of its expressions.

    ``values`` and ``floats`` hold the folded value of each constant expression (by ``id``);
    ``converter`` gives affine forms. The analyzer sets ``tiling`` once read, ``flops_of``
    while it checks a kernel's flop count (whose names are that kernel's arguments),
    ``declarations`` (the program's parameters, matrices and workspaces, to say where a name
    used too early is declared), ``in_requirement`` while it reads a ``require``,
    ``in_loop_nest`` once it reads the statements, ``loop_header`` while it reads a loop's bounds
    and step (before its variable is bound), ``block_lets`` (the lets of the blocks being read, to
    say where a name used before its let is bound), and
    ``ended`` (lets and loop variables whose block has closed, to say where they were visible).
    """

    def __init__(self, program: n.Program, bag: DiagnosticBag):
        self.program, self.bag = program, bag
        self.scope = Scope()
        self.values: dict[int, int] = {}  # id of a constant integer expression -> its value
        self.floats: dict[int, float] = {}  # id of a constant float expression -> its value
        self.converter = Converter(self._let_form, self._extent_symbol, self._name_symbol,
                                   lambda expr: self.values.get(id(expr)), self._dimension)
        self.tiling = "uniform"
        self.flops_of: n.KernelDecl | None = None  # the kernel whose flop count is being checked
        self.declarations: dict = {}  # name -> span of the program's parameters, matrices and workspaces
        self.used_early: set = set()  # names used before their declaration (E200 then, but used)
        self.redeclared: set = set()  # program-level names declared twice (E207): uses are not judged again
        self.in_requirement = False  # reading a `require`'s condition
        self.in_loop_nest = False  # reading the program's statements (declarations have no loop variables)
        self.loop_header: n.For | None = None  # the loop whose bounds and step are being read
        self.block_lets: list[dict[str, Span]] = []  # per block open, innermost last: name -> span of its let
        # lets and loop variables whose block has ended -> (symbol, the block): a use after it is told where
        self.ended: dict[str, tuple[Symbol, str]] = {}

    def declare(self, ident: n.Ident, symbol: Symbol):
        """Bind ``ident``; a second binding of a visible name is an error, and dropped unless both are
        loop variables or lets (the later one is then the one the lines after it read)."""
        if ident.text in OPERATOR_WORDS:
            self.bag.error(ident.span, "E207", f"'{ident.text}' is an operator of conditions, and cannot name a "
                                               f"{symbol.kind}", hint="choose another name")
            symbol.used = True  # bound all the same: its uses are the one mistake, not an unknown name each
        previous = self.scope.lookup(ident.text)
        if previous is None:
            self.scope.frames[-1][ident.text] = symbol
            symbol.used = symbol.used or ident.text in self.used_early
            return
        where = (f"at line {previous.span.line}" if previous.span
                 else "built in: the matrix order" if ident.text == "n" else "by the tiling")
        if previous.kind in ("loop", "let") and ident.text not in self.scope.frames[-1]:
            message = f"'{ident.text}' shadows the {previous.kind} declared {where}"
        else:
            message = f"'{ident.text}' is already declared ({previous.kind}, {where})"
        self.bag.error(ident.span, "E207", message, hint="choose another name")
        if previous.kind in ("loop", "let") and symbol.kind in ("loop", "let"):
            # the lines after it mean the later binding, not the one it repeats; a let's value proves nothing
            # there (E207 is the one mistake: its value may read the name it repeats, `let k = k + 1`)
            previous.used = True
            if symbol.kind == "let" and symbol.form is not None:
                symbol.form = self.converter.opaque(ident)
            self.scope.frames[-1][ident.text] = symbol
        elif previous.kind not in ("loop", "let") and previous.span:
            # which declaration a use meant is not known: E207 is the one mistake, not every use
            self.redeclared.add(ident.text)
            previous.used = True
        if not previous.span and symbol.kind in ("matrix", "workspace"):
            # a matrix named like a built-in (a tiling setting): its later uses mean the matrix
            self.scope.frames[-1][ident.text] = symbol

    def one_character(self, literal: n.StrLit, choices: str | None = None) -> bool:
        """Whether a string literal standing for a char is one character (else an E205; where the
        parameter lists its ``choices``, the one the word begins with is offered: "lower" for 'L')."""
        if len(literal.value) == 1:
            return True
        initial = literal.value[:1].upper()
        hint = f"did you mean {quoted(initial)}?" if choices and initial in choices else None
        self.bag.error(literal.span, "E205", f"a char value is one character, got {literal.value!r}", hint=hint)
        return False

    def never_square(self, decl: n.MatrixDecl) -> bool:
        """Whether the matrix's rows and columns differ whatever the sizes."""
        return self.never_equal(decl.rows, decl.cols)

    def never_equal(self, one, other) -> bool:
        """Whether two size expressions (a matrix's rows or columns) differ whatever the sizes."""
        first, second = self.converter.form(one), self.converter.form(other)
        return first is not None and second is not None and provably_nonzero(difference(first, second))

    def matrix(self, ident: n.Ident) -> Symbol | None:
        symbol = self.scope.lookup(ident.text)
        if symbol is None:
            matrices = [s for s in self.scope.names() if self.scope.lookup(s).kind in ("matrix", "workspace")]
            self.unknown(ident, "matrix", matrices)
            return None
        if symbol.kind not in ("matrix", "workspace"):
            if ident.text not in self.redeclared:
                self.bag.error(ident.span, "E205", f"'{ident.text}' is a {symbol.kind}, not a matrix")
            return None
        symbol.used = True
        return symbol

    def int_expr(self, expr) -> bool:
        return self.expect(expr, "int")

    def bool_expr(self, expr) -> bool:
        return self.expect(expr, "bool")

    def number_expr(self, expr) -> str | None:
        """'int' or 'float' for a number, else None after reporting an error."""
        return self.as_number(self.type_of(expr), expr)

    def as_number(self, got: str | None, expr) -> str | None:
        """``got``, the type of ``expr``, if it is a number's, else None after reporting an error."""
        if got is not None and got not in ("int", "float"):
            self.bag.error(expr.span, "E205", f"expected a number, found {TYPE_NOUN[got]}")
            return None
        return got

    def expect(self, expr, want: str) -> bool:
        got = self.type_of(expr)
        if got is not None and got != want:
            self.bag.error(expr.span, "E205", f"expected {TYPE_NOUN[want]}, found {TYPE_NOUN[got]}",
                           *self.let_notes(expr, lambda let: let.type == got, TYPE_NOUN[got]),
                           *self.param_notes(expr, got),
                           hint="use '//' for integer division" if want == "int" and self.divides(expr) else None)
        return got == want

    def lets_behind(self, expr, why) -> list[Symbol]:
        """The lets ``expr`` names that ``why`` holds of (a float, not affine), and those their values
        name that it holds of too, outermost first: what a diagnostic at ``expr`` is about when the
        expression itself does not show it."""
        found, seen, pending = [], set(), [expr]
        while pending:
            for name in names(pending.pop(0)):
                symbol = self.scope.lookup(name)
                if symbol is not None and symbol.kind == "let" and why(symbol) and id(symbol) not in seen:
                    seen.add(id(symbol))
                    found.append(symbol)
                    pending.append(symbol.node.value)
        return found

    def let_notes(self, expr, why, what: str) -> list[str]:
        """A note per let behind ``expr`` that ``why`` holds of: where it is bound, to what, and that it
        is ``what``."""
        return [f"'{let.node.name.text}' is the let at line {let.span.line}: {let.node.name.text} = "
                f"{unparse(let.node.value)}, {what}" for let in self.lets_behind(expr, why)]

    def float_let_notes(self, expr) -> list[str]:
        """Notes on the float lets behind ``expr``, then on the float parameters it or they name."""
        return (self.let_notes(expr, lambda let: let.type == "float", TYPE_NOUN["float"])
                + self.param_notes(expr, "float"))

    def param_notes(self, expr, type_: str) -> list[str]:
        """A note per parameter of type ``type_`` that ``expr`` names, itself or through the lets of
        that type behind it: where it is declared and with what value (``step s`` does not show
        that ``s`` is a float; its declaration does)."""
        lets = self.lets_behind(expr, lambda let: let.type == type_)
        found = {}
        for name in (name for e in (expr, *(let.node.value for let in lets)) for name in names(e)):
            symbol = self.scope.lookup(name)
            if symbol is not None and symbol.kind == "param" and symbol.type == type_ \
                    and isinstance(symbol.node, n.ParamDecl):
                found.setdefault(name, symbol)
        return [f"'{name}' is the param at line {symbol.span.line}: param {name} = "
                f"{unparse(symbol.node.default)}, {TYPE_NOUN[type_]}" for name, symbol in found.items()]

    def divides(self, expr) -> bool:
        """Whether ``expr`` uses '/', itself or through the float lets and parameters it names: a number
        with a fraction where an integer was meant."""
        lets = self.lets_behind(expr, lambda let: let.type == "float")
        params = (self.scope.lookup(name) for e in (expr, *(let.node.value for let in lets)) for name in names(e))
        return uses_division(expr) or any(uses_division(let.node.value) for let in lets) or any(
            symbol.kind == "param" and symbol.type == "float" and isinstance(symbol.node, n.ParamDecl)
            and uses_division(symbol.node.default) for symbol in params if symbol is not None)

    def type_of(self, expr) -> str | None:
        """The type of ``expr`` ('int', 'float', 'char' or 'bool'), or None after reporting an error."""
        got = self._kind(expr)
        return self._fold(expr, got) if got in ("int", "float") else got

    def _fold(self, expr, kind: str) -> str | None:
        """Record the value of a constant number expression, an integer's in ``values``, a float's in
        ``floats``: ``kind``, or None after an E211 for a value beyond the 64-bit range, or beyond
        float64's (inf: a float that underflows is 0.0, as IEEE arithmetic makes it). No value ever
        grows unbounded: chained products of lets stop at the first one too large."""
        value = self._constant_value(expr)
        if value is None:
            return kind
        if kind == "float":
            if not math.isfinite(value):
                self.bag.error(expr.span, "E211", "the value of this expression is beyond the float64 range",
                               f"it would be {value}: a float64 is at most about 1.8e308 either side of 0",
                               hint="check the formula")
                return None
            self.floats[id(expr)] = value
            return kind
        if abs(value) > INT64_MAX:
            self._beyond_64_bits(expr, _abbreviated(value))
            return None
        self.values[id(expr)] = value
        return "int"

    def _beyond_64_bits(self, expr, value: str) -> None:
        self.bag.error(expr.span, "E211", f"the value of this expression, {value}, is beyond the 64-bit range",
                       f"constants a program computes stay within ±{INT64_MAX} (2**63 - 1)",
                       hint="tile programs count tiles and rows: check the formula")

    def _constant_value(self, expr) -> int | float | None:
        """The value of ``expr`` from the values of its operands already folded, or None."""
        match expr:
            case n.IntLit(value=value) | n.FloatLit(value=value):
                return value
            case n.Name(ident=ident):
                symbol = self.scope.lookup(ident.text)
                return symbol.value if symbol is not None else None
            case n.Unary(op="-", operand=operand) if self.folded(operand) is not None:
                return -self.folded(operand)
            case n.Func(func=func, args=args) if all(self.folded(a) is not None for a in args):
                return {"min": min, "max": max}[func.text](self.folded(a) for a in args)
            case n.Binary(op=op, left=left, right=right) if op in _ARITHMETIC:
                a, b = self.folded(left), self.folded(right)
                if a is not None and b is not None and (b != 0 or op in ("+", "-", "*")):
                    return _ARITHMETIC[op](a, b)
            case n.Binary(op="**", left=left, right=right):
                a, b = self.values.get(id(left)), self.values.get(id(right))
                return None if a is None or b is None else _power_value(a, b)
        return None

    def folded(self, expr) -> int | float | None:
        """The value folded for ``expr``, an integer's or a float's, or None."""
        return self.values.get(id(expr), self.floats.get(id(expr)))

    def _kind(self, expr) -> str | None:
        """The type of ``expr`` from those of its operands, or None after reporting an error."""
        match expr:
            case n.IntLit():
                return "int"
            case n.FloatLit():
                return "float"
            case n.StrLit():
                return "char"
            case n.Name(ident=ident):
                return self._name_type(ident)
            case n.Attr(matrix=matrix, attr=attr):
                return self._geometry(matrix, attr, GEOMETRY_ATTRS)
            case n.Method(matrix=matrix, method=method, arg=arg):
                ok = self.int_expr(arg)
                return self._geometry(matrix, method, GEOMETRY_METHODS) if ok else None
            case n.Func(func=func, args=args):
                return self._func_type(func, args)
            case n.Unary(op="not", operand=operand):
                return "bool" if self.bool_expr(operand) else None
            case n.Unary(operand=operand):
                return self.number_expr(operand)
            case n.Binary(op=op, left=left, right=right) if op in ("and", "or"):
                return "bool" if self.bool_expr(left) & self.bool_expr(right) else None
            case n.Binary(op=op, left=left, right=right) if op in ("//", "%"):
                ok = self.int_expr(left) & self.int_expr(right)
                return "int" if ok and self._divisor_not_zero(op, right) else None
            case n.Binary(op="**"):
                return self._power_type(expr)
            case n.Binary(op=op, left=left, right=right):
                sides = (self.type_of(left), self.type_of(right))  # once each: operands nest
                if op in ("==", "!=") and "char" in sides:
                    return self._char_comparison(expr, sides)
                if "char" in sides and op in ("<", "<=", ">", ">="):  # one error, not one per char side
                    self._char_ordering(expr, op, sides)
                    return None
                kinds = (self.as_number(sides[0], left), self.as_number(sides[1], right))
                if None in kinds or op == "/" and not self._divisor_not_zero(op, right):
                    return None
                if op in ("==", "!=", "<", "<=", ">", ">="):
                    return "bool"
                return "float" if op == "/" or "float" in kinds else "int"
        raise TypeError(f"unknown expression node {expr!r}")

    def _char_comparison(self, expr: n.Binary, sides: tuple) -> str | None:
        """``==`` or ``!=`` with a char side: 'bool' when both are chars, and every literal one character
        (a longer string would never equal a char parameter), else None after an E205."""
        if sides != ("char", "char"):
            other = _KIND_NAMES.get(sides[0] if sides[1] == "char" else sides[1])
            literal = isinstance(expr.left if sides[0] == "char" else expr.right, n.StrLit)
            self.bag.error(expr.span, "E205", "a char compares with a char only" + (f", not {other}" if other else ""),
                           hint='compare a char parameter or argument with it: side == "L"' if literal and other
                           else 'write the character in quotes: side == "L"')
            return None
        literals = [side for side in (expr.left, expr.right) if isinstance(side, n.StrLit)]
        return "bool" if all([self.one_character(literal) for literal in literals]) else None

    def _char_ordering(self, expr: n.Binary, op: str, sides: tuple) -> None:
        """The E205 of ``<``, ``<=``, ``>`` or ``>=`` with a char side: a text of several characters
        there is most often a ``require``'s reason taken for the right side (its number left out)."""
        texts = [side for side in (expr.left, expr.right) if isinstance(side, n.StrLit) and len(side.value) != 1]
        if texts and sides.count("char") == 1:  # `dom >= "a domain..."`
            self.bag.error(expr.span, "E205", f"{op} compares numbers, and a text is none",
                           hint='a require states its reason after the condition: require dom >= 1 "why"')
            return
        self.bag.error(expr.span, "E205", f"chars compare with == and != only, not {op}",
                       hint='test each character: side == "L" or side == "U"')

    def _power_type(self, expr: n.Binary) -> str | None:
        """``a ** b``: integers, ``b`` not negative and the value within 64 bits where they are known
        (E205, E211); the run checks the rest."""
        kinds = [self.type_of(side) for side in (expr.left, expr.right)]
        for side, kind in zip((expr.left, expr.right), kinds):
            if kind is not None and kind != "int":
                found = "a float" if kind == "float" else TYPE_NOUN[kind]  # (a number: an integer is one too)
                self.bag.error(side.span, "E205", f"'**' raises an integer to an integer power, found {found}",
                               hint="compute other powers in a kernel")
        if kinds != ["int", "int"] or self._negative_exponent(expr.right):
            return None
        base, exponent = self.values.get(id(expr.left)), self.values.get(id(expr.right))
        if base is not None and exponent is not None and _power_value(base, exponent) is None:
            self._beyond_64_bits(expr, f"{base} ** {exponent}")
            return None
        return "int"

    def _negative_exponent(self, exponent) -> bool:
        """True after an E205 for an exponent below 0 whatever the sizes (``2 ** -1``, ``2 ** -n``)."""
        form = self.converter.form(exponent)
        if form is None or not provably_negative(form):
            return False
        text, value = unparse(exponent), self.values.get(id(exponent))
        notes = ((f"{text} is below 0 whatever the sizes",) if value is None
                 else () if text == str(value) else (f"{text} is {value}",))
        self.bag.error(exponent.span, "E205", "the exponent of '**' is negative", *notes,
                       hint="'**' computes integer powers: its exponent is 0 or more, as in 2 ** l")
        return True

    def _divisor_not_zero(self, op: str, divisor) -> bool:
        """False after an E214 for a divisor that is zero whatever the loop variables and sizes
        (``k - k``, ``2 - 2``): every evaluation would divide by zero."""
        form = self.number_form(divisor)
        if form is not None and is_zero(form) or _difference_of_itself(divisor):
            self.bag.error(divisor.span, "E214", f"division by zero: the right operand of '{op}' is always 0",
                           hint=self._zero_divisor_hint(divisor))
            return False
        return True

    def _zero_divisor_hint(self, divisor) -> str:
        """The hint of a divisor always 0, worded for what it is made of: number literals alone (``1.0 /
        0``, which no value makes nonzero: the hint spoke of the loop variables), a flop count's arguments,
        the loop variables (directly or through lets), else the parameters and sizes."""
        if not any(isinstance(node, (n.Name, n.Attr, n.Method)) for node in expression_nodes(divisor)):
            return "the divisor is a constant 0: divide by a nonzero number"
        if self.flops_of is not None:
            return "a divisor must be nonzero for every shape and value of the kernel's arguments"
        if self.in_loop_nest and self.loop_variables(divisor):
            return "a divisor must be nonzero for every value of the loop variables"
        return "a divisor must be nonzero for every value of the parameters"

    def truth(self, cond) -> bool | None:
        """Whether the condition ``cond`` (already typed) holds for every value of the parameters
        (True), for none (False), or depends on them (None): comparisons whose sides differ by a
        constant (``1 > 2``, ``n - n > 0``; a parameter's default proves nothing, ``--set`` changes
        it), of two literal characters, and and/or/not of those."""
        match cond:
            case n.Unary(op="not", operand=operand):
                value = self.truth(operand)
                return None if value is None else not value
            case n.Binary(op="and" | "or" as op, left=left, right=right):
                sides = (self.truth(left), self.truth(right))
                deciding = op == "or"  # the value of one side that decides the whole (True for or)
                if deciding in sides or None not in sides:
                    return deciding if deciding in sides else not deciding
                return False if op == "and" and self._never_together(cond) else None
            case n.Binary(op=op, left=n.StrLit() as left, right=n.StrLit() as right) if op in ("==", "!="):
                return _COMPARISONS[op](left.value, right.value)
            case n.Binary(op=op, left=left, right=right) if op in _COMPARISONS:
                a, b = self.number_form(left), self.number_form(right)
                if a is not None and b is not None and a.keys() == b.keys() == {""}:
                    return _COMPARISONS[op](a[""], b[""])  # two constants: compared as the run compares them
                gap = difference(a, b) if a is not None and b is not None else None
                if gap is None:
                    return None
                if not any(value for symbol, value in gap.items() if symbol):
                    return _COMPARISONS[op](gap.get("", 0), 0)
                return self._sign_truth(op, gap)
        return None

    def _never_together(self, cond) -> bool:
        """Whether the comparisons joined by ``and`` in ``cond`` that bound one integer each (``n > 5``,
        ``2 * q <= 7``) leave one of them no value (``n > 5 and n < 3``): each none alone, together
        none. An integer of the sizes (n, a tile setting) is at least 1; a parameter any integer."""
        low: dict = {}
        high: dict = {}
        for leaf in _conjuncts(cond):
            bound = self._bound_of(leaf)
            if bound is None:
                continue
            symbol, least, most = bound
            low[symbol] = max(low.get(symbol, 1 if self._at_least_one(symbol) else -math.inf), least)
            high[symbol] = min(high.get(symbol, math.inf), most)
            if low[symbol] > high[symbol]:
                return True
        return False

    def _bound_of(self, comparison) -> tuple | None:
        """(symbol, least, greatest) of the one integer that ``comparison`` bounds (``3 * q + 1 < 8``:
        q at most 2), else None."""
        if not (isinstance(comparison, n.Binary) and comparison.op in _COMPARISONS and comparison.op != "!="):
            return None
        a, b = self.number_form(comparison.left), self.number_form(comparison.right)
        gap = difference(a, b) if a is not None and b is not None else None
        symbols = [symbol for symbol, value in (gap or {}).items() if symbol and value]
        if len(symbols) != 1 or not isinstance(gap[symbols[0]], int):
            return None
        symbol, factor, rest = symbols[0], gap[symbols[0]], -gap.get("", 0)
        op = comparison.op if factor > 0 else _MIRRORED[comparison.op]  # factor·x op rest, as x op' rest/factor
        limit = rest / factor if isinstance(rest, float) else Fraction(rest, factor)
        least = {">": math.floor(limit) + 1, ">=": math.ceil(limit), "==": math.ceil(limit)}.get(op, -math.inf)
        most = {"<": math.ceil(limit) - 1, "<=": math.floor(limit), "==": math.floor(limit)}.get(op, math.inf)
        return symbol, least, most

    def _sign_truth(self, op: str, gap: dict) -> bool | None:
        """``gap op 0`` where ``gap`` is of the sizes alone (n and the tile settings, each at least 1 in
        every run) with coefficients of one sign: its least (or greatest) value, at 1 each, decides
        (``n < 1`` never holds); None otherwise."""
        coefficients = [value for symbol, value in gap.items() if symbol]
        if not all(self._at_least_one(symbol) for symbol in gap if symbol):
            return None
        extreme = gap.get("", 0) + sum(coefficients)  # every size at 1
        if all(value <= 0 for value in coefficients):  # gap <= extreme: read as -gap >= -extreme
            op, extreme = _MIRRORED[op], -extreme
        elif not all(value >= 0 for value in coefficients):
            return None
        # gap >= extreme, whatever the sizes: when the comparison never holds, or always does
        never = {"<": extreme >= 0, "<=": extreme > 0, "==": extreme > 0}.get(op, False)
        always = {">": extreme > 0, ">=": extreme >= 0, "!=": extreme > 0}.get(op, False)
        return False if never else True if always else None

    def _at_least_one(self, symbol: str) -> bool:
        """Whether ``symbol`` is n or a tile setting, which every run makes at least 1."""
        bound = self.scope.frames[0].get(symbol)
        return bound is not None and bound.kind == "param" and bound.span is None

    def number_form(self, expr) -> dict | None:
        """The affine form of integer ``expr``, in which a flop count's ``A.m`` and ``A.n`` are symbols;
        for a constant float (``0.5 - 0.25 * 2``, folded as the run computes it), its value."""
        form = self.converter.form(expr)
        value = self.floats.get(id(expr)) if form is None else None
        return form if value is None else {"": value}

    def _name_type(self, ident: n.Ident) -> str | None:
        symbol = self.scope.lookup(ident.text)
        if symbol is None:
            self.unknown(ident, "name", self.scope.names())
            return None
        symbol.used = True
        if symbol.kind in ("matrix", "workspace") and ident.text in self.redeclared:
            return None
        if symbol.kind in ("matrix", "workspace"):
            self.bag.error(ident.span, "E205", f"'{ident.text}' is a {symbol.kind}, not an integer",
                           hint=f"use {ident.text}.mt or {ident.text}.nt for its number of tile rows or columns")
            return None
        if symbol.kind == "argument":
            self.bag.error(ident.span, "E205", f"'{ident.text}' is a tile argument, not a number",
                           hint=f"use {ident.text}.m or {ident.text}.n for its numbers of rows or columns")
            return None
        return symbol.type

    def unknown(self, ident: n.Ident, what: str, known) -> None:
        """E200 for a name not in scope: if the program declares it further on, say where (the
        declarations are read in order: parameters, then matrices, then workspaces)."""
        if self.flops_of is not None:
            kernel, near = self.flops_of.name.text, suggestion_notes(ident.text, known)
            # a near miss of an argument is a typo; any other name is one of the program's
            why = near or (f"a flop count sees only the arguments of kernel '{kernel}': its tiles' shapes (A.m, "
                           f"A.n) and its value parameters",)
            hint = None if near else (f"to count with a number of the program, give '{kernel}' a value parameter "
                                      f"(e.g. 'int k') and pass the number in each call")
            self.bag.error(ident.span, "E200", f"unknown {what} '{ident.text}'", *why, hint=hint)
            return
        later = self.declarations.get(ident.text) or self._let_after(ident)
        if later is not None:
            self.used_early.add(ident.text)
            message, note, hint = self._declared_where(ident, later, what)
            self.bag.error(ident.span, "E200", message, note, hint=hint)
            return
        if what == "name" and self.loop_header is not None and ident.text == self.loop_header.var.text:
            self.bag.error(ident.span, "E200", f"unknown {what} '{ident.text}'", self._own_variable_note(ident))
            return
        if what == "name" and ident.text in self.ended:
            symbol, inside = self.ended[ident.text]
            let = symbol.kind == "let"
            self.bag.error(ident.span, "E200", f"unknown {what} '{ident.text}'",
                           f"{'let' if let else 'loop variable'} '{ident.text}' is bound at line {symbol.span.line}, "
                           f"column {symbol.span.column}, in {inside}: it is visible only there",
                           hint="use it inside that block, or bind it before the block" if let else None)
            return
        other = next((kind for kind, settings in TILING_SETTINGS.items()
                      if kind != self.tiling and ident.text in settings), None)
        if what == "name" and other is not None:  # nb under a hybrid tiling: not the 'n' it is spelt close to
            mine = ", ".join(TILING_SETTINGS[self.tiling])
            self.bag.error(ident.span, "E200", f"unknown {what} '{ident.text}'",
                           f"'{ident.text}' is a setting of {other} tiling; this program's tiling is {self.tiling}, "
                           f"whose settings are {mine}")
            return
        notes, hint = suggestion_notes(ident.text, known), None
        known = sorted(known)
        if what == "matrix" and not notes and 0 < len(known) <= 8:  # no near miss: the few there are
            notes = (f"the program's matrices: {', '.join(known)}",)
        elif what == "name" and ident.text.lower() in ("true", "false"):
            notes = ("the language has no booleans: a condition is a comparison (k == 0), or comparisons joined "
                     "by and, or, not",)
        elif what == "name" and not notes and not self.in_loop_nest:  # a size of another name than n
            hint = f"declare it before it is used: param {ident.text} = VALUE (a run gives another with --set)"
        self.bag.error(ident.span, "E200", f"unknown {what} '{ident.text}'", *notes, hint=hint)

    def _let_after(self, ident: n.Ident) -> Span | None:
        """Where a block still open binds the name of ``ident`` with a let after it (declared first, the
        let would be visible there), or None."""
        for lets in reversed(self.block_lets):
            span = lets.get(ident.text)
            if span is not None and (span.line, span.column) > (ident.span.line, ident.span.column):
                return span
        return None

    def _own_variable_note(self, ident: n.Ident) -> str:
        """Why a loop's own variable is not known in its bounds or step (``ident`` is in one of them)."""
        step = self.loop_header.step
        in_step = step is not None and _within(ident.span, step.span)
        part, pronoun = ("step is", "it") if in_step else ("bounds are", "them")
        return (f"a loop's {part} computed when the loop starts, before '{ident.text}' has a value: only "
                f"parameters and the variables of enclosing loops may appear in {pronoun}")

    def _declared_where(self, ident: n.Ident, declared: Span, what: str) -> tuple[str, str, str]:
        """Why a name the program declares is not known at ``ident``, a ``what`` ('name', or 'matrix' for
        one whose geometry is queried): the message, note and hint of E200. A matrix or a workspace where
        only parameters may be used is said to be one (it is declared), and its geometry not to be usable."""
        name, kind = ident.text, self._array_kind(ident.text)
        place = self._parameters_only(ident) if kind is not None else None
        if place is not None:  # declaring the matrix first would only lead to the rule below
            where, note, hint = place
            used = f"the geometry of {kind} '{name}'" if what == "matrix" else f"{kind} '{name}'"
            return f"{used} cannot be used in {where}", note, hint
        unknown = f"unknown {what} '{name}'"
        if (declared.line, declared.column) >= (ident.span.line, ident.span.column):
            return unknown, f"'{name}' is declared at line {declared.line}, after this use", f"declare '{name}' first"
        if declared.line == ident.span.line and name in {d.name.text for d in self.program.params}:
            return unknown, f"parameter '{name}' cannot refer to itself", "give it a value made of other names"
        return (unknown, f"'{name}' is declared at line {declared.line}, but declarations are read parameters first, "
                         f"then matrices, then workspaces",
                f"a parameter may use other parameters only: {_TILED_FIRST}")

    def _parameters_only(self, ident: n.Ident) -> tuple[str, str, str] | None:
        """Where ``ident`` is, if only parameters may be used there, and the note and hint of a matrix used
        there: a requirement, the value of the parameter whose declaration holds it, the dimensions of a
        matrix's, the tile height of a workspace's; None elsewhere."""
        if self.in_requirement:
            return ("a requirement", "requirements are read with the parameters, before the matrices",
                    "a requirement may use n, the tiling settings and the parameters only")
        program = self.program
        for decls, where, instead in ((program.params, "the value of a parameter",
                                       "compute the value in the loop nest (a let)"),
                                      (program.matrices, "a matrix's dimensions", _SIZED_BY_PARAMETERS),
                                      (program.workspaces, "a workspace's tile height", _SIZED_BY_PARAMETERS)):
            if any(_within(ident.span, decl.span) for decl in decls):
                return where, f"{where} may use parameters only", f"{_TILED_FIRST}: {instead}"
        return None

    def _array_kind(self, name: str) -> str | None:
        """'matrix' or 'workspace' for a name the program declares as one, else None."""
        if name in {m.name.text for m in self.program.matrices}:
            return "matrix"
        return "workspace" if name in {w.name.text for w in self.program.workspaces} else None

    def _geometry(self, matrix: n.Ident, query: n.Ident, allowed) -> str | None:
        if self.flops_of is not None:
            return self._argument_shape(matrix, query)
        if self.matrix(matrix) is None:
            return None
        if query.text in GEOMETRY_METHODS and allowed is GEOMETRY_ATTRS:
            index = "a tile row index" if query.text == "height" else "a tile column index"
            self.bag.error(query.span, "E200", f"{matrix.text}.{query.text} takes {index}",
                           hint=f"{matrix.text}.{query.text}({'i' if query.text == 'height' else 'j'})")
            return None
        if query.text in GEOMETRY_ATTRS and allowed is GEOMETRY_METHODS:
            self.bag.error(query.span, "E200", f"{matrix.text}.{query.text} takes no argument",
                           hint=f"{matrix.text}.{query.text}")
            return None
        if query.text in TILING_SETTINGS[self.tiling]:  # Y.nb: the setting, which a query spelt close to is not
            self.bag.error(query.span, "E200", f"unknown geometry query '{matrix.text}.{query.text}'",
                           f"'{query.text}' is a setting of the program's {self.tiling} tiling: a name of its own, "
                           f"the same for every matrix", hint=f"write '{query.text}' alone")
            return None
        other = next((kind for kind, settings in TILING_SETTINGS.items() if query.text in settings), None)
        if other is not None and query.text not in allowed:  # A.nb under a hybrid tiling: not the A.n spelt close
            self.bag.error(query.span, "E200", f"unknown geometry query '{matrix.text}.{query.text}'",
                           f"'{query.text}' is a setting of {other} tiling; this program's tiling is {self.tiling}, "
                           f"whose settings are {', '.join(TILING_SETTINGS[self.tiling])}",
                           hint=f"a tile's rows: {matrix.text}.height(i); its columns: {matrix.text}.width(j)")
            return None
        if query.text not in allowed:
            self.bag.error(query.span, "E200", f"unknown geometry query '{matrix.text}.{query.text}'",
                           *suggestion_notes(query.text, GEOMETRY_ATTRS + GEOMETRY_METHODS),
                           hint="queries: .mt .nt .m .n, .height(i) .width(j) .offset(j)")
            return None
        return "int"

    def _argument_shape(self, argument: n.Ident, query: n.Ident) -> str | None:
        """``A.m`` and ``A.n`` in a flop count: the rows and columns of tile argument A."""
        symbol = self.scope.lookup(argument.text)
        if symbol is None or symbol.kind != "argument":
            tiles = [p.name.text for p in self.flops_of.params if p.kind == "tile"]
            self.bag.error(argument.span, "E200", f"'{argument.text}' is not a tile argument of kernel "
                                                  f"'{self.flops_of.name.text}'",
                           *suggestion_notes(argument.text, tiles), f"its tile arguments: {', '.join(tiles)}")
            return None
        if query.text not in ("m", "n"):
            self.bag.error(query.span, "E200", f"a flop count knows {argument.text}.m and {argument.text}.n only",
                           hint="the rows and columns of the argument (a panel's: of its tiles stacked)")
            return None
        return "int"

    def _func_type(self, func: n.Ident, args) -> str | None:
        kinds = [self.number_expr(a) for a in args]
        if func.text not in FUNCTIONS:
            symbol = self.scope.lookup(func.text)
            if symbol is not None and symbol.kind in ("matrix", "workspace"):  # A(0, 0) for A[0, 0]
                symbol.used = True  # used, wrongly: the one mistake, not also a warning that it is unused
                self.bag.error(func.span, "E200", f"'{func.text}' is a {symbol.kind}, not a function",
                               hint=f"a tile of it is {func.text}[i, j], in square brackets")
                return None
            matrix = next((d.name.text for d in getattr(self.program, "matrices", ())), "A")
            hint = (f"{func.text} is a query of a matrix: write {matrix}.{func.text}(...)"  # tester x: offset(k)
                    if func.text in GEOMETRY_METHODS else
                    "functions: min(a, b, ...) and max(a, b, ...), of two or more numbers")
            self.bag.error(func.span, "E200", f"unknown function '{func.text}'",
                           *suggestion_notes(func.text, FUNCTIONS),
                           *_FUNCTION_ADVICE.get(func.text, ()), hint=hint)
            return None
        if len(args) < 2:
            self.bag.error(func.span, "E202", f"{func.text} takes at least 2 arguments, got {len(args)}")
            return None
        return None if None in kinds else "float" if "float" in kinds else "int"

    def depends(self, expr) -> frozenset[str]:
        """The lets ``expr`` names and the loop variables it depends on (through lets too).

        Not the lets those lets name: they are bound before them, so the innermost
        binder an expression depends on is one of these; and a let's loop variables are
        at most the enclosing loops, so a chain of lets costs linear time."""
        lets = frozenset(name for name in names(expr)
                         if (symbol := self.scope.lookup(name)) is not None and symbol.kind == "let")
        return lets | self.loop_variables(expr)

    def loop_variables(self, expr) -> frozenset[str]:
        """The loop variables ``expr`` depends on, directly or through lets."""
        found = set()
        for name in names(expr):
            symbol = self.scope.lookup(name)
            if symbol is not None and symbol.kind == "loop":
                found.add(name)
            elif symbol is not None:
                found |= symbol.loops
        return frozenset(found)

    def tile_depends(self, tile: n.TileRef) -> frozenset[str]:
        found = frozenset()
        for index in (tile.row, tile.col):
            for end in (index.start, index.stop) if isinstance(index, n.Range) else (index,):
                found |= self.depends(end)
        return found

    def _varying(self, expr) -> bool:
        """Whether ``expr`` depends on a loop variable, directly or through lets."""
        return bool(self.loop_variables(expr))

    def affine(self, expr) -> bool:
        match expr:
            case n.IntLit() | n.Attr():
                return True
            case n.Name(ident=ident):
                symbol = self.scope.lookup(ident.text)
                return symbol is None or symbol.kind != "let" or symbol.affine
            case n.Method(arg=arg):
                return not self._varying(arg)
            case n.Func(args=args):
                return all(self.affine(a) for a in args)
            case n.Unary(operand=operand):
                return self.affine(operand)
            case n.Binary(op=op, left=left, right=right):
                if op in ("+", "-"):
                    return self.affine(left) and self.affine(right)
                if op == "*":
                    return self.affine(left) and self.affine(right) and not (
                        self._varying(left) and self._varying(right))
                return not (self._varying(left) or self._varying(right))
        return False

    def _let_form(self, name: str):
        symbol = self.scope.lookup(name)
        return (True, symbol.form) if symbol is not None and symbol.kind == "let" else (False, None)

    def _name_symbol(self, name: str) -> str | None:
        """The symbol of ``name`` in affine forms: a size or a loop variable itself; the program's
        own parameter or a kernel's value parameter (in a flop count), which may be zero or negative,
        marked apart from the sizes; None for a float or a char."""
        symbol = self.scope.lookup(name)
        if symbol is None:
            return name
        if symbol.type != "int":
            return None
        return f"param {name}" if symbol.kind in ("param", "value") and symbol.node is not None else name

    def _extent_symbol(self, matrix: str, axis: str) -> str | None:
        """A symbol naming the tile count of ``matrix`` along ``axis`` ('mt' or 'nt'), or in a flop count
        the rows or columns ('m' or 'n') of tile argument ``matrix`` (at least 1: a count is judged for
        arguments that are not empty); None for another query."""
        symbol = self.scope.lookup(matrix)
        if symbol is not None and symbol.kind == "argument":
            return f"shape({matrix}.{axis})" if axis in ("m", "n") else None
        if axis not in ("mt", "nt"):
            return None
        decl = symbol.node if symbol else None
        like = self.scope.lookup(decl.like.text) if isinstance(decl, n.WorkspaceDecl) else None
        if like is not None and isinstance(like.node, n.MatrixDecl):  # (like no matrix: E209, a count of its own)
            return self._extent_symbol(decl.like.text, axis)
        if not isinstance(decl, n.MatrixDecl) or queries_geometry(decl.rows if axis == "mt" else decl.cols):
            return f"{matrix}.{axis}"  # (a size of geometry queries, E209 or E200, is no length: A[n, A.nt] recursed)
        dim = decl.rows if axis == "mt" else decl.cols
        counter = "tiles" if self.tiling == "uniform" else ("blocks" if axis == "mt" else "slices")
        symbol = f"{counter}({canonical_text(dim)})"
        if symbol not in self.converter.lengths:  # which counts are at least others (W302's proofs)
            self.converter.lengths[symbol] = (counter, self.converter.form(dim))
        return symbol

    def _dimension(self, matrix: str, axis: str):
        """The expression the program's matrix ``matrix`` is declared with along ``axis`` ('m': its
        rows, 'n': its columns), or None (a workspace, a tile argument in a flop count, another query)."""
        symbol = self.scope.lookup(matrix)
        if axis not in ("m", "n") or symbol is None or symbol.kind != "matrix" \
                or not isinstance(symbol.node, n.MatrixDecl):
            return None
        dim = symbol.node.rows if axis == "m" else symbol.node.cols
        return None if queries_geometry(dim) else dim


def queries_geometry(expr) -> bool:
    """Whether ``expr`` holds a geometry query (``A.nt``, ``A.height(k)``): refused in a matrix's size."""
    return any(isinstance(node, (n.Attr, n.Method)) for node in expression_nodes(expr))


def _within(inner: Span, outer: Span) -> bool:
    """Whether span ``inner`` lies within ``outer``."""
    return ((outer.line, outer.column) <= (inner.line, inner.column)
            and (inner.end_line, inner.end_column) <= (outer.end_line, outer.end_column))


def uses_division(expr) -> bool:
    """Whether ``expr`` uses '/' (a number with a fraction where an integer was meant)."""
    return any(isinstance(node, n.Binary) and node.op == "/" for node in expression_nodes(expr))


def integer_constant(expr) -> int | None:
    """The value of an expression made of integer literals only, else None (also for
    a value beyond :data:`INT64_MAX`)."""
    match expr:
        case n.IntLit(value=value):
            return value
        case n.Unary(op="-", operand=operand):
            value = integer_constant(operand)
            return None if value is None else -value
        case n.Binary(op=op, left=left, right=right) if op in ("+", "-", "*", "//", "%", "**"):
            a, b = integer_constant(left), integer_constant(right)
            if a is None or b is None or (op in ("//", "%") and b == 0):
                return None
            value = _power_value(a, b) if op == "**" else _ARITHMETIC[op](a, b)
            return value if value is not None and abs(value) <= INT64_MAX else None
    return None


def _difference_of_itself(expr) -> bool:
    """``X - X``, 0 whatever ``X`` is: also where the converter has no affine form for ``X``
    (``C.n - C.n`` in a flop count, ``alpha - alpha`` of a float)."""
    return isinstance(expr, n.Binary) and expr.op == "-" and unparse(expr.left) == unparse(expr.right)


def _abbreviated(value: int) -> str:
    """``value`` in full when short, else its leading digits and its number of digits."""
    digits = str(abs(value))
    sign = "-" if value < 0 else ""
    return sign + digits if len(digits) <= 24 else f"{sign}{digits[:6]}… ({len(digits)} digits)"


def _power_value(base: int, exponent: int) -> int | None:
    """``base ** exponent``, or None for a negative exponent (not an integer) or a value beyond the
    64-bit range (known so before it is computed: ``2 ** 10**18`` is never worked out)."""
    if exponent < 0 or abs(base) > 1 and exponent >= 64:  # at least 2**64
        return None
    value = base ** exponent
    return value if abs(value) <= INT64_MAX else None


#: how an E205 names the type of the other side of a comparison with a char
_KIND_NAMES = {"int": "an integer", "float": "a float", "bool": "a condition"}


def _conjuncts(cond) -> list:
    """The conditions ``cond`` joins with ``and`` (itself if it joins none)."""
    if isinstance(cond, n.Binary) and cond.op == "and":
        return _conjuncts(cond.left) + _conjuncts(cond.right)
    return [cond]

