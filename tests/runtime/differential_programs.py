"""Random valid ``.tile`` programs, and a sequential numpy interpreter of what they compute.

``tests/runtime/test_differential.py`` runs each program through tiledsl under several
configurations and compares the results with one another and with :func:`interpret`.

:func:`generate` writes, from a seed alone (``random.Random``), a program over two to
four matrices of different shapes (some given as arrays, others left to their
``zeros`` or ``identity`` initialiser), a read-only matrix ``L`` whose diagonal tiles
hold the well-conditioned triangles of trsm and trmm, and up to two workspaces. Its statements are nested
loops with affine bounds (``min``/``max`` of outer variables) and steps (negative
ones too), ``let``, ``if``/``else`` on loop variables (``%`` included), on the
geometry (``A.height(i)``) and on float and char parameters, and calls of two
families of kernels: the prelude's gemm, trsm, trmm and syrk with their options
(by position and by name), and user kernels (:data:`KERNEL_MODULE_SOURCE`) that are
deliberately order-sensitive, so that any reordering of dependent tasks shows in the
bits. Arguments are tiles, row and column panels and sub-ranges, of every mode, with
indices folded into range by ``%``, ``min`` and ``max``; values are passed by
position, by name or left to their defaults; calls carry priorities, and ``release``
statements are mixed in. A candidate program is run by :func:`interpret` at its
sizes; every statement the interpreter finds invalid there (a tile out of range, an
empty panel, a tile passed twice and written, shapes BLAS would refuse) is deleted
until none is, and only declarations the remaining statements use are written, so
that the checker has nothing to say about it.

:func:`interpret` executes the loop nest in program order, one call at a time,
on whole matrices: expressions are evaluated by Python (the language's arithmetic
is Python's, ``//`` and ``%`` included), prelude calls by the same BLAS routines
tiledsl binds (SciPy's dgemm, dtrsm, dtrmm and dsyrk, on the panels stacked), user
calls by the kernel module's own functions. Its results are therefore the bits a
correct run must produce.
"""
from __future__ import annotations

import random
import re
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import scipy.linalg.blas as scipy_blas

from tiledsl.compiler import check_source
from tiledsl.compiler.source import decode

#: The file name of the user kernel module; the test writes :data:`KERNEL_MODULE_SOURCE` there.
KERNEL_MODULE = "differential_kernels.py"

KERNEL_MODULE_SOURCE = '''\
"""User kernels of the differential test: order-sensitive, and independent of memory layout.

Each kernel updates its written tiles from a position-weighted, correctly rounded sum of
the tiles it reads, so that reading a tile before or after another task writes it, or
running two writers in either order, changes the result. ``math.fsum`` makes the sums
independent of the tiles' memory layout, and every update is element-wise, so that the
result is the same bits wherever the tiles live. Each has a ``_gpu`` twin for the
emulated GPUs, which hand it numpy arrays.
"""
import math

import numpy as np


def signature(tile):
    """A position-sensitive scalar summary of a tile, correctly rounded whatever its layout."""
    values = np.asarray(tile, dtype=np.float64)
    weights = np.arange(1, values.size + 1, dtype=np.float64).reshape(values.shape, order="F")
    return math.fsum((values * weights).ravel(order="F")) / max(values.size, 1)


def ramp(tile):
    """A small value that depends on each entry's row and column inside the tile."""
    rows = np.arange(tile.shape[0], dtype=np.float64)[:, None]
    cols = np.arange(tile.shape[1], dtype=np.float64)[None, :]
    return 0.01 * rows - 0.003 * cols


def mix(X, Y, a, k):
    """X <- X/2 + sin(signature(Y) + a) + k/100 + ramp."""
    s = signature(Y)
    X *= 0.5
    X += math.sin(s + a) + 0.01 * k + ramp(X)


def mix2(X, Z, Y, mode):
    """Updates X and Z from each other and from Y, in an order that depends on mode."""
    sy = signature(Y)
    if mode == "A":
        X *= 0.5
        X += math.sin(signature(Z) + sy)
        Z *= 0.75
        Z -= math.cos(signature(X))
    else:
        Z *= -0.5
        Z += math.sin(signature(X) - sy)
        X *= 0.25
        X += math.cos(signature(Z)) + ramp(X)


def put(X, c, k):
    """X <- c + k/10 + ramp, every entry written."""
    X[...] = c + 0.1 * k + ramp(X)


def pmix(P, X, k):
    """X <- X/2 + sin(a weighted sum of the signatures of panel P's tiles) + k/100."""
    s = math.fsum((index + 1) * signature(tile) for index, tile in enumerate(P))
    X *= 0.5
    X += math.sin(s) + 0.01 * k


def pupd(P, Y, a):
    """Each tile of panel P <- tile/2 + sin(signature(Y) + a + its place in P) + ramp."""
    s = signature(Y)
    for index, tile in enumerate(P):
        tile *= 0.5
        tile += math.sin(s + a + index) + ramp(tile)


def pout(P, c):
    """Each tile of panel P <- c + its place in P + ramp, every entry written."""
    for index, tile in enumerate(P):
        tile[...] = c + index + ramp(tile)


mix_gpu = mix
mix2_gpu = mix2
put_gpu = put
pmix_gpu = pmix
pupd_gpu = pupd
pout_gpu = pout
'''

#: Calls a candidate program may make before the interpreter gives up on it.
MAX_CALLS = 160
#: Calls a program must make, and calls it must contain, to be kept.
MIN_CALLS, MIN_CALL_STATEMENTS = 15, 4
#: The largest magnitude a result may reach: beyond it, a program is regenerated.
MAX_MAGNITUDE = 1e6
#: Candidate programs tried per seed before giving up.
ATTEMPTS = 200


class Invalid(Exception):
    """A statement that cannot run at the program's sizes; ``statement`` is set on the way out."""

    statement = None


class TooManyCalls(Exception):
    """A candidate program that makes more than :data:`MAX_CALLS` calls."""


# ---------------------------------------------------------------- kernels


@dataclass(frozen=True)
class Param:
    """A kernel parameter: a tile of mode ``kind`` (in, out, inout), or a value of type
    ``kind`` (int, float, char) with an optional ``default``. ``panel`` marks a user
    kernel's tile parameter that iterates over a panel."""

    kind: str
    name: str
    default: object = None
    panel: bool = False
    allowed: str = ""

    @property
    def is_tile(self) -> bool:
        """Whether the parameter takes a tile (or a panel) rather than a value."""
        return self.kind in ("in", "out", "inout")

    def declaration(self) -> str:
        """The parameter as a ``kernel`` declaration writes it."""
        text = f"{self.kind} {self.name}"
        if self.allowed:
            text += f' in "{self.allowed}"'
        if self.default is not None:
            text += f' = "{self.default}"' if self.kind == "char" else f" = {self.default}"
        return text


USER_KERNELS = {
    "mix": (Param("inout", "X"), Param("in", "Y"), Param("float", "a", 0.25), Param("int", "k", 0)),
    "mix2": (Param("inout", "X"), Param("inout", "Z"), Param("in", "Y"), Param("char", "mode", "A", allowed="AB")),
    "put": (Param("out", "X"), Param("float", "c"), Param("int", "k")),
    "pmix": (Param("in", "P", panel=True), Param("inout", "X"), Param("int", "k")),
    "pupd": (Param("inout", "P", panel=True), Param("in", "Y"), Param("float", "a")),
    "pout": (Param("out", "P", panel=True), Param("float", "c")),
}

#: The prelude kernels the programs call, as tiledsl/compiler/prelude.tile declares them.
PRELUDE_KERNELS = {
    "gemm": (Param("in", "A"), Param("in", "B"), Param("inout", "C"), Param("char", "transa", "N"),
             Param("char", "transb", "T"), Param("float", "alpha", -1.0), Param("float", "beta", 1.0)),
    "trsm": (Param("in", "A"), Param("inout", "B"), Param("char", "side", "R"), Param("char", "uplo", "L"),
             Param("char", "transa", "T"), Param("char", "diag", "N"), Param("float", "alpha", 1.0)),
    "trmm": (Param("in", "A"), Param("inout", "B"), Param("char", "side", "L"), Param("char", "uplo", "L"),
             Param("char", "transa", "N"), Param("char", "diag", "N"), Param("float", "alpha", 1.0)),
    "syrk": (Param("in", "A"), Param("inout", "C"), Param("char", "uplo", "L"), Param("char", "trans", "N"),
             Param("float", "alpha", -1.0), Param("float", "beta", 1.0)),
}

KERNELS = {**USER_KERNELS, **PRELUDE_KERNELS}

#: The values each prelude option is drawn from.
TRIANGLE_OPTIONS = {"side": ('"L"', '"R"'), "uplo": ('"L"', '"U"'), "transa": ('"N"', '"T"'), "diag": ('"N"', '"U"'),
                    "alpha": ("1.0", "0.5", "-2.0")}
PRELUDE_OPTIONS = {
    "gemm": {"transa": ('"N"', '"T"'), "transb": ('"N"', '"T"'), "alpha": ("-1.0", "0.5", "0.25"),
             "beta": ("1.0", "0.5", "-0.5")},
    "trsm": TRIANGLE_OPTIONS,
    "trmm": TRIANGLE_OPTIONS,
    "syrk": {"uplo": ('"L"', '"U"'), "trans": ('"N"', '"T"'), "alpha": ("-1.0", "0.5"), "beta": ("1.0", "0.5")},
}


@lru_cache(maxsize=None)
def user_kernel_bodies() -> dict:
    """The functions of :data:`KERNEL_MODULE_SOURCE`, by name."""
    namespace: dict = {}
    exec(compile(KERNEL_MODULE_SOURCE, KERNEL_MODULE, "exec"), namespace)
    return namespace


def transposed(matrix: np.ndarray, trans: str) -> np.ndarray:
    """op(matrix): the matrix itself for "N", its transpose for "T"."""
    return matrix.T if trans == "T" else matrix


def run_prelude(kernel: str, operands: list, values: dict) -> None:
    """Apply prelude ``kernel`` in place to ``operands`` (Fortran-ordered arrays) with SciPy's
    BLAS, the library tiledsl calls; raise :class:`Invalid` for shapes tiledsl would refuse."""
    if kernel == "gemm":
        a, b, c = operands
        left, right = transposed(a, values["transa"]), transposed(b, values["transb"])
        if left.shape[1] != right.shape[0] or (left.shape[0], right.shape[1]) != c.shape:
            raise Invalid("gemm: shapes do not conform")
        c[...] = scipy_blas.dgemm(values["alpha"], a, b, values["beta"], c, trans_a=values["transa"] == "T",
                                  trans_b=values["transb"] == "T")
    elif kernel in ("trsm", "trmm"):
        a, b = operands
        order = b.shape[0] if values["side"] == "L" else b.shape[1]
        if a.shape[0] < order or a.shape[1] < order:
            raise Invalid(f"{kernel}: no triangle of order {order}")
        routine = scipy_blas.dtrsm if kernel == "trsm" else scipy_blas.dtrmm
        b[...] = routine(values["alpha"], a[:order, :order], b, side=values["side"] == "R",
                         lower=values["uplo"] == "L", trans_a=values["transa"] == "T", diag=values["diag"] == "U")
    else:
        a, c = operands
        if c.shape[0] != c.shape[1] or transposed(a, values["trans"]).shape[0] != c.shape[0]:
            raise Invalid("syrk: shapes do not conform")
        c[...] = scipy_blas.dsyrk(values["alpha"], a, values["beta"], c, trans=values["trans"] == "T",
                                  lower=values["uplo"] == "L")


# ---------------------------------------------------------------- programs


@dataclass
class Matrix:
    """A declared matrix: its size as written and as numbers, its initialiser, and whether
    the test gives it as an array (``given``) or leaves it to the initialiser."""

    name: str
    rows: str
    cols: str
    shape: tuple
    initial: str = "zeros"
    given: bool = True
    read_only: bool = False


@dataclass
class Workspace:
    """A declared workspace: like matrix ``like``, with tile rows of ``rows`` rows."""

    name: str
    like: str
    rows: int


@dataclass
class TileRef:
    """``matrix[row, col]``, a panel ``matrix[row : row_end, col]`` or ``matrix[row, col : col_end]``,
    or a sub-range ``matrix[row, col][r0 : r1, c0 : c1]`` (``subrange``: pairs of ints or None)."""

    matrix: str
    row: str
    col: str
    row_end: str | None = None
    col_end: str | None = None
    subrange: tuple | None = None

    @property
    def is_panel(self) -> bool:
        """Whether the reference names a range of tiles."""
        return self.row_end is not None or self.col_end is not None

    def text(self) -> str:
        """The reference as a program writes it."""
        row = self.row + (f" : {self.row_end}" if self.row_end is not None else "")
        col = self.col + (f" : {self.col_end}" if self.col_end is not None else "")
        text = f"{self.matrix}[{row}, {col}]"
        if self.subrange:
            text += "[" + ", ".join(f"{'' if lo is None else lo}:{'' if hi is None else hi}"
                                    for lo, hi in self.subrange) + "]"
        return text


@dataclass
class Loop:
    """``for var in start .. stop [step step] { body }``."""

    var: str
    start: str
    stop: str
    step: str | None
    body: list


@dataclass
class If:
    """``if condition { then } [else { orelse }]``."""

    condition: str
    then: list
    orelse: list


@dataclass
class Let:
    """``let name = value``."""

    name: str
    value: str


@dataclass
class Call:
    """``kernel(tiles..., values..., name = keyword...) [priority priority]``."""

    kernel: str
    tiles: list
    values: list
    keywords: dict
    priority: str | None = None


@dataclass
class Release:
    """``release tile``."""

    tile: TileRef


@dataclass
class Program:
    """A generated program: its declarations, statements and sizes, and its text once written."""

    seed: int
    nb: int
    n: int
    params: dict
    matrices: dict
    workspaces: dict
    body: list
    text: str = ""
    kernels: list = field(default_factory=list)


# ---------------------------------------------------------------- geometry and the interpreter


class Geometry:
    """The tiling of one matrix or workspace, as the programs' geometry queries see it."""

    def __init__(self, rows: int, cols: int, nb: int, tile_rows: int | None = None):
        self.nb, self.tile_rows = nb, tile_rows
        self.mt = -(-rows // nb) if tile_rows is None else rows // tile_rows
        self.nt = -(-cols // nb)
        self.m, self.n = rows, cols

    def height(self, i: int) -> int:
        """Rows of tile row ``i``."""
        if not 0 <= i < self.mt:
            raise Invalid(f"height({i}) of {self.mt} tile rows")
        return self.tile_rows or min(self.nb, self.m - i * self.nb)

    def width(self, j: int) -> int:
        """Columns of tile column ``j``."""
        if not 0 <= j < self.nt:
            raise Invalid(f"width({j}) of {self.nt} tile columns")
        return min(self.nb, self.n - j * self.nb)

    def tile(self, array: np.ndarray, i: int, j: int) -> np.ndarray:
        """The view of tile (i, j) in ``array``, the whole matrix."""
        top = i * (self.tile_rows or self.nb)
        return array[top:top + self.height(i), j * self.nb:j * self.nb + self.width(j)]


def geometries(program: Program) -> dict:
    """Each matrix's and workspace's :class:`Geometry`, by name."""
    shapes = {name: Geometry(*m.shape, program.nb) for name, m in program.matrices.items()}
    for name, w in program.workspaces.items():
        like = shapes[w.like]
        shapes[name] = Geometry(like.mt * w.rows, like.n, program.nb, tile_rows=w.rows)
    return shapes


@lru_cache(maxsize=None)
def compiled_expression(text: str):
    """``text`` compiled once for :func:`evaluate`, which sees it again at every iteration."""
    return compile(text, "<tile expression>", "eval")


def evaluate(text: str, scope: dict):
    """The value of a ``.tile`` expression: its syntax and arithmetic are Python's."""
    try:
        return eval(compiled_expression(text), {"__builtins__": {}, "min": min, "max": max}, scope)
    except ZeroDivisionError as error:
        raise Invalid(str(error)) from None


def initial_matrices(program: Program) -> dict:
    """The arrays a run starts from, by name (Fortran order): uniform entries in [-0.5, 0.5)
    for the given matrices, plus 4 on the diagonal of ``L`` (the triangles of its diagonal
    tiles, which trsm and trmm take, are well conditioned), the initialiser for the others,
    zeros for the workspaces."""
    rng = np.random.default_rng(program.seed)
    arrays = {}
    for name, m in program.matrices.items():
        if m.given:
            array = rng.uniform(-0.5, 0.5, m.shape)
            if m.read_only:
                array += 4.0 * np.eye(*m.shape)
        else:
            array = np.eye(*m.shape) if m.initial == "identity" else np.zeros(m.shape)
        arrays[name] = np.asfortranarray(array)
    for name, shape in geometries(program).items():
        if name in program.workspaces:
            arrays[name] = np.zeros((shape.m, shape.n), order="F")
    return arrays


@dataclass
class Execution:
    """What running a program took: its number of calls, and the bytes of the whole tiles
    the largest call needs at once (the least ``gpu_memory`` that runs it)."""

    calls: int = 0
    largest_call_bytes: int = 0


class Interpreter:
    """Runs a program's statements in order on whole matrices, counting the calls."""

    def __init__(self, program: Program, arrays: dict):
        self.program, self.arrays = program, arrays
        self.shapes = geometries(program)
        self.execution = Execution()

    def run(self) -> Execution:
        """Execute the program."""
        scope = {"n": self.program.n, "nb": self.program.nb, **self.program.params, **self.shapes}
        self.block(self.program.body, scope)
        return self.execution

    def block(self, statements: list, scope: dict) -> None:
        """Run ``statements`` in a scope of their own; name the one that fails."""
        scope = dict(scope)
        for statement in statements:
            try:
                self.statement(statement, scope)
            except Invalid as error:
                if error.statement is None:
                    error.statement = statement
                raise

    def statement(self, statement, scope: dict) -> None:
        """Run one statement; a ``let`` binds its name in ``scope``, the rest of its block."""
        if isinstance(statement, Loop):
            step = evaluate(statement.step, scope) if statement.step else 1
            for value in range(evaluate(statement.start, scope), evaluate(statement.stop, scope), step):
                self.block(statement.body, {**scope, statement.var: value})
        elif isinstance(statement, If):
            self.block(statement.then if evaluate(statement.condition, scope) else statement.orelse, scope)
        elif isinstance(statement, Let):
            scope[statement.name] = evaluate(statement.value, scope)
        elif isinstance(statement, Release):
            self.tiles(statement.tile, scope)
        else:
            self.call(statement, scope)

    def tiles(self, ref: TileRef, scope: dict) -> list:
        """The (row, column) indices of the tiles ``ref`` names, checked to exist."""
        shape = self.shapes[ref.matrix]
        row, col = evaluate(ref.row, scope), evaluate(ref.col, scope)
        if ref.row_end is not None:
            places = [(i, col) for i in range(row, evaluate(ref.row_end, scope))]
        elif ref.col_end is not None:
            places = [(row, j) for j in range(col, evaluate(ref.col_end, scope))]
        else:
            places = [(row, col)]
        if not places:
            raise Invalid(f"empty panel {ref.text()}")
        for i, j in places:
            if not (0 <= i < shape.mt and 0 <= j < shape.nt):
                raise Invalid(f"no tile {ref.matrix}[{i}, {j}]")
        return places

    def views(self, ref: TileRef, scope: dict) -> list:
        """The arrays of the tiles ``ref`` names (its sub-range cut out), views of the matrix."""
        shape, array = self.shapes[ref.matrix], self.arrays[ref.matrix]
        views = [shape.tile(array, i, j) for i, j in self.tiles(ref, scope)]
        if ref.subrange:
            tile, cuts = views[0], []
            for extent, (lo, hi) in zip(tile.shape, ref.subrange):
                lo, hi = 0 if lo is None else lo, extent if hi is None else hi
                if not 0 <= lo < hi <= extent:
                    raise Invalid(f"sub-range outside {ref.text()}")
                cuts.append(slice(lo, hi))
            views = [tile[tuple(cuts)]]
        return views

    def call(self, call: Call, scope: dict) -> None:
        """One task: check its tiles, fill in its values, run its kernel."""
        self.execution.calls += 1
        if self.execution.calls > MAX_CALLS:
            raise TooManyCalls
        if call.priority is not None:
            evaluate(call.priority, scope)
        params = KERNELS[call.kernel]
        tile_params = [p for p in params if p.is_tile]
        self.refuse_written_twice(call, tile_params, scope)
        self.note_bytes(call, scope)
        operands = [self.views(ref, scope) for ref in call.tiles]
        values = self.values(call, params, scope)
        if call.kernel in USER_KERNELS:
            arguments = [views if param.panel else views[0] for param, views in zip(tile_params, operands)]
            user_kernel_bodies()[call.kernel](*arguments, *values.values())
        else:
            self.run_stacked(call, operands, values)

    def refuse_written_twice(self, call: Call, tile_params: list, scope: dict) -> None:
        """A tile may be passed twice only if no argument writes it."""
        modes: dict = {}
        for param, ref in zip(tile_params, call.tiles):
            for place in self.tiles(ref, scope):
                key = (ref.matrix, place)
                if key in modes and (param.kind != "in" or modes[key] != "in"):
                    raise Invalid(f"{ref.matrix}{list(place)} passed twice and written")
                modes[key] = param.kind

    def note_bytes(self, call: Call, scope: dict) -> None:
        """Count the whole tiles ``call`` names, each once, towards the largest call."""
        tiles = {(ref.matrix, place) for ref in call.tiles for place in self.tiles(ref, scope)}
        size = sum(8 * self.shapes[matrix].height(i) * self.shapes[matrix].width(j) for matrix, (i, j) in tiles)
        self.execution.largest_call_bytes = max(self.execution.largest_call_bytes, size)

    def values(self, call: Call, params: tuple, scope: dict) -> dict:
        """The call's value arguments by name, in declaration order, defaults filled in."""
        value_params = [p for p in params if not p.is_tile]
        given = dict(zip((p.name for p in value_params), call.values))
        given.update(call.keywords)
        values = {}
        for param in value_params:
            values[param.name] = evaluate(given[param.name], scope) if param.name in given else param.default
        return values

    def run_stacked(self, call: Call, operands: list, values: dict) -> None:
        """A prelude call: panels stacked (a column of tiles top to bottom, a row left to right)
        into one matrix, the kernel applied, the written ones put back."""
        stacked = []
        for ref, views in zip(call.tiles, operands):
            if not ref.is_panel:
                stacked.append(views[0])
            else:
                stacked.append(np.asfortranarray(np.vstack(views) if ref.row_end is not None else np.hstack(views)))
        run_prelude(call.kernel, stacked, values)
        for ref, views, matrix in zip(call.tiles, operands, stacked):
            if ref.is_panel:
                start = 0
                for view in views:
                    if ref.row_end is not None:
                        view[...] = matrix[start:start + view.shape[0], :]
                        start += view.shape[0]
                    else:
                        view[...] = matrix[:, start:start + view.shape[1]]
                        start += view.shape[1]


def interpret(program: Program, arrays: dict) -> Execution:
    """Run ``program`` in place on ``arrays`` (from :func:`initial_matrices`)."""
    with np.errstate(all="ignore"):
        return Interpreter(program, arrays).run()


# ---------------------------------------------------------------- the generator


class Generator:
    """Draws one candidate program from ``random.Random(seed)``; an ``affine`` one keeps to the
    class whose ranks walk only their share (docs/cluster.md): its indices are affine forms of the
    loop variables (a quotient too), kept in range by the ``if`` around their statement or taken
    modulo the matrix's tile count, and its conditions affine
    comparisons (of residues too), where the other's fold indices with ``%``, ``min`` and ``max``
    and ask the geometry."""

    def __init__(self, seed: int, affine: bool = False):
        self.rng = random.Random(seed)
        self.names = 0
        self.affine = affine
        self.guards: list = []  # affine: what keeps the indices of the statement being drawn in range

    def fresh(self) -> str:
        """A name no other loop or let has."""
        self.names += 1
        return f"v{self.names}"

    def program(self, seed: int) -> Program:
        """Sizes, declarations and a loop nest: two to four top-level loops, then a few
        statements. ``seed`` is the program's, from which its inputs are drawn."""
        rng = self.rng
        nb = rng.choice([2, 3, 4, 5, 6, 7, 8, 10, 12, 16])
        n = nb * rng.randint(2, 5) + rng.choice([0, 0, 1, rng.randint(1, nb - 1)])
        q = rng.randint(1, 4)
        sizes = [("n", n), ("n + 2", n + 2), ("n - 1", n - 1), ("2 * n", 2 * n), ("3 * nb", 3 * nb),
                 ("nb * 2 + 1", nb * 2 + 1), ("q * nb", q * nb), ("n + q", n + q)]
        matrices = {}
        for name in "ABCD"[:rng.randint(2, 4)]:
            (rows, m), (cols, c) = rng.choice(sizes), rng.choice(sizes)
            given = rng.random() < 0.8
            initial = "zeros" if given else rng.choice(["zeros", "identity"])
            matrices[name] = Matrix(name, rows, cols, (m, c), initial, given)
        self.written = list(matrices)
        matrices["L"] = Matrix("L", "4 * nb", "4 * nb", (4 * nb, 4 * nb), read_only=True)
        workspaces = {}
        for index in range(rng.randint(0, 2)):
            workspaces[f"W{index}"] = Workspace(f"W{index}", rng.choice(self.written), rng.randint(1, 3))
        self.written += list(workspaces)
        self.readable = self.written + ["L"]
        params = {"q": q, "shift": rng.choice([0.5, -1.25, 2.0]), "mode": rng.choice("AB")}
        body = []
        for _ in range(rng.randint(2, 4)):
            body += self.block([], 0, 1, loops_only=True)
        body += self.block([], 0, 2)
        return Program(seed, nb, n, params, matrices, workspaces, body)

    def block(self, names: list, depth: int, most: int, loops_only: bool = False) -> list:
        """One to ``most`` statements that may use the loop and let ``names`` in scope."""
        rng, statements = self.rng, []
        for _ in range(rng.randint(1, most)):
            draw = 0.0 if loops_only else rng.random()
            if depth < 3 and draw < 0.45:
                statements.append(self.loop(names, depth))
            elif names and depth < 4 and draw < 0.55:
                statements.append(If(self.condition(names), self.block(names, depth + 1, 2),
                                     self.block(names, depth + 1, 1) if rng.random() < 0.3 else []))
            elif names and draw < 0.6:
                self.guards = []
                statements.append(self.guarded(Release(self.tile(rng.choice(self.written), names,
                                                                 panel=rng.random() < 0.3, subrange=False))))
            elif names and draw < 0.65:
                let = Let(self.fresh(), rng.choice(["{v} + 1", "{v} - 2", "2 * {v} - 1"]).format(v=rng.choice(names)))
                statements.append(let)
                names = names + [let.name]
            else:
                statements.append(self.call(names))
        return statements

    def loop(self, names: list, depth: int) -> Loop:
        """A loop over a matrix's tile rows or columns: forwards, backwards, by steps, or
        bounded by an outer variable."""
        rng = self.rng
        count = f"{rng.choice(self.written)}.{rng.choice(['mt', 'nt'])}"
        var, kind = self.fresh(), rng.random()
        if names and kind < 0.3:
            outer = rng.choice(names)
            start, stop, step = rng.choice([(f"{outer} + 1", count, None), ("0", f"{outer} + 1", None),
                                            (f"max(0, {outer} - 1)", f"min({count}, {outer} + 2)", None),
                                            (f"{count} - 1", f"{outer} - 1", "-1")])
        elif kind < 0.55:
            start, stop, step = f"{count} - 1", "-1", "-1"
        elif kind < 0.7:
            start, stop, step = "0", count, rng.choice(["2", "3"])
        elif kind < 0.75:
            start, stop, step = f"{count} - 1", "-1", "-2"
        else:
            start, stop, step = "0", count, None
        return Loop(var, start, stop, step, self.block(names + [var], depth + 1, 3))

    def condition(self, names: list) -> str:
        """A condition on loop variables, the geometry, or the float and char parameters (affine:
        on loop variables, sizes and the parameters)."""
        rng = self.rng
        v, w = rng.choice(names), rng.choice(names)
        matrix = rng.choice(self.written)
        if self.affine:
            top = f"{matrix}.{rng.choice(['mt', 'nt'])}"
            condition = rng.choice([f"{v} % 2 == 0", f"{v} < {rng.randint(1, 3)}", f"{v} != 1", f"{v} + {w} >= 2",
                                    f"({v} + {w}) % 3 != 1", f"{v} % q == 0", f"2 * {v} < {top}",
                                    f"{v} > min({w}, 2)", f"{v} <= max({w} - 1, q)", f"{v} - q * {w} < 1",
                                    f"{top} > 3", f'mode == "{rng.choice("AB")}"', "shift < 1.0"])
        else:
            condition = rng.choice([f"{v} % 2 == 0", f"{v} < {rng.randint(1, 3)}", f"{v} != 1", f"{v} + {w} >= 2",
                                f'mode == "{rng.choice("AB")}"', rng.choice(["shift < 1.0", "shift > 0.0"]),
                                    f"{matrix}.height({v} % {matrix}.mt) == nb",
                                    f"{matrix}.width({v} % {matrix}.nt) < nb"])
        if rng.random() < 0.25:
            condition = rng.choice([f"not ({condition})", f"{condition} and {v} <= 4", f"{condition} or {v} == 0"])
        return condition

    def index(self, matrix: str, count: str, names: list) -> str:
        """A tile row (``count`` "mt") or column ("nt") index of ``matrix``, mostly folded into range."""
        rng = self.rng
        top = f"{matrix}.{count}"
        if not names or rng.random() < 0.15:
            return rng.choice(["0", f"{top} - 1", f"{top} // 2"])
        if self.affine:
            return self.affine_index(top, names)
        v, c = rng.choice(names), rng.randint(0, 3)
        return rng.choice([f"{v} % {top}", f"min({v}, {top} - 1)", f"({v} + {c}) % {top}", f"{top} - 1 - {v} % {top}",
                           f"max(min({v} - 1, {top} - 1), 0)", f"{v} // 2 % {top}", v, f"{v} * {c + 1} % {top}"])

    def affine_index(self, top: str, names: list) -> str:
        """An affine form of the loop variables below ``top``, its range said by :attr:`guards`, or one
        modulo ``top``, in range as it is."""
        rng = self.rng
        v, c = rng.choice(names), rng.randint(1, 3)
        index = rng.choice([v, v, f"{v} + {c}", f"{v} - {c}", f"{top} - 1 - {v}", f"2 * {v}",
                            f"{v} + {rng.choice(names)}", f"({v} + {c}) % {top}", f"{top} - 1 - {v} % {top}",
                            f"{v} // 2"])
        if "%" in index:
            return index  # in range as it is
        if "//" in index:  # (v >= 0: the loops count from 0 or down to 0)
            self.guards.append(f"{v} < 2 * {top}")
            return index
        if index != v or rng.random() < 0.5:
            self.guards.append(rng.choice([f"{index} < {top}", f"{top} > {index}", f"not ({index} >= {top})"]))
            self.guards += [f"{index} >= 0"] if "-" in index else []
        return index

    def guarded(self, statement):
        """``statement`` under an ``if`` of the :attr:`guards` its indices drew, if any."""
        if not self.guards or self.rng.random() < 0.1:  # unguarded: pruned where it leaves the matrix
            return statement
        return If(" and ".join(dict.fromkeys(self.guards)), [statement], [])

    def tile(self, matrix: str, names: list, panel: bool, subrange: bool) -> TileRef:
        """A tile of ``matrix``; a panel along either index when ``panel``, possibly a
        sub-range when ``subrange``."""
        rng = self.rng
        ref = TileRef(matrix, self.index(matrix, "mt", names), self.index(matrix, "nt", names))
        if panel:
            # (affine: a range from a modulo is one of a number of tiles; from a quotient, it ends at no min)
            if rng.random() < 0.5:
                ref.row_end = rng.choice(self.ends(ref.row, f"{matrix}.mt"))
            else:
                ref.col_end = rng.choice(self.ends(ref.col, f"{matrix}.nt"))
        elif subrange and rng.random() < 0.2:
            ref.subrange = rng.choice([((0, 1),), ((1, None),), ((None, None), (0, 1)), ((0, 2), (1, None)),
                                       ((None, 1),)])
        return ref

    def ends(self, start: str, count: str) -> list:
        """Where a panel from ``start`` may end, before ``count``."""
        if self.affine and "%" in start:
            return [f"{start} + 1"]
        if self.affine and "//" in start:
            return [count, f"{start} + 1"]
        return [count, f"min({start} + 2, {count})", f"{start} + 1"]

    def call(self, names: list):
        """A call of a user or prelude kernel, with a priority now and then (affine: under its guards)."""
        rng, self.guards = self.rng, []
        kernel = rng.choice(["mix", "mix", "mix", "mix2", "put", "pmix", "pupd", "pout", "gemm", "gemm", "trsm",
                             "trmm", "syrk", "syrk"])  # gemm and syrk twice: shapes that do not conform drop many
        if kernel in USER_KERNELS:
            call = self.user_call(kernel, names)
        else:
            call = self.prelude_call(kernel, names)
        if rng.random() < 0.3:
            call.priority = rng.choice([str(rng.randint(0, 5)), f"10 - {rng.choice(names)}" if names else "3"])
        return self.guarded(call)

    def user_call(self, kernel: str, names: list) -> Call:
        """A user kernel's tiles (panels where it iterates over one), then its values: some left
        to their defaults, the others by position until one goes by name."""
        rng, tiles, values, keywords = self.rng, [], [], {}
        for param in USER_KERNELS[kernel]:
            if param.is_tile:
                matrix = rng.choice(self.readable if param.kind == "in" else self.written)
                tiles.append(self.tile(matrix, names, panel=param.panel, subrange=not param.panel))
            elif param.default is not None and rng.random() < 0.4:
                continue
            elif keywords or (param.default is not None and rng.random() < 0.3):
                keywords[param.name] = self.value(param.kind, names)
            else:
                values.append(self.value(param.kind, names))
        return Call(kernel, tiles, values, keywords)

    def value(self, kind: str, names: list) -> str:
        """A value argument of type ``kind``: constants, parameters and loop variables."""
        rng = self.rng
        if kind == "int":
            if names and rng.random() < 0.7:
                return rng.choice([rng.choice(names), f"{rng.choice(names)} - {rng.randint(0, 3)}"])
            return str(rng.randint(-2, 5))
        if kind == "float":
            return rng.choice(["0.5", "-0.75", "1.5", "shift", "shift * 2",
                               f"1.0 / ({rng.choice(names)} + 1)" if names else "0.125"])
        return rng.choice(['"A"', '"B"', "mode"])

    def prelude_call(self, kernel: str, names: list) -> Call:
        """A prelude kernel's tiles (trsm and trmm take a triangle of L), then options: a prefix
        by position, some of the others by name, the rest left to their defaults."""
        rng = self.rng
        if kernel == "gemm":
            tiles = [self.tile(rng.choice(self.readable), names, panel=rng.random() < 0.35, subrange=False),
                     self.tile(rng.choice(self.readable), names, panel=False, subrange=False),
                     self.tile(rng.choice(self.written), names, panel=rng.random() < 0.35, subrange=False)]
        elif kernel in ("trsm", "trmm"):
            diagonal = str(rng.randint(0, 3))
            tiles = [TileRef("L", diagonal, diagonal),
                     self.tile(rng.choice(self.written), names, panel=rng.random() < 0.2, subrange=True)]
        else:
            tiles = [self.tile(rng.choice(self.readable), names, panel=False, subrange=False),
                     self.tile(rng.choice(self.written), names, panel=False, subrange=False)]
        options = [p.name for p in PRELUDE_KERNELS[kernel] if not p.is_tile]
        chosen = {name: rng.choice(PRELUDE_OPTIONS[kernel][name]) for name in options}
        positional = rng.randint(0, len(options))
        keywords = {name: chosen[name] for name in options[positional:] if rng.random() < 0.6}
        return Call(kernel, tiles, [chosen[name] for name in options[:positional]], keywords)


# ---------------------------------------------------------------- pruning and writing


def remove(statements: list, target) -> bool:
    """Delete ``target`` from the statement tree; whether it was found."""
    for index, statement in enumerate(statements):
        if statement is target:
            del statements[index]
            return True
        if any(remove(inner, target) for inner in children(statement)):
            return True
    return False


def children(statement) -> list:
    """The statement lists directly inside ``statement``."""
    if isinstance(statement, Loop):
        return [statement.body]
    if isinstance(statement, If):
        return [statement.then, statement.orelse]
    return []


def walk(statements: list):
    """Every statement of the tree, outer ones first."""
    for statement in statements:
        yield statement
        for inner in children(statement):
            yield from walk(inner)


def statement_text(statement) -> str:
    """The expressions and tiles of one statement (not of those inside it), for finding names."""
    if isinstance(statement, Loop):
        return f"{statement.start} {statement.stop} {statement.step or ''}"
    if isinstance(statement, If):
        return statement.condition
    if isinstance(statement, Let):
        return statement.value
    if isinstance(statement, Release):
        return statement.tile.text()
    return " ".join([ref.text() for ref in statement.tiles] + statement.values + list(statement.keywords.values())
                    + [statement.priority or ""])


def names_in(text: str) -> set:
    """The identifiers of an expression text, string literals left out."""
    return set(re.findall(r"[A-Za-z_]\w*", re.sub(r'"[^"]*"', "", text)))


def used_names(program: Program) -> set:
    """The names the statements mention (matrices, workspaces, parameters, lets)."""
    return set().union(*(names_in(statement_text(s)) for s in walk(program.body)))


def drop_unused(program: Program) -> None:
    """Keep only the lets, kernels, parameters, matrices and workspaces the statements use,
    and a workspace's matrix: the checker warns of the others (W300)."""
    for statement in reversed(list(walk(program.body))):  # a let's users come after it
        if isinstance(statement, Let) and statement.name not in used_names(program):
            remove(program.body, statement)
    used = used_names(program)
    program.workspaces = {name: w for name, w in program.workspaces.items() if name in used}
    used |= {w.like for w in program.workspaces.values()}
    program.matrices = {name: m for name, m in program.matrices.items() if name in used}
    used |= set().union(*(names_in(f"{m.rows} {m.cols}") for m in program.matrices.values()))
    program.params = {name: value for name, value in program.params.items() if name in used}
    called = {s.kernel for s in walk(program.body) if isinstance(s, Call)}
    program.kernels = [kernel for kernel in USER_KERNELS if kernel in called]


def render(program: Program) -> str:
    """The ``.tile`` text of ``program``."""
    lines = []
    if program.kernels:
        lines.append(f'use "{KERNEL_MODULE}"')
        for kernel in program.kernels:
            lines.append(f"kernel {kernel}({', '.join(p.declaration() for p in USER_KERNELS[kernel])})")
        lines.append("")
    lines += [f"program differential_{program.seed} {{", f"  tiling uniform(nb = {program.nb})"]
    for name, value in program.params.items():
        lines.append(f'  param {name} = "{value}"' if isinstance(value, str) else f"  param {name} = {value}")
    for m in program.matrices.values():
        lines.append(f"  {'in ' if m.read_only else ''}matrix {m.name}[{m.rows}, {m.cols}] = {m.initial}")
    for w in program.workspaces.values():
        lines.append(f"  workspace {w.name} like {w.like} rows {w.rows}")
    render_block(program.body, 1, lines)
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_block(statements: list, depth: int, lines: list) -> None:
    """Append the lines of ``statements``, indented ``depth`` levels."""
    pad = "  " * depth
    for s in statements:
        if isinstance(s, Loop):
            lines.append(f"{pad}for {s.var} in {s.start} .. {s.stop}{f' step {s.step}' if s.step else ''} {{")
            render_block(s.body, depth + 1, lines)
            lines.append(f"{pad}}}")
        elif isinstance(s, If):
            lines.append(f"{pad}if {s.condition} {{")
            render_block(s.then, depth + 1, lines)
            if s.orelse:
                lines.append(f"{pad}}} else {{")
                render_block(s.orelse, depth + 1, lines)
            lines.append(f"{pad}}}")
        elif isinstance(s, Let):
            lines.append(f"{pad}let {s.name} = {s.value}")
        elif isinstance(s, Release):
            lines.append(f"{pad}release {s.tile.text()}")
        else:
            arguments = [ref.text() for ref in s.tiles] + s.values + [f"{k} = {v}" for k, v in s.keywords.items()]
            priority = f" priority {s.priority}" if s.priority is not None else ""
            lines.append(f"{pad}{s.kernel}({', '.join(arguments)}){priority}")


def prune(program: Program) -> Execution | None:
    """Delete the statements the interpreter finds invalid until it runs the program; what
    running it took, or None when it makes too many calls or its results are unusable (not
    finite, or beyond :data:`MAX_MAGNITUDE`)."""
    while True:
        arrays = initial_matrices(program)
        try:
            execution = interpret(program, arrays)
        except TooManyCalls:
            return None
        except Invalid as error:
            remove(program.body, error.statement)
            continue
        results = np.concatenate([a.ravel() for a in arrays.values()])
        if not np.isfinite(results).all() or np.abs(results).max() > MAX_MAGNITUDE:
            return None
        return execution


def generate(seed: int, affine: bool = False) -> Program:
    """The program of ``seed``: the first candidate that runs, makes enough calls, and keeps
    its results finite and moderate. Its ``text`` is set. ``affine``: see :class:`Generator`."""
    for attempt in range(ATTEMPTS):
        program = Generator(seed * ATTEMPTS + attempt, affine).program(seed)
        execution = prune(program)
        if execution is None or execution.calls < MIN_CALLS:
            continue
        if sum(isinstance(s, Call) for s in walk(program.body)) < MIN_CALL_STATEMENTS:
            continue
        drop_unused(program)
        program.text = render(program)
        if affine and not accepted(program):
            continue
        return program
    raise AssertionError(f"no usable program for seed {seed} in {ATTEMPTS} attempts")


def accepted(program: Program) -> bool:
    """Whether the checker has nothing to say about ``program``. An affine program's indices are kept
    in range by its ifs at its sizes, where the checker judges every size: one it proves out of range
    at some size, or passing one tile twice where one is written (E208, E204), is drawn again."""
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / KERNEL_MODULE).write_text(KERNEL_MODULE_SOURCE)
        result = check_source(decode(str(Path(folder) / "program.tile"), program.text.encode()))
    return result.ok and not result.diagnostics


# ---------------------------------------------------------------- what a program covers


#: What :func:`features` counts: the generator's features, each of which some program should use.
FEATURES = ("loop", "nested loop", "negative step", "step above 1", "bound on an outer variable", "min/max bound",
            "if", "else", "% condition", "geometry condition", "char parameter condition",
            "float parameter condition", "not/and/or", "let", "release", "release of a panel",
            *(f"kernel {name}" for name in KERNELS), "priority", "value by position", "value by name",
            "value left to its default", "in argument", "out argument", "inout argument", "column panel",
            "row panel", "sub-range", "% index", "min/max index", "workspace argument", "matrix",
            "matrix left to its initialiser", "workspace")


def features(program: Program) -> Counter:
    """How often ``program`` uses each of :data:`FEATURES`, by name (those it uses)."""
    counts = Counter({"matrix": len(program.matrices), "workspace": len(program.workspaces),
                      "matrix left to its initialiser": sum(not m.given for m in program.matrices.values())})
    for statement, loops in walk_with_loops(program.body, ()):
        if isinstance(statement, Loop):
            counts.update(loop_features(statement, loops))
        elif isinstance(statement, If):
            counts.update(condition_features(statement))
        elif isinstance(statement, Let):
            counts["let"] += 1
        elif isinstance(statement, Release):
            counts.update({"release": 1, "release of a panel": statement.tile.is_panel})
        else:
            counts.update(call_features(statement, program))
    assert set(counts) <= set(FEATURES), set(counts) - set(FEATURES)
    return +counts  # the features it uses


def walk_with_loops(statements: list, loops: tuple):
    """Every statement of the tree, with the variables of the loops around it."""
    for statement in statements:
        yield statement, loops
        inner = loops + (statement.var,) if isinstance(statement, Loop) else loops
        for block in children(statement):
            yield from walk_with_loops(block, inner)


def loop_features(loop: Loop, loops: tuple) -> dict:
    """The features of one loop, inside ``loops``."""
    return {"loop": 1, "nested loop": bool(loops), "negative step": (loop.step or "").startswith("-"),
            "step above 1": loop.step in ("2", "3"),
            "bound on an outer variable": bool(names_in(f"{loop.start} {loop.stop}") & set(loops)),
            "min/max bound": bool(names_in(f"{loop.start} {loop.stop}") & {"min", "max"})}


def condition_features(statement: If) -> dict:
    """The features of one ``if``."""
    names = names_in(statement.condition)
    geometry = bool(names & {"height", "width"})
    return {"if": 1, "else": bool(statement.orelse), "% condition": "%" in statement.condition and not geometry,
            "geometry condition": geometry, "char parameter condition": "mode" in names,
            "float parameter condition": "shift" in names, "not/and/or": bool(names & {"not", "and", "or"})}


def call_features(call: Call, program: Program) -> Counter:
    """The features of one call: its kernel, priority, values and tile arguments."""
    params = KERNELS[call.kernel]
    value_count = sum(not p.is_tile for p in params)
    counts = Counter({f"kernel {call.kernel}": 1, "priority": call.priority is not None,
                      "value by position": len(call.values), "value by name": len(call.keywords),
                      "value left to its default": value_count - len(call.values) - len(call.keywords)})
    for param, ref in zip([p for p in params if p.is_tile], call.tiles):
        indices = f"{ref.row} {ref.col}"
        counts.update({f"{param.kind} argument": 1, "column panel": ref.row_end is not None,
                       "row panel": ref.col_end is not None, "sub-range": bool(ref.subrange),
                       "% index": "%" in indices, "min/max index": bool(names_in(indices) & {"min", "max"}),
                       "workspace argument": ref.matrix in program.workspaces})
    return counts
