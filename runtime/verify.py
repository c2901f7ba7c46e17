"""Backward errors computed where the data lives (DESIGN §5): no matrix is gathered.

A check is itself a stream of tile tasks run by the same engine, so on several
ranks it moves only the tiles its products need, with the same protocol as the
factorization:

* Cholesky: R = A − L·Lᵀ on the lower tiles (L = the lower triangle of the result);
* LU: R = A − L·U (L unit lower, U upper);
* QR: Q·R and QᵀQ by replaying the factorization's reflectors (geqrt/tpqrt calls,
  in reverse with ``trans='N'`` to apply Q, in order with ``'T'`` for Qᵀ).

Norms reduce per-column sums of local tiles (O(n) numbers per rank) over MPI.
The original matrix is rebuilt tile by tile on its owner from the input's source.
Checks run on the hosts, after the run has brought GPU tiles home.
"""
from __future__ import annotations

import bisect

import numpy as np

from . import kernels
from .checks import scaled
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
            self.engine.submit(_call(name, modes), tiles, regions, 0, kernel)
            return
        for tile, mode in zip(tiles, modes):
            if mode != "in":
                tile.matrix.advance(tile)


class Verifier:
    """Runs the residual checks of one finished run on this rank's share of the tiles."""

    def __init__(self, engine, matrices: dict, original, comm, first_tag: int):
        self.engine, self.matrices, self.comm = engine, matrices, comm
        self.original = original  # original(r0, r1, c0, c1) -> the input block
        self.first_tag = first_tag

    # ---------------------------------------------------------------- matrices
    def like(self, base: TiledMatrix, name: str, fill) -> TiledMatrix:
        """A new matrix with ``base``'s tiles and owners; ``fill(tile, r0, r1, c0, c1)``
        gives each local tile (``tile`` is ``base``'s tile at the same place)."""
        matrix = TiledMatrix(name, base.geometry, base.distribution, base.rank, self.first_tag)
        self.first_tag += base.mt * base.nt
        for row in matrix.tiles:
            for tile in row:
                tile.device = 0  # checks run on the host
        self.engine.attach({**self.engine.matrices, f"check {name}": matrix})
        g = base.geometry
        for tile in matrix.local_tiles():
            (r0, r1), (c0, c1) = g.row_range(tile.i), g.col_range(tile.j)
            tile.data = np.asfortranarray(fill(base.tiles[tile.i][tile.j], r0, r1, c0, c1), dtype=np.float64)
        return matrix

    def run(self, generate) -> None:
        self.engine.run(lambda rt, params: generate(Stream(self.engine)), None)

    # ---------------------------------------------------------------- checks
    def cholesky(self, factored: TiledMatrix) -> dict:
        _materialize(factored)
        residual = self.like(factored, "R", self._original)
        norm_a = self._norm(residual, symmetric=True)
        self.run(lambda stream: _cholesky_products(stream, factored, residual))
        return {"cholesky": scaled(self._norm(residual, symmetric=True), norm_a, factored.n)}

    def lu(self, factored: TiledMatrix) -> dict:
        _materialize(factored)
        residual = self.like(factored, "R", self._original)
        norm_a = self._norm(residual)
        self.run(lambda stream: _lu_products(stream, factored, residual))
        return {"lu": scaled(self._norm(residual), norm_a, factored.n)}

    def qr(self, factored: TiledMatrix, driver, params) -> dict:
        reflectors = record(driver, self.matrices, params, keep=lambda call: call.kernel in QR_KERNELS).submitted
        for matrix in self.matrices.values():  # the reflectors' V and T too
            _materialize(matrix)
        product = self.like(factored, "QR", lambda f, r0, r1, c0, c1: _masked(f.data, r0, c0, upper=True))
        self.run(lambda stream: _apply_q(stream, reflectors, product, "N"))
        difference = self.like(factored, "D", self._original)
        norm_a = self._norm(difference)
        for tile in difference.local_tiles():
            tile.data -= product.tiles[tile.i][tile.j].data
        q = self.like(factored, "Q", lambda f, r0, r1, c0, c1: _identity(r0, r1, c0, c1))
        self.run(lambda stream: _apply_q(stream, reflectors, q, "N"))
        self.run(lambda stream: _apply_q(stream, reflectors, q, "T"))
        for tile in q.local_tiles():
            tile.data -= _identity(*q.geometry.row_range(tile.i), *q.geometry.col_range(tile.j))
        n = factored.n
        return {"qr": scaled(self._norm(difference), norm_a, n), "orthogonality": scaled(self._norm(q), 1.0, n)}

    def _original(self, tile, r0, r1, c0, c1):
        return self.original(r0, r1, c0, c1)

    # ---------------------------------------------------------------- norms
    def _norm(self, matrix: TiledMatrix, symmetric: bool = False) -> float:
        """‖M‖₁ from local tiles; ``symmetric``: M is given by its lower triangle."""
        g = matrix.geometry
        sums = np.zeros(matrix.n)
        for tile in matrix.local_tiles():
            (r0, r1), (c0, c1) = g.row_range(tile.i), g.col_range(tile.j)
            block = np.abs(tile.data)
            if symmetric:
                lower = _masked(block, r0, c0, upper=False)
                sums[c0:c1] += lower.sum(axis=0)
                sums[r0:r1] += _masked(block, r0, c0, upper=False, strict=True).sum(axis=1)
            else:
                sums[c0:c1] += block.sum(axis=0)
        if self.comm is not None:
            sums = self.comm.allreduce_sum(sums)
        return float(sums.max()) if sums.size else 0.0


# ---------------------------------------------------------------- task streams
def _rows_of_columns(g, j: int) -> tuple[int, int]:
    """(tile row, first row inside it) holding the rows numbered like tile column ``j``."""
    c0 = g.col_starts[j]
    row = bisect.bisect_right(g.row_starts, c0) - 1
    return row, c0 - g.row_starts[row]


def _product_terms(g, lower_only: bool):
    """Every nonzero term X[i, k]·Y[rows of k, j] of a product of triangles on tiles ``g``.

    Yields ``(i, j, k)`` and the global starts/ends ``ri0, ri1, cj0, cj1, ck0, ck1``;
    ``lower_only`` skips result tiles strictly above the diagonal (a symmetric result).
    """
    for i in range(g.mt):
        ri0, ri1 = g.row_range(i)
        for j in range(g.nt):
            cj0, cj1 = g.col_range(j)
            if cj0 == cj1 or (lower_only and ri1 <= cj0):
                continue
            for k in range(g.nt):
                ck0, ck1 = g.col_range(k)
                if ck0 >= min(ri1, cj1):
                    break
                if ck0 < ck1:
                    yield i, j, k, (ri0, ri1, cj0, cj1, ck0, ck1)


def _cholesky_products(stream: Stream, l: TiledMatrix, residual: TiledMatrix) -> None:
    """R[i, j] −= L[i, k]·L[rows of j, k]ᵀ for the lower tiles of R."""
    g = l.geometry
    for i, j, k, (ri0, _, cj0, cj1, ck0, _) in _product_terms(g, lower_only=True):
        row_j, offset_j = _rows_of_columns(g, j)
        stream.task("check_llt", ("in", "in", "inout"),
                    (l.tiles[i][k], l.tiles[row_j][k], residual.tiles[i][j]),
                    _subtract_product(ri0, cj0, ck0, lower_left=True, lower_right=True, transpose=True),
                    (None, (offset_j, offset_j + cj1 - cj0, None, None), None))


def _lu_products(stream: Stream, lu: TiledMatrix, residual: TiledMatrix) -> None:
    """R[i, j] −= L[i, k]·U[rows of k, j] (L unit lower, U upper)."""
    g = lu.geometry
    for i, j, k, (ri0, _, cj0, _, ck0, ck1) in _product_terms(g, lower_only=False):
        row_k, offset_k = _rows_of_columns(g, k)
        stream.task("check_lu", ("in", "in", "inout"),
                    (lu.tiles[i][k], lu.tiles[row_k][j], residual.tiles[i][j]),
                    _subtract_product(ri0, ck0, ck0, lower_left=True, lower_right=False, transpose=False,
                                      right_cols=cj0),
                    (None, (offset_k, offset_k + ck1 - ck0, None, None), None))


def _subtract_product(left_row, right_row, inner, lower_left, lower_right, transpose, right_cols=None):
    """A kernel C −= mask(A)·mask(B)ᵀ (or ·mask(B)), masks by global position.

    ``left_row``/``right_row`` are the global first rows of A and B, ``inner`` the
    global first column of A (and of B when transposed, else B's first row).
    """
    def kernel(a, b, c):
        left = _masked(a, left_row, inner, upper=not lower_left, unit=not transpose)
        if transpose:
            right = _masked(b, right_row, inner, upper=not lower_right).T
        else:
            right = _masked(b, inner, right_cols, upper=True)
        c -= left @ right
    return kernel


def _masked(block, row0: int, col0: int, upper: bool, strict: bool = False, unit: bool = False):
    """``block`` (first element at global (row0, col0)) with one global triangle kept.

    ``upper`` keeps row <= col, else row >= col; ``strict`` drops the diagonal;
    ``unit`` puts ones on the diagonal (the implicit diagonal of LU's L).
    """
    rows = row0 + np.arange(block.shape[0])[:, None]
    cols = col0 + np.arange(block.shape[1])[None, :]
    keep = (rows < cols if strict else rows <= cols) if upper else (rows > cols if strict or unit else rows >= cols)
    result = np.where(keep, block, 0.0)
    if unit:
        result[rows == cols] = 1.0
    return result


def _apply_q(stream: Stream, reflectors, x: TiledMatrix, trans: str) -> None:
    """X = Q·X (``'N'``: reflectors last to first) or Qᵀ·X (``'T'``: first to last)."""
    order = reversed(reflectors) if trans == "N" else reflectors
    for call, tiles, regions in order:
        regions = regions or (None,) * len(tiles)
        if call.kernel == "geqrt":
            (v, t), rows = tiles, regions[0]
            for j in range(x.nt):
                stream.task("check_gemqrt", ("in", "in", "inout"), (v, t, x.tiles[v.i][j]),
                            lambda vv, tt, cc: kernels.gemqrt_apply(vv, tt, cc, trans), (rows, None, _rows(rows)))
        else:
            r, v, t = tiles
            for j in range(x.nt):
                stream.task("check_tpmqrt", ("in", "in", "inout", "inout"), (v, t, x.tiles[r.i][j], x.tiles[v.i][j]),
                            lambda vv, tt, c1, c2: kernels.tpmqrt_apply(vv, tt, c1, c2, trans),
                            (regions[1], None, _rows(regions[0]), None))


def _rows(region):
    """The row part of a region, over every column."""
    return None if region is None else (region[0], region[1], None, None)


def _identity(r0, r1, c0, c1):
    block = np.zeros((r1 - r0, c1 - c0), order="F")
    for d in range(max(r0, c0), min(r1, c1)):
        block[d - r0, d - c0] = 1.0
    return block


def _materialize(matrix: TiledMatrix) -> None:
    """Give the local tiles no task touched their input values: checks read every tile."""
    for tile in matrix.local_tiles():
        if tile.data is None:
            tile.data = matrix.block(tile)
