"""Backward errors computed where the data lives (DESIGN §5): no matrix is gathered.

A check is itself a stream of tile tasks run by the same engine, with the run's
workers and ranks, so on several ranks it moves only the tiles its products
need, with the same protocol as the factorization. Its products are BLAS calls
on whole tiles (the factorization's own gemm kernels); only tiles that straddle
the diagonal are copied to cut out a triangle:

* Cholesky: R = A − L·Lᵀ on the lower tiles (L = the lower triangle of the result);
* LU: R = A − L·U (L unit lower, U upper); with the interchanges of a workspace
  P, R = P·A − L·U, the rows of P·A read from the input where the interchanges
  took them; a residual near the threshold again, exactly (:func:`exact_update`:
  where the factors grew, float64's own rounding is as large as R);
* QR, as the DPLASMA testers do it: Q = Q·I by replaying the factorization's
  reflectors (geqrt/tpqrt/ttqrt calls, last to first, through gemqrt/tpmqrt/ttmqrt), skipping
  the columns where I is still zero (what forming Q costs, DORGQR); then
  A − Q·R and D = I − QᵀQ (its lower tiles) by tile products;
* solve: R = B₀ − op(A₀)·X; inverse: R = I − op(A₀)·op(X); product:
  R = β·op(C₀) + α·op(A₀)·op(B₀) − C (on the part of C its qualifiers keep). The
  ops (:mod:`.operands`) of originals are built on each tile's owner from the
  input's source, those of finals by copy tasks; products skip the tiles an op
  makes zero (a triangle).

The streams of one check are submitted as one task graph, so its phases overlap.
The scalings are in :mod:`.checks`; :func:`Verifier.check` dispatches a program's
``check`` declaration (a user check, :mod:`.usercheck`, is the one that gathers).

Norms reduce per-column (or per-row) sums of local tiles (O(n) numbers per rank)
over MPI. An original matrix is rebuilt tile by tile on its owner from the input's
source (a workspace's from zeros). Checks run on the hosts, after the run has
brought GPU tiles home.
"""
from __future__ import annotations

import bisect
import contextlib
import functools
import math
from fractions import Fraction

import numpy as np

from ..language import CHECK_ARGUMENTS, QR_KERNELS
from . import kernels
from .checks import EPS, CheckError, Subnormal, exact, near, scaled
from .geometry import Geometry
from .matrix import TiledMatrix
from .operands import (Operand, View, materialize, meets, original_block, part_of, set_diagonal, triangle, unit_block,
                       view_of)
from .program import Call
from .recording import record
from .world import UsageError

#: the kernel that applies the reflectors each of them makes
_APPLY = {"geqrt": "gemqrt", "tpqrt": "tpmqrt", "ttqrt": "ttmqrt"}
#: the residuals of a built-in check that gives more than one, in order (the others give one, named as the check)
RESIDUAL_NAMES = {"qr": ("qr", "orthogonality")}
_CALLS: dict = {}


def _call(name: str, modes: tuple) -> Call:
    """One call site per check kernel (tasks of a check point at no .tile line)."""
    key = (name, modes)
    if key not in _CALLS:
        main = next(i for i, m in enumerate(modes) if m != "in")
        _CALLS[key] = Call(name, modes, main=main, line=0, text=f"{name} (residual check)", role="check task")
    return _CALLS[key]


class Stream:
    """Submits check tasks: those this rank takes part in; version counts for the others."""

    def __init__(self, engine):
        self.engine = engine
        self.rank = engine.rank

    def task(self, name, modes, tiles, kernel, regions=None) -> None:
        if any(t.rank == self.rank for t in tiles):
            self.engine.submit(_call(name, modes), tiles, regions, 0, kernel=_quietly(kernel))
            return
        for tile, mode in zip(tiles, modes):
            if mode != "in":
                tile.matrix.advance(tile)


def _quietly(kernel):
    """``kernel`` with numpy's floating-point warnings off: a NaN or an infinity in a run's matrices
    is the check's to report (its verdict), not a warning of its arithmetic (an error under
    ``-W error``, which failed the check's task)."""
    @functools.wraps(kernel)
    def quiet(*args):
        with np.errstate(all="ignore"):
            kernel(*args)
    return quiet


class Tally:
    """Counts the check tasks a rank takes part in and submits nothing (the progress bar's total)."""

    def __init__(self, rank: int):
        self.rank = rank
        self.count = 0

    def task(self, name, modes, tiles, kernel, regions=None) -> None:
        self.count += any(t.rank == self.rank for t in tiles)


class Verifier:
    """Runs the residual checks of one finished run on this rank's share of the tiles.

    ``progress(total)`` returns a context (a progress bar, or nothing) that is open
    while this rank's ``total`` check tasks run.
    """

    def __init__(self, engine, matrices: dict, sources: dict, comm, first_tag: int,
                 progress=lambda total: contextlib.nullcontext()):
        self.engine, self.matrices, self.comm = engine, matrices, comm
        self.sources = sources  # matrix name -> source(r0, r1, c0, c1), the input block
        self.first_tag = first_tag
        self.progress = progress
        self.notes: list[str] = []  # what a check's verdict does not say (A numerically singular)

    # ---------------------------------------------------------------- matrices
    def matrix(self, name: str, geometry: Geometry, distribution) -> TiledMatrix:
        """A new host matrix of the check (its tiles carry no data yet)."""
        matrix = TiledMatrix(name, geometry, distribution, self.engine.rank, self.first_tag, on_host=True)
        self.engine.attach({**self.engine.matrices, f"check {name} {self.first_tag}": matrix})  # a key of its own
        self.first_tag += matrix.mt * matrix.nt
        return matrix

    @staticmethod
    def fill(matrix: TiledMatrix, block) -> TiledMatrix:
        """Give each local tile a copy of ``block(tile, r0, r1, c0, c1)``, as a Fortran float64
        array (a copy: a source may hand out views of the caller's input array)."""
        g = matrix.geometry
        for tile in matrix.local_tiles():
            (r0, r1), (c0, c1) = g.row_range(tile.i), g.col_range(tile.j)
            tile.data = np.array(block(tile, r0, r1, c0, c1), dtype=np.float64, order="F")
        return matrix

    def original(self, name: str, view: View, geometry: Geometry, distribution) -> Operand:
        """op(M₀) of matrix ``name``, tiled by ``geometry``: each tile built on its owner."""
        source = self.source(name)
        matrix = self.fill(self.matrix(f"op({name})", geometry, distribution),
                           lambda tile, r0, r1, c0, c1: original_block(source, view, r0, r1, c0, c1))
        return Operand(matrix, view)

    def final(self, name: str, view: View) -> tuple[Operand, list]:
        """op(M) of the final matrix ``name`` and the task streams that make it (none for a plain view)."""
        stored = self.matrices[name]
        fill_untouched(stored)
        if view.plain:
            return Operand(stored), []
        target = self.fill(self.matrix(f"op({name})", view.geometry(stored.geometry), stored.distribution),
                           unit_block(view))
        return Operand(target, view), [lambda stream: materialize(stream, stored, view, target)]

    def source(self, name: str):
        """``source(r0, r1, c0, c1)`` of matrix ``name``'s original (a workspace starts as zeros)."""
        return self.sources.get(name, _zeros)

    def run(self, *streams) -> None:
        """Run the task ``streams``, in this order, as one task graph under one progress bar."""
        tally = Tally(self.engine.rank)
        for stream in streams:
            stream(tally)

        def generate(_runtime, _params):  # the engine's signature for a loop nest
            for stream in streams:
                stream(Stream(self.engine))
        with self.progress(tally.count):
            self.engine.run(generate, None)

    # ---------------------------------------------------------------- checks
    def check(self, decl, driver, params) -> dict:
        """The residuals of the built-in check ``decl`` (a :class:`~.program.CheckDecl`); a
        :class:`CheckError` where float64 could not form them (:class:`~.checks.Subnormal`)."""
        try:
            return self._residuals(decl, driver, params)
        except Subnormal as tiny:
            raise CheckError(decl.kind, f"check {decl.kind}: {tiny}", RESIDUAL_NAMES.get(decl.kind, ())) from None

    def _residuals(self, decl, driver, params) -> dict:
        where = decl.place(driver.PROGRAM.source if driver is not None else None)
        views = _views(decl, where)
        names = decl.args
        for name, view in zip(names, views):
            if view.direct is not None and view.mirror is not None:  # symmetric: one triangle mirrors the other
                _square(self.matrices[name], name, where, "symmetric")
        if decl.kind == "cholesky":
            factored = self.matrices[names[0]]
            _square(factored, names[0], where)
            upper = bool(decl.qualifiers) and "upper" in decl.qualifiers[0]
            if upper and factored.geometry.row_starts != factored.geometry.col_starts:
                raise UsageError(f"{where}: check cholesky(upper {names[0]}) needs tiles whose rows and columns "
                                 f"are cut alike (a uniform tiling); check an upper Cholesky on hybrid tiles "
                                 f"with a check of your own")
            return self.cholesky(factored, upper)
        if decl.kind == "lu":
            return self.lu(*(self.matrices[name] for name in names))
        if decl.kind == "qr":
            return self.qr(self.matrices[names[0]], driver, params)
        if decl.kind == "solve":
            return self.solve(*names, views[0], where)
        if decl.kind == "inverse":
            return self.inverse(*names, *views, where)
        options = decl.option_values(params, where)
        unknown = set(options) - {"alpha", "beta"}
        if unknown:
            raise UsageError(f"{where}: unknown option {', '.join(sorted(unknown))} (a product takes alpha and beta)")
        return self.product(*names, views, float(options.get("alpha", 1.0)), float(options.get("beta", 1.0)), where)

    def cholesky(self, factored: TiledMatrix, upper: bool = False) -> dict:
        """‖A₀ − L·Lᵀ‖₁, L in the lower triangle of ``factored``, or with ``upper`` ‖A₀ − Uᵀ·U‖₁, U in
        its upper triangle (A₀ then read from its upper triangle, as dpotrf "U" reads it), over
        ‖A₀‖₁·n·ε. The residual is kept in R's lower triangle either way; an upper one needs tiles
        cut alike in rows and columns (:meth:`check` refuses others)."""
        fill_untouched(factored)
        source = self.source(factored.name)
        if upper:  # R's lower triangle holds A₀'s upper one, transposed
            source = _transposed(source)
        residual = self.fill(self.matrix("R", factored.geometry, factored.distribution), _lower_of(source))
        norm_a = self._norm(residual, symmetric=True)
        self.run(lambda stream: _cholesky_products(stream, factored, residual, upper))
        return {"cholesky": scaled(self._norm(residual, symmetric=True), norm_a, factored.n)}

    def lu(self, factored: TiledMatrix, pivots: TiledMatrix | None = None) -> dict:
        """‖A − L·U‖₁, or with the interchanges in ``pivots`` ‖P·A − L·U‖₁ (over ‖A‖₁·n·ε)."""
        fill_untouched(factored)
        source = self.source(factored.name)
        residual = self.matrix("R", factored.geometry, factored.distribution)
        rows = None if pivots is None else _permutation(self._interchanges(factored, pivots), factored.m)

        def fill_residual():  # A₀, or P·A₀: the rows of A₀ where the interchanges took them
            if rows is None:
                self.fill(residual, _whole(source))
            else:
                _fill_rows(residual, source, rows)
        fill_residual()
        norm_a = self._norm(residual)  # row interchanges keep the column sums
        self.run(lambda stream: _lu_products(stream, factored, residual))
        value = scaled(self._norm(residual), norm_a, factored.n)
        if not near(value) or self._largest_entry(factored) >= 2.0 ** EXACT_RANGE:
            return {"lu": value}
        # near the threshold float64's sums are not to be trusted where the factors grew (58.6
        # for an exact 146): the products again, with no rounding but the last (exact_update)
        fill_residual()
        low = self.fill(self.matrix("R low", residual.geometry, residual.distribution), _zeros_block)
        self.run(lambda stream: _lu_products(stream, factored, residual, low))
        for tile in residual.local_tiles():
            tile.data += low.tile(tile.i, tile.j).data
        return {"lu": scaled(self._norm(residual), norm_a, factored.n)}

    def _largest_entry(self, matrix: TiledMatrix) -> float:
        """max |entry| of ``matrix`` over every rank."""
        largest = float(max((np.max(np.abs(tile.data)) for tile in matrix.local_tiles() if tile.data.size),
                            default=0.0))
        return self.comm.allreduce_max(largest) if self.comm is not None else largest

    def qr(self, factored: TiledMatrix, driver, params) -> dict:
        reflectors = record(driver, self.matrices, params, keep=lambda call: call.kernel in QR_KERNELS).submitted
        for matrix in self.matrices.values():  # the reflectors' V and T too
            fill_untouched(matrix)
        g, distribution = factored.geometry, factored.distribution
        k = min(factored.m, factored.n)
        columns = tuple(min(c, k) for c in g.col_starts)  # Q has k columns; QᵀQ is k×k
        q = self.fill(self.matrix("Q", g, distribution), _identity)
        residual = self.fill(self.matrix("R", g, distribution), _whole(self.source(factored.name)))
        norm_a = self._norm(residual)
        gram = self.fill(self.matrix("D", Geometry(columns, columns, g.s), distribution), _identity)
        self.run(lambda stream: _apply_q_to_identity(stream, reflectors, q),
                 lambda stream: _qr_products(stream, q, factored, residual),
                 lambda stream: _gram_products(stream, q, gram))
        return dict(zip(RESIDUAL_NAMES["qr"], (scaled(self._norm(residual), norm_a, factored.n),
                                               scaled(self._norm(gram, symmetric=True), 1.0, factored.n))))

    def solve(self, a: str, x: str, b: str, view_a: View, where: str) -> dict:
        """‖B₀ − op(A₀)·X‖∞ / ((‖op(A₀)‖∞·‖X‖∞ + ‖B₀‖∞)·n·ε), DPLASMA's check of a solve."""
        n = _square(self.matrices[a], a, where)
        solution, streams = self.final(x, View())
        g = solution.matrix.geometry
        _conform(where, (x, solution.matrix), (b, self.matrices[b]), rows=(n, a),
                 columns=f"one column of {x} for each of {b}")
        residual = self.fill(self.matrix("R", g, solution.matrix.distribution), _whole(self.source(b)))
        left = self.original(a, view_a, Geometry(g.row_starts, g.row_starts), solution.matrix.distribution)
        norm_a, norm_x, norm_b = (self._norm(m, infinity=True) for m in (left.matrix, solution.matrix, residual))
        self.run(*streams, lambda stream: _products(stream, left, solution, residual))
        self._note_singular(a, norm_a * norm_x / norm_b if norm_b else norm_a * norm_x,
                            f"‖{a}‖∞·‖X‖∞/‖B‖∞ (X the solution, B the right-hand side as given), a lower bound of its "
                            f"condition number,")
        return {"solve": scaled(self._norm(residual, infinity=True), norm_a * norm_x + norm_b, n)}

    def inverse(self, a: str, x: str, view_a: View, view_x: View, where: str) -> dict:
        """‖I − op(A₀)·op(X)‖₁ / (‖op(A₀)‖₁·‖op(X)‖₁·n·ε), DPLASMA's check of an inverse."""
        n = _square(self.matrices[a], a, where)
        _conform(where, (x, self.matrices[x]), (a, self.matrices[a]), columns=f"{x} is the inverse of {a}")
        right, streams = self.final(x, view_x)
        g = right.matrix.geometry
        residual = self.fill(self.matrix("R", g, right.matrix.distribution), _identity)
        left = self.original(a, view_a, Geometry(g.row_starts, g.row_starts), right.matrix.distribution)
        norm_a = self._norm(left.matrix)
        self.run(*streams, lambda stream: _products(stream, left, right, residual))
        norm_x = self._norm(right.matrix)  # (made by the streams, where X is a view)
        self._note_singular(a, norm_a * norm_x, f"‖{a}‖₁·‖X‖₁ (X the computed inverse), an estimate of its "
                                                f"condition number,")
        return {"inverse": scaled(self._norm(residual), norm_a * norm_x, n)}

    def _note_singular(self, a: str, condition, estimate: str) -> None:
        """A note where ``condition`` (``estimate``, in words) is past 1/ε: the backward error a check
        measures is then small for an X with no correct digit (DPLASMA's testers pass such an X)."""
        if isinstance(condition, float) and not math.isfinite(condition) or condition * exact(EPS) < 1:
            return
        shown = f"{float(condition):.3g}" if condition < 1e300 else "past 1e300"
        self.notes.append(f"{a} is numerically singular: {estimate} is {shown}, past 1/ε = "
                          f"{1 / EPS:.3g}; the check's residual is measured against it, so it can pass where X "
                          f"has no correct digit")

    def product(self, c: str, a: str, b: str, views: tuple, alpha: float, beta: float, where: str) -> dict:
        """‖C − (α·op(A₀)·op(B₀) + β·op(C₀))‖∞ / ((|α|·‖op(A₀)‖∞·‖op(B₀)‖∞ + |β|·‖op(C₀)‖∞)·k·ε),
        on the part of C that its qualifier keeps (a symmetric C: its lower triangle)."""
        view_c, view_a, view_b = views
        result = self.matrices[c]
        (m, k), (k_b, n) = (_op_shape(self.matrices[name], view) for name, view in ((a, view_a), (b, view_b)))
        if (m, n) != (result.m, result.n) or k != k_b:
            raise UsageError(f"{where}: op(A) = {_as_read(a, view_a)} is {m}×{k} and op(B) = {_as_read(b, view_b)} "
                             f"is {k_b}×{n}: their product cannot be {c}, which is {result.m}×{result.n}")
        part, symmetric = _result_part(view_c)
        fill_untouched(result)
        g = result.geometry
        inner = Geometry.uniform(k, k, g.height(0)).row_starts
        residual = self.fill(self.matrix("R", g, result.distribution),
                             lambda tile, r0, r1, c0, c1: original_block(self.source(c), view_c, r0, r1, c0, c1))
        norm_c = self._norm(residual, symmetric, infinity=True, part=part) if beta else 0  # β = 0: C₀ unread
        left = self.original(a, view_a, Geometry(g.row_starts, inner), result.distribution)
        right = self.original(b, view_b, Geometry(inner, g.col_starts, g.s), result.distribution)
        norm_a, norm_b = self._norm(left.matrix, infinity=True), self._norm(right.matrix, infinity=True)
        _scale(residual, beta)
        _scale(left.matrix, -alpha)  # the products subtract: R − (−α·A)·B
        self.run(lambda stream: _subtract(stream, result, residual, part),
                 lambda stream: _products(stream, left, right, residual, part))
        bound = exact(abs(alpha)) * norm_a * norm_b + exact(abs(beta)) * norm_c
        return {"product": scaled(self._norm(residual, symmetric, infinity=True, part=part), bound, k)}

    def _interchanges(self, factored: TiledMatrix, pivots: TiledMatrix) -> np.ndarray:
        """LAPACK's ipiv − 1 (global rows), on every rank, from the first row of ``pivots``' tiles
        on the diagonal: column j of panel t names the row, relative to the panel's first row
        (its diagonal row), that the panel's row j was interchanged with."""
        g = factored.geometry
        ipiv = np.zeros(min(factored.m, factored.n))
        unwritten = np.zeros(g.nt)  # 1 for a panel whose pivots' tile no task wrote (summed over the ranks)
        if pivots.geometry.col_starts != g.col_starts or pivots.mt < factored.mt:
            raise UsageError(f"check lu: the pivots {pivots.name} need the tile columns and tile rows of "
                             f"{factored.name}")
        for t in range(g.nt):
            c0, c1 = g.col_range(t)
            end = min(c1, factored.m)  # a panel has a pivot per column, down to the last row
            row = _rows_of_columns(g, t)[0]
            if c0 < end and pivots.rank_of(row, t) == self.engine.rank:
                data = pivots.tile(row, t).data  # None: never written (zeros would read as interchanges)
                if data is None:
                    unwritten[t] = 1
                else:
                    ipiv[c0:end] = c0 + data[0, :end - c0]
        if self.comm is not None:
            ipiv, unwritten = np.split(self.comm.allreduce_sum(np.concatenate([ipiv, unwritten])), [len(ipiv)])
        unwritten = [f"{pivots.name}[{_rows_of_columns(g, t)[0]}, {t}]" for t in np.flatnonzero(unwritten)]
        if unwritten:  # said alike on every rank
            raise CheckError("lu", f"check lu: no task wrote {', '.join(unwritten)}, where the check reads the "
                             f"interchanges of {factored.name}'s panels; an LU without pivoting is checked by "
                             f"lu({factored.name})")
        return ipiv

    # ---------------------------------------------------------------- norms
    def _norm(self, matrix: TiledMatrix, symmetric: bool = False, infinity: bool = False,
              part: str = "all") -> Fraction | float:
        """‖M‖₁ (or ‖M‖∞) from local tiles, M's ``part`` only; ``symmetric``: M is given by its
        lower triangle (then both norms are one).

        Exact where finite (a Fraction, :func:`.checks.scaled`): the sums run on the entries
        scaled by a power of two that brings the largest to [½, 1), so that a matrix of finite
        entries near 1e308 has a norm (its sums would overflow to inf, and any residual over
        it pass) and one near 1e-318 too. A matrix with an infinite or NaN entry gets a float,
        inf or NaN."""
        # two passes, each tile's |part| made and dropped in turn: kept, they would copy the matrix
        peak = float(np.max([np.max(block) for *_, block in self._parts(matrix, symmetric, part) if block.size],
                            initial=0.0))
        peak = math.inf if math.isnan(peak) else peak  # MPI's max of a NaN is undefined
        if self.comm is not None:
            peak = self.comm.allreduce_max(peak)
        exponent = math.frexp(peak)[1] if math.isfinite(peak) else 0
        sums = np.zeros(matrix.m if infinity and not symmetric else matrix.n)
        with np.errstate(over="ignore", invalid="ignore"):  # an infinite entry's sums: inf or NaN, no warning
            for r0, r1, c0, c1, block in self._parts(matrix, symmetric, part):
                block = np.ldexp(block, -exponent)
                if symmetric:
                    sums[c0:c1] += block.sum(axis=0)
                    sums[r0:r1] += triangle(block, r0, c0, upper=False, strict=True).sum(axis=1)
                elif infinity:
                    sums[r0:r1] += block.sum(axis=1)
                else:
                    sums[c0:c1] += block.sum(axis=0)
        largest = self._largest(sums)
        return Fraction(largest) * Fraction(2) ** exponent if math.isfinite(peak) else largest

    def _parts(self, matrix: TiledMatrix, symmetric: bool, part: str):
        """(r0, r1, c0, c1, |its part|) of each local tile that has entries in the norm's part."""
        g = matrix.geometry
        for tile in matrix.local_tiles():
            (r0, r1), (c0, c1) = g.row_range(tile.i), g.col_range(tile.j)
            if meets("lower" if symmetric else part, r0, r1, c0, c1):
                block = np.abs(tile.data)
                yield r0, r1, c0, c1, (triangle(block, r0, c0, upper=False) if symmetric
                                       else part_of(block, r0, c0, part))

    def _largest(self, sums: np.ndarray) -> float:
        """The largest of the column (or row) sums added over every rank."""
        if self.comm is not None:
            sums = self.comm.allreduce_sum(sums)
        return float(sums.max()) if sums.size else 0.0


# ---------------------------------------------------------------- declarations
# The arguments of each built-in check: language.CHECK_ARGUMENTS ("o": any op of .operands)
RESULT_QUALIFIERS = ((), ("lower",), ("upper",), ("symmetric",))
#: the argument letters that take only some qualifiers: the ones they take, and how to say so
LIMITED = {"-": (((),), "no qualifier"), "r": (RESULT_QUALIFIERS, "lower, upper or symmetric"),
           "t": (((), ("lower",), ("upper",)), "lower or upper")}


def _views(decl, where: str) -> tuple:
    """The :class:`~.operands.View` of each argument of ``decl``; a usage error for a declaration
    that no built-in check takes."""
    signatures = CHECK_ARGUMENTS.get(decl.kind)
    if signatures is None:
        raise UsageError(f"{where}: there is no built-in check {decl.kind} (the built-in checks: "
                         f"{', '.join(CHECK_ARGUMENTS)})")
    signature = next((s for s in signatures if len(s) == len(decl.args)), None)
    if signature is None:
        counts = " or ".join(str(len(s)) for s in signatures)
        raise UsageError(f"{where}: takes {counts} argument(s), got {len(decl.args)}")
    words = tuple(decl.qualifiers) + ((),) * (len(decl.args) - len(decl.qualifiers))
    for accepts, name, given in zip(signature, decl.args, words):
        if accepts in LIMITED and tuple(given) not in LIMITED[accepts][0]:
            raise UsageError(f"{where}: {name} takes {LIMITED[accepts][1]}, not {' '.join(given)!r}")
    return tuple(view_of(tuple(given), f"{where}, {name}") for name, given in zip(decl.args, words))


def _square(matrix: TiledMatrix, name: str, where: str, qualifier: str = "") -> int:
    if matrix.m != matrix.n:
        said = f"{qualifier} {name}" if qualifier else name
        raise UsageError(f"{where}: {said} is {matrix.m}×{matrix.n}, not square")
    return matrix.n


def _conform(where: str, first: tuple, second: tuple, rows: tuple | None = None, columns: str = "") -> None:
    """The named matrices ``first`` and ``second`` have one shape, with the rows of ``rows`` (their
    count, and whose order that is) where given; ``columns``: why they have the same columns."""
    (name_1, one), (name_2, two) = first, second
    shapes = f"{where}: {name_1} is {one.m}×{one.n} and {name_2} is {two.m}×{two.n}"
    if rows is not None and (one.m, two.m) != (rows[0], rows[0]):
        count, owner = rows
        raise UsageError(f"{shapes}; both need {count} rows, the order of {owner}")
    if (one.m, one.n) != (two.m, two.n):
        raise UsageError(f"{shapes}; they need one shape" + (f" ({columns})" if columns else ""))


def _as_read(name: str, view: View) -> str:
    """A check's operand as its product reads it: ``transposed A``, or ``A``."""
    return name if view.direct is not None else f"transposed {name}"


def _op_shape(matrix: TiledMatrix, view: View) -> tuple[int, int]:
    return (matrix.n, matrix.m) if view.direct is None else (matrix.m, matrix.n)


def _result_part(view: View) -> tuple[str, bool]:
    """(the part of a product's result that counts, whether it stands for a symmetric matrix)."""
    return view.direct, view.mirror is not None


def _permutation(ipiv: np.ndarray, m: int) -> np.ndarray:
    """The rows of P·A (its row r is A's row ``rows[r]``) for the interchanges ``ipiv``, in order."""
    bad = np.flatnonzero(~((ipiv == np.floor(ipiv)) & (ipiv >= 0) & (ipiv < m)))
    if bad.size:
        raise CheckError("lu", f"check lu: the pivots interchange row {bad[0]} with row {ipiv[bad[0]]:g}, "
                               f"which is not a row of the matrix (0 .. {m - 1})")
    rows = np.arange(m)
    for j, target in enumerate(ipiv.astype(np.int64)):
        rows[j], rows[target] = rows[target], rows[j]
    return rows


def _fill_rows(matrix: TiledMatrix, source, rows: np.ndarray) -> None:
    """Give this rank's tiles of ``matrix`` rows ``rows`` of the source (its row r: the source's row
    ``rows[r]``), a tile column at a time: the rows of a column come from one read of each tile-high
    block of the source holding some (scattered rows would cost one read each)."""
    g = matrix.geometry
    columns: dict = {}
    for tile in matrix.local_tiles():
        columns.setdefault(tile.j, []).append(tile)
    for j, tiles in columns.items():
        spans = [g.row_range(tile.i) for tile in tiles]
        picked = _read_rows(source, np.concatenate([rows[r0:r1] for r0, r1 in spans]), *g.col_range(j), g.height(0))
        for tile, (r0, r1), start in zip(tiles, spans, np.cumsum([0] + [r1 - r0 for r0, r1 in spans])):
            tile.data = np.asfortranarray(picked[start:start + r1 - r0])


def _read_rows(source, wanted: np.ndarray, c0: int, c1: int, step: int) -> np.ndarray:
    """Rows ``wanted`` of the source's columns c0..c1, reading each ``step``-row block once."""
    out = np.empty((wanted.size, c1 - c0), order="F")
    blocks = wanted // step
    for block in np.unique(blocks):
        here = np.flatnonzero(blocks == block)
        first, last = wanted[here].min(), wanted[here].max()
        out[here] = np.asarray(source(first, last + 1, c0, c1))[wanted[here] - first]
    return out


def _lower_of(source):
    """``fill`` giving the tiles that reach the lower triangle their block of ``source`` (the
    others: zeros, never read)."""
    return lambda tile, r0, r1, c0, c1: source(r0, r1, c0, c1) if r1 > c0 else np.zeros((r1 - r0, c1 - c0))


def _transposed(source):
    """``source`` of the transpose: its block rows r0..r1, columns c0..c1 is ``source``'s block
    rows c0..c1, columns r0..r1, transposed."""
    return lambda r0, r1, c0, c1: np.asfortranarray(source(c0, c1, r0, r1).T)


def _whole(source):
    """``fill`` giving each tile its block of ``source``."""
    return lambda tile, r0, r1, c0, c1: source(r0, r1, c0, c1)


def _zeros(r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
    return np.zeros((r1 - r0, c1 - c0), order="F")


def _zeros_block(tile, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
    return _zeros(r0, r1, c0, c1)


def _scale(matrix: TiledMatrix, factor: float) -> None:
    """Multiply this rank's tiles of ``matrix`` by ``factor``; 0 sets them to zero, as BLAS's
    β = 0 does, whatever they held (a NaN too)."""
    if factor != 1.0:
        for tile in matrix.local_tiles():
            if factor:
                tile.data *= factor
            else:
                tile.data[...] = 0.0


# ---------------------------------------------------------------- task streams
def _products(stream, left: Operand, right: Operand, residual: TiledMatrix, part: str = "all") -> None:
    """R[i, j] −= Σₖ L[i, k]·Rt[k, j] on R's tiles that meet ``part``, skipping the terms where an
    op makes a factor's tile zero (L's tile columns are cut like Rt's tile rows)."""
    g = residual.geometry
    for i in range(g.mt):
        for j in range(g.nt):
            if not meets(part, *g.row_range(i), *g.col_range(j)):
                continue
            for k in range(left.matrix.nt):
                if not (left.zero(i, k) or right.zero(k, j)):
                    stream.task("check_gemm", ("in", "in", "inout"),
                                (left.matrix.tile(i, k), right.matrix.tile(k, j), residual.tile(i, j)),
                                kernels.gemm_nn)


def _subtract(stream, final: TiledMatrix, residual: TiledMatrix, part: str) -> None:
    """R[i, j] −= C[i, j] on R's tiles that meet ``part`` (R is tiled like C)."""
    g = residual.geometry
    for i in range(g.mt):
        for j in range(g.nt):
            if meets(part, *g.row_range(i), *g.col_range(j)):
                stream.task("check_sub", ("in", "inout"), (final.tile(i, j), residual.tile(i, j)), _minus)


def _minus(c, r) -> None:
    r -= c


def _rows_of_columns(g, j: int) -> tuple[int, int]:
    """(tile row, first row inside it) holding the rows numbered like tile column ``j``."""
    c0 = g.col_starts[j]
    row = bisect.bisect_right(g.row_starts, c0) - 1
    return row, c0 - g.row_starts[row]


def _product_terms(g, lower_only: bool, left_lower: bool = True):
    """Every nonzero term X[i, k]·Y[rows of k, j] on tiles ``g``, Y upper triangular.

    Yields ``(i, j, k)`` and the global starts/ends ``ri0, ri1, cj0, cj1, ck0, ck1``;
    ``lower_only`` skips result tiles strictly above the diagonal (a symmetric result);
    ``left_lower``: X is lower triangular, else full. The inner dimension stops at
    min(m, n) (Y's rows), which may cut a tile column short (``ck1``).

    The terms into one tile come last k first: the factorizations subtract them first k
    first, and the same sums in the same order would round alike and cancel, leaving a
    residual below the factors' true backward error.
    """
    inner = min(g.m, g.n)
    for i in range(g.mt):
        ri0, ri1 = g.row_range(i)
        for j in range(g.nt):
            cj0, cj1 = g.col_range(j)
            if cj0 == cj1 or (lower_only and ri1 <= cj0):
                continue
            end = min(ri1 if left_lower else inner, cj1, inner)
            for k in reversed([k for k in range(g.nt) if g.col_range(k)[0] < end]):
                ck0, ck1 = g.col_range(k)
                if ck0 < ck1:
                    yield i, j, k, (ri0, ri1, cj0, cj1, ck0, min(ck1, inner))


def _cholesky_products(stream, factor: TiledMatrix, residual: TiledMatrix, upper: bool = False) -> None:
    """R[i, j] −= L[i, k]·L[rows of j, k]ᵀ for the lower tiles of R; with ``upper`` (tiles cut alike
    in rows and columns) the same terms with L = Uᵀ: R[i, j] −= U[k, i]ᵀ·U[k, j]."""
    g = factor.geometry
    for i, j, k, (ri0, _, cj0, cj1, ck0, _) in _product_terms(g, lower_only=True):
        if upper:
            tiles, regions = (factor.tile(k, i), factor.tile(k, j)), None
        else:
            row_j, offset_j = _rows_of_columns(g, j)
            tiles, regions = (factor.tile(i, k), factor.tile(row_j, k)), (None, (offset_j, offset_j + cj1 - cj0,
                                                                                   None, None), None)
        stream.task("check_llt", ("in", "in", "inout"), (*tiles, residual.tile(i, j)),
                    _llt_kernel(ri0, cj0, ck0, upper), regions)


def _llt_kernel(row_i: int, row_j: int, column_k: int, upper: bool = False):
    """C −= L_i·L_jᵀ, the L blocks starting at global rows ``row_i``/``row_j``, column ``column_k``;
    with ``upper``, L = Uᵀ: C −= U_iᵀ·U_j, the U blocks at global row ``column_k``, columns
    ``row_i``/``row_j``."""
    def kernel(a, b, c):
        if upper:
            kernels.gemm(triangle(a, column_k, row_i, upper=True), triangle(b, column_k, row_j, upper=True), c,
                         "T", "N")
        else:
            kernels.gemm(triangle(a, row_i, column_k, upper=False), triangle(b, row_j, column_k, upper=False), c)
    return kernel


def _lu_products(stream, lu: TiledMatrix, residual: TiledMatrix, low: TiledMatrix | None = None) -> None:
    """R[i, j] −= L[i, k]·U[rows of k, j] (L unit lower, U upper); with ``low``, exactly: R + low
    holds the difference to within a rounding of its own (:func:`exact_update`)."""
    g = lu.geometry
    for i, j, k, (ri0, _, cj0, _, ck0, ck1) in _product_terms(g, lower_only=False):
        row_k, offset_k = _rows_of_columns(g, k)
        regions = (_columns(ck1 - ck0), (offset_k, offset_k + ck1 - ck0, None, None), None)
        tiles = (lu.tile(i, k), lu.tile(row_k, j), residual.tile(i, j))
        if low is None:
            stream.task("check_lu", ("in", "in", "inout"), tiles, _lu_kernel(ri0, ck0, cj0), regions)
        else:
            stream.task("check_lu_exact", ("in", "in", "inout", "inout"), (*tiles, low.tile(i, j)),
                        _lu_kernel(ri0, ck0, cj0, exact=True), (*regions, None))


def _lu_kernel(row_i: int, column_k: int, column_j: int, exact: bool = False):
    """C −= L·U, L (unit lower) from global (``row_i``, ``column_k``), U from (``column_k``, ``column_j``);
    ``exact``: C + D −= L·U with no rounding but the sum's own (:func:`exact_update`)."""
    def kernel(a, b, c, d=None):
        l, u = triangle(a, row_i, column_k, upper=False, unit=True), triangle(b, column_k, column_j, upper=True)
        if exact:
            exact_update(l, u, c, d)
        else:
            kernels.gemm_nn(l, u, c)
    return kernel


def exact_update(a: np.ndarray, b: np.ndarray, c: np.ndarray, low: np.ndarray) -> None:
    """c + low −= a·b, as a double-length sum: a·b as a sum of products that float64 makes
    exactly (Ozaki's error-free splitting, :func:`_slices`), each subtracted from c with its
    rounding error carried into ``low`` (Knuth's TwoSum), so that c + low is the exact
    difference but for the rounding of ``low`` itself (about ε² of c)."""
    inner = a.shape[1]
    if inner == 0:
        return
    bits = (52 - math.ceil(math.log2(inner))) // 2  # 2·bits + log2(inner) + 1 <= 53: each product is exact
    rights = _slices(b, bits, axis=0)
    for left in _slices(a, bits, axis=1):
        for right in rights:
            piece = left @ right
            total = c - piece
            back = total - c
            low += (c - (total - back)) - (piece + back)
            c[...] = total


#: the exact products split entries with σ = 3·2^(e − bits + 51), e an entry's exponent: factors with an
#: entry from 2^EXACT_RANGE on (about 1e270) would make σ overflow, and keep float64's residual
EXACT_RANGE = 900

#: slices of an operand at most: the last one holds what is left (entries under 2^(-5·bits), about
#: 10^-34, of their row's or column's largest), whose products round: exact but for entries that far
#: apart in one row of the factors (each slice is one more product of tiles per slice of the other)
_MOST_SLICES = 6


def _slices(m: np.ndarray, bits: int, axis: int) -> list:
    """``m`` as a sum of matrices each of whose rows (``axis`` 1) or columns (``axis`` 0) holds
    multiples of 2^(e − bits) at most 2^e, e the exponent of its largest entry; the last takes
    the rest. Adding and subtracting σ = 3·2^(e − bits + 51) rounds an entry to such a multiple
    (σ's last bit is worth 2^(e − bits)), exactly."""
    slices, rest = [], np.asarray(m, dtype=np.float64)  # never written: each step makes a new rest
    while len(slices) < _MOST_SLICES - 1 and rest.any():
        top = np.max(np.abs(rest), axis=axis, keepdims=True)
        exponent = np.frexp(top)[1]  # top < 2^exponent
        sigma = np.where(top > 0, np.ldexp(3.0, exponent - bits + 51), 0.0)
        high = (rest + sigma) - sigma
        slices.append(high)
        rest = rest - high
    if rest.any():
        slices.append(rest)
    return slices


def _qr_products(stream, q: TiledMatrix, r: TiledMatrix, residual: TiledMatrix) -> None:
    """A − Q·R: D[i, j] −= Q[i, k]·R[rows of k, j] (Q full, R upper)."""
    g = q.geometry
    for i, j, k, (_, _, cj0, _, ck0, ck1) in _product_terms(g, lower_only=False, left_lower=False):
        row_k, offset_k = _rows_of_columns(g, k)
        stream.task("check_qr", ("in", "in", "inout"), (q.tile(i, k), r.tile(row_k, j), residual.tile(i, j)),
                    _qr_kernel(ck0, cj0),
                    (_columns(ck1 - ck0), (offset_k, offset_k + ck1 - ck0, None, None), None))


def _qr_kernel(column_k: int, column_j: int):
    """C −= Q·R, R upper from global (``column_k``, ``column_j``)."""
    def kernel(a, b, c):
        kernels.gemm_nn(a, triangle(b, column_k, column_j, upper=True), c)
    return kernel


def _apply_q_to_identity(stream, reflectors, x: TiledMatrix) -> None:
    """X = Q·X for X = I (or any upper triangular X): the reflectors last to first.

    A reflector of column c changes rows c and below; in the tile columns that end
    at or before c those rows are zero, and stay so under the later reflectors
    applied first, so they are skipped (Q·I costs what forming Q costs, DORGQR).
    """
    g = x.geometry
    for call, tiles, regions in reversed(reflectors):
        if call.groups is not None:
            _apply_panel_reflectors(stream, call, tiles, x)
            continue
        regions = regions or (None,) * len(tiles)
        first_column = g.col_starts[tiles[0].j if call.kernel == "geqrt" else tiles[1].j]
        columns = [j for j in range(x.nt) if g.col_starts[j + 1] > first_column]
        if call.kernel == "geqrt":
            (v, t), rows = tiles, regions[0]
            for j in columns:
                stream.task("check_gemqrt", ("in", "in", "inout"), (v, t, x.tile(v.i, j)),
                            lambda vv, tt, cc: kernels.gemqrt(vv, tt, cc, "L", "N"), (rows, regions[1], _rows(rows)))
        else:
            r, v, t = tiles
            apply = _APPLY[call.kernel]
            for j in columns:
                stream.task(f"check_{apply}", ("in", "in", "inout", "inout"), (v, t, x.tile(r.i, j), x.tile(v.i, j)),
                            _on_pair(apply), (regions[1], regions[2], _rows(regions[0]), _rows(regions[1])))


def _on_pair(kernel: str):
    """A check kernel applying Q (from the left, not transposed) of a tpqrt or ttqrt to a pair of tiles."""
    apply = getattr(kernels, kernel)
    return lambda v, t, c1, c2: apply(v, t, c1, c2, "L", "N")


def _apply_panel_reflectors(stream, call, tiles, x: TiledMatrix) -> None:
    """X = Q·X for the reflectors of a geqrt, tpqrt or ttqrt call given panels (whole tiles):
    gemqrt, tpmqrt or ttmqrt of the panels' matrices on X's rows that V's (and R's) tiles cover."""
    arguments = [(tiles[first:first + (count or 1)], axis) for first, count, axis in call.groups]
    (v, v_axis), (t, t_axis) = arguments[-2:]
    covered = [_rows_covered(v, v_axis)]
    if call.kernel != "geqrt":
        covered.insert(0, _rows_covered(*arguments[0]))
    apply = _APPLY[call.kernel]
    first_column = x.geometry.col_starts[v[0].j]
    for j in range(x.nt):
        if x.geometry.col_starts[j + 1] > first_column:
            parts = [[x.tile(i, j) for i in rows] for rows in covered]
            given = [(v, v_axis, "in"), (t, t_axis, "in")] + [(part, 0, "inout") for part in parts]
            stream.task(f"check_{apply}", tuple(mode for group, _, mode in given for _ in group),
                        tuple(tile for group, _, _ in given for tile in group), _on_panels(apply, given))


def _rows_covered(tiles, axis: int) -> list[int]:
    """The tile rows of an argument's matrix: each tile's of a column of tiles, else the one."""
    return [tile.i for tile in tiles] if axis == 0 else [tiles[0].i]


def _on_panels(kernel: str, given: list):
    """A check kernel calling built-in ``kernel`` (from the left, Q not transposed) on the
    ``given`` (tiles, axis, mode) arguments as a run passes them (:meth:`.Call.arguments`:
    a tile, or a panel)."""
    groups, first = [], 0
    for group, axis, _ in given:
        groups.append((first, len(group) if len(group) > 1 else None, axis))
        first += len(group)
    modes = tuple(mode for group, _, mode in given for _ in group)
    call = Call(kernel, modes, main=modes.index("inout"), line=0, text=kernel, groups=tuple(groups),
                role="check task")

    def run(*arrays):
        kernels.CPU_KERNELS[kernel](*call.arguments(list(arrays), ()), "L", "N")
    return run


def _gram_products(stream, q: TiledMatrix, gram: TiledMatrix) -> None:
    """D[i, j] −= Σₖ Q[k, i]ᵀ·Q[k, j] for the lower tiles of D (D starts as I)."""
    widths = [gram.geometry.width(j) for j in range(gram.nt)]
    for i in range(gram.nt):
        for j in range(i + 1):
            if widths[i] and widths[j]:
                for k in range(q.mt):
                    stream.task("check_gram", ("in", "in", "inout"), (q.tile(k, i), q.tile(k, j), gram.tile(i, j)),
                                _subtract_transposed_product, (_columns(widths[i]), _columns(widths[j]), None))


def _subtract_transposed_product(a, b, c) -> None:
    """C −= Aᵀ·B."""
    c -= a.T @ b


def _columns(width: int):
    """The region of a tile's first ``width`` columns."""
    return (None, None, 0, width)


def _rows(region):
    """The row part of a region, over every column."""
    return None if region is None else (region[0], region[1], None, None)


def _identity(tile, r0, r1, c0, c1):
    """The identity's block rows r0..r1, columns c0..c1 (``tile``: the tile it fills)."""
    return set_diagonal(np.zeros((r1 - r0, c1 - c0), order="F"), r0, c0)


def fill_untouched(matrix: TiledMatrix) -> None:
    """Give the local tiles no task touched their input values: checks read every tile."""
    for tile in matrix.local_tiles():
        if tile.data is None:
            tile.data = matrix.block(tile)
