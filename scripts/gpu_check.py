"""Check the CuPy backend on a machine with an NVIDIA GPU, and print the results as markdown.

Run from the repository root:

    python scripts/gpu_check.py                          # everything below
    python scripts/gpu_check.py --skip-tests --sizes 8192 --programs cholesky
    python scripts/gpu_check.py --skip-tests --skip-programs --tune \
        --variant 'hetero_cholesky:--B 2048 --b 64 --s 2'

1. the GPU tests (``tests/runtime/test_cupy_backend.py``): none may be skipped for
   want of a GPU;
2. every shipped program with ``--gpus 1 --gpu-backend cupy --check`` at ``--check-n``;
3. with ``--tune``, ``tiledsl tune`` of each benchmarked program for one GPU, so that
   the benchmark's runs use this machine's tuned tile sizes and host/GPU ratio;
4. a benchmark: cholesky, hetero_cholesky and qr (and any ``--variant``, a program
   with explicit run arguments) at each of ``--sizes`` against
   ``cupy.linalg.cholesky`` / ``cupy.linalg.qr`` on the same GPU in the same run,
   alternating, best of ``--rounds``: seconds, GFLOP/s (n³/3 for Cholesky, 4n³/3
   for QR), the ratio tiledsl/CuPy and the fraction of the kernel upper bound.
   tiledsl's time is its factorization only (``run --json``'s ``seconds``), CuPy's
   the factorization of a matrix already on the GPU.

Without CuPy or a visible GPU it says so and exits 0. It exits 1 when a test or a
program's check fails.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKED = ("cholesky", "hetero_cholesky", "qr")
REFERENCE = {"cholesky": "cholesky", "hetero_cholesky": "cholesky", "qr": "qr"}
FLOPS = {"cholesky": lambda n: n ** 3 / 3, "qr": lambda n: 4 * n ** 3 / 3}
SKIPPED_FOR_WANT_OF_A_GPU = "needs CuPy and an NVIDIA GPU"


def visible_gpus() -> int:
    """CUDA devices CuPy sees; 0 without CuPy, a driver or a device."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount()
    except Exception:  # any of those reasons means: nothing to check here
        return 0


def main(argv=None) -> int:
    args = parse(argv)
    if visible_gpus() == 0:
        print("gpu_check: no GPU visible to CuPy (or CuPy is not installed); nothing to check")
        return 0
    ok = True
    if not args.skip_tests:
        ok &= run_tests(args.timeout)
    if not args.skip_programs:
        ok &= check_programs(args)
    if args.tune:
        ok &= tune(args)
    if args.sizes:
        benchmark(args)
    return 0 if ok else 1


def parse(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-tests", action="store_true", help="do not run the GPU tests")
    parser.add_argument("--skip-programs", action="store_true", help="do not check the shipped programs")
    parser.add_argument("--check-n", type=int, default=2048, help="matrix order of the program checks")
    parser.add_argument("--sizes", type=_sizes, default=[8192, 16384, 32768],
                        help="benchmark orders, comma separated ('' for no benchmark)")
    parser.add_argument("--programs", type=lambda text: [p for p in text.split(",") if p], default=list(BENCHMARKED),
                        help=f"benchmarked programs, comma separated (from {', '.join(BENCHMARKED)})")
    for name in ("nb", "B", "b", "s"):
        parser.add_argument(f"--{name}", type=int, metavar="N", help=f"tile setting {name} for the runs (default: the program's)")
    parser.add_argument("--variant", type=_variant, action="append", default=[], metavar="PROGRAM:ARGS",
                        help="also benchmark PROGRAM with these run arguments, e.g. "
                             "'hetero_cholesky:--B 2048 --b 64 --s 2' (repeatable)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each, the best counts (default 2)")
    parser.add_argument("--tune", action="store_true",
                        help="first tune each benchmarked program for one GPU (tiledsl tune), so that runs "
                             "without tile settings use the tuned ones")
    parser.add_argument("--timeout", type=float, default=900, help="seconds allowed to each run")
    args = parser.parse_args(argv)
    unknown = (set(args.programs) | {program for program, _ in args.variant}) - set(BENCHMARKED)
    if unknown:
        parser.error(f"cannot benchmark {', '.join(sorted(unknown))}")
    return args


def _variant(text: str) -> tuple[str, list[str]]:
    program, _, arguments = text.partition(":")
    return program.strip(), arguments.split()


def _sizes(text: str) -> list[int]:
    return [int(item) for item in text.split(",") if item.strip()]


# ---------------------------------------------------------------- 1. tests
def run_tests(timeout: float) -> bool:
    """The CuPy backend's tests; fails if any was skipped for want of a GPU."""
    print("## GPU tests\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "tests/runtime/test_cupy_backend.py", "-q", "-rs"],
                         cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    skipped = [line for line in out.stdout.splitlines() if SKIPPED_FOR_WANT_OF_A_GPU in line]
    print("```\n" + "\n".join(out.stdout.strip().splitlines()[-15:]) + "\n```\n")
    if skipped:
        print(f"**{len(skipped)} kinds of GPU test were skipped although CuPy sees a GPU.**\n")
    return out.returncode == 0 and not skipped


# ---------------------------------------------------------------- tuning
def tune(args) -> bool:
    """``tiledsl tune`` of each benchmarked program for one CuPy GPU; its chosen settings are printed."""
    print("## Tuning (tiledsl tune PROGRAM --gpus 1 --gpu-backend cupy)\n")
    ok = True
    for program in sorted(set(args.programs)):
        out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "tune", program, "--gpus", "1",
                              "--gpu-backend", "cupy"], cwd=ROOT, capture_output=True, text=True,
                             timeout=args.timeout)
        ok &= out.returncode == 0
        print(f"### {program}\n\n```\n{(out.stdout + out.stderr).strip()}\n```\n", flush=True)
    return ok


# ---------------------------------------------------------------- 2. programs
def check_programs(args) -> bool:
    """Every shipped program on one GPU with --check."""
    print(f"## Programs on one GPU (n = {args.check_n}, --check)\n")
    print("| program | seconds | GFLOP/s | residual | result |")
    print("|---|---:|---:|---:|---|")
    ok = True
    for source in sorted((ROOT / "programs").glob("*.tile")):
        summary, error = tiledsl_run(source.stem, args.check_n, args, "--check")
        if summary is None:
            print(f"| {source.stem} | | | | FAILED: {error} |")
            ok = False
            continue
        passed = summary["passed"]
        ok &= passed
        print(f"| {source.stem} | {summary['seconds']:.3f} | {_number(summary.get('gflops'))} "
              f"| {_number(summary.get('residual'), '.3g')} | {'pass' if passed else 'FAIL'} |")
    print()
    return ok


def tiledsl_run(program: str, n: int, args, *extra):
    """(the ``run --json`` summary, None) of a run on one GPU, or (None, why it failed)."""
    tiles = [item for name in ("nb", "B", "b", "s") if getattr(args, name) is not None
             for item in (f"--{name}", str(getattr(args, name)))]
    command = [sys.executable, "-m", "tiledsl.commands.cli", "run", f"programs/{program}.tile", "--n", str(n), *tiles,
               "--gpus", "1", "--gpu-backend", "cupy", "--json", *extra]
    try:
        out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {args.timeout:.0f} s"
    lines = out.stdout.strip().splitlines()
    if not lines or not lines[-1].startswith("{"):
        return None, (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
    return json.loads(lines[-1]), None


def _number(value, spec: str = ".1f") -> str:
    return "" if value is None else format(value, spec)


# ---------------------------------------------------------------- 3. benchmark
def benchmark(args) -> None:
    """tiledsl against CuPy's own factorizations, one table row per (program or variant, n).

    Each run is the best of ``--rounds``, tiledsl and CuPy alternating. The kernel
    upper bound (DESIGN §6) is one core's dgemm rate times the run's CPU workers plus
    the GPU's dgemm rate.
    """
    print("## Benchmark: tiledsl on one GPU (and the host's cores) against CuPy on the same GPU\n")
    warm_up()
    core, gpu = dgemm_rate(), gpu_dgemm_rate()
    print(f"gemm tile kernel: {core:.1f} GFLOP/s on one core (single-threaded BLAS), {gpu:.0f} GFLOP/s on the GPU; "
          f"best of {args.rounds} runs each\n")
    print("| program | n | tiles | tiledsl s | tiledsl GFLOP/s | CuPy s | CuPy GFLOP/s | ratio | fraction of UB |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    runs = [(program, []) for program in args.programs] + args.variant
    for n in args.sizes:
        for program, extra in runs:
            kind = REFERENCE[program]
            ours, theirs, summary, error = math.inf, math.inf, None, None
            for _ in range(args.rounds):
                theirs = min(theirs, reference_seconds(kind, n))
                found, error = tiledsl_run(program, n, args, *extra)
                if found is None:
                    break
                if found["seconds"] < ours:
                    ours, summary = found["seconds"], found
            print(_benchmark_row(program, n, kind, summary, theirs, error, core, gpu), flush=True)
    print()


def _benchmark_row(program: str, n: int, kind: str, summary, theirs: float, error, core: float, gpu: float) -> str:
    flops = FLOPS[kind](n)
    theirs_rate = flops / theirs / 1e9
    if summary is None:
        return f"| {program} | {n} | | {error} | | {theirs:.3f} | {theirs_rate:.0f} | | |"
    ours = summary["seconds"]
    ours_rate = flops / ours / 1e9
    bound = core * summary["workers"] + gpu * summary["gpus"]
    return (f"| {program} | {n} | {_tiles(summary)} | {ours:.3f} | {ours_rate:.0f} | {theirs:.3f} | "
            f"{theirs_rate:.0f} | {ours_rate / theirs_rate:.2f} | {ours_rate / bound:.2f} |")


def _tiles(summary: dict) -> str:
    """The tile settings a run used, and the host/GPU ratio of uniform tiles: ``nb=2048 0:1``."""
    settings = " ".join(f"{name}={value}" for name, value in summary["tiles"].items())
    ratio = summary.get("gpu_ratio")
    return settings + (f" {ratio}" if ratio else "")


def dgemm_rate(gpu=None, size: int = 1024) -> float:
    """GFLOP/s of the gemm tile kernel on size×size tiles, timed as ``tiledsl tune`` times it:
    on one core with single-threaded BLAS (as a CPU worker runs it), or on GPU 1 of the CuPy
    backend ``gpu``."""
    from threadpoolctl import threadpool_limits

    from tiledsl.runtime.kernels import CPU_KERNELS
    from tiledsl.commands.tune import time_kernel

    rng = np.random.default_rng(1)
    tiles = [np.asfortranarray(rng.standard_normal((size, size))) for _ in range(3)]
    kernel = CPU_KERNELS["gemm"] if gpu is None else gpu.kernels["gemm"]
    with threadpool_limits(1):
        return 2 * size ** 3 / time_kernel(kernel, tiles, gpu, 0.05) / 1e9


def gpu_dgemm_rate(size: int = 4096) -> float:
    """GFLOP/s of the CuPy backend's gemm on GPU 1, each call waited for."""
    from tiledsl.runtime.backends import backend

    gpu = backend("cupy", 1)
    gpu.synchronous = True  # timed to the kernel's end, not its launch
    return dgemm_rate(gpu, size)


def warm_up() -> None:
    """Load cuSOLVER and its kernels once, so the first timed call does not pay for it."""
    for kind in FLOPS:
        reference_seconds(kind, 256)


def reference_seconds(kind: str, n: int) -> float:
    """Seconds of CuPy's factorization of an n×n matrix already on GPU 0."""
    import cupy

    with cupy.cuda.Device(0):
        a = _reference_input(cupy, kind, n)
        cupy.cuda.Device().synchronize()
        began = time.perf_counter()
        result = cupy.linalg.cholesky(a) if kind == "cholesky" else cupy.linalg.qr(a, mode="r")
        cupy.cuda.Device().synchronize()
        seconds = time.perf_counter() - began
        del a, result
        cupy.get_default_memory_pool().free_all_blocks()  # the tiledsl run needs the memory next
    return seconds


def _reference_input(cupy, kind: str, n: int):
    """A random general matrix, or a symmetric diagonally dominant (so SPD) one."""
    rng = cupy.random.default_rng(42)
    if kind == "qr":
        return rng.standard_normal((n, n))
    a = rng.random((n, n))
    a = a + a.T  # not in place: CuPy does not guard against an operand overlapping the output
    a[cupy.diag_indices(n)] += 2 * n
    return a


if __name__ == "__main__":
    sys.exit(main())
