"""Distributions: the DESIGN §4 formulas, grid helpers and their error messages."""
import itertools

import pytest

from tiledsl.runtime.distribution import (
    HOST, BlockCyclic, Hybrid, parse_grid, squarest_grid)


@pytest.mark.parametrize("pr,pc,gpus,host_columns", [
    (1, 1, 0, 1), (2, 3, 0, 1), (2, 2, 2, 1), (3, 1, 1, 3), (1, 2, 3, 0)])
def test_block_cyclic_matches_formula(pr, pc, gpus, host_columns):
    dist = BlockCyclic(pr, pc, gpus=gpus, host_columns=host_columns)
    for i, j in itertools.product(range(13), range(17)):
        node = (i % pr) * pc + j % pc
        p = (j // pc) % (host_columns + gpus)
        device = 0 if p < host_columns else p - host_columns + 1
        assert dist.rank_of(i, j) == node
        assert dist.owner("A", i, j) == (node, device)


def test_block_cyclic_deals_local_columns_in_a_cycle():
    dist = BlockCyclic(1, 1, gpus=2, host_columns=2)
    assert [dist.device_of(0, j) for j in range(8)] == [0, 0, 1, 2, 0, 0, 1, 2]
    assert {BlockCyclic(2, 2).device_of(i, j) for i in range(5) for j in range(5)} == {HOST}


@pytest.mark.parametrize("pr,pc", [(pr, pc) for pr in range(1, 9) for pc in range(1, 9)])
def test_block_cyclic_gives_every_rank_a_tile_of_an_8x8_grid(pr, pc):
    dist = BlockCyclic(pr, pc)
    owners = {dist.rank_of(i, j) for i in range(8) for j in range(8)}
    assert owners == set(range(pr * pc)) == set(range(dist.nranks))


@pytest.mark.parametrize("pr,pc,s,gpus", [(1, 1, 3, 0), (2, 2, 3, 2), (2, 3, 4, 1), (1, 2, 2, 3)])
def test_hybrid_matches_formula(pr, pc, s, gpus):
    dist = Hybrid(pr, pc, s, gpus=gpus)
    for i, j in itertools.product(range(9), range(4 * s * pc)):
        node = (i % pr) * pc + (j // s) % pc
        if gpus == 0 or j % s < s - 1:
            device = 0
        else:
            device = (j // s // pc) % gpus + 1
        assert dist.rank_of(i, j) == node
        assert dist.owner("T", i, j) == (node, device)


def test_hybrid_keeps_a_block_on_one_rank_and_its_wide_slice_on_a_gpu():
    dist = Hybrid(1, 2, 3, gpus=2)
    # blocks 0..3 go to ranks 0,1,0,1; each rank deals its blocks to GPUs 1,2.
    assert [dist.owner("A", 0, j) for j in range(12)] == [
        (0, 0), (0, 0), (0, 1), (1, 0), (1, 0), (1, 1),
        (0, 0), (0, 0), (0, 2), (1, 0), (1, 0), (1, 2)]


def test_hybrid_with_one_slice_puts_every_column_on_a_gpu():
    dist = Hybrid(1, 1, 1, gpus=2)
    assert [dist.device_of(0, j) for j in range(4)] == [1, 2, 1, 2]
    assert Hybrid(1, 1, 1).device_of(0, 3) == HOST


@pytest.mark.parametrize("make, message", [
    (lambda: BlockCyclic(0, 1), "at least 1x1"),
    (lambda: BlockCyclic(1, 1, gpus=-1), "GPUs per rank"),
    (lambda: BlockCyclic(1, 1, gpus=0, host_columns=0), "host_columns"),
    (lambda: Hybrid(1, 1, 0), "slices per block"),
])
def test_distribution_validation(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("p,grid", [
    (1, (1, 1)), (2, (1, 2)), (4, (2, 2)), (6, (2, 3)), (7, (1, 7)), (12, (3, 4)), (16, (4, 4))])
def test_squarest_grid(p, grid):
    assert squarest_grid(p) == grid


def test_squarest_grid_rejects_zero():
    with pytest.raises(ValueError, match="number of ranks must be >= 1"):
        squarest_grid(0)


@pytest.mark.parametrize("text,grid", [("2x3", (2, 3)), (" 4X1 ", (4, 1)), ("1x1", (1, 1))])
def test_parse_grid(text, grid):
    assert parse_grid(text) == grid


@pytest.mark.parametrize("text", ["", "2", "2*3", "x3", "2x", "-1x2", "2x3x4", "a x b"])
def test_parse_grid_rejects_bad_text(text):
    with pytest.raises(ValueError, match="expected PxQ"):
        parse_grid(text)


def test_parse_grid_rejects_zero():
    with pytest.raises(ValueError, match="at least 1"):
        parse_grid("0x2")
