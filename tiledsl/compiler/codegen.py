"""Checked program -> render model -> Python driver text (jinja2 template).

The render model is plain data: the program's static description and the lines of
its ``generate`` function. Statements become Python loops; every kernel call becomes
an ownership test (ranks of its tiles, hoisted to the innermost loop or ``let`` that
their indices depend on, never above an ``if``) guarding one ``submit``; a rank
that takes no part in a task only counts the versions of the tiles it writes
(the protocol matches messages by tile version). For an affine loop nest
(:mod:`.dataflow`) loops run over ``_among`` (the values that can lead to this
rank's tasks), every call and release passes its schedule key, and ``dataflow()``
describes the writes and releases, so that a rank of a run need not walk the rest. User identifiers come from the
grammar (``[A-Za-z_][A-Za-z0-9_]*``); any that could clash with Python keywords,
builtins or the driver's own names are renamed, and strings are emitted with
``repr``: nothing from a ``.tile`` file becomes code any other way.
"""
from __future__ import annotations

import builtins
import json
import keyword
import os
import posixpath
import re
import shlex
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import jinja2

from .. import __version__
from ..drivercontract import DRIVER_FORMAT, program_folder, source_digest
from ..language import TILING_SETTINGS
from . import nodes as n
from . import dataflow
from .analysis import Checked
from .checks import CHECK_ARITY
from .expressions import canonical_text, constant_of, expression_nodes, is_panel, precedence, unparse, unparse_tile
from .parser import room_for_depth

INDENT = "    "
# Python's words, and every name the driver module itself defines or imports
_RESERVED = (set(keyword.kwlist) | set(keyword.softkwlist) | set(dir(builtins))
             | {"rt", "p", "CALLS", "PROGRAM", "Call", "CheckDecl", "MatrixDecl", "Program", "Tiling",
                "WorkspaceDecl", "main", "takes_part", "resolve_params", "unmet", "shapes", "generate", "loop_bounds",
                "dataflow", "Event", "Loop", "ANY", "AT", "PLUS", "MINUS", "DIV", "MOD", "SOURCE_NAMES",
                "NOT_AFFINE"})


@dataclass(frozen=True)
class CallModel:
    kernel: str
    modes: tuple[str, ...]
    main: int
    line: int
    text: str
    values: tuple[str, ...] = ()  # the value arguments' names
    order: str = ""  # parameters in declaration order: t(ile) or v(alue); "" for tiles only
    panels: tuple[int, ...] = ()  # the tile arguments that are panels at this call site
    flops: str | None = None  # the driver's function counting the kernel's flops
    panel_axes: tuple[int, ...] = ()  # per panel: 0 a column of tiles (a range of rows), 1 a row
    computed: tuple[str, ...] = ()  # the float and char value arguments given as no literal


@dataclass(frozen=True)
class FlopsModel:
    """A user kernel's ``flops`` expression as a driver function of its arguments."""

    function: str
    kernel: str
    line: int
    params: tuple[str, ...]
    body: str


@dataclass
class DriverModel:
    """Everything the driver template renders."""

    name: str
    source: str
    version: str
    driver_format: int
    tiling: str
    tiling_defaults: dict
    params: list  # (name, python reference, python default expression)
    matrices: list  # (name, init, load, line, rows expr, cols expr)
    workspaces: list  # (name, like, rows expr, line, whether its rows are an inner block)
    requires: list  # (line, condition as written, why or None, python condition)
    check: dict | None  # the CheckDecl's arguments, as driver text
    kernel_module: str | None
    source_dir: str | None = None  # the .tile's directory: relative to the driver file's (compile -o), else absolute
    placed: bool = False  # the driver's place is known (compile -o): its source_dir is relative to it
    source_digest: str | None = None  # of the .tile's text (:func:`_file_digest`)
    warnings: tuple = ()  # the first lines of the compiler's warnings
    driver_name: str = "DRIVER.py"  # the driver's file name, where known
    source_from_driver: str = ""  # the .tile file as named from the driver's folder, where known
    calls: list = field(default_factory=list)
    flops: list = field(default_factory=list)  # FlopsModel of the user kernels that state a count
    body: list = field(default_factory=list)  # lines of generate()
    bounds: list = field(default_factory=list)  # lines of loop_bounds()
    releases: bool = False  # whether generate() needs rt.release
    derive_priorities: bool = False  # no call states a priority
    guided: bool = False  # some loop visits only the values that can lead to this rank's tasks
    events: list | None = None  # lines of dataflow()'s events; None: no share plan (not affine)
    not_affine: str | None = None  # without a share plan, where and why the loop nest leaves the class
    share_prelude: list = field(default_factory=list)  # dataflow()'s first lines
    kinds: set = field(default_factory=set)  # the term kinds (ANY, AT, PLUS, MINUS, DIV, MOD) the loops use
    powers: bool = False  # some expression raises to a power ('**'): the driver defines _power
    steps: bool = False  # some loop's step is computed at run time: the driver defines _step
    source_names: dict = field(default_factory=dict)  # the renamed loop variables, lets and params: Python -> .tile

    @property
    def imports(self) -> list[str]:
        names = ["Call", "MatrixDecl", "Program", "Tiling", "main"]
        names += ["takes_part"] * any(call.panels for call in self.calls)
        names += ["CheckDecl"] * bool(self.check) + ["WorkspaceDecl"] * bool(self.workspaces)
        if self.events is not None:
            names += ["Event", "Loop"]
        return sorted(names + list(self.kinds))


def generate(checked: Checked, driver_path=None, cached: bool = False, warnings: tuple[str, ...] = ()) -> str:
    """The driver module's text for a checked program, to be written at ``driver_path`` (None:
    printed, its place unknown); ``cached``: a driver of tiledsl's cache, which records the program's
    directory absolute (its key holds that directory: a cache moved elsewhere, its drivers found the
    folder their relative path then named, and its kernel module, another program's); ``warnings``:
    the first lines of the compiler's warnings, which a run's --json lists among its notes."""
    with room_for_depth():
        model = _Model(checked).build()
    model.warnings = warnings
    folder = program_folder(checked.path)
    model.source_dir = folder if cached else _source_dir(folder, driver_path)
    model.source_digest = _file_digest(checked.path)
    model.placed = driver_path is not None and not cached
    model.source_from_driver = os.path.join(folder, os.path.basename(checked.path))
    if driver_path is not None:
        model.driver_name = os.path.basename(driver_path)
        model.source_from_driver = posixpath.normpath(f"{model.source_dir}/{os.path.basename(checked.path)}")
    return _template().render(model=model)


#: the prelude's QR kernels' argument that holds the triangular factors of their block reflectors, whose
#: height is the inner block: any height gives the same factorization (up to rounding)
INNER_BLOCK_ARGUMENT = "T"


def _inner_block_workspaces(checked: Checked) -> set:
    """The workspaces that only ever are a prelude kernel's ``T``: their rows (QR's ``ib``) are a
    blocking that ``tiledsl tune`` may choose. One that a kernel of the user's reads or writes may
    mean something (a number of moments, of pooled rows): tune leaves it alone."""
    uses: dict = {}
    for call in checked.calls:
        tiles = [param for param in call.kernel.params if param.kind == "tile"]
        for param, access in zip(tiles, call.accesses):
            blocking = call.kernel.prelude and param.name.text == INNER_BLOCK_ARGUMENT
            uses.setdefault(access.matrix, []).append(blocking)
    return {name for name, blocking in uses.items() if all(blocking)}


def _file_digest(path: str) -> str | None:
    """The digest by which a run tells that the ``.tile`` file changed since its driver was
    compiled (the runtime's ``Program.source_digest``); None for a program not read from a file."""
    try:
        return source_digest(Path(path).read_bytes())
    except OSError:
        return None


def _source_dir(source_dir: str, driver_path) -> str | None:
    """The ``.tile`` file's directory relative to the driver's, where its kernel module and the
    files it loads are: a relative path keeps the driver free of this machine's absolute paths
    while it finds them from any working directory, and a copy of the driver with its program's
    folder finds the copy's. Absolute where the driver's place is unknown (printed, to be saved
    anywhere): the path as given, relative to the folder compile ran in, was read from the one
    the driver was saved in (``source_dir``: :func:`~tiledsl.drivercontract.program_folder`'s)."""
    if driver_path is None:
        return source_dir
    # where the driver is written, its links followed: the run looks from there (Path.resolve)
    driver_dir = os.path.dirname(os.path.realpath(driver_path))
    try:
        return os.path.relpath(source_dir, driver_dir).replace(os.sep, "/")
    except ValueError:  # another drive (Windows): no relative path exists
        return source_dir


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    env = jinja2.Environment(loader=jinja2.PackageLoader("tiledsl.compiler", "templates"),
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined, autoescape=False)
    env.filters["py"] = repr
    env.filters["printable"] = printable
    env.filters["shell"] = shlex.quote  # a path in a command to paste: "my program.tile" quoted
    return env.get_template("driver.py.j2")


class _Names:
    """Maps user identifiers to safe Python names (stable, collision-free)."""

    def __init__(self, program: n.Program):
        self.taken: set[str] = set()
        self.mapping: dict[str, str] = {}
        self.taken = _all_names(program) | {"n", "nb", "B", "b", "s"}
        for name in sorted(self.taken):
            self.mapping[name] = self._safe(name)

    def _safe(self, name: str) -> str:
        if name not in _RESERVED and not name.startswith("_"):
            return name
        candidate = ("user" + name) if name.startswith("_") else name + "_"
        while candidate in self.taken or candidate in _RESERVED:
            candidate += "_"
        self.taken.add(candidate)
        return candidate

    def __getitem__(self, name: str) -> str:
        return self.mapping.get(name, name)

    def renamed(self, names) -> dict[str, str]:
        """Those of ``names`` whose Python name differs: Python name -> the name as written."""
        return {self[name]: name for name in sorted(names) if self[name] != name}


def _statements(body):
    """Every statement of a block, nested ones included."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, n.For):
            yield from _statements(stmt.body)
        elif isinstance(stmt, n.If):
            yield from _statements(stmt.then)
            yield from _statements(stmt.orelse)


def _bound_names(program: n.Program) -> set[str]:
    """The names the loop nest binds to numbers: the program's parameters, loop variables and lets."""
    names = {decl.name.text for decl in program.params}
    for stmt in _statements(program.body):
        if isinstance(stmt, n.For):
            names.add(stmt.var.text)
        elif isinstance(stmt, n.Let):
            names.add(stmt.name.text)
    return names


def _all_names(node) -> set[str]:
    """Every identifier written anywhere under ``node``."""
    names = set()
    stack: list = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, n.Ident):
            names.add(node.text)
        elif isinstance(node, tuple):
            stack.extend(node)
        elif hasattr(node, "__dataclass_fields__"):
            stack.extend(getattr(node, f) for f in node.__dataclass_fields__ if f != "span")
    return names


class _Model:
    """Builds the render model by walking the checked program once."""

    def __init__(self, checked: Checked):
        self.checked = checked
        self.program = checked.program
        self.names = _Names(checked.program)
        # the settings of this program's tiling only: another tiling's setting names nothing here, and
        # may be a let's name (bound from the parameters, it was that let's value after its loop)
        self.params = {"n", *TILING_SETTINGS[checked.tiling]} | {d.name.text for d in self.program.params}
        self.lines: list[str] = []
        self.rank_vars: dict[tuple, str] = {}
        self.access_vars: dict[tuple, str] = {}
        self.call_index: dict = {}
        self.share, self.not_affine = dataflow.planned(checked)
        self.kinds: set = set()  # term kinds the rendered loops use
        self.local: tuple | None = None  # (names, tile arguments) while writing a flops function
        self.powers = False  # whether some expression written uses _power
        self.steps = False  # whether some loop's step is computed (not a literal): uses _step

    def build(self) -> DriverModel:
        program, checked = self.program, self.checked
        model = DriverModel(
            name=program.name.text, source=checked.path, version=__version__, driver_format=DRIVER_FORMAT,
            tiling=checked.tiling, tiling_defaults=checked.tiling_defaults,
            params=[(d.name.text, param_ref(d.name.text), self.expr(d.default, params=True)) for d in program.params],
            matrices=[(d.name.text, _init_kind(d.init), d.init.path, d.span.line, self.expr(d.rows, params=True),
                       self.expr(d.cols, params=True))
                      for d in program.matrices],
            workspaces=[(d.name.text, d.like.text, self.expr(d.rows, params=True), d.span.line,
                         d.name.text in _inner_block_workspaces(checked)) for d in program.workspaces],
            requires=self._requirements(),
            check=self._check_model(program.checks[0]) if program.checks else None,
            kernel_module=checked.kernel_module)
        model.flops = self._flops_models()
        counters = {f.kernel: f.function for f in model.flops}
        model.calls = [CallModel(c.kernel.name.text, tuple(a.mode for a in c.accesses), c.main,
                                 c.call.span.line, _call_text(c.call), tuple(name for name, _ in c.values),
                                 c.order, tuple(i for i, a in enumerate(c.accesses) if is_panel(a.tile)),
                                 counters.get(c.kernel.name.text),
                                 tuple(int(not isinstance(a.tile.row, n.Range)) for a in c.accesses
                                       if is_panel(a.tile)), _computed(c)) for c in checked.calls]
        self.call_index = {c.call.span: i for i, c in enumerate(checked.calls)}
        model.derive_priorities = all(c.call.priority is None for c in checked.calls)
        self.anchors = self._anchors()
        model.body = self._function_body()
        model.kinds = self.kinds
        model.bounds = self._bounds_body()
        model.releases = any(isinstance(node, n.Release) for node in _statements(program.body))
        if self.share is not None:
            model.guided = any(loop.terms for loop in self.share.loops.values())
            model.events = self._event_lines()
            model.share_prelude = without_unused(self._prelude(), model.events)
        model.not_affine = self.not_affine
        model.powers = self.powers
        model.steps = self.steps
        model.source_names = self.names.renamed(_bound_names(program))
        return model

    def _check_model(self, check: n.CheckDecl) -> dict:
        """The arguments of the driver's ``CheckDecl``: kind, matrices, and what is not the default;
        an option that names parameters is a function of them."""
        model = {"kind": repr(check.kind.text), "args": repr(tuple(a.name.text for a in check.args)),
                 "line": str(check.span.line)}
        if any(a.qualifiers for a in check.args):
            model["qualifiers"] = repr(tuple(tuple(q.text for q in a.qualifiers) for a in check.args))
        if check.options:
            values = [(o.name.text, constant_of(o.value, "float")) for o in check.options]
            model["options"] = _tuple(f"({name!r}, {float(value)!r})" if value is not None else
                                      f"({name!r}, lambda p: {self.expr(option.value, params=True)})"
                                      for (name, value), option in zip(values, check.options))
        if self.checked.kernel_module is not None and check.kind.text not in CHECK_ARITY:
            model["user"] = "True"
        return model

    def _requirements(self) -> list:
        """The explicit requirements and those of the char parameters, in the order of the file
        (the run reports the first one its parameters break)."""
        explicit = [(d.span, (d.span.line, unparse(d.condition), d.message, self.expr(d.condition, params=True)))
                    for d in self.program.requires]
        render = lambda cond: self.expr(cond, params=True)  # noqa: E731
        implied = _char_requirements(self.checked, render) + _step_requirements(self.checked, render)
        ordered = sorted(explicit + implied, key=lambda pair: (pair[0].line, pair[0].column))
        return [requirement for _, requirement in ordered]

    # ---------------------------------------------------------------- the share plan
    def _event_lines(self) -> list[str]:
        """``dataflow()``'s events: each statement's writes and releases as affine data."""
        lines = []
        for event in self.share.events:
            loops = ", ".join(f"Loop({self._forms(lower)}, {self._forms(upper)}"
                              f"{'' if step == 1 else f', {step}'})" for lower, upper, step in event.loops)
            what = "release" if event.release else "writes"
            lines.append(f"Event({event.matrix!r}, {event.positions!r}, ({loops}{',' if len(event.loops) == 1 else ''}), "
                         f"{self._forms(event.rows)}, {self._forms(event.cols)}"
                         f"{', release=True' if event.release else ''}, line={event.line}"
                         f"{self._when(event.when)}{self._constraints(event.constraints)}"
                         f"{self._moduli('moduli', event.moduli)}{self._moduli('off_moduli', event.off_moduli)}"
                         f"{self._index_terms('index_moduli', event.index_moduli)}"
                         f"{self._index_terms('index_bounds', event.index_bounds)}),"
                         f"  # {what} at {_where_line(self.checked.path, event.line)}")
        return lines

    def _when(self, conditions) -> str:
        """An event's ``when``: the ifs it happens under that compare sizes and parameters alone."""
        return ", when=" + " and ".join(map(self._invariant_condition, conditions)) if conditions else ""

    def _invariant_condition(self, condition) -> str:
        if isinstance(condition, dataflow.InvariantTest):
            left, right = (str(v) if isinstance(v, int) else self.expr(v, parent=5) for v in
                           (condition.left, condition.right))  # (comparisons bind less than + and -)
            test = f"{left} {condition.op} {right}"
            return f"not ({test})" if condition.negated else test
        value, divisor = condition
        if divisor is None:
            return f"{self._coefficient(value)} >= 0"
        return f"({self._coefficient(value)}) % ({self._coefficient(divisor)}) == 0"

    def _moduli(self, field: str, moduli) -> str:
        """An event's ``moduli`` (or ``off_moduli``): the ifs it happens under that take a loop variable
        modulo a number, by == (by != or not)."""
        if not moduli:
            return ""
        return f", {field}=" + _tuple(f"({_tuple(self._coefficient(c) for c in form)}, {self._coefficient(divisor)})"
                                    for form, divisor in moduli)

    def _index_terms(self, field: str, terms) -> str:
        """An event's ``index_moduli`` (or ``index_bounds``): its tile indices that take a loop variable
        modulo (or divided by) a value, (form, value, axis) each."""
        if not terms:
            return ""
        return f", {field}=" + _tuple(f"({_tuple(self._coefficient(c) for c in form)}, "
                                      f"{self._coefficient(value)}, {axis})" for form, value, axis in terms)

    def _constraints(self, forms) -> str:
        """An event's ``constraints``: the comparisons of the ifs it happens under that bound no loop alone."""
        return f", constraints={self._forms(forms)}" if forms else ""

    def _forms(self, forms) -> str:
        return _tuple(_tuple(self._coefficient(c) for c in form) for form in forms)

    def _coefficient(self, value) -> str:
        return str(value) if isinstance(value, int) else self.expr(value)

    def _affine(self, form: dict) -> str:
        """An affine form of loop variables as Python text."""
        parts = []
        for var, coefficient in form.items():
            if var == "":
                continue
            name = self.names[var]
            if isinstance(coefficient, int):
                parts.append(name if coefficient == 1 else f"-{name}" if coefficient == -1 else f"{coefficient} * {name}")
            else:
                parts.append(f"{self.expr(coefficient, parent=6)} * {name}")
        constant = form.get("", 0)
        if not isinstance(constant, int) or constant != 0 or not parts:
            parts.append(self._coefficient(constant) if isinstance(constant, int) else self.expr(constant, parent=5))
        text = " + ".join(parts)
        return text.replace("+ -", "- ")

    def _term(self, term) -> str:
        matrix, row_kind, row, col_kind, col, *runner = term
        self.kinds.update((row_kind, col_kind))
        values = [self._spec_value(kind, value) for kind, value in ((row_kind, row), (col_kind, col))]
        main = f", {self._term(runner[0])}" if runner else ""
        return f"({self.names[matrix]}, {row_kind}, {values[0]}, {col_kind}, {values[1]}{main})"

    def _spec_value(self, kind: str, value) -> str:
        if kind == dataflow.ANY:
            return "0"
        if kind in (dataflow.DIV, dataflow.MOD):
            rest, divisor = value
            return f"({self._affine(rest)}, {self.expr(divisor)})"
        return self._affine(value) if isinstance(value, dict) else self.expr(value)

    def _key(self, span) -> str:
        items = [str(item) if isinstance(item, int) else (self.names[item[0]] if item[1] > 0 else f"-{self.names[item[0]]}")
                 for item in self.share.keys[span]]
        return _tuple(items)

    def _flops_models(self) -> list:
        """The user kernels (called by the program) whose declarations state a flop count."""
        models = []
        for decl in dict.fromkeys(c.kernel for c in self.checked.calls):
            if decl.flops is None or decl.prelude:
                continue
            params = {p.name.text: _local(p.name.text) for p in decl.params}
            self.local = (params, {p.name.text for p in decl.params if p.kind == "tile"})
            body = self.expr(decl.flops)
            self.local = None
            models.append(FlopsModel(f"_flops_{decl.name.text}", decl.name.text, decl.span.line,
                                     tuple(params.values()), body))
        return models

    # ---------------------------------------------------------------- expressions
    def expr(self, e, params: bool = False, parent: int = 0, right: bool = False, bound: bool = False) -> str:
        """Python text for an expression, parenthesised only where precedence needs it.

        ``params`` reads parameters from ``p``; ``parent`` is the enclosing operator's
        precedence and ``right`` whether ``e`` is its right operand; ``bound`` computes
        over intervals in ``loop_bounds`` (min, max and geometry queries through ``_bound``).
        """
        mine = precedence(e)
        text = self._expr(e, params, mine, bound)
        return f"({text})" if mine < parent or (right and mine == parent and mine < 7) else text

    def _expr(self, e, params: bool, mine: int, bound: bool) -> str:
        match e:
            case n.IntLit(value=value):
                return str(value)
            case n.FloatLit(value=value) | n.StrLit(value=value):
                return repr(value)
            case n.Name(ident=ident) if self.local is not None:
                return self.local[0][ident.text]
            case n.Attr(matrix=m, attr=a) if self.local is not None:
                return f"{self.local[0][m.text]}[{'01'[a.text == 'n']}]"
            case n.Name(ident=ident):
                name = self.names[ident.text]
                return param_ref(ident.text) if params and ident.text in self.params else name
            case n.Attr(matrix=m, attr=a):
                return f"{self.names[m.text]}.{a.text}"
            case n.Method(matrix=m, method=q, arg=arg) if bound:
                return f"_bound.query({self.names[m.text]}.{q.text}, {self.expr(arg, bound=True)})"
            case n.Method(matrix=m, method=q, arg=arg):
                return f"{self.names[m.text]}.{q.text}({self.expr(arg, params)})"
            case n.Func(func=f, args=args):
                prefix = "_bound." if bound else ""
                return f"{prefix}{f.text}({', '.join(self.expr(a, params, bound=bound) for a in args)})"
            case n.Binary(op="**", left=left, right=right):  # Python's ** would give a float for a negative exponent
                self.powers = True
                return f"_power({self.expr(left, params, bound=bound)}, {self.expr(right, params, bound=bound)})"
            case n.Unary(op="not", operand=operand) if bound:
                return f"_bound.not_({self.expr(operand, bound=True)})"
            case n.Binary(op=op, left=left, right=right) if bound and op in ("and", "or"):
                return f"_bound.{op}_({self.expr(left, bound=True)}, {self.expr(right, bound=True)})"
            case n.Unary(op=op, operand=operand):
                return f"{'not ' if op == 'not' else '-'}{self.expr(operand, params, mine, bound=bound)}"
            case n.Binary(op=op, left=left, right=right):
                return (f"{self.expr(left, params, mine, bound=bound)} {op} "
                        f"{self.expr(right, params, mine, right=True, bound=bound)}")
        raise TypeError(f"cannot generate {e!r}")

    # ---------------------------------------------------------------- hoisting
    def _anchors(self) -> dict:
        """For each binder (For/Let span, or None for the top), the rank tests to compute there."""
        anchors: dict = {}
        binders: list = []  # (name or None for an if branch, key), outermost first
        position: dict = {}  # name -> its index in binders when last bound
        barriers: list = []  # indices of the enclosing if branches
        loops: list = []  # indices of the enclosing loops

        def bind(name, key):
            position[name] = len(binders)
            binders.append((name, key))

        def anchor_of(depends, tile) -> object:
            """The innermost binder the access depends on, never above an enclosing if, nor above
            an enclosing loop where its index may fail (``i // q`` in a loop that runs no time
            where q = 0: the call is never reached)."""
            bound = [position[name] for name in depends
                     if position.get(name, len(binders)) < len(binders) and binders[position[name]][0] == name]
            innermost_loop = [] if _cannot_fail(tile.row) and _cannot_fail(tile.col) else loops[-1:]
            index = max(bound + barriers[-1:] + innermost_loop, default=None)
            return None if index is None else binders[index][1]

        def visit(stmts):
            for stmt in stmts:
                if isinstance(stmt, n.For):
                    depth = len(binders)
                    loops.append(depth)
                    bind(stmt.var.text, stmt.span)
                    visit(stmt.body)
                    loops.pop()
                    del binders[depth:]
                elif isinstance(stmt, n.Let):
                    bind(stmt.name.text, stmt.span)
                elif isinstance(stmt, n.If):
                    # an index may only be valid under its condition: never hoist above it
                    for branch, body in (("then", stmt.then), ("else", stmt.orelse)):
                        depth = len(binders)
                        barriers.append(depth)
                        binders.append((None, (stmt.span, branch)))
                        visit(body)
                        barriers.pop()
                        del binders[depth:]
                elif isinstance(stmt, n.Call) and stmt.span in self.call_index:
                    summary = self.checked.calls[self.call_index[stmt.span]]
                    for index, access in enumerate(summary.accesses):
                        if is_panel(access.tile):
                            continue  # a panel's ranks are those of its tiles, found at the call
                        anchor = anchor_of(access.depends, access.tile)
                        key = (anchor, access.matrix, unparse(access.tile.row), unparse(access.tile.col))
                        if key not in self.rank_vars:
                            self.rank_vars[key] = f"_r{len(self.rank_vars)}"
                            anchors.setdefault(anchor, []).append((key, access.tile, stmt.span))
                        self.access_vars[stmt.span, index] = self.rank_vars[key]

        visit(self.program.body)
        return anchors

    def _rank_lines(self, anchor, depth: int) -> list[str]:
        pad = INDENT * depth
        # each names the call it serves: an index that fails here is that call's mistake
        return [f"{pad}{self.rank_vars[key]} = {self.names[tile.matrix.text]}.rank_of("
                f"{self.expr(tile.row)}, {self.expr(tile.col)})  # {_where(self.checked.path, span)}"
                for key, tile, span in self.anchors.get(anchor, ())]

    # ---------------------------------------------------------------- statements
    def _prelude(self) -> list[str]:
        """The lines naming the parameters and matrices the loop nest uses."""
        used = _all_names(self.program.body) & self.params
        lines = [f"{INDENT}{self.names[name]} = {param_ref(name)}" for name in sorted(used)]
        for decl in self.program.matrices + self.program.workspaces:
            lines.append(f"{INDENT}{self.names[decl.name.text]} = rt.matrix({decl.name.text!r})")
        return lines

    def _function_body(self) -> list[str]:
        lines = self._prelude()
        lines += self._rank_lines(None, 1)
        lines += self._block(self.program.body, 1)
        return lines

    def _bounds_body(self) -> list[str]:
        """``loop_bounds``: every loop's start and stop over intervals, never iterated, flat
        (no Python block per loop or if); an if's branch counts its loops unless its
        condition is certainly false over the intervals. Calls are left out (they cost the
        survey little)."""
        used = _all_names(self.program.body) & self.params
        lines = [f"{INDENT}{self.names[name]} = {param_ref(name)}" for name in sorted(used)]
        for decl in self.program.matrices + self.program.workspaces:
            lines.append(f"{INDENT}{self.names[decl.name.text]} = _bound.matrix({decl.name.text!r})")
        lines.append(f"{INDENT}_t0 = 1")
        self._bound_lines(self.program.body, "_t0", lines, iter(range(1, 1 << 62)), [], {})
        return without_unused(lines)

    def _bound_lines(self, stmts, outer: str, lines: list, numbers, loops: list, lets: dict,
                     skipped: frozenset = frozenset()) -> None:
        """Lines for the loops, lets and ifs of ``stmts``; ``outer`` names the iterations of the
        code around them, and ``numbers`` gives each new count a name of its own. ``loops`` and
        ``lets`` are the enclosing ones; ``skipped`` the lets left out, whose values intervals
        cannot bound (a float, a power of a varying value): an if's condition naming one counts
        both branches."""
        lets = dict(lets)
        for stmt in stmts:
            if isinstance(stmt, n.For):
                self._bound_loop(stmt, outer, lines, numbers, loops, lets, skipped)
            elif isinstance(stmt, n.Let) and (stmt.span in self.checked.float_lets
                                              or not _interval_safe(stmt.value, loops, lets, skipped)):
                skipped |= {stmt.name.text}
            elif isinstance(stmt, n.Let):
                lines.append(f"{INDENT}{self.names[stmt.name.text]} = {self.expr(stmt.value, bound=True)}")
                lets[stmt.name.text] = dataflow.let_info(stmt.value, loops, lets)
            elif isinstance(stmt, n.If):
                known = _interval_safe(stmt.cond, loops, lets, skipped)
                condition = self.expr(stmt.cond, bound=True) if known else None
                for branch, test in ((stmt.then, condition), (stmt.orelse, f"_bound.not_({condition})")):
                    if branch:
                        count = f"_t{next(numbers)}"
                        lines.append(f"{INDENT}{count} = " + (f"_bound.when({test}, {outer})" if known else outer))
                        self._bound_lines(branch, count, lines, numbers, loops, lets, skipped)

    def _bound_loop(self, stmt: n.For, outer: str, lines: list, numbers, loops: list, lets: dict,
                    skipped: frozenset) -> None:
        """A loop's line in ``loop_bounds``, then its body's. A loop whose width (stop − start) is
        the same at every outer iteration passes it, so that its count is exact where intervals of
        its start and stop would not be (``t + r * s .. t + r * s + 1``). A loop whose step varies
        with the loops around it (``step 2 ** l``) is left out with its body: counting it at step
        1 could refuse a run that is not too long."""
        if stmt.step is not None and _varying(_all_names(stmt.step), loops, lets, skipped):
            return
        count = f"_t{next(numbers)}"
        step = f", {self.expr(stmt.step)}" if stmt.step is not None else ""
        width = dataflow.invariant_width(stmt.start, stmt.stop, loops, lets)
        exact = f", width={self._affine({'': width})}" if width is not None else ""
        lines.append(f"{INDENT}{self.names[stmt.var.text]}, {count} = _bound.loop("
                     f"{self.expr(stmt.start, bound=True)}, {self.expr(stmt.stop, bound=True)}, "
                     f"{outer}, {stmt.span.line}{step}{exact})")
        self._bound_lines(stmt.body, count, lines, numbers, loops + [(stmt.var.text,)], lets, skipped)

    def _block(self, stmts, depth: int) -> list[str]:
        lines: list[str] = []
        for stmt in stmts:
            lines += getattr(self, "_" + type(stmt).__name__.lower())(stmt, depth)
        return lines or [INDENT * depth + "pass"]

    def _for(self, stmt: n.For, depth: int) -> list[str]:
        pad = INDENT * depth
        step = f", {self._step(stmt)}" if stmt.step is not None else ""
        loop = self.share.loops.get(stmt.span) if self.share is not None else None
        if loop is not None and loop.terms:
            terms = _tuple(self._term(term) for term in loop.terms)
            # the terms in a lambda: one that cannot be computed (a division by zero) is the call's
            # error, said at its line by the walk of every value (:func:`runtime.share.among`)
            values = (f"_among({self.expr(stmt.start)}, {self.expr(stmt.stop)}, "
                      f"{self.expr(stmt.step) if stmt.step else 1}, lambda: {terms})")
        else:
            values = f"range({self.expr(stmt.start)}, {self.expr(stmt.stop)}{step})"
        head = f"{pad}for {self.names[stmt.var.text]} in {values}:  # {_where(self.checked.path, stmt.span)}"
        return [head] + self._rank_lines(stmt.span, depth + 1) + self._block(stmt.body, depth + 1)

    def _step(self, stmt: n.For) -> str:
        """A loop's step: a literal as written; one the run computes through ``_step``, which says a
        step of 0 is the loop's (``range`` would say only that its third argument is zero)."""
        literal = stmt.step.operand if isinstance(stmt.step, n.Unary) else stmt.step
        if isinstance(literal, n.IntLit):
            return self.expr(stmt.step)
        self.steps = True
        return f"_step({self.expr(stmt.step)}, {stmt.span.line})"

    def _if(self, stmt: n.If, depth: int) -> list[str]:
        """An ``if``; ``else if`` chains become ``elif`` (a nested ``if`` per link would
        exceed Python's 100 levels of indentation)."""
        pad = INDENT * depth
        lines, opener = [], "if"
        while True:
            lines.append(f"{pad}{opener} {self.expr(stmt.cond)}:  # {_where(self.checked.path, stmt.span)}")
            lines += self._rank_lines((stmt.span, "then"), depth + 1) + self._block(stmt.then, depth + 1)
            chained = len(stmt.orelse) == 1 and isinstance(stmt.orelse[0], n.If)
            if not (chained and not self.anchors.get((stmt.span, "else"))):
                break
            stmt, opener = stmt.orelse[0], "elif"
        if stmt.orelse:
            lines += [f"{pad}else:"]
            lines += self._rank_lines((stmt.span, "else"), depth + 1) + self._block(stmt.orelse, depth + 1)
        return lines

    def _let(self, stmt: n.Let, depth: int) -> list[str]:
        pad = INDENT * depth
        return ([f"{pad}{self.names[stmt.name.text]} = {self.expr(stmt.value)}  "
                 f"# {_where(self.checked.path, stmt.span)}"] + self._rank_lines(stmt.span, depth))

    def _release(self, stmt: n.Release, depth: int) -> list[str]:
        pad = INDENT * depth
        comment = f"{pad}# {_where(self.checked.path, stmt.span)}: release {unparse_tile(stmt.tile)}"
        at = f", at={self._key(stmt.span)}" if self.share is not None else ""
        if is_panel(stmt.tile):
            return [comment, f"{pad}for _tile in {self._tile(stmt.tile, stmt.span.line)}:",
                    f"{pad}{INDENT}_release(_tile{at})"]
        return [comment, f"{pad}_release({self._tile(stmt.tile, stmt.span.line)}{at})"]

    def _call(self, stmt: n.Call, depth: int) -> list[str]:
        pad = INDENT * depth
        index = self.call_index[stmt.span]
        summary = self.checked.calls[index]
        accesses = summary.accesses
        panels = {i: f"_p{i}" for i, a in enumerate(accesses) if is_panel(a.tile)}
        ranks = list(dict.fromkeys(self.access_vars[stmt.span, i] for i in range(len(accesses)) if i not in panels))
        tiles = _tuple(panels.get(i) or self._tile(a.tile, stmt.span.line) for i, a in enumerate(accesses))
        regions = [self._region(a.tile) for a in accesses]
        region_text = "None" if all(r == "None" for r in regions) else _tuple(regions)
        priority = self.expr(stmt.priority) if stmt.priority is not None else "0"
        values = f", {_tuple(self._value(name, value, summary.kernel) for name, value in summary.values)}" \
            if summary.values else ""
        at = f", at={self._key(stmt.span)}" if self.share is not None else ""
        test = " or ".join([f"_me == {v}" for v in ranks] + [f"takes_part({v}, _me)" for v in panels.values()])
        bumps = []
        for i, access in enumerate(accesses):
            if access.mode == "in":
                continue
            t = access.tile
            bumps += ([f"{pad}{INDENT}for _tile in {panels[i]}:", f"{pad}{INDENT * 2}_tile.matrix.bump(_tile.i, _tile.j)"]
                      if i in panels else
                      [f"{pad}{INDENT}{self.names[t.matrix.text]}.bump({self.expr(t.row)}, {self.expr(t.col)})"])
        return ([f"{pad}# {_where(self.checked.path, stmt.span)}: {_call_text(stmt, with_priority=True)}"]
                + [f"{pad}{name} = {self._tile(accesses[i].tile, stmt.span.line)}" for i, name in panels.items()]
                + [f"{pad}if {test}:",
                   f"{pad}{INDENT}_submit(CALLS[{index}], {tiles}, {region_text}, {priority}{values}{at})",
                   f"{pad}else:  # not ours: only count the new versions of the tiles it writes"] + bumps)

    def _value(self, name: str, value, kernel: n.KernelDecl) -> str:
        """A value argument; a float parameter gets a float even from an integer expression."""
        kind = next(p.kind for p in kernel.params if p.name.text == name)
        if kind != "float":
            return self.expr(value)
        constant = constant_of(value, "float")
        return repr(float(constant)) if constant is not None else f"float({self.expr(value)})"

    def _tile(self, tile: n.TileRef, line: int) -> str:
        """A tile, or a panel's tuple of tiles (``A.panel(r0, r1, c0, c1, line)``, the single
        index's stop None)."""
        matrix = self.names[tile.matrix.text]
        if not is_panel(tile):
            return f"{matrix}.tile({self.expr(tile.row)}, {self.expr(tile.col)}, {line})"
        ends = []
        for index in (tile.row, tile.col):
            if isinstance(index, n.Range):
                ends += [self.expr(index.start), self.expr(index.stop)]
            else:
                ends += [self.expr(index), "None"]
        return f"{matrix}.panel({', '.join(ends)}, {line})"

    def _region(self, tile: n.TileRef) -> str:
        if tile.rows is None and tile.cols is None:
            return "None"
        parts = []
        for part in (tile.rows, tile.cols):
            for end in (part.start, part.stop) if part else (None, None):
                parts.append("None" if end is None else self.expr(end))
        return f"({', '.join(parts)})"


def _cannot_fail(expr) -> bool:
    """Whether evaluating the index ``expr`` raises nothing whatever its names hold: sums,
    differences, products, min and max, and ``//``, ``%`` and ``**`` by literals that cannot fail
    (not ``i // q``, ``2 ** (l - 1)`` or ``A.width(j)``)."""
    for node in expression_nodes(expr):
        match node:
            case n.Binary(op="//" | "%", right=right) if not (isinstance(right, n.IntLit) and right.value > 0):
                return False
            case n.Binary(op="**", right=right) if not isinstance(right, n.IntLit):
                return False
            case n.Binary(op=op) if op not in ("+", "-", "*", "//", "%", "**"):
                return False
            case n.Method():
                return False
            case n.Func(func=func) if func.text not in ("min", "max"):
                return False
    return True


def _interval_safe(expr, loops: list, lets: dict, skipped: frozenset) -> bool:
    """Whether ``loop_bounds`` can evaluate ``expr`` over intervals: it names no let left out, and
    raises nothing that may vary (a loop variable, a let) to a power, nor anything to a varying one."""
    powers = (node for node in expression_nodes(expr) if isinstance(node, n.Binary) and node.op == "**")
    return not _all_names(expr) & skipped and not any(_varying(_all_names(power), loops, lets) for power in powers)


def _varying(names: set, loops: list, lets: dict, skipped: frozenset = frozenset()) -> bool:
    """Whether ``names`` hold a loop variable, a let or a let left out (looked up one by one: a
    set of every let, made for each of a chain of thousands, made compiling it quadratic)."""
    loop_names = {loop[0] for loop in loops}
    return any(name in loop_names or name in lets or name in skipped for name in names)


_ASSIGNMENT = re.compile(r"^(\s*)(\w+(?:, \w+)*) = (.*)$")
_LITERAL_OR_COMMENT = re.compile(r"'[^']*'|\"[^\"]*\"|#.*$")


def without_unused(lines: list[str], also_reading=()) -> list[str]:
    """Straight-line ``lines`` without the assignments nothing reads (a matrix or a let that no
    later bound or event names), and with ``_`` for an iteration count (``_tN``) nothing reads,
    so that the driver binds only what it uses. ``also_reading``: lines after them that read their names.

    An assignment is kept when a kept line reads its name: found from the other lines (and
    ``also_reading``) through the names each reads, once each (a chain of 8,000 lets, dropped
    one per pass over all the lines, took minutes to compile)."""
    matches = [_ASSIGNMENT.match(line) for line in lines]
    targets = [match[2].split(", ") if match else [] for match in matches]
    assigning = defaultdict(list)  # name -> the lines whose one target it is
    for index, names in enumerate(targets):
        if len(names) == 1:
            assigning[names[0]].append(index)
    read, kept = set(), set()
    waiting = [index for index, names in enumerate(targets) if len(names) != 1]
    kept.update(waiting)

    def reads(names) -> None:
        for name in names - read:
            read.add(name)
            for index in assigning[name]:
                if index not in kept:
                    kept.add(index)
                    waiting.append(index)

    for line in also_reading:
        reads(_names_read(_ASSIGNMENT.match(line), line))
    while waiting:
        index = waiting.pop()
        reads(_names_read(matches[index], lines[index]))
    return [matches[index][1] + ", ".join("_" if t.startswith("_t") and t not in read else t for t in names)
            + " = " + matches[index][3] if len(names) > 1 else lines[index]
            for index, names in enumerate(targets) if index in kept]


def _names_read(match, line: str) -> set:
    return set(re.findall(r"[A-Za-z_]\w*", _LITERAL_OR_COMMENT.sub("", match[3] if match else line)))


def _tuple(items) -> str:
    items = list(items)
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _init_kind(init: n.Init) -> str:
    return "load" if init.kind == "load" else init.what.text


def param_ref(name: str) -> str:
    """How the driver reads parameter ``name`` from ``p``: by key, so that any name the
    grammar allows (``as_dict``, ``__class__``, a keyword) is the program's own."""
    return f"p[{name!r}]"


def printable(text: str) -> str:
    """``text`` safe inside a docstring or a comment: quotes, backslashes, controls escaped, and
    the bytes of a file name that is not UTF-8 (surrogates) as escapes."""
    return json.dumps(text, ensure_ascii=False)[1:-1].encode("utf-8", "backslashreplace").decode("utf-8")


def _where(path: str, span) -> str:
    return _where_line(path, span.line)


def _where_line(path: str, line: int) -> str:
    return f"{printable(path.rsplit('/', 1)[-1])}:{line}"




def _char_requirements(checked: Checked, render) -> list:
    """A requirement for each char parameter passed where a kernel takes one of some characters
    (the compiler checks a literal; a parameter's value is known at run time), and that it is one:
    (where it is passed, requirement). One passed inside ``if``s whose conditions read the
    parameters only is required where they hold (``render``: a condition as the driver's Python)."""
    found, seen = [], set()
    for use in checked.char_uses:
        name, allowed = use.name, use.choices or None
        guards = [cond if taken else _negated(cond) for cond, taken in use.guards]
        key = (name, allowed, tuple(canonical_text(guard) for guard in guards))
        if key in seen:
            continue
        seen.add(key)
        text = f"{name} in {json.dumps(allowed)}" if allowed else f"{name} is one character"
        test = f"len(p[{name!r}]) == 1 and " + (f"p[{name!r}] in {allowed!r}" if allowed else f"len(p[{name!r}]) == 1")
        where = f"it is passed as {use.where}" + "".join(f" when {unparse(guard)}" for guard in guards[:1]) \
            + "".join(f" and {unparse(guard)}" for guard in guards[1:])
        if guards:
            test = " or ".join([*(f"not ({render(guard)})" for guard in guards), f"({test})"])
        found.append((use.span, (use.span.line, text, where, test)))
    return found


def _step_requirements(checked: Checked, render) -> list:
    """A requirement for each loop step computed from the parameters (``step st``): that it is not 0,
    where the ``if``s around the loop that read the parameters hold: (where the step is, requirement)."""
    found = []
    for use in checked.param_steps:
        guards = [cond if taken else _negated(cond) for cond, taken in use.guards]
        test = " or ".join([*(f"not ({render(guard)})" for guard in guards), f"({render(use.step)}) != 0"])
        why = "a loop's step of 0 would never end" + "".join(
            f"{' and' if i else ', when'} {unparse(guard)}" for i, guard in enumerate(guards))
        found.append((use.step.span, (use.line, f"{unparse(use.step)} != 0", why, test)))
    return found


_OPPOSITES = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


def _negated(cond):
    """The condition of an ``else`` block: a comparison turned round (``side == "N"``, not
    ``not side != "N"``), else ``not`` the condition."""
    if isinstance(cond, n.Binary) and cond.op in _OPPOSITES:
        return n.Binary(_OPPOSITES[cond.op], cond.left, cond.right, cond.span)
    if isinstance(cond, n.Unary) and cond.op == "not":
        return cond.operand
    return n.Unary("not", cond, cond.span)


def _computed(call) -> tuple[str, ...]:
    """The float and char value arguments ``call`` gives as no literal (a parameter, an expression):
    a failure of its task says their values, which its text cannot show (an int's it says always)."""
    kinds = {param.name.text: param.kind for param in call.kernel.params}
    return tuple(name for name, expr in call.values if kinds[name] != "int" and constant_of(expr, kinds[name]) is None)


def _call_text(call: n.Call, with_priority: bool = False) -> str:
    """The call as the program writes it; its priority only where asked (the driver's comment): a message
    naming the call has no use for it (tester u83a)."""
    args = [unparse_tile(a) if isinstance(a, n.TileRef) else unparse(a) for a in call.args]
    args += [f"{k.name.text} = {unparse(k.value)}" for k in call.keywords]
    text = f"{call.kernel.text}({', '.join(args)})"
    return text + (f" priority {unparse(call.priority)}" if with_priority and call.priority is not None else "")




def _local(name: str) -> str:
    """A kernel parameter's name as a Python parameter of a flops function."""
    return name + "_" if name in _RESERVED or name.startswith("_") else name
