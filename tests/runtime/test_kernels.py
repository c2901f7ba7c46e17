"""Tests of the CPU tile kernels against numpy/scipy references.

Every kernel runs on square, ragged and empty shapes, both on a Fortran array of its
own and on a row sub-range of a taller Fortran array (the no-copy path): results must
match the reference and the rows outside the view must stay untouched.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla

from tiledsl.runtime.errors import KernelError
from tiledsl.runtime.kernels import (CPU_KERNELS, gemm, gemm_nn, gemqrt, gemqrt_apply,
                                     geqrt, getrf_nopiv, potrf, syrk, tpmqrt, tpmqrt_apply,
                                     tpqrt, trsm, trsm_l, trsm_u)

pytestmark = pytest.mark.timeout(120)

LAYOUTS = ["own", "rows"]
RAGGED = [(1, 1), (7, 3), (3, 7), (100, 64), (64, 64), (0, 5), (5, 0), (0, 0)]
TALL = [(1, 1), (7, 3), (100, 64), (64, 64), (200, 200), (5, 0), (0, 0)]


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
    assert set(CPU_KERNELS) == {"potrf", "trsm", "syrk", "gemm", "getrf_nopiv", "trsm_l",
                                "trsm_u", "gemm_nn", "geqrt", "gemqrt", "tpqrt", "tpmqrt"}
    assert CPU_KERNELS["gemqrt"] is gemqrt and CPU_KERNELS["tpmqrt"] is tpmqrt
    assert all(f.__doc__ for f in CPU_KERNELS.values())


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
    with pytest.raises(ValueError):
        gemqrt_apply(f(4, 4), f(2, 4), f(4, 4), "C")


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
    with pytest.raises(KernelError, match=rf"U\[{position}, {position}\] is exactly 0"):
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
    gemqrt_apply(tile.view, t, r, "N")  # Q·R
    assert_close(r, a, m)
    q = np.asfortranarray(np.eye(m))
    gemqrt_apply(tile.view, t, q, "N")
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
    gemqrt_apply(tile.view, t, target.view, "N")
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
    tpmqrt_apply(tile.view, t, top, bottom, "N")
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
    tpmqrt_apply(tile.view, t, top, bottom.view, "N")
    assert_close(top, d1, m + n)
    assert_close(bottom.view, d2, m + n)
    bottom.assert_outside_untouched()

