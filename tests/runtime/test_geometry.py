"""Tile geometry: uniform, hybrid (with ragged and empty slices) and workspace tiles."""
import math

import pytest

from tiledsl.runtime.geometry import MAX_TILES, Geometry


def widths(geo):
    return [geo.width(j) for j in range(geo.nt)]


def heights(geo):
    return [geo.height(i) for i in range(geo.mt)]


def test_uniform_ragged():
    geo = Geometry.uniform(250, 130, 100)
    assert geo.row_starts == (0, 100, 200, 250)
    assert geo.col_starts == (0, 100, 130)
    assert (geo.m, geo.n, geo.mt, geo.nt, geo.s) == (250, 130, 3, 2, 1)
    assert heights(geo) == [100, 100, 50]
    assert widths(geo) == [100, 30]
    assert [geo.offset(j) for j in range(geo.nt)] == [0, 0]
    assert geo.row_range(2) == (200, 250)
    assert geo.col_range(1) == (100, 130)
    assert geo.tile_shape(2, 1) == (50, 30)


def test_uniform_exact_and_single_tile():
    assert Geometry.uniform(300, 300, 100).col_starts == (0, 100, 200, 300)
    one = Geometry.uniform(7, 5, 64)
    assert (one.mt, one.nt, one.tile_shape(0, 0)) == (1, 1, (7, 5))


def test_hybrid_ragged_last_block():
    geo = Geometry.hybrid(1000, 1000, 256, 64, 3)
    assert geo.nt == 12 and geo.s == 3
    assert widths(geo) == [64, 64, 128] * 3 + [64, 64, 104]
    assert heights(geo) == [256, 256, 256, 232]
    assert [geo.offset(j) for j in range(geo.nt)] == [0, 64, 128] * 4
    assert geo.col_range(11) == (896, 1000)


def test_hybrid_empty_slices_keep_block_index():
    geo = Geometry.hybrid(100, 100, 90, 40, 3)
    assert widths(geo) == [40, 40, 10, 10, 0, 0]
    assert [geo.offset(j) for j in range(geo.nt)] == [0, 40, 80, 0, 10, 10]
    # j // s is the block: the empty slices 4 and 5 sit at the end of block 1.
    assert [geo.col_range(j) for j in (3, 4, 5)] == [(90, 100), (100, 100), (100, 100)]


def test_hybrid_with_one_slice_is_uniform_in_columns():
    assert Geometry.hybrid(300, 250, 100, 1, 1) == Geometry.uniform(300, 250, 100)


@pytest.mark.parametrize("n", [1, 63, 64, 65, 200, 1000])
@pytest.mark.parametrize("B,b,s", [
    (64, 16, 1), (64, 16, 4), (64, 21, 4), (64, 63, 2), (90, 40, 3)])
def test_hybrid_slices_partition_every_block(n, B, b, s):
    geo = Geometry.hybrid(n, n, B, b, s)
    assert geo.nt == s * math.ceil(n / B)
    assert geo.col_starts[0] == 0 and geo.col_starts[-1] == n
    assert all(w >= 0 for w in widths(geo))
    for block in range(geo.nt // s):
        first = block * s
        block_width = min(B, n - block * B)
        assert geo.col_starts[first] == block * B
        assert sum(geo.width(j) for j in range(first, first + s)) == block_width
        for d in range(s):
            expected = min(d * b, block_width)
            assert geo.offset(first + d) == expected
            if d < s - 1:
                assert geo.width(first + d) == min((d + 1) * b, block_width) - expected


def test_workspace_follows_columns_of_like():
    like = Geometry.hybrid(1000, 1000, 256, 64, 3)
    ws = Geometry.workspace(like, 32)
    assert ws.mt == like.mt and ws.col_starts == like.col_starts and ws.s == like.s
    assert heights(ws) == [32] * 4
    assert ws.m == 128
    assert ws.offset(5) == like.offset(5)


@pytest.mark.parametrize("make, message", [
    (lambda: Geometry.uniform(0, 5, 4), "at least 1x1"),
    (lambda: Geometry.uniform(5, 5, 0), "nb must be at least 1"),
    (lambda: Geometry.hybrid(5, 0, 4, 1, 1), "at least 1x1"),
    (lambda: Geometry.hybrid(9, 9, 4, 0, 2), "b >= 1"),
    (lambda: Geometry.hybrid(9, 9, 4, 1, 0), "s >= 1"),
    (lambda: Geometry.hybrid(9, 9, 64, 32, 3), r"\(s-1\)\*b < B so the last slice is not empty, got \(s-1\)\*b = "
                                               r"\(3-1\)\*32 = 64 with B=64: b at most 31 with s=3, s at most 2 with b=32, a "
                                               r"larger B, or s=1$"),
    # no b fits 5 slices in 3 columns
    (lambda: Geometry.hybrid(9, 9, 3, 1, 5), r"with B=3: s at most 3 with b=1, a larger B, or s=1$"),
    (lambda: Geometry.workspace(Geometry.uniform(4, 4, 2), 0), "tile height must be at least 1"),
    (lambda: Geometry((0, 3, 2), (0, 1)), "must not decrease"),
    (lambda: Geometry((1, 3), (0, 1)), "must start at 0"),
    (lambda: Geometry((0, 3), (0, 1, 2), s=3), "whole blocks"),
])
def test_validation_messages(make, message):
    with pytest.raises(ValueError, match=message):
        make()


# ---------------------------------------------------------------- sizes that cannot be made (issue 17.11)
@pytest.mark.timeout(10)
@pytest.mark.parametrize("make, counts", [
    (lambda: Geometry.uniform(999_999_999_999_999_999, 10, 256), "3906250000000000×1 = 3906250000000000 tiles"),
    (lambda: Geometry.uniform(10**6, 10**6, 32), "31250×31250 = 976562500 tiles"),
    (lambda: Geometry.hybrid(10**6, 10**6, 512, 128, 2), "1954×3908 = 7636232 tiles"),
])
def test_a_matrix_with_too_many_tiles_is_refused_before_making_any(make, counts):
    with pytest.raises(ValueError, match=f"would have {counts}.*at most {MAX_TILES} tiles can be made"):
        make()


@pytest.mark.timeout(120)
def test_a_run_with_too_many_tiles_is_a_usage_error_naming_the_matrix(tmp_path):
    import subprocess
    import sys

    (tmp_path / "t.tile").write_text("program p {\n  matrix A[n * n, n * n] = random general\n"
                                     "  getrf_nopiv(A[0, 0])\n}\n")
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "t.tile", "--n", "1000", "--nb", "32"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=100)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("tiledsl: error: matrix A (t.tile:2): a 1000000×1000000 matrix would have "
                                 "31250×31250 = 976562500 tiles (8e+12 bytes)")
