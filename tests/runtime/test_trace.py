"""Traces and bounds: the trace file's schema, every task once, bounds with known answers."""
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tiledsl.runtime import Options, execute
from tiledsl.runtime.layout import make_distribution, make_matrices, make_params
from tiledsl.runtime.program import Call
from tiledsl.runtime.trace import (CriticalPath, area_bound, chrome_trace, communication, compute_lanes, critical_path,
                                   least_time, task_args, utilisation)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_trace_of_a_two_rank_run(tmp_path):
    trace_path = tmp_path / "trace.json"
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "programs/cholesky.tile", "--np", "2",
                          "--n", "700", "--nb", "100", "--trace", str(trace_path), "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    events = json.loads(trace_path.read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    for event in spans:
        assert {"pid", "tid", "name", "ts", "dur", "args"} <= set(event) and event["dur"] >= 0
    tasks = [e for e in spans if e["cat"] == "task"]
    idle = [e for e in spans if e["cat"] == "idle"]
    assert idle and all(e["name"] == "idle" for e in idle)
    for lane in {(e["pid"], e["tid"]) for e in idle}:  # a lane is idle or busy, never both
        busy = sorted((e["ts"], e["ts"] + e["dur"]) for e in tasks + idle if (e["pid"], e["tid"]) == lane)
        assert all(end <= later + 1e-3 for (_, end), (later, _) in zip(busy, busy[1:]))
    keys = [(e["args"]["line"], tuple(e["args"]["tiles"])) for e in tasks]
    assert len(tasks) == summary["tasks"] == 7 + 21 + 21 + 35  # potrf, trsm, syrk, gemm on 7×7 tiles
    assert len(set(keys)) == len(keys)  # every task exactly once
    lanes = {(e["pid"], e["args"]["name"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {(0, "cpu-0"), (1, "cpu-0"), (0, "mpi"), (1, "mpi")} <= lanes
    # a worker's busy seconds are its lane's tasks; posting sends is the runtime's own work, apart
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    for rank in summary["ranks"]:
        for worker, seconds in enumerate(rank["busy_seconds"]):
            traced = sum(e["dur"] for e in tasks if (e["pid"], names[e["pid"], e["tid"]]) == (rank["rank"], f"cpu-{worker}"))
            assert traced / 1e6 == pytest.approx(seconds, abs=1e-5)
        assert sum(rank["other_task_seconds"]) > 0
    # time zero is the first rank's start: every event after it, the run's seconds after them all
    # (the origin moved before the barrier put tasks 50 ms later than the summary's time)
    assert min(e["ts"] for e in spans) >= -1 and max(e["ts"] + e["dur"] for e in tasks) <= summary["seconds"] * 1e6 + 2e3
    assert 0 < summary["efficiency"] <= 1
    assert summary["critical_path"] > 0 and summary["area_bound"] > 0
    assert 0 <= summary["communication_hidden"] <= 1 and summary["communication"]["1"] > 0
    sends = {(e["pid"], e["args"]["to"], e["args"]["tag"], e["args"]["message"]) for e in spans if e["name"] == "send"}
    receives = {(e["args"]["from"], e["pid"], e["args"]["tag"], e["args"]["message"])
                for e in spans if e["name"] == "receive"}
    assert sends == receives and len(sends) == sum(r["messages_sent"] for r in summary["ranks"])
    # one clock for all ranks: no message arrives before it was sent (the ranks leave the barrier
    # up to a polling interval apart, which each one's own time zero put 2 of 12 messages, and
    # up to 30 ms, before their sends)
    sent = {(e["pid"], e["args"]["to"], e["args"]["tag"], e["args"]["message"]): e["ts"]
            for e in spans if e["name"] == "send"}
    early = [(key, sent[key] - (e["ts"] + e["dur"])) for e in spans if e["name"] == "receive"
             for key in [(e["args"]["from"], e["pid"], e["args"]["tag"], e["args"]["message"])]
             if e["ts"] + e["dur"] < sent[key]]
    assert not early, early


@pytest.mark.timeout(120)
def test_the_traced_copies_are_the_runs_device_copies_each_naming_its_tile_and_devices(tmp_path):
    """QR on 4 ranks with GPUs: the zeroed buffers made on a GPU for a T computed away from home were
    traced as copies, which the run did not count (rank 0: 20 copy events, device_copies 19), and a
    copy event said only its bytes."""
    trace_path = tmp_path / "trace.json"
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "programs/qr.tile", "--np", "4",
                          "--n", "400", "--nb", "100", "--gpus", "2", "--gpu-backend", "emulated", "--no-tune",
                          "--trace", str(trace_path), "--json"], cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    copies = [e for e in json.loads(trace_path.read_text())["traceEvents"] if e.get("name") == "copy"]
    made = Counter(e["pid"] for e in copies)
    assert [made[r["rank"]] for r in summary["ranks"]] == [r["device_copies"] for r in summary["ranks"]]
    places = {"host", "gpu-1", "gpu-2"}
    for args in (e["args"] for e in copies):
        assert args["tile"][0] in "AT" and {args["from"], args["to"]} <= places and args["from"] != args["to"]
        assert args["bytes"] > 0
    assert {"host"} < {args["from"] for args in (e["args"] for e in copies)}  # both ways


def test_communication_hidden_on_a_synthetic_trace():
    """Rank 0 sends for 4 s while its one lane computes 8 s of 10; rank 1 receives (posted at 0, the
    data leaving at 2) and is idle 6 s of 10: 4 s of its 4 s of traffic could have left it idle."""
    message = {"tag": 7, "message": 1, "bytes": 8}
    ranks = [[("cpu-0", 0.0, 8.0, "gemm", {}), ("mpi", 2.0, 6.0, "send", {"to": 1, **message})],
             [("cpu-0", 6.0, 10.0, "gemm", {}), ("mpi", 0.0, 6.0, "receive", {"from": 0, **message})]]
    result = communication(ranks, 10.0)
    assert result["communication"] == {"0": 4.0, "1": 4.0}  # the receive counts from the send: 2 to 6
    # rank 0: idle 2 s, so at most 2 of its 4 s of traffic were exposed; rank 1: all 4 s
    assert result["communication_hidden"] == pytest.approx(1 - (2 + 4) / 8)


def test_a_send_the_clocks_put_after_its_receive_counts_nothing_rather_than_less():
    """The ranks' clocks agree only so far: a send seen starting 5 ms after its receive ended made
    the receiving rank's communication negative (-0.00498 s in a two-rank run)."""
    message = {"tag": 7, "message": 1, "bytes": 8}
    ranks = [[("cpu-0", 0.0, 1.0, "potrf", {}), ("mpi", 1.005, 1.006, "send", {"to": 1, **message})],
             [("cpu-0", 1.0, 2.0, "trsm", {}), ("mpi", 0.99, 1.0, "receive", {"from": 0, **message})]]
    assert communication(ranks, 2.0)["communication"] == {"0": pytest.approx(0.001), "1": 0.0}


def test_communication_of_overlapping_messages_counts_once():
    ranks = [[("cpu-0", 0.0, 10.0, "potrf", {}),
              ("mpi", 1.0, 3.0, "send", {"to": 1, "tag": 1, "message": 1}),
              ("mpi", 2.0, 5.0, "send", {"to": 1, "tag": 2, "message": 1})]]
    result = communication(ranks, 10.0)
    assert result["communication"] == {"0": 4.0} and result["communication_hidden"] == 1.0
    assert communication([[("cpu-0", 0.0, 1.0, "potrf", {})]], 1.0)["communication_hidden"] is None


def test_the_critical_path_follows_the_data_not_a_writers_wait_for_readers():
    """A long reader of X, then a writer of X: on two ranks the reader reads a copy and the writer
    need not wait, so the chain is the longest task, not their sum (a simulated run came in below
    its "bound", efficiency 1.33)."""
    path = CriticalPath()
    path.add(("in", "inout"), ("X", "Y"), 3.0)  # reads X
    path.add(("inout",), ("X",), 1.0)  # writes X: no data of the reader's
    assert path.longest == 3.0
    path.add(("in", "inout"), ("X", "Z"), 2.0)  # reads the new X: after its writer
    path.add(("out",), ("Z",), 0.5)  # out: reads nothing
    path.add(("in", "inout"), ("Z", "Y"), 1.0)  # after the out (Z) and the first task (Y)
    assert path.longest == 4.0 and path.writer_end["Z"] == 0.5


def test_a_worker_that_ran_nothing_counts_in_the_imbalance_and_has_a_lane():
    """Two ranks of one worker, the second with no task (a 4x1 grid of a 2x2-tile matrix): its
    busy time is 0, not left out (the imbalance read 1.0, 'perfect', for 3 s against 0)."""
    ranks = [[("cpu-0", 0.0, 3.0, "potrf", {}), ("cpu-0", 3.0, 4.0, "idle", {})], []]
    lanes = compute_lanes(1, 0)
    assert utilisation(ranks, 4.0, lanes) == {"busy": {"0/cpu-0": 0.75, "1/cpu-0": 0.0}, "imbalance": 2.0}
    names = {(e["pid"], e["args"]["name"]) for e in chrome_trace(ranks, {}, compute_lanes(1, 1))["traceEvents"]
             if e["name"] == "thread_name"}
    assert names == {(0, "cpu-0"), (0, "gpu-1"), (1, "cpu-0"), (1, "gpu-1")}


def test_transfers_in_flight_together_get_lanes_of_their_own_and_no_slice_passes_the_next():
    """Overlapping slices of one lane that do not nest break the trace format (Perfetto drops
    them): two receives posted together and a send; rounding ts and dur apart made a task end
    0.001 µs past the next one's start."""
    rank = [("mpi", 0.0, 3e-3, "receive", {}), ("mpi", 1e-3, 4e-3, "receive", {}), ("mpi", 3e-3, 5e-3, "send", {}),
            ("cpu-0", 0.0, 9.7361415e-3, "gemm", {}), ("cpu-0", 9.7361415e-3, 1e-2, "trsm", {})]
    events = chrome_trace([rank], {}, compute_lanes(1, 0))["traceEvents"]
    lane = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    slices = sorted((lane[e["tid"]], e["ts"], e["ts"] + e["dur"]) for e in events if e["ph"] == "X")
    assert [name for name, *_ in slices] == ["cpu-0", "cpu-0", "mpi", "mpi", "mpi 2"]
    for (name, _, end), (after, start, _) in zip(slices, slices[1:]):
        assert name != after or end <= start


def test_no_slice_starts_before_time_zero():
    """A rank's first wait, read through the two clocks, began 0.1 µs before the first rank's start (tester n64)."""
    rank = [("cpu-0", -1e-7, 2e-3, "idle", {}), ("cpu-0", 2e-3, 3e-3, "potrf", {}), ("cpu-0", -2e-7, -1e-7, "idle", {})]
    spans = [(e["ts"], e["dur"]) for e in chrome_trace([rank], {}, compute_lanes(1, 0))["traceEvents"] if e["ph"] == "X"]
    assert sorted(spans) == [(0.0, 0.0), (0.0, 2000.0), (2000.0, 1000.0)]


def test_area_bound_one_kind():
    times = {(1, ("A[0, 0]",), i): (1.0, "cpu") for i in range(1, 5)}
    assert area_bound(times, {"cpu": 2, "gpu": 0}) == pytest.approx(2.0)


def test_area_bound_splits_work_between_kinds_by_speed():
    times = {(1, ("A[0, 0]",), 1): (1.0, "cpu"), (1, ("A[0, 0]",), 2): (1.0, "cpu"),
             (1, ("A[1, 1]",), 1): (0.25, "gpu"), (1, ("A[1, 1]",), 2): (0.25, "gpu")}
    # x_cpu + x_gpu = 4, x_cpu·1 <= T, x_gpu·0.25 <= T: T = 0.8
    assert area_bound(times, {"cpu": 1, "gpu": 1}) == pytest.approx(0.8)


def test_least_time_splits_each_line_between_kinds():
    # line 1 only runs on cores (4 s), line 2 on either (8 s on a core, 2 s on the GPU): the GPU takes
    # all of line 2 and nothing is left to split, T = max(4 / 2, 2 / 1)
    work = {(1, "cpu"): 4.0, (2, "cpu"): 8.0, (2, "gpu"): 2.0}
    assert least_time(work, {"cpu": 2, "gpu": 1}) == pytest.approx(2.0)
    assert least_time(work, {"cpu": 2, "gpu": 0}) == pytest.approx(6.0)


def test_least_time_is_zero_when_a_line_runs_on_no_worker():
    assert least_time({(1, "cpu"): 1.0, (2, "gpu"): 1.0}, {"cpu": 2, "gpu": 0}) == 0.0


@pytest.mark.timeout(60)
def test_least_time_of_thousands_of_call_sites_on_two_kinds():
    """Straight-line code: one call site per task (8,000 of them took 6 GB as a dense LP)."""
    sites = 8000
    work = {**{(line, "cpu"): 1.0 for line in range(sites)}, **{(line, "gpu"): 0.25 for line in range(sites)}}
    # a core does 1 per T, the GPU 4: T = sites / 5
    assert least_time(work, {"cpu": 1, "gpu": 1}) == pytest.approx(sites / 5)


def test_critical_path_of_a_small_cholesky_with_unit_times(compiled):
    driver = compiled("programs/cholesky.tile")
    params = make_params(driver, Options(n=30, tiles={"nb": 10}))
    matrices = make_matrices(driver, params, make_distribution(driver.PROGRAM, params, (1, 1), 0), 0)

    class Unit(dict):
        def get(self, key, default=None):
            return (1.0, "cpu")
    # potrf → trsm → syrk → potrf → trsm → syrk → potrf
    assert critical_path(driver, matrices, params, Unit()) == pytest.approx(7.0)


@pytest.mark.timeout(60)
def test_efficiency_of_a_one_rank_run_is_at_most_one(compiled, tmp_path):
    result = execute(compiled("programs/lu.tile"), Options(n=500, tiles={"nb": 100}, trace=str(tmp_path / "t.json")))
    assert 0 < result.trace["efficiency"] <= 1
    assert set(result.trace["busy"]) == {"0/cpu-0", "0/cpu-1"} or len(result.trace["busy"]) >= 1


@pytest.mark.timeout(60)
def test_a_one_rank_gpu_trace_starts_with_the_runs_seconds(compiled, tmp_path):
    """The GPUs were prepared before the run's clock started, after the trace's: its tasks ended
    10 ms past the run's seconds."""
    path = tmp_path / "t.json"
    result = execute(compiled("programs/cholesky.tile"), Options(n=600, tiles={"nb": 100}, gpus=2, trace=str(path)))
    spans = [event for event in json.loads(path.read_text())["traceEvents"] if event["ph"] == "X"]
    assert min(event["ts"] for event in spans) >= 0
    assert max(event["ts"] + event["dur"] for event in spans) <= result.seconds * 1e6 + 1


@pytest.mark.timeout(60)
def test_a_tasks_tiles_in_the_trace_name_their_sub_ranges_as_explain_does(compiled, tmp_path):
    """hetero_cholesky's updates on slices of hybrid tiles: the trace said A[0, 0] where explain and
    graph said A[0, 0][50:200, 0:50], so a trace task could not be matched with its graph node."""
    path = tmp_path / "t.json"
    execute(compiled("programs/hetero_cholesky.tile"), Options(n=400, trace=str(path)))
    gemms = [e["args"] for e in json.loads(path.read_text())["traceEvents"] if e.get("name") == "gemm"]
    assert gemms and all(tile.count("[") == 2 for args in gemms for tile in args["tiles"])
    assert all(tile.split("][")[0] + "]" == keyed
               for args in gemms for tile, keyed in zip(args["tiles"], args["key"][1]))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("gpus", [0, 2])
def test_a_sub_range_a_host_task_reads_from_a_gpu_is_named_in_the_trace(compiled, tmp_path, gpus):
    """A kernel without a GPU body runs on the host on a copy of the row it reads from a GPU's tile:
    the trace named the whole tile there (U[0, 1]) and the row elsewhere (U[0, 0][7:8, 0:8])."""
    (tmp_path / "k.py").write_text("def top(h, c):\n    c[0:1, :] += h\n")
    (tmp_path / "p.tile").write_text('use "k.py"\nkernel top(in H, inout C)\nprogram p {\n  tiling uniform(nb = 8)\n'
                                     "  matrix U[n, n] = random general\n  for i in 1 .. U.mt {\n"
                                     "    for j in 0 .. U.nt { top(U[i - 1, j][7 :], U[i, j]) }\n  }\n}\n")
    path = tmp_path / "t.json"
    execute(compiled(tmp_path / "p.tile"), Options(n=32, gpus=gpus, gpu_backend="emulated" if gpus else None,
                                                   trace=str(path)))
    tops = [e["args"]["tiles"] for e in json.loads(path.read_text())["traceEvents"] if e.get("name") == "top"]
    assert len(tops) == 3 * 4 and all(read.endswith("][7:8, 0:8]") for read, _ in tops), tops


@pytest.mark.timeout(60)
def test_a_panel_is_one_of_a_tasks_tiles_in_the_trace(compiled, tmp_path):
    """The trace's tiles of gemm(A[i, 0 : A.nt], B[0 : B.mt, j], C[i, j], ...) were the panels' tiles one by
    one (A[0, 0], A[0, 1], A[0, 2], B[0, 0], ...), not the call's three arguments as explain names them."""
    path = tmp_path / "t.json"
    execute(compiled("tests/runtime/programs/panel_gemm.tile"), Options(n=192, tiles={"nb": 64}, trace=str(path)))
    events = [e["args"] for e in json.loads(path.read_text())["traceEvents"] if e.get("name") == "gemm"]
    assert sorted(args["tiles"] for args in events) == [[f"A[{i}, 0:3]", f"B[0:3, {j}]", f"C[{i}, {j}]"]
                                                        for i in range(3) for j in range(3)]
    assert all(len(args["key"][1]) == 7 for args in events)  # the key names every tile, as before


def test_a_value_argument_json_has_no_number_for_is_written_as_its_spelling():
    """JSON has no infinity or NaN: Python's ``Infinity`` made the trace a file Chrome's and
    node's JSON.parse refuse."""
    call = Call("scale", ("inout",), 0, 5, "scale(A[0, 0], ...)", values=("a", "b", "c", "d"))
    args = task_args(Counter(), call, ["A[0, 0]"], 0, (float("inf"), -float("inf"), float("nan"), -0.0))
    assert args["values"] == {"a": "inf", "b": "-inf", "c": "nan", "d": -0.0}
    json.dumps(args, allow_nan=False)


@pytest.mark.parametrize("seed", range(40))
def test_least_time_is_the_linear_programs_optimum(seed):
    """The sweep against scipy's LP solver on random call sites, some of them on one kind only."""
    from scipy.optimize import linprog

    rng = np.random.default_rng(seed)
    lines = int(rng.integers(1, 30))
    work = {}
    for line in range(lines):
        for kind in ("cpu", "gpu")[int(rng.integers(0, 2)):] if rng.random() < 0.3 else ("cpu", "gpu"):
            work[line, kind] = float(rng.choice([0.0, rng.exponential()]) if rng.random() < 0.1 else rng.exponential())
    capacity = {"cpu": int(rng.integers(1, 9)), "gpu": int(rng.integers(1, 4))}
    variables = list(work)
    cost = np.zeros(len(variables) + 1)
    cost[-1] = 1.0
    loads = np.zeros((2, len(variables) + 1))
    shares = np.zeros((lines, len(variables) + 1))
    for column, (line, kind) in enumerate(variables):
        loads[("cpu", "gpu").index(kind), column] = work[line, kind]
        shares[line, column] = 1.0
    loads[:, -1] = [-capacity["cpu"], -capacity["gpu"]]
    solved = linprog(cost, A_ub=loads, b_ub=np.zeros(2), A_eq=shares, b_eq=np.ones(lines), bounds=(0, None))
    assert solved.success
    assert least_time(work, capacity) == pytest.approx(solved.x[-1], rel=1e-7, abs=1e-12)
