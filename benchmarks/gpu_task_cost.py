"""The runtime's cost per task on the CPU and on a GPU: many tiny tasks against the kernel alone.

    python benchmarks/gpu_task_cost.py                      # the emulated GPU backend
    python benchmarks/gpu_task_cost.py --backend cupy       # an NVIDIA GPU through CuPy
    python benchmarks/gpu_task_cost.py --n 32 --nb 1 --rounds 5

The work is programs/gemm.tile (C += A·B) on nb×nb tiles, 1×1 by default: (n/nb)²
gemm tasks, one per column of tiles of C and tile of the inner dimension (a column
panel of A, n×nb, times a tile of B into a column panel of C), whose kernels take
almost no time, in chains of n/nb (the products into one column of C). It runs on
two paths, each the best of ``--rounds``:

* CPU: one worker, no GPU;
* GPU: one worker and one GPU with host:GPU columns 0:1, so that every tile and
  every task is the GPU's.

The kernel alone is the same gemm called back to back on operands of the same
shapes (n×nb panels, an nb×nb tile) where the path runs it (host arrays; the backend's arrays on its GPU 1, then one
synchronize), per call. The table gives, side by side, the run's seconds, its
seconds per task, the kernel's, and their difference: the runtime's own cost
per task (scheduling, dependencies, the GPU's queue and copies).
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

import tiledsl
from tiledsl.runtime import Options, execute
from tiledsl.runtime.backends import backend as make_backend
from tiledsl.runtime.kernels import CPU_KERNELS
from tiledsl.runtime.world import UsageError

PROGRAM = Path(__file__).resolve().parents[1] / "programs" / "gemm.tile"
GEMM_VALUES = ("N", "N", 1.0, 1.0)  # as gemm.tile calls it
CALLS = 20000  # kernel calls timed for the kernel alone


def run_seconds(driver, n: int, nb: int, gpus: int, backend: str, rounds: int) -> tuple[float, int]:
    """Best ``(seconds, tasks)`` of ``rounds`` runs of the program."""
    options = Options(n=n, tiles={"nb": nb}, workers=1, gpus=gpus, gpu_backend=backend,
                      gpu_ratio=(0, 1) if gpus else None)
    best = None
    for _ in range(rounds):
        result = execute(driver, options)
        if best is None or result.seconds < best.seconds:
            best = result
    return best.seconds, best.tasks


def kernel_seconds(n: int, nb: int, device) -> float:
    """Seconds per call of a task's gemm (n×nb panel times nb×nb tile into an n×nb panel): host arrays,
    or ``device``'s on its GPU 1."""
    shapes = ((n, nb), (nb, nb), (n, nb))  # A[:, l], B[l, j], C[:, j] as gemm.tile passes them
    tiles = [np.asfortranarray(np.random.default_rng(1).standard_normal(shape)) for shape in shapes]
    gemm = CPU_KERNELS["gemm"] if device is None else device.kernels["gemm"]
    if device is not None:
        device.prepare(1)
        tiles = [device.to_device(tile, 1) for tile in tiles]
    gemm(*tiles, *GEMM_VALUES)  # warm-up
    start = time.perf_counter()
    for _ in range(CALLS):
        gemm(*tiles, *GEMM_VALUES)
    if device is not None:
        device.synchronize()
    return (time.perf_counter() - start) / CALLS


def table(paths: dict) -> str:
    """The measures of each path, in one column per path."""
    rows = [("run seconds", "seconds", "{:.4f}"), ("tasks", "tasks", "{}"),
            ("µs per task", "per_task", "{:.2f}"), ("kernel µs alone", "kernel", "{:.2f}"),
            ("runtime µs per task", "overhead", "{:.2f}")]
    lines = [f"{'':<22}" + "".join(f"{name:>18}" for name in paths)]
    for label, key, form in rows:
        lines.append(f"{label:<22}" + "".join(f"{form.format(path[key]):>18}" for path in paths.values()))
    return "\n".join(lines)


def measure(driver, args, gpus: int) -> dict:
    """The path's run and kernel, in µs per task (``gpus`` 0: the CPU path)."""
    device = make_backend(args.backend, 1) if gpus else None
    seconds, tasks = run_seconds(driver, args.n, args.nb, gpus, args.backend, args.rounds)
    per_task, kernel = seconds / tasks * 1e6, kernel_seconds(args.n, args.nb, device) * 1e6
    return {"seconds": seconds, "tasks": tasks, "per_task": per_task, "kernel": kernel,
            "overhead": per_task - kernel}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=24, help="matrix order (default 24: 576 tasks at nb = 1)")
    parser.add_argument("--nb", type=int, default=1, help="tile size (default 1)")
    parser.add_argument("--backend", default="emulated", choices=["emulated", "cupy"], help="the GPU path's backend")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each path; the best counts (default 3)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    driver = tiledsl.load(PROGRAM).driver
    try:
        paths = {"CPU": measure(driver, args, 0), f"GPU ({args.backend})": measure(driver, args, 1)}
    except (UsageError, ValueError) as error:  # no GPU for CuPy, or sizes the program refuses
        sys.exit(f"gpu_task_cost: error: {error}")
    print(f"gemm.tile, n={args.n} nb={args.nb}, one worker, best of {args.rounds} run(s)")
    print(table(paths))


if __name__ == "__main__":
    main()
