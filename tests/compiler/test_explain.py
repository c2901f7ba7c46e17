"""``tiledsl explain``: the task-assignment protocol's invariants on every shipped program.

For each program, grid and GPU count: every task has one owner instance over all ranks,
every (task, input) one input instance, but a remote input whose version is already at the
task's rank (it sends nothing: no instance), remote inputs and remote minor outputs are
exactly the messages the plan predicts, sinks pair with sources, and the driver's own
skipping (a rank submits a task iff it holds one of its tiles) is exact. The shipped programs use
the prelude's kernels, which run where their main output lives; the documentation's
LDLᵀ example has user kernels without GPU bodies, which run on the owner's host (their
main output, when on a GPU, moves as a minor output homed there does).
"""
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tiledsl.compiler import compile_path
from tiledsl.driverload import import_driver
from tiledsl.commands.explain import TABLE_LIMIT, WALK_LIMIT, as_json, call_text, plan, render
from tiledsl.runtime.matrix import part_of
from tiledsl.runtime.options import Options
from tiledsl.runtime.protocol import Instance, delivery
from tiledsl.runtime.world import UsageError

from submitted import submitted_tasks

ROOT = Path(__file__).resolve().parents[2]
PATHS = {p.stem: p for p in (ROOT / "programs").glob("*.tile")} | {"ldlt": ROOT / "docs" / "examples" / "ldlt.tile"}
NAMES = sorted(PATHS)
GRIDS = [(1, 1), (1, 2), (2, 1), (2, 2), (3, 2)]
GPUS = [0, 1, 2]
INPUTS = {Instance.NATIVE_INPUT, Instance.INTRA_NODE_ALIEN_INPUT, Instance.INTER_NODE_ALIEN_INPUT}
SOURCES = {Instance.INTRA_NODE_SOURCE_MINOR_OUTPUT, Instance.INTER_NODE_SOURCE_MINOR_OUTPUT}


@pytest.fixture(scope="module")
def drivers(tmp_path_factory):
    folder = tmp_path_factory.mktemp("explain_drivers")
    loaded = {}
    for name in NAMES:
        result, text = compile_path(PATHS[name])
        assert text is not None, result.report()
        path = folder / f"{name}.py"
        path.write_text(text)
        loaded[name] = import_driver(path, f"explain_driver_{name}")
    return loaded


def options_for(driver) -> Options:
    if driver.PROGRAM.tiling.kind == "hybrid":
        return Options(n=300, tiles={"B": 128, "b": 32, "s": 3})
    return Options(n=300, tiles={"nb": 64})  # 300 = 4 * 64 + 44: a ragged last tile


def key(tile):
    return (tile.matrix.name, tile.i, tile.j)


@pytest.mark.parametrize("gpus", GPUS)
@pytest.mark.parametrize("grid", GRIDS, ids=lambda g: f"{g[0]}x{g[1]}")
@pytest.mark.parametrize("name", NAMES)
def test_protocol_invariants(drivers, name, grid, gpus):
    driver = drivers[name]
    options = options_for(driver)
    explained = plan(driver, options, grid, gpus)
    nranks = grid[0] * grid[1]
    assert explained.tasks, "no tasks"
    versions = Counter()
    moves = set()  # (tile, version, sender, receiver, what moved)
    delivered = {}  # (tile, version) -> the parts that went to each rank, by protocol.delivery's rule
    for task in explained.tasks:
        call, places = task.call, task.places
        main = task.owner  # where it runs: the main output's place, or a host for a kernel without GPU body
        assert main == places[call.main] or (main == (places[call.main][0], 0) and call.kernel.startswith("ldlt"))
        found = [(rank, kind, arg) for rank, items in task.per_rank.items() for kind, arg in items]
        assert all(0 <= rank < nranks for rank, _, _ in found)
        assert set(task.per_rank) == {rank for rank, _, _ in found}, "a rank listed with no instance"
        # one owner instance, on the main output's rank
        owners = [(rank, arg) for rank, kind, arg in found if kind == Instance.OWNER]
        assert owners == [(main[0], call.main)], task
        # one input instance per argument read, on the rank holding it, of the right type
        for arg, mode in enumerate(call.modes):
            inputs = [(rank, kind) for rank, kind, a in found if a == arg and kind in INPUTS]
            if mode == "out":
                assert inputs == [], task
                continue
            rank = places[arg][0]
            expected = (Instance.NATIVE_INPUT if places[arg] == main else
                        Instance.INTRA_NODE_ALIEN_INPUT if places[arg][0] == main[0] else
                        Instance.INTER_NODE_ALIEN_INPUT)
            if expected == Instance.INTER_NODE_ALIEN_INPUT:  # a send from the tile's rank to the owner
                version = (key(task.tiles[arg]), versions[key(task.tiles[arg])])
                part = part_of(task.tiles[arg], task.views[arg]) if task.views and mode == "in" else None
                moved, what = delivery(delivered.setdefault(version, {}), main[0], part, task.tiles[arg].shape)
                if moved:
                    moves.add((*version, rank, main[0], what))
                else:  # the version is there already: nothing to send, no instance
                    assert inputs == [], (task, arg)
                    continue
            assert inputs == [(rank, expected)], (task, arg)
        # minor outputs: native, or a sink paired with exactly one source
        for arg in call.writes:
            kinds = Counter((rank, kind) for rank, kind, a in found if a == arg and kind not in INPUTS
                            and kind != Instance.OWNER)
            place = places[arg]
            if arg == call.main and place == main:
                assert not kinds, task
                continue
            if place == main:
                assert kinds == Counter({(place[0], Instance.NATIVE_MINOR_OUTPUT): 1}), task
                continue
            sinks = [rank for (rank, kind), c in kinds.items() for _ in range(c) if kind == Instance.SINK_MINOR_OUTPUT]
            sources = [(rank, kind) for (rank, kind), c in kinds.items() for _ in range(c) if kind in SOURCES]
            assert sinks == [place[0]], task
            source = (Instance.INTRA_NODE_SOURCE_MINOR_OUTPUT if place[0] == main[0]
                      else Instance.INTER_NODE_SOURCE_MINOR_OUTPUT)
            assert sources == [(main[0], source)], task
            assert sum(kinds.values()) == 2
        for arg in call.writes:
            versions[key(task.tiles[arg])] += 1
        for rank, kind, arg in found:
            if kind == Instance.INTER_NODE_SOURCE_MINOR_OUTPUT:  # the owner sends the new version
                tile = key(task.tiles[arg])
                moves.add((tile, versions[tile], main[0], places[arg][0], None))
                if main[1] == 0:  # computed on its host, which keeps it: never sent back there
                    delivered.setdefault((tile, versions[tile]), {})[main[0]] = {None: 0}
        if gpus == 0:
            assert not any(kind in (Instance.INTRA_NODE_ALIEN_INPUT, Instance.INTRA_NODE_SOURCE_MINOR_OUTPUT)
                           for _, kind, _ in found), "an intra-node copy without GPUs"
        if nranks == 1:
            assert not any(kind in (Instance.INTER_NODE_ALIEN_INPUT, Instance.INTER_NODE_SOURCE_MINOR_OUTPUT,
                                    Instance.SINK_MINOR_OUTPUT) and task.places[arg][0] != main[0]
                           for _, kind, arg in found)
    # remote inputs and remote minor outputs are exactly the messages (a version sent once per rank)
    messages = Counter((sender, receiver) for _, _, sender, receiver, _ in moves)
    assert messages == Counter(explained.messages)
    totals = explained.totals()
    count4 = sum(t[Instance.INTER_NODE_ALIEN_INPUT] for t in totals.values())
    count8 = sum(t[Instance.INTER_NODE_SOURCE_MINOR_OUTPUT] for t in totals.values())
    assert sum(explained.messages.values()) == count4 + count8
    if nranks == 1:
        assert explained.messages == {}
    # the sinks and sources balance over the whole run
    count6 = sum(t[Instance.SINK_MINOR_OUTPUT] for t in totals.values())
    count78 = sum(t[k] for t in totals.values() for k in SOURCES)
    assert count6 == count78
    assert sum(t[Instance.OWNER] for t in totals.values()) == len(explained.tasks)


@pytest.mark.parametrize("gpus", [0, 2])
@pytest.mark.parametrize("grid", GRIDS, ids=lambda g: f"{g[0]}x{g[1]}")
@pytest.mark.parametrize("name", NAMES)
def test_driver_skipping_is_exact(drivers, name, grid, gpus):
    driver = drivers[name]
    options = options_for(driver)
    explained = plan(driver, options, grid, gpus)
    for rank in range(grid[0] * grid[1]):
        submitted = submitted_tasks(driver, options, grid, gpus, rank)
        expected = [(t.call, tuple(key(x) for x in t.tiles)) for t in explained.tasks
                    if rank in {place[0] for place in t.places}]
        assert submitted == expected, f"rank {rank}"
        assert all(rank in {place[0] for place in t.places} for t in explained.tasks if rank in t.per_rank)


def test_gpus_create_intra_node_copies_on_hybrid_tiles(drivers):
    explained = plan(drivers["hetero_cholesky"], options_for(drivers["hetero_cholesky"]), (1, 1), 1)
    assert sum(t[Instance.INTRA_NODE_ALIEN_INPUT] for t in explained.totals().values()) > 0
    assert sum(explained.copies.values()) > 0


def test_tasks_of_kernels_without_a_gpu_body_run_on_their_owners_host(drivers):
    """LDLᵀ's user kernels have no ``NAME_gpu``: with GPUs every task runs on a host, and those whose
    main output is on a GPU are starred in the table, counted by kernel and named in the JSON."""
    explained = plan(drivers["ldlt"], options_for(drivers["ldlt"]), (1, 2), 2)
    assert all(task.owner == (task.places[task.call.main][0], 0) for task in explained.tasks)
    moved = [task for task in explained.tasks if task.places[task.call.main][1]]
    assert moved and explained.on_host == Counter(task.call.kernel for task in moved)
    assert explained.runs_on == {0: Counter({0: 19}), 1: Counter({0: 16})}
    text = render(explained, "ldlt.tile")
    starred = [line for line in text.splitlines() if ", host)* " in line]
    assert len(starred) == len(moved)
    assert "\n* on its owner's host: the kernel has no GPU body (NAME_gpu)" in text
    assert text.endswith("tasks run on rank 0: host 19, gpu1 0, gpu2 0\ntasks run on rank 1: host 16, gpu1 0, gpu2 0\n"
                         "on the host for want of a GPU body (NAME_gpu), their main output on a GPU: "
                         + ", ".join(f"{kernel} {count} tasks" for kernel, count in explained.on_host.items()))
    data = as_json(explained)
    # every device, as run's tasks_by_device: the GPUs that ran nothing too
    assert data["runs_on"] == {"0": {"host": 19, "gpu1": 0, "gpu2": 0}, "1": {"host": 16, "gpu1": 0, "gpu2": 0}}
    assert data["on_host_without_gpu_body"] == explained.on_host
    first = data["tasks"][moved[0].index]
    assert first["owner"] == [first["main_output"][0], 0] and first["main_output"][1] > 0


def test_gpus_left_without_a_column_are_said_as_a_run_says_them(drivers):
    """300 in tiles of 128 is 3 columns on one rank: of 4 GPUs at 1:1, GPU 4 gets none whatever the
    ratio and 0:1 gives GPU 3 one; explain says it in a run's words (reporting.idle_gpus_warning)."""
    driver = drivers["cholesky"]
    text = render(plan(driver, Options(n=300, tiles={"nb": 128}), (1, 1), 4), "cholesky.tile")
    assert text.endswith("tasks run on rank 0: host 3, gpu1 4, gpu2 3, gpu3 0, gpu4 0\n"
                         "GPU 3, 4 held no tile and ran no task: a rank holds at most 3 tile column(s), fewer than "
                         "its 4 GPUs: GPU 4 gets none whatever the host:GPU ratio (smaller tiles give more); "
                         "--gpu-ratio 0:1 gives GPU 3 a column"), text


def test_explain_loads_the_kernel_module_only_for_gpus_and_refuses_one_that_fails(tmp_path):
    examples = ROOT / "docs" / "examples"
    for name in ("ldlt.tile", "ldlt_kernels.py"):
        (tmp_path / name).write_text((examples / name).read_text())
    _, text = compile_path(tmp_path / "ldlt.tile")
    (tmp_path / "ldlt.py").write_text(text)
    driver = import_driver(tmp_path / "ldlt.py", "explain_driver_ldlt_broken")
    (tmp_path / "ldlt_kernels.py").write_text("import no_such_module_here\n")
    assert plan(driver, options_for(driver), (1, 1), 0).task_count > 0  # all on the host: nothing to load
    with pytest.raises(UsageError, match=r"^kernel module .*ldlt_kernels.py:1: ModuleNotFoundError: "
                                         r"No module named 'no_such_module_here'$"):
        plan(driver, options_for(driver), (1, 1), 1)


def test_two_ranks_exchange_messages(drivers):
    explained = plan(drivers["cholesky"], options_for(drivers["cholesky"]), (2, 2), 0)
    assert sum(explained.messages.values()) > 0
    assert all(s != r for s, r in explained.messages)


@pytest.mark.parametrize("gpus", [0, 2])
@pytest.mark.parametrize("grid", [(1, 2), (2, 2)], ids=lambda g: f"{g[0]}x{g[1]}")
@pytest.mark.parametrize("name", NAMES)
def test_totals_streamed_without_the_tasks_equal_the_totals_of_the_tasks(drivers, name, grid, gpus):
    """Issue 16.2: past the table limit only counters are kept; they must say what the tasks say."""
    driver = drivers[name]
    kept = plan(driver, options_for(driver), grid, gpus)
    streamed = plan(driver, options_for(driver), grid, gpus, keep_tasks=False)
    assert streamed.tasks is None and streamed.task_count == len(kept.tasks) > 0
    from_tasks = {rank: Counter() for rank in range(grid[0] * grid[1])}
    for task in kept.tasks:
        for rank, found in task.per_rank.items():
            from_tasks[rank].update(kind for kind, _ in found)
    assert streamed.totals() == kept.totals() == from_tasks
    assert streamed.messages == kept.messages and streamed.copies == kept.copies
    assert render(streamed, f"{name}.tile").endswith(render(kept, f"{name}.tile").split("instance types:")[1])


# ---------------------------------------------------------------- command line
def run_cli(*args, cache):
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    return subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.timeout(120)
def test_cli_explain_table_and_json(tmp_path):
    args = ("explain", "programs/cholesky.tile", "--grid", "2x2", "--n", "512", "--nb", "128")
    out = run_cli(*args, cache=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("cholesky (cholesky.tile) on a 2x2 grid, 0 GPU(s) per rank: n=512 nb=128, 20 tasks")
    header = next(i for i, line in enumerate(lines) if line.startswith("rank "))
    assert lines[header].split() == ["rank", "1", "2", "3", "4", "5", "6", "7", "8", "total"]
    table = {}
    for line in lines[header + 1:header + 6]:
        cells = line.split()
        table[cells[0]] = [int(c) for c in cells[1:]]
    assert sorted(table) == ["0", "1", "2", "3", "all"]
    assert table["all"] == [sum(table[r][i] for r in "0123") for i in range(9)]
    assert table["all"][0] == 20  # one owner per task
    sent = int(re.search(r"messages between ranks \(tile versions sent\): (\d+)", out.stdout)[1])
    assert sent > 0

    out = run_cli(*args, "--json", cache=tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["program"] == "cholesky" and data["grid"] == [2, 2] and len(data["tasks"]) == 20
    for rank in "0123":
        assert [data["totals"][rank][str(k)] for k in range(1, 9)] == table[rank][:8]
    assert sum(c for _, _, c in data["messages"]) == sent


@pytest.mark.timeout(120)
def test_cli_explain_says_the_walk_of_a_run_with_the_priorities_given(tmp_path):
    """--priorities as run's: derived ones (a program stating none) walk every task, none walks the share."""
    source = (ROOT / "programs/cholesky.tile").read_text()
    (tmp_path / "plain.tile").write_text(re.sub(r" priority [^\n]*", "", source))
    args = ("explain", str(tmp_path / "plain.tile"), "--grid", "2x2", "--n", "512", "--nb", "128", "--totals")
    lines = {given: run_cli(*args, *given, cache=tmp_path).stdout.splitlines()[-1]
             for given in ((), ("--priorities", "none"), ("--priorities", "auto"))}
    assert lines[()] == ("walk: every rank walks the whole loop nest: the program's priorities are derived from "
                         "every task on up to 16 ranks: give its calls priority clauses, or --priorities none")
    assert lines[("--priorities", "none")] == "walk: each rank walks its share of the loop nest"
    assert lines[("--priorities", "auto")] == ("walk: every rank walks the whole loop nest: --priorities auto derives "
                                               "the priorities from every task on up to 16 ranks: give --priorities "
                                               "none")  # (tester z79e: clauses would not help)
    out = run_cli(*args, "--priorities", "auto", "--json", cache=tmp_path)
    said = json.loads(out.stdout)
    assert said["walk"] == {"rank_walks": "whole", "whole_because": lines[("--priorities", "auto")].split(": ", 2)[2]}
    assert said["priorities"] == "derived"
    said = json.loads(run_cli(*args, "--priorities", "none", "--json", cache=tmp_path).stdout)
    assert said["walk"] == {"rank_walks": "share", "whole_because": None} and said["priorities"] == "none"
    past = ("explain", str(tmp_path / "plain.tile"), "--grid", "5x4", "--n", "1024", "--nb", "64", "--totals")
    out = run_cli(*past, cache=tmp_path)  # past 16 ranks, derived priorities are each rank's share's
    assert out.stdout.splitlines()[-1] == ("walk: each rank walks its share of the loop nest; derived priorities "
                                           "over each rank's share"), out.stderr  # as run --json and simulate say
    assert json.loads(run_cli(*past, "--json", cache=tmp_path).stdout)["priorities"] == "derived-share"
    cholesky = run_cli("explain", "cholesky", *past[2:], "--json", cache=tmp_path)
    assert json.loads(cholesky.stdout)["priorities"] == "program"


def test_a_panel_is_one_argument_of_its_tasks_call(tmp_path):
    """gemm(A[i, 0 : A.nt], B[0 : B.mt, j], C[i, j], ...) showed as gemm(A[0, 0], A[0, 1], A[0, 2], B[0, 0], ...):
    its panels' tiles one by one, read as 7 arguments of a 3-argument kernel."""
    result, text = compile_path(ROOT / "tests" / "runtime" / "programs" / "panel_gemm.tile")
    assert text is not None, result.report()
    (tmp_path / "panel_gemm.py").write_text(text)
    driver = import_driver(tmp_path / "panel_gemm.py", "explain_driver_panel_gemm")
    table = render(plan(driver, Options(n=192, tiles={"nb": 64}), (1, 2), 0), "panel_gemm.tile")
    assert 'gemm(A[0, 0:3], B[0:3, 0], C[0, 0], transa = "N", transb = "N", alpha = 1.0, beta = 1.0)' in table
    assert "gemm(A[2, 0:3], B[0:3, 2], C[2, 2], " in table


def test_the_task_table_is_aligned_whatever_the_cell_widths(tmp_path):
    """Calls longer than 40 characters and instance cells longer than 8 widen their columns."""
    result, text = compile_path(ROOT / "docs" / "examples" / "ldlt.tile")
    assert text is not None, result.report()
    (tmp_path / "ldlt.py").write_text(text)
    driver = import_driver(tmp_path / "ldlt.py", "explain_driver_ldlt_widths")
    table = render(plan(driver, Options(n=300, tiles={"nb": 100}), (2, 2), 0), "ldlt.tile").splitlines()
    header = next(i for i, line in enumerate(table) if line.split()[:3] == ["task", "line", "call"])
    rows = table[header:table.index("", header)]
    assert len(rows) == 11
    starts = [table[header].index(name) for name in ("call", "owner", "r0", "r1", "r2", "r3")]
    assert any(len(line[starts[0]:starts[1]].strip()) > 40 for line in rows[1:])  # ldlt_update(A[0, 0], ...)
    assert any(len(cell) > 8 for line in rows[1:] for cell in line.split())  # 1,2,2,2,2
    for line in rows[1:]:
        for start in starts:  # every cell begins where its heading does, after a gap
            assert line[start - 2:start] == "  " and line[start] != " ", (line, start)


@pytest.mark.timeout(300)
def test_cli_explain_refuses_a_program_too_large_to_walk_with_the_numbers(tmp_path):
    """Issue 16.2: this command once ran for 10 minutes and reached 21 GB; it now refuses at once."""
    out = run_cli("explain", "programs/cholesky.tile", "--n", "100000", "--grid", "2x2", cache=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr.splitlines() == [
        f"tiledsl: error: cholesky at n=100000 nb=256 has more than {WALK_LIMIT} tasks (its largest matrix "
        f"has {391 * 391} tiles): explain walks at most {WALK_LIMIT} (past {TABLE_LIMIT} it prints totals only); "
        "use a smaller --n or larger tiles"]


@pytest.mark.timeout(300)
def test_cli_explain_past_the_table_limit_prints_the_totals_only(tmp_path):
    """84 tiles a side: 84·85·86/6 = 102340 Cholesky tasks, just past the table limit."""
    tasks = 84 * 85 * 86 // 6
    assert tasks > TABLE_LIMIT
    out = run_cli("explain", "programs/cholesky.tile", "--n", str(84 * 32), "--nb", "32", "--grid", "1x2",
                  "--json", cache=tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["tasks"] is None and data["task_count"] == tasks
    assert sum(data["totals"][rank]["1"] for rank in "01") == tasks  # one owner per task
    assert data["messages"] and all(count > 0 for _, _, count in data["messages"])


@pytest.mark.timeout(120)
def test_cli_explain_totals_leaves_the_table_out(tmp_path):
    args = ("explain", "programs/cholesky.tile", "--grid", "2x2", "--n", "512", "--nb", "128")
    full, totals = run_cli(*args, cache=tmp_path), run_cli(*args, "--totals", cache=tmp_path)
    assert full.returncode == totals.returncode == 0, full.stderr + totals.stderr
    table_head = re.compile(r"^\s*task\s+line\s+call\s+owner", re.MULTILINE)
    assert table_head.search(full.stdout) and not table_head.search(totals.stdout)
    assert "per-task table left out" in totals.stdout
    assert totals.stdout.splitlines()[0] == full.stdout.splitlines()[0]
    assert totals.stdout.split("instance types:")[1] == full.stdout.split("instance types:")[1]


@pytest.mark.timeout(120)
def test_cli_explain_takes_the_size_from_input_files_as_its_error_suggests(tmp_path):
    import numpy as np

    out = run_cli("explain", "gemm", cache=tmp_path)
    assert out.returncode == 2 and out.stderr.strip() == (
        "tiledsl: error: give --n (the matrix order) or --input NAME=FILE.npy for one of A, B, C")
    np.save(tmp_path / "a.npy", np.zeros((70, 40)))
    np.save(tmp_path / "b.npy", np.zeros((40, 90)))
    out = run_cli("explain", "gemm", "--input", f"A={tmp_path / 'a.npy'}", "--input", f"B={tmp_path / 'b.npy'}",
                  "--nb", "32", "--json", cache=tmp_path)
    assert out.returncode == 0, out.stderr
    explained = json.loads(out.stdout)
    assert (explained["n"], explained["params"]["m"], explained["params"]["k"]) == (90, 70, 40)
    out = run_cli("explain", "gemm", "--input", f"T={tmp_path / 'a.npy'}", cache=tmp_path)
    assert out.returncode == 2 and out.stderr.strip() == (
        "tiledsl: error: --input T=...: no matrix named T (the program has A, B, C)")
    # with --n, the params the files fit, and the files checked against it, as run does both
    out = run_cli("explain", "gemm", "--n", "100", "--input", f"A={tmp_path / 'a.npy'}", "--json", cache=tmp_path)
    explained = json.loads(out.stdout)
    assert out.returncode == 0 and (explained["n"], explained["params"]) == (100, {"m": 70, "k": 40})
    for program, name, said in (("cholesky", "a.npy", "has shape (70, 40) but the matrix needs shape (100, 100); the "
                                 "input files' shapes disagree with cholesky, which makes A square; A is 70×40"),
                                ("gemm", "none.npy", "does not exist")):
        out = run_cli("explain", program, "--n", "100", "--input", f"A={tmp_path / name}", cache=tmp_path)
        assert out.returncode == 2 and out.stderr.strip() == f"tiledsl: error: input file '{tmp_path / name}' {said}"


def test_the_json_counts_copies_for_every_rank_even_when_none_moves(drivers):
    """A script reads ``copies["0"]``: a rank with no copy is there with 0, as when some rank has them."""
    alone = plan(drivers["cholesky"], options_for(drivers["cholesky"]), (1, 1), 0)
    assert not alone.messages and as_json(alone)["copies"] == {"0": 0}
    assert as_json(plan(drivers["cholesky"], options_for(drivers["cholesky"]), (2, 1), 0))["copies"] == {"0": 0, "1": 0}


@pytest.mark.parametrize("command", ["explain", "graph"])
def test_a_loop_nest_failing_in_a_walk_names_its_line_and_no_rank(tmp_path, monkeypatch, capsys, command):
    """explain and graph walk the loop nest for every rank at once: its failure is said at the .tile line,
    with no rank (a run names the rank that failed)."""
    from tiledsl.commands.cli import main

    (tmp_path / "oob.tile").write_text("program oob {\n  param off = 0\n  tiling uniform(nb = 2)\n"
                                       "  matrix A[n, n] = random spd\n  for k in 0 .. A.nt {\n"
                                       "    potrf(A[k + off, k])\n  }\n}\n")
    monkeypatch.chdir(tmp_path)
    assert main([command, "oob.tile", "--n", "8", "--set", "off=1", *(["-o", "g.dot"] * (command == "graph"))]) == 1
    assert capsys.readouterr().err == ("tiledsl: error: oob.tile:6: tile A[4, 3] does not exist: A, 8×8, has 4×4 tiles "
                                       "(in `potrf(A[k + off, k])`, with off = 1, k = 3)\n")


def test_the_json_names_each_argument_as_the_call_does(drivers):
    """--json listed a panel's tiles one by one, and a sub-range as its whole tile: the arguments
    are now there as the table and the trace name them, the tiles beside them."""
    explained = plan(drivers["trtri"], Options(n=600, tiles={"nb": 200}), (1, 1), 0)
    first = as_json(explained)["tasks"][0]
    assert first["kernel"] == "trsm" and first["arguments"] == ["A[0, 0]", "A[1:3, 0]"]
    assert first["tiles"] == ["A[0, 0]", "A[1, 0]", "A[2, 0]"]
    for task, data in zip(explained.tasks, as_json(explained)["tasks"]):
        assert call_text(task, with_values=False) == f"{data['kernel']}({', '.join(data['arguments'])})"


def test_a_setting_that_does_nothing_is_warned_of_as_run_warns(capsys):
    """Tester y: explain took `--b 50 --s 1` without a word, where run says b does nothing with s = 1."""
    from tiledsl.commands.cli import main

    assert main(["explain", "hetero_cholesky", "--n", "1000", "--B", "200", "--b", "50", "--s", "1", "--totals"]) == 0
    assert capsys.readouterr().err == ("tiledsl: warning: --b 50 does nothing with s=1: each block column is one "
                                       "slice, B=200 wide\n")


def test_a_tuned_b_at_s_1_is_not_warned_of_as_if_given(drivers):
    """Tune times s = 1 with GPUs and keeps the b it had: every later run warned "--b 64 does nothing" (tester w57)."""
    from tiledsl.runtime.launch import unused_settings
    from tiledsl.runtime.layout import make_params

    driver = drivers["hetero_cholesky"]
    for sources, said in (({}, 1), ({"B": "tuned (t.json)", "b": "tuned (t.json)", "s": "tuned (t.json)"}, 0)):
        options = Options(n=1000, tiles={"B": 200, "b": 50, "s": 1}, sources=sources)
        assert len(unused_settings(driver.PROGRAM, options, make_params(driver, options), 1)) == said


def test_ranks_with_nothing_to_do_are_one_line(drivers):
    """Tester y: a 1000x1000 grid printed a line of zeros for each of its 999,996 idle ranks."""
    driver = drivers["cholesky"]
    text = render(plan(driver, Options(n=256, tiles={"nb": 128}), (10, 10), 0), "cholesky.tile")
    rows = text.split("\nrank ", 1)[1].split("\nall ", 1)[0].splitlines()[1:]
    assert [row.split()[0] + (" " + row.split(":")[0].split()[-1] if ":" in row else "") for row in rows] == [
        "0", "1 9", "10", "11", "12 99"]
    assert "  12 to 99: nothing (88 ranks)" in rows


def test_a_panel_of_one_tile_is_named_as_a_range_and_values_as_the_language_writes_them(drivers):
    """getrf(A[k : A.mt, k], ...) at its last k was printed getrf(A[1, 1], P[1, 1]): pasted back, a plain tile, which
    a user kernel gets as an array, not a list; and values as Python's repr (uplo='L'), which the language refuses
    (tester b59)."""
    explained = plan(drivers["getrf"], Options(n=256, tiles={"nb": 128}), (1, 1), 0)
    texts = [call_text(task) for task in explained.tasks]
    assert texts[0] == "getrf(A[0:2, 0], P[0, 0])" and "getrf(A[1:2, 1], P[1, 1])" in texts
    assert 'laswp(P[0, 0], A[0:2, 1], first = 0, direction = "F")' in texts
