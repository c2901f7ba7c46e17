"""Semantic analysis: names, types, kernel signatures, affine bounds, tile ranges.

``analyze(file)`` checks one parsed program against the prelude and returns a
:class:`Checked` program: the AST plus, for every kernel call, its access summary
(the ordered tiles it reads and writes, main output first among the writes) and
the loop variables its tile indices depend on (used to hoist ownership tests).
Problems are collected as diagnostics, never raised.
"""
from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass
from pathlib import Path

from . import nodes as n
from .affine import (Converter, coincidence_witness, difference, empty_panel_witness, is_zero, never_runs,
                     never_runs_within, out_of_range_witness, provably_negative, provably_nonzero)
from .diagnostics import DiagnosticBag, did_you_mean
from .expressions import canonical_text, constant_of, expression_nodes, names, unparse
from .kernel_module import UNKNOWN, Definitions, Function, gpu_body, read_definitions
from .source import Span

TILING_DEFAULTS = {"uniform": {"nb": 256}, "hybrid": {"B": 512, "b": 128, "s": 2}}
SQUARE_KINDS = ("spd",)  # random kinds that exist for square matrices only
NAMED_INITS = ("zeros", "identity")
#: built-in checks: the numbers of matrices each takes, and the options it has
#: The arguments of each built-in check, per accepted arity: "-" takes no qualifier, "o" an operand's
#: (a triangle, unit, symmetric, transposed), "r" a result's part (lower, upper or symmetric). The
#: runtime, which checks a driver's declarations as well, holds the same table (a test compares them).
CHECK_ARGUMENTS = {"cholesky": ("-",), "lu": ("-", "--"), "qr": ("--",), "solve": ("o--",), "inverse": ("oo",),
                   "product": ("roo",)}
CHECK_ARITY = {kind: tuple(len(s) for s in signatures) for kind, signatures in CHECK_ARGUMENTS.items()}
CHECK_OPTIONS = {"product": ("alpha", "beta")}
#: how each built-in check is written (docs/language.md's table of checks), for an arity error
CHECK_FORMS = {"cholesky": ("A",), "lu": ("A", "A, P"), "qr": ("A, T",), "solve": ("A, X, B",),
               "inverse": ("A, X",), "product": ("C, A, B",)}
#: what a check may say of a matrix: the triangle it means, its symmetry, its transpose
CHECK_QUALIFIERS = ("lower", "upper", "unit", "symmetric", "transposed")
QR_REPLAYED = ("geqrt", "tpqrt", "ttqrt")  # the kernels whose reflectors `check qr` replays (runtime/verify.py)
OPERATOR_WORDS = ("and", "or", "not")  # a name spelt so could never be used in an expression
GEOMETRY_ATTRS = ("mt", "nt", "m", "n")
GEOMETRY_METHODS = ("height", "width", "offset")
FUNCTIONS = ("min", "max")
#: What to write instead of a function the language does not have
_FUNCTION_ADVICE = {"abs": ("the absolute value of x is max(x, -x)",), "pow": ("a power is a ** b",),
                    "sqrt": ("compute a square root in a kernel, or pass it as a float parameter (param, --set)",)}
WRITE_MODES = ("out", "inout")
#: Deepest nest of loops: the driver nests one Python ``for`` per loop (CPython allows 20).
MAX_LOOP_NESTING = 20
#: Most loop iterations a run walks (runtime/iterations.py refuses more).
MAX_ITERATIONS = 10**10
#: The largest magnitude of a value the analysis computes (a let, a product of constants).
MAX_CONSTANT = 2**63 - 1
_ARITHMETIC = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
               "//": operator.floordiv, "%": operator.mod}
READ_MODES = ("in", "inout")


@dataclass(frozen=True)
class Access:
    """One tile argument of a call, with its mode and the loop names its indices use."""

    tile: n.TileRef
    mode: str
    depends: frozenset[str]

    @property
    def matrix(self) -> str:
        return self.tile.matrix.text


@dataclass(frozen=True)
class CallSummary:
    """The access summary of one call site: ``accesses[main]`` is the main output.

    ``accesses`` are the tile arguments (a panel is one access); ``values`` the value
    arguments in declaration order, ``(name, expression)``, a declared default where the
    call gives none; ``order`` the kernel's parameters in declaration order, "t" for a tile
    and "v" for a value."""

    call: n.Call
    kernel: n.KernelDecl
    accesses: tuple[Access, ...]
    main: int
    under_condition: bool
    values: tuple[tuple[str, object], ...] = ()
    order: str = ""


@dataclass(frozen=True)
class CharUse:
    """A char parameter passed where a kernel takes a char: the run checks its value is among ``choices``
    (any one character when None); ``where`` names the kernel parameter (``potrf's uplo``)."""

    name: str
    choices: str | None
    where: str
    span: Span


@dataclass(frozen=True)
class Checked:
    """A program that passed analysis, with everything the generator needs."""

    program: n.Program
    path: str
    tiling: str
    tiling_defaults: dict
    kernels: dict
    calls: tuple[CallSummary, ...]
    kernel_module: str | None
    float_lets: frozenset = frozenset()  # spans of the lets whose value is a float
    char_uses: tuple[CharUse, ...] = ()

    def summary(self, call: n.Call) -> CallSummary:
        return next(c for c in self.calls if c.call.span == call.span)


@dataclass
class _Symbol:
    kind: str  # param, matrix, workspace, loop, let
    span: Span | None
    node: object = None
    used: bool = False
    loops: frozenset = frozenset()  # the loop variables a let's value depends on (through lets too)
    affine: bool = True  # a let's value is affine in the loop variables
    form: dict | None = None  # a let's affine form (None: not affine)
    value: int | None = None  # a let's value when it is a constant
    type: str = "int"  # the value's type: int, float or char (loops and lets of integers: int)


class _Scope:
    """Nested name scopes; lookups walk outwards."""

    def __init__(self):
        self.frames: list[dict[str, _Symbol]] = [{}]

    def lookup(self, name: str) -> _Symbol | None:
        for frame in reversed(self.frames):
            if name in frame:
                return frame[name]
        return None

    def names(self) -> list[str]:
        return [name for frame in self.frames for name in frame]


def analyze(file: n.File, prelude: n.File) -> tuple[Checked | None, DiagnosticBag]:
    """Check ``file`` (with the prelude's kernels); returns the checked program, if any."""
    bag = DiagnosticBag()
    if not file.programs:
        bag.error(Span.whole(file.path), "E209", "no program in this file",
                  hint="a .tile file holds one 'program NAME { ... }'")
        return None, bag
    if len(file.programs) > 1:
        bag.error(file.programs[1].name.span, "E209", "a .tile file holds exactly one program",
                  f"the first is '{file.programs[0].name.text}' at line {file.programs[0].span.line}")
        return None, bag
    return _Analyzer(file, prelude, bag).run(), bag


class _Analyzer:
    def __init__(self, file: n.File, prelude: n.File, bag: DiagnosticBag):
        self.file, self.bag = file, bag
        self.program = file.programs[0]
        self.scope = _Scope()
        self.kernels: dict[str, n.KernelDecl] = {}
        self.kernel_used: dict[str, bool] = {}
        self.misdeclared: set[str] = set()  # kernels whose parameters cannot be told apart: calls go unchecked
        self.calls: list[CallSummary] = []
        self.loops: list[n.For] = []
        self.trips: list = []  # per enclosing loop: its constant number of iterations, or None
        self.conditions = 0
        self.guards: list = []  # (condition, branch taken) of the enclosing ifs, outermost first
        self.values: dict[int, int] = {}  # id of a constant integer expression -> its value
        self.floats: dict[int, float] = {}  # id of a constant float expression -> its value
        self.module_definitions: Definitions | None = None
        self.converter = Converter(self._let_form, self._extent_symbol, self._name_symbol,
                                   lambda expr: self.values.get(id(expr)))
        self.flops_of: n.KernelDecl | None = None  # the kernel whose flop count is being checked
        self.float_lets: set = set()
        self.tiling = "uniform"  # the program's tiling kind, once read
        self.declarations: dict = {}  # name -> span of the program's parameters, matrices and workspaces
        self.used_early: set = set()  # names used before their declaration (E200 then, but used)
        self.redeclared: set = set()  # program-level names declared twice (E207): uses are not judged again
        self.in_requirement = False  # reading a `require`'s condition
        self.char_uses: list[CharUse] = []
        # lets and loop variables whose block has ended -> (symbol, the block): a use after it is told where
        self.ended: dict[str, tuple[_Symbol, str]] = {}
        self._declare_kernels(prelude.kernels + file.kernels)

    # ---------------------------------------------------------------- driver
    def run(self) -> Checked | None:
        program = self.program
        tiling = self.tiling = self._tiling(program.tiling)
        self.declarations = {d.name.text: d.name.span for d in (*program.params, *program.matrices, *program.workspaces)}
        self._declare_params(tiling, program.params)
        self.in_requirement = True  # read with the parameters: matrices are not declared yet
        for require in program.requires:
            self._bool_expr(require.condition)
        self.in_requirement = False
        self._declare_matrices(program.matrices, program.workspaces)
        for check in program.checks:
            self._check_decl(check)
        for extra in program.checks[1:]:
            self.bag.error(extra.span, "E207", "the program declares a second check",
                           f"the first is at line {program.checks[0].span.line}")
        module = self._kernel_module()
        self._block(program.body)
        self._check_char_params(program.params)
        self._check_qr_replay(program.checks[:1])
        self._check_kernel_functions()
        self._report_unused()
        if self.bag.has_errors:
            return None
        return Checked(program, self.file.path, tiling, self.tiling_defaults, dict(self.kernels),
                       tuple(self.calls), module, frozenset(self.float_lets), tuple(self.char_uses))

    # ---------------------------------------------------------------- declarations
    def _declare_kernels(self, decls):
        for decl in decls:
            name = decl.name.text
            if name in self.kernels:
                where = "the prelude" if self.kernels[name].prelude else f"line {self.kernels[name].span.line}"
                self.bag.error(decl.name.span, "E207", f"kernel '{name}' is already declared in {where}")
                continue
            if not self._check_kernel_params(decl):
                self.misdeclared.add(name)
            self.kernels[name] = decl
            self.kernel_used[name] = False

    def _check_kernel_params(self, decl: n.KernelDecl) -> bool:
        """Its parameters' declarations; False if two share a name, or a tile follows a value with a
        default (said as errors): its calls' arguments would be told by parameters that cannot be."""
        seen = set()
        usable = self._tiles_before_defaults(decl)
        for param in decl.params:
            if param.name.text in seen:
                self.bag.error(param.name.span, "E207",
                               f"kernel '{decl.name.text}' has two arguments named '{param.name.text}'")
                usable = False
            seen.add(param.name.text)
            if param.kind != "tile":
                self._check_value_param(param)
        if not any(p.mode in WRITE_MODES for p in decl.params):
            self.bag.error(decl.name.span, "E210", f"kernel '{decl.name.text}' writes nothing",
                           hint="declare at least one argument 'out' or 'inout': it is the task's main output")
        if decl.flops is not None:
            self._check_flops(decl)
        return usable

    def _tiles_before_defaults(self, decl: n.KernelDecl) -> bool:
        """No tile parameter after a value parameter with a default (else an E209, and False): tiles
        go by position only, so every call would pass that value to reach the tile, and its default
        could never be used."""
        params = decl.params
        defaulted = next((p for p in params if p.kind != "tile" and p.default is not None), None)
        tile = defaulted and next((p for p in params[params.index(defaulted) + 1:] if p.kind == "tile"), None)
        if tile is None:
            return True
        reordered = [p for p in params if p.kind == "tile"] + [p for p in params if p.kind != "tile"]
        value, kernel = defaulted.name.text, decl.name.text
        self.bag.error(tile.span, "E209", f"tile parameter '{tile.name.text}' of kernel '{kernel}' follows "
                                          f"'{value}', a value parameter with a default",
                       f"tiles are passed by position only: every call would give '{value}' to reach "
                       f"'{tile.name.text}', so its default could never be used",
                       hint=f"declare the tiles first (and the module's function in that order): "
                            f"kernel {kernel}({', '.join(map(_param_text, reordered))})")
        return False

    def _check_value_param(self, param: n.KernelParam):
        """A value parameter's allowed characters and default fit its type."""
        if param.choices is not None and (param.kind != "char" or not param.choices):
            self.bag.error(param.span, "E209", f"only a char parameter lists its allowed values, "
                                               f"as a non-empty string: char {param.name.text} in \"NT\"")
        if param.default is not None and constant_of(param.default, param.kind) is None:
            self.bag.error(param.default.span, "E205", f"the default of {param.kind} parameter "
                                                       f"'{param.name.text}' must be {_TYPE_NOUN[param.kind]} constant")
        elif param.default is not None and param.kind == "char":
            self._check_char(param.default, param)

    def _check_char(self, value: n.StrLit, param: n.KernelParam) -> None:
        if not self._one_character(value):
            return
        if param.choices and value.value not in param.choices:  # none listed: E209 said so
            self.bag.error(value.span, "E205", f"{param.name.text} is one of {', '.join(map(repr, param.choices))}, "
                                               f"got {value.value!r}")

    def _one_character(self, literal: n.StrLit) -> bool:
        """Whether a string literal standing for a char is one character (else an E205)."""
        if len(literal.value) == 1:
            return True
        self.bag.error(literal.span, "E205", f"a char value is one character, got {literal.value!r}")
        return False

    def _check_flops(self, decl: n.KernelDecl):
        """``flops EXPR``: a number from the shapes (``A.m``, ``A.n``) and values of the arguments."""
        self.scope.frames.append({p.name.text: _Symbol("argument" if p.kind == "tile" else "value", p.name.span, p,
                                                       used=True, type=p.kind if p.kind != "tile" else "tile")
                                  for p in decl.params})
        self.flops_of = decl
        form = self._number_form(decl.flops) if self._number_expr(decl.flops) else None
        self.flops_of = None
        self.scope.frames.pop()
        if form is not None and provably_negative(form):
            constant = not any(value for symbol, value in form.items() if symbol)
            self.bag.error(decl.flops.span, "E205", f"kernel {decl.name.text}'s flop count is "
                                                    + (f"{form['']:g}, below zero" if constant else "below zero"),
                           *(() if constant else (f"{unparse(decl.flops)} is below zero whatever the arguments "
                                                  f"(tiles of one row and column or more)",)),
                           hint="a flop count is 0 or more: the floating-point operations of one call")

    def _tiling(self, decl: n.TilingDecl | None) -> str:
        kind = decl.kind.text if decl else "uniform"
        if kind not in n.TILING_SETTINGS:
            self.bag.error(decl.kind.span, "E209", f"unknown tiling '{kind}'",
                           hint="use 'tiling uniform(nb = ...)' or 'tiling hybrid(B = ..., b = ..., s = ...)'")
            kind = "uniform"
        self.tiling_defaults = dict(TILING_DEFAULTS[kind])
        seen = {}
        valid = True
        for setting in decl.settings if decl else ():
            if setting.name.text in seen:
                self.bag.error(setting.name.span, "E207", f"'{setting.name.text}' is set twice",
                               f"first set at column {seen[setting.name.text]}")
            seen[setting.name.text] = setting.name.span.column
            valid = self._tiling_setting(kind, setting) and valid
        d = self.tiling_defaults
        # (with a setting refused, d holds a default the user did not write: the relation would be about it)
        if valid and kind == "hybrid" and (d["s"] - 1) * d["b"] >= d["B"]:
            self.bag.error(decl.span, "E209", f"hybrid tiling needs (s - 1)·b < B, got s={d['s']}, b={d['b']}, B={d['B']}",
                           hint="the last slice of every block would be empty")
        return kind

    def _tiling_setting(self, kind: str, setting: n.Setting) -> bool:
        """Take one tiling setting; False (said as an error) for one the tiling does not have or takes
        no such value for."""
        name = setting.name.text
        if name not in n.TILING_SETTINGS[kind]:
            allowed = ", ".join(n.TILING_SETTINGS[kind])
            self.bag.error(setting.name.span, "E209", f"'{name}' is not a setting of {kind} tiling",
                           hint=f"{kind} tiling takes {allowed}")
            return False
        value = _constant(setting.value)
        if value is None or value < 1:
            self.bag.error(setting.value.span, "E209", f"{name} must be a positive integer constant")
            return False
        self.tiling_defaults[name] = value
        return True

    def _declare_params(self, tiling: str, params):
        for name in ("n",) + n.TILING_SETTINGS[tiling]:
            self.scope.frames[0][name] = _Symbol("param", None, used=False)
        for decl in params:
            if isinstance(decl.default, n.StrLit):  # a char parameter: a kernel option chosen at run time
                kind = "char"
                self._one_character(decl.default)
            else:
                kind = self._number_expr(decl.default)
            self._declare(decl.name, _Symbol("param", decl.name.span, decl, type=kind or "int"))

    def _declare_matrices(self, matrices, workspaces):
        for decl in matrices:
            before = len(self.bag.items)
            for dimension in (decl.rows, decl.cols):
                self._size_expr(dimension, f"dimension of matrix '{decl.name.text}'")
            self._check_init(decl.init)
            if len(self.bag.items) == before:
                self._check_square(decl)
            self._declare(decl.name, _Symbol("matrix", decl.name.span, decl))
        for decl in workspaces:
            like = self._matrix(decl.like)
            if like is not None and like.kind != "matrix":
                self.bag.error(decl.like.span, "E209",
                               f"workspace '{decl.name.text}' must be like a matrix, not a workspace")
            self._size_expr(decl.rows, f"tile height of workspace '{decl.name.text}'")
            self._declare(decl.name, _Symbol("workspace", decl.name.span, decl))

    def _size_expr(self, expr, what: str):
        """A size: an integer expression of parameters only (no geometry queries), at least 1
        where it is a constant."""
        if self._int_expr(expr) and any(isinstance(node, (n.Attr, n.Method)) for node in expression_nodes(expr)):
            self.bag.error(expr.span, "E209", f"the {what} may use parameters only",
                           hint="geometry queries such as A.mt exist only once matrices are tiled")
        value = self.values.get(id(expr))
        if value is not None and value < 1:
            self.bag.error(expr.span, "E209", f"the {what} must be at least 1, got {value}")

    def _check_init(self, init: n.Init):
        if init.kind == "random" and init.what.text not in n.RANDOM_KINDS:
            self.bag.error(init.what.span, "E209", f"unknown random matrix kind '{init.what.text}'",
                           hint=f"use one of {', '.join(n.RANDOM_KINDS)}")
        if init.kind == "named" and init.what.text not in NAMED_INITS:
            self.bag.error(init.what.span, "E209", f"unknown matrix initialiser '{init.what.text}'",
                           hint=f"use 'random {'|'.join(n.RANDOM_KINDS)}', {', '.join(NAMED_INITS)} or load \"file.npy\"")

    def _check_square(self, decl: n.MatrixDecl):
        """``random spd`` of a matrix whose rows and columns differ whatever the sizes."""
        init = decl.init
        if init.kind != "random" or init.what.text not in SQUARE_KINDS or not self._never_square(decl):
            return  # square, or only the run can tell: it refuses a matrix that is not
        self.bag.error(init.span, "E209",
                       f"random {init.what.text} needs a square matrix, but '{decl.name.text}' is "
                       f"{unparse(decl.rows)} × {unparse(decl.cols)}",
                       "its numbers of rows and columns differ whatever the sizes",
                       hint="use 'random general' or 'random diagdom' for a matrix that is not square")

    def _never_square(self, decl: n.MatrixDecl) -> bool:
        """Whether the matrix's rows and columns differ whatever the sizes."""
        rows, cols = self.converter.form(decl.rows), self.converter.form(decl.cols)
        return rows is not None and cols is not None and provably_nonzero(difference(rows, cols))

    def _check_decl(self, check: n.CheckDecl):
        """A built-in check (its arity, qualifiers and options), or a function of the kernel module."""
        kind = check.kind.text
        symbols = [self._matrix(arg.name) for arg in check.args]
        for arg in check.args:
            said = {}
            for word in arg.qualifiers:
                if word.text not in CHECK_QUALIFIERS:
                    self.bag.error(word.span, "E209", f"unknown qualifier '{word.text}' of {arg.name.text}",
                                   *_suggest(word.text, CHECK_QUALIFIERS),
                                   hint=f"qualifiers: {', '.join(CHECK_QUALIFIERS)}")
                elif word.text in said:  # `transposed transposed B` would read as one transpose, not as B
                    self.bag.error(word.span, "E209", f"qualifier '{word.text}' of {arg.name.text} is given twice",
                                   f"first given at column {said[word.text]}", hint="give each qualifier once")
                said.setdefault(word.text, word.span.column)
        if kind not in CHECK_ARITY:
            if not self.file.uses:  # no module to hold a check of that name: a misspelt built-in one, said once
                self.bag.error(check.kind.span, "E209", f"unknown check '{kind}'", *_suggest(kind, CHECK_ARITY),
                               hint=f"use one of {', '.join(CHECK_ARITY)}, or a function of the program's kernel "
                                    f"module (use \"kernels.py\")")
                return
            self._user_check_words(check)
            return  # a user check: the module is read with the kernels
        arity = CHECK_ARITY[kind]
        if len(check.args) not in arity:
            counts = " or ".join(map(str, arity))
            self.bag.error(check.span, "E202", f"check {kind} takes {counts} argument(s), got {len(check.args)}",
                           hint="write it " + " or ".join(f"{kind}({form})" for form in CHECK_FORMS[kind]))
        else:
            signature = next(s for s in CHECK_ARGUMENTS[kind] if len(s) == len(check.args))
            for arg, accepts in zip(check.args, signature):
                self._check_qualifiers(kind, arg, accepts)
        wanted = {"qr": ("matrix", "workspace"), "lu": ("matrix", "workspace")}.get(kind, ("matrix",) * 3)
        for arg, symbol, kind_wanted in zip(check.args, symbols, wanted):
            if symbol is not None and symbol.kind != kind_wanted:
                self.bag.error(arg.name.span, "E209", f"check {kind} needs a {kind_wanted} here, "
                                                      f"'{arg.name.text}' is a {symbol.kind}")
        if kind == "cholesky" and symbols and symbols[0] is not None and symbols[0].kind == "matrix" \
                and self._never_square(symbols[0].node):
            decl = symbols[0].node
            self.bag.error(check.args[0].name.span, "E209",
                           f"check cholesky needs a square matrix, but '{decl.name.text}' is "
                           f"{unparse(decl.rows)} × {unparse(decl.cols)}",
                           "its numbers of rows and columns differ whatever the sizes")
        given = {}
        for option in check.options:
            if option.name.text not in CHECK_OPTIONS.get(kind, ()):
                allowed = CHECK_OPTIONS.get(kind, ())
                self.bag.error(option.name.span, "E202", f"check {kind} has no option '{option.name.text}'",
                               hint=f"its options: {', '.join(allowed)}" if allowed else None)
            elif option.name.text in given:  # the run would take the last one
                self.bag.error(option.name.span, "E202", f"option '{option.name.text}' of check {kind} is given "
                                                         f"twice", f"first given at column {given[option.name.text]}")
            else:
                self._check_option_value(option)
            given.setdefault(option.name.text, option.name.span.column)

    def _check_option_value(self, option) -> None:
        """A check option's value: a number, from constants and the program's parameters only (the
        check runs after the loop nest, with the run's parameters)."""
        value = option.value
        if constant_of(value, "float") is not None:
            return
        other = next((e for e in expression_nodes(value) if isinstance(e, (n.Attr, n.Method)) or isinstance(e, n.Name)
                      and getattr(self.scope.lookup(e.ident.text), "kind", "param") != "param"), None)
        if other is not None:
            self.bag.error(other.span, "E205", f"option {option.name.text} must be a number made of constants "
                                               f"and the program's parameters, found '{unparse(other)}'")
        else:
            self._number_expr(value)

    def _check_char_params(self, params) -> None:
        """A char parameter can pass the run's checks: some character is among those of every kernel
        parameter it is passed to, and its default is one of them (E205 otherwise)."""
        for decl in params:
            first: dict = {}  # the first use of the parameter for each kernel parameter with choices
            for use in self.char_uses:
                if use.name == decl.name.text and use.choices:
                    first.setdefault((use.where, use.choices), use)
            default = decl.default.value if isinstance(decl.default, n.StrLit) else None
            if not first or default is None or len(default) != 1:
                continue
            common = set.intersection(*(set(use.choices) for use in first.values()))
            if not common:
                self.bag.error(decl.name.span, "E205", f"char parameter '{decl.name.text}' can take no value that "
                                                       f"every use of it accepts",
                               *map(_char_use_note, first.values()),
                               hint="give each kernel option a char parameter of its own")
            elif default not in common:
                self.bag.error(decl.default.span, "E205", f"the default of char parameter '{decl.name.text}', "
                                                          f"{default!r}, is not a value every use of it accepts",
                               *(_char_use_note(use) for use in first.values() if default not in use.choices),
                               hint=f"default to one of {', '.join(map(repr, sorted(common)))}")

    def _check_qr_replay(self, checks) -> None:
        """``check qr`` rebuilds Q from the reflectors of the prelude's QR kernels: a program that
        calls none of them would have nothing replayed (Q = I), and its check would be meaningless."""
        for check in checks:
            if check.kind.text == "qr" and len(check.args) in CHECK_ARITY["qr"] \
                    and not any(self.kernel_used.get(name) for name in QR_REPLAYED):
                self.bag.error(check.kind.span, "E209", "check qr replays the reflectors of geqrt, tpqrt and ttqrt, "
                                                        "which this program does not call",
                               hint="check a QR made of your own kernels with a check of your own: "
                                    "check NAME(A, ...) with NAME a function of the kernel module")

    def _check_qualifiers(self, kind: str, arg, accepts: str) -> None:
        """The qualifiers of one argument of built-in check ``kind`` (``accepts``: see
        :data:`CHECK_ARGUMENTS`) are ones it takes, and mean something together."""
        words = [w for w in arg.qualifiers if w.text in CHECK_QUALIFIERS]
        given = {w.text for w in words}
        if not words:
            return
        if accepts == "-":
            self.bag.error(words[0].span, "E209", f"check {kind} takes {arg.name.text} as it is, "
                                                  f"without the qualifier '{words[0].text}'")
        elif accepts == "r" and (len(given) > 1 or given & {"unit", "transposed"}):
            self.bag.error(words[0].span, "E209", f"the result {arg.name.text} of check {kind} takes one of "
                                                  f"lower, upper or symmetric, not '{' '.join(w.text for w in words)}'")
        elif accepts == "o" and not _operand_words(given):
            alone = len(words) == 1
            self.bag.error(words[0].span, "E209", f"the qualifier{'' if alone else 's'} "
                                                  f"'{' '.join(w.text for w in words)}' of {arg.name.text} "
                                                  f"{'means nothing alone' if alone else 'mean nothing together'}",
                           hint="one of lower or upper, with unit if its diagonal is 1; or symmetric, with "
                                "upper if the matrix stores its upper triangle; transposed with either")

    def _user_check_words(self, check: n.CheckDecl):
        """A user check receives the named matrices as they are: qualifiers and options would be
        silently without effect, so they are errors."""
        for arg in check.args:
            for word in arg.qualifiers:
                self.bag.error(word.span, "E209", f"qualifier '{word.text}' of {arg.name.text} has no effect on "
                                                  f"user check '{check.kind.text}'",
                               "a user check receives the whole matrices, before and after the run",
                               hint=f"drop it, and take what the check needs from before[\"{arg.name.text}\"] and "
                                    f"after[\"{arg.name.text}\"] in {check.kind.text}")
        for option in check.options:
            self.bag.error(option.name.span, "E202", f"user check '{check.kind.text}' takes no options",
                           hint=f"give {option.name.text} its value in the check function")

    def _kernel_module(self) -> str | None:
        uses = self.file.uses
        for extra in uses[1:]:
            self.bag.error(extra.span, "E209", "a program names at most one kernel module")
        if not uses:
            return None
        use = uses[0]
        path = Path(self.file.path).parent / use.path
        if path.suffix != ".py":
            self.bag.error(use.span, "E209", f"kernel module {use.path!r} is not a Python file",
                           hint="name the .py file that defines the program's kernels")
        elif path.is_dir():
            self.bag.error(use.span, "E209", f"kernel module {use.path!r} is a directory",
                           hint="name the .py file that defines the program's kernels")
        elif not path.is_file():
            beside = {f.stem: f.name for f in path.parent.glob("*.py")} if path.parent.is_dir() else {}
            close = beside.get(did_you_mean(path.stem, beside))  # the names apart from '.py', which all share
            self.bag.error(use.span, "E209", f"kernel module {use.path!r} not found", f"looked for {path}",
                           hint=f"did you mean {str(Path(use.path).with_name(close))!r}?" if close else None)
        else:
            self.module_definitions = self._read_module(use, path)
        return use.path

    def _read_module(self, use: n.Use, path: Path) -> Definitions | None:
        """The kernel module's definitions, if it compiles (read and compiled, never run)."""
        try:
            tree = ast.parse(path.read_bytes(), str(path))
            compile(tree, str(path), "exec", dont_inherit=True)  # what parsing alone lets through
        except SyntaxError as error:
            self.bag.error(use.span, "E209", f"kernel module {use.path!r} is not valid Python",
                           f"{use.path}:{error.lineno}: SyntaxError: {error.msg}")
        except (OSError, ValueError) as error:  # unreadable, or NUL bytes
            self.bag.error(use.span, "E209", f"kernel module {use.path!r} cannot be read: {error}")
        else:
            return read_definitions(tree)
        return None

    def _check_kernel_functions(self):
        """Every user kernel the program calls is a function of the module taking its arguments;
        so is a check the module defines (it takes the matrices before and after the run)."""
        if self.module_definitions is None:
            return
        for name, decl in self.kernels.items():
            if not decl.prelude and self.kernel_used[name]:
                params = [p.name.text for p in decl.params]
                declared = f"declared as {name}({', '.join(_param_text(p) for p in decl.params)})"
                advice = "give the function one positional parameter per argument, in declaration order"
                self._check_function(name, decl.name.span, params, f"kernel '{name}'", declared, advice)
                body = gpu_body(self.module_definitions, name)
                if not body.absent and not body.unknown:  # a GPU body is optional; one that is there must fit
                    self._check_function(body.name, decl.name.span, params, f"kernel '{name}' (its GPU body)",
                                         declared, advice, not_suggested=name)
        for check in self.program.checks[:1]:
            if check.kind.text not in CHECK_ARITY:
                self._check_function(check.kind.text, check.kind.span, ["before", "after"],
                                     f"check '{check.kind.text}'", "a check function takes the dicts of the "
                                     "matrices before and after the run, name -> numpy array (and, as a third "
                                     "argument, the dict of the run's parameters)",
                                     "define it as def NAME(before, after): and return the residual",
                                     optional=1)

    def _check_function(self, name: str, span: Span, params: list, what: str, declared: str, advice: str,
                        not_suggested: str | None = None, optional: int = 0):
        """``name`` is a function of the kernel module that can take ``len(params)`` positional arguments,
        or up to ``optional`` more (a missing one is not told to be ``not_suggested``: a GPU body is not
        its CPU body)."""
        module, bindings = self.file.uses[0].path, self.module_definitions.of(name)
        if UNKNOWN in bindings or (not bindings and self.module_definitions.open):
            return  # only running the module could tell
        functions = [b for b in bindings if isinstance(b, Function)]
        if not functions:
            others = [f"{module}:{b.line} defines {b.what}" for b in bindings]
            # a name bound to something else is the mistake to mend: no other function to suggest
            close = () if others else _suggest(name, set(self.module_definitions.functions()) - {not_suggested})
            self.bag.error(span, "E212", f"kernel module {module!r} defines no function '{name}'", *others, *close,
                           hint=f"define it in {module}: def {name}({', '.join(params)}):")
        elif not any(f.accepts(count) for f in functions for count in range(len(params), len(params) + optional + 1)):
            counts = f"{len(params)}" + "".join(f" or {len(params) + extra}" for extra in range(1, optional + 1))
            self.bag.error(span, "E213",
                           f"function '{name}' of {module!r} cannot take the {counts} argument(s) of {what}",
                           *(_function_note(module, f) for f in functions), declared, hint=advice)

    def _declare(self, ident: n.Ident, symbol: _Symbol):
        """Bind ``ident``; a second binding of a visible name is an error and is dropped."""
        if ident.text in OPERATOR_WORDS:
            self.bag.error(ident.span, "E207", f"'{ident.text}' is an operator of conditions, and cannot name a "
                                               f"{symbol.kind}", hint="choose another name")
            return
        previous = self.scope.lookup(ident.text)
        if previous is None:
            self.scope.frames[-1][ident.text] = symbol
            symbol.used = symbol.used or ident.text in self.used_early
            return
        where = (f"at line {previous.span.line}" if previous.span
                 else "built in: the matrix order" if ident.text == "n" else "by the tiling")
        if previous.kind in ("loop", "let"):
            message = f"'{ident.text}' shadows the {previous.kind} declared {where}"
        else:
            message = f"'{ident.text}' is already declared ({previous.kind}, {where})"
        self.bag.error(ident.span, "E207", message, hint="choose another name")
        if previous.kind not in ("loop", "let") and previous.span:
            # which declaration a use meant is not known: E207 is the one mistake, not every use
            self.redeclared.add(ident.text)
            previous.used = True
        if not previous.span and symbol.kind in ("matrix", "workspace"):
            # a matrix named like a built-in (a tiling setting): its later uses mean the matrix
            self.scope.frames[-1][ident.text] = symbol

    def _report_unused(self):
        read_by_check = self._check_reads_params()
        for name, symbol in self.scope.frames[0].items():
            if not symbol.used and symbol.span is not None and not (symbol.kind == "param" and read_by_check):
                self.bag.warning(symbol.span, "W300", f"{symbol.kind} '{name}' is declared but never used")
        for name, used in self.kernel_used.items():
            decl = self.kernels[name]
            if not used and not decl.prelude:
                self.bag.warning(decl.name.span, "W300", f"kernel '{name}' is declared but never called")

    def _check_reads_params(self) -> bool:
        """Whether the program's user check function may take the run's parameters (a third
        argument): then a param the loop nest does not use may still be the check's."""
        checks = [check for check in self.program.checks[:1] if check.kind.text not in CHECK_ARITY]
        if not checks or self.module_definitions is None:
            return False
        bindings = self.module_definitions.of(checks[0].kind.text)
        return any(not isinstance(b, Function) or b.accepts(3) for b in bindings)

    # ---------------------------------------------------------------- statements
    def _block(self, stmts, inside: str | None = None):
        """Check a block's statements; ``inside`` names the block ("the 'if' block at line 3") for
        the note of a let used after it."""
        self.scope.frames.append({})
        for stmt in stmts:
            getattr(self, "_" + type(stmt).__name__.lower())(stmt)
        for name, symbol in self.scope.frames.pop().items():
            if symbol.kind == "let" and not symbol.used:
                self.bag.warning(symbol.span, "W300", f"let '{name}' is declared but never used")
            if inside is not None:
                self.ended[name] = (symbol, inside)

    def _for(self, stmt: n.For):
        for bound in (stmt.start, stmt.stop):
            if self._int_expr(bound) and not self._affine(bound):
                self.bag.error(bound.span, "E206", "loop bound is not affine in the loop variables",
                               *self._let_notes(bound, lambda let: not let.affine, "not affine in the loop variables"),
                               "bounds may add, subtract, take min/max and multiply by loop-invariant values",
                               hint="'//', '%', '**', products of loop variables and geometry queries on them "
                                    "belong in tile indices, steps or 'if' conditions")
        step = self._step(stmt)
        trips = self._check_trip_count(stmt, step)
        if len(self.loops) == MAX_LOOP_NESTING:
            self.bag.error(_keyword(stmt), "E101", f"loops nested more than {MAX_LOOP_NESTING} deep",
                           f"the generated driver is Python, which nests at most {MAX_LOOP_NESTING} loops",
                           hint="merge loops, or compute indices from fewer loop variables")
        self.scope.frames.append({})
        self._declare(stmt.var, _Symbol("loop", stmt.var.span, stmt, used=True))
        self.loops.append(_visited_range(stmt, step))
        self.trips.append(trips)
        loop = f"the 'for' loop at line {stmt.span.line}"
        self._block(stmt.body, f"the block of {loop}")
        self.trips.pop()
        self.loops.pop()
        for name, symbol in self.scope.frames.pop().items():
            self.ended[name] = (symbol, loop)

    def _step(self, stmt: n.For) -> int | None:
        """The loop's step when it is a constant (1 when none is written); None for a step the run
        computes (``step 2 ** l``: nothing is proved about the loop, and a zero stops the run), or
        after an error: the step is a nonzero integer."""
        if stmt.step is None:
            return 1
        kind = self._number_expr(stmt.step)
        value = self.values.get(id(stmt.step))
        form = self.converter.form(stmt.step) if value is None and kind == "int" else None
        if form is not None and is_zero(form):  # 'n - n': 0 whatever the sizes
            value = 0
        if kind == "float" or value == 0:
            why = "a loop that would never end" if value == 0 else "which is not an integer"
            self.bag.error(stmt.step.span, "E206", "a loop's step is a nonzero integer",
                           f"found {unparse(stmt.step)}, {why}", *self._float_let_notes(stmt.step),
                           hint="use '//' for integer division" if self._divides(stmt.step) else None)
        return value or None

    def _check_trip_count(self, stmt: n.For, step: int | None) -> int | None:
        """Warn of a loop that never runs, or runs (with the constant loops around it) more times
        than a run walks (issue 16.3); its constant number of iterations, or None."""
        if step is None:
            return None
        start, stop = self.values.get(id(stmt.start)), self.values.get(id(stmt.stop))
        header = _keyword(stmt)
        trips = len(range(start, stop, step)) if start is not None and stop is not None else None
        nested = math.prod(self.trips) * trips if trips is not None and None not in self.trips else None
        if nested is not None and nested > MAX_ITERATIONS:
            around = f" ({nested:.3g} times with the loops around it)" if nested != trips else ""
            self.bag.warning(header, "W301", f"this loop runs {trips} times{around}",
                             f"a run walks at most {MAX_ITERATIONS} loop iterations and refuses more")
            return trips
        # the loop's low end (the start counting up, the stop counting down) never below its high end
        low, high = (stmt.start, stmt.stop) if step > 0 else (stmt.stop, stmt.start)
        anywhere = never_runs(low, high, self.converter)
        if anywhere or never_runs_within(low, high, self.loops, self.converter):
            relation = "below" if step > 0 else "above"
            self.bag.warning(header, "W302", "this loop never runs",
                             f"its start, {unparse(stmt.start)}, is never {relation} its stop, {unparse(stmt.stop)}"
                             + (f" (step {step})" if stmt.step is not None else "")
                             + ("" if anywhere else ", whatever the values of the loops around it"))
        return trips

    def _if(self, stmt: n.If):
        self._bool_expr(stmt.cond)
        self.conditions += 1
        names = (f"the 'if' block at line {stmt.span.line}", f"the 'else' block of the 'if' at line {stmt.span.line}")
        for taken, block, name in ((True, stmt.then, names[0]), (False, stmt.orelse, names[1])):
            self.guards.append((stmt.cond, taken))
            self._block(block, name)
            self.guards.pop()
        self.conditions -= 1

    def _let(self, stmt: n.Let):
        kind = self._number_expr(stmt.value)
        ok = kind == "int"
        # facts about the value are taken now, from those of earlier lets: never re-expanded
        symbol = _Symbol("let", stmt.name.span, stmt, loops=self._loops(stmt.value), type=kind or "int")
        if kind == "float":
            self.float_lets.add(stmt.span)
        symbol.affine = not ok or self._affine(stmt.value)
        symbol.form = self.converter.form(stmt.value) if ok else None
        symbol.value = self._folded(stmt.value)
        self._declare(stmt.name, symbol)

    def _release(self, stmt: n.Release):
        said = len(self.bag.items)
        self._tile(stmt.tile)
        if len(self.bag.items) == said:  # a tile the program can name: is it in its matrix?
            self._check_ranges((stmt.tile,))
        if stmt.tile.rows is not None or stmt.tile.cols is not None:
            self.bag.error(stmt.tile.span, "E205", "release takes a tile or a panel, not a part of a tile",
                           hint=f"release the whole tile: release {stmt.tile.matrix.text}[{unparse(stmt.tile.row)}, "
                                f"{unparse(stmt.tile.col)}]")

    def _call(self, stmt: n.Call):
        name = stmt.kernel.text
        for arg in (*stmt.args, *(keyword.value for keyword in stmt.keywords)):
            if isinstance(arg, n.TileRef):
                self._tile(arg)
            elif self._matrix_named(arg) is None:  # a matrix's name is judged against its parameter
                self._type(arg)
        if stmt.priority is not None:
            self._int_expr(stmt.priority)
        decl = self.kernels.get(name)
        if decl is None:
            self.bag.error(stmt.kernel.span, "E201", f"unknown kernel '{name}'",
                           *_suggest(name, self.kernels),
                           hint="declare it with 'kernel NAME(in A, inout B)' and name its module with 'use \"kernels.py\"'")
            return
        self.kernel_used[name] = True
        if name in self.misdeclared:
            return  # its declaration's error says it all: the arguments would be judged by the wrong parameters
        if not decl.prelude and not self.file.uses:
            self.bag.error(stmt.kernel.span, "E209", f"kernel '{name}' has no body",
                           hint="name the Python module that defines it: use \"my_kernels.py\"")
        bound, fits = self._bind_arguments(stmt, decl)
        if bound is None:
            return
        accesses = tuple(Access(arg, _moved_mode(param.mode, arg), self._tile_depends(arg))
                         for param, arg in bound if param.kind == "tile" and isinstance(arg, n.TileRef))
        values = tuple((param.name.text, arg) for param, arg in bound if param.kind != "tile")
        self._check_written(name, accesses)
        self._check_ranges(access.tile for access in accesses)
        main = next((i for i, a in enumerate(accesses) if a.mode in WRITE_MODES), None)
        if main is None or not fits:
            return  # a kernel that writes nothing: E210 at its declaration
        order = "".join("t" if p.kind == "tile" else "v" for p in decl.params)
        self.calls.append(CallSummary(stmt, decl, accesses, main, self.conditions > 0, values,
                                      order if values else ""))

    def _bind_arguments(self, stmt: n.Call, decl: n.KernelDecl):
        """Pair every parameter of ``decl`` with its argument (positional, then by name, then its
        default): ``([(param, argument)], whether every argument fits its parameter)``, or
        ``(None, False)`` after reporting why the arguments cannot be paired."""
        name, params = stmt.kernel.text, decl.params
        signature = f"declared as {name}({', '.join(_param_text(p) for p in params)})"
        required = sum(p.default is None for p in params)
        takes = f"{name} takes {required if required == len(params) else f'{required} to {len(params)}'} argument(s)"
        if stmt.keywords:
            first = stmt.keywords[0].span
            after = [arg for arg in stmt.args if (arg.span.line, arg.span.column) > (first.line, first.column)]
            if after:
                self.bag.error(after[0].span, "E202", f"a positional argument of {name} after a keyword argument",
                               signature, hint="give the arguments by position first, then by name")
                return None, False
        if len(stmt.args) > len(params):  # at the first argument too many (a call may span lines)
            self.bag.error(stmt.args[len(params)].span, "E202", f"{takes}, got {len(stmt.args) + len(stmt.keywords)}",
                           signature)
            return None, False
        given = dict(zip((p.name.text for p in params), stmt.args))
        by_name = {p.name.text: p for p in params}
        for keyword in stmt.keywords:
            param = by_name.get(keyword.name.text)
            word = keyword.name.text
            if param is None:
                self.bag.error(keyword.name.span, "E202", f"{name} has no parameter '{word}'",
                               *_suggest(word, [p.name.text for p in params if p.kind != "tile"]), signature)
            elif param.kind == "tile":
                self.bag.error(keyword.name.span, "E202", f"tile argument '{word}' of {name} must be passed by position",
                               signature)
            elif word in given:
                self.bag.error(keyword.name.span, "E202", f"argument '{word}' of {name} is given twice", signature)
            if param is None or param.kind == "tile" or word in given:
                return None, False
            given[keyword.name.text] = keyword.value
        bound, ok = [], True
        for index, param in enumerate(params):
            arg = given.get(param.name.text, param.default)
            if arg is None:
                got = len(stmt.args) + len(stmt.keywords)
                missing = f"argument {index + 1}, '{param.name.text}', is missing"
                if got >= required:  # enough of them, one an optional one given by name: "takes 2 to 3, got 2" misleads
                    self.bag.error(stmt.span, "E202", f"{missing} from the call of {name}", signature,
                                   hint=_how_to_give(param))
                else:  # which one was left out cannot be told: how the ones given are taken can
                    self.bag.error(stmt.span, "E202", f"{takes}, got {got}", signature,
                                   _taken_as(params, len(stmt.args), given))
                return None, False
            ok &= arg is param.default or self._fits(param, arg, name, index)  # defaults: checked once
            bound.append((param, arg))
        return bound, ok

    def _fits(self, param: n.KernelParam, arg, kernel: str, index: int) -> bool:
        """Whether ``arg`` can be the argument of ``param`` (a tile for a tile, a number or a char)."""
        where = f"argument {index + 1} of {kernel} ('{param.name.text}')"
        if param.kind == "tile":
            if not isinstance(arg, n.TileRef):
                matrix = self._matrix_named(arg) or "A"
                self.bag.error(arg.span, "E205", f"{where} is a tile: pass {matrix}[i, j] or a range "
                                                 f"{matrix}[i0 : i1, j]")
                return False
            return True
        if isinstance(arg, n.TileRef):
            self.bag.error(arg.span, "E205", f"{where} is {_TYPE_NOUN[param.kind]} value, not a tile")
            return False
        if param.kind == "char" and isinstance(arg, n.Name) and len(arg.ident.text) == 1 \
                and self.scope.lookup(arg.ident.text) is None:  # L for "L"
            self.bag.error(arg.span, "E200", f"unknown name '{arg.ident.text}'",
                           hint=f'{where} is a char: write "{arg.ident.text}", in double quotes')
            return False
        got = self._type(arg)
        if got is None:
            return False
        if param.kind == "char":
            if isinstance(arg, n.Name) and got == "char":  # a char parameter: its value is checked at run time
                self.char_uses.append(CharUse(arg.ident.text, param.choices, f"{kernel}'s {param.name.text}", arg.span))
                return True
            if not isinstance(arg, n.StrLit):
                self.bag.error(arg.span, "E205", f"{where} is a char: pass a one-character string such as "
                                                 f"\"N\", or a char parameter")
                return False
            before = len(self.bag.items)
            self._check_char(arg, param)
            return len(self.bag.items) == before
        if got == param.kind or (param.kind == "float" and got == "int"):
            return True
        self.bag.error(arg.span, "E205", f"{where} is {_TYPE_NOUN[param.kind]}, found {_TYPE_NOUN[got]}",
                       *self._float_let_notes(arg),
                       hint="use '//' for integer division" if self._divides(arg) else None)
        return False

    def _matrix_named(self, arg) -> str | None:
        """The name of the matrix or workspace that ``arg`` is the bare name of (now used), else None."""
        symbol = self.scope.lookup(arg.ident.text) if isinstance(arg, n.Name) else None
        if symbol is None or symbol.kind not in ("matrix", "workspace"):
            return None
        symbol.used = True
        return arg.ident.text

    def _check_written(self, kernel: str, accesses):
        for index, access in enumerate(accesses):
            symbol = self.scope.lookup(access.matrix)
            if access.mode in WRITE_MODES and symbol and symbol.kind == "matrix" and symbol.node.mode == "in":
                self.bag.error(access.tile.span, "E203",
                               f"matrix '{access.matrix}' is declared 'in' and cannot be written",
                               f"argument {index + 1} of {kernel} is '{access.mode}'")
        for i, first in enumerate(accesses):
            if any(earlier.matrix == first.matrix and _same_tile(earlier.tile, first.tile) for earlier in accesses[:i]):
                continue  # an argument written as an earlier one: its pairs are that one's, said once
            for j in range(i + 1, len(accesses)):
                second = accesses[j]
                written = first.mode in WRITE_MODES or second.mode in WRITE_MODES
                if not written or first.matrix != second.matrix:
                    continue
                arguments = f"arguments {i + 1} ({first.mode}) and {j + 1} ({second.mode})"
                same = "" if _same_tile(first.tile, second.tile) else coincidence_witness(
                    first.tile, second.tile, self.loops, self.converter, guarded=self.conditions > 0)
                if same == "":
                    parts = any(t.rows is not None or t.cols is not None for t in (first.tile, second.tile))
                    self.bag.error(second.tile.span, "E204",
                                   f"tile {_tile_text(second.tile)} is passed twice to {kernel} and one of them is written",
                                   arguments, hint="sub-ranges of one tile count as that tile, disjoint or not: "
                                                   "give a kernel of your own the tile once, with the rows as values"
                                   if parts else None)
                elif same is not None and (_is_panel(first.tile) or _is_panel(second.tile)):
                    self.bag.error(second.tile.span, "E204",
                                   f"{_tile_text(first.tile)} and {_tile_text(second.tile)} can share a tile, "
                                   f"passed to {kernel} where one of them is written",
                                   arguments, f"they share a tile {same}",
                                   hint="change a range or a loop bound, or guard the call with 'if', "
                                        "so that they never meet")
                elif same is not None:
                    self.bag.error(second.tile.span, "E204",
                                   f"tiles {_tile_text(first.tile)} and {_tile_text(second.tile)} can be the same tile, "
                                   f"passed twice to {kernel} where one of them is written",
                                   arguments, f"they are the same tile {same}",
                                   hint="change a loop bound, or guard the call with 'if', so that they never coincide")

    def _check_ranges(self, tiles):
        """E208 for each tile (or panel) whose index leaves its matrix at some iteration."""
        for given in tiles:
            panels = [index for index in (given.row, given.col) if isinstance(index, n.Range)]
            empty = next((witness for panel in panels if (witness := empty_panel_witness(
                panel, self.loops, self.converter, self.guards))), None)
            if empty:
                self.bag.error(given.span, "E208", f"empty panel {_tile_text(given)}", empty)
                continue
            for tile in _range_ends(given):
                witness = out_of_range_witness(tile, self.loops, self.converter, self.guards)
                if witness:
                    self.bag.error(given.span, "E208", f"tile index out of range in {_tile_text(given)}", witness)
                    break

    # ---------------------------------------------------------------- tiles & expressions
    def _tile(self, tile: n.TileRef):
        self._matrix(tile.matrix)
        for index in (tile.row, tile.col):
            for end in (index.start, index.stop) if isinstance(index, n.Range) else (index,):
                self._int_expr(end)
        ranges = [index for index in (tile.row, tile.col) if isinstance(index, n.Range)]
        if len(ranges) == 2:
            self.bag.error(ranges[1].span, "E209", "a panel is a range of tiles along one index",
                           hint="pass a column of tiles A[i0 : i1, j] or a row A[i, j0 : j1]")
        if ranges and (tile.rows is not None or tile.cols is not None):
            self.bag.error(tile.span, "E209", "a panel of tiles takes no sub-range",
                           hint="pass whole tiles, or a tile A[i, j][r0 : r1] one at a time")
        for part, what in ((tile.rows, "rows"), (tile.cols, "columns")):
            for end in (part.start, part.stop) if part else ():
                if end is not None:
                    self._int_expr(end)
            if part:
                self._check_constant_part(part, what)
                self._check_part_within_tiles(tile, part, what)

    def _check_constant_part(self, part, what: str) -> None:
        """E208 for a sub-range whose ends leave every tile: a negative literal end, or ends reversed
        whatever the sizes, parameters and loop variables (``[z + 2 : z + 1]``: stop − start < 0)."""
        for end in (part.start, part.stop):
            value = None if end is None else constant_of(end, "int")
            if value is not None and value < 0:
                self.bag.error(end.span, "E208", f"a sub-range's {what} count from 0, got {value}")
                return
        if part.start is None or part.stop is None:
            return
        start, stop = self.converter.form(part.start), self.converter.form(part.stop)
        if start is None or stop is None or not provably_negative(difference(stop, start)):
            return
        literal = all(isinstance(end, n.IntLit) for end in (part.start, part.stop))
        start, stop = unparse(part.start), unparse(part.stop)
        self.bag.error(part.span, "E208", f"the sub-range's {what} {start} : {stop} are reversed",
                       *(() if literal else (f"its start, {start}, is above its stop, {stop}, whatever the values "
                                             f"of the names in them",)),
                       hint=f"a sub-range goes from its first {what[:-1]} to one past its last")

    def _check_part_within_tiles(self, tile: n.TileRef, part, what: str) -> None:
        """E208 for a sub-range of a matrix's tile that ends past, or starts beyond, the widest tile
        the tiling makes (``nb`` for uniform tiles, ``B`` for hybrid ones), whatever the sizes."""
        symbol = self.scope.lookup(tile.matrix.text)
        if symbol is None or not isinstance(symbol.node, n.MatrixDecl):
            return  # a workspace's rows may be a parameter of their own
        widest = "B" if self.tiling == "hybrid" else "nb"
        for end, verb in ((part.stop, "ends at"), (part.start, "starts at")):
            form = None if end is None else self.converter.form(end)
            beyond = _beyond(form, widest)
            if beyond is not None and beyond >= 1:
                self.bag.error(end.span, "E208", f"the sub-range {verb} {self.converter.render(form)}, past every "
                                                 f"tile: a tile has at most {widest} {what}",
                               hint=f"its {what} count from 0 to {widest} - 1 (a tile at the edge has fewer)")
                return

    def _matrix(self, ident: n.Ident) -> _Symbol | None:
        symbol = self.scope.lookup(ident.text)
        if symbol is None:
            matrices = [s for s in self.scope.names() if self.scope.lookup(s).kind in ("matrix", "workspace")]
            self._unknown(ident, "matrix", matrices)
            return None
        if symbol.kind not in ("matrix", "workspace"):
            if ident.text not in self.redeclared:
                self.bag.error(ident.span, "E205", f"'{ident.text}' is a {symbol.kind}, not a matrix")
            return None
        symbol.used = True
        return symbol

    def _int_expr(self, expr) -> bool:
        return self._expect(expr, "int")

    def _bool_expr(self, expr) -> bool:
        return self._expect(expr, "bool")

    def _number_expr(self, expr) -> str | None:
        """'int' or 'float' for a number, else None after reporting an error."""
        return self._as_number(self._type(expr), expr)

    def _as_number(self, got: str | None, expr) -> str | None:
        """``got``, the type of ``expr``, if it is a number's, else None after reporting an error."""
        if got is not None and got not in ("int", "float"):
            self.bag.error(expr.span, "E205", f"expected a number, found {_TYPE_NOUN[got]}")
            return None
        return got

    def _expect(self, expr, want: str) -> bool:
        got = self._type(expr)
        if got is not None and got != want:
            self.bag.error(expr.span, "E205", f"expected {_TYPE_NOUN[want]}, found {_TYPE_NOUN[got]}",
                           *self._let_notes(expr, lambda let: let.type == got, _TYPE_NOUN[got]),
                           hint="use '//' for integer division" if want == "int" and self._divides(expr) else None)
        return got == want

    def _lets_behind(self, expr, why) -> list[_Symbol]:
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

    def _let_notes(self, expr, why, what: str) -> list[str]:
        """A note per let behind ``expr`` that ``why`` holds of: where it is bound, to what, and that it
        is ``what``."""
        return [f"'{let.node.name.text}' is the let at line {let.span.line}: {let.node.name.text} = "
                f"{unparse(let.node.value)}, {what}" for let in self._lets_behind(expr, why)]

    def _float_let_notes(self, expr) -> list[str]:
        return self._let_notes(expr, lambda let: let.type == "float", _TYPE_NOUN["float"])

    def _divides(self, expr) -> bool:
        """Whether ``expr`` uses '/', itself or through the float lets it names: a number with a fraction
        where an integer was meant."""
        return _divides(expr) or any(_divides(let.node.value)
                                     for let in self._lets_behind(expr, lambda let: let.type == "float"))

    def _type(self, expr) -> str | None:
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
        if abs(value) > MAX_CONSTANT:
            self._beyond_64_bits(expr, _abbreviated(value))
            return None
        self.values[id(expr)] = value
        return "int"

    def _beyond_64_bits(self, expr, value: str) -> None:
        self.bag.error(expr.span, "E211", f"the value of this expression, {value}, is beyond the 64-bit range",
                       f"constants a program computes stay within ±{MAX_CONSTANT} (2**63 - 1)",
                       hint="tile programs count tiles and rows: check the formula")

    def _constant_value(self, expr) -> int | float | None:
        """The value of ``expr`` from the values of its operands already folded, or None."""
        match expr:
            case n.IntLit(value=value) | n.FloatLit(value=value):
                return value
            case n.Name(ident=ident):
                symbol = self.scope.lookup(ident.text)
                return symbol.value if symbol is not None else None
            case n.Unary(op="-", operand=operand) if self._folded(operand) is not None:
                return -self._folded(operand)
            case n.Func(func=func, args=args) if all(self._folded(a) is not None for a in args):
                return {"min": min, "max": max}[func.text](self._folded(a) for a in args)
            case n.Binary(op=op, left=left, right=right) if op in _ARITHMETIC:
                a, b = self._folded(left), self._folded(right)
                if a is not None and b is not None and (b != 0 or op in ("+", "-", "*")):
                    return _ARITHMETIC[op](a, b)
            case n.Binary(op="**", left=left, right=right):
                a, b = self.values.get(id(left)), self.values.get(id(right))
                return None if a is None or b is None else _power_value(a, b)
        return None

    def _folded(self, expr) -> int | float | None:
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
                ok = self._int_expr(arg)
                return self._geometry(matrix, method, GEOMETRY_METHODS) if ok else None
            case n.Func(func=func, args=args):
                return self._func_type(func, args)
            case n.Unary(op="not", operand=operand):
                return "bool" if self._bool_expr(operand) else None
            case n.Unary(operand=operand):
                return self._number_expr(operand)
            case n.Binary(op=op, left=left, right=right) if op in ("and", "or"):
                return "bool" if self._bool_expr(left) & self._bool_expr(right) else None
            case n.Binary(op=op, left=left, right=right) if op in ("//", "%"):
                ok = self._int_expr(left) & self._int_expr(right)
                return "int" if ok and self._divisor_not_zero(op, right) else None
            case n.Binary(op="**"):
                return self._power_type(expr)
            case n.Binary(op=op, left=left, right=right):
                sides = (self._type(left), self._type(right))  # once each: operands nest
                if op in ("==", "!=") and "char" in sides:
                    return self._char_comparison(expr, sides)
                if "char" in sides and op in ("<", "<=", ">", ">="):  # one error, not one per char side
                    self.bag.error(expr.span, "E205", f"chars compare with == and != only, not {op}",
                                   hint='test each character: side == "L" or side == "U"')
                    return None
                kinds = (self._as_number(sides[0], left), self._as_number(sides[1], right))
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
            self.bag.error(expr.span, "E205", "a char compares with a char only",
                           hint='write the character in quotes: side == "L"')
            return None
        literals = [side for side in (expr.left, expr.right) if isinstance(side, n.StrLit)]
        return "bool" if all([self._one_character(literal) for literal in literals]) else None

    def _power_type(self, expr: n.Binary) -> str | None:
        """``a ** b``: integers, ``b`` not negative and the value within 64 bits where they are known
        (E205, E211); the run checks the rest."""
        kinds = [self._type(side) for side in (expr.left, expr.right)]
        for side, kind in zip((expr.left, expr.right), kinds):
            if kind is not None and kind != "int":
                found = "a float" if kind == "float" else _TYPE_NOUN[kind]  # (a number: an integer is one too)
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
        form = self._number_form(divisor)
        if form is not None and is_zero(form) or _difference_of_itself(divisor):
            self.bag.error(divisor.span, "E214", f"division by zero: the right operand of '{op}' is always 0",
                           hint="a divisor must be nonzero for every shape and value of the kernel's arguments"
                           if self.flops_of is not None else
                           "a divisor must be nonzero for every value of the loop variables")
            return False
        return True

    def _number_form(self, expr) -> dict | None:
        """The affine form of integer ``expr``, in which a flop count's ``A.m`` and ``A.n`` are symbols;
        for a constant float (``0.5 - 0.25 * 2``, folded as the run computes it), its value."""
        form = self.converter.form(expr)
        value = self.floats.get(id(expr)) if form is None else None
        return form if value is None else {"": value}

    def _name_type(self, ident: n.Ident) -> str | None:
        symbol = self.scope.lookup(ident.text)
        if symbol is None:
            self._unknown(ident, "name", self.scope.names())
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

    def _unknown(self, ident: n.Ident, what: str, known) -> None:
        """E200 for a name not in scope: if the program declares it further on, say where (the
        declarations are read in order: parameters, then matrices, then workspaces)."""
        if self.flops_of is not None:
            kernel, near = self.flops_of.name.text, _suggest(ident.text, known)
            # a near miss of an argument is a typo; any other name is one of the program's
            why = near or (f"a flop count sees only the arguments of kernel '{kernel}': its tiles' shapes (A.m, "
                           f"A.n) and its value parameters",)
            hint = None if near else (f"to count with a number of the program, give '{kernel}' a value parameter "
                                      f"(e.g. 'int k') and pass the number in each call")
            self.bag.error(ident.span, "E200", f"unknown {what} '{ident.text}'", *why, hint=hint)
            return
        later = self.declarations.get(ident.text)
        if later is not None:
            self.used_early.add(ident.text)
            note, hint = self._declared_where(ident, later)
            self.bag.error(ident.span, "E200", f"unknown {what} '{ident.text}'", note, hint=hint)
            return
        if what == "name" and ident.text in self.ended:
            symbol, inside = self.ended[ident.text]
            let = symbol.kind == "let"
            self.bag.error(ident.span, "E200", f"unknown {what} '{ident.text}'",
                           f"{'let' if let else 'loop variable'} '{ident.text}' is bound at line {symbol.span.line}, "
                           f"column {symbol.span.column}, in {inside}: it is visible only there",
                           hint="use it inside that block, or bind it before the block" if let else None)
            return
        self.bag.error(ident.span, "E200", f"unknown {what} '{ident.text}'", *_suggest(ident.text, known))

    def _declared_where(self, ident: n.Ident, declared: Span) -> tuple[str, str]:
        """Why a name the program declares is not known at ``ident``: the note and hint of E200."""
        if self.in_requirement:
            return ("requirements are read with the parameters, before the matrices",
                    "a requirement may use n, the tiling settings and the parameters only")
        if (declared.line, declared.column) >= (ident.span.line, ident.span.column):
            return f"'{ident.text}' is declared at line {declared.line}, after this use", f"declare '{ident.text}' first"
        if declared.line == ident.span.line and ident.text in {d.name.text for d in self.program.params}:
            return f"parameter '{ident.text}' cannot refer to itself", "give it a value made of other names"
        return (f"'{ident.text}' is declared at line {declared.line}, but declarations are read parameters first, "
                f"then matrices, then workspaces", "a parameter may use other parameters only: geometry queries "
                                                   "such as A.nt exist once the matrices are tiled")

    def _geometry(self, matrix: n.Ident, query: n.Ident, allowed) -> str | None:
        if self.flops_of is not None:
            return self._argument_shape(matrix, query)
        if self._matrix(matrix) is None:
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
        if query.text not in allowed:
            self.bag.error(query.span, "E200", f"unknown geometry query '{matrix.text}.{query.text}'",
                           *_suggest(query.text, GEOMETRY_ATTRS + GEOMETRY_METHODS),
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
                           *_suggest(argument.text, tiles), f"its tile arguments: {', '.join(tiles)}")
            return None
        if query.text not in ("m", "n"):
            self.bag.error(query.span, "E200", f"a flop count knows {argument.text}.m and {argument.text}.n only",
                           hint="the rows and columns of the argument (a panel's: of its tiles stacked)")
            return None
        return "int"

    def _func_type(self, func: n.Ident, args) -> str | None:
        kinds = [self._number_expr(a) for a in args]
        if func.text not in FUNCTIONS:
            self.bag.error(func.span, "E200", f"unknown function '{func.text}'", *_suggest(func.text, FUNCTIONS),
                           *_FUNCTION_ADVICE.get(func.text, ()),
                           hint="functions: min(a, b, ...) and max(a, b, ...), of two or more numbers")
            return None
        if len(args) < 2:
            self.bag.error(func.span, "E202", f"{func.text} takes at least 2 arguments, got {len(args)}")
            return None
        return None if None in kinds else "float" if "float" in kinds else "int"

    # ---------------------------------------------------------------- dependencies & affinity
    def _depends(self, expr) -> frozenset[str]:
        """The lets ``expr`` names and the loop variables it depends on (through lets too).

        Not the lets those lets name: they are bound before them, so the innermost
        binder an expression depends on is one of these; and a let's loop variables are
        at most the enclosing loops, so a chain of lets costs linear time."""
        return frozenset(name for name in names(expr)
                         if (symbol := self.scope.lookup(name)) is not None and symbol.kind == "let") | self._loops(expr)

    def _loops(self, expr) -> frozenset[str]:
        """The loop variables ``expr`` depends on, directly or through lets."""
        found = set()
        for name in names(expr):
            symbol = self.scope.lookup(name)
            if symbol is not None and symbol.kind == "loop":
                found.add(name)
            elif symbol is not None:
                found |= symbol.loops
        return frozenset(found)

    def _tile_depends(self, tile: n.TileRef) -> frozenset[str]:
        found = frozenset()
        for index in (tile.row, tile.col):
            for end in (index.start, index.stop) if isinstance(index, n.Range) else (index,):
                found |= self._depends(end)
        return found

    def _varying(self, expr) -> bool:
        """Whether ``expr`` depends on a loop variable, directly or through lets."""
        return bool(self._loops(expr))

    def _affine(self, expr) -> bool:
        match expr:
            case n.IntLit() | n.Attr():
                return True
            case n.Name(ident=ident):
                symbol = self.scope.lookup(ident.text)
                return symbol is None or symbol.kind != "let" or symbol.affine
            case n.Method(arg=arg):
                return not self._varying(arg)
            case n.Func(args=args):
                return all(self._affine(a) for a in args)
            case n.Unary(operand=operand):
                return self._affine(operand)
            case n.Binary(op=op, left=left, right=right):
                if op in ("+", "-"):
                    return self._affine(left) and self._affine(right)
                if op == "*":
                    return self._affine(left) and self._affine(right) and not (
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
        if isinstance(decl, n.WorkspaceDecl):
            return self._extent_symbol(decl.like.text, axis)
        if not isinstance(decl, n.MatrixDecl):
            return f"{matrix}.{axis}"
        dim = decl.rows if axis == "mt" else decl.cols
        counter = "tiles" if self.tiling_defaults.keys() == {"nb"} else ("blocks" if axis == "mt" else "slices")
        return f"{counter}({canonical_text(dim)})"


# ---------------------------------------------------------------- helpers
_TYPE_NOUN = {"int": "an integer", "float": "a float", "char": "a char", "bool": "a condition", "tile": "a tile"}


@dataclass(frozen=True)
class _LoopRange:
    """The values a loop variable takes, as the affine proofs see them: ``start .. stop``
    counting up (a loop counting down by 1 is read backwards; one of another step is seen
    as its first value alone, which every run of it visits)."""

    var: n.Ident
    start: object
    stop: object


def _visited_range(loop: n.For, step: int | None):
    if step == 1:
        return loop
    if step == -1:
        one = n.IntLit(1, loop.span)
        return _LoopRange(loop.var, n.Binary("+", loop.stop, one, loop.span),
                          n.Binary("+", loop.start, one, loop.span))
    if step is None or isinstance(loop.start, n.Func):  # the first value is not one affine form
        unknown = n.StrLit("", loop.span)  # no affine form: nothing is proved about this loop
        return _LoopRange(loop.var, unknown, unknown)
    one, span = n.IntLit(1, loop.span), loop.span
    after_start = n.Binary("+", loop.start, one, span)
    if step > 0:  # start, when start < stop
        return _LoopRange(loop.var, loop.start, n.Func(n.Ident("min", span), (loop.stop, after_start), span))
    return _LoopRange(loop.var, n.Func(n.Ident("max", span), (loop.start, n.Binary("+", loop.stop, one, span)), span),
                      after_start)  # start, when start > stop


def _range_ends(tile: n.TileRef):
    """The tile references to prove in range: the tile, or a panel's first and last tiles."""
    if not isinstance(tile.row, n.Range) and not isinstance(tile.col, n.Range):
        return (tile,)
    ends = []
    for first in (True, False):
        index = []
        for part in (tile.row, tile.col):
            if isinstance(part, n.Range):
                part = part.start if first else n.Binary("-", part.stop, n.IntLit(1, part.span), part.span)
            index.append(part)
        ends.append(n.TileRef(tile.matrix, index[0], index[1], None, None, tile.span))
    return ends


def _moved_mode(mode: str, tile: n.TileRef) -> str:
    """An ``out`` argument naming a sub-range leaves the rest of its tile as it was: where the
    task runs on another rank or device the whole tile goes there and back, as for ``inout``
    (a zeroed buffer going home would wipe the rest)."""
    return "inout" if mode == "out" and (tile.rows is not None or tile.cols is not None) else mode


def _divides(expr) -> bool:
    """Whether ``expr`` uses '/' (a number with a fraction where an integer was meant)."""
    return any(isinstance(node, n.Binary) and node.op == "/" for node in expression_nodes(expr))


def _param_text(param: n.KernelParam) -> str:
    if param.kind == "tile":
        return f"{param.mode} {param.name.text}"
    default = f" = {unparse(param.default)}" if param.default is not None else ""
    choices = f' in "{param.choices}"' if param.choices else ""
    return f"{param.kind} {param.name.text}{choices}{default}"


def _operand_words(given: set) -> bool:
    """Whether qualifiers ``given`` describe an operand: one triangle (``unit`` with it),
    or ``symmetric`` (with the triangle it is stored in); ``transposed`` with either."""
    triangles = given & {"lower", "upper"}
    if "symmetric" in given:  # with the triangle M stores (lower by default)
        return "unit" not in given and len(triangles) <= 1
    return len(triangles) <= 1 and ("unit" not in given or bool(triangles))


def _char_use_note(use: CharUse) -> str:
    return f"it is passed as {use.where} at line {use.span.line}: one of {', '.join(map(repr, use.choices))}"


def _difference_of_itself(expr) -> bool:
    """``X - X``, 0 whatever ``X`` is: also where the converter has no affine form for ``X``
    (``C.n - C.n`` in a flop count, ``alpha - alpha`` of a float)."""
    return isinstance(expr, n.Binary) and expr.op == "-" and unparse(expr.left) == unparse(expr.right)


def _taken_as(params: list, positional: int, given: dict) -> str:
    """A note on a call with too few arguments: how the ones given by position are taken, and which
    parameters that leaves without one (the one left out may be any of them, not the last)."""
    quoted = lambda names: ", ".join(f"'{name}'" for name in names)
    unbound = [p.name.text for p in params if p.name.text not in given and p.default is None]
    left = f"{quoted(unbound)} {'is' if len(unbound) == 1 else 'are'} left without one"
    if not positional:
        return left
    taken = quoted(p.name.text for p in params[:positional])
    if positional == 1:
        return f"the one given by position is taken as {taken}: {left}"
    return f"the {positional} given by position are taken as {taken}, in that order: {left}"

def _how_to_give(param: n.KernelParam) -> str:
    """The hint for a missing argument: a tile goes by position only (by name it is E202 too)."""
    if param.kind == "tile":
        return f"give tile argument '{param.name.text}' by position, in the order of the declaration"
    return f"give it by position, or as {param.name.text} = VALUE"


def _suggest(name: str, candidates) -> tuple[str, ...]:
    close = did_you_mean(name, candidates)
    return (f"did you mean '{close}'?",) if close else ()


def _function_note(module: str, function: Function) -> str:
    """``k.py:3 defines scale(A, B): 2 positional argument(s)``, with what else stops a positional call."""
    alias = f" (bound to the kernel's name at line {function.alias_line})" if function.alias_line else ""
    note = f"{module}:{function.line} defines {function.signature()}{alias}: {function.takes()} positional argument(s)"
    if function.required_keywords:
        note += f", and keyword-only {', '.join(function.required_keywords)} without a default"
    return note


def _keyword(stmt: n.For) -> Span:
    """The span of a loop's ``for``."""
    span = stmt.span
    return Span(span.path, span.line, span.column, span.line, span.column + 3)


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
    return value if abs(value) <= MAX_CONSTANT else None


def _constant(expr) -> int | None:
    """The value of an expression made of integer literals only, else None (also for
    a value beyond :data:`MAX_CONSTANT`)."""
    match expr:
        case n.IntLit(value=value):
            return value
        case n.Unary(op="-", operand=operand):
            value = _constant(operand)
            return None if value is None else -value
        case n.Binary(op=op, left=left, right=right) if op in ("+", "-", "*", "//", "%", "**"):
            a, b = _constant(left), _constant(right)
            if a is None or b is None or (op in ("//", "%") and b == 0):
                return None
            value = _power_value(a, b) if op == "**" else _ARITHMETIC[op](a, b)
            return value if value is not None and abs(value) <= MAX_CONSTANT else None
    return None


def _tile_text(tile: n.TileRef) -> str:
    return f"{tile.matrix.text}[{unparse(tile.row)}, {unparse(tile.col)}]"


def _is_panel(tile: n.TileRef) -> bool:
    return isinstance(tile.row, n.Range) or isinstance(tile.col, n.Range)


def _same_tile(a: n.TileRef, b: n.TileRef) -> bool:
    return a.matrix.text == b.matrix.text and all(canonical_text(x) == canonical_text(y)
                                                  for x, y in ((a.row, b.row), (a.col, b.col)))


def _beyond(form, widest: str) -> int | None:
    """The least amount by which affine ``form`` exceeds the symbol ``widest`` (at least 1) for every
    value of it, when it is ``c·widest + c0`` with ``c >= 1``; None for any other form."""
    if form is None or set(form) - {"", widest} or form.get(widest, 0) < 1:
        return None
    return form.get("", 0) + (form[widest] - 1)
