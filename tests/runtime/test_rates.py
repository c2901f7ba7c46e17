"""Kernel rates measured inside a run (``rates.KernelClock``, ``Options.time_kernels``).

The clock counts the CPU workers' program tasks against their modelled flops; a
real run reports each kernel's rate at the size of its average task.
"""
from types import SimpleNamespace

import pytest

from tiledsl.runtime import Options, execute
from tiledsl.runtime.program import Call
from tiledsl.runtime.rates import KernelClock


def _task(call, values=()):
    return SimpleNamespace(call=call, values=values)


def _ran(clock, task, lane: str, seconds: float, shapes: list) -> None:
    """What a worker does: measure outside the engine's lock, add under it."""
    measured = clock.measure(task, lane, shapes)
    if measured is not None:
        clock.add(measured, seconds)


@pytest.mark.timeout(10)
def test_the_clock_rates_a_kernel_by_its_flops_over_its_seconds_on_cpu_workers():
    gemm = Call("gemm", ("in", "in", "inout"), main=2, line=3, text="gemm(...)")
    clock = KernelClock()
    for _ in range(4):
        _ran(clock, _task(gemm), "cpu-0", 0.002, [(100, 100)] * 3)  # 2·10⁶ flops in 2 ms: 1 GFLOP/s
    _ran(clock, _task(gemm), "gpu-1", 1e-6, [(100, 100)] * 3)  # a GPU kernel returns at launch: not counted
    assert clock.rates() == {"gemm": {"100": 1.0}}


def test_a_slow_kernels_rate_keeps_its_digits():
    """Rounded to three places, 6e-05 GFLOP/s was saved as 0.0, which every later run refused."""
    gemm = Call("gemm", ("in", "in", "inout"), main=2, line=3, text="gemm(...)")
    clock = KernelClock()
    _ran(clock, _task(gemm), "cpu-0", 20.0, [(100, 100)] * 3)  # 2·10⁶ flops in 20 s: 1e-4 GFLOP/s
    assert clock.rates() == {"gemm": {"100": 1e-4}}


@pytest.mark.timeout(10)
def test_a_kernel_without_a_count_is_rated_as_the_simulator_times_it_and_one_without_flops_not_at_all():
    mine = Call("mine", ("in", "inout"), main=1, line=4, text="mine(...)")  # no count: a gemm on 200×50
    laswp = Call("laswp", ("inout",), main=0, line=5, text="laswp(...)", values=("k",), order="tv")
    clock = KernelClock()
    _ran(clock, _task(mine), "cpu-1", 0.01, [(10, 10), (200, 50)])
    _ran(clock, _task(laswp, (1,)), "cpu-0", 0.01, [(64, 64)])
    flops = 2.0 * (200 * 50) ** 1.5
    assert clock.rates() == {"mine": {str(round((flops / 2) ** (1 / 3))): round(flops / 0.01 / 1e9, 3)}}


@pytest.mark.timeout(60)
def test_a_run_told_to_time_its_kernels_reports_each_ones_rate(compiled):
    driver = compiled("programs/cholesky.tile")
    timed = execute(driver, Options(n=384, tiles={"nb": 128}, workers=2, time_kernels=True))
    assert set(timed.kernel_rates) == {"potrf", "trsm", "syrk", "gemm"}
    assert all(list(r) == ["128"] and 0 < r["128"] < 1e4 for r in timed.kernel_rates.values()), timed.kernel_rates
    assert execute(driver, Options(n=384, tiles={"nb": 128}, workers=2)).kernel_rates == {}


@pytest.mark.timeout(10)
def test_a_flop_count_that_fails_leaves_the_task_uncounted_rather_than_failing_the_worker():
    def count(a):
        return 1 / (a[0] - 100)
    mine = Call("mine", ("inout",), main=0, line=4, text="mine(...)", flops=count)
    clock = KernelClock()
    _ran(clock, _task(mine), "cpu-0", 0.01, [(100, 100)])  # 1 / 0
    _ran(clock, _task(mine), "cpu-0", 0.01, [(101, 100)])  # one flop in 10 ms
    assert clock.rates() == {}  # 1e-7 GFLOP/s: below what a rate can be
    assert clock.spent == {"mine": [1, 0.01, 1.0]}


def test_a_rate_ceiling_is_the_best_timed_up_to_the_next_size_and_none_past_the_last():
    """The bound of a run at nb = 448 took gemm's low reading there (33.75 against 57 at 384), and at
    nb = 500 the rate timed at 64, the largest size tuned: runs came out at 1.4 and 2.3 of their bound."""
    from tiledsl.runtime.rates import Rates

    timed = Rates({"gemm": {64: 20.0, 256: 57.0, 384: 55.0, 448: 33.75}}, "core")
    assert [timed.ceiling("gemm", size) for size in (32, 64, 100, 256, 400, 448, 449)] == [
        20.0, 20.0, 57.0, 57.0, 57.0, 57.0, None]
    assert Rates({"gemm": 40.0}, "core").ceiling("gemm", 10_000) == 40.0  # one number: every size


def test_emulated_gpus_count_only_the_cores_the_workers_leave():
    """2 cores, 1 worker and 1 emulated GPU per rank on 4 ranks were bounded as 4 × (core + GPU): the
    emulated GPUs run on the same cores."""
    from tiledsl.runtime.rates import upper_bound

    speeds = {"core": {"gemm": {128: 40.0}}, "gpu": {"gemm": {128: 50.0}}}
    assert upper_bound(speeds, 128, 1, 1, 1) == 90.0  # a GPU of its own
    assert upper_bound(speeds, 128, 1, 1, 1, cores=2) == 90.0  # one core left for it
    assert upper_bound(speeds, 128, 0.5, 1, 4, cores=0.5) == 4 * 0.5 * 40.0  # none left
    assert upper_bound(speeds, 1024, 1, 1, 1) is None  # a tile past those timed
