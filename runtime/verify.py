"""Backward errors computed where the data lives (DESIGN §5): no matrix is gathered.

A check is itself a stream of tile tasks run by the same engine, with the run's
workers and ranks, so on several ranks it moves only the tiles its products
need, with the same protocol as the factorization. Its products are BLAS calls
on whole tiles (the factorization's own gemm kernels); only tiles that straddle
the diagonal are copied to cut out a triangle:

* Cholesky: R = A − L·Lᵀ on the lower tiles (L = the lower triangle of the result);
* LU: R = A − L·U (L unit lower, U upper);
* QR, as the DPLASMA testers do it: Q = Q·I by replaying the factorization's
  reflectors (geqrt/tpqrt calls, last to first, through gemqrt/tpmqrt), skipping
  the columns where I is still zero (what forming Q costs, DORGQR); then
  A − Q·R and D = I − QᵀQ (its lower tiles) by tile products.

The streams of one check are submitted as one task graph, so its phases overlap.

Norms reduce per-column sums of local tiles (O(n) numbers per rank) over MPI.
The original matrix is rebuilt tile by tile on its owner from the input's source.
Checks run on the hosts, after the run has brought GPU tiles home.
"""
from __future__ import annotations

import bisect
import contextlib

import numpy as np

from . import kernels
from .checks import scaled
from .geometry import Geometry
from .matrix import TiledMatrix
from .program import Call
from .recording import record

QR_KERNELS = ("geqrt", "tpqrt")
_CALLS: dict = {}


def _call(name: str, modes: tuple) -> Call:
    """One call site per check kernel (tasks of a check point at no .tile line)."""
    key = (name, modes)
    if key not in _CALLS:
        main = next(i for i, m in enumerate(modes) if m != "in")
        _CALLS[key] = Call(name, modes, main=main, line=0, text=f"{name} (residual check)")
    return _CALLS[key]


class Stream:
    """Submits check tasks: those this rank takes part in; version counts for the others."""

    def __init__(self, engine):
        self.engine = engine
        self.rank = engine.rank

    def task(self, name, modes, tiles, kernel, regions=None) -> None:
        if any(t.rank == self.rank for t in tiles):
            self.engine.submit(_call(name, modes), tiles, regions, 0, kernel=kernel)
            return
        for tile, mode in zip(tiles, modes):
            if mode != "in":
                tile.matrix.advance(tile)


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

    def __init__(self, engine, matrices: dict, original, comm, first_tag: int,
                 progress=lambda total: contextlib.nullcontext()):
        self.engine, self.matrices, self.comm = engine, matrices, comm
        self.original = original  # original(r0, r1, c0, c1) -> the input block
        self.first_tag = first_tag
        self.progress = progress

    # ---------------------------------------------------------------- matrices
    def matrix(self, name: str, geometry: Geometry, distribution) -> TiledMatrix:
        """A new host matrix of the check (its tiles carry no data yet)."""
        matrix = TiledMatrix(name, geometry, distribution, self.engine.rank, self.first_tag)
        self.first_tag += matrix.mt * matrix.nt
        for row in matrix.tiles:
            for tile in row:
                tile.device = 0  # checks run on the host
        self.engine.attach({**self.engine.matrices, f"check {name}": matrix})
        return matrix

    @staticmethod
    def fill(matrix: TiledMatrix, block) -> TiledMatrix:
        """Give each local tile ``block(tile, r0, r1, c0, c1)``, as a Fortran float64 array."""
        g = matrix.geometry
        for tile in matrix.local_tiles():
            (r0, r1), (c0, c1) = g.row_range(tile.i), g.col_range(tile.j)
            tile.data = np.asfortranarray(block(tile, r0, r1, c0, c1), dtype=np.float64)
        return matrix

    def run(self, *streams) -> None:
        """Run the task ``streams``, in this order, as one task graph under one progress bar."""
        tally = Tally(self.engine.rank)
        for stream in streams:
            stream(tally)

        def generate(rt, params):
            for stream in streams:
                stream(Stream(self.engine))
        with self.progress(tally.count):
            self.engine.run(generate, None)

    # ---------------------------------------------------------------- checks
    def cholesky(self, factored: TiledMatrix) -> dict:
        _materialize(factored)
        residual = self.fill(self.matrix("R", factored.geometry, factored.distribution), self._original_lower)
        norm_a = self._norm(residual, symmetric=True)
        self.run(lambda stream: _cholesky_products(stream, factored, residual))
        return {"cholesky": scaled(self._norm(residual, symmetric=True), norm_a, factored.n)}

    def lu(self, factored: TiledMatrix) -> dict:
        _materialize(factored)
        residual = self.fill(self.matrix("R", factored.geometry, factored.distribution), self._original)
        norm_a = self._norm(residual)
        self.run(lambda stream: _lu_products(stream, factored, residual))
        return {"lu": scaled(self._norm(residual), norm_a, factored.n)}

    def qr(self, factored: TiledMatrix, driver, params) -> dict:
        reflectors = record(driver, self.matrices, params, keep=lambda call: call.kernel in QR_KERNELS).submitted
        for matrix in self.matrices.values():  # the reflectors' V and T too
            _materialize(matrix)
        g, distribution = factored.geometry, factored.distribution
        k = min(factored.m, factored.n)
        columns = tuple(min(c, k) for c in g.col_starts)  # Q has k columns; QᵀQ is k×k
        q = self.fill(self.matrix("Q", g, distribution), _identity)
        residual = self.fill(self.matrix("R", g, distribution), self._original)
        norm_a = self._norm(residual)
        gram = self.fill(self.matrix("D", Geometry(columns, columns, g.s), distribution), _identity)
        self.run(lambda stream: _apply_q_to_identity(stream, reflectors, q),
                 lambda stream: _qr_products(stream, q, factored, residual),
                 lambda stream: _gram_products(stream, q, gram))
        return {"qr": scaled(self._norm(residual), norm_a, factored.n),
                "orthogonality": scaled(self._norm(gram, symmetric=True), 1.0, factored.n)}

    def _original(self, tile, r0, r1, c0, c1):
        return self.original(r0, r1, c0, c1)

    def _original_lower(self, tile, r0, r1, c0, c1):
        """The input's tiles that reach the lower triangle (the others: zeros, never read)."""
        return self.original(r0, r1, c0, c1) if r1 > c0 else np.zeros((r1 - r0, c1 - c0))

    # ---------------------------------------------------------------- norms
    def _norm(self, matrix: TiledMatrix, symmetric: bool = False) -> float:
        """‖M‖₁ from local tiles; ``symmetric``: M is given by its lower triangle."""
        g = matrix.geometry
        sums = np.zeros(matrix.n)
        for tile in matrix.local_tiles():
            (r0, r1), (c0, c1) = g.row_range(tile.i), g.col_range(tile.j)
            if symmetric and r1 <= c0:
                continue  # wholly above the diagonal
            block = np.abs(tile.data)
            if symmetric:
                sums[c0:c1] += _triangle(block, r0, c0, upper=False).sum(axis=0)
                sums[r0:r1] += _triangle(block, r0, c0, upper=False, strict=True).sum(axis=1)
            else:
                sums[c0:c1] += block.sum(axis=0)
        return self._largest(sums)

    def _largest(self, column_sums: np.ndarray) -> float:
        """The largest of the column sums added over every rank."""
        if self.comm is not None:
            column_sums = self.comm.allreduce_sum(column_sums)
        return float(column_sums.max()) if column_sums.size else 0.0


# ---------------------------------------------------------------- task streams
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
    """
    inner = min(g.m, g.n)
    for i in range(g.mt):
        ri0, ri1 = g.row_range(i)
        for j in range(g.nt):
            cj0, cj1 = g.col_range(j)
            if cj0 == cj1 or (lower_only and ri1 <= cj0):
                continue
            for k in range(g.nt):
                ck0, ck1 = g.col_range(k)
                if ck0 >= min(ri1 if left_lower else inner, cj1, inner):
                    break
                if ck0 < ck1:
                    yield i, j, k, (ri0, ri1, cj0, cj1, ck0, min(ck1, inner))


def _cholesky_products(stream, l: TiledMatrix, residual: TiledMatrix) -> None:
    """R[i, j] −= L[i, k]·L[rows of j, k]ᵀ for the lower tiles of R."""
    g = l.geometry
    for i, j, k, (ri0, _, cj0, cj1, ck0, _) in _product_terms(g, lower_only=True):
        row_j, offset_j = _rows_of_columns(g, j)
        stream.task("check_llt", ("in", "in", "inout"),
                    (l.tiles[i][k], l.tiles[row_j][k], residual.tiles[i][j]),
                    _llt_kernel(ri0, cj0, ck0), (None, (offset_j, offset_j + cj1 - cj0, None, None), None))


def _llt_kernel(row_i: int, row_j: int, column_k: int):
    """C −= L_i·L_jᵀ, the L blocks starting at global rows ``row_i``/``row_j``, column ``column_k``."""
    def kernel(a, b, c):
        kernels.gemm(_triangle(a, row_i, column_k, upper=False), _triangle(b, row_j, column_k, upper=False), c)
    return kernel


def _lu_products(stream, lu: TiledMatrix, residual: TiledMatrix) -> None:
    """R[i, j] −= L[i, k]·U[rows of k, j] (L unit lower, U upper)."""
    g = lu.geometry
    for i, j, k, (ri0, _, cj0, _, ck0, ck1) in _product_terms(g, lower_only=False):
        row_k, offset_k = _rows_of_columns(g, k)
        stream.task("check_lu", ("in", "in", "inout"),
                    (lu.tiles[i][k], lu.tiles[row_k][j], residual.tiles[i][j]),
                    _lu_kernel(ri0, ck0, cj0),
                    (_columns(ck1 - ck0), (offset_k, offset_k + ck1 - ck0, None, None), None))


def _lu_kernel(row_i: int, column_k: int, column_j: int):
    """C −= L·U, L (unit lower) from global (``row_i``, ``column_k``), U from (``column_k``, ``column_j``)."""
    def kernel(a, b, c):
        kernels.gemm_nn(_triangle(a, row_i, column_k, upper=False, unit=True),
                        _triangle(b, column_k, column_j, upper=True), c)
    return kernel


def _qr_products(stream, q: TiledMatrix, r: TiledMatrix, residual: TiledMatrix) -> None:
    """A − Q·R: D[i, j] −= Q[i, k]·R[rows of k, j] (Q full, R upper)."""
    g = q.geometry
    for i, j, k, (_, _, cj0, _, ck0, ck1) in _product_terms(g, lower_only=False, left_lower=False):
        row_k, offset_k = _rows_of_columns(g, k)
        stream.task("check_qr", ("in", "in", "inout"), (q.tiles[i][k], r.tiles[row_k][j], residual.tiles[i][j]),
                    _qr_kernel(ck0, cj0),
                    (_columns(ck1 - ck0), (offset_k, offset_k + ck1 - ck0, None, None), None))


def _qr_kernel(column_k: int, column_j: int):
    """C −= Q·R, R upper from global (``column_k``, ``column_j``)."""
    def kernel(a, b, c):
        kernels.gemm_nn(a, _triangle(b, column_k, column_j, upper=True), c)
    return kernel


def _triangle(block, row0: int, col0: int, upper: bool, strict: bool = False, unit: bool = False):
    """``block`` (first element at global (row0, col0)) with one global triangle kept.

    ``upper`` keeps row <= col, else row >= col; ``strict`` drops the diagonal;
    ``unit`` puts ones on the diagonal (the implicit diagonal of LU's L). A block
    wholly inside the kept triangle is returned as it is (no copy): only the
    tiles on the diagonal pay for a masked copy.
    """
    height, width = block.shape
    shift = row0 - col0  # global row − column = local row − column + shift
    drop_diagonal = strict or unit
    if upper and height - 1 + shift < (0 if drop_diagonal else 1):
        return block
    if not upper and shift - (width - 1) > (0 if drop_diagonal else -1):
        return block
    if upper:
        result = np.triu(block, shift + 1 if drop_diagonal else shift)
    else:
        result = np.tril(block, shift - 1 if drop_diagonal else shift)
    result = np.asfortranarray(result)
    if unit:
        rows = np.arange(max(0, -shift), min(height, width - shift))
        result[rows, rows + shift] = 1.0
    return result


def _apply_q_to_identity(stream, reflectors, x: TiledMatrix) -> None:
    """X = Q·X for X = I (or any upper triangular X): the reflectors last to first.

    A reflector of column c changes rows c and below; in the tile columns that end
    at or before c those rows are zero, and stay so under the later reflectors
    applied first, so they are skipped (Q·I costs what forming Q costs, DORGQR).
    """
    g = x.geometry
    for call, tiles, regions in reversed(reflectors):
        regions = regions or (None,) * len(tiles)
        first_column = g.col_starts[tiles[0].j if call.kernel == "geqrt" else tiles[1].j]
        columns = [j for j in range(x.nt) if g.col_starts[j + 1] > first_column]
        if call.kernel == "geqrt":
            (v, t), rows = tiles, regions[0]
            for j in columns:
                stream.task("check_gemqrt", ("in", "in", "inout"), (v, t, x.tiles[v.i][j]),
                            lambda vv, tt, cc: kernels.gemqrt(vv, tt, cc, "L", "N"), (rows, None, _rows(rows)))
        else:
            r, v, t = tiles
            for j in columns:
                stream.task("check_tpmqrt", ("in", "in", "inout", "inout"), (v, t, x.tiles[r.i][j], x.tiles[v.i][j]),
                            lambda vv, tt, c1, c2: kernels.tpmqrt(vv, tt, c1, c2, "L", "N"),
                            (regions[1], None, _rows(regions[0]), None))


def _gram_products(stream, q: TiledMatrix, gram: TiledMatrix) -> None:
    """D[i, j] −= Σₖ Q[k, i]ᵀ·Q[k, j] for the lower tiles of D (D starts as I)."""
    widths = [gram.geometry.width(j) for j in range(gram.nt)]
    for i in range(gram.nt):
        for j in range(i + 1):
            if widths[i] and widths[j]:
                for k in range(q.mt):
                    stream.task("check_gram", ("in", "in", "inout"), (q.tiles[k][i], q.tiles[k][j], gram.tiles[i][j]),
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
    block = np.zeros((r1 - r0, c1 - c0), order="F")
    for d in range(max(r0, c0), min(r1, c1)):
        block[d - r0, d - c0] = 1.0
    return block


def _materialize(matrix: TiledMatrix) -> None:
    """Give the local tiles no task touched their input values: checks read every tile."""
    for tile in matrix.local_tiles():
        if tile.data is None:
            tile.data = matrix.block(tile)
