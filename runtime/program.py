"""The static description of a compiled program, as a generated driver states it.

A driver module (written by ``tiledsl compile``) defines three things that the
runtime consumes:

* ``PROGRAM``: a :class:`Program` describing the matrices, workspaces, tiling,
  parameters, kernel call sites and the numerical check;
* ``shapes(p)``: the global ``(rows, cols)`` of every matrix for parameters ``p``;
* ``generate(rt, p)``: the program's loop nest, which calls ``rt.submit`` once per
  task instance this rank takes part in.

These types are plain frozen data so that a driver is readable and the runtime
never needs the compiler.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from functools import cached_property, lru_cache

from ..language import INT64_MAX, READ_MODES, WRITE_MODES
from .crash import call_runner
from .matrix import part_of, part_text
from .panels import Panel
from .errors import ValueArgumentError
from .world import UsageError



@dataclass(frozen=True)
class Tiling:
    """How matrices are cut into tiles: ``uniform`` (nb) or ``hybrid`` (B, b, s)."""

    kind: str
    defaults: dict = field(default_factory=dict)


@dataclass(frozen=True)
class MatrixDecl:
    """A matrix parameter: created by ``init`` (spd, general, diagdom, zeros) or loaded.

    ``load`` is the path as the program writes it; a relative one is relative to
    the ``.tile`` file's directory, found as the kernel module is
    (:func:`~.userkernels.program_places`).
    """

    name: str
    init: str
    line: int
    load: str | None = None


@dataclass(frozen=True)
class WorkspaceDecl:
    """A workspace with the tile grid of matrix ``like`` (its tile height is in ``shapes``);
    ``inner_block`` when it is only ever a prelude QR kernel's ``T``, whose height (``ib``) is a
    blocking that ``tiledsl tune`` may choose."""

    name: str
    like: str
    line: int
    inner_block: bool = False


@dataclass(frozen=True)
class CheckDecl:
    """The residual check ``kind`` applied to the matrices ``args``.

    ``kind`` is a built-in check (cholesky, lu, qr, solve, inverse, product) or, with
    ``user``, a function of the program's kernel module. ``qualifiers`` holds, per
    argument, the words written before its name (lower, upper, unit, symmetric,
    transposed); ``options`` the ``NAME = value`` pairs (product's alpha and beta), a
    value a number or a function of the run's parameters (``alpha = alpha``).
    """

    kind: str
    args: tuple[str, ...]
    line: int
    qualifiers: tuple[tuple[str, ...], ...] = ()
    options: tuple[tuple[str, object], ...] = ()
    user: bool = False

    def place(self, source: str | None = None) -> str:
        """``check product (p.tile:7)``: the check, at its line of the ``.tile`` file ``source``."""
        at = f"{Path(source).name}:{self.line}" if source else f"line {self.line}"
        return f"check {self.kind} ({at})"

    def option_values(self, params, where: str = "") -> dict:
        """The options' values in a run with parameters ``params`` (a UsageError, said at ``where``,
        for one these parameters cannot give, such as ``alpha = 1.0 / z`` with z = 0, or give only
        as an infinity or NaN, which would make the residual NaN)."""
        where = where or self.place()
        values = {}
        for name, value in self.options:
            try:
                values[name] = float(value(params)) if callable(value) else value
            except (ArithmeticError, ValueError) as error:
                raise UsageError(f"{where}: option {name} cannot be computed with these parameters: {error}") from None
            if not math.isfinite(values[name]):
                raise UsageError(f"{where}: option {name} is {values[name]}: a check's options are finite numbers")
        return values


@dataclass(frozen=True)
class Call:
    """One kernel call site of the program.

    ``modes`` holds the access mode of each tile argument; ``main`` is the index of the
    first written one (the task's main output). ``line`` and ``text`` point back at the
    ``.tile`` source for messages. A kernel with value parameters names them in
    ``values`` and gives its parameters' order in ``order`` ("t" a tile argument, "v" a
    value), so that :meth:`arguments` interleaves them as the kernel declares them.
    ``panels`` are the tile arguments that are ranges of tiles at this call site: a task
    has one tile per tile of the range (see :meth:`expanded`), and the kernel receives
    the range as a list. ``flops`` counts a user kernel's flops from its arguments'
    shapes and values (the prelude's are the runtime's own). ``role`` is what its tasks are, as a
    stall report counts and names them: ``"task"``, the program's; the runtime's own, of no
    ``.tile`` line (``line`` 0): ``"transfer"`` (a tile version sent, received, copied, forwarded or
    written back) or ``"check task"`` (``--check``'s residuals). A task's failure says its integer
    values (they tell the tasks of a loop apart) and those named in ``computed``: the float and char
    values that the call gives by a parameter or an expression, which its text does not show.
    """

    kernel: str
    modes: tuple[str, ...]
    main: int
    line: int
    text: str
    values: tuple[str, ...] = ()
    order: str = ""
    panels: tuple[int, ...] = ()
    flops: object = None
    panel_axes: tuple[int, ...] = ()  # per panel: 0 a column of tiles (the default), 1 a row of tiles
    groups: tuple | None = None  # an expanded call: (first tile, tiles, axis) of each argument; None: one tile each
    role: str = "task"
    computed: tuple[str, ...] = ()  # float and char values given as no literal: a failure says them (ints always)

    @cached_property
    def runner(self):
        """Calls this call's kernel in a frame that names the call (:func:`.crash.call_runner`)."""
        return call_runner(self.line, self.text)

    @cached_property
    def reads(self) -> tuple[int, ...]:
        return tuple(i for i, m in enumerate(self.modes) if m in READ_MODES)

    @cached_property
    def writes(self) -> tuple[int, ...]:
        return tuple(i for i, m in enumerate(self.modes) if m in WRITE_MODES)

    @cached_property
    def reads_only(self) -> tuple[int, ...]:
        """The ``in`` tiles: a kernel gets them read-only."""
        return tuple(i for i, m in enumerate(self.modes) if m == "in")

    @cached_property
    def plain(self) -> bool:
        """A kernel taking its tiles as they come: no value, no panel."""
        return not self.values and self.groups is None

    def expanded(self, lengths: tuple[int, ...]) -> "Call":
        """This call for panels of ``lengths`` tiles (one per argument of ``panels``), with one
        mode per tile: what the scheduler and the protocol see."""
        return _expanded(self, lengths)

    def arguments(self, arrays: list, values: tuple) -> list:
        """The kernel's arguments in declaration order: a tile's array, a panel's arrays as a
        :class:`.panels.Panel`, a value."""
        groups = self.groups or tuple((i, None, 0) for i in range(len(arrays)))
        return self.interleave([arrays[first] if count is None else
                                Panel(arrays[first:first + count], axis, self.modes[first] in WRITE_MODES)
                                for first, count, axis in groups], values)

    def interleave(self, tile_arguments: list, values: tuple) -> list:
        """Tile arguments and value arguments in the kernel's declaration order."""
        if not self.order:
            return tile_arguments
        tiles, values = iter(tile_arguments), iter(values)
        return [next(tiles) if kind == "t" else next(values) for kind in self.order]

    def declared(self, tiles) -> list[tuple[int, str, tuple, bool]]:
        """Each tile argument as the kernel declares it, for messages: (its number among the
        kernel's parameters, value ones included, from 1; its mode; its tiles; whether it is a
        panel), from ``tiles`` as a task holds them (a panel's spread out)."""
        groups = self.groups or tuple((i, None, 0) for i in range(len(tiles)))
        numbers = ([i + 1 for i, kind in enumerate(self.order) if kind == "t"] if self.order
                   else range(1, len(groups) + 1))
        return [(number, self.modes[first], tuple(tiles[first:first + (count or 1)]), count is not None)
                for number, (first, count, _) in zip(numbers, groups)]

    @staticmethod
    def tile_shapes(tiles, regions) -> list:
        """Each tile's (rows, cols), or its region's."""
        return [_shape(tile, None if regions is None else regions[i]) for i, tile in enumerate(tiles)]

    def shapes(self, tiles, regions) -> list:
        """Each tile argument's (rows, cols): a panel's tiles stacked along its range."""
        return self.stacked(self.tile_shapes(tiles, regions))

    def stacked(self, shapes: list) -> list:
        """Each tile argument's (rows, cols) from each tile's ``shapes``: a panel's stacked."""
        if self.groups is None:
            return shapes
        out = []
        for first, count, axis in self.groups:
            if count is None:
                out.append(shapes[first])
                continue
            part = shapes[first:first + count]
            out.append((sum(s[0] for s in part), part[0][1]) if axis == 0 else (part[0][0], sum(s[1] for s in part)))
        return out


@lru_cache(maxsize=4096)
def _expanded(call: Call, lengths: tuple[int, ...]) -> Call:
    lengths_of, axis_of = dict(zip(call.panels, lengths)), dict(zip(call.panels, call.panel_axes))
    modes, groups, main = [], [], None
    for index, mode in enumerate(call.modes):
        count = lengths_of.get(index)
        if index == call.main:
            main = len(modes)
        groups.append((len(modes), count, axis_of.get(index, 0)))
        modes += [mode] * (1 if count is None else count)
    return replace(call, modes=tuple(modes), main=main, panels=(), panel_axes=(), groups=tuple(groups))


def _shape(tile, region) -> tuple[int, int]:
    rows, cols = tile.shape
    if region is None:
        return rows, cols
    r, c = region if isinstance(region, tuple) else (region, slice(None))
    return len(range(*r.indices(rows))), len(range(*c.indices(cols)))


def tiles_text(tiles, axis: int | None = None) -> str:
    """``U[0:3, 0]`` for a panel of consecutive tiles of one column (or row) of one matrix,
    as a ``.tile`` range writes it; else the tiles one by one. A panel of one tile along ``axis``
    (0: a column's range, 1: a row's) is a range too, ``U[1:2, 1]``: a plain tile is another argument
    (a user kernel gets an array, not a list)."""
    if len(tiles) == 1 and axis is not None:
        tile = tiles[0]
        return (f"{tile.matrix.name}[{tile.i}:{tile.i + 1}, {tile.j}]" if axis == 0
                else f"{tile.matrix.name}[{tile.i}, {tile.j}:{tile.j + 1}]")
    if len(tiles) == 1:
        return str(tiles[0])
    first, last = tiles[0], tiles[-1]
    steps = [(b.i - a.i, b.j - a.j) for a, b in zip(tiles, tiles[1:])]
    same = all(t.matrix is first.matrix for t in tiles)
    if same and all(step == (1, 0) for step in steps):
        return f"{first.matrix.name}[{first.i}:{last.i + 1}, {first.j}]"
    if same and all(step == (0, 1) for step in steps):
        return f"{first.matrix.name}[{first.i}, {first.j}:{last.j + 1}]"
    return ", ".join(map(str, tiles))


def argument_texts(call, tiles, views) -> list[str]:
    """A task's tile arguments as its kernel declares them, as every label of a task names them
    (explain, graph, the trace, kernel notes and failures): a panel as one argument, its range
    (``A[0:5, 4]``, not its tiles one by one, which read as that many arguments), a sub-range after
    its tile, the rows and columns it covers (``A[1, 3][50:150, 0:100]``). ``tiles``: the task's, a
    panel's spread out (:func:`flatten`); ``views``: their slices (:func:`.matrix.call_views`; None:
    whole tiles)."""
    texts, first = [], 0
    axes = [axis if count is not None else None for _, count, axis in call.groups] if call.groups else None
    for index, (_, _, group, _) in enumerate(call.declared(tiles)):
        view = views[first] if views is not None and len(group) == 1 else None
        texts.append(tiles_text(group, axes[index] if axes else None) + part_text(part_of(group[0], view)))
        first += len(group)
    return texts


def takes_part(tiles, rank) -> bool:
    """Whether ``rank`` owns a tile of a panel (the generated driver's test of its part in a task)."""
    return any(tile.rank == rank for tile in tiles)


def flatten(call: Call, tiles: tuple, regions):
    """A submitted task with one tile per access: a panel argument (a tuple of tiles) spread
    out, the call :meth:`Call.expanded` to match. Tasks without panels pass unchanged."""
    if not call.panels:
        return call, tiles, regions
    lengths = tuple(len(tiles[i]) for i in call.panels)
    flat = tuple(tile for arg in tiles for tile in (arg if isinstance(arg, tuple) else (arg,)))
    if regions is not None:
        regions = tuple(r for arg, region in zip(tiles, regions)
                        for r in ((None,) * len(arg) if isinstance(arg, tuple) else (region,)))
    return call.expanded(lengths), flat, regions


@dataclass(frozen=True)
class Program:
    """Everything static about a compiled ``.tile`` program."""

    name: str
    source: str
    tiling: Tiling
    matrices: tuple[MatrixDecl, ...]
    workspaces: tuple[WorkspaceDecl, ...] = ()
    params: tuple[str, ...] = ()
    check: CheckDecl | None = None
    kernel_module: str | None = None
    source_dir: str | None = None  # the .tile's directory relative to the driver file's (compiled with -o)
    source_digest: str | None = None  # SHA-256 of the .tile's bytes as compiled, its first 16 hex digits
    warnings: tuple[str, ...] = ()  # the compiler's warnings, each its first line (file:line:col: warning[W...]: ...)
    calls: tuple[Call, ...] = ()
    derive_priorities: bool = False  # no call states a priority: the runtime derives them

    @property
    def kernels(self) -> list[str]:
        """The kernels its calls name, each once, in the order of the calls in the file (a trace
        keeps it: plot gives each kernel one colour in a real and a simulated run's charts)."""
        return list(dict.fromkeys(call.kernel for call in self.calls))

    @cached_property
    def written_panel_axes(self) -> frozenset:
        """The axes of the panels its calls write: 0 columns of tiles, 1 rows of tiles."""
        return frozenset(axis for call in self.calls for index, axis in zip(call.panels, call.panel_axes)
                         if call.modes[index] in WRITE_MODES)


def check_values(call, values) -> None:
    """An int argument beyond 64 bits (``q * q`` of a large ``q``) is refused, not handed on: a
    kernel in C would take it wrapped around (Python ints have no range of their own); so is a
    float argument that overflowed to inf, or nan (``1.0e308 * s``), which --set and the
    compiler refuse too. Refused as the loop nest submits the task: said at the call, with the
    loop's values, as the loop nest's other mistakes; by the walks of explain, graph and simulate
    too, which show the run."""
    for name, value in zip(call.values, values):
        if type(value) is int and not -INT64_MAX <= value <= INT64_MAX:
            raise ValueArgumentError(f"kernel {call.kernel}'s int argument {name} = {value} is beyond the 64-bit "
                                     f"range (±{INT64_MAX}, 2**63 - 1), which a kernel's int argument stays within "
                                     f"(C takes 64 bits): check its formula")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueArgumentError(f"kernel {call.kernel}'s float argument {name} = {value} is not a finite number "
                                     f"(float64 reaches about ±1.8e308): check its formula")
