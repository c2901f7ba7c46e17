"""Check tiledsl on a machine with an NVIDIA GPU and measure it against cuSOLVER/cuBLAS: markdown out.

Run from the repository root, output unbuffered so that a run cut short keeps its tables:

    PYTHONUNBUFFERED=1 python scripts/gpu_check.py | tee gpu_check.md          # tests, programs, bench, user
    python scripts/gpu_check.py --phases bench --sizes 16384 --programs cholesky,getrf
    python scripts/gpu_check.py --phases outofcore                             # the two large runs
    python scripts/gpu_check.py --backend emulated --sizes 512 --check-n 300   # the script itself, no GPU

Phases (``--phases``, in this order):

1. ``tests``: the CuPy backend's tests (``tests/runtime/test_cupy_backend.py``); none may be
   skipped for want of a GPU;
2. ``programs``: every shipped program with ``--gpus 1 --check`` at ``--check-n``;
3. ``bench``: each of ``--programs`` at each of ``--sizes`` against the library routine of
   its kind on the same GPU (:mod:`gpu_references`: cuSOLVER potrf, geqrf, getrf, cuBLAS dgemm),
   alternated, best of ``--rounds``: seconds, GFLOP/s (the standard counts: n³/3, 4n³/3, 2n³/3,
   2n³), the ratio, and the fraction of the kernel upper bound (DESIGN §6: one core's dgemm
   times the CPU workers plus the GPU's dgemm). Every tile goes to the GPU (``--gpu-ratio 0:1``)
   with the tile settings of :data:`GPU_SETTINGS`; ``--variant PROGRAM:ARGS`` adds rows with
   other run arguments;
4. ``user``: a user kernel's GPU body on the GPU (``docs/examples/left_cholesky.tile``, whose
   ``update`` has one), checked, with the tasks each device ran;
5. ``outofcore``: Cholesky at ``--ooc-n`` with ``--gpu-memory`` ``--ooc-memory`` against the
   same run with the whole matrix on the GPU, then at ``--huge-n`` (more than the GPU holds),
   checked only with ``--ooc-check`` (the check runs on the host's cores: minutes).

On a GPU node that cannot reach a package index, bring what tiledsl needs beyond a CUDA
image's packages as wheels from a machine that can (``pip download --no-deps
--only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 -d wheels lark
nvmath-python``), then on the node: ``pip install --no-index --no-deps wheels/*.whl`` and
``pip install --no-deps --no-build-isolation -e .``. Without nvmath-python, the kernels that
need it run on the host (each run says so).

Without CuPy or a visible GPU (``--backend cupy``) it says so and exits 0. It exits 1 when a
test or a program's check fails.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_references import FLOPS, KIND, Reference  # noqa: E402

#: Each benchmarked program's run arguments on one GPU (H100, session 9: nb = 4096 gave Cholesky
#: 1.30x cuSOLVER at n = 16384 and 1.48x at 32768; QR wants ib = 512 at nb = 2048)
GPU_SETTINGS = {
    "cholesky": ["--nb", "4096"],
    "qr": ["--nb", "2048", "--set", "ib=512"],
    "lu": ["--nb", "4096"],
    "getrf": ["--nb", "2048"],
    "gemm": ["--nb", "4096"],
    "hetero_cholesky": ["--B", "4096", "--s", "1"],
}
PHASES = ("tests", "programs", "bench", "user", "outofcore")
SKIPPED_FOR_WANT_OF_A_GPU = "needs CuPy and an NVIDIA GPU"
USER_PROGRAM = "docs/examples/left_cholesky.tile"


def visible_gpus() -> int:
    """CUDA devices CuPy sees; 0 without CuPy, a driver or a device."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount()
    except Exception:  # any of those reasons means: nothing to check here
        return 0


def main(argv=None) -> int:
    args = parse(argv)
    if args.backend == "cupy" and visible_gpus() == 0:
        print("gpu_check: no GPU visible to CuPy (or CuPy is not installed); nothing to check")
        return 0
    ok = True
    for phase in args.phases:
        ok &= PHASE_FUNCTIONS[phase](args) is not False
    return 0 if ok else 1


def parse(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", type=_names(PHASES), default=["tests", "programs", "bench", "user"],
                        help=f"comma separated, from {', '.join(PHASES)} (default: all but outofcore)")
    parser.add_argument("--backend", default="cupy", choices=["cupy", "emulated"],
                        help="emulated: the script's own plumbing on the host, with LAPACK as the reference")
    parser.add_argument("--check-n", type=int, default=2048, help="matrix order of the program checks")
    parser.add_argument("--sizes", type=_numbers, default=[16384, 32768], help="benchmark orders, comma separated")
    parser.add_argument("--programs", type=_names(GPU_SETTINGS), default=["cholesky", "qr", "lu", "getrf", "gemm"],
                        help=f"benchmarked programs, comma separated (from {', '.join(GPU_SETTINGS)})")
    parser.add_argument("--variant", type=_variant, action="append", default=[], metavar="PROGRAM:ARGS",
                        help="also benchmark PROGRAM with these run arguments instead of its settings, e.g. "
                             "'cholesky:--nb 3072' (repeatable)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each, alternated, the best counts (default 1)")
    parser.add_argument("--user-n", type=int, default=16384, help="order of the user-kernel run")
    parser.add_argument("--ooc-n", type=int, default=65536, help="order of the out-of-core comparison")
    parser.add_argument("--ooc-memory", default="16G", help="--gpu-memory of the out-of-core run")
    parser.add_argument("--huge-n", type=int, default=110000, help="order of the run larger than the GPU (0: none)")
    parser.add_argument("--ooc-check", action="store_true", help="check the out-of-core runs (slow: on the host)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds allowed to each run")
    args = parser.parse_args(argv)
    unknown = {program for program, _ in args.variant} - set(KIND)
    if unknown:
        parser.error(f"cannot benchmark {', '.join(sorted(unknown))} (from {', '.join(KIND)})")
    return args


def _names(allowed):
    def parse_names(text: str) -> list[str]:
        names = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in names if name not in allowed]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)} (from {', '.join(allowed)})")
        return names
    return parse_names


def _variant(text: str) -> tuple[str, list[str]]:
    program, _, arguments = text.partition(":")
    return program.strip(), arguments.split()


def _numbers(text: str) -> list[int]:
    return [int(item) for item in text.split(",") if item.strip()]


# ---------------------------------------------------------------- 1. tests
def run_tests(args) -> bool:
    """The CuPy backend's tests; fails if any was skipped for want of a GPU."""
    print("## GPU tests\n")
    if args.backend != "cupy":
        print("(the cupy backend only)\n")
        return True
    try:
        out = subprocess.run([sys.executable, "-m", "pytest", "tests/runtime/test_cupy_backend.py", "-q", "-rs", "-x",
                              "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True,
                             timeout=args.timeout)
    except subprocess.TimeoutExpired:
        print(f"**timed out after {args.timeout:.0f} s**\n")
        return False
    skipped = [line for line in out.stdout.splitlines() if SKIPPED_FOR_WANT_OF_A_GPU in line]
    print("```\n" + "\n".join(out.stdout.strip().splitlines()[-15:]) + "\n```\n")
    if skipped:
        print(f"**{len(skipped)} kinds of GPU test were skipped although CuPy sees a GPU.**\n")
    return out.returncode == 0 and not skipped


# ---------------------------------------------------------------- 2. programs
def check_programs(args) -> bool:
    """Every shipped program on one GPU with --check."""
    print(f"## Programs on one GPU (n = {args.check_n}, --check)\n")
    print("| program | seconds | GFLOP/s | residual | GPU tasks / all | result |")
    print("|---|---:|---:|---:|---:|---|")
    ok = True
    for source in sorted((ROOT / "programs").glob("*.tile")):
        summary, error = tiledsl_run(f"programs/{source.name}", args, "--n", args.check_n, "--check")
        if summary is None:
            print(f"| {source.stem} | | | | | FAILED: {error} |")
            ok = False
            continue
        passed = summary["passed"]
        ok &= passed is not False
        print(f"| {source.stem} | {summary['seconds']:.3f} | {_number(summary.get('gflops'))} "
              f"| {_number(summary.get('residual'), '.3g')} | {_on_gpus(summary)} | {'pass' if passed else 'FAIL'} |")
    print()
    return ok


def tiledsl_run(program: str, args, *arguments):
    """(the ``run --json`` summary, None) of a run on one GPU, or (None, why it failed)."""
    command = [sys.executable, "-m", "tiledsl.commands.cli", "run", program, *map(str, arguments), "--gpus", "1",
               "--gpu-backend", args.backend, "--no-tune", "--json"]
    try:
        out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {args.timeout:.0f} s"
    lines = out.stdout.strip().splitlines()
    if not lines or not lines[-1].startswith("{"):
        return None, (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
    summary = json.loads(lines[-1])
    if summary.get("notes"):
        print(f"note ({Path(program).stem}): " + "; ".join(summary["notes"]))
    return summary, None


def _on_gpus(summary: dict) -> str:
    """``GPU tasks / all tasks`` of a run."""
    by_device = summary["ranks"][0].get("tasks_by_device") or {}
    on_gpus = sum(count for device, count in by_device.items() if device != "host")
    return f"{on_gpus} / {summary['tasks']}"


def _number(value, spec: str = ".1f") -> str:
    return "" if value is None else format(value, spec)


# ---------------------------------------------------------------- 3. benchmark
def benchmark(args) -> None:
    """tiledsl against the library routine of each program's kind, one row per (program or variant, n)."""
    print("## Benchmark: tiledsl on one GPU against the library on the same GPU\n")
    core, gpu = dgemm_rate(), gpu_dgemm_rate(args.backend)
    print(f"gemm tile kernel: {core:.1f} GFLOP/s on one core (single-threaded BLAS), {gpu:.0f} GFLOP/s on the GPU; "
          f"best of {args.rounds} run(s) each, alternated\n")
    print("| program | n | settings | tiledsl s | GFLOP/s | reference | s | GFLOP/s | ratio | fraction of UB |")
    print("|---|---:|---|---:|---:|---|---:|---:|---:|---:|")
    runs = [(program, GPU_SETTINGS[program]) for program in args.programs] + args.variant
    references = {kind: Reference(kind, args.backend) for kind in {KIND[program] for program, _ in runs}}
    for n in args.sizes:
        for program, settings in runs:
            reference = references[KIND[program]]
            reference.seconds(min(n, 512))  # the library loaded and warm before the first timing
            ours, theirs, summary, error = math.inf, math.inf, None, None
            for _ in range(args.rounds):
                theirs = min(theirs, reference.seconds(n))
                found, error = tiledsl_run(f"programs/{program}.tile", args, "--n", n, "--gpu-ratio", "0:1",
                                           *settings)
                if found is None:
                    break
                if found["seconds"] < ours:
                    ours, summary = found["seconds"], found
            print(_benchmark_row(program, n, settings, reference.name, summary, theirs, error, core, gpu))
        for reference in references.values():
            reference.release()
    print()


def _benchmark_row(program: str, n: int, settings: list, reference: str, summary, theirs: float, error,
                   core: float, gpu: float) -> str:
    flops = FLOPS[KIND[program]](n)
    theirs_rate = flops / theirs / 1e9
    cells = [program, str(n), " ".join(settings)]
    if summary is None:
        return "| " + " | ".join(cells + [f"failed: {error}", "", reference, f"{theirs:.3f}", f"{theirs_rate:.0f}",
                                          "", ""]) + " |"
    ours = summary["seconds"]
    ours_rate = flops / ours / 1e9
    bound = core * summary["workers"] + gpu * summary["gpus"]
    return "| " + " | ".join(cells + [f"{ours:.3f}", f"{ours_rate:.0f}", reference, f"{theirs:.3f}",
                                      f"{theirs_rate:.0f}", f"{ours_rate / theirs_rate:.2f}",
                                      f"{ours_rate / bound:.2f}"]) + " |"


def dgemm_rate(gpu=None, size: int = 1024) -> float:
    """GFLOP/s of the gemm tile kernel on size×size tiles, timed as ``tiledsl tune`` times it: on one
    core with single-threaded BLAS (as a CPU worker runs it), or on GPU 1 of the backend ``gpu``."""
    from threadpoolctl import threadpool_limits

    from tiledsl.commands.tune import time_kernel
    from tiledsl.runtime.kernels import CPU_KERNELS

    rng = np.random.default_rng(1)
    tiles = [np.asfortranarray(rng.standard_normal((size, size))) for _ in range(3)]
    kernel = CPU_KERNELS["gemm"] if gpu is None else gpu.kernels["gemm"]
    with threadpool_limits(1):
        return 2 * size ** 3 / time_kernel(kernel, tiles, gpu, 0.05) / 1e9


def gpu_dgemm_rate(backend: str) -> float:
    """GFLOP/s of the backend's gemm on GPU 1, each call waited for."""
    from tiledsl.runtime.backends import backend as make_backend

    gpu = make_backend(backend, 1)
    gpu.synchronous = True  # timed to the kernel's end, not its launch
    return dgemm_rate(gpu, 4096 if backend == "cupy" else 512)


# ---------------------------------------------------------------- 4. a user kernel's GPU body
def user_kernel(args) -> bool:
    """``USER_PROGRAM`` on one GPU, its ``update`` kernel's GPU body included."""
    n = args.user_n
    print(f"## A user kernel's GPU body ({USER_PROGRAM}, n = {n}, --check)\n")
    summary, error = tiledsl_run(USER_PROGRAM, args, "--n", n, "--nb", max(64, n // 8), "--gpu-ratio", "0:1",
                                 "--check")
    if summary is None:
        print(f"FAILED: {error}\n")
        return False
    print("| seconds | GFLOP/s | residual | GPU tasks / all | result |\n|---:|---:|---:|---:|---|")
    print(f"| {summary['seconds']:.3f} | {_number(summary.get('gflops'))} | {_number(summary['residual'], '.3g')} "
          f"| {_on_gpus(summary)} | {'pass' if summary['passed'] else 'FAIL'} |\n")
    return bool(summary["passed"])


# ---------------------------------------------------------------- 5. out of core
def out_of_core(args) -> bool:
    """Cholesky through a bounded GPU cache against the same run in memory, then one larger than the GPU."""
    settings = ["--gpu-ratio", "0:1", *GPU_SETTINGS["cholesky"]] + (["--check"] if args.ooc_check else [])
    rows = [(args.ooc_n, None), (args.ooc_n, args.ooc_memory)] + ([(args.huge_n, None)] if args.huge_n else [])
    print("## Out of core: Cholesky (programs/cholesky.tile)\n")
    print("| n | --gpu-memory | seconds | GFLOP/s | fraction of UB | cache: copies in, evictions, copies out "
          "| residual |\n|---:|---|---:|---:|---:|---|---:|")
    core, gpu = dgemm_rate(), gpu_dgemm_rate(args.backend)
    ok, seconds = True, {}
    for n, memory in rows:
        limit = ["--gpu-memory", memory] if memory else []
        summary, error = tiledsl_run("programs/cholesky.tile", args, "--n", n, *settings, *limit)
        if summary is None:
            print(f"| {n} | {memory or '(all)'} | failed: {error} | | | | |")
            ok = False
            continue
        seconds[(n, memory)] = summary["seconds"]
        rate = FLOPS["cholesky"](n) / summary["seconds"] / 1e9
        cache = summary.get("out_of_core") or {}
        traffic = ", ".join(str(cache[key]) for key in ("copies_in", "evictions", "copies_out")) if cache else \
            "in memory"
        print(f"| {n} | {memory or '(all)'} | {summary['seconds']:.3f} | {rate:.0f} "
              f"| {rate / (core * summary['workers'] + gpu):.2f} | {traffic} | {_number(summary['residual'], '.3g')} |")
        ok &= summary["passed"] is not False
    in_memory, cached = seconds.get((args.ooc_n, None)), seconds.get((args.ooc_n, args.ooc_memory))
    if in_memory and cached:
        print(f"\nout of core at n = {args.ooc_n}: {in_memory / cached:.2f}x the run in memory\n")
    return ok


PHASE_FUNCTIONS = {"tests": run_tests, "programs": check_programs, "bench": benchmark, "user": user_kernel,
                   "outofcore": out_of_core}


if __name__ == "__main__":
    sys.exit(main())
