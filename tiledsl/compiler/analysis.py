"""Semantic analysis: declarations, kernel signatures, statements, calls, affine bounds, tile ranges.

``analyze(file)`` checks one parsed program against the prelude and returns a
:class:`Checked` program: the AST plus, for every kernel call, its access summary
(the ordered tiles it reads and writes, main output first among the writes) and
the loop variables its tile indices depend on (used to hoist ownership tests).
Problems are collected as diagnostics, never raised.

The analyzer walks the program in order and hands each expression to the
:class:`~.typer.ExpressionTyper` (names, types, constants, affine forms), the ``check``
declaration to :mod:`.checks`, and the kernel module to :class:`~.module_use.ModuleUse`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from ..language import (MAX_ITERATIONS, NAMED_INITS, OPERATOR_WORDS, RANDOM_KINDS, SQUARE_KINDS, TILING_SETTINGS,
                        WRITE_MODES, hybrid_slices_fit, most_slices)
from . import nodes as n
from .affine import (coincidence_witness, difference, empty_panel_witness, is_zero, surely_reached, meets_everywhere,
                     never_runs, never_runs_within, out_of_range_witness, provably_negative, value_range)
from .checks import (check_declaration, check_lu_pivots, check_product_start, check_qr_replay, check_result_written,
                     check_user_reads_results)
from .diagnostics import DiagnosticBag, suggestion_notes
from .expressions import (canonical_text, constant_of, expression_nodes, is_panel, names, param_text, quoted,
                          unparse, unparse_tile)
from .kernel_module import Function
from .module_use import ModuleUse
from .scope import TYPE_NOUN, Symbol
from .source import Span
from .typer import ExpressionTyper, integer_constant, queries_geometry

TILING_DEFAULTS = {"uniform": {"nb": 256}, "hybrid": {"B": 512, "b": 128, "s": 2}}
#: Deepest nest of loops: the driver nests one Python ``for`` per loop (CPython allows 20).
MAX_LOOP_NESTING = 20


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
    guards: tuple = ()  # the (condition, taken) of the ifs around it that read the parameters only


@dataclass(frozen=True)
class ParamStep:
    """A loop's step computed from the parameters only (``step st``): the run checks it is not 0
    before it starts, as a requirement (a step of 0 would never end)."""

    step: object  # the expression
    line: int  # the loop's
    guards: tuple = ()  # the (condition, taken) of the ifs around the loop that read the parameters only


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
    kernel_module_digest: str | None  # the SHA-256 of the kernel module's bytes this check read
    float_lets: frozenset = frozenset()  # spans of the lets whose value is a float
    char_uses: tuple[CharUse, ...] = ()
    param_steps: tuple[ParamStep, ...] = ()

    def summary(self, call: n.Call) -> CallSummary:
        return next(c for c in self.calls if c.call.span == call.span)


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


def _flops_operand_range(operand) -> tuple:
    """The values a flop count's ``A.m`` or ``A.n`` (1 or more) or value parameter (any) may take."""
    return (1, math.inf) if isinstance(operand, n.Attr) else (-math.inf, math.inf)


class _Analyzer:
    """Declarations, statements and calls, in program order; expressions are :attr:`types`'s."""

    def __init__(self, file: n.File, prelude: n.File, bag: DiagnosticBag):
        self.file, self.bag = file, bag
        self.program = file.programs[0]
        self.types = ExpressionTyper(self.program, bag)
        # the typer's scope, folded values and affine forms, which the statements read too
        self.scope, self.values, self.converter = self.types.scope, self.types.values, self.types.converter
        self.module = ModuleUse(file, bag)
        self.kernels: dict[str, n.KernelDecl] = {}
        self.kernel_used: dict[str, bool] = {}
        # kernels whose parameters cannot be told apart, or named as a prelude kernel: their calls go unchecked
        self.misdeclared: set[str] = set()
        self.calls: list[CallSummary] = []
        self.unjudged: set[str] = set()  # the matrices of calls refused: whether a call writes them is unknown
        self.loops: list[n.For] = []
        self.steps: list[tuple] = []  # (loop, step: None where not constant) of each enclosing loop
        self.trips: list = []  # per enclosing loop: its constant number of iterations, or None
        self.conditions = 0
        self.guards: list = []  # (condition, branch taken) of the enclosing ifs, outermost first
        self.float_lets: set = set()
        self.tiling = "uniform"  # the program's tiling kind, once read
        self.char_uses: list[CharUse] = []
        self.param_steps: list[ParamStep] = []
        self.tiling_names: set = set()  # the names a tiling setting was written with (an error)
        self._declare_kernels(prelude.kernels + file.kernels)

    # ---------------------------------------------------------------- driver
    def run(self) -> Checked | None:
        program = self.program
        tiling = self.tiling = self.types.tiling = self._tiling(program.tiling)
        declared = (*program.params, *program.matrices, *program.workspaces)
        self.types.declarations = {d.name.text: d.name.span for d in declared}
        self._declare_params(tiling, program.params)
        for name in self.tiling_names:  # a setting written as a parameter: said there, not also as unused
            symbol = self.scope.lookup(name)
            if symbol is not None:
                symbol.used = True
        self.types.in_requirement = True  # read with the parameters: matrices are not declared yet
        for require in program.requires:
            if self.types.bool_expr(require.condition) and self.types.truth(require.condition) is False:
                self.bag.error(require.condition.span, "E209", "this requirement never holds",
                               f"{unparse(require.condition)} is false whatever the parameters: every run would "
                               f"stop here", hint="correct the condition, or drop the requirement")
        self.types.in_requirement = False
        self._declare_matrices(program.matrices, program.workspaces)
        for check in program.checks:
            check_declaration(check, self.types, has_module=bool(self.file.uses))
        for extra in program.checks[1:]:
            self.bag.error(extra.span, "E207", "the program declares a second check",
                           f"the first is at line {program.checks[0].span.line}")
        module = self.module.locate()
        self.types.in_loop_nest = True
        self._block(program.body)
        self._check_char_params(program.params)
        check_qr_replay(program.checks[:1], self.kernel_used, self.bag)
        check_lu_pivots(program.checks[:1], self.kernel_used, self.bag)
        declared = {d.name.text for d in (*program.matrices, *program.workspaces)}
        check_result_written(program.checks[:1], self.calls, self.kernel_used, declared - self.unjudged, self.bag)
        check_user_reads_results(program.checks[:1], self.calls, bool(self.file.uses), self.bag, self.unjudged)
        check_product_start(program.checks[:1], self.calls, {d.name.text: d for d in program.matrices}, self.bag,
                            self.unjudged)
        self.module.check_functions(self.kernels, self.kernel_used)
        self._report_unused()
        if self.bag.has_errors:
            return None
        return Checked(program, self.file.path, tiling, self.tiling_defaults, dict(self.kernels),
                       tuple(self.calls), module, self.module.digest, frozenset(self.float_lets), tuple(self.char_uses),
                       tuple(self.param_steps))

    # ---------------------------------------------------------------- declarations
    def _declare_kernels(self, decls):
        for decl in decls:
            name = decl.name.text
            if name in self.kernels:
                prelude = self.kernels[name].prelude
                where = "in the prelude" if prelude else f"at line {self.kernels[name].span.line}"
                self.bag.error(decl.name.span, "E207", f"kernel '{name}' is already declared {where}",
                               hint=f"call the prelude's {name} as it is, or give a kernel of your own another "
                                    f"name (my_{name}), as its function in the kernel module" if prelude else None)
                if prelude:  # its calls mean the user's kernel: the prelude's parameters would judge them wrongly
                    self.misdeclared.add(name)
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
            self._operator_word(param, decl)
            if param.name.text in seen:
                self.bag.error(param.name.span, "E207",
                               f"kernel '{decl.name.text}' has two arguments named '{param.name.text}'",
                               hint="give each argument a name of its own")
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

    def _operator_word(self, param: n.KernelParam, decl: n.KernelDecl) -> None:
        """E207 for a kernel parameter named as an operator of conditions, as the typer says it of the
        program's names: a flop count could not read it, nor a call pass it by name (the parser reads
        the operator there). (A kernel so named is E212's: no Python function is.)"""
        if param.name.text in OPERATOR_WORDS:
            kind = "tile" if param.kind == "tile" else "value"
            self.bag.error(param.name.span, "E207", f"'{param.name.text}' is an operator of conditions, and cannot "
                                                    f"name a {kind} parameter of kernel '{decl.name.text}'",
                           hint="choose another name")

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
                            f"kernel {kernel}({', '.join(map(param_text, reordered))})")
        return False

    def _check_value_param(self, param: n.KernelParam):
        """A value parameter's allowed characters and default fit its type."""
        if param.choices is not None and param.kind != "char":
            self.bag.error(param.span, "E209", f"only a char parameter lists its allowed values, "
                                               f"as a non-empty string: char {param.name.text} in \"NT\"")
        elif param.choices == "":  # a char parameter all the same: what is wrong is the list
            self.bag.error(param.span, "E209", f"the list of allowed values of char {param.name.text} is empty: it "
                                               f"must hold at least one character",
                           f"declared as {param_text(param)}",
                           hint=f"list the characters it may take (char {param.name.text} in \"NT\"), or drop "
                                f"'in \"\"' to take any one character")
        elif param.choices is not None and len(set(param.choices)) < len(param.choices):
            repeated = sorted({c for c in param.choices if param.choices.count(c) > 1})
            self.bag.error(param.span, "E209", f"char {param.name.text} lists {', '.join(map(repr, repeated))} "
                                               f"more than once: {quoted(param.choices)}",
                           hint=f"list each character once: char {param.name.text} in "
                                f"{quoted(''.join(dict.fromkeys(param.choices)))}")
        if param.kind == "float" and param.default is not None:
            self._rounded(param.default, constant_of(param.default, "int"), f"the default of '{param.name.text}'")
        if param.default is not None and constant_of(param.default, param.kind) is None:
            self.bag.error(param.default.span, "E205", f"the default of {param.kind} parameter "
                                                       f"'{param.name.text}' must be {TYPE_NOUN[param.kind]} constant")
        elif param.default is not None and param.kind == "char":
            self._check_char(param.default, param)

    def _rounded(self, value, integer: int | None, where: str) -> None:
        """W307 where ``integer``, the constant value of ``value`` given as a float (``where``), is no
        float64: the kernel gets the nearest one, as a matrix's element it would be refused."""
        if integer is None or abs(integer) > 2 ** 1023 or float(integer) == integer:
            return  # (past float64's range: E211 where the value is folded)
        self.bag.warning(value.span, "W307", f"{where} is a float, and float64 does not hold the integer {integer} "
                                             f"exactly: the kernel gets {float(integer)!r}",
                         "integers past 2**53 are not all float64s",
                         hint=f"write {float(integer)!r} to pass that value")

    def _check_char(self, value: n.StrLit, param: n.KernelParam) -> None:
        if not self.types.one_character(value, param.choices):
            return
        if param.choices and value.value not in param.choices:  # none listed: E209 said so
            choices = ", ".join(map(quoted, param.choices))  # as the language writes a char: "L"
            # BLAS takes either case of its options; the prelude's kernels, as written: 'N', not 'n'
            hint = f"did you mean {quoted(value.value.upper())}?" if value.value.upper() in param.choices else None
            self.bag.error(value.span, "E205", f"{param.name.text} must be one of {choices}, got {quoted(value.value)}",
                           hint=hint)

    def _check_flops(self, decl: n.KernelDecl):
        """``flops EXPR``: a number from the shapes (``A.m``, ``A.n``) and values of the arguments."""
        self.scope.frames.append({p.name.text: Symbol("argument" if p.kind == "tile" else "value", p.name.span, p,
                                                      used=True, type=p.kind if p.kind != "tile" else "tile")
                                  for p in decl.params})
        self.types.flops_of = decl
        typed = self.types.number_expr(decl.flops)
        form = self.types.number_form(decl.flops) if typed else None
        self.types.flops_of = None
        self.scope.frames.pop()
        if form is not None and provably_negative(form):
            constant = not any(value for symbol, value in form.items() if symbol)
            value = form[""] if constant else None
        else:  # a float in it (-1.0 * A.m) has no form: its bounds over the shapes may still tell
            bounds = value_range(decl.flops, _flops_operand_range) if typed else None
            if bounds is None or bounds[1] >= 0:
                return
            value = bounds[1] if bounds[0] == bounds[1] else None
        self.bag.error(decl.flops.span, "E205", f"kernel {decl.name.text}'s flop count is "
                                                + (f"{value:g}, below zero" if value is not None else "below zero"),
                       *(() if value is not None else (f"{unparse(decl.flops)} is below zero whatever the arguments "
                                                       f"(tiles of one row and column or more)",)),
                       hint="a flop count is 0 or more: the floating-point operations of one call")

    def _tiling(self, decl: n.TilingDecl | None) -> str:
        kind = decl.kind.text if decl else "uniform"
        if kind not in TILING_SETTINGS:
            self.bag.error(decl.kind.span, "E209", f"unknown tiling '{kind}'", *suggestion_notes(kind, TILING_SETTINGS),
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
        if valid and kind == "hybrid" and not hybrid_slices_fit(d["B"], d["b"], d["s"]):
            self._hybrid_slices_unfit(decl, [name for name in ("b", "s", "B") if name not in seen])
        return kind

    def _hybrid_slices_unfit(self, decl: n.TilingDecl, defaulted: list) -> None:
        """E209 for hybrid settings whose last slice is empty. Where some are the defaults (``tiling
        hybrid(B = 64)``: b = 128 and s = 2), a note says which, and the hint a value of one of them
        that fits: the message's values read as the program's own, which wrote B alone."""
        d = self.tiling_defaults
        message = f"hybrid tiling needs (s - 1)·b < B, got s={d['s']}, b={d['b']}, B={d['B']}"
        # a value that fits for each setting left to its default: b = B // s (even slices; none when B < s),
        # s = the most slices of width b, B = s·b
        fits = {"b": d["B"] // d["s"], "s": most_slices(d["B"], d["b"]), "B": d["s"] * d["b"]}
        notes = (f"{' and '.join(f'{other} = {d[other]}' for other in defaulted)} by default",) if defaulted else ()
        # b first, then B: one slice (s = 1) is no hybrid tiling
        name = next((name for name in ("b", "B", "s") if name in defaulted and fits[name] >= 1), None)
        if name is None:  # all written, or what was written cannot fit whatever the default (B = 1, s = 3)
            self.bag.error(decl.span, "E209", message, *notes, hint="the last slice of every block would be empty")
            return
        written = [f"{setting.name.text} = {d[setting.name.text]}" for setting in decl.settings]
        others = [other for other in defaulted if other != name]
        self.bag.error(decl.span, "E209", message, *notes,
                       hint=f"the last slice of every block would be empty: give {name}"
                            + (f" (or {' or '.join(others)})" if others else "")
                            + f", as in tiling hybrid({', '.join(written + [f'{name} = {fits[name]}'])})")

    def _tiling_setting(self, kind: str, setting: n.Setting) -> bool:
        """Take one tiling setting; False (said as an error) for one the tiling does not have or takes
        no such value for."""
        name = setting.name.text
        if name not in TILING_SETTINGS[kind]:
            allowed = ", ".join(TILING_SETTINGS[kind])
            self.bag.error(setting.name.span, "E209", f"'{name}' is not a setting of {kind} tiling",
                           hint=f"{kind} tiling takes {allowed}")
            return False
        value = integer_constant(setting.value)
        if value is None or value < 1:
            written = sorted(set(names(setting.value)))
            self.tiling_names.update(written)
            named = [f"{', '.join(map(repr, written))} {'is a name' if len(written) == 1 else 'are names'}: a "
                     f"setting is a number, the program's default"] if written else []
            example = f"{name} = {_SETTING_EXAMPLES[name]}"
            self.bag.error(setting.value.span, "E209", f"{name} must be a positive integer constant", *named,
                           hint=f"write a number (e.g. {example}); a run chooses another with --{name} VALUE "
                                f"(tiles={{'{name}': VALUE}} from Python)" if value is None else
                           f"{_SETTING_HOLDS[name]}: write a positive number (e.g. {example})")
            return False
        self.tiling_defaults[name] = value
        return True

    def _declare_params(self, tiling: str, params):
        for name in ("n",) + TILING_SETTINGS[tiling]:
            self.scope.frames[0][name] = Symbol("param", None, used=False)
        for decl in params:
            if isinstance(decl.default, n.StrLit):  # a char parameter: a kernel option chosen at run time
                kind = "char"
                self.types.one_character(decl.default)
            else:
                kind = self._param_type(decl)
            self.types.declare(decl.name, Symbol("param", decl.name.span, decl, type=kind))

    def _param_type(self, decl) -> str | None:
        """The type of a parameter whose default is an expression: a number's, or None after an error."""
        got = self.types.type_of(decl.default)
        if got != "char":
            return self.types.as_number(got, decl.default)
        self.bag.error(decl.default.span, "E205", "a char parameter's default is one character in quotes",
                       hint=f"a char parameter does not copy another: write `param {decl.name.text} = \"L\"` "
                            f"(say), or pass `{decl.default.ident.text}` itself" if isinstance(decl.default, n.Name)
                       else None)
        return "char"

    def _declare_matrices(self, matrices, workspaces):
        for decl in matrices:
            before = len(self.bag.items)
            for dimension in (decl.rows, decl.cols):
                self._size_expr(dimension, f"dimension of matrix '{decl.name.text}'")
            self._check_init(decl.init)
            if len(self.bag.items) == before:
                self._check_square(decl)
            self.types.declare(decl.name, Symbol("matrix", decl.name.span, decl))
        workspace_names = {w.name.text for w in workspaces}
        for decl in workspaces:
            if decl.like.text in workspace_names:  # itself, or one declared before or after: never a matrix
                itself = decl.like.text == decl.name.text
                matrix = next((m for m in matrices if m.name.text == decl.like.text), None) if itself else None
                if matrix is not None:  # `workspace A like A`: the matrix was meant, the workspace's name clashes
                    notes = (f"'{decl.like.text}' is also the matrix declared at line {matrix.span.line}, and "
                             f"'like {decl.like.text}' names the workspace itself",)
                    hint = (f"give the workspace a name of its own: workspace {self._free_name(decl)} like "
                            f"{decl.like.text} rows {unparse(decl.rows)}")
                else:
                    notes = ()
                    hint = f"name the matrix whose tile rows it follows: workspace {decl.name.text} like A rows ..."
                self.bag.error(decl.like.span, "E209", f"workspace '{decl.name.text}' must be like a matrix, not "
                                                       + ("itself" if itself else "a workspace"), *notes, hint=hint)
            else:
                self.types.matrix(decl.like)
            self._size_expr(decl.rows, f"tile height of workspace '{decl.name.text}'")
            self.types.declare(decl.name, Symbol("workspace", decl.name.span, decl))

    def _free_name(self, decl: n.WorkspaceDecl) -> str:
        """A name no declaration of the program takes, for the hint of a workspace named like its matrix."""
        program = self.program
        taken = {d.name.text for d in (*program.params, *program.matrices, *program.workspaces)}
        taken |= {"n", *TILING_SETTINGS[self.tiling]}
        like = decl.like.text
        return next(name for name in ("W", "T", "V", f"{like}_work", *(f"{like}_work{i}" for i in range(2, 10**6)))
                    if name not in taken)

    def _size_expr(self, expr, what: str):
        """A size: an integer expression of parameters only (no geometry queries), at least 1
        where it is a constant."""
        if self.types.int_expr(expr) and queries_geometry(expr):
            self.bag.error(expr.span, "E209", f"the {what} may use parameters only",
                           hint="geometry queries such as A.mt exist only once matrices are tiled")
        value = self.values.get(id(expr))
        if value is not None and value < 1:
            self.bag.error(expr.span, "E209", f"the {what} must be at least 1, got {value}")
            return
        form = self.converter.form(expr) if value is None else None
        if form is not None and provably_negative(difference(form, {"": 1})):  # `n - n`, `0 * n`: every run fails
            self.bag.error(expr.span, "E209", f"the {what} must be at least 1, and {unparse(expr)} is below 1 "
                                              f"whatever the sizes")

    def _check_init(self, init: n.Init):
        if init.kind == "load" and not init.path:
            self.bag.error(init.span, "E209", "load names no file", hint='name the .npy file: load "file.npy"')
        if init.kind == "load" and "\0" in (init.path or ""):
            self.bag.error(init.span, "E209", "the file name of load holds a NUL character (\\x00), which no file "
                                              "name may hold")
        if init.kind == "random" and init.what.text not in RANDOM_KINDS:
            self.bag.error(init.what.span, "E209", f"unknown random matrix kind '{init.what.text}'",
                           *suggestion_notes(init.what.text, RANDOM_KINDS),
                           hint=f"use one of {', '.join(RANDOM_KINDS)}")
        if init.kind == "named" and init.what.text not in NAMED_INITS:
            self.bag.error(init.what.span, "E209", f"unknown matrix initialiser '{init.what.text}'",
                           *suggestion_notes(init.what.text, NAMED_INITS),
                           hint=f"use 'random {'|'.join(RANDOM_KINDS)}', {', '.join(NAMED_INITS)} or load \"file.npy\"")

    def _check_square(self, decl: n.MatrixDecl):
        """``random spd`` of a matrix whose rows and columns differ whatever the sizes."""
        init = decl.init
        if init.kind != "random" or init.what.text not in SQUARE_KINDS or not self.types.never_square(decl):
            return  # square, or only the run can tell: it refuses a matrix that is not
        self.bag.error(init.span, "E209",
                       f"random {init.what.text} needs a square matrix, but '{decl.name.text}' is "
                       f"{unparse(decl.rows)} × {unparse(decl.cols)}",
                       "its numbers of rows and columns differ whatever the sizes",
                       hint="use 'random general' or 'random diagdom' for a matrix that is not square")

    def _check_char_params(self, params) -> None:
        """A char parameter can pass the run's checks: some character is among those of every kernel
        parameter it is passed to, and its default is one of them (E205 otherwise)."""
        for decl in params:
            first: dict = {}  # the first use of the parameter for each kernel parameter with choices
            for use in self.char_uses:
                # under an `if` of parameters the run checks it where the `if` holds; under one of loop
                # variables only, at every run (whether the branch is ever taken is not known before it)
                if use.name == decl.name.text and use.choices and not use.guards:
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
                                                          f"{quoted(default)}, is not a value every use of it accepts",
                               *(_char_use_note(use) for use in first.values() if default not in use.choices),
                               hint=f"default to one of {', '.join(map(quoted, sorted(common)))}")

    def _report_unused(self):
        read_by_check = self.module.check_reads_params()
        for name, symbol in self.scope.frames[0].items():
            if not symbol.used and symbol.span is not None and not (symbol.kind == "param" and read_by_check):
                self.bag.warning(symbol.span, "W300", f"{symbol.kind} '{name}' is declared but never used")
        for name, used in self.kernel_used.items():
            decl = self.kernels[name]
            if not used and not decl.prelude:
                self.bag.warning(decl.name.span, "W300", f"kernel '{name}' is declared but never called")

    # ---------------------------------------------------------------- statements
    def _block(self, stmts, inside: str | None = None):
        """Check a block's statements; ``inside`` names the block ("the 'if' block at line 3") for
        the note of a let used after it."""
        self.scope.frames.append({})
        self.types.block_lets.append({stmt.name.text: stmt.name.span for stmt in stmts if isinstance(stmt, n.Let)})
        for stmt in stmts:
            getattr(self, "_" + type(stmt).__name__.lower())(stmt)
        self.types.block_lets.pop()
        for name, symbol in self.scope.frames.pop().items():
            if symbol.kind == "let" and not symbol.used:
                self.bag.warning(symbol.span, "W300", f"let '{name}' is declared but never used")
            if inside is not None:
                self.types.ended[name] = (symbol, inside)

    def _for(self, stmt: n.For):
        self.types.loop_header = stmt  # its variable named in its bounds or step is told why it is unknown there
        for bound in (stmt.start, stmt.stop):
            if self.types.int_expr(bound) and not self.types.affine(bound):
                self.bag.error(bound.span, "E206", "loop bound is not affine in the loop variables",
                               *self.types.let_notes(bound, lambda let: not let.affine,
                                                     "not affine in the loop variables"),
                               "bounds may add, subtract, take min/max and multiply by loop-invariant values",
                               hint="'//', '%', '**', products of loop variables and geometry queries on them "
                                    "belong in tile indices, steps or 'if' conditions")
        step = self._step(stmt)
        self.types.loop_header = None
        trips = self._check_trip_count(stmt, step)
        if len(self.loops) == MAX_LOOP_NESTING:
            self.bag.error(_keyword(stmt), "E101", f"loops nested more than {MAX_LOOP_NESTING} deep",
                           f"the generated driver is Python, which nests at most {MAX_LOOP_NESTING} loops",
                           hint="merge loops, or compute indices from fewer loop variables")
        self.scope.frames.append({})
        self.types.declare(stmt.var, Symbol("loop", stmt.var.span, stmt, used=True))
        self.loops.append(_visited_range(stmt, step))
        self.trips.append(trips)
        self.steps.append((stmt, step))
        loop = f"the 'for' loop at line {stmt.span.line}"
        self._block(stmt.body, f"the block of {loop}")
        self.trips.pop()
        self.loops.pop()
        self.steps.pop()
        for name, symbol in self.scope.frames.pop().items():
            self.types.ended[name] = (symbol, loop)

    def _step(self, stmt: n.For) -> int | None:
        """The loop's step when it is a constant (1 when none is written); None for a step the run
        computes (``step 2 ** l``: nothing is proved about the loop, and a zero stops the run), or
        after an error: the step is a nonzero integer."""
        if stmt.step is None:
            return 1
        kind = self.types.number_expr(stmt.step)
        value = self.values.get(id(stmt.step))
        form = self.converter.form(stmt.step) if value is None and kind == "int" else None
        if form is not None and is_zero(form):  # 'n - n': 0 whatever the sizes
            value = 0
        if kind == "float" or value == 0:
            why = "a loop that would never end" if value == 0 else "which is not an integer"
            self.bag.error(stmt.step.span, "E206", "a loop's step is a nonzero integer",
                           f"found {unparse(stmt.step)}, {why}", *self.types.float_let_notes(stmt.step),
                           hint="use '//' for integer division" if self.types.divides(stmt.step) else None)
        if value is None and kind == "int" and self._of_parameters(stmt.step):
            self.param_steps.append(ParamStep(stmt.step, stmt.span.line, self._parameter_guards()))
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

    def _parameter_guards(self) -> tuple:
        """The (condition, taken) of the ``if``s around this point whose conditions read the parameters
        only (as a requirement does): a run can test them before it starts."""
        def conjuncts(cond):  # `side != "N" and k >= 1`: its first part holds wherever the call is made
            if isinstance(cond, n.Binary) and cond.op == "and":
                return conjuncts(cond.left) + conjuncts(cond.right)
            return [cond]
        return tuple((part, True) if taken else (cond, False) for cond, taken in self.guards
                     for part in (conjuncts(cond) if taken else [cond]) if self._of_parameters(part))

    def _of_parameters(self, expr) -> bool:
        """Whether ``expr`` reads the parameters only (no loop variable, let or matrix's size)."""
        return not queries_geometry(expr) and all(
            (self.scope.lookup(name) or Symbol("", None)).kind == "param" for name in names(expr))

    def _if(self, stmt: n.If):
        self.types.bool_expr(stmt.cond)
        self.conditions += 1
        names = (f"the 'if' block at line {stmt.span.line}", f"the 'else' block of the 'if' at line {stmt.span.line}")
        for taken, block, name in ((True, stmt.then, names[0]), (False, stmt.orelse, names[1])):
            self.guards.append((stmt.cond, taken))
            self._block(block, name)
            self.guards.pop()
        self.conditions -= 1

    def _let(self, stmt: n.Let):
        said = len(self.bag.items)
        kind = self.types.number_expr(stmt.value)
        ok = kind == "int"
        # facts about the value are taken now, from those of earlier lets: never re-expanded
        symbol = Symbol("let", stmt.name.span, stmt, loops=self.types.loop_variables(stmt.value), type=kind)
        if kind == "float":
            self.float_lets.add(stmt.span)
        symbol.affine = not ok or self.types.affine(stmt.value)
        symbol.form = (self.converter.form(stmt.value) or self.converter.opaque(stmt.name)) if ok else None
        symbol.value = self.types.folded(stmt.value)
        symbol.used = any(d.is_error for d in self.bag.items[said:])  # a value refused: "never used" is noise
        self.types.declare(stmt.name, symbol)

    def _release(self, stmt: n.Release):
        said = len(self.bag.items)
        self._tile(stmt.tile, verb="release")
        if len(self.bag.items) == said:  # a tile the program can name: is it in its matrix?
            self._check_ranges((stmt.tile,))
        if stmt.tile.rows is not None or stmt.tile.cols is not None:
            self.bag.error(stmt.tile.span, "E205", "release takes a tile or a panel, not a part of a tile",
                           hint=f"release the whole tile: release {stmt.tile.matrix.text}[{unparse(stmt.tile.row)}, "
                                f"{unparse(stmt.tile.col)}]")

    def _declaration_hint(self, name: str) -> str:
        """How to declare an unknown kernel: as the function of that name the kernel module defines
        (its parameters, each a tile to give a mode), else in general."""
        definitions = self.module.definitions
        functions = [b for b in definitions.of(name) if isinstance(b, Function)] if definitions else []
        if not functions:
            return "declare it with 'kernel NAME(in A, inout B)' and name its module with 'use \"kernels.py\"'"
        params = [arg.arg for arg in functions[0].arguments.posonlyargs + functions[0].arguments.args]
        module = self.file.uses[0].path
        return (f"{module} defines {name}: declare it with 'kernel {name}({', '.join(f'inout {p}' for p in params)})', "
                f"each tile's mode in, out or inout (a value parameter: int, float or char)")

    def _call(self, stmt: n.Call):
        summary = self._call_summary(stmt)
        if summary is not None:
            self.calls.append(summary)
        else:  # refused (said as an error), or a kernel that writes nothing: which matrices it writes is unknown
            self.unjudged.update(arg.matrix.text for arg in (*stmt.args, *(keyword.value for keyword in stmt.keywords))
                                 if isinstance(arg, n.TileRef))

    def _call_summary(self, stmt: n.Call) -> CallSummary | None:
        """What the call reads and writes, after judging its arguments; None where it cannot be
        judged, the reason said."""
        name = stmt.kernel.text
        for arg in (*stmt.args, *(keyword.value for keyword in stmt.keywords)):
            if isinstance(arg, n.TileRef):
                self._tile(arg)
            elif self._matrix_named(arg) is None:  # a matrix's name is judged against its parameter
                self.types.type_of(arg)
        if stmt.priority is not None:
            self.types.int_expr(stmt.priority)
        decl = self.kernels.get(name)
        if decl is None:
            self.bag.error(stmt.kernel.span, "E201", f"unknown kernel '{name}'",
                           *suggestion_notes(name, self.kernels), hint=self._declaration_hint(name))
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
        accesses = tuple(Access(arg, _moved_mode(param.mode, arg), self.types.tile_depends(arg))
                         for param, arg in bound if param.kind == "tile" and isinstance(arg, n.TileRef))
        values = tuple((param.name.text, arg) for param, arg in bound if param.kind != "tile")
        self._check_written(name, accesses)
        self._check_ranges(access.tile for access in accesses)
        main = next((i for i, a in enumerate(accesses) if a.mode in WRITE_MODES), None)
        if main is None or not fits:
            return None  # a kernel that writes nothing: E210 at its declaration
        order = "".join("t" if p.kind == "tile" else "v" for p in decl.params)
        return CallSummary(stmt, decl, accesses, main, self.conditions > 0, values, order if values else "")

    def _bind_arguments(self, stmt: n.Call, decl: n.KernelDecl):
        """Pair every parameter of ``decl`` with its argument (positional, then by name, then its
        default): ``([(param, argument)], whether every argument fits its parameter)``, or
        ``(None, False)`` after reporting why the arguments cannot be paired."""
        name, params = stmt.kernel.text, decl.params
        signature = f"declared as {name}({', '.join(param_text(p) for p in params)})"
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
                # (tester x: priority = 3 among the arguments)
                hint = (f"a call's priority follows its parentheses: {name}(...) priority ..." if word == "priority"
                        else None)
                self.bag.error(keyword.name.span, "E202", f"{name} has no parameter '{word}'",
                               *suggestion_notes(word, [p.name.text for p in params if p.kind != "tile"]), signature,
                               hint=hint)
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
            if isinstance(arg, n.Func) and self._matrix_named(n.Name(arg.func, arg.func.span)):
                return False  # A(i, j): E200 says how a tile is written
            if not isinstance(arg, n.TileRef):
                matrix = self._matrix_named(arg) or "A"
                self.bag.error(arg.span, "E205", f"{where} is a tile: pass {matrix}[i, j] or a range "
                                                 f"{matrix}[i0 : i1, j]")
                return False
            return True
        if isinstance(arg, n.TileRef):
            self.bag.error(arg.span, "E205", f"{where} is {TYPE_NOUN[param.kind]} value, not a tile")
            return False
        if param.kind == "char" and isinstance(arg, n.Name) and len(arg.ident.text) == 1 \
                and self.scope.lookup(arg.ident.text) is None:  # L for "L"
            self.bag.error(arg.span, "E200", f"unknown name '{arg.ident.text}'",
                           hint=f'{where} is a char: write "{arg.ident.text}", in double quotes')
            return False
        got = self.types.type_of(arg)
        if got is None:
            return False
        if param.kind == "char":
            if isinstance(arg, n.Name) and got == "char":  # a char parameter: its value is checked at run time
                self.char_uses.append(CharUse(arg.ident.text, param.choices, f"{kernel}'s {param.name.text}", arg.span,
                                              self._parameter_guards()))
                return True
            if not isinstance(arg, n.StrLit):
                self.bag.error(arg.span, "E205", f"{where} is a char: pass a one-character string such as "
                                                 f"\"N\", or a char parameter")
                return False
            before = len(self.bag.items)
            self._check_char(arg, param)
            return len(self.bag.items) == before
        if got == param.kind or (param.kind == "float" and got == "int"):
            if param.kind == "float" and got == "int":  # an int parameter gets the integer itself (tester z80d)
                self._rounded(arg, self.types.values.get(id(arg)), where)
            return True
        if isinstance(arg, n.StrLit) and len(arg.value) != 1:  # "1.5" is no char, but a string
            number = _number_text(arg.value)
            self.bag.error(arg.span, "E205", f"{where} is {TYPE_NOUN[param.kind]}, found the string \"{arg.value}\"",
                           hint=f"write {number} without quotes" if number else None)
            return False
        self.bag.error(arg.span, "E205", f"{where} is {TYPE_NOUN[param.kind]}, found {TYPE_NOUN[got]}",
                       *self.types.float_let_notes(arg),
                       hint="use '//' for integer division" if self.types.divides(arg) else None)
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
                    first.tile, second.tile, self.loops, self.converter, self.guards)
                if same == "":
                    panel = is_panel(second.tile)  # a panel's sub-range is an error of its own (E209)
                    parts = not panel and any(t.rows is not None or t.cols is not None
                                              for t in (first.tile, second.tile))
                    self.bag.error(second.tile.span, "E204",
                                   f"{'panel' if panel else 'tile'} {_tile_text(second.tile)} is passed twice to "
                                   f"{kernel} and one of them is written",
                                   arguments, hint="sub-ranges of one tile count as that tile, disjoint or not: "
                                                   "give a kernel of your own the tile once, with the rows as values"
                                   if parts else None)
                elif same is not None and (is_panel(first.tile) or is_panel(second.tile)):
                    self.bag.error(second.tile.span, "E204",
                                   f"{_tile_text(first.tile)} and {_tile_text(second.tile)} can share a tile, "
                                   f"passed to {kernel} where one of them is written",
                                   arguments, f"they share a tile {same}",
                                   hint="change a range or a loop bound" + _or_guard(same) + " so that they never meet")
                elif same is not None:
                    self.bag.error(second.tile.span, "E204",
                                   f"tiles {_tile_text(first.tile)} and {_tile_text(second.tile)} can be the same tile, "
                                   f"passed twice to {kernel} where one of them is written",
                                   arguments, f"they are the same tile {same}",
                                   hint="change a loop bound" + _or_guard(same) + " so that they never coincide")

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
                found = out_of_range_witness(tile, self.loops, self.converter, self.guards)
                if found:
                    witness, index = found
                    # a panel's last tile below 0: its stop is at most 0, so it holds no tile (a start that is
                    # no affine form, max(k - 1, 0), left the empty-panel proof without its difference)
                    panel = next((part for part in panels if index is not part.start and index.span == part.stop.span
                                  and "(below 0)" in witness), None)
                    if panel is not None:
                        when = witness.partition(" when ")[2]
                        self.bag.error(given.span, "E208", f"empty panel {_tile_text(given)}",
                                       f"the panel {unparse(panel.start)} : {unparse(panel.stop)} holds no tile"
                                       + (f" when {when}" if when else ""))
                    else:
                        hint = self._counting_down_hint(witness, index) or _range_hint(given.matrix.text, witness)
                        self.bag.error(index.span, "E208", f"tile index out of range in {_tile_text(given)}", witness,
                                       hint=hint)
                    break
                found = self._several_slices(tile)
                if found:
                    sliced, index = found
                    self.bag.warning(index.span, "W303", f"tile index out of range in {_tile_text(given)} at s = "
                                                         f"{self.tiling_defaults['s']}", sliced,
                                     f"{tile.matrix.text}.mt counts {tile.matrix.text}'s blocks of rows and "
                                     f"{tile.matrix.text}.nt its slices of columns, s a block: the index is in "
                                     f"range at s = 1 only",
                                     hint=f"tile rows count to {tile.matrix.text}.mt, tile columns to "
                                          f"{tile.matrix.text}.nt")
                    break

    def _counting_down_hint(self, witness: str, index: n.Expr) -> str | None:
        """Where a loop counting down reaches the bad ``index``, its own variable (tester x: `for m in A.mt .. k
        step -1`, as a range counts up, starts past the last tile): how such a loop's bounds go, the end the
        witness reaches moved in by one (tester j53: moving both, `A.nt .. -1 step -1` was told `A.nt - 1 .. -2`,
        which reached -1); a number it stops at may have been meant as its last value (tester u83e: `A.nt .. 0`
        was told only of `A.nt - 1 .. 0`, which stops at 1). An index off the variable (`k - 1`) is no sign of
        the loop's bounds: the tile ranges are said."""
        down = [(loop, step) for loop, step in self.steps if step is not None and step < 0
                and re.search(rf"\b{re.escape(loop.var.text)} = ", witness)]
        if not down or down[0][1] != -1 or not (isinstance(index, n.Name) and index.ident.text == down[0][0].var.text):
            return None  # (a longer step: moving an end by one fixes nothing, tester q66)
        loop = down[0][0]
        at_first = re.search(rf"\b{re.escape(loop.var.text)} = {re.escape(unparse(loop.start))}(,|$)", witness)
        first, stop = (_shifted(loop.start, -1), loop.stop) if at_first else (loop.start, _shifted(loop.stop, 1))
        hint = (f"a loop counting down starts at its first value and stops before its stop: `for {loop.var.text} in "
                f"{unparse(first)} .. {unparse(stop)} step -1` visits {unparse(first)} down to "
                f"{unparse(_shifted(stop, 1))}")
        last = integer_constant(loop.stop)
        if at_first and last is not None and last >= 0:
            hint += f", and `{unparse(first)} .. {last - 1} step -1` down to {last}"
        return hint

    def _several_slices(self, tile: n.TileRef) -> tuple[str, n.Expr] | None:
        """Why ``tile`` leaves its matrix under the program's hybrid tiling of s ≥ 2 slices a block,
        where it is in range at s = 1 only (so no error whatever the settings): a uniform tiling's
        loop over A.nt kept for tile rows; and the index that leaves it."""
        if self.tiling != "hybrid" or self.tiling_defaults.get("s", 1) < 2:
            return None
        return out_of_range_witness(tile, self.loops, self.converter, self.guards, several_slices=True)

    # ---------------------------------------------------------------- tiles
    def _tile(self, tile: n.TileRef, verb: str = "pass"):
        """Type a tile reference of a call (``verb``: pass) or a release."""
        self.types.matrix(tile.matrix)
        for index in (tile.row, tile.col):
            for end in (index.start, index.stop) if isinstance(index, n.Range) else (index,):
                self.types.int_expr(end)
        ranges = [index for index in (tile.row, tile.col) if isinstance(index, n.Range)]
        if len(ranges) == 2:
            self.bag.error(ranges[1].span, "E209", "a panel is a range of tiles along one index",
                           hint=f"{verb} a column of tiles A[i0 : i1, j] or a row A[i, j0 : j1]")
        if ranges and (tile.rows is not None or tile.cols is not None):
            self.bag.error(tile.span, "E209", "a panel of tiles takes no sub-range",
                           hint="release whole tiles (copies are whole tiles)" if verb == "release" else
                           "pass whole tiles, or a tile A[i, j][r0 : r1] one at a time")
        for part, what in ((tile.rows, "rows"), (tile.cols, "columns")):
            for end in (part.start, part.stop) if part else ():
                if end is not None:
                    self.types.int_expr(end)
            if part and not ranges:  # (a panel's sub-range is wrong as a whole, E209 above: no more said of it)
                self._check_constant_part(part, what, tile)
                self._check_part_within_tiles(tile, part, what)

    def _check_constant_part(self, part, what: str, tile: n.TileRef) -> None:
        """E208 for a sub-range whose ends leave every tile: a negative literal end, or ends reversed
        whatever the sizes, parameters and loop variables (``[z + 2 : z + 1]``: stop − start < 0)."""
        for end in (part.start, part.stop):
            value = None if end is None else constant_of(end, "int")
            form = None if end is None or value is not None else self.converter.form(end)
            if value is not None and value < 0 or form is not None and provably_negative(form):
                # a literal, or an end below 0 whatever its names' values (0 - 1, a let h = 0 - 1)
                got = value if value is not None else self.converter.render(form)
                name, index = tile.matrix.text, unparse(tile.row if what == "rows" else tile.col)
                size = f"{name}.height({index})" if what == "rows" else f"{name}.width({index})"
                self.bag.error(end.span, "E208", f"a sub-range's {what} count from 0, got {got}",
                               hint=f"not from the end, as Python's do: the last is {size} - 1")
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
            # past the widest tile for every size and setting (B + b, B + s) and every loop value reaching it
            beyond = None if form is None else surely_reached(difference(form, {widest: 1}), self.loops,
                                                                 self.converter, self.guards)
            if beyond is not None and beyond >= 1:
                self.bag.error(end.span, "E208", f"the sub-range {verb} {self.converter.render(form)}, past every "
                                                 f"tile: a tile has at most {widest} {what}",
                               hint=(f"end it at {widest} at most: the end is excluded, so [0 : {widest}] is all "
                                     f"the {what} of a full tile (a tile at the edge has fewer)" if verb == "ends at"
                                     else f"its {what} count from 0 to {widest} - 1 (a tile at the edge has fewer)"))
                return



# ---------------------------------------------------------------- helpers
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
                # (the last tile's index is where its stop is written: a diagnostic points there)
                part = part.start if first else n.Binary("-", part.stop, n.IntLit(1, part.stop.span), part.stop.span)
            index.append(part)
        ends.append(n.TileRef(tile.matrix, index[0], index[1], None, None, tile.span))
    return ends


def _moved_mode(mode: str, tile: n.TileRef) -> str:
    """An ``out`` argument naming a sub-range leaves the rest of its tile as it was: where the
    task runs on another rank or device the whole tile goes there and back, as for ``inout``
    (a zeroed buffer going home would wipe the rest)."""
    return "inout" if mode == "out" and (tile.rows is not None or tile.cols is not None) else mode


def _char_use_note(use: CharUse) -> str:
    return f"it is passed as {use.where} at line {use.span.line}: one of {', '.join(map(quoted, use.choices))}"


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


def _keyword(stmt: n.For) -> Span:
    """The span of a loop's ``for``."""
    span = stmt.span
    return Span(span.path, span.line, span.column, span.line, span.column + 3)


def _shifted(expr, delta: int):
    """``expr + delta``, folded into a trailing integer (``A.nt - 1`` moved by 1 is ``A.nt``)."""
    span = getattr(expr, "span", None)
    if isinstance(expr, n.IntLit):
        return n.IntLit(expr.value + delta, span)
    if isinstance(expr, n.Unary) and expr.op == "-" and isinstance(expr.operand, n.IntLit):
        return n.IntLit(-expr.operand.value + delta, span)
    if isinstance(expr, n.Binary) and expr.op in ("+", "-") and isinstance(expr.right, n.IntLit):
        total = (expr.right.value if expr.op == "+" else -expr.right.value) + delta
        if total == 0:
            return expr.left
        return n.Binary("+" if total > 0 else "-", expr.left, n.IntLit(abs(total), span), span)
    return n.Binary("+" if delta > 0 else "-", expr, n.IntLit(abs(delta), span), span)


#: a tiling setting's example value in hints, one that fits the others' examples ((s - 1)·b < B)
_SETTING_EXAMPLES = {"nb": 256, "B": 512, "b": 128, "s": 2}
#: why a tiling setting is at least 1 (tester u83e: s = 0 was told "a tile holds at least one row ... s = 256")
_SETTING_HOLDS = {"nb": "a tile holds at least one row", "B": "a block holds at least one row",
                  "b": "a slice holds at least one column", "s": "a block holds at least one slice"}


def _range_hint(matrix: str, witness: str) -> str:
    """How the tile indices of ``matrix`` go, for an index out of range (``witness``: where it is)."""
    ranges = f"{matrix}'s tile rows are 0 .. {matrix}.mt - 1 and its tile columns 0 .. {matrix}.nt - 1"
    return f"{ranges}: bound the loop by them, or put the call under an if that keeps the index in" \
        if " when " in witness else ranges


def _tile_text(tile: n.TileRef) -> str:
    """The tile an argument names, without its sub-range: parts of one tile count as that tile."""
    return unparse_tile(replace(tile, rows=None, cols=None))


def _or_guard(witness: str) -> str:
    """An 'if' around the call, in E204's hint, where it can part the arguments."""
    return "" if meets_everywhere(witness) else ", or guard the call with 'if',"


def _same_tile(a: n.TileRef, b: n.TileRef) -> bool:
    return a.matrix.text == b.matrix.text and all(canonical_text(x) == canonical_text(y)
                                                  for x, y in ((a.row, b.row), (a.col, b.col)))


def _number_text(text: str) -> str | None:
    """``text`` where it is a number as the language writes one (a float or int argument quoted:
    ``"1.5"``), else None."""
    text = text.strip()
    return text if _NUMBER.fullmatch(text) else None


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
