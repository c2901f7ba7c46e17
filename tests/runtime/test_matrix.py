"""runtime.matrix: where a rank stores its tiles."""
import numpy as np
import pytest

from tiledsl.runtime.distribution import BlockCyclic
from tiledsl.runtime.geometry import Geometry
from tiledsl.runtime.panels import stacked
from tiledsl.runtime.matrix import TiledMatrix, TileIndexError, region_view

pytestmark = pytest.mark.timeout(60)


def allocated(m: int, n: int, nb: int) -> tuple:
    values = np.arange(m * n, dtype=float).reshape(m, n)
    matrix = TiledMatrix("A", Geometry.uniform(m, n, nb), BlockCyclic(), 0)
    matrix.allocate(lambda r0, r1, c0, c1: values[r0:r1, c0:c1], by_columns=True)
    return matrix, values


def test_a_tile_is_an_array_of_its_own_unless_stored_by_columns():
    """User kernels may count on a contiguous tile of their own, except in a matrix of which
    built-in kernels take column panels."""
    matrix = TiledMatrix("A", Geometry.uniform(7, 7, 3), BlockCyclic(), 0)
    matrix.allocate(lambda r0, r1, c0, c1: np.ones((r1 - r0, c1 - c0)))
    assert all(tile.data.flags.f_contiguous and tile.data.base is None for tile in matrix.local_tiles())
    assert stacked([matrix.tile(0, 0).data, matrix.tile(1, 0).data]) is None


@pytest.mark.parametrize("m,n,nb", [(512, 300, 128), (100, 70, 32), (7, 7, 3)])
def test_a_tile_column_is_one_array_off_power_of_two_strides(m, n, nb):
    """Each tile holds its values; the tiles of a column are one matrix to LAPACK, whose
    leading dimension is no multiple of 256 doubles (512 rows would be)."""
    matrix, values = allocated(m, n, nb)
    g = matrix.geometry
    for tile in matrix.local_tiles():
        (r0, r1), (c0, c1) = g.row_range(tile.i), g.col_range(tile.j)
        np.testing.assert_array_equal(tile.data, values[r0:r1, c0:c1])
    for j in range(matrix.nt):
        column = stacked([matrix.tile(i, j).data for i in range(matrix.mt)])
        np.testing.assert_array_equal(column, values[:, slice(*g.col_range(j))])
        if column.shape[1] > 1:  # numpy's stride along an extent of 1 means nothing
            leading = column.strides[1] // 8
            assert leading >= m and leading % 8 == 0 and leading % 256 != 0


def test_a_rank_stacks_its_own_stored_tiles_of_a_column():
    """On a 2x1 grid rank 1 owns tile rows 1 and 3: stored one after the other. A tile no
    task touches is not stored."""
    matrix = TiledMatrix("A", Geometry.uniform(8, 4, 2), BlockCyclic(2, 1), 1)
    values = np.arange(32, dtype=float).reshape(8, 4)
    needed = {matrix.tile(1, 0), matrix.tile(3, 0), matrix.tile(3, 1)}
    matrix.allocate(lambda r0, r1, c0, c1: values[r0:r1, c0:c1], needed, by_columns=True)
    np.testing.assert_array_equal(stacked([matrix.tile(1, 0).data, matrix.tile(3, 0).data]),
                                  values[[2, 3, 6, 7], 0:2])
    assert matrix.tile(1, 1).data is None
    np.testing.assert_array_equal(matrix.block(matrix.tile(1, 1)), values[2:4, 2:4])
    np.testing.assert_array_equal(matrix.tile(3, 1).data, values[6:8, 2:4])


@pytest.mark.parametrize("region, message", [
    ((3, 2, 0, 1), "sub-range [3:2, 0:1] of tile A[0, 0] is reversed: its rows start at 3 and end before, at 2"),
    ((0, 2, 2, 1), "sub-range [0:2, 2:1] of tile A[0, 0] is reversed: its columns start at 2 and end before, at 1"),
    ((0, 1, 5, None), "sub-range [0:1, 5:] is outside tile A[0, 0] (3×3)"),  # a start past the tile, an open end
    ((4, None, 0, 1), "sub-range [4:, 0:1] is outside tile A[0, 0] (3×3)"),
    ((2, 4, 0, 1), "sub-range [2:4, 0:1] is outside tile A[0, 0] (3×3)"),
    ((-1, 2, 0, 1), "sub-range [-1:2, 0:1] is outside tile A[0, 0] (3×3)"),
])
def test_a_sub_range_that_leaves_its_tile_or_is_reversed_says_which(region, message):
    matrix = TiledMatrix("A", Geometry.uniform(7, 7, 3), BlockCyclic(), 0)
    with pytest.raises(TileIndexError) as raised:
        region_view(matrix.tile(0, 0), region)
    assert str(raised.value.args[0]) == message


@pytest.mark.parametrize("ends, message", [
    ((5, 3, 5, None), "the tile range A[5 : 3, 5] is in tile column 5, which does not exist: A, 7×7, has 3×3 tiles"),
    ((0, 3, 5, None), "the tile range A[0 : 3, 5] is in tile column 5, which does not exist: A, 7×7, has 3×3 tiles"),
    ((-1, None, 2, 0), "the tile range A[-1, 2 : 0] is in tile row -1, which does not exist: A, 7×7, has 3×3 tiles"),
    ((2, 2, 0, None), "the tile range A[2 : 2, 0] is empty"),
    ((1, 4, 0, None), "the tile range A[1 : 4, 0] leaves A, which has 3×3 tiles"),
    # a range of one tile stays a range, whichever index is single
    ((2, 3, -4, None), "the tile range A[2 : 3, -4] is in tile column -4, which does not exist: A, 7×7, has 3×3 tiles"),
    ((5, None, 0, 1), "the tile range A[5, 0 : 1] is in tile row 5, which does not exist: A, 7×7, has 3×3 tiles"),
    ((3, 4, 0, None), "the tile range A[3 : 4, 0] leaves A, which has 3×3 tiles"),
    # a driver of format 4 gives both stops: a one-wide column is the single index
    ((0, 3, 5, 6), "the tile range A[0 : 3, 5] is in tile column 5, which does not exist: A, 7×7, has 3×3 tiles"),
])
def test_a_panel_in_a_tile_row_or_column_that_does_not_exist_says_so_before_it_is_empty(ends, message):
    """The panel's single index outside the matrix is the cause: said even where its range is empty too."""
    matrix = TiledMatrix("A", Geometry.uniform(7, 7, 3), BlockCyclic(), 0)
    with pytest.raises(TileIndexError) as raised:
        matrix.panel(*ends)
    assert str(raised.value) == message
