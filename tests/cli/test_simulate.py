"""`tiledsl simulate`: a predicted run that moves exactly the data a real run moves.

Real multi-rank runs (emulated GPUs, ragged sizes) are compared rank by rank with
their simulation: tasks, messages and bytes both ways, protocol instances and
host/GPU copies must be equal. The predicted time must depend only on the program,
the size and the machine file; mistakes are one-line messages.
"""
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tiledsl.commands.cli import main
from tiledsl.compiler import compile_path
from tiledsl.driverload import import_driver
from tiledsl.runtime import Options
from tiledsl.runtime.layout import make_distribution, make_matrices, make_params
from tiledsl.runtime.recording import survey
from tiledsl.runtime.rates import Rates
from tiledsl.simulation.machine import machine, shipped

ROOT = Path(__file__).resolve().parents[2]
EXACT = ("tasks", "tasks_by_device", "messages_sent", "messages_received", "bytes_sent", "bytes_received",
         "instances", "device_copies")
MACHINE = {"name": "test node", "cores": 4, "gpus": 2, "ranks_per_node": None,
           "cpu": {"gemm": {"64": 5, "256": 10}, "potrf": 4}, "gpu": {"gemm": 100, "default": 50},
           "network": {"latency_us": 5, "bandwidth_gbs": 2}, "pcie": {"latency_us": 8, "bandwidth_gbs": 4},
           "runtime": {"walk_us": 0.5, "submit_us": 20, "task_us": 20, "transfer_us": 10, "notice_us": 100}}


@pytest.fixture
def machine_file(tmp_path):
    path = tmp_path / "node.json"
    path.write_text(json.dumps(MACHINE))
    return path


def simulate(capsys, *args):
    status = main(["simulate", *map(str, args), "--json"])
    out = capsys.readouterr()
    assert status == 0, out.err
    return json.loads(out.out.strip().splitlines()[-1])


def real_run(program, np, *args):
    path = program if program.endswith(".tile") else f"programs/{program}.tile"
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", path,
                          "--np", str(np), "--json", "--no-tune", *map(str, args)],
                         cwd=ROOT, capture_output=True, text=True, timeout=150)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(160)
@pytest.mark.parametrize("program, np, gpus, size", [
    ("cholesky", 2, 0, ("--n", 1000, "--nb", 96)),  # ragged last tile row and column; 1x2, no GPU
    ("hetero_qr", 3, 1, ("--n", 900, "--B", 192, "--b", 64, "--s", 2)),  # 3 ranks
    ("lu", 2, 2, ("--n", 700, "--nb", 100, "--gpu-ratio", "1:2")),  # host/GPU and GPU/GPU copies
    (str(ROOT / "tests/runtime/programs/halo.tile"), 4, 1, ("--n", 37, "--nb", 8, "--gpu-ratio", "1:1")),  # parts; 2x2
])
def test_simulation_moves_exactly_what_a_real_run_moves(capsys, machine_file, tmp_path, program, np, gpus, size):
    """The grids and GPU counts are dealt among the programs (each is some program's): 2x2, the only grid
    with both process rows and columns, is halo's, whose parts move along both."""
    real = real_run(program, np, *size, "--gpus", gpus, "--gpu-backend", "emulated", "--trace", tmp_path / "run.json")
    predicted = simulate(capsys, program, "--nodes", np, "--machine", machine_file, *size, "--gpus", gpus,
                         "--trace", tmp_path / "simulated.json")
    # each rank's host/GPU copies, tile by tile, device to device (the simulated trace's said only their bytes)
    copied = [Counter((e["pid"], e["args"]["tile"], e["args"]["from"], e["args"]["to"], e["args"]["bytes"])
                      for e in json.loads((tmp_path / name).read_text())["traceEvents"] if e.get("name") == "copy")
              for name in ("run.json", "simulated.json")]
    assert copied[0] == copied[1] and sum(copied[0].values()) == real["totals"]["device_copies"]
    # what each trace says of its run: the same, the program's params included (tester v82e), but the verdict
    about = [json.loads((tmp_path / name).read_text())["otherData"] for name in ("run.json", "simulated.json")]
    assert set(about[0]) - {"ok"} == set(about[1]) - {"simulated"}
    assert predicted["tasks"] == real["tasks"] and predicted["grid"] == real["grid"]
    for mine, theirs in zip(predicted["ranks"], real["ranks"], strict=True):
        assert {k: mine[k] for k in EXACT} == {k: theirs[k] for k in EXACT}
        assert set(mine) == set(theirs)  # the same statistics as a run's --json
        assert (mine["flops"] is None) == (theirs["flops"] is None)  # cholesky's: null, its check's formula counts
    assert predicted["totals"]["messages_sent"] == predicted["totals"]["messages_received"] > 0
    # keys a run's line has (they were missing): in memory; the machine file's GPUs are no backend of this machine's
    assert (predicted["out_of_core"], predicted["gpu_backend"]) == (None, None) and real["out_of_core"] is None


@pytest.mark.timeout(60)
def test_one_rank_counts_every_task_and_no_message(capsys, machine_file):
    predicted = simulate(capsys, "lu", "--nodes", 1, "--machine", machine_file, "--n", 500, "--nb", 96)
    assert predicted["tasks"] == predicted["ranks"][0]["tasks"] == 6 + 2 * 15 + 55  # 6×6 tiles, ragged
    assert predicted["totals"]["messages_sent"] == 0
    assert predicted["seconds"] >= max(predicted["critical_path"], predicted["area_bound"]) > 0
    assert predicted["ranks"][0]["instances"] is not None  # the machine file's GPUs exchange with the host
    alone = simulate(capsys, "lu", "--nodes", 1, "--machine", machine_file, "--n", 500, "--nb", 96, "--gpus", 0)
    assert alone["ranks"][0]["instances"] is None  # as a run's: one rank without GPUs exchanges with nothing


@pytest.mark.timeout(60)
def test_a_rank_walks_as_the_run_would(capsys, machine_file, tmp_path):
    """Several ranks of an affine program walk their share (fewer tasks met, a cheaper walk); one
    rank, derived priorities and a program with a call under a non-affine 'if' walk the whole nest."""
    size = ("--machine", machine_file, "--n", 1500, "--nb", 100)
    share = simulate(capsys, "cholesky", "--nodes", 4, *size)["walk"]
    whole = simulate(capsys, "cholesky", "--nodes", 4, *size, "--priorities", "auto")
    assert share["rank_walks"] == "share" and whole["walk"]["rank_walks"] == "whole"
    assert whole["walk"]["whole_because"] == ("--priorities auto derives the priorities from every task on up to "
                                              "16 ranks: leave it out for the program's own priority clauses, or give --priorities none")
    assert whole["walk"]["tasks_met"] == whole["tasks"] == 680 and share["whole_because"] is None
    assert share["tasks_met"] < whole["tasks"] * 0.75 and share["seconds"] < whole["walk"]["seconds"]
    assert simulate(capsys, "cholesky", "--nodes", 1, *size)["walk"]["rank_walks"] == "whole"
    (tmp_path / "guarded.tile").write_text("program guarded {\n  tiling uniform(nb = 32)\n"
                                           "  matrix A[n, n] = random spd\n"
                                           "  for k in 0 .. A.nt { if k * k < A.mt { potrf(A[k, k]) } }\n}\n")
    derived = simulate(capsys, tmp_path / "guarded.tile", "--nodes", 2, *size)["walk"]  # no priority clauses
    assert derived["whole_because"] == (  # both obstacles, the loop nest's first (tester z81a)
        "the program's loop nest has no affine description for a share walk to follow (line 4: k * k multiplies "
        "loop variables; docs/cluster.md); and the program's priorities are derived from every task on up to 16 "
        "ranks: give its calls priority clauses, or --priorities none")
    (tmp_path / "affine.tile").write_text((tmp_path / "guarded.tile").read_text().replace("k * k < A.mt", "k < 3"))
    derived = simulate(capsys, tmp_path / "affine.tile", "--nodes", 2, *size)["walk"]
    assert derived["whole_because"] == ("the program's priorities are derived from every task on up to 16 "
                                        "ranks: give its calls priority clauses, or --priorities none")
    plain = tmp_path / "plain.tile"  # cholesky without its priority clauses
    plain.write_text(re.sub(r" priority [^\n]*", "", (ROOT / "programs/cholesky.tile").read_text()))
    many = [simulate(capsys, plain, "--nodes", 20, "--machine", machine_file, "--n", 3000, "--nb", 100, *given)
            for given in ((), ("--priorities", "none"), ())]  # past 16 ranks, derived ones over each rank's share
    assert [m["priorities"] for m in many] == ["derived-share", "none", "derived-share"]
    assert [m["walk"]["rank_walks"] for m in many] == ["share"] * 3 and many[0]["tasks"] == 4960
    assert many[0]["seconds"] == many[2]["seconds"] != many[1]["seconds"]
    guarded = simulate(capsys, tmp_path / "guarded.tile", "--nodes", 2, *size, "--priorities", "none")["walk"]
    assert guarded["rank_walks"] == "whole" and guarded["whole_because"] == (
        "the program's loop nest has no affine description for a share walk to follow (line 4: k * k multiplies "
        "loop variables; docs/cluster.md)")


@pytest.mark.timeout(120)
def test_the_tasks_a_share_walk_meets_are_counted_in_tasks(capsys, machine_file, tmp_path):
    """QR's updates write two tiles each: counting the tiles for the tasks of other ranks put the
    busiest rank's tasks met below the tasks it takes part in (31,609 against 44,736 at 30720/480)."""
    predicted = simulate(capsys, "qr", "--nodes", 4, "--machine", machine_file, "--n", 1500, "--nb", 100)
    _, text = compile_path(ROOT / "programs/qr.tile")
    (tmp_path / "walk_qr.py").write_text(text)
    driver = import_driver(tmp_path / "walk_qr.py", "walk_qr")
    params = make_params(driver, Options(n=1500, tiles={"nb": 100}))
    own = [survey(driver, make_matrices(driver, params, make_distribution(driver.PROGRAM, params, (2, 2), 0), rank),
                  params, rank, guided=True).count for rank in range(4)]
    assert max(own) <= predicted["walk"]["tasks_met"] < predicted["tasks"]
    # panels of two tiles but one at the matrix's edge: the tiles written per task vary, and the
    # estimate from them went past the program's 50 tasks (52) on a 3x1 grid
    (tmp_path / "edges.tile").write_text(
        "program edges {\n  tiling uniform(nb = 32)\n  in matrix A[n, n] = random general\n"
        "  matrix C[n, n] = zeros\n  for k in 0 .. A.nt {\n    for j in 0 .. C.nt {\n"
        "      gemm(A[k, j], A[j, k], C[k, j]) priority 1\n"
        "      gemm(A[k : min(k + 2, A.mt), j], A[j, k], C[k : min(k + 2, C.mt), j]) priority 1\n    }\n  }\n}\n")
    edges = simulate(capsys, tmp_path / "edges.tile", "--grid", "3x1", "--machine", machine_file, "--n", 160)
    assert edges["walk"]["rank_walks"] == "share" and edges["walk"]["tasks_met"] <= edges["tasks"] == 50


@pytest.mark.timeout(60)
def test_predicted_time_depends_only_on_the_machine_file(capsys, machine_file, tmp_path):
    args = ("cholesky", "--nodes", 4, "--machine", machine_file, "--n", 1500, "--nb", 128, "--gpus", 1)
    first, second = simulate(capsys, *args), simulate(capsys, *args)
    for key in ("seconds", "gflops", "critical_path", "area_bound", "walk"):
        assert first[key] == second[key]
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps({**MACHINE, "network": {"latency_us": 5, "bandwidth_gbs": 0.05}}))
    slower = simulate(capsys, *args[:4], slow, *args[5:])
    assert slower["seconds"] > first["seconds"] and slower["totals"] == first["totals"]


@pytest.mark.timeout(60)
def test_trace_is_the_run_trace_format(capsys, machine_file, tmp_path):
    trace = tmp_path / "sim.json"
    simulate(capsys, "cholesky", "--nodes", 2, "--machine", machine_file, "--n", 600, "--nb", 128, "--trace", trace)
    events = json.loads(trace.read_text())["traceEvents"]
    tasks = [e for e in events if e["ph"] == "X" and e["cat"] == "task"]
    assert len(tasks) == 5 + 10 + 10 + 10 and {e["pid"] for e in tasks} == {0, 1}
    sends = [e for e in events if e.get("name") == "send"]
    receives = [e for e in events if e.get("name") == "receive"]
    assert len(sends) == len(receives) > 0
    assert all(e["args"]["bytes"] == 128 * 128 * 8 or e["args"]["bytes"] == 88 * 128 * 8 for e in sends)


@pytest.mark.timeout(30)
def test_rates_are_interpolated_in_the_tile_size():
    rates = Rates({"gemm": {"100": 10, "300": 30}, "potrf": 4}, "cpu")
    assert rates.gflops("gemm", 50) == 10 and rates.gflops("gemm", 200) == 20 and rates.gflops("gemm", 900) == 30
    assert rates.gflops("potrf", 700) == 4 and rates.gflops("syrk", 200) == 20  # no rate: gemm's
    node = machine(MACHINE)
    assert node.seconds("gemm", 2 * 256 ** 3, 0, False) == pytest.approx(2 * 256 ** 3 / 10e9 + 20e-6)
    fetching = machine({**MACHINE, "memory_gbs": 4})
    assert fetching.seconds("gemm", 2 * 256 ** 3, 4e6, False) == pytest.approx(2 * 256 ** 3 / 10e9 + 1e-3 + 20e-6)
    assert fetching.seconds("gemm", 2 * 256 ** 3, 4e6, True) == node.seconds("gemm", 2 * 256 ** 3, 4e6, True)
    fetching.in_run = frozenset({"gemm"})  # timed in a run of the program (tune): memory included
    assert fetching.seconds("gemm", 2 * 256 ** 3, 4e6, False) == node.seconds("gemm", 2 * 256 ** 3, 4e6, False)
    assert {"keeneland", "h100", "local"} <= set(shipped())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("change, message", [
    ({"cores": 0}, "bad.json: cores must be an integer from 1 to 4096, got 0"),
    ({"cores": 2.5}, "bad.json: cores must be an integer from 1 to 4096, got 2.5"),
    ({"cores": 10 ** 9}, "bad.json: cores must be an integer from 1 to 4096, got 1000000000"),
    ({"gpus": 1.5, "gpu": {"gemm": 9}}, "bad.json: gpus must be an integer from 0 to 4096, got 1.5"),
    ({"memory_gbs": 0}, "bad.json: memory_gbs (leave it out for no memory time) must be a number above 0 and up to "
                        "1e+09, got 0"),
    ({"network": {"latency_us": 2, "bandwidth_gbs": -24}},  # said as 0 is: it was "from 0 to 1e+09" here
     "bad.json: network.bandwidth_gbs must be a number above 0 and up to 1e+09, got -24"),
    ({"network": {"latency_us": 2, "bandwidth_gbs": 0}},
     "bad.json: network.bandwidth_gbs must be a number above 0 and up to 1e+09, got 0"),
    ({"cpu": {"gemm": float("nan")}}, "bad.json: cpu.gemm: rates are GFLOP/s from 1e-06 to 1e+09, got NaN"),
    ({"cpu": {"gemm": float("inf")}}, "bad.json: cpu.gemm: rates are GFLOP/s from 1e-06 to 1e+09, got Infinity"),
    ({"cpu": {"gemm": {"0": 3}}}, "bad.json: cpu.gemm: the tile sizes of a rate table are positive integers"),
    ({"network": {"latency_us": float("nan"), "bandwidth_gbs": 3}},
     "bad.json: network.latency_us must be a number from 0 to 1e+09, got NaN"),
    ({"runtime": {"task_us": float("nan")}}, "bad.json: runtime.task_us must be a number from 0 to 1e+09, got NaN"),
    ({"cpu": {"gemm": 1e-300}}, "bad.json: cpu.gemm: rates are GFLOP/s from 1e-06 to 1e+09, got 1e-300"),
    ({"cpu": {"gemm": {"64": 3.0, "128": float("nan")}}},  # the entry, not the whole table
     "bad.json: cpu.gemm: rates are GFLOP/s from 1e-06 to 1e+09, got NaN at size 128"),
    ({"network": {"latency_us": 1e300, "bandwidth_gbs": 3}},
     "bad.json: network.latency_us must be a number from 0 to 1e+09, got 1e+300"),
    ({"network": {"latency_us": 1}}, "network must give exactly latency_us, bandwidth_gbs"),
    ({"cpu": {"potrf": 3}}, "give at least gemm's rate"),
    ({"cpu": {"gemm": {"big": 3}}}, "cpu.gemm: a rate table maps tile sizes to GFLOP/s"),
    ({"speed": 3}, "unknown field 'speed' (fields: "),
    ({"runtime": {"walk_us": 1, "walk_ms": 3}}, "unknown field 'runtime.walk_ms' (runtime takes walk_us, "),
    # every unknown field at once (the first alone was named), values as the file writes them (True, {'big': 10})
    ({"netwrok": 3, "gpuss": 2}, "bad.json: unknown fields 'gpuss', 'netwrok' (fields: "),
    ({"runtime": {"walk_ms": 1, "task_ms": 3}}, "unknown fields 'runtime.task_ms', 'runtime.walk_ms' (runtime takes "),
    ({"cores": True}, "bad.json: cores must be an integer from 1 to 4096, got true"),
    ({"cpu": {"default": {"big": 10}}}, 'cpu.default: a rate table maps tile sizes to GFLOP/s, got {"big": 10}'),
    ({"cpu": ["gemm"]}, 'bad.json: cpu: kernel rates are a {kernel: GFLOP/s} object, got ["gemm"]'),
    ({"name": 5}, "bad.json: name must be a string, got 5"),  # it printed "simulated on 2 rank(s) ... of 5"
    ({"about": ["x"]}, "bad.json: about must be a string, got [\"x\"]"),
    # a rate is a number in a table too (the strings were taken), a boolean no count (true was 1 rank a node)
    ({"cpu": {"gemm": {"128": "1e-3", "512": 2}}}, "bad.json: cpu.gemm: a rate table maps tile sizes to GFLOP/s"),
    ({"cpu": {"gemm": {"128": True}}}, "bad.json: cpu.gemm: a rate table maps tile sizes to GFLOP/s"),
    # tester z80b: one of the two rates was dropped without a word
    ({"cpu": {"gemm": {"64": 5, "064": 6, "256": 10}}}, 'bad.json: cpu.gemm: tile size 64 given more than once '
                                                       '("64", "064"): give one rate per size'),
    ({"ranks_per_node": True}, "bad.json: ranks_per_node must be a positive integer or null (all ranks on one "
                               "node), got true"),
    ({"pcie": None}, "bad.json: pcie must give exactly latency_us, bandwidth_gbs, got null"),
])
def test_a_bad_machine_file_is_one_line(capsys, tmp_path, change, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**MACHINE, **change}))
    status = main(["simulate", "cholesky", "--nodes", "2", "--machine", str(path), "--n", "500"])
    err = capsys.readouterr().err
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("text, message", [
    ("[" * 5000 + "]" * 5000, "nested too deep"),  # a RecursionError: an internal error
    # JSON keeps the last of two: the file's cores = 4 was taken for 8, silently
    ('{"name": "x", "cores": 4, "cores": 8}', "field 'cores' is given twice in one object"),
    ('{"cores": ' + "1" * 5000 + "}", "an integer of 5000 digits"),  # it advised sys.set_int_max_str_digits()
])
def test_a_machine_file_that_json_reads_leniently_or_not_at_all_is_one_line(capsys, tmp_path, text, message):
    path = tmp_path / "odd.json"
    path.write_text(text)
    status = main(["simulate", "cholesky", "--nodes", "2", "--machine", str(path), "--n", "500"])
    assert (status, capsys.readouterr().err) == (2, f"tiledsl: error: cannot read machine file {path}: {message}\n")


@pytest.mark.timeout(60)
def test_pcie_is_needed_only_by_a_machine_with_gpus(capsys, tmp_path):
    """A CPU-only machine file failed with "missing field 'pcie'", a GPU's host link."""
    path = tmp_path / "cpus.json"
    cpus = {key: value for key, value in MACHINE.items() if key not in ("pcie", "gpu")}
    path.write_text(json.dumps({**cpus, "gpus": 0}))
    result = simulate(capsys, "cholesky", "--n", 500, "--nb", 100, "--nodes", 2, "--machine", path)
    assert (result["gpus"], result["tasks"]) == (0, 35) and result["seconds"] > 0
    path.write_text(json.dumps({key: value for key, value in MACHINE.items() if key != "pcie"}))
    assert main(["simulate", "cholesky", "--n", "500", "--machine", str(path)]) == 2
    assert capsys.readouterr().err.strip() == (f"tiledsl: error: {path}: missing field 'pcie' (the link between a "
                                               f"node's host and GPUs, which it has: gpus {MACHINE['gpus']})")
    path.write_text(json.dumps({"name": "x", "cores": 4}))  # no gpus either: an internal KeyError (tester s56)
    assert main(["simulate", "cholesky", "--n", "500", "--machine", str(path)]) == 2
    assert capsys.readouterr().err.strip() == f"tiledsl: error: {path}: missing field 'cpu'"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("args, message", [
    (("--nodes", 0, "--machine", "keeneland"), "--nodes must be at least 1"),
    (("--nodes", 2, "--machine", "nowhere.json"), "machine file 'nowhere.json' not found"),
    (("--nodes", 2, "--machine", "keeneland", "--gpus", 4),
     "machine file keeneland (Keeneland) has 3 GPU(s) per node: give --gpus 3 or fewer"),
    (("--machine", "local", "--gpus", 1), "--gpus 1: machine file local has no GPUs: give one with \"gpus\" and GPU "
                                          "rates (keeneland, h100), or leave out --machine to simulate this machine "
                                          "with the rates `tiledsl tune cholesky --gpus 1` measured"),  # (its name too)
    (("--nodes", 2, "--grid", "3x1", "--machine", "keeneland"),
     "--grid 3x1 has 3 rank(s) but --nodes is 2: give --nodes 3"),  # it said: tiledsl run --np 3
    (("--nodes", 2, "--machine", "keeneland", "--trace", "/nonexistent/t.json"),  # said before simulating
     "--trace /nonexistent/t.json: directory '/nonexistent' does not exist"),
])
def test_usage_errors_are_one_line(capsys, args, message):
    status = main(["simulate", "cholesky", "--n", "2000", *map(str, args)])
    err = capsys.readouterr().err
    assert status == 2 and message in err and "Traceback" not in err


@pytest.mark.timeout(60)
def test_a_directory_or_gpu_rates_without_gpus_are_machine_file_mistakes(capsys, tmp_path):
    """A directory was "not found"; GPU rates without a count of GPUs simulated none, silently."""
    status = main(["simulate", "cholesky", "--n", "500", "--nodes", "2", "--machine", str(tmp_path)])
    assert status == 2 and capsys.readouterr().err.strip() == (
        f"tiledsl: error: machine file '{tmp_path}' is a directory: name a JSON file (or one of: h100, keeneland, local)")
    path = tmp_path / "nogpus.json"
    path.write_text(json.dumps({key: value for key, value in MACHINE.items() if key != "gpus"}))
    status = main(["simulate", "cholesky", "--n", "500", "--nodes", "2", "--machine", str(path)])
    assert status == 2 and capsys.readouterr().err.strip() == (
        f"tiledsl: error: {path}: 'gpu' rates but no 'gpus' (the GPUs per node; 0 for none)")


@pytest.mark.timeout(60)
def test_tile_memory_is_not_modelled_so_not_given(capsys, machine_file):
    result = simulate(capsys, "cholesky", "--n", 500, "--nb", 100, "--nodes", 2, "--machine", machine_file)
    assert [rank["peak_tile_bytes"] for rank in result["ranks"]] == [None, None]
    assert result["totals"]["peak_tile_bytes"] is None and result["totals"]["tasks"] == 35


@pytest.mark.timeout(60)
def test_this_machine_needs_its_tuned_rates(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    status = main(["simulate", "cholesky", "--n", "2000", "--nodes", "2"])
    err = capsys.readouterr().err
    assert status == 2 and "run `tiledsl tune cholesky` first, or give --machine FILE" in err
    (tmp_path / "mine.tile").write_text((ROOT / "programs" / "cholesky.tile").read_text().replace(
        "program cholesky", "program other_name"))
    status = main(["simulate", str(tmp_path / "mine.tile"), "--n", "2000", "--nodes", "2"])
    err = capsys.readouterr().err  # the file to tune, not the program's name inside it
    assert status == 2 and f"no kernel rates for other_name on this machine: run `tiledsl tune {tmp_path / 'mine.tile'}` " \
                           "first, or give --machine FILE" in err



@pytest.mark.timeout(60)
def test_a_program_of_no_task_on_several_nodes_is_simulated_and_rendered(capsys, machine_file, tmp_path):
    (tmp_path / "none.tile").write_text("program none {\n  tiling uniform(nb = 64)\n  param count = 0\n"
                                        "  matrix A[n, n] = random spd\n"
                                        "  for k in 0 .. count { potrf(A[k, k]) }\n}\n")
    status = main(["simulate", str(tmp_path / "none.tile"), "--n", "256", "--nodes", "2",
                   "--machine", str(machine_file)])
    out = capsys.readouterr()
    assert status == 0, out.err
    assert "0 tasks" in out.out and "efficiency -" in out.out and "(- of the time)" in out.out


@pytest.mark.timeout(60)
def test_a_kernel_without_a_flop_count_leaves_no_rate_as_a_run_does(capsys, machine_file, tmp_path):
    (tmp_path / "k.py").write_text("def fill(A):\n    A[...] = 1.0\n")
    (tmp_path / "p.tile").write_text('use "k.py"\nkernel fill(out A)\nprogram p {\n  tiling uniform(nb = 50)\n'
                                     "  matrix A[n, n] = random spd\n  matrix B[n, n] = zeros\n"
                                     "  for k in 0 .. A.nt { potrf(A[k, k])  fill(B[k, k]) }\n}\n")
    result = simulate(capsys, str(tmp_path / "p.tile"), "--n", "200", "--nodes", "2", "--machine", str(machine_file))
    assert result["gflops"] is None and result["flops_source"] is None
    assert {rank["uncounted"] for rank in result["ranks"]} == {"fill"}
    assert result["notes"] == [  # the CPU rates have no default; the GPU's (unused here) have one
        "kernel fill declares no flop count: its tasks are timed as a gemm on their largest argument",
        f"no cpu rate for fill ({machine_file}): timed at gemm's"]


@pytest.mark.timeout(150)
def test_a_rank_that_ran_no_kernel_without_a_count_counts_its_flops_as_a_run_does(capsys, machine_file, tmp_path):
    """Each rank's flops and uncounted kernel are its own (they were the first rank's on every rank)."""
    (tmp_path / "k.py").write_text("def fill(A):\n    A[...] = 1.0\n\ndef scale(A, alpha):\n    A *= alpha\n")
    (tmp_path / "u.tile").write_text('use "k.py"\nkernel fill(out A)\nkernel scale(inout A, float alpha = 1.0) '
                                     "flops alpha * A.m * A.n\nprogram u {\n  tiling uniform(nb = 64)\n"
                                     "  matrix A[n, n] = zeros\n  fill(A[0, 0])\n"
                                     "  for j in 0 .. A.nt { scale(A[0, j], 2.0) }\n}\n")
    size = ("--n", 150, "--grid", "1x2")
    predicted = simulate(capsys, tmp_path / "u.tile", *size, "--machine", machine_file, "--gpus", 0)
    real = real_run(str(tmp_path / "u.tile"), 2, *size)
    assert [(r["flops"], r["uncounted"]) for r in predicted["ranks"]] == \
        [(r["flops"], r["uncounted"]) for r in real["ranks"]] == [(None, "fill"), (2 * 64 * 64, None)]
    (tmp_path / "k.py").write_text("def fill(A):\n    A[...] = 1.0\n\n\ndef halve(A):\n    A *= 0.5\n")
    (tmp_path / "p.tile").write_text('use "k.py"\nkernel fill(out A)\nkernel halve(inout A)\nprogram p {\n'
                                     "  tiling uniform(nb = 50)\n  matrix B[n, n] = zeros\n"
                                     "  for k in 0 .. B.nt { fill(B[k, k])  halve(B[k, k]) }\n}\n")
    result = simulate(capsys, str(tmp_path / "p.tile"), "--n", "200", "--nodes", "2", "--machine", str(machine_file))
    assert result["notes"][0] == ("kernels fill, halve declare no flop count: their tasks are timed as a gemm on "
                                  "their largest argument")  # it named fill only
    (tmp_path / "p.tile").write_text('use "k.py"\nkernel fill(out A) flops 0\nprogram p {\n'
                                     "  tiling uniform(nb = 50)\n  matrix A[n, n] = random spd\n  matrix B[n, n] = zeros\n"
                                     "  for k in 0 .. A.nt { potrf(A[k, k])  fill(B[k, k]) }\n}\n")
    result = simulate(capsys, str(tmp_path / "p.tile"), "--n", "200", "--nodes", "2", "--machine", str(machine_file))
    assert result["notes"] == []  # no rate: gemm's times its no flop (it said "timed at gemm's")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("formula, problem, at", [
    ("10.0 * k * A.m", "is -100, below zero", 0),
    ("A.m // (k - 1) + A.m", "failed: integer division or modulo by zero", 2),
    ("2 ** (k - 1)", "failed: the exponent of '**' is negative: 2 ** -2", 0),  # ("ValueError" it said between, once)
    ("A.m * 1.0e308 * 10.0", "is inf, no finite number", 0)])
@pytest.mark.parametrize("command", ["run", "simulate"])
def test_a_flop_count_that_fails_is_negative_or_infinite_is_the_programs_mistake_at_its_line(
        machine_file, tmp_path, capsys, monkeypatch, command, formula, problem, at):
    """A sum of counts would hide a negative one; simulate timed it as negative seconds, or failed
    with an internal error; an infinite one made the rate "inf" (no GFLOP/s, exit 0). simulate in
    this process, as this file's other simulations (a run claims its process: a subprocess)."""
    (tmp_path / "k.py").write_text("def put(A, k):\n    A += k\n")
    (tmp_path / "p.tile").write_text(f'use "k.py"\nkernel put(inout A, int k)\n  flops {formula}\n'
                                     "program p {\n  matrix A[n, n] = zeros\n"
                                     "  for i in 0 .. 3 { put(A[0, 0], i - 1) }\n}\n")
    if command == "simulate":
        monkeypatch.chdir(tmp_path)
        status = main(["simulate", "p.tile", "--n", "10", "--nodes", "1", "--machine", str(machine_file)])
        out = subprocess.CompletedProcess((), status, stderr=capsys.readouterr().err)
    else:
        out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "p.tile", "--n", "10"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=50)
    where = "p.tile:6" if command == "simulate" else "rank 0 (p.tile:6)"  # a simulation runs no rank
    assert (out.returncode, out.stderr.strip()) == (
        1, f"tiledsl: error: {where}: the flop count of kernel put {problem} "
           f"(in `put(A[0, 0], i - 1)`, with i = {at})")


@pytest.mark.timeout(160)
def test_a_tree_broadcast_is_simulated_as_it_runs(capsys, machine_file):
    """--broadcast tree: the simulation receives exactly what the real run receives, rank by rank;
    which rank sends a forwarded version depends on timing, the totals do not."""
    size = ("--n", 1000, "--nb", 96, "--grid", "1x4", "--broadcast", "tree")
    real = real_run("cholesky", 4, *size)
    predicted = simulate(capsys, "cholesky", "--nodes", 4, "--machine", machine_file, *size)
    direct = simulate(capsys, "cholesky", "--nodes", 4, "--machine", machine_file, *size[:-1], "direct")
    for key in ("tasks", "messages_received", "bytes_received", "plans_received"):
        assert [r[key] for r in predicted["ranks"]] == [r[key] for r in real["ranks"]], key
    for key in ("tasks", "messages_received", "bytes_received"):
        assert [r[key] for r in predicted["ranks"]] == [r[key] for r in direct["ranks"]], key
    assert predicted["totals"]["messages_sent"] == real["totals"]["messages_sent"] == direct["totals"]["messages_sent"]
    assert [r["messages_sent"] for r in predicted["ranks"]] != [r["messages_sent"] for r in direct["ranks"]]
    assert simulate(capsys, "cholesky", "--nodes", 4, "--machine", machine_file, *size)["seconds"] == \
        predicted["seconds"]
    assert predicted["broadcast"] == real["broadcast"] == "tree" and direct["broadcast"] == "direct"
    auto = ("cholesky", "--machine", machine_file, "--n", 1000, "--nb", 96)  # by default: a tree from 8 ranks
    assert [simulate(capsys, *auto, "--nodes", nodes)["broadcast"] for nodes in (4, 8)] == ["direct", "tree"]


@pytest.mark.timeout(60)
def test_a_share_walk_meets_no_more_tasks_than_the_program_has(capsys, machine_file, tmp_path):
    """Tasks that write several tiles (tpqrt, tpmqrt) bump several versions when another rank
    owns them: the walk's cost counts tasks, not bumps."""
    program = tmp_path / "m3.tile"
    program.write_text("program m3 {\n  tiling uniform(nb = 128)\n  param ib = 32\n"
                       "  matrix A[n, n // 2] = random general\n  matrix B[n, 3] = random general\n"
                       "  workspace T like A rows ib\n  for k in 0 .. A.nt {\n    geqrt(A[k, k], T[k, k]) priority 1\n"
                       "    for i in k + 1 .. A.mt {\n      tpqrt(A[k, k], A[i, k], T[i, k])\n"
                       "      for j in 0 .. B.nt { tpmqrt(A[i, k], T[i, k], B[k, j], B[i, j]) }\n    }\n  }\n}\n")
    walk = simulate(capsys, program, "--nodes", 2, "--machine", machine_file, "--n", 900)
    assert walk["walk"]["rank_walks"] == "share" and walk["walk"]["tasks_met"] <= walk["tasks"] == 48


@pytest.mark.timeout(60)
def test_host_cores_taking_gpu_tasks_are_simulated_with_the_same_traffic(capsys, machine_file):
    """--host-takes on: CPU workers take GPU tasks (those the model says they finish no later); what
    each rank runs and moves is unchanged, the prediction stays deterministic."""
    args = ("cholesky", "--nodes", 2, "--machine", machine_file, "--n", 2000, "--nb", 128, "--gpus", 1,
            "--gpu-ratio", "0:1")
    alone = simulate(capsys, *args)
    taking = simulate(capsys, *args, "--host-takes", "on")
    assert alone["host_takes"] is False and taking["host_takes"] is True
    assert taking["totals"]["host_took"] > 0 == alone["totals"]["host_took"]
    for key in set(EXACT) - {"tasks_by_device", "device_copies"}:
        assert [r[key] for r in taking["ranks"]] == [r[key] for r in alone["ranks"]], key
    assert [r["tasks_by_device"]["host"] for r in taking["ranks"]] == [r["host_took"] for r in taking["ranks"]]
    # a taken task's tiles go to the host and its written one back: potrf 2 copies, trsm and syrk 3, gemm 4
    assert all(2 * t["host_took"] <= t["device_copies"] - r["device_copies"] <= 4 * t["host_took"]
               for r, t in zip(alone["ranks"], taking["ranks"]))
    assert simulate(capsys, *args, "--host-takes", "on")["seconds"] == taking["seconds"]


@pytest.mark.timeout(60)
def test_taken_tasks_are_marked_in_the_trace_and_need_gpus(capsys, machine_file, tmp_path):
    trace = tmp_path / "taken.json"
    args = ("cholesky", "--nodes", 1, "--machine", machine_file, "--n", 2000, "--nb", 128, "--gpu-ratio", "0:1")
    result = simulate(capsys, *args, "--gpus", 1, "--host-takes", "on", "--trace", trace)
    events = json.loads(trace.read_text())["traceEvents"]
    taken = [e for e in events if "taken from" in e.get("args", {})]
    assert len(taken) == result["totals"]["host_took"] > 0 and {e["args"]["taken from"] for e in taken} == {"gpu-1"}
    copies = [e for e in events if e.get("name") == "copy"]  # a taken task's too, as a run traces them
    assert len(copies) == result["totals"]["device_copies"] and {"host", "gpu-1"} == {e["args"]["to"] for e in copies}
    assert main(["simulate", *map(str, args[:-2]), "--gpus", "0", "--host-takes", "on"]) == 2
    assert capsys.readouterr().err.strip() == ("tiledsl: error: --host-takes on needs GPUs (--gpus G, or a machine "
                                               "file that has them)")
    main(["simulate", *map(str, args), "--gpus", "1", "--host-takes", "on"])
    assert "  gpus      CPU workers took " in capsys.readouterr().out


@pytest.mark.timeout(60)
def test_a_machine_rate_for_no_kernel_is_named_in_a_note(capsys, tmp_path):
    """"gemmm" (a typo) was taken silently and gemm timed at the default rate."""
    path = tmp_path / "typo.json"
    path.write_text(json.dumps({**MACHINE, "cpu": {**MACHINE["cpu"], "gemmm": 40, "trsmm": 10}}))
    result = simulate(capsys, "cholesky", "--n", "600", "--nb", "200", "--nodes", "1", "--machine", str(path))
    assert f"{path}: the cpu rates name gemmm, trsmm, no kernel of the prelude or of cholesky (misspelled?): " \
           "unused" in result["notes"]


@pytest.mark.timeout(60)
def test_a_broken_requirement_is_said_before_the_missing_rates_of_this_machine(capsys):
    assert main(["simulate", "hqr", "--n", "300", "--set", "domains=0"]) == 2
    assert capsys.readouterr().err.startswith("tiledsl: error: hqr requires domains >= 1")


@pytest.mark.timeout(60)
def test_the_size_comes_from_input_files_as_for_run(capsys, machine_file, tmp_path):
    import numpy as np

    assert main(["simulate", "gemm", "--machine", str(machine_file)]) == 2
    assert capsys.readouterr().err.strip() == (
        "tiledsl: error: give --n (the matrix order) or --input NAME=FILE.npy for one of A, B, C")
    np.save(tmp_path / "a.npy", np.zeros((70, 40)))
    np.save(tmp_path / "c.npy", np.zeros((70, 90)))
    result = simulate(capsys, "gemm", "--input", f"A={tmp_path / 'a.npy'}", "--input", f"C={tmp_path / 'c.npy'}",
                      "--nb", 32, "--machine", machine_file)
    assert result["n"] == 90 and result["tasks"] == 2 * 3  # a panel gemm per tile column of A (k = 40) and of C
    assert result["params"] == {"m": 70, "k": 40}
    result = simulate(capsys, "gemm", "--input", f"A={tmp_path / 'a.npy'}", "--n", 90, "--nb", 32,
                      "--machine", machine_file)  # m and k the file's, as the Python API infers them with n=90
    assert (result["n"], result["params"]) == (90, {"m": 70, "k": 40})
    assert main(["simulate", "gemm", "--input", f"A={tmp_path / 'a.npy'}", "--n", "90", "--nb", "32",
                 "--set", "m=50", "--machine", str(machine_file)]) == 2  # no k fits: the file checked against m, k = n
    assert capsys.readouterr().err.strip() == (f"tiledsl: error: input file '{tmp_path / 'a.npy'}' has shape (70, 40) "
                                               f"but the matrix needs shape (50, 90) (the input files fit n=90, m=70, "
                                               f"k=40: leave --set m=50 out)")
    assert main(["simulate", "gemm", "--input", f"A={tmp_path / 'a.npy'}", "--input", f"C={tmp_path / 'c.npy'}",
                 "--nb", "32", "--machine", str(machine_file)]) == 0
    assert capsys.readouterr().out.startswith("gemm: n=90 nb=32 m=70 k=40, simulated on 1 rank(s)")


@pytest.mark.timeout(120)
def test_the_summary_says_how_tile_columns_were_dealt_to_host_and_gpus(capsys):
    """The default ratio (the machine file's gemm rates) decides much of a prediction (a late column
    on the host doubled one): the text summary says it, as --json did."""
    assert main(["simulate", "cholesky", "--n", "2304", "--nb", "576", "--machine", "keeneland", "--gpus", "3"]) == 0
    assert "  gpus      tile columns dealt host:GPUs 1:3 (--gpu-ratio to choose;" in capsys.readouterr().out
    assert main(["simulate", "cholesky", "--n", "2304", "--nb", "576", "--machine", "keeneland", "--gpus", "3",
                 "--gpu-ratio", "0:1"]) == 0
    assert "host:GPUs 0:1" in capsys.readouterr().out


@pytest.mark.timeout(120)
def test_gpu_ratio_takes_the_machine_files_gpus(capsys, machine_file):
    """--gpu-ratio needed --gpus repeated, though --gpus defaults to the machine file's."""
    result = simulate(capsys, "cholesky", "--n", 2304, "--nb", 576, "--nodes", 2, "--machine", "keeneland",
                      "--gpu-ratio", "0:1")
    assert (result["gpus"], result["gpu_ratio"]) == (3, "0:1")
    assert [rank["tasks_by_device"]["host"] for rank in result["ranks"]] == [0, 0]
    for machine_args in (("--machine", "local"), ("--machine", str(machine_file), "--gpus", "0")):
        assert main(["simulate", "cholesky", "--n", "500", "--gpu-ratio", "1:1", *machine_args]) == 2
        assert capsys.readouterr().err.strip().startswith("tiledsl: error: --gpu-ratio needs ")


def test_a_ratio_without_gpu_columns_is_advised_gpus_0(capsys):
    """--gpu-ratio 0:0 advised leaving out --gpus, which simulate then takes from the machine file (run's
    --gpus defaults to 0: there the advice stands)."""
    for gpus in ((), ("--gpus", "2")):
        assert main(["simulate", "cholesky", "--n", "600", "--machine", "keeneland", "--gpu-ratio", "0:0", *gpus]) == 2
        assert "G must be at least 1 (to keep every tile on the host, give --gpus 0; " in capsys.readouterr().err
    assert main(["run", "cholesky", "--n", "600", "--gpus", "1", "--gpu-ratio", "0:0"]) == 2
    assert "G must be at least 1 (to keep every tile on the host, leave out --gpus; " in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_a_grid_alone_gives_the_ranks(capsys, machine_file):
    """--grid 2x2 alone was refused (--nodes is 1), though the --np hint says it gives the ranks."""
    result = simulate(capsys, "cholesky", "--n", 800, "--nb", 100, "--grid", "2x2", "--machine", machine_file)
    assert (result["np"], result["grid"], len(result["ranks"])) == (4, [2, 2], 4)
    with pytest.raises(SystemExit):
        main(["simulate", "cholesky", "--n", "800", "--np", "4", "--machine", str(machine_file)])
    assert "(a simulated run's ranks: --nodes N, or --grid PxQ)" in capsys.readouterr().err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("nb", ["0", "-5"])
def test_a_bad_tile_size_is_said_before_the_missing_rates_of_this_machine(capsys, tmp_path, monkeypatch, nb):
    """It said to run tiledsl tune first, as if the size were fine."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert main(["simulate", "cholesky", "--n", "300", f"--nb={nb}"]) == 2
    assert capsys.readouterr().err.strip() == f"tiledsl: error: --nb must be from 1 to 2**63 - 1, got {nb}"


@pytest.mark.timeout(60)
def test_a_rank_counts_no_flops_where_the_checks_formula_does_as_in_a_run(capsys, machine_file):
    result = simulate(capsys, "cholesky", "--n", 500, "--nb", 100, "--nodes", 2, "--machine", machine_file)
    assert [(rank["flops"], rank["uncounted"]) for rank in result["ranks"]] == [(None, None), (None, None)]
    assert result["flops_source"] == "standard" and result["gflops"] > 0
    result = simulate(capsys, "gemm", "--n", 256, "--nb", 128, "--nodes", 2, "--machine", machine_file)
    assert result["flops_source"] == "kernels"  # no check's count: the tasks' own, each rank's
    assert sum(rank["flops"] for rank in result["ranks"]) == 2 * 256 ** 3


@pytest.mark.timeout(60)
def test_the_summary_says_where_each_tile_setting_came_from(capsys, machine_file):
    """sources was null, and --help said a tuned tile size was the default even with --machine."""
    result = simulate(capsys, "cholesky", "--n", 2304, "--nb", 576, "--machine", "keeneland")
    assert result["sources"] == {"nb": "command line", "gpu_ratio": "keeneland's gemm rates"}
    result = simulate(capsys, "cholesky", "--n", 500, "--machine", machine_file, "--gpus", 0)
    assert result["sources"] == {"nb": "program default"}
    assert main(["simulate", "cholesky", "--n", "2304", "--machine", "keeneland", "--gpu-ratio", "1:3"]) == 0
    assert "  settings  nb=256: program default; gpu-ratio 1:3: command line\n" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    assert "(default: without --machine, this machine's tuned one" in " ".join(capsys.readouterr().out.split())


@pytest.mark.timeout(60)
def test_a_note_says_when_tile_columns_were_dealt_far_from_the_ratio(capsys, machine_file):
    """On many nodes a rank holds fewer tile columns than a cycle of the ratio: the host got half the
    tasks and two GPUs none, while the summary said only host:GPUs 1:4."""
    result = simulate(capsys, "cholesky", "--n", 9216, "--nb", 1152, "--grid", "1x4", "--machine", "keeneland")
    assert result["gpu_ratio"] == "1:4" and result["notes"] == [
        "the host holds 4 of the 8 tile columns (host:GPUs 1:4 deals it 8%), gpu2, gpu3 hold none: each rank deals "
        "its own tile columns in cycles of 13 (1 to the host first), so a rank holding fewer than 13 leaves GPUs "
        "short; compare with --gpu-ratio 0:1"]
    assert [rank["tasks_by_device"]["gpu3"] for rank in result["ranks"]] == [0] * 4
    result = simulate(capsys, "cholesky", "--n", 9216, "--nb", 1152, "--grid", "1x4", "--machine", "keeneland",
                      "--gpu-ratio", "0:1")
    assert result["notes"] == ["gpu3 holds none: each rank deals its own tile columns in cycles of 3 (0 to the host "
                               "first), so a rank holding fewer than 3 leaves GPUs short"]
    result = simulate(capsys, "cholesky", "--n", 9216, "--nb", 576, "--machine", "keeneland")
    assert result["notes"] == []  # 16 tile columns on one rank: the host has 2, each GPU 4 or 5


@pytest.mark.timeout(60)
def test_a_trace_replaces_only_a_trace_and_never_the_program(capsys, tmp_path, monkeypatch):
    """--trace overwrote any file: notes, the .tile it simulated, its kernel module (as run refuses to)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.tile").write_text((ROOT / "programs/cholesky.tile").read_text())
    (tmp_path / "notes.txt").write_text("mine\n")
    args = ["simulate", "p.tile", "--n", "300", "--nb", "100", "--machine", "keeneland", "--trace"]
    assert main([*args, "p.tile"]) == 2
    assert capsys.readouterr().err == ("tiledsl: error: --trace p.tile: that is p.tile, a file of the program itself, "
                                       "which the output would replace: name another file\n")
    assert main([*args, "notes.txt"]) == 2
    assert capsys.readouterr().err == ("tiledsl: error: --trace notes.txt: notes.txt is there and is not a trace an "
                                       "earlier run wrote: it replaces only those; name another file, or remove it "
                                       "first\n")
    assert (tmp_path / "notes.txt").read_text() == "mine\n" and "program cholesky" in (tmp_path / "p.tile").read_text()
    assert main([*args, "t.json"]) == 0 and main([*args, "t.json"]) == 0  # a trace it wrote: replaced
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]


@pytest.mark.timeout(60)
def test_the_json_has_run_json_s_verdict(capsys, machine_file):
    """docs/cluster.md: one line shaped like run --json's; it had no ok, passed nor errors."""
    predicted = simulate(capsys, "cholesky", "--n", 400, "--nb", 100, "--machine", machine_file)
    assert (predicted["ok"], predicted["passed"], predicted["errors"]) == (True, None, [])


@pytest.mark.timeout(60)
def test_a_corrupt_tuning_cache_is_warned_of_once(capsys, tmp_path, monkeypatch):
    """simulate read the cache for its tile sizes, then for this machine's rates, and warned at each read."""
    from tiledsl.runtime import tuning

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("TILEDSL_NO_TUNE", raising=False)
    tuning.cache_path().parent.mkdir(parents=True)
    tuning.cache_path().write_text("{ not json")
    assert main(["simulate", "cholesky", "--n", "400", "--nb", "100"]) == 2  # no rates for this machine without tune
    assert capsys.readouterr().err.count("ignoring the corrupt tuning cache") == 1


@pytest.mark.timeout(60)
def test_gpus_a_hybrid_tiling_gives_no_block_are_noted_as_a_run_notes_them(capsys):
    """run warned that GPUs held no tile (hybrid tiles at this size); simulate said nothing."""
    result = simulate(capsys, "hetero_cholesky", "--n", 1500, "--nodes", 2, "--gpus", 3, "--machine", "keeneland")
    assert [rank["gpus_without_tiles"] for rank in result["ranks"]] == [[3], [2, 3]]
    assert "rank 0: GPU 3; rank 1: GPU 2, 3 held no tile and ran no task: the hybrid tiling gave them no block " \
           "column that a task touches at this size (a smaller B, or a larger n, gives more)" in result["notes"]


@pytest.mark.timeout(60)
def test_gpus_dealt_only_columns_no_task_touches_are_noted_as_a_run_notes_them(capsys, tmp_path):
    """A program touching tile column 0 only, on 3 GPUs at 1:1: run warned that the GPUs ran nothing,
    simulate (whose dealing note finds nothing far from the ratio) said nothing."""
    (tmp_path / "one.tile").write_text("program one {\n  tiling uniform(nb = 100)\n  matrix A[n, n] = random spd\n"
                                       "  potrf(A[0, 0])\n  for m in 1 .. A.mt { trsm(A[0, 0], A[m, 0]) }\n}\n")
    result = simulate(capsys, str(tmp_path / "one.tile"), "--n", 800, "--gpus", 3, "--gpu-ratio", "1:1",
                      "--machine", "keeneland")
    assert result["notes"] == ["GPU 1, 2, 3 held no tile and ran no task: the host:GPU ratio 1:1 dealt them no tile "
                               "column that a task touches at this size (--gpu-ratio 0:1 gives the GPUs every column)"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("count", ["alpha * alpha", "alpha * alpha - alpha * alpha"])
def test_a_flop_count_that_is_not_finite_is_said_at_its_call(tmp_path, capsys, count):
    """A user kernel's flop count of inf (or NaN) for a task: run said only 'no GFLOP/s'; simulate ended in
    'internal error: simulated ranks [0] never finished (a bug of the simulator)', exit 3, --json printing nothing.
    Both now fail as at a negative count."""
    (tmp_path / "k.py").write_text("def scale(A, alpha):\n    A *= 1.0\n")
    (tmp_path / "inf.tile").write_text(f'use "k.py"\nkernel scale(inout A, float alpha = 2.0) flops {count}\n'
                                       "program inf {\n  tiling uniform(nb = 100)\n  matrix A[n, n] = random general\n"
                                       "  for i in 0 .. A.mt { scale(A[i, 0], 1e300) }\n}\n")
    assert main(["simulate", str(tmp_path / "inf.tile"), "--n", "300", "--machine", "local", "--json"]) == 1
    out = capsys.readouterr()
    said = json.loads(out.out.strip().splitlines()[-1])["error"]
    assert said.startswith("inf.tile:6: the flop count of kernel scale is ") and \
        ", no finite number (in `scale(A[i, 0], 1e+300)`, with i = 0)" in said, said


@pytest.mark.timeout(120)
@pytest.mark.parametrize("broadcast", ["direct", "tree"])
def test_the_device_copies_said_are_those_the_simulation_made(tmp_path, capsys, broadcast):
    """With tree broadcasts and GPUs the summary's device_copies were the direct protocol's ([88, 80, 69, 55]),
    where the simulation's own trace, and a real run, made [82, 76, 66, 53]: a tree's forwarding changes which
    rank stages a GPU tile to the host for a send."""
    machine = tmp_path / "m.json"
    machine.write_text('{"name": "g3", "cores": 4, "gpus": 3, "cpu": {"default": 10}, "gpu": {"default": 100}, '
                       '"network": {"latency_us": 2, "bandwidth_gbs": 24}, '
                       '"pcie": {"latency_us": 8, "bandwidth_gbs": 8}}')
    summary = simulate(capsys, "cholesky", "--n", 1200, "--nb", 100, "--grid", "1x4", "--gpus", 3, "--gpu-ratio",
                       "1:1", "--no-tune", "--machine", machine, "--broadcast", broadcast,
                       "--trace", tmp_path / "t.json")
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    made = Counter(e["pid"] for e in events if e.get("ph") == "X" and e.get("name") == "copy")
    assert [r["device_copies"] for r in summary["ranks"]] == [made[r["rank"]] for r in summary["ranks"]]


@pytest.mark.timeout(60)
def test_a_long_simulation_says_how_long_it_may_take_before_it_starts(capsys, monkeypatch):
    """A Cholesky of 10**8 tasks simulated for hours without a word (no progress off a terminal)."""
    from tiledsl.commands import simulate as command

    monkeypatch.setattr(command, "LONG_SIMULATION", 1000)  # 12×12 tiles: 1,884 iterations at most
    assert main(["simulate", "cholesky", "--n", "1200", "--nb", "100", "--machine", "keeneland", "--json"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("tiledsl: note: the loop nest runs up to ") and " iterations: at some 50 µs a task, the " \
        "simulation may take up to 0 minutes (a smaller --n or larger tiles simulate faster; Ctrl-C stops it)" in err
    monkeypatch.setattr(command, "LONG_SIMULATION", 10 ** 7)
    assert main(["simulate", "cholesky", "--n", "1200", "--nb", "100", "--machine", "keeneland", "--json"]) == 0
    assert capsys.readouterr().err == ""


def test_the_progress_line_is_blanked_before_the_summary(capsys):
    """On a terminal the summary was printed onto the last 'walked N tasks' line."""
    from tiledsl.commands.simulate import _Progress

    progress = _Progress()
    progress.clear()  # nothing shown: nothing to blank
    progress(262144)
    progress.clear()
    assert capsys.readouterr().err == "\r  walked 262144 tasks\r" + " " * len("  walked 262144 tasks") + "\r"


@pytest.mark.timeout(60)
def test_kernels_without_a_gpu_body_are_said_to_leave_the_gpus_idle_as_a_run_says(capsys, machine_file, tmp_path):
    """A run warned that no task ran on a GPU, its kernels having no GPU body; the simulation of the
    same run, every task on a host, said nothing of it."""
    (tmp_path / "k.py").write_text("def mm(A, B, C):\n    C -= A @ B.T\n")
    (tmp_path / "mm.tile").write_text('use "k.py"\nkernel mm(in A, in B, inout C) flops 2 * A.m * A.n * B.m\n'
                                      "program mm {\n  tiling uniform(nb = 200)\n  matrix A[n, n] = random general\n"
                                      "  matrix C[n, n] = zeros\n"
                                      "  for i in 0 .. C.mt { for j in 0 .. C.nt { mm(A[i, 0], A[j, 0], C[i, j]) } }\n}\n")
    result = simulate(capsys, tmp_path / "mm.tile", "--nodes", 2, "--gpus", 1, "--gpu-ratio", "1:1", "--machine",
                      machine_file, "--n", 2000)
    assert all(set(rank["tasks_by_device"]) == {"host", "gpu1"} and not rank["tasks_by_device"]["gpu1"]
               for rank in result["ranks"])
    assert ("--gpus 1: no task ran on a GPU: kernel(s) mm have no GPU body, so every task ran on a host, the GPUs "
            "holding tiles for nothing") in " ".join(result["notes"]), result["notes"]
    # without --gpus, the machine file's GPUs: said as its (tester z80b: "--gpus 2", never given)
    result = simulate(capsys, tmp_path / "mm.tile", "--machine", machine_file, "--n", 2000)
    assert result["gpus"] == 2 and "--gpus" not in " ".join(result["notes"]).split("`")[0], result["notes"]
    assert ("test node's 2 GPU(s): no task ran on a GPU: kernel(s) mm have no GPU body") in " ".join(result["notes"])


def test_this_machine_counts_its_cores_at_the_rate_they_ran_together(monkeypatch):
    """Tester y: on a 2-core VM simulate predicted runs twice as fast as they were, right after tune: each core
    was counted at its rate alone. tune keeps the rate a core ran the dominant kernel at in its chosen run
    (tune.cores_shared), and this machine's rates are scaled by it, memory included."""
    from tiledsl.api import load
    from tiledsl.commands.tune import cores_shared
    from tiledsl.simulation import machine as machines

    alone = {"gemm": {"256": 25.0, "384": 35.0}, "potrf": {"256": 5.0}, "mine": {"320": 8.0}}
    shared = cores_shared({"gemm": {"320": 20.0}}, "gemm", alone)
    assert shared == {"kernel": "gemm", "size": 320, "in_run": 20.0, "alone": 30.0, "factor": 0.667}
    assert cores_shared({}, "gemm", alone) is None and cores_shared({"gemm": {"320": 40.0}}, "gemm", alone)[
        "factor"] == 1.0
    entry = {"speeds": {"core": alone}, "measured_in_run": ["mine"], "shared_cores": shared}
    monkeypatch.setattr(machines.tuning, "entry", lambda *args: entry)
    local = machines.this_machine(load("cholesky").driver.PROGRAM, 0, "emulated")
    assert local.cpu.gflops("gemm", 256) == pytest.approx(25.0 * 0.667)
    assert local.cpu.gflops("potrf", 256) == pytest.approx(5.0 * 0.667)
    assert local.cpu.gflops("mine", 320) == 8.0  # timed in a run already: as it ran
    assert local.in_run == {"gemm", "potrf", "mine"} and "0.67 of its rate alone" in local.name
    del entry["shared_cores"]
    local = machines.this_machine(load("cholesky").driver.PROGRAM, 0, "emulated")
    assert local.cpu.gflops("gemm", 256) == 25.0 and local.in_run == {"mine"}


@pytest.mark.timeout(60)
def test_times_past_ten_million_seconds_are_written_with_an_exponent(capsys, machine_file, tmp_path):
    """Flop counts near the float range (each finite, their sum inf) model times of 10³⁰⁰ s: they were
    printed with all their hundreds of digits."""
    (tmp_path / "k.py").write_text("def scale(A, alpha):\n    A *= alpha\n")
    (tmp_path / "o.tile").write_text('use "k.py"\nkernel scale(inout A, float alpha = 1.0) flops alpha * A.m\n'
                                     "program o {\n  tiling uniform(nb = 64)\n  matrix A[n, n] = random general\n"
                                     "  for i in 0 .. A.mt { scale(A[i, 0], 1.5e306) }\n}\n")
    status = main(["simulate", str(tmp_path / "o.tile"), "--n", "150", "--machine", str(machine_file)])
    out = capsys.readouterr().out
    assert status == 0
    time_line = next(line for line in out.splitlines() if line.startswith("  time"))
    assert "e+" in time_line and len(time_line) < 160, time_line

