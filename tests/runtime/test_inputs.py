"""Input generation: tiling independence, symmetry, SPD-ness, determinism, speed."""
import time

import numpy as np
import pytest

from tiledsl.runtime.geometry import Geometry
from tiledsl.runtime.inputs import KINDS, make_matrix, make_tile


def assemble(kind, geo, seed=7, matrix_index=0):
    """The matrix built tile by tile on ``geo``, as ranks would build it."""
    out = np.full((geo.m, geo.n), np.nan)
    for i in range(geo.mt):
        for j in range(geo.nt):
            (r0, r1), (c0, c1) = geo.row_range(i), geo.col_range(j)
            out[r0:r1, c0:c1] = make_tile(kind, seed, matrix_index, geo.m, geo.n, r0, r1, c0, c1)
    return out


def same_bits(x, y):
    """Equal shapes and identical bits (stricter than ==, which ignores the sign of 0)."""
    return x.shape == y.shape and np.array_equal(x.view(np.uint64), y.view(np.uint64))


@pytest.mark.parametrize("kind", KINDS)
def test_same_values_whatever_the_tiling(kind):
    geos = [Geometry.uniform(300, 300, 64), Geometry.uniform(300, 300, 100),
            Geometry.hybrid(300, 300, 128, 48, 3)]
    full = make_matrix(kind, 7, 0, 300, 300)
    for geo in geos:
        assert same_bits(assemble(kind, geo), full)


def test_rectangular_general_matrix_is_tiling_independent():
    full = make_matrix("general", 3, 1, 270, 130)
    assert same_bits(assemble("general", Geometry.uniform(270, 130, 50), 3, 1), full)


def test_tiles_are_fortran_float64():
    tile = make_tile("general", 1, 0, 100, 100, 10, 30, 40, 45)
    assert tile.dtype == np.float64 and tile.flags.f_contiguous and tile.shape == (20, 5)
    assert make_tile("spd", 1, 0, 9, 9, 3, 3, 0, 9).shape == (0, 9)


def test_general_values_are_uniform_in_half_open_interval():
    a = make_matrix("general", 11, 0, 500, 400)
    assert a.min() >= -0.5 and a.max() < 0.5
    assert abs(a.mean()) < 0.005
    assert abs(a.std() - 12 ** -0.5) < 0.005
    # Neighbours are uncorrelated along both directions.
    assert abs(np.corrcoef(a[:, :-1].ravel(), a[:, 1:].ravel())[0, 1]) < 0.01
    assert abs(np.corrcoef(a[:-1].ravel(), a[1:].ravel())[0, 1]) < 0.01


def test_spd_is_symmetric_bitwise_and_positive_definite():
    a = make_matrix("spd", 5, 2, 300, 300)
    assert same_bits(a, a.T)
    np.linalg.cholesky(a)
    assert np.all(np.diag(a) > 299)


def test_diagdom_is_general_plus_n_on_the_diagonal():
    general = make_matrix("general", 5, 0, 120, 120)
    diagdom = make_matrix("diagdom", 5, 0, 120, 120)
    off = ~np.eye(120, dtype=bool)
    assert same_bits(diagdom[off], general[off])
    assert np.array_equal(np.diag(diagdom), np.diag(general) + 120.0)


def test_zeros_and_identity_blocks():
    assert not make_tile("zeros", 1, 0, 50, 50, 0, 50, 0, 50).any()
    block = make_tile("identity", 1, 0, 50, 60, 10, 20, 5, 25)
    assert np.array_equal(block, np.eye(50, 60)[10:20, 5:25])


def test_deterministic_and_separated_by_seed_and_matrix():
    a = make_matrix("general", 42, 0, 64, 64)
    assert same_bits(a, make_matrix("general", 42, 0, 64, 64))
    assert not np.any(a == make_matrix("general", 43, 0, 64, 64))
    assert not np.any(a == make_matrix("general", 42, 1, 64, 64))


def test_value_does_not_depend_on_matrix_size():
    big = make_matrix("general", 9, 0, 100, 100)
    assert same_bits(make_matrix("general", 9, 0, 40, 70), big[:40, :70])


@pytest.mark.parametrize("args, message", [
    (("random", 1, 0, 4, 4, 0, 4, 0, 4), "unknown matrix kind 'random'"),
    (("general", 1, 0, 4, 4, 0, 5, 0, 4), "outside the 4x4 matrix"),
    (("general", 1, 0, 4, 4, 3, 2, 0, 4), "outside the 4x4 matrix"),
    (("spd", 1, 0, 4, 5, 0, 4, 0, 5), "must be square"),
])
def test_bad_requests(args, message):
    with pytest.raises(ValueError, match=message):
        make_tile(*args)


def test_generation_is_fast():
    start = time.perf_counter()
    make_matrix("spd", 1, 0, 2048, 2048)
    # About 20 ms on one core; the bound only catches an accidental slow path.
    assert time.perf_counter() - start < 1.0


def test_non_finite_input_values_are_counted_as_read_and_refused_with_check_finite():
    from tiledsl.runtime.inputs import finite_watched
    from tiledsl.runtime.world import RankError
    array = np.ones((6, 6))
    array[4, 1], array[5, 5] = np.nan, np.inf
    fill = lambda r0, r1, c0, c1: array[r0:r1, c0:c1]
    held = {}
    watched = finite_watched(fill, "U", held, refused_by=None)
    assert same_bits(watched(0, 3, 0, 3), array[:3, :3]) and held == {}
    watched(3, 6, 0, 6)
    assert held == {"U": 2}
    with pytest.raises(RankError, match=r"input U holds nan at \(4, 1\) \(--check-finite refuses non-finite inputs\)"):
        finite_watched(fill, "U", {}, refused_by="--check-finite")(3, 6, 0, 3)
