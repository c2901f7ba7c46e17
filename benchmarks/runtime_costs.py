"""Measure tiledsl's own costs on this machine: the ``runtime`` section of a machine file.

    python benchmarks/runtime_costs.py [--tiles 40] [--repeats 3]

* ``walk_us``: a rank's generation thread walking a task it takes no part in (the
  driver's ownership test, then the count of the written tiles' new versions
  under the engine's lock, as on a rank of a distributed run);
* ``submit_us``: the same thread submitting a task's share on rank 0 of a 2x2 grid, walking
  only its share as a run does (owner tasks, input sends and copies of remote tiles planned,
  the next write of every tile it reads from another rank looked up; nothing runs);
* ``task_us``: a CPU worker's cost per task: an empty-kernel program
  (``benchmarks/overhead.tile``) run on one worker, less the generation's share;
* ``transfer_us``: a transfer task's cost on a worker, taken as half a task's.

Cholesky on ``--tiles``² tiles of 64 gives the walk; best of ``--repeats`` rounds.
"""
from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path
from types import SimpleNamespace

from tiledsl.compiler import compile_path
from tiledsl.driverload import import_driver
from tiledsl.runtime import Options, execute
from tiledsl.runtime.dataflow import events_of
from tiledsl.runtime.engine import Engine
from tiledsl.runtime.layout import make_distribution, make_matrices, make_params
from tiledsl.runtime.recording import survey
from tiledsl.runtime.userkernels import kernels

ROOT = Path(__file__).resolve().parents[1]


def driver_of(path: Path, name: str):
    _, text = compile_path(path)
    target = Path("/tmp") / f"runtime_costs_{name}.py"
    target.write_text(text)
    return import_driver(target, f"runtime_costs_{name}")


class QuietComm:
    """A communicator that posts nothing: the generation thread's cost alone is measured."""

    def __init__(self, rank: int, size: int):
        self.rank, self.size, self.on_error = rank, size, None

    def send(self, *args):
        pass

    def receive(self, *args):
        pass


def generation(driver, options: Options, rank: int, grid: tuple[int, int], guided: bool):
    """One walk of the loop nest by ``rank`` of ``grid`` (of its share when ``guided``) with the real
    engine, nothing run: ``seconds`` (the thread's CPU time), ``shares`` (the tasks it submitted a
    share of), the ``engine``, and the rank's ``survey`` before it (``survey_seconds``). Every task
    stays in the window (nothing runs): the garbage collector is off meanwhile, as it would
    otherwise traverse them all, which a run's window of a few hundred tasks spares it."""
    params = make_params(driver, options)
    matrices = make_matrices(driver, params, make_distribution(driver.PROGRAM, params, grid, 0), rank)
    started = time.thread_time()
    found = survey(driver, matrices, params, rank, guided=guided)
    surveyed = time.thread_time() - started
    engine = Engine(driver.PROGRAM, kernels(driver.PROGRAM, driver), 1, window=1 << 30,
                    comm=QuietComm(rank, grid[0] * grid[1]), count_flops=False)
    engine.attach(matrices)
    if guided:
        engine.guide(events_of(driver, matrices, params))
    counter = SimpleNamespace(tasks=0)
    submit = engine.submit

    def counting(*args, **kwargs):
        counter.tasks += 1
        submit(*args, **kwargs)
    engine.submit = counting
    gc.collect()
    gc.disable()
    try:
        started = time.thread_time()  # the generation thread's own time, not other processes' on a shared machine
        driver.generate(engine, params)
        seconds = time.thread_time() - started
    finally:
        gc.enable()
    return SimpleNamespace(seconds=seconds, shares=counter.tasks, engine=engine, survey=found, survey_seconds=surveyed)


def generation_seconds(driver, n: int, rank: int, grid: tuple[int, int], guided: bool) -> tuple[float, int, int]:
    """Seconds of one walk on tiles of 64 (:func:`generation`), the tasks it submitted a share of,
    and the tasks its walk met."""
    walk = generation(driver, Options(n=n, tiles={"nb": 64}), rank, grid, guided)
    return walk.seconds, walk.shares, walk.survey.count + walk.survey.foreign


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiles", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cholesky = driver_of(ROOT / "programs/cholesky.tile", "cholesky")
    n = 64 * args.tiles
    total = args.tiles + args.tiles * (args.tiles - 1) + args.tiles * (args.tiles - 1) * (args.tiles - 2) // 6
    # rank 5 of 1x6 has no tile: its whole walk submits nothing
    walk = min(generation_seconds(cholesky, n, 5, (1, 6), False)[0] for _ in range(args.repeats)) / total
    seconds, submitted, met = min(generation_seconds(cholesky, n, 0, (2, 2), True) for _ in range(args.repeats))
    submit = (seconds - (met - submitted) * walk) / submitted
    overhead = driver_of(ROOT / "benchmarks/overhead.tile", "overhead")
    options = Options(n=64, tiles={"nb": 8}, sets={"steps": 40}, workers=1)
    run = min((execute(overhead, options) for _ in range(args.repeats)), key=lambda result: result.seconds)
    task = max(0.0, run.seconds / run.tasks - submit)
    costs = {"walk_us": round(walk * 1e6, 2), "submit_us": round(submit * 1e6, 1),
             "task_us": round(task * 1e6, 1), "transfer_us": round(task * 5e5, 1)}
    print(json.dumps(costs))


if __name__ == "__main__":
    main()
