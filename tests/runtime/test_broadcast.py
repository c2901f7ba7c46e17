"""The tree of a broadcast (runtime/broadcast.py) and the plans that describe it.

The protocol itself runs under real MPI jobs in tests/runtime/test_mpi.py and is
mirrored by the simulator (tests/cli/test_simulate.py).
"""
import math

import numpy as np
import pytest

from tiledsl.runtime.broadcast import PLAN_SLOTS, binomial_tree, broadcast_for, decode, encode


def depth(tree: dict, root: int, member: int) -> int:
    steps = 0
    while member != root:
        member, steps = tree[member][0], steps + 1
    return steps


@pytest.mark.parametrize("readers", [1, 2, 3, 5, 8, 31, 99])
def test_every_reader_gets_the_version_once_within_log2_steps(readers):
    destinations = [10 + 3 * i for i in range(readers)]  # ranks in the order their sends were made
    tree = binomial_tree(7, destinations)
    assert sorted(tree) == sorted(destinations)
    sent_to = [child for _, children in tree.values() for child in children]
    root_children = [d for d in destinations if tree[d][0] == 7]
    assert sorted(sent_to + root_children) == sorted(destinations)  # each once, from one parent
    assert len(root_children) == math.ceil(math.log2(readers + 1))  # the owner's link: log2 of the messages
    assert max(depth(tree, 7, d) for d in destinations) == math.floor(math.log2(readers + 1))


def test_a_parent_comes_before_its_children_and_sends_the_largest_subtree_first():
    destinations = list(range(1, 16))
    tree = binomial_tree(0, destinations)
    order = {rank: i for i, rank in enumerate([0, *destinations])}
    assert all(order[parent] < order[d] for d, (parent, _) in tree.items())
    assert tree[1] == (0, [3, 5, 9])  # subtrees of 4, 2 and 1 members
    assert tree[2] == (0, [6, 10])
    assert tree[15] == (7, [])


def test_a_plan_travels_as_a_fixed_size_message():
    plan = encode(4, [9, 5, 3])
    assert plan.shape == (PLAN_SLOTS,) and plan.dtype == np.float64
    assert decode(plan) == (4, [9, 5, 3])
    assert decode(encode(0, [])) == (0, [])
    with pytest.raises(ValueError, match="30 children at most"):
        encode(0, list(range(31)))


def test_auto_sends_along_trees_from_eight_ranks():
    assert [broadcast_for("auto", ranks) for ranks in (1, 4, 7, 8, 100)] == ["direct"] * 3 + ["tree"] * 2
    assert broadcast_for("direct", 100) == "direct" and broadcast_for("tree", 2) == "tree"
