"""--host-takes: idle CPU workers taking GPU tasks (runtime.heteroprio).

The choice is a pure function of the ready queues and the estimates (tested alone);
runs on emulated GPUs take tasks and give bitwise the results of runs that do not,
sub-ranges and user kernels with GPU bodies included, on one and two ranks.
"""
import functools
import heapq
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tiledsl.api import load
from tiledsl.runtime import Options, UsageError, execute, tuning
from tiledsl.runtime.devices import EmulatedBackend
from tiledsl.runtime.exchange import read_whole
from tiledsl.runtime.heteroprio import Costs, choose, round_trip_bytes, take
from tiledsl.runtime.program import Call
from tiledsl.runtime.rates import Rates
from tiledsl.runtime.scheduler import Scheduler, Task

ROOT = Path(__file__).resolve().parents[2]


class Tile:
    def __init__(self, shape=(4, 4)):
        self.shape = shape


def _task(kernel, priority, device=1, host=True):
    task = Task(Call(kernel, ("inout",), main=0, line=1, text=kernel), (Tile(),), None, priority, device)
    task.host_kernel = (lambda a: None) if host else None
    return task


def _queues(*per_gpu):
    """Ready queues: the host's (empty), then each GPU's, as the scheduler keeps them."""
    queues = [[]]
    seq = 0
    for tasks in per_gpu:
        queue = []
        for task in tasks:
            heapq.heappush(queue, (-task.priority, seq, task))
            seq += 1
        queues.append(queue)
    return queues


COSTS = {"potrf": (3.0, 1.0), "trsm": (4.0, 0.5), "gemm": (10.0, 0.5)}  # (host s, GPU s)


def _costs(task):
    return COSTS[task.call.kernel]


def test_a_task_the_gpu_would_finish_sooner_stays():
    queues = _queues([_task("potrf", 10)])
    assert choose(queues, _costs) is None  # 3 s on a core against 1 s on the GPU
    assert choose(queues, _costs, busy=[0.0, 1.5]) is None  # still 2.5 s on the GPU
    assert choose(queues, _costs, busy=[0.0, 2.0])[1].call.kernel == "potrf"  # the GPU is busy 2 s more


def test_the_lowest_acceleration_among_those_the_host_finishes_no_later():
    # GPU time ahead, in priority order: potrf 1.5 s, trsm 2 s, the gemms 2.5 ... 12 s, the last trsm 12.5 s
    tasks = [_task("potrf", 9), _task("trsm", 8)] + [_task("gemm", 7 - i) for i in range(20)] + [_task("trsm", -20)]
    device, chosen = choose(_queues(tasks), _costs, busy=[0.0, 0.5])
    # the gemms from the 16th on fit (10 s on a core) but accelerate 20x; the last trsm fits and accelerates 8x
    assert device == 1 and chosen.call.kernel == "trsm" and chosen.priority == -20
    assert choose(_queues(tasks[:-1]), _costs, busy=[0.0, 0.5])[1].priority == 7 - 15


def test_ties_go_to_the_highest_priority_and_every_gpu_is_looked_at():
    first = [_task("gemm", 1) for _ in range(30)]
    second = [_task("trsm", 3) for _ in range(10)] + [_task("trsm", 2) for _ in range(10)]
    device, chosen = choose(_queues(first, second), _costs)
    # on GPU 2 every trsm from the eighth on has 4 s ahead; the first of them in priority order wins
    assert device == 2 and chosen.call.kernel == "trsm" and chosen.priority == 3
    assert sorted(_queues(first, second)[2])[7][2].priority == 3


def test_tasks_without_a_host_body_are_never_taken_but_count_ahead():
    queues = _queues([_task("gemm", 9, host=False)] * 1 + [_task("potrf", 1)])
    assert choose(queues, _costs, busy=[0.0, 1.5])[1].call.kernel == "potrf"  # 1.5 + 0.5 + 1 >= 3
    assert choose(_queues([_task("potrf", 1, host=False)]), _costs, busy=[0.0, 9.0]) is None


def test_take_removes_the_task_and_keeps_the_queue_a_heap():
    scheduler = Scheduler(64, devices=2)
    tasks = [_task("gemm", p) for p in (5, 1, 4, 2, 3)] + [_task("potrf", 0)]
    for task in tasks:
        task.tiles = (_ProxyTile(),)
        scheduler.submit(task)
    taken = take(scheduler, _costs, busy=[0.0, 3.0])
    assert taken is tasks[-1]  # potrf: 3 + 2.5 of GPU time ahead of it
    assert [scheduler.pop(1).priority for _ in range(5)] == [5, 4, 3, 2, 1]
    assert take(scheduler, _costs) is None


class _ProxyTile:
    def __init__(self):
        self.writer, self.readers = None, {}


def test_costs_from_rates_count_the_copies_both_ways():
    costs = Costs(Rates({"gemm": 10.0}, "core"), Rates({"gemm": 100.0}, "gpu"), copy_rate=1e9)
    call = Call("gemm", ("in", "in", "inout"), main=2, line=3, text="gemm")
    task = Task(call, (Tile((100, 100)),) * 3, None, 0, 1)
    host, gpu = costs(task)
    flops = 2 * 100 ** 3
    assert round_trip_bytes(call, [(100, 100)] * 3) == 8 * 100 * 100 * 4
    assert host == pytest.approx(flops / 10e9 + 8 * 100 * 100 * 4 / 1e9)
    assert gpu == pytest.approx(flops / 100e9)


def test_costs_of_a_task_reading_a_copy_of_a_sub_range_are_the_sub_ranges():
    """A GPU task reading a copy that is the sub-range itself reads the copy whole (its ``regions``):
    it was costed as the whole tile's work (a 100x100 gemm where the call names 100x10 parts)."""
    costs = Costs(Rates({"gemm": 10.0}, "core"), Rates({"gemm": 100.0}, "gpu"), copy_rate=1e9)
    call = Call("gemm", ("in", "in", "inout"), main=2, line=3, text="gemm")
    part = (slice(0, 100), slice(0, 10))
    task = Task(call, (Tile((100, 100)),) * 3, (part, (slice(0, 10), slice(0, 100)), None), 0, 1)
    task.regions = read_whole(task.regions, 0)  # as exchange and the GPU caches do
    host, gpu = costs(task)
    assert gpu == pytest.approx(2 * 100 * 100 * 10 / 100e9)


# ---------------------------------------------------------------- runs on emulated GPUs
@pytest.fixture
def slow_gpu_rates(tmp_path, monkeypatch):
    """A tune cache whose GPU rates make every queued GPU task worth taking."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def store(program, gpus):
        """Rates for ``program``, a compiled one's PROGRAM or a shipped one's name."""
        program = load(ROOT / f"programs/{program}.tile").program if isinstance(program, str) else program
        speeds = {"core": {"gemm": 40.0, "default": 30.0}, "gpu": {"gemm": 0.4, "default": 0.3}}
        tuning.store(tuning.entry_key(tuning.program_key(program), gpus, "emulated"),
                     {"program": program.name, "speeds": speeds})
    return store


@pytest.fixture
def slow_emulated_gpus(monkeypatch):
    """Emulated GPU kernels that take a few milliseconds, so GPU queues hold tasks while CPU workers
    idle however loaded the machine is (a hybrid run keeps its cores busy with small tiles otherwise)."""
    on_gpu = EmulatedBackend._on_gpu

    def slowly(self, kernel, name):
        run = on_gpu(self, kernel, name)

        @functools.wraps(run)
        def slow(*arguments, **keywords):
            time.sleep(0.003)
            return run(*arguments, **keywords)
        return slow
    monkeypatch.setattr(EmulatedBackend, "_on_gpu", slowly)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("program, tiles, gpus", [
    ("programs/cholesky.tile", {"nb": 96}, 1), ("programs/qr.tile", {"nb": 96}, 2),
    ("programs/hetero_cholesky.tile", {"B": 160, "b": 48, "s": 3}, 2), ("programs/getrf.tile", {"nb": 96}, 1),
    ("tests/runtime/programs/halo.tile", {"nb": 8}, 2)])
def test_runs_taking_gpu_tasks_give_the_same_bits(compiled, slow_gpu_rates, slow_emulated_gpus, program, tiles, gpus):
    driver = compiled(program)
    slow_gpu_rates(driver.PROGRAM, gpus)
    n = 45 if "halo" in program else 517
    ratio = (0, 1) if "nb" in tiles else None
    base = Options(n=n, tiles=tiles, gpus=gpus, workers=2, gpu_ratio=ratio, watchdog=60,
                   check=driver.PROGRAM.check is not None)
    alone = execute(driver, base)
    taking = execute(driver, Options(**{**base.__dict__, "host_takes": True, "gpu_streams": 2}))
    assert taking.host_takes and taking.stats["host_took"] > 0
    assert not alone.host_takes and alone.stats["host_took"] == 0
    assert taking.passed is not False
    for name, matrix in alone.matrices.items():
        assert np.array_equal(matrix.assemble(), taking.matrices[name].assemble()), name


@pytest.mark.timeout(120)
def test_out_of_core_runs_leave_placement_to_the_cache(compiled, slow_gpu_rates):
    driver = compiled("programs/cholesky.tile")
    slow_gpu_rates("cholesky", 1)
    result = execute(driver, Options(n=400, tiles={"nb": 100}, gpus=1, gpu_ratio=(0, 1), gpu_memory=300_000,
                                     host_takes=True, check=True))
    assert result.passed and not result.host_takes and result.stats["host_took"] == 0
    assert result.host_takes_out_of_core


def test_without_tuned_rates_the_run_is_refused(compiled, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(UsageError, match=r"--host-takes on needs this machine's kernel rates on a core and a "
                                         r"GPU: run `tiledsl tune \S*programs/cholesky.tile --gpus 1 --gpu-backend "
                                         r"emulated` first"):
        execute(compiled("programs/cholesky.tile"), Options(n=200, tiles={"nb": 100}, gpus=1, host_takes=True))


@pytest.mark.timeout(200)
def test_two_ranks_take_gpu_tasks_and_say_so(tmp_path, slow_gpu_rates):
    slow_gpu_rates("cholesky", 1)
    common = ["programs/cholesky.tile", "--n", "517", "--nb", "96", "--gpus", "1", "--gpu-ratio", "0:1",
              "--workers", "2", "--watchdog", "60"]

    def run(*extra, np_=2):
        out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", *common, "--np", str(np_), *extra],
                             cwd=ROOT, capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, out.stderr
        return out.stdout

    summary = json.loads(run("--host-takes", "on", "--json", "--check", "--output", f"A={tmp_path / 'taking.npy'}",
                             "--trace", str(tmp_path / "taking.json")).strip().splitlines()[-1])
    assert summary["passed"] and summary["host_takes"]
    assert all(rank["host_took"] > 0 for rank in summary["ranks"])
    # a taken task's tiles are copied to the host and its written one back, counted and traced as the copy
    # thread's copies are (tester z80c: neither was): the tiles are all on the GPU (--gpu-ratio 0:1)
    events = json.loads((tmp_path / "taking.json").read_text())["traceEvents"]
    for rank in summary["ranks"]:
        copies = [e["args"] for e in events if e.get("name") == "copy" and e["pid"] == rank["rank"]]
        assert len(copies) == rank["device_copies"] >= 2 * rank["host_took"], rank
        assert sum(c["from"] == "gpu-1" for c in copies) >= rank["host_took"]
    assert summary["totals"]["host_took"] == sum(rank["host_took"] for rank in summary["ranks"])
    run("--output", f"A={tmp_path / 'alone.npy'}", np_=1)
    assert np.array_equal(np.load(tmp_path / "taking.npy"), np.load(tmp_path / "alone.npy"))
    text = run("--host-takes", "on")
    assert "; CPU workers took " in text and " GPU task(s)" in text


def test_a_taken_task_that_fails_says_where_it_ran():
    from tiledsl.runtime.engine import _task_failure

    task = _task("potrf", 1)
    task.call = Call("potrf", ("inout",), main=0, line=7, text="potrf(A[k, k])")
    task.tiles = ("A[2, 2]",)
    taken = _task_failure(task, ValueError("not positive definite"), 3, 0)
    assert str(taken).startswith("kernel potrf failed on A[2, 2] on a CPU worker, taken from GPU 1 "
                                 "(--host-takes) (potrf(A[k, k])): ValueError")
    assert taken.line == 7 and taken.rank == 3
    assert " on GPU 1 (potrf(A[k, k]))" in str(_task_failure(task, ValueError("x"), 3, 1))


@pytest.mark.timeout(200)
@pytest.mark.parametrize("empty_rank", [1, 0])
def test_rank_zero_reads_the_rates_for_every_rank(tmp_path, slow_gpu_rates, empty_rank):
    """Ranks on other nodes have no tune cache of this machine: every rank uses the rates rank 0
    read, as for the tuned settings; without them on rank 0, every rank stops with its message."""
    slow_gpu_rates("cholesky", 1)
    wrapper = tmp_path / "rank.sh"
    wrapper.write_text("#!/bin/bash\nr=${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-0}}\n"
                       f'if [ "$r" = "{empty_rank}" ]; then export XDG_CACHE_HOME={tmp_path / "empty"}; fi\n'
                       'exec "$@"\n')
    launcher = tmp_path / "launch.sh"
    launcher.write_text(f'#!/bin/bash\nn=$2; shift 2\nexec mpiexec -n $n {wrapper} "$@"\n')
    for script in (wrapper, launcher):
        script.chmod(0o755)
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "programs/cholesky.tile", "--n", "517",
                          "--nb", "96", "--gpus", "1", "--gpu-ratio", "0:1", "--np", "2", "--launcher", str(launcher),
                          "--host-takes", "on", "--json", "--watchdog", "60"],
                         cwd=ROOT, capture_output=True, text=True, timeout=180)
    if empty_rank:
        assert out.returncode == 0, out.stderr
        assert all(rank["host_took"] > 0 for rank in json.loads(out.stdout.strip().splitlines()[-1])["ranks"])
    else:
        assert out.returncode == 2 and "did not answer" not in out.stderr, out.stderr
        assert out.stderr.strip().splitlines()[-1] == (
            "tiledsl: error: --host-takes on needs this machine's kernel rates on a core and a GPU: run "
            "`tiledsl tune programs/cholesky.tile --gpus 1 --gpu-backend emulated` first")
