"""Priorities derived from the task graph (bottom levels), and --priorities."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tiledsl.runtime import Options
from tiledsl.runtime.priorities import EXACT_LEVELS_RANKS, TaskSequence, bottom_levels, in_turn, work
from tiledsl.runtime.program import Call

ROOT = Path(__file__).resolve().parents[2]
UPDATE = Call("update", ("inout",), main=0, line=1, text="update(X)")
USE = Call("use", ("in", "inout"), main=1, line=2, text="use(X, Y)")


class Tile:
    """A stand-in tile: only its shape matters to the priorities."""

    def __init__(self, name, shape=(2, 2)):
        self.name, self.shape = name, shape

    def __repr__(self):
        return self.name


def levels_of(tasks, mine=None):
    sequence = TaskSequence()
    for index, (call, tiles) in enumerate(tasks):
        sequence.add(call, tiles, mine is None or index in mine)
    return list(bottom_levels(sequence))


def test_a_chain_counts_down_to_its_end():
    x = Tile("x")
    levels = levels_of([(UPDATE, (x,))] * 4)
    assert levels == [4 * work((x,)), 3 * work((x,)), 2 * work((x,)), work((x,))]


def test_readers_wait_for_their_writer_and_the_next_writer_for_them():
    x, y, z = Tile("x"), Tile("y"), Tile("z")
    unit = work((x,))
    tasks = [(UPDATE, (x,)),  # 0: read by 1 and 2, so before both
             (USE, (x, y)),  # 1: x read, y written; then y is updated twice more (3, 4)
             (USE, (x, z)),  # 2: a short branch
             (UPDATE, (y,)), (UPDATE, (y,)),
             (UPDATE, (x,))]  # 5: writes x after readers 1 and 2 (write after read)
    levels = levels_of(tasks)
    assert levels[5] == unit and levels[4] == unit and levels[3] == 2 * unit
    assert levels[2] == 2 * unit  # itself, then 5 (which must wait for its read of x)
    assert levels[1] == 3 * unit  # itself, 3, 4
    assert levels[0] == 4 * unit  # the longest way down: 0, 1, 3, 4
    assert levels_of(tasks, mine={1, 5}) == [3 * unit, unit]  # a rank gets its own tasks' levels, in order


def test_larger_tiles_weigh_more():
    big, small = Tile("big", (400, 400)), Tile("small", (100, 100))
    assert work((big,)) == 64 * work((small,))  # (n²)^1.5 = n³
    assert work((small, big)) == work((big,))
    assert levels_of([(USE, (small, big))]) == [work((big,))]


def test_levels_are_handed_out_in_turn_then_the_given_priority():
    priority_of = in_turn([30.0, 20.0])
    assert [priority_of(UPDATE, (), 1) for _ in range(3)] == [30.0, 20.0, 1]  # a check's task keeps its own


def test_cholesky_derived_priorities_put_the_panel_first(compiled):
    driver = compiled("programs/cholesky.tile")
    from tiledsl.runtime.layout import make_distribution, make_matrices, make_params
    from tiledsl.runtime.recording import survey

    params = make_params(driver, Options(n=500, tiles={"nb": 100}))
    matrices = make_matrices(driver, params, make_distribution(driver.PROGRAM, params, (1, 1), 0), 0)
    sequence = TaskSequence()
    found = survey(driver, matrices, params, 0, sequence)
    assert found.count == len(sequence) == 5 + 10 + 10 + 10
    levels = bottom_levels(sequence)
    kernels = [sequence.calls[code].kernel for code in sequence.code]
    # the critical path of a 5×5 Cholesky: potrf, trsm, syrk, potrf, ... 3·5 − 2 = 13 tasks
    assert levels[0] == max(levels) == 13 * 100 ** 3 and kernels[0] == "potrf"
    trsm = [level for level, kernel in zip(levels, kernels) if kernel == "trsm"]
    assert trsm[:4] == sorted(trsm[:4], reverse=True)  # the first column's solves, nearest the diagonal first


@pytest.mark.parametrize("name, grid", [("cholesky", (5, 4)), ("qr", (4, 5)), ("lu", (6, 3))])
def test_levels_over_a_ranks_share_are_at_most_the_exact_ones_and_follow_its_tasks(compiled, name, grid):
    """Past EXACT_LEVELS_RANKS ranks a rank's levels are over the tasks its share walk meets: one per
    task it submits (the engine hands them out in turn) and, for each task it runs, never above the
    task's level in the whole program's graph (a chain within the share is a chain of the whole)."""
    from tiledsl.runtime.layout import make_distribution, make_matrices, make_params
    from tiledsl.runtime.recording import survey

    driver = compiled(f"programs/{name}.tile")
    params = make_params(driver, Options(n=1000, tiles={"nb": 64}, sets={"ib": 32} if name == "qr" else {}))
    distribution = make_distribution(driver.PROGRAM, params, grid, 0)
    assert grid[0] * grid[1] > EXACT_LEVELS_RANKS
    for rank in (0, grid[0] * grid[1] - 1):
        whole = TaskSequence()  # every task, those the rank runs marked
        survey(driver, make_matrices(driver, params, distribution, rank), params, rank, whole)
        sequence = TaskSequence()
        share = survey(driver, make_matrices(driver, params, distribution, rank), params, rank, sequence, guided=True)
        assert len(bottom_levels(sequence)) == share.count < len(whole)
        local, exact = bottom_levels(sequence, sequence.runs), bottom_levels(whole, whole.runs)
        assert len(local) == len(exact) == share.runs > 0
        assert all(a <= b for a, b in zip(local, exact))
        assert any(a < b for a, b in zip(local, exact))  # (other ranks' chains left out)


def run(*args):
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", *map(str, args), "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(150)
def test_every_mode_gives_the_same_bits(tmp_path):
    results = []
    for mode in ("program", "auto", "none"):
        trace = tmp_path / f"{mode}.json"
        summary = run("programs/qr.tile", "--n", 400, "--nb", 100, "--set", "ib=50", "--check", "--priorities", mode,
                      "--output", f"A={tmp_path / mode}.npy", "--trace", trace)
        assert summary["passed"]
        results.append(np.load(tmp_path / f"{mode}.npy"))
        events = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("cat") == "task"]
        priorities = {e["args"]["priority"] for e in events}
        first = next(e["args"]["priority"] for e in events if e["args"]["tiles"][0] == "A[0, 0]")
        if mode == "none":
            assert priorities == {0}
        elif mode == "auto":
            assert first == max(priorities) and len(priorities) > 4  # geqrt(A[0, 0]) heads the longest chain
        else:
            assert max(priorities) == 3 * 4  # the program's own: 3 * (A.nt - k)
    assert all(np.array_equal(results[0], other) for other in results[1:])


@pytest.mark.timeout(150)
def test_a_program_without_priorities_gets_derived_ones_on_several_ranks(tmp_path):
    program = tmp_path / "plain.tile"
    source = (ROOT / "programs/cholesky.tile").read_text()
    program.write_text("\n".join(line.split(" priority ")[0] for line in source.splitlines()))
    trace = tmp_path / "trace.json"
    summary = run(program, "--n", 500, "--nb", 100, "--check", "--trace", trace, "--np", 2)
    assert summary["passed"]
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("cat") == "task"]
    assert {e["pid"] for e in events} == {0, 1}
    first = [e["args"]["priority"] for e in events if e["name"] == "potrf" and e["args"]["tiles"] == ["A[0, 0]"]]
    assert first == [13 * 100 ** 3]
