"""Residual checks: small for correct factorizations, above the threshold for broken ones."""
from fractions import Fraction

import numpy as np
import pytest
import scipy.linalg
from scipy.linalg import lapack

from dense_checks import Reflector, apply_q, cholesky_residual, lu_residual, qr_residuals
from tiledsl.runtime.checks import EPS, SUBNORMAL_FLOOR, THRESHOLD, Subnormal, passes, scaled
from tiledsl.runtime.geometry import Geometry
from tiledsl.runtime.inputs import make_matrix


def lu_nopiv(a):
    """LU without pivoting, L (unit, implied diagonal) and U packed in one array."""
    lu = np.array(a, dtype=float, order="F")
    for k in range(min(lu.shape)):
        lu[k + 1:, k] /= lu[k, k]
        lu[k + 1:, k + 1:] -= np.outer(lu[k + 1:, k], lu[k, k + 1:])
    return lu


def test_cholesky_residual():
    a = make_matrix("spd", 1, 0, 200, 200)
    factor = scipy.linalg.cholesky(a, lower=True)
    factor[np.triu_indices(200, 1)] = 1e3  # garbage above the diagonal is ignored
    assert cholesky_residual(a, factor) < 1
    factor[150, 20] += 1e-6
    assert cholesky_residual(a, factor) > THRESHOLD


@pytest.mark.parametrize("m,n", [(150, 150), (180, 120), (120, 180)])
def test_lu_residual(m, n):
    a = make_matrix("diagdom", 2, 0, m, n)
    lu = lu_nopiv(a)
    assert lu_residual(a, lu) < 1
    lu[100, 110] += 1e-6
    assert lu_residual(a, lu) > THRESHOLD


def test_zero_matrix_has_zero_residual_and_nan_fails():
    zero = np.zeros((4, 4))
    assert cholesky_residual(zero, zero) == 0.0
    assert lu_residual(zero, np.eye(4)) == float("inf")
    assert passes(0.5, 59.9) and not passes(0.5, 60.0) and not passes(float("nan"))


def padded_t(t, ib, width):
    """The T tile as the runtime stores it: ib rows, only the first min(ib, k) used."""
    out = np.full((ib, width), np.nan, order="F")
    out[:t.shape[0], :t.shape[1]] = t
    return out


def tile_qr(a, geo, ib):
    """Flat-tree tile QR on ``geo`` (DESIGN §5, Algorithm 2), recording the reflectors.

    Column ``k`` is eliminated from its diagonal row ``c0`` down: GEQRT on the rows
    of the tile row holding ``c0`` from that offset, then TPQRT of every tile row
    below against the ``w`` rows of the triangle. Works for uniform and hybrid tiles.
    """
    f = np.array(a, order="F")
    reflectors = []
    for k in range(geo.nt):
        c0, c1 = geo.col_range(k)
        w = c1 - c0
        if w == 0 or c0 >= geo.m:
            continue
        t_row = next(i for i in range(geo.mt) if geo.row_range(i)[1] > c0)
        rows = slice(c0, geo.row_range(t_row)[1])
        kk = min(rows.stop - rows.start, w)
        # LAPACK's wrappers refuse empty arrays: skip the empty slices on the right.
        later = [slice(*geo.col_range(j)) for j in range(k + 1, geo.nt) if geo.width(j)]
        f[rows, c0:c1], t, info = lapack.dgeqrt(min(ib, kk), f[rows, c0:c1])
        assert info == 0
        reflectors.append(Reflector("geqrt", (rows.start, rows.stop), (rows.start, rows.stop),
                                    (c0, c1), padded_t(t, ib, w)))
        for cj in later:
            f[rows, cj], info = lapack.dgemqrt(f[rows, c0:c0 + kk], t, f[rows, cj], trans="T")
        top = slice(c0, c0 + w)
        for i in range(t_row + 1, geo.mt):
            below = slice(*geo.row_range(i))
            f[top, c0:c1], f[below, c0:c1], t, info = lapack.dtpqrt(
                0, min(ib, w), f[top, c0:c1], f[below, c0:c1])
            assert info == 0
            reflectors.append(Reflector("tpqrt", (top.start, top.stop),
                                        (below.start, below.stop), (c0, c1), padded_t(t, ib, w)))
            for cj in later:
                f[top, cj], f[below, cj], info = lapack.dtpmqrt(
                    0, f[below, c0:c1], t, f[top, cj], f[below, cj], trans="T")
    return f, reflectors


QR_CASES = {
    "3x3 tiles": (Geometry.uniform(300, 300, 100), 32),
    "ragged": (Geometry.uniform(250, 250, 100), 24),
    "tall": (Geometry.uniform(330, 250, 100), 100),
    "wide": (Geometry.uniform(250, 300, 100), 16),
    "hybrid": (Geometry.hybrid(250, 250, 96, 32, 3), 16),
    "hybrid empty slices": (Geometry.hybrid(100, 100, 90, 40, 3), 8),
}


@pytest.fixture(params=sorted(QR_CASES))
def factored_qr(request):
    geo, ib = QR_CASES[request.param]
    a = make_matrix("general", 3, 0, geo.m, geo.n)
    return (a, *tile_qr(a, geo, ib))


def test_qr_residuals_small(factored_qr):
    a, f, reflectors = factored_qr
    resid_qr, resid_orth = qr_residuals(a, f, reflectors)
    assert resid_qr < 5 and resid_orth < 5


def test_qr_residuals_agree_with_lapack_r(factored_qr):
    a, f, reflectors = factored_qr
    k = min(a.shape)
    r_ref = scipy.linalg.qr(a, mode="r")[0][:k]
    # R is unique up to the signs of its rows.
    assert np.allclose(np.abs(np.triu(f[:k])), np.abs(r_ref), atol=1e-10)


def test_apply_q_transpose_reduces_a_to_r(factored_qr):
    a, f, reflectors = factored_qr
    x = np.array(a, order="F")
    apply_q(x, f, reflectors, "T")
    k = min(a.shape)
    assert np.allclose(x[:k], np.triu(f[:k]), atol=1e-12)
    assert np.allclose(x[k:], 0, atol=1e-12)


def test_corrupt_t_makes_qr_residuals_large():
    a = make_matrix("general", 4, 0, 300, 300)
    f, reflectors = tile_qr(a, Geometry.uniform(300, 300, 100), 32)
    reflectors[1].t[0, 0] += 0.5  # the first TPQRT of column 0
    resid_qr, resid_orth = qr_residuals(a, f, reflectors)
    assert resid_qr > THRESHOLD and resid_orth > THRESHOLD


def test_reflector_validation():
    with pytest.raises(ValueError, match="kind must be"):
        Reflector("larfb", (0, 2), (0, 2), (0, 2), np.zeros((1, 2)))
    with pytest.raises(ValueError, match="does not match columns"):
        Reflector("geqrt", (0, 2), (0, 2), (0, 2), np.zeros((1, 3)))
    with pytest.raises(ValueError, match="trans must be"):
        apply_q(np.eye(2), np.eye(2), [], "C")


@pytest.mark.parametrize("diff, bound, n, expected", [
    (0.0, 0.0, 5, 0.0), (1.0, 0.0, 5, np.inf), (np.inf, 1.0, 5, np.inf), (1.0, np.inf, 5, np.nan),
    (np.nan, 1.0, 5, np.nan),
    # ‖A‖·n·ε near the subnormal numbers (it underflowed to 0 in floats: ZeroDivisionError): exact, rounded once
    (4e-300, 1e-290, 40, float(Fraction(4e-300) / (Fraction(1e-290) * 40 * Fraction(EPS)))),
    # a bound ‖A‖·‖X‖ beyond the float range (it was inf, and every residual 0: a pass)
    (1e300, Fraction(1e300) * Fraction(1e300), 10, float(Fraction(1e300) / (Fraction(1e300) ** 2 * 10 * Fraction(EPS))))])
def test_a_scaled_residual_is_computed_exactly_and_rounded_once(diff, bound, n, expected):
    got = scaled(diff, bound, n)
    assert got == expected or (np.isnan(got) and np.isnan(expected))



@pytest.mark.parametrize("diff", [0.0, 4e-323])
def test_a_residual_formed_among_the_subnormal_numbers_is_none(diff):
    """A 64×64 Cholesky of entries near 1e-310 checked 'residual 0 (pass)' where the exact residual is 245:
    its differences, formed on float64's absolute grid there, rounded away."""
    with pytest.raises(Subnormal, match=r"\(1\.6e-310\) are so small .*scale the matrix by a power of two"):
        scaled(diff, 1.6e-310, 64)
    assert scaled(diff, float(64 * SUBNORMAL_FLOOR), 64) < 1e-3  # from the floor on, a residual again
