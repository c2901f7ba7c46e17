"""Tests of the CPU tile kernels against numpy/scipy references.

Every kernel, with every option, runs on square, ragged and empty shapes, both on a
Fortran array of its own and on a row sub-range of a taller Fortran array (the no-copy
path): results must match the reference and the rows outside the view must stay
untouched. getrf's pivots must be scipy's lu_factor's, on tiles and on panels.
"""
from __future__ import annotations

import inspect
import itertools
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg as sla

from tiledsl.runtime.errors import KernelError
from tiledsl.runtime.kernels import (CPU_KERNELS, amax, asum, gemm, gemm_nn, gemqrt, geqrt,
                                     getrf_nopiv, lassq, lassq_merge, laswp, lauum, potrf, symm, syr2k,
                                     syrk, tpmqrt, tpqrt, trmm, trsm, trsm_l, trsm_u, trtri, ttmqrt,
                                     ttqrt)
from tiledsl.runtime.panels import Panel
from tiledsl.runtime.panels import stacked as stacked_matrix

PRELUDE = Path(__file__).resolve().parents[2] / "tiledsl" / "compiler" / "prelude.tile"

pytestmark = pytest.mark.timeout(120)

LAYOUTS = ["own", "rows"]
RAGGED = [(1, 1), (7, 3), (3, 7), (100, 64), (64, 64), (0, 5), (5, 0), (0, 0)]
TALL = [(1, 1), (7, 3), (100, 64), (64, 64), (200, 200), (5, 0), (0, 0)]


getrf = CPU_KERNELS["getrf"]  # as the runtime calls it: a panel is stacked into one matrix first


def column(tiles) -> Panel:
    """A written column panel of ``tiles``, as the runtime passes one."""
    return Panel(tiles, 0, True)


def assert_close(actual, expected, scale=1.0):
    """Equal up to a few hundred ulps of ``scale`` (the size of the data involved)."""
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-12 * max(1.0, scale))


class Placed:
    """A copy of ``a`` in Fortran storage: its own array, or rows 3.. of a taller one."""

    def __init__(self, a: np.ndarray, layout: str, rng: np.random.Generator):
        m, n = a.shape
        self.top, bottom = (3, 2) if layout == "rows" else (0, 0)
        self.parent = np.asfortranarray(rng.standard_normal((self.top + m + bottom, n)))
        self.view = self.parent[self.top:self.top + m]
        self.view[...] = a
        self.before = self.parent.copy()

    def assert_outside_untouched(self) -> None:
        end = self.top + self.view.shape[0]
        np.testing.assert_array_equal(self.parent[:self.top], self.before[:self.top])
        np.testing.assert_array_equal(self.parent[end:], self.before[end:])


@pytest.fixture
def rng():
    return np.random.default_rng(20240611)


def random(rng, m, n):
    return rng.standard_normal((m, n))


def spd(rng, n):
    """A well-conditioned symmetric positive definite n×n matrix."""
    b = rng.standard_normal((n, n))
    return b @ b.T + n * np.eye(n)


def well_conditioned_square(rng, n, rows=None):
    """A rows×n matrix whose top n×n block is strongly diagonally dominant."""
    a = rng.standard_normal((rows or n, n))
    a[:n, :n] += 2 * n * np.eye(n)
    return a


def reference_lu_nopiv(a):
    """Plain numpy Doolittle elimination without pivoting (the definition)."""
    a = a.copy()
    for j in range(min(a.shape)):
        a[j + 1:, j] /= a[j, j]
        a[j + 1:, j + 1:] -= np.outer(a[j + 1:, j], a[j, j + 1:])
    return a


# ----------------------------------------------------------------------- registry


def test_cpu_kernels_registry_names():
    assert set(CPU_KERNELS) == {"gemm", "symm", "syrk", "syr2k", "trsm", "trmm", "potrf", "trtri", "lauum",
                                "getrf_nopiv", "trsm_l", "trsm_u", "gemm_nn", "getrf", "laswp",
                                "geqrt", "gemqrt", "tpqrt", "tpmqrt", "ttqrt", "ttmqrt", "lassq", "lassq_merge", "amax", "asum"}
    assert CPU_KERNELS["gemqrt"].__wrapped__ is gemqrt and CPU_KERNELS["tpmqrt"].__wrapped__ is tpmqrt
    assert all(f.__doc__ for f in CPU_KERNELS.values())


def prelude_declarations() -> dict:
    """{kernel: [(name, default or None)]} from prelude.tile, read with a regular expression
    (the compiler's grammar is tested elsewhere): the parameters in order."""
    declarations = {}
    for name, params in re.findall(r"^kernel (\w+)\(([^)]*)\)", PRELUDE.read_text(), re.M):
        declarations[name] = []
        for param in params.split(","):
            match = re.fullmatch(r'\s*(?:in|out|inout|int|float|char) (\w+)(?: in "[A-Z]+")?(?: = ("?)([^"]*)\2)?\s*',
                                 param)
            assert match, f"{name}: cannot read the parameter {param!r}"
            default = match.group(3)
            if default is not None and not match.group(2):
                default = float(default) if "." in default else int(default)
            declarations[name].append((match.group(1), default))
    return declarations


def test_python_signatures_are_the_prelude_declarations():
    """Same parameters in the same order, and the declared defaults (so programs written before
    the options keep their meaning whichever way a kernel is called)."""
    declarations = prelude_declarations()
    assert set(declarations) == set(CPU_KERNELS)
    for name, params in declarations.items():
        signature = inspect.signature(CPU_KERNELS[name]).parameters.values()
        defaults = [(p.name, None if p.default is inspect.Parameter.empty else p.default) for p in signature]
        assert defaults == params, name


# ----------------------------------------------------------------------- layout checks


@pytest.mark.parametrize("bad", [
    np.ones((4, 4)),                                      # C order
    np.asfortranarray(np.ones((4, 4), dtype=np.float32)),
    np.asfortranarray(np.ones((8, 4)))[::2],             # row stride 16
    np.asfortranarray(np.ones((4, 8)))[:, ::-2],         # negative column stride
    np.ones((4, 1))[::-1],                                # negative row stride
    np.ones(4),                                           # 1-D
])
def test_non_fortran_tiles_are_rejected(bad):
    good = np.asfortranarray(np.ones((4, 4)))
    reason = "column-major|2-D float64"
    with pytest.raises(ValueError, match=reason):
        gemm(bad, good, good.copy(order="F"))
    with pytest.raises(ValueError, match=reason):
        gemm(good, good, bad)


def test_read_only_output_is_rejected():
    c = np.asfortranarray(np.ones((4, 4)))
    c.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        syrk(np.asfortranarray(np.ones((4, 2))), c)


def test_mismatched_shapes_are_rejected():
    def f(m, n):
        return np.zeros((m, n), order="F")

    with pytest.raises(ValueError):
        gemm(f(4, 3), f(5, 2), f(4, 5))
    with pytest.raises(ValueError):
        syrk(f(4, 3), f(3, 3))
    with pytest.raises(ValueError):
        trsm(f(2, 2), f(4, 3))
    with pytest.raises(ValueError):
        potrf(f(3, 4))
    with pytest.raises(ValueError):
        geqrt(f(4, 4), f(2, 3))
    with pytest.raises(ValueError, match='gemqrt: trans must be one of "N", "T", got "C"'):
        gemqrt(f(4, 4), f(2, 4), f(4, 4), "L", "C")


def test_extent_one_strides_are_ignored(rng):
    """A row of a C-ordered array (ld 1) and a column of a Fortran array are valid tiles."""
    c_rows = np.ascontiguousarray(random(rng, 5, 6))
    row = c_rows[2:3]                                   # 1×6, strides (48, 8)
    a = np.ascontiguousarray(random(rng, 5, 3))[1:2]    # 1×3
    column = np.asfortranarray(random(rng, 6, 4))[:, 1:2]
    b = np.asfortranarray(random(rng, 6, 3))
    expected_row = row - a @ b.T
    expected_column = column - b @ a.T
    gemm(a, b, row)
    gemm(b, a, column)
    assert_close(row, expected_row, 3)
    assert_close(column, expected_column, 3)


# ----------------------------------------------------------------------- Cholesky


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,n", TALL)
def test_potrf(rng, layout, m, n):
    a = random(rng, m, n)
    a[:n, :n] = spd(rng, n)
    l11 = np.linalg.cholesky(a[:n, :n])
    a[:n, :n][np.triu_indices(n, 1)] = np.nan  # must be neither read nor written
    tile = Placed(a, layout, rng)
    potrf(tile.view)
    assert_close(np.tril(tile.view[:n]), l11, n)
    assert np.isnan(tile.view[:n][np.triu_indices(n, 1)]).all()
    assert_close(tile.view[n:], sla.solve_triangular(l11, a[n:].T, lower=True).T if n else a[n:], n)
    tile.assert_outside_untouched()


def test_potrf_not_positive_definite_names_the_minor():
    a = np.asfortranarray(np.diag([4.0, 4.0, -1.0, 4.0, 4.0, 4.0]))
    with pytest.raises(KernelError, match=r"leading minor 3 of 6 is not positive"):
        potrf(a)


@pytest.mark.parametrize("uplo", "LU")
def test_potrf_fails_the_minor_whose_diagonal_is_nan_as_reference_lapack_does(uplo):
    a = np.asfortranarray(np.diag([4.0] * 200))
    a[150, 150] = np.nan
    with pytest.raises(KernelError, match=r"leading minor 151 of 200 is NaN: the tile holds a NaN"):
        potrf(a, uplo)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,w", RAGGED)
def test_trsm(rng, layout, m, w):
    lower = well_conditioned_square(rng, w, rows=w + 3)
    lower[np.triu_indices(w, 1)] = np.nan  # only the lower triangle may be read
    b = random(rng, m, w)
    tile = Placed(b, layout, rng)
    trsm(np.asfortranarray(lower), tile.view)
    expected = sla.solve_triangular(np.tril(lower[:w]), b.T, lower=True).T if w else b
    assert_close(tile.view, expected, 1)
    tile.assert_outside_untouched()


@pytest.mark.parametrize("order", [40, 100])  # dtrsm itself, and the halved triangle past 48
@pytest.mark.parametrize("side", "LR")
def test_trsm_with_a_zero_alpha_reads_no_triangle_at_any_order(order, side):
    """BLAS: alpha = 0 gives zeros and A is not read. The halved solve read it past order 48: a
    singular or NaN-holding triangle gave NaN where a tile of 40 gave zeros."""
    lower = np.asfortranarray(np.tril(np.ones((order, order))) + 2 * np.eye(order))
    lower[order // 2, order // 2], lower[order - 1, 1] = 0.0, np.nan
    b = np.ones((order, order), order="F")
    trsm(lower, b, side=side, uplo="L", transa="T", alpha=0.0)
    np.testing.assert_array_equal(b, np.zeros((order, order)))


@pytest.mark.parametrize("transa, transb", list(itertools.product("NT", repeat=2)))
def test_gemm_with_a_zero_alpha_reads_neither_input(transa, transb):
    """As reference BLAS and cuBLAS: C = beta·C whatever A and B hold (OpenBLAS's dgemm let NaN
    through for three of the four transposes), and a zero beta gives zeros whatever C held."""
    nan = np.full((6, 6), np.nan, order="F")
    c = np.arange(36.0).reshape(6, 6, order="F")
    gemm(nan, nan, c, transa, transb, alpha=0.0, beta=0.5)
    np.testing.assert_array_equal(c, np.arange(36.0).reshape(6, 6, order="F") * 0.5)
    gemm(nan, nan, c, transa, transb, alpha=0.0, beta=0.0)
    np.testing.assert_array_equal(c, np.zeros((6, 6)))
    c[...] = np.nan
    gemm(nan, nan, c, transa, transb, alpha=0.0, beta=0.0)
    np.testing.assert_array_equal(c, np.zeros((6, 6)))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("w,k", RAGGED)
def test_syrk(rng, layout, w, k):
    a, c = random(rng, w, k), random(rng, w, w)
    tile = Placed(c, layout, rng)
    syrk(np.asfortranarray(a), tile.view)
    lower = np.tril_indices(w)
    assert_close(tile.view[lower], (c - a @ a.T)[lower], k)
    np.testing.assert_array_equal(tile.view[np.triu_indices(w, 1)], c[np.triu_indices(w, 1)])
    tile.assert_outside_untouched()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,w,k", [(1, 1, 1), (7, 3, 5), (3, 7, 2), (100, 64, 64),
                                   (64, 64, 64), (0, 4, 4), (4, 0, 4), (4, 4, 0)])
def test_gemm(rng, layout, m, w, k):
    a, b, c = random(rng, m, k), random(rng, w, k), random(rng, m, w)
    tile_a, tile_c = Placed(a, layout, rng), Placed(c, layout, rng)
    gemm(tile_a.view, np.asfortranarray(b), tile_c.view)
    assert_close(tile_c.view, c - a @ b.T, k)
    tile_a.assert_outside_untouched()
    tile_c.assert_outside_untouched()


def test_gemm_with_overlapping_inputs(rng):
    """The Cholesky update reads two row ranges of the same tile as A and B."""
    panel = np.asfortranarray(random(rng, 10, 4))
    c = np.asfortranarray(random(rng, 6, 4))
    expected = c - panel[2:8] @ panel[4:8].T
    gemm(panel[2:8], panel[4:8], c)
    assert_close(c, expected, 4)


# ----------------------------------------------------------------------- LU


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,n", RAGGED + [(200, 200), (150, 40), (40, 150)])
def test_getrf_nopiv_matches_the_definition(rng, layout, m, n):
    a = random(rng, m, n)
    k = min(m, n)
    a[:k, :k] += 2 * max(m, n) * np.eye(k)
    tile = Placed(a, layout, rng)
    getrf_nopiv(tile.view)
    assert_close(tile.view, reference_lu_nopiv(a), max(m, n))
    lower = np.tril(tile.view, -1)[:, :k] + np.eye(m, k)
    assert_close(lower @ np.triu(tile.view)[:k], a, max(m, n))
    tile.assert_outside_untouched()


@pytest.mark.parametrize("position", [0, 5, 40])
def test_getrf_nopiv_zero_pivot_names_the_position(rng, position):
    """An isolated zero on the diagonal receives no update, so it stays exactly zero."""
    a = well_conditioned_square(rng, 64)
    a[position, :] = a[:, position] = 0.0
    with pytest.raises(KernelError, match=rf"U\({position}, {position}\) of the matrix it was given "
                                                     r"is exactly 0"):
        getrf_nopiv(np.asfortranarray(a))


def test_getrf_nopiv_subnormal_pivot_does_not_overflow():
    """1/pivot overflows for a subnormal pivot, so that column is divided instead."""
    a = np.asfortranarray([[1e-310, 1.0], [1e-310, 1.0 + 2.0**-20]])
    getrf_nopiv(a)
    np.testing.assert_array_equal(a, [[1e-310, 1.0], [1.0, 2.0**-20]])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("k,n", RAGGED)
def test_trsm_l(rng, layout, k, n):
    lu = well_conditioned_square(rng, k, rows=k + 2)
    lu[np.tril_indices(k, -1)] /= 2 * k  # dominant over the unit diagonal too
    lu[np.diag_indices(k)] = np.nan  # the unit diagonal is implicit
    b = random(rng, k, n)
    tile = Placed(b, layout, rng)
    trsm_l(np.asfortranarray(lu), tile.view)
    lower = np.tril(lu[:k], -1) + np.eye(k)
    assert_close(tile.view, sla.solve_triangular(lower, b, lower=True) if k else b, 1)
    tile.assert_outside_untouched()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,k", RAGGED)
def test_trsm_u(rng, layout, m, k):
    lu = well_conditioned_square(rng, k, rows=k + 2)
    lu[np.tril_indices(k, -1)] = np.nan  # only the upper triangle may be read
    b = random(rng, m, k)
    tile = Placed(b, layout, rng)
    trsm_u(np.asfortranarray(lu), tile.view)
    expected = sla.solve_triangular(np.triu(lu[:k]), b.T, trans="T").T if k else b
    assert_close(tile.view, expected, 1)
    tile.assert_outside_untouched()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 3, 5), (3, 7, 2), (100, 64, 64),
                                   (0, 4, 4), (4, 0, 4), (4, 4, 0)])
def test_gemm_nn(rng, layout, m, n, k):
    a, b, c = random(rng, m, k), random(rng, k, n), random(rng, m, n)
    tile_b, tile_c = Placed(b, layout, rng), Placed(c, layout, rng)
    gemm_nn(np.asfortranarray(a), tile_b.view, tile_c.view)
    assert_close(tile_c.view, c - a @ b, k)
    tile_b.assert_outside_untouched()
    tile_c.assert_outside_untouched()


# ----------------------------------------------------------------------- QR


def factor(rng, a, ib, layout):
    """geqrt on a placed copy of ``a``; returns (placed tile, T, nb_used, k)."""
    m, n = a.shape
    tile = Placed(a, layout, rng)
    t = np.asfortranarray(np.full((ib, n), np.nan))
    geqrt(tile.view, t)
    k = min(m, n)
    return tile, t, min(ib, k), k


def assert_t_layout(t, nb, k):
    """T holds upper triangular nb×nb blocks (the last one narrower) in T[:nb, :k] only."""
    written = np.zeros(t.shape, dtype=bool)
    for j in range(0, k, max(nb, 1)):
        w = min(nb, k - j)
        written[:w, j:j + w] = np.triu(np.ones((w, w), dtype=bool))
    assert not np.isnan(t[written]).any()
    assert np.isnan(t[nb:]).all() and np.isnan(t[:, k:]).all()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("ib", [1, 4, 32])
@pytest.mark.parametrize("m,n", RAGGED)
def test_geqrt_reconstructs_and_is_orthogonal(rng, layout, ib, m, n):
    a = random(rng, m, n)
    tile, t, nb, k = factor(rng, a, ib, layout)
    assert_t_layout(t, nb, k)
    r = np.zeros((m, n), order="F")
    r[:k] = np.triu(tile.view[:k])
    gemqrt(tile.view, t, r, "L", "N")  # Q·R
    assert_close(r, a, m)
    q = np.asfortranarray(np.eye(m))
    gemqrt(tile.view, t, q, "L", "N")
    assert_close(q.T @ q, np.eye(m), m)
    if k:
        assert_close(np.abs(np.diag(tile.view)), np.abs(np.diag(sla.qr(a, mode="r")[0])), m)
    tile.assert_outside_untouched()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("ib", [1, 8])
@pytest.mark.parametrize("m,n,nc", [(1, 1, 1), (7, 3, 5), (3, 7, 4), (100, 64, 64),
                                    (64, 64, 64), (5, 5, 0), (0, 3, 3)])
def test_gemqrt_applies_q_transpose(rng, layout, ib, m, n, nc):
    a = random(rng, m, n)
    tile, t, nb, k = factor(rng, a, ib, layout)
    # Qᵀ applied to the original A gives back R, zeros below.
    again = Placed(a, layout, rng)
    gemqrt(tile.view, t, again.view)
    assert_close(again.view, np.triu(tile.view), m)
    # Qᵀ then Q is the identity on any C.
    c = random(rng, m, nc)
    target = Placed(c, layout, rng)
    gemqrt(tile.view, t, target.view)
    gemqrt(tile.view, t, target.view, "L", "N")
    assert_close(target.view, c, m)
    target.assert_outside_untouched()


def factor_pair(rng, n, m, ib, r_extra=3):
    """tpqrt on a random triangle (in an (n + r_extra)×n tile) over a random m×n tile."""
    r = np.asfortranarray(random(rng, n + r_extra, n))
    a = random(rng, m, n)
    r_before, tile = r.copy(), Placed(a, "rows", rng)
    t = np.asfortranarray(np.full((ib, n), np.nan))
    tpqrt(r, tile.view, t)
    return r_before, a, r, tile, t


@pytest.mark.parametrize("ib", [1, 4, 32])
@pytest.mark.parametrize("m,n", RAGGED)
def test_tpqrt(rng, ib, m, n):
    r0, a0, r, tile, t = factor_pair(rng, n, m, ib)
    # R' is the R of the stacked matrix; only the upper triangle of R[:n] changes.
    stacked = np.vstack([np.triu(r0[:n]), a0])
    if n and m:
        assert_close(np.abs(np.diag(r)), np.abs(np.diag(sla.qr(stacked, mode="r")[0])), m + n)
        assert_t_layout(t, min(ib, n), n)
    np.testing.assert_array_equal(np.tril(r, -1)[:n], np.tril(r0, -1)[:n])
    np.testing.assert_array_equal(r[n:], r0[n:])
    # Q·[R'; 0] reconstructs [R; A].
    top, bottom = np.asfortranarray(np.triu(r)), np.zeros((m, n), order="F")
    tpmqrt(tile.view, t, top, bottom, "L", "N")
    assert_close(np.vstack([top[:n], bottom]), stacked, m + n)
    tile.assert_outside_untouched()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,n,nc", [(1, 1, 1), (7, 3, 5), (3, 7, 4), (100, 64, 64),
                                    (64, 64, 64), (6, 4, 0), (0, 4, 4)])
def test_tpmqrt_applies_q_transpose(rng, layout, m, n, nc):
    r0, a0, r, tile, t = factor_pair(rng, n, m, ib=8)
    # Qᵀ·[R; A] = [R'; 0], using C1 with extra rows below the first n (left untouched).
    c1 = np.asfortranarray(np.vstack([np.triu(r0[:n]), random(rng, 2, n)]))
    extra = c1[n:].copy()
    c2 = Placed(a0, layout, rng)
    tpmqrt(tile.view, t, c1, c2.view)
    assert_close(c1[:n], np.triu(r[:n]), m + n)
    assert_close(c2.view, np.zeros((m, n)), m + n)
    np.testing.assert_array_equal(c1[n:], extra)
    # Qᵀ then Q is the identity on any [C1; C2].
    d1, d2 = random(rng, n, nc), random(rng, m, nc)
    top, bottom = np.asfortranarray(d1), Placed(d2, layout, rng)
    tpmqrt(tile.view, t, top, bottom.view)
    tpmqrt(tile.view, t, top, bottom.view, "L", "N")
    assert_close(top, d1, m + n)
    assert_close(bottom.view, d2, m + n)
    bottom.assert_outside_untouched()



def merge_pair(rng, n, rows, ib, layout="own"):
    """ttqrt of a random triangle (in an (n + 3)×n tile) with a random rows×n tile below it,
    both with random strict lower parts (a factored tile keeps its reflectors there)."""
    r = np.asfortranarray(random(rng, n + 3, n))
    a = random(rng, rows, n)
    r_before, a_before, tile = r.copy(), a.copy(), Placed(a, layout, rng)
    t = np.asfortranarray(np.full((ib, n), np.nan))
    ttqrt(r, tile.view, t)
    return r_before, a_before, r, tile, t


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("ib", [1, 4, 32])
@pytest.mark.parametrize("rows,n", [(1, 1), (7, 7), (3, 7), (64, 64), (100, 64), (0, 5), (5, 0)])
def test_ttqrt_merges_two_triangles_and_touches_nothing_else(rng, layout, ib, rows, n):
    r0, a0, r, tile, t = merge_pair(rng, n, rows, ib, layout)
    m = min(rows, n)
    stacked = np.vstack([np.triu(r0[:n]), np.triu(a0[:m])])
    if n and m:
        assert_close(np.abs(np.diag(r)), np.abs(np.diag(sla.qr(stacked, mode="r")[0])), m + n)
        assert_t_layout(t, min(ib, n), n)
    np.testing.assert_array_equal(np.tril(r, -1), np.tril(r0, -1))
    np.testing.assert_array_equal(np.tril(tile.view, -1), np.tril(a0, -1))  # geqrt's reflectors stay
    tile.assert_outside_untouched()
    # Q·[R'; 0] reconstructs the two triangles; Q's other rows (C2's past m) are not touched
    top, bottom = np.asfortranarray(np.triu(r[:n])), np.zeros((rows, n), order="F")
    bottom[m:] = 5.0
    ttmqrt(tile.view, t, top, bottom, "L", "N")
    assert_close(np.vstack([top, bottom[:m]]), stacked, m + n)
    assert np.all(bottom[m:] == 5.0)


@pytest.mark.parametrize("side", ["L", "R"])
@pytest.mark.parametrize("rows,n,nc", [(7, 7, 5), (3, 7, 4), (64, 64, 64), (6, 4, 0)])
def test_ttmqrt_is_orthogonal_from_either_side(rng, side, rows, n, nc):
    _, _, _, tile, t = merge_pair(rng, n, rows, ib=4)
    m = min(rows, n)
    c1 = np.asfortranarray(random(rng, *((n + 2, nc) if side == "L" else (nc, n + 2))))
    c2 = np.asfortranarray(random(rng, *((rows, nc) if side == "L" else (nc, rows))))
    d1, d2 = c1.copy(), c2.copy()
    ttmqrt(tile.view, t, c1, c2, side, "T")
    if nc and m:
        assert not np.allclose(c1, d1)
    ttmqrt(tile.view, t, c1, c2, side, "N")
    assert_close(c1, d1, n + rows)
    assert_close(c2, d2, n + rows)
    # C1 past its first n rows (columns) and C2 past its first m are not touched
    np.testing.assert_array_equal(c1[n:] if side == "L" else c1[:, n:], d1[n:] if side == "L" else d1[:, n:])
    np.testing.assert_array_equal(c2[m:] if side == "L" else c2[:, m:], d2[m:] if side == "L" else d2[:, m:])


def test_ttmqrt_refuses_a_c2_that_does_not_face_v(rng):
    _, _, _, tile, t = merge_pair(rng, 6, 6, ib=4)
    with pytest.raises(ValueError, match=r"ttmqrt: C2 of shape \(5, 3\) does not match V of shape \(6, 6\)"):
        ttmqrt(tile.view, t, np.asfortranarray(random(rng, 6, 3)), np.asfortranarray(random(rng, 5, 3)))



# ----------------------------------------------------------------------- options of BLAS-3

NT = ["N", "T"]


def op(x, trans):
    return x if trans == "N" else x.T


def shaped(rng, shape, trans):
    """A random matrix whose op(·) has ``shape``."""
    return random(rng, *(shape if trans == "N" else shape[::-1]))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("transa,transb", list(itertools.product(NT, NT)))
@pytest.mark.parametrize("m,n,k,alpha,beta", [(7, 3, 5, 0.5, 2.0), (3, 7, 2, -1.0, 0.0), (1, 1, 1, 2.0, -1.0),
                                              (64, 40, 33, 1.5, 1.0), (4, 5, 0, 1.0, 3.0), (0, 4, 4, 1.0, 2.0)])
def test_gemm_options(rng, layout, transa, transb, m, n, k, alpha, beta):
    a, b, c = shaped(rng, (m, k), transa), shaped(rng, (k, n), transb), random(rng, m, n)
    tile_a, tile_c = Placed(a, layout, rng), Placed(c, layout, rng)
    gemm(tile_a.view, np.asfortranarray(b), tile_c.view, transa, transb, alpha, beta)
    assert_close(tile_c.view, alpha * op(a, transa) @ op(b, transb) + beta * c, k + 3)
    tile_c.assert_outside_untouched()


def test_gemm_beta_zero_ignores_nan_in_c(rng):
    """As in BLAS: C is not read when beta is 0 (language.md's prelude table says so of each of these)."""
    a, b = np.asfortranarray(random(rng, 4, 3)), np.asfortranarray(random(rng, 3, 5))
    c = np.full((4, 5), np.nan, order="F")
    gemm(a, b, c, "N", "N", 1.0, 0.0)
    assert_close(c, a @ b, 3)
    s, a4, b4 = np.asfortranarray(random(rng, 4, 4)), np.asfortranarray(random(rng, 4, 3)), \
        np.asfortranarray(random(rng, 4, 3))
    c = np.full((4, 3), np.nan, order="F")
    symm(s, a4, c, "L", "L", 1.0, 0.0)
    assert_close(c, symmetric_from(s, "L") @ a4, 4)
    for kernel, inputs, product in ((syrk, (a4,), a4 @ a4.T), (syr2k, (a4, b4), a4 @ b4.T + b4 @ a4.T)):
        c = np.full((4, 4), np.nan, order="F")
        kernel(*inputs, c, "L", "N", 1.0, 0.0)
        assert_close(np.tril(c), np.tril(product), 4)


def symmetric_from(a, uplo):
    """The symmetric matrix that the ``uplo`` triangle of square ``a`` stands for."""
    t = np.tril(a) if uplo == "L" else np.triu(a)
    return t + t.T - np.diag(np.diag(a))


def other_triangle_nan(a, uplo):
    """``a`` with NaN in the strict triangle opposite ``uplo`` (which must be neither read nor written)."""
    a = a.copy()
    n = min(a.shape)
    rows, cols = np.triu_indices(n, 1) if uplo == "L" else np.tril_indices(n, -1)
    a[rows, cols] = np.nan
    return a


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("side,uplo", list(itertools.product("LR", "LU")))
@pytest.mark.parametrize("m,n", [(7, 3), (3, 7), (1, 1), (40, 40), (0, 3), (3, 0)])
def test_symm(rng, layout, side, uplo, m, n):
    order = m if side == "L" else n
    a = other_triangle_nan(random(rng, order + 2, order), uplo)  # a taller tile: its top block is used
    b, c = random(rng, m, n), random(rng, m, n)
    tile_c = Placed(c, layout, rng)
    symm(np.asfortranarray(a), np.asfortranarray(b), tile_c.view, side, uplo, 0.5, -2.0)
    s = symmetric_from(a[:order], uplo) if order else np.zeros((0, 0))
    assert_close(tile_c.view, 0.5 * (s @ b if side == "L" else b @ s) - 2.0 * c, order)
    tile_c.assert_outside_untouched()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kernel", ["syrk", "syr2k"])
@pytest.mark.parametrize("uplo,trans", list(itertools.product("LU", NT)))
@pytest.mark.parametrize("n,k,beta", [(7, 3, 1.0), (3, 7, 0.5), (1, 1, 1.0), (40, 33, -1.0), (4, 0, 2.0), (0, 3, 1.0)])
def test_rank_k_updates(rng, layout, kernel, uplo, trans, n, k, beta):
    a, b, c = shaped(rng, (n, k), trans), shaped(rng, (n, k), trans), random(rng, n, n)
    tile_c = Placed(c, layout, rng)
    if kernel == "syrk":
        syrk(np.asfortranarray(a), tile_c.view, uplo, trans, 1.5, beta)
        update = op(a, trans) @ op(a, trans).T
    else:
        syr2k(np.asfortranarray(a), np.asfortranarray(b), tile_c.view, uplo, trans, 1.5, beta)
        update = op(a, trans) @ op(b, trans).T + op(b, trans) @ op(a, trans).T
    kept = np.tril_indices(n) if uplo == "L" else np.triu_indices(n)
    untouched = np.triu_indices(n, 1) if uplo == "L" else np.tril_indices(n, -1)
    assert_close(tile_c.view[kept], (1.5 * update + beta * c)[kept], k + 3)
    np.testing.assert_array_equal(tile_c.view[untouched], c[untouched])
    tile_c.assert_outside_untouched()


def triangle(a, uplo, diag):
    """The triangular matrix that square ``a`` holds for ``uplo`` and ``diag``."""
    t = np.tril(a) if uplo == "L" else np.triu(a)
    if diag == "U":
        np.fill_diagonal(t, 1.0)
    return t


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kernel", ["trsm", "trmm"])
@pytest.mark.parametrize("side,uplo,transa,diag", list(itertools.product("LR", "LU", NT, "NU")))
# orders above 48 take trsm's recursive split, three levels deep at 130
@pytest.mark.parametrize("m,n", [(7, 3), (3, 7), (0, 3), (130, 9), (9, 130)])
def test_triangular_options(rng, layout, kernel, side, uplo, transa, diag, m, n):
    order = m if side == "L" else n
    a = well_conditioned_square(rng, order, rows=order + 3)
    if diag == "U":
        a[:order][~np.eye(order, dtype=bool)] /= 2 * order  # dominant over the unit diagonal too
        a[np.diag_indices(order)] = np.nan  # the unit diagonal is implicit
    a = other_triangle_nan(a, uplo)
    b = random(rng, m, n)
    tile_b = Placed(b, layout, rng)
    CPU_KERNELS[kernel](np.asfortranarray(a), tile_b.view, side, uplo, transa, diag, -2.0)
    t = op(triangle(a[:order], uplo, diag), transa)
    if kernel == "trmm":
        expected = -2.0 * (t @ b if side == "L" else b @ t)
    else:
        expected = -2.0 * (np.linalg.solve(t, b) if side == "L" else np.linalg.solve(t.T, b.T).T) if order else b
    assert_close(tile_b.view, expected, order)
    tile_b.assert_outside_untouched()


def test_option_values_are_checked():
    f = np.zeros((3, 3), order="F")
    with pytest.raises(ValueError, match=r'^gemm: transa must be one of "N", "T", got "X"$'):
        gemm(f, f, f.copy(order="F"), "X")
    with pytest.raises(ValueError, match='trmm: side must be one of "L", "R", got "l"'):
        trmm(f, f.copy(order="F"), "l")
    with pytest.raises(ValueError, match="syrk: alpha must be a number, got 'x'"):
        syrk(f, f.copy(order="F"), "L", "N", "x")
    with pytest.raises(ValueError, match='laswp: direction must be one of "F", "B", got "N"'):
        laswp(np.zeros((1, 3), order="F"), f.copy(order="F"), 0, "N")
    with pytest.raises(ValueError, match="laswp: first must be an integer >= 0, got -1"):
        laswp(np.zeros((1, 3), order="F"), f.copy(order="F"), -1)
    with pytest.raises(ValueError, match=r"potrf: A is 3x2; uplo 'U' needs it square"):
        potrf(np.zeros((3, 2), order="F"), "U")
    with pytest.raises(ValueError, match=r"trtri: A is 3x2; it must be square"):
        trtri(np.zeros((3, 2), order="F"))
    with pytest.raises(ValueError, match=r"symm: A of shape \(2, 2\) has no 3x3 triangle"):
        symm(np.zeros((2, 2), order="F"), f, f.copy(order="F"))
    with pytest.raises(ValueError, match="expected a 2-D float64 array, got list"):
        gemm([f], f, f.copy(order="F"))  # a panel where a tile is expected


# ----------------------------------------------------------------------- Cholesky, inverses


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("n", [1, 5, 64, 0])
def test_potrf_upper(rng, layout, n):
    a = other_triangle_nan(spd(rng, n), "U")
    tile = Placed(a, layout, rng)
    potrf(tile.view, "U")
    u = np.linalg.cholesky(spd(rng, 0) if n == 0 else np.triu(a) + np.triu(a, 1).T).T
    assert_close(np.triu(tile.view), u, n)
    assert np.isnan(tile.view[np.tril_indices(n, -1)]).all()
    tile.assert_outside_untouched()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("uplo,diag", list(itertools.product("LU", "NU")))
@pytest.mark.parametrize("n", [1, 6, 50, 0, 230])  # 230: three levels of the recursive split
def test_trtri(rng, layout, uplo, diag, n):
    a = other_triangle_nan(random(rng, n, n) / max(n, 1) + 2 * np.eye(n), uplo)  # well conditioned, unit or not
    tile = Placed(a, layout, rng)
    trtri(tile.view, uplo, diag)
    kept = np.tril_indices(n, 0 if diag == "N" else -1) if uplo == "L" else np.triu_indices(n, 0 if diag == "N" else 1)
    assert_close(tile.view[kept], np.linalg.inv(triangle(a, uplo, diag))[kept], n)
    assert np.isnan(other_triangle_nan(tile.view, uplo)[np.isnan(a)]).all()
    tile.assert_outside_untouched()


def test_trtri_of_a_singular_triangle_names_the_zero():
    a = np.asfortranarray(np.diag([2.0, 3.0, 0.0, 1.0]))
    with pytest.raises(KernelError, match=r"trtri: the triangle is singular \(entry \(2, 2\) of the matrix it was "
                                          r"given is "
                                          r"exactly 0\)"):
        trtri(a)
    trtri(a, "L", "U")  # its unit diagonal is not read
    large = np.asfortranarray(np.eye(200))
    large[150, 150] = 0.0
    with pytest.raises(KernelError, match=r"entry \(150, 150\) of the matrix it was given is exactly 0"):
        trtri(large, "U")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("uplo", "LU")
@pytest.mark.parametrize("n", [1, 6, 70, 0])
def test_lauum(rng, layout, uplo, n):
    a = other_triangle_nan(random(rng, n, n), uplo)
    tile = Placed(a, layout, rng)
    lauum(tile.view, uplo)
    t = triangle(a, uplo, "N")
    product = t.T @ t if uplo == "L" else t @ t.T
    kept = np.tril_indices(n) if uplo == "L" else np.triu_indices(n)
    assert_close(tile.view[kept], product[kept], n)
    tile.assert_outside_untouched()


def test_trtri_then_lauum_inverts_from_the_cholesky_factor(rng):
    a = np.asfortranarray(spd(rng, 30))
    expected = np.linalg.inv(a)
    potrf(a)
    trtri(a)
    lauum(a)
    assert_close(np.tril(a), np.tril(expected), 30)


# ----------------------------------------------------------------------- LU with partial pivoting


class Adjacent:
    """Rows ``start:end`` of ``whole`` (a :class:`Placed`): one of a panel's tiles stored one
    after another in a taller array, as a rank stores a tile column."""

    def __init__(self, whole: Placed, start: int, end: int):
        self.whole, self.view = whole, whole.view[start:end]

    def assert_outside_untouched(self) -> None:
        self.whole.assert_outside_untouched()


PANEL_LAYOUTS = LAYOUTS + ["adjacent"]


def panel_of(a, heights, layout, rng):
    """``a`` cut into tiles of ``heights`` rows, each placed as ``layout`` says ("adjacent": all
    in one array, one after another)."""
    ends = np.cumsum(heights)
    if layout == "adjacent":
        whole = Placed(a, "rows", rng)
        return [Adjacent(whole, end - h, end) for h, end in zip(heights, ends)]
    return [Placed(a[end - h:end], layout, rng) for h, end in zip(heights, ends)]


def stacked(panel):
    return np.vstack([tile.view for tile in panel])


PANELS = [[7], [40], [3, 12], [16, 16, 16], [10, 0, 13, 5], [4, 3, 2]]


@pytest.mark.parametrize("layout", PANEL_LAYOUTS)
@pytest.mark.parametrize("heights", PANELS)
@pytest.mark.parametrize("n", [5, 16, 9])
def test_getrf_is_lapacks_partial_pivoting(rng, layout, heights, n):
    """The pivots are lu_factor's, the factors too, on a tile and on panels of tiles."""
    a = random(rng, sum(heights), n)
    panel = panel_of(a, heights, layout, rng)
    p = np.full((1, n + 2), np.nan, order="F")
    getrf(column([tile.view for tile in panel]) if len(panel) > 1 else panel[0].view, p)
    lu, pivots = sla.lu_factor(a)
    k = len(pivots)
    np.testing.assert_array_equal(p[0, :k], pivots)
    np.testing.assert_array_equal(p[0, k:], np.arange(k, n + 2))  # no interchange
    assert_close(stacked(panel), lu, n)
    for tile in panel:
        tile.assert_outside_untouched()


def test_getrf_of_a_singular_panel_is_a_factorization(rng):
    a = random(rng, 12, 5)
    a[:, 2] = a[:, 0]  # exactly dependent columns: U[2, 2] = 0 (LAPACK's info > 0)
    panel = [np.asfortranarray(a[:6]), np.asfortranarray(a[6:])]
    p = np.zeros((1, 5), order="F")
    getrf(column(panel), p)
    lu = np.vstack(panel)
    rows = np.arange(12)
    for j, pivot in enumerate(p[0].astype(int)):
        rows[[j, pivot]] = rows[[pivot, j]]
    lower, upper = np.tril(lu, -1) + np.eye(12, 5), np.triu(lu[:5])
    assert upper[2, 2] == 0.0
    assert_close(lower @ upper, a[rows], 12)


def test_getrf_lets_a_nan_through(rng):
    a = random(rng, 8, 4)
    a[5, 1] = np.nan
    tile, p = np.asfortranarray(a), np.zeros((1, 4), order="F")
    getrf(tile, p)
    assert np.isnan(tile).any()


def test_getrf_panel_errors():
    with pytest.raises(ValueError, match="getrf: a panel's tiles have 4, 3 columns; they must all have the same"):
        getrf(column([np.zeros((4, 4), order="F"), np.zeros((4, 3), order="F")]), np.zeros((1, 4), order="F"))
    with pytest.raises(ValueError, match=r"getrf: P of shape \(1, 3\) cannot hold the 4 pivots of a 8x4 panel"):
        getrf(column([np.zeros((4, 4), order="F")] * 2), np.zeros((1, 3), order="F"))


@pytest.mark.parametrize("heights", [[7], [3, 12], [10, 0, 13, 5]])
def test_adjacent_tiles_are_one_matrix(rng, heights):
    """Tiles one after another in one array are that array's rows, written through; tiles
    apart, or in arrays of their own, are not one matrix."""
    adjacent = [tile.view for tile in panel_of(random(rng, sum(heights), 4), heights, "adjacent", rng)]
    matrix = stacked_matrix(adjacent)
    np.testing.assert_array_equal(matrix, np.vstack(adjacent))
    matrix[-1, 0] = 42.0
    assert adjacent[-1][-1, 0] == 42.0
    parent = np.asfortranarray(random(rng, 12, 4))
    apart = [parent[0:3], parent[4:8]]
    own = [np.asfortranarray(parent[0:3]), np.asfortranarray(parent[3:8])]
    columns = [parent[0:3, :2], parent[3:8, 2:]]
    assert stacked_matrix(apart) is None and stacked_matrix(own) is None and stacked_matrix(columns) is None
    read_only = [tile.view() for tile in adjacent]
    for tile in read_only:
        tile.flags.writeable = False
    assert not stacked_matrix(read_only).flags.writeable


def test_getrf_and_laswp_in_place_equal_gathered_bitwise(rng):
    """A panel factored where it is (adjacent tiles, leading dimension 131) and one gathered
    first give the same bits: the same LAPACK calls on the same numbers."""
    a, heights = random(rng, 128, 32), [40, 40, 40, 8]
    apart, adjacent = panel_of(a, heights, "own", rng), panel_of(a, heights, "adjacent", rng)
    pivots = [np.zeros((1, 32), order="F") for _ in range(2)]
    for panel, p in zip((apart, adjacent), pivots):
        getrf(column([tile.view for tile in panel]), p)
    np.testing.assert_array_equal(pivots[0], pivots[1])
    np.testing.assert_array_equal(stacked(apart), stacked(adjacent))


def permuted(b, pivots):
    """P·b for LAPACK's 0-based pivots, interchanges applied in order."""
    b = b.copy()
    for j, p in enumerate(pivots):
        b[[j, p]] = b[[p, j]]
    return b


@pytest.mark.parametrize("layout", PANEL_LAYOUTS)
@pytest.mark.parametrize("heights", PANELS)
def test_laswp_applies_lu_factors_interchanges(rng, layout, heights):
    """A panel's P applied to another column's panel (forward), then undone (backward)."""
    m, n = sum(heights), 6
    _, pivots = sla.lu_factor(random(rng, m, n))
    p = np.asfortranarray(np.arange(n + 1, dtype=float)[None, :])  # the extra entry: no interchange
    p[0, :len(pivots)] = pivots
    b = random(rng, m, 3)
    panel = panel_of(b, heights, layout, rng)
    tiles = [tile.view for tile in panel]
    laswp(p, tiles)
    np.testing.assert_array_equal(stacked(panel), permuted(b, pivots))
    laswp(p, tiles, 0, "B")
    np.testing.assert_array_equal(stacked(panel), b)
    for tile in panel:
        tile.assert_outside_untouched()


def test_laswp_first_skips_interchanges(rng):
    b = random(rng, 10, 2)
    pivots = np.array([4, 9, 2, 5])
    tile = np.asfortranarray(b)
    laswp(np.asfortranarray(pivots[None, :].astype(float)), tile, 2)
    np.testing.assert_array_equal(tile, permuted(b, [0, 1, 2, 5]))


@pytest.mark.parametrize("heights", [(10,), (3, 4, 5), (2, 2, 2, 2, 2, 2), (7, 1, 0, 6)])
@pytest.mark.parametrize("first", [0, 2, 5])
@pytest.mark.parametrize("direction", "FB")
def test_laswp_applies_any_interchanges_in_order(rng, heights, first, direction):
    """Partners before, inside and after the swapped rows, repeated ones, tiles of any height:
    the same rows as swapping one pair at a time."""
    m = sum(heights)
    partners = rng.integers(0, m, size=8)
    b = random(rng, m, 3)
    expected = b.copy()
    order = range(first, len(partners)) if direction == "F" else reversed(range(first, len(partners)))
    for j in order:
        expected[[j, partners[j]]] = expected[[partners[j], j]]
    tiles = [np.array(part, order="F") for part in np.split(b, np.cumsum(heights)[:-1])]
    laswp(np.asfortranarray(partners[None, :].astype(float)), tiles, first, direction)
    np.testing.assert_array_equal(np.vstack(tiles), expected)


def test_getrf_and_laswp_solve_a_system_by_tiles(rng):
    """getrs by tiles: P·b, then L and U by trsm."""
    a, b = random(rng, 12, 12), random(rng, 12, 2)
    panel, p = [np.asfortranarray(a[:5]), np.asfortranarray(a[5:])], np.zeros((1, 12), order="F")
    getrf(column(panel), p)
    rhs = [np.asfortranarray(b[:5]), np.asfortranarray(b[5:])]
    laswp(p, rhs)
    lu, x = np.asfortranarray(np.vstack(panel)), np.asfortranarray(np.vstack(rhs))
    trsm(lu, x, "L", "L", "N", "U")
    trsm(lu, x, "L", "U", "N", "N")
    assert np.linalg.norm(a @ x - b) <= 1e-13 * np.linalg.norm(a) * np.linalg.norm(x) * 12


def test_laswp_rejects_a_pivot_outside_the_panel():
    with pytest.raises(ValueError, match=r"laswp: P\[0, 1\] = 7.0 is not a row of the panel \(it has 6 rows\)"):
        laswp(np.asfortranarray([[0.0, 7.0]]), [np.zeros((3, 2), order="F")] * 2)
    with pytest.raises(ValueError, match=r"P\[0, 0\] = 1.5 is not a row"):
        laswp(np.asfortranarray([[1.5]]), np.zeros((3, 2), order="F"))


# ----------------------------------------------------------------------- QR, side R


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("trans", NT)
@pytest.mark.parametrize("m,nv,rows,ib", [(7, 3, 5, 2), (30, 30, 4, 8), (3, 7, 6, 2), (6, 4, 0, 4)])
def test_gemqrt_from_the_right(rng, layout, trans, m, nv, rows, ib):
    a = random(rng, m, nv)
    tile, t, _, _ = factor(rng, a, ib, layout)
    q = np.asfortranarray(np.eye(m))
    gemqrt(tile.view, t, q, "L", "N")  # Q itself
    c = random(rng, rows, m)
    target = Placed(c, layout, rng)
    gemqrt(tile.view, t, target.view, "R", trans)
    assert_close(target.view, c @ op(q, trans), m)
    target.assert_outside_untouched()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("trans", NT)
@pytest.mark.parametrize("m,n,rows", [(7, 3, 5), (3, 7, 4), (20, 20, 1), (6, 4, 0)])
def test_tpmqrt_from_the_right(rng, layout, trans, m, n, rows):
    _, _, _, tile, t = factor_pair(rng, n, m, ib=4)
    q1, q2 = np.asfortranarray(np.eye(n + m)[:n]), np.asfortranarray(np.eye(n + m)[n:])
    tpmqrt(tile.view, t, q1, q2, "L", "N")  # Q, by rows
    q = np.vstack([q1, q2])
    c1 = random(rng, rows, n + 2)  # only its first n columns are used
    c2 = random(rng, rows, m)
    top, bottom = Placed(c1, layout, rng), Placed(c2, layout, rng)
    tpmqrt(tile.view, t, top.view, bottom.view, "R", trans)
    expected = np.hstack([c1[:, :n], c2]) @ op(q, trans)
    assert_close(np.hstack([top.view[:, :n], bottom.view]), expected, m + n)
    np.testing.assert_array_equal(top.view[:, n:], c1[:, n:])
    bottom.assert_outside_untouched()


# ----------------------------------------------------------------------- norms


def tiles_of(a, size):
    """The size×size tiles of ``a`` (ragged at the edges), in Fortran storage."""
    return [np.asfortranarray(a[i:i + size, j:j + size]) for i in range(0, a.shape[0], size)
            for j in range(0, a.shape[1], size)]


@pytest.mark.parametrize("magnitude", [1.0, 1e300, 1e-300])
def test_frobenius_norm_over_tiles_does_not_overflow(rng, magnitude):
    """Squares of 1e300 overflow and of 1e-300 underflow; the pairs keep the norm exact."""
    a = random(rng, 23, 17)
    halves = [np.zeros((1, 2), order="F"), np.full((1, 2), 0.0, order="F")]
    for index, tile in enumerate(tiles_of(a * magnitude, 5)):
        lassq(tile, halves[index % 2])
    total = np.asfortranarray([[0.0, 1.0]])  # LAPACK's own start: scale 0, sumsq 1
    for half in halves:
        lassq_merge(half, total)
    assert total[0, 0] * np.sqrt(total[0, 1]) == pytest.approx(np.linalg.norm(a) * magnitude, rel=1e-14)


def test_norms_keep_a_nan(rng):
    a = random(rng, 4, 4)
    a[2, 1] = np.nan
    pair, biggest = np.zeros((1, 2), order="F"), np.zeros((1, 1), order="F")
    lassq(np.asfortranarray(a), pair)
    amax(np.asfortranarray(a), biggest)
    amax(np.asfortranarray(np.ones((2, 2))), biggest)  # a later max does not hide it
    assert np.isnan(pair[0, 1]) and np.isnan(biggest[0, 0])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m,n", [(7, 3), (1, 1), (0, 3), (3, 0)])
def test_amax_and_asum(rng, layout, m, n):
    a = random(rng, m, n)
    tile = Placed(a, layout, rng)
    biggest = np.asfortranarray([[0.25]])
    amax(tile.view, biggest)
    assert biggest[0, 0] == max([0.25, *np.abs(a).ravel()])
    columns, rows = np.ones((1, n + 1), order="F"), np.ones((1, m), order="F")
    asum(tile.view, columns)
    asum(tile.view, rows, "T")
    assert_close(columns[0], np.append(1 + np.abs(a).sum(axis=0), 1), m)
    assert_close(rows[0], 1 + np.abs(a).sum(axis=1), n)
    tile.assert_outside_untouched()


def test_one_and_infinity_norms_over_tiles(rng):
    a = random(rng, 11, 9)
    column_sums, row_sums = np.zeros((1, 9), order="F"), np.zeros((1, 11), order="F")
    for i in range(0, 11, 4):
        for j in range(0, 9, 4):
            asum(np.asfortranarray(a[i:i + 4, j:j + 4]), column_sums[:, j:j + 4])
            asum(np.asfortranarray(a[i:i + 4, j:j + 4]), row_sums[:, i:i + 4], "T")
    one, infinity = np.zeros((1, 1), order="F"), np.zeros((1, 1), order="F")
    amax(column_sums, one)
    amax(row_sums, infinity)
    assert one[0, 0] == pytest.approx(np.linalg.norm(a, 1), rel=1e-14)
    assert infinity[0, 0] == pytest.approx(np.linalg.norm(a, np.inf), rel=1e-14)


def test_norm_accumulators_are_checked():
    with pytest.raises(ValueError, match=r"lassq: S of shape \(1, 1\) cannot hold 2 values"):
        lassq(np.ones((2, 2), order="F"), np.zeros((1, 1), order="F"))
    with pytest.raises(ValueError, match=r"asum: S of shape \(1, 2\) cannot hold 3 values"):
        asum(np.ones((2, 3), order="F"), np.zeros((1, 2), order="F"))
