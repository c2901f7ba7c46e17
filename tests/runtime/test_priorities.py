"""Priorities derived from the task graph (bottom levels), and --priorities."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tiledsl.runtime import Options, execute
from tiledsl.runtime.priorities import PriorityTable, bottom_levels, work
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


def test_a_chain_counts_down_to_its_end():
    x = Tile("x")
    levels = bottom_levels([(UPDATE, (x,))] * 4)
    assert levels == [4 * work((x,)), 3 * work((x,)), 2 * work((x,)), work((x,))]


def test_readers_wait_for_their_writer_and_the_next_writer_for_them():
    x, y, z = Tile("x"), Tile("y"), Tile("z")
    unit = work((x,))
    tasks = [(UPDATE, (x,)),  # 0: read by 1 and 2, so before both
             (USE, (x, y)),  # 1: x read, y written; then y is updated twice more (3, 4)
             (USE, (x, z)),  # 2: a short branch
             (UPDATE, (y,)), (UPDATE, (y,)),
             (UPDATE, (x,))]  # 5: writes x after readers 1 and 2 (write after read)
    levels = bottom_levels(tasks)
    assert levels[5] == unit and levels[4] == unit and levels[3] == 2 * unit
    assert levels[2] == 2 * unit  # itself, then 5 (which must wait for its read of x)
    assert levels[1] == 3 * unit  # itself, 3, 4
    assert levels[0] == 4 * unit  # the longest way down: 0, 1, 3, 4


def test_larger_tiles_weigh_more():
    big, small = Tile("big", (400, 400)), Tile("small", (100, 100))
    assert work((big,)) == 64 * work((small,))  # (n²)^1.5 = n³
    assert work((small, big)) == work((big,))


def test_the_table_hands_out_repeated_keys_in_program_order():
    x = Tile("x")
    tasks = [(UPDATE, (x,))] * 3
    table = PriorityTable(tasks, [30.0, 20.0, 10.0])
    assert [table.take(UPDATE, (x,), None) for _ in range(3)] == [30.0, 20.0, 10.0]
    assert table.take(USE, (x, x), 7) == 7  # not a program task (a check's): its own priority


def test_cholesky_derived_priorities_put_the_panel_first(compiled):
    driver = compiled("programs/cholesky.tile")
    from tiledsl.runtime.launch import make_distribution, make_matrices, make_params
    from tiledsl.runtime.recording import record

    params = make_params(driver, Options(n=500, tiles={"nb": 100}))
    matrices = make_matrices(driver, params, make_distribution(driver.PROGRAM, params, (1, 1), 0), 0)
    tasks = [(call, tiles) for call, tiles, _ in record(driver, matrices, params).submitted]
    levels = bottom_levels(tasks)
    by_name = {(call.kernel, tuple((t.i, t.j) for t in tiles)): level for (call, tiles), level in zip(tasks, levels)}
    # the critical path of a 5×5 Cholesky: potrf, trsm, syrk, potrf, ... 3·5 − 2 = 13 tasks
    assert levels[0] == max(levels) == 13 * 100 ** 3
    assert by_name["trsm", ((0, 0), (1, 0))] > by_name["trsm", ((0, 0), (4, 0))]
    assert by_name["gemm", ((2, 0), (1, 0), (2, 1))] > by_name["gemm", ((4, 0), (3, 0), (4, 3))]


def run(*args):
    out = subprocess.run([sys.executable, "-m", "tiledsl.cli", "run", *map(str, args), "--json"], cwd=ROOT,
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
