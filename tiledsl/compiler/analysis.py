"""Semantic analysis: names, types, kernel signatures, affine bounds, tile ranges.

``analyze(file)`` checks one parsed program against the prelude and returns a
:class:`Checked` program: the AST plus, for every kernel call, its access summary
(the ordered tiles it reads and writes, main output first among the writes) and
the loop variables its tile indices depend on (used to hoist ownership tests).
Problems are collected as diagnostics, never raised.
"""
from __future__ import annotations

import ast
import difflib
import operator
from dataclasses import dataclass
from pathlib import Path

from . import nodes as n
from .affine import (Converter, coincidence_witness, difference, never_runs, out_of_range_witness,
                     provably_nonzero)
from .diagnostics import DiagnosticBag
from .kernel_module import UNKNOWN, Definitions, Function, read_definitions
from .source import Span

TILING_SETTINGS = {"uniform": ("nb",), "hybrid": ("B", "b", "s")}
TILING_DEFAULTS = {"uniform": {"nb": 256}, "hybrid": {"B": 512, "b": 128, "s": 2}}
RANDOM_KINDS = ("spd", "general", "diagdom")
SQUARE_KINDS = ("spd",)  # random kinds that exist for square matrices only
NAMED_INITS = ("zeros", "identity")
CHECK_ARITY = {"cholesky": 1, "lu": 1, "qr": 2}
GEOMETRY_ATTRS = ("mt", "nt", "m", "n")
GEOMETRY_METHODS = ("height", "width", "offset")
FUNCTIONS = ("min", "max")
WRITE_MODES = ("out", "inout")
#: Deepest nest of loops: the driver nests one Python ``for`` per loop (CPython allows 20).
MAX_LOOP_NESTING = 20
#: Most loop iterations a run walks (runtime/iterations.py refuses more).
MAX_ITERATIONS = 10**10
#: The largest magnitude of a value the analysis computes (a let, a product of constants).
MAX_CONSTANT = 2**63 - 1
_ARITHMETIC = {"+": operator.add, "-": operator.sub, "*": operator.mul,
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
    """The access summary of one call site: ``accesses[main]`` is the main output."""

    call: n.Call
    kernel: n.KernelDecl
    accesses: tuple[Access, ...]
    main: int
    under_condition: bool


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
        self.calls: list[CallSummary] = []
        self.loops: list[n.For] = []
        self.conditions = 0
        self.guards: list = []  # (condition, branch taken) of the enclosing ifs, outermost first
        self.values: dict[int, int] = {}  # id of a constant integer expression -> its value
        self.module_definitions: Definitions | None = None
        self.converter = Converter(self._let_form, self._extent_symbol)
        self._declare_kernels(prelude.kernels + file.kernels)

    # ---------------------------------------------------------------- driver
    def run(self) -> Checked | None:
        program = self.program
        tiling = self._tiling(program.tiling)
        self._declare_params(tiling, program.params)
        self._declare_matrices(program.matrices, program.workspaces)
        for check in program.checks:
            self._check_decl(check)
        for extra in program.checks[1:]:
            self.bag.error(extra.span, "E207", "the program declares a second check",
                           f"the first is at line {program.checks[0].span.line}")
        module = self._kernel_module()
        self._block(program.body)
        self._check_kernel_functions()
        self._report_unused()
        if self.bag.has_errors:
            return None
        return Checked(program, self.file.path, tiling, self.tiling_defaults, dict(self.kernels),
                       tuple(self.calls), module)

    # ---------------------------------------------------------------- declarations
    def _declare_kernels(self, decls):
        for decl in decls:
            name = decl.name.text
            if name in self.kernels:
                where = "the prelude" if self.kernels[name].prelude else f"line {self.kernels[name].span.line}"
                self.bag.error(decl.name.span, "E207", f"kernel '{name}' is already declared in {where}")
                continue
            self._check_kernel_params(decl)
            self.kernels[name] = decl
            self.kernel_used[name] = False

    def _check_kernel_params(self, decl: n.KernelDecl):
        seen = set()
        for param in decl.params:
            if param.name.text in seen:
                self.bag.error(param.name.span, "E207",
                               f"kernel '{decl.name.text}' has two arguments named '{param.name.text}'")
            seen.add(param.name.text)
        if not any(p.mode in WRITE_MODES for p in decl.params):
            self.bag.error(decl.name.span, "E210", f"kernel '{decl.name.text}' writes nothing",
                           hint="declare at least one argument 'out' or 'inout': it is the task's main output")

    def _tiling(self, decl: n.TilingDecl | None) -> str:
        kind = decl.kind.text if decl else "uniform"
        if kind not in TILING_SETTINGS:
            self.bag.error(decl.kind.span, "E209", f"unknown tiling '{kind}'",
                           hint="use 'tiling uniform(nb = ...)' or 'tiling hybrid(B = ..., b = ..., s = ...)'")
            kind = "uniform"
        self.tiling_defaults = dict(TILING_DEFAULTS[kind])
        seen = {}
        for setting in decl.settings if decl else ():
            if setting.name.text in seen:
                self.bag.error(setting.name.span, "E207", f"'{setting.name.text}' is set twice",
                               f"first set at column {seen[setting.name.text]}")
            seen[setting.name.text] = setting.name.span.column
            self._tiling_setting(kind, setting)
        d = self.tiling_defaults
        if kind == "hybrid" and (d["s"] - 1) * d["b"] >= d["B"]:
            self.bag.error(decl.span, "E209", f"hybrid tiling needs (s - 1)·b < B, got s={d['s']}, b={d['b']}, B={d['B']}",
                           hint="the last slice of every block would be empty")
        return kind

    def _tiling_setting(self, kind: str, setting: n.Setting):
        name = setting.name.text
        if name not in TILING_SETTINGS[kind]:
            allowed = ", ".join(TILING_SETTINGS[kind])
            self.bag.error(setting.name.span, "E209", f"'{name}' is not a setting of {kind} tiling",
                           hint=f"{kind} tiling takes {allowed}")
            return
        value = _constant(setting.value)
        if value is None or value < 1:
            self.bag.error(setting.value.span, "E209", f"{name} must be a positive integer constant")
            return
        self.tiling_defaults[name] = value

    def _declare_params(self, tiling: str, params):
        for name in ("n",) + TILING_SETTINGS[tiling]:
            self.scope.frames[0][name] = _Symbol("param", None, used=False)
        for decl in params:
            self._int_expr(decl.default)
            self._declare(decl.name, _Symbol("param", decl.name.span, decl))

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
        """A size: an integer expression of parameters only (no geometry queries)."""
        if self._int_expr(expr) and any(isinstance(node, (n.Attr, n.Method)) for node in _nodes(expr)):
            self.bag.error(expr.span, "E209", f"the {what} may use parameters only",
                           hint="geometry queries such as A.mt exist only once matrices are tiled")

    def _check_init(self, init: n.Init):
        if init.kind == "random" and init.what.text not in RANDOM_KINDS:
            self.bag.error(init.what.span, "E209", f"unknown random matrix kind '{init.what.text}'",
                           hint=f"use one of {', '.join(RANDOM_KINDS)}")
        if init.kind == "named" and init.what.text not in NAMED_INITS:
            self.bag.error(init.what.span, "E209", f"unknown matrix initialiser '{init.what.text}'",
                           hint=f"use 'random {'|'.join(RANDOM_KINDS)}', {', '.join(NAMED_INITS)} or load \"file.npy\"")

    def _check_square(self, decl: n.MatrixDecl):
        """``random spd`` of a matrix whose rows and columns differ whatever the sizes."""
        init = decl.init
        if init.kind != "random" or init.what.text not in SQUARE_KINDS:
            return
        rows, cols = self.converter.form(decl.rows), self.converter.form(decl.cols)
        if rows is None or cols is None or not provably_nonzero(difference(rows, cols)):
            return  # square, or only the run can tell: it refuses a matrix that is not
        self.bag.error(init.span, "E209",
                       f"random {init.what.text} needs a square matrix, but '{decl.name.text}' is "
                       f"{unparse(decl.rows)} × {unparse(decl.cols)}",
                       "its numbers of rows and columns differ whatever the sizes",
                       hint="use 'random general' or 'random diagdom' for a matrix that is not square")

    def _check_decl(self, check: n.CheckDecl):
        kind = check.kind.text
        if kind not in CHECK_ARITY:
            self.bag.error(check.kind.span, "E209", f"unknown check '{kind}'",
                           hint=f"use one of {', '.join(CHECK_ARITY)}")
            return
        if len(check.args) != CHECK_ARITY[kind]:
            self.bag.error(check.span, "E202",
                           f"check {kind} takes {CHECK_ARITY[kind]} argument(s), got {len(check.args)}")
        wanted = ("matrix", "workspace")[:CHECK_ARITY[kind]]
        for arg, kind_wanted in zip(check.args, wanted):
            symbol = self._matrix(arg)
            if symbol is not None and symbol.kind != kind_wanted:
                self.bag.error(arg.span, "E209", f"check {kind} needs a {kind_wanted} here, "
                                                 f"'{arg.text}' is a {symbol.kind}")

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
        elif not path.is_file():
            self.bag.error(use.span, "E209", f"kernel module {use.path!r} not found", f"looked for {path}")
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
        """Every user kernel the program calls is a function of the module taking its tile arguments."""
        if self.module_definitions is None:
            return
        module = self.file.uses[0].path
        for name, decl in self.kernels.items():
            if not decl.prelude and self.kernel_used[name]:
                self._check_kernel_function(decl, module, self.module_definitions.of(name))

    def _check_kernel_function(self, decl: n.KernelDecl, module: str, bindings: list):
        name, count = decl.name.text, len(decl.params)
        if UNKNOWN in bindings or (not bindings and self.module_definitions.open):
            return  # only running the module could tell
        declared = f"declared as {name}({', '.join(f'{p.mode} {p.name.text}' for p in decl.params)})"
        functions = [b for b in bindings if isinstance(b, Function)]
        if not functions:
            others = [f"{module}:{b.line} defines {b.what}" for b in bindings]
            self.bag.error(decl.name.span, "E212", f"kernel module {module!r} defines no function '{name}'",
                           *others, *_suggest(name, self.module_definitions.functions()),
                           hint=f"define it in {module}: def {name}({', '.join(p.name.text for p in decl.params)}):")
        elif not any(f.accepts(count) for f in functions):
            self.bag.error(decl.name.span, "E213",
                           f"function '{name}' of {module!r} cannot take the {count} tile argument(s) of kernel '{name}'",
                           *(_function_note(module, f) for f in functions), declared,
                           hint="give the function one positional parameter per tile argument, in declaration order")

    def _declare(self, ident: n.Ident, symbol: _Symbol):
        """Bind ``ident``; a second binding of a visible name is an error and is dropped."""
        previous = self.scope.lookup(ident.text)
        if previous is None:
            self.scope.frames[-1][ident.text] = symbol
            return
        where = f"at line {previous.span.line}" if previous.span else "by the tiling"
        if previous.kind in ("loop", "let"):
            message = f"'{ident.text}' shadows the {previous.kind} declared {where}"
        else:
            message = f"'{ident.text}' is already declared ({previous.kind}, {where})"
        self.bag.error(ident.span, "E207", message, hint="choose another name")

    def _report_unused(self):
        for name, symbol in self.scope.frames[0].items():
            if not symbol.used and symbol.span is not None:
                self.bag.warning(symbol.span, "W300", f"{symbol.kind} '{name}' is declared but never used")
        for name, used in self.kernel_used.items():
            decl = self.kernels[name]
            if not used and not decl.prelude:
                self.bag.warning(decl.name.span, "W300", f"kernel '{name}' is declared but never called")

    # ---------------------------------------------------------------- statements
    def _block(self, stmts):
        self.scope.frames.append({})
        for stmt in stmts:
            getattr(self, "_" + type(stmt).__name__.lower())(stmt)
        for name, symbol in self.scope.frames.pop().items():
            if symbol.kind == "let" and not symbol.used:
                self.bag.warning(symbol.span, "W300", f"let '{name}' is declared but never used")

    def _for(self, stmt: n.For):
        for bound in (stmt.start, stmt.stop):
            if self._int_expr(bound) and not self._affine(bound):
                self.bag.error(bound.span, "E206", "loop bound is not affine in the loop variables",
                               "bounds may add, subtract, take min/max and multiply by loop-invariant values",
                               hint="'//', '%', products of loop variables and geometry queries on them "
                                    "belong in tile indices or 'if' conditions")
        self._check_trip_count(stmt)
        if len(self.loops) == MAX_LOOP_NESTING:
            self.bag.error(_keyword(stmt), "E101", f"loops nested more than {MAX_LOOP_NESTING} deep",
                           f"the generated driver is Python, which nests at most {MAX_LOOP_NESTING} loops",
                           hint="merge loops, or compute indices from fewer loop variables")
        self.scope.frames.append({})
        self._declare(stmt.var, _Symbol("loop", stmt.var.span, stmt, used=True))
        self.loops.append(stmt)
        self._block(stmt.body)
        self.loops.pop()
        self.scope.frames.pop()

    def _check_trip_count(self, stmt: n.For):
        """Warn of a loop that never runs, or runs more times than a run walks (issue 16.3)."""
        start, stop = self.values.get(id(stmt.start)), self.values.get(id(stmt.stop))
        header = _keyword(stmt)
        if start is not None and stop is not None and stop - start > MAX_ITERATIONS:
            self.bag.warning(header, "W301", f"this loop runs {stop - start} times",
                             f"a run walks at most {MAX_ITERATIONS} loop iterations and refuses more")
            return
        forms = self.converter.form(stmt.start), self.converter.form(stmt.stop)
        if None not in forms and never_runs(*forms):
            self.bag.warning(header, "W302", "this loop never runs",
                             f"its start, {unparse(stmt.start)}, is never below its stop, {unparse(stmt.stop)}")

    def _if(self, stmt: n.If):
        self._bool_expr(stmt.cond)
        self.conditions += 1
        for taken, block in ((True, stmt.then), (False, stmt.orelse)):
            self.guards.append((stmt.cond, taken))
            self._block(block)
            self.guards.pop()
        self.conditions -= 1

    def _let(self, stmt: n.Let):
        ok = self._int_expr(stmt.value)
        # facts about the value are taken now, from those of earlier lets: never re-expanded
        symbol = _Symbol("let", stmt.name.span, stmt, loops=self._loops(stmt.value))
        symbol.affine = not ok or self._affine(stmt.value)
        symbol.form = self.converter.form(stmt.value) if ok else None
        symbol.value = self.values.get(id(stmt.value)) if ok else None
        self._declare(stmt.name, symbol)

    def _release(self, stmt: n.Release):
        self._tile(stmt.tile)

    def _call(self, stmt: n.Call):
        name = stmt.kernel.text
        for tile in stmt.args:
            self._tile(tile)
        if stmt.priority is not None:
            self._int_expr(stmt.priority)
        decl = self.kernels.get(name)
        if decl is None:
            self.bag.error(stmt.kernel.span, "E201", f"unknown kernel '{name}'",
                           *_suggest(name, self.kernels),
                           hint="declare it with 'kernel NAME(in A, inout B)' and name its module with 'use \"kernels.py\"'")
            return
        self.kernel_used[name] = True
        if not decl.prelude and not self.file.uses:
            self.bag.error(stmt.kernel.span, "E209", f"kernel '{name}' has no body",
                           hint="name the Python module that defines it: use \"my_kernels.py\"")
        if len(stmt.args) != len(decl.params):
            signature = ", ".join(f"{p.mode} {p.name.text}" for p in decl.params)
            self.bag.error(stmt.span, "E202",
                           f"{name} takes {len(decl.params)} tile argument(s), got {len(stmt.args)}",
                           f"declared as {name}({signature})")
            return
        accesses = tuple(Access(tile, param.mode, self._tile_depends(tile))
                         for tile, param in zip(stmt.args, decl.params))
        self._check_written(name, accesses)
        self._check_ranges(accesses)
        main = next((i for i, a in enumerate(accesses) if a.mode in WRITE_MODES), None)
        if main is None:
            return  # a kernel that writes nothing: E210 at its declaration
        self.calls.append(CallSummary(stmt, decl, accesses, main, self.conditions > 0))

    def _check_written(self, kernel: str, accesses):
        for index, access in enumerate(accesses):
            symbol = self.scope.lookup(access.matrix)
            if access.mode in WRITE_MODES and symbol and symbol.kind == "matrix" and symbol.node.mode == "in":
                self.bag.error(access.tile.span, "E203",
                               f"matrix '{access.matrix}' is declared 'in' and cannot be written",
                               f"argument {index + 1} of {kernel} is '{access.mode}'")
        for i, first in enumerate(accesses):
            for j in range(i + 1, len(accesses)):
                second = accesses[j]
                written = first.mode in WRITE_MODES or second.mode in WRITE_MODES
                if not written or first.matrix != second.matrix:
                    continue
                arguments = f"arguments {i + 1} ({first.mode}) and {j + 1} ({second.mode})"
                same = "" if _same_tile(first.tile, second.tile) else coincidence_witness(
                    first.tile, second.tile, self.loops, self.converter, guarded=self.conditions > 0)
                if same == "":
                    self.bag.error(second.tile.span, "E204",
                                   f"tile {_tile_text(second.tile)} is passed twice to {kernel} and one of them is written",
                                   arguments)
                elif same is not None:
                    self.bag.error(second.tile.span, "E204",
                                   f"tiles {_tile_text(first.tile)} and {_tile_text(second.tile)} can be the same tile, "
                                   f"passed twice to {kernel} where one of them is written",
                                   arguments, f"they are the same tile {same}",
                                   hint="change a loop bound, or guard the call with 'if', so that they never coincide")

    def _check_ranges(self, accesses):
        for access in accesses:
            witness = out_of_range_witness(access.tile, self.loops, self.converter, self.guards)
            if witness:
                self.bag.error(access.tile.span, "E208", f"tile index out of range in {_tile_text(access.tile)}",
                               witness)

    # ---------------------------------------------------------------- tiles & expressions
    def _tile(self, tile: n.TileRef):
        self._matrix(tile.matrix)
        self._int_expr(tile.row)
        self._int_expr(tile.col)
        for part in (tile.rows, tile.cols):
            for end in (part.start, part.stop) if part else ():
                if end is not None:
                    self._int_expr(end)

    def _matrix(self, ident: n.Ident) -> _Symbol | None:
        symbol = self.scope.lookup(ident.text)
        if symbol is None:
            matrices = [s for s in self.scope.names() if self.scope.lookup(s).kind in ("matrix", "workspace")]
            self.bag.error(ident.span, "E200", f"unknown matrix '{ident.text}'", *_suggest(ident.text, matrices))
            return None
        if symbol.kind not in ("matrix", "workspace"):
            self.bag.error(ident.span, "E205", f"'{ident.text}' is a {symbol.kind}, not a matrix")
            return None
        symbol.used = True
        return symbol

    def _int_expr(self, expr) -> bool:
        return self._expect(expr, "int")

    def _bool_expr(self, expr) -> bool:
        return self._expect(expr, "bool")

    def _expect(self, expr, want: str) -> bool:
        got = self._type(expr)
        if got is not None and got != want:
            noun = {"int": "an integer", "bool": "a condition"}
            self.bag.error(expr.span, "E205", f"expected {noun[want]}, found {noun[got]}")
        return got == want

    def _type(self, expr) -> str | None:
        """The type of ``expr`` ('int' or 'bool'), or None after reporting an error."""
        got = self._kind(expr)
        return self._fold(expr) if got == "int" else got

    def _fold(self, expr) -> str | None:
        """Record the value of a constant integer expression in ``values``: 'int', or None
        after an E211 for a value beyond the 64-bit range (no value ever grows unbounded:
        chained products of lets stop at the first one too large)."""
        value = self._constant_value(expr)
        if value is None:
            return "int"
        if abs(value) > MAX_CONSTANT:
            self.bag.error(expr.span, "E211", f"the value of this expression, {_abbreviated(value)}, "
                                              "is beyond the 64-bit range",
                           f"constants a program computes stay within ±{MAX_CONSTANT} (2**63 - 1)",
                           hint="tile programs count tiles and rows: check the formula")
            return None
        self.values[id(expr)] = value
        return "int"

    def _constant_value(self, expr) -> int | None:
        """The value of ``expr`` from the values of its operands already folded, or None."""
        match expr:
            case n.IntLit(value=value):
                return value
            case n.Name(ident=ident):
                symbol = self.scope.lookup(ident.text)
                return symbol.value if symbol is not None else None
            case n.Unary(op="-", operand=operand) if id(operand) in self.values:
                return -self.values[id(operand)]
            case n.Func(func=func, args=args) if all(id(a) in self.values for a in args):
                return {"min": min, "max": max}[func.text](self.values[id(a)] for a in args)
            case n.Binary(op=op, left=left, right=right) if op in _ARITHMETIC:
                a, b = self.values.get(id(left)), self.values.get(id(right))
                if a is not None and b is not None and (b != 0 or op in ("+", "-", "*")):
                    return _ARITHMETIC[op](a, b)
        return None

    def _kind(self, expr) -> str | None:
        """The type of ``expr`` from those of its operands, or None after reporting an error."""
        match expr:
            case n.IntLit():
                return "int"
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
                return "int" if self._int_expr(operand) else None
            case n.Binary(op=op, left=left, right=right) if op in ("and", "or"):
                return "bool" if self._bool_expr(left) & self._bool_expr(right) else None
            case n.Binary(op=op, left=left, right=right):
                ok = self._int_expr(left) & self._int_expr(right)
                return ("bool" if op in ("==", "!=", "<", "<=", ">", ">=") else "int") if ok else None
        raise TypeError(f"unknown expression node {expr!r}")

    def _name_type(self, ident: n.Ident) -> str | None:
        symbol = self.scope.lookup(ident.text)
        if symbol is None:
            self.bag.error(ident.span, "E200", f"unknown name '{ident.text}'",
                           *_suggest(ident.text, self.scope.names()))
            return None
        symbol.used = True
        if symbol.kind in ("matrix", "workspace"):
            self.bag.error(ident.span, "E205", f"'{ident.text}' is a {symbol.kind}, not an integer",
                           hint=f"use {ident.text}.mt or {ident.text}.nt for its number of tile rows or columns")
            return None
        return "int"

    def _geometry(self, matrix: n.Ident, query: n.Ident, allowed) -> str | None:
        if self._matrix(matrix) is None:
            return None
        if query.text not in allowed:
            self.bag.error(query.span, "E200", f"unknown geometry query '{matrix.text}.{query.text}'",
                           *_suggest(query.text, GEOMETRY_ATTRS + GEOMETRY_METHODS),
                           hint="queries: .mt .nt .m .n, .height(i) .width(j) .offset(j)")
            return None
        return "int"

    def _func_type(self, func: n.Ident, args) -> str | None:
        ok = all([self._int_expr(a) for a in args])
        if func.text not in FUNCTIONS:
            self.bag.error(func.span, "E200", f"unknown function '{func.text}'", *_suggest(func.text, FUNCTIONS))
            return None
        if len(args) < 2:
            self.bag.error(func.span, "E202", f"{func.text} takes at least 2 arguments, got {len(args)}")
            return None
        return "int" if ok else None

    # ---------------------------------------------------------------- dependencies & affinity
    def _depends(self, expr) -> frozenset[str]:
        """The lets ``expr`` names and the loop variables it depends on (through lets too).

        Not the lets those lets name: they are bound before them, so the innermost
        binder an expression depends on is one of these; and a let's loop variables are
        at most the enclosing loops, so a chain of lets costs linear time."""
        return frozenset(name for name in _names(expr)
                         if (symbol := self.scope.lookup(name)) is not None and symbol.kind == "let") | self._loops(expr)

    def _loops(self, expr) -> frozenset[str]:
        """The loop variables ``expr`` depends on, directly or through lets."""
        found = set()
        for name in _names(expr):
            symbol = self.scope.lookup(name)
            if symbol is not None and symbol.kind == "loop":
                found.add(name)
            elif symbol is not None:
                found |= symbol.loops
        return frozenset(found)

    def _tile_depends(self, tile: n.TileRef) -> frozenset[str]:
        return self._depends(tile.row) | self._depends(tile.col)

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

    def _extent_symbol(self, matrix: str, axis: str) -> str:
        """A symbol naming the tile count of ``matrix`` along ``axis`` ('mt' or 'nt')."""
        symbol = self.scope.lookup(matrix)
        decl = symbol.node if symbol else None
        if isinstance(decl, n.WorkspaceDecl):
            return self._extent_symbol(decl.like.text, axis)
        if not isinstance(decl, n.MatrixDecl):
            return f"{matrix}.{axis}"
        dim = decl.rows if axis == "mt" else decl.cols
        counter = "tiles" if self.tiling_defaults.keys() == {"nb"} else ("blocks" if axis == "mt" else "slices")
        return f"{counter}({_unparse(dim)})"


# ---------------------------------------------------------------- helpers
def _suggest(name: str, candidates) -> tuple[str, ...]:
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return (f"did you mean '{close[0]}'?",) if close else ()


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


def _constant(expr) -> int | None:
    """The value of an expression made of integer literals only, else None (also for
    a value beyond :data:`MAX_CONSTANT`)."""
    match expr:
        case n.IntLit(value=value):
            return value
        case n.Unary(op="-", operand=operand):
            value = _constant(operand)
            return None if value is None else -value
        case n.Binary(op=op, left=left, right=right) if op in ("+", "-", "*", "//", "%"):
            a, b = _constant(left), _constant(right)
            if a is None or b is None or (op in ("//", "%") and b == 0):
                return None
            value = _ARITHMETIC[op](a, b)
            return value if abs(value) <= MAX_CONSTANT else None
    return None


def _nodes(expr):
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


def _names(expr):
    """Every plain name used in ``expr``."""
    return (node.ident.text for node in _nodes(expr) if isinstance(node, n.Name))


def _unparse(expr) -> str:
    """Source-like text of an expression (spans ignored): used for messages and symbols."""
    match expr:
        case n.IntLit(value=value):
            return str(value)
        case n.Name(ident=ident):
            return ident.text
        case n.Attr(matrix=m, attr=a):
            return f"{m.text}.{a.text}"
        case n.Method(matrix=m, method=q, arg=arg):
            return f"{m.text}.{q.text}({_unparse(arg)})"
        case n.Func(func=f, args=args):
            return f"{f.text}({', '.join(_unparse(a) for a in args)})"
        case n.Unary(op="not", operand=operand):
            return f"not {_unparse(operand)}"
        case n.Unary(operand=operand):
            return f"-{_unparse(operand)}"
        case n.Binary(op=op, left=left, right=right):
            return f"({_unparse(left)} {op} {_unparse(right)})"
    return "?"


def unparse(expr) -> str:
    """Source-like text of an expression without redundant outer parentheses."""
    text = _unparse(expr)
    return text[1:-1] if isinstance(expr, n.Binary) else text


def _tile_text(tile: n.TileRef) -> str:
    return f"{tile.matrix.text}[{unparse(tile.row)}, {unparse(tile.col)}]"


def _same_tile(a: n.TileRef, b: n.TileRef) -> bool:
    return a.matrix.text == b.matrix.text and _unparse(a.row) == _unparse(b.row) and _unparse(a.col) == _unparse(b.col)
