"""A run in GPU memory against the same run out of core (a bounded --gpu-memory), side by side.

    python benchmarks/outofcore.py programs/cholesky.tile --n 65536 --gpus 1 --gpu-backend cupy \\
        --gpu-memory 16G [--rounds 2] [--check]
    python benchmarks/outofcore.py programs/cholesky.tile --n 110000 --gpus 1 --gpu-backend cupy --only-out-of-core

Each round runs ``tiledsl run`` without ``--gpu-memory`` (in memory, when the
tiles fit the GPUs) and with it (out of core); the table gives each one's best
seconds and GFLOP/s, the bytes copied to and from the GPUs' caches, evictions,
the peak bytes a cache held and the residual. ``--only-out-of-core`` skips the
in-memory run (a matrix larger than the GPUs). Other options go to ``tiledsl run``.
"""
import argparse
import json
import subprocess
import sys

GIB = 2 ** 30


def measure(program: str, extra: list) -> dict:
    command = [sys.executable, "-m", "tiledsl.commands.cli", "run", program, "--json", *extra]
    out = subprocess.run(command, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def row(label: str, result: dict) -> str:
    cache = result.get("out_of_core") or {}
    residual = "-" if result["residual"] is None else f"{result['residual']:.3g}"
    return (f"{label:<12} {result['seconds']:>9.3f} {result['gflops'] or 0:>9.1f} "
            f"{cache.get('bytes_in', 0) / GIB:>9.2f} {cache.get('bytes_out', 0) / GIB:>9.2f} "
            f"{cache.get('evictions', 0):>9} {cache.get('peak_cache_bytes', 0) / GIB:>9.2f} {residual:>9}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("program")
    parser.add_argument("--gpu-memory", required=True, help="the out-of-core run's bound, e.g. 16G")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only-out-of-core", action="store_true", help="no in-memory run")
    args, extra = parser.parse_known_args()
    runs = {"out of core": [*extra, "--gpu-memory", args.gpu_memory]}
    if not args.only_out_of_core:
        runs = {"in memory": extra, **runs}
    best: dict = {}
    for _ in range(args.rounds):
        for label, options in runs.items():
            result = measure(args.program, options)
            if label not in best or result["seconds"] < best[label]["seconds"]:
                best[label] = result
    print(f"{args.program} {' '.join(extra)}, --gpu-memory {args.gpu_memory}, best of {args.rounds}")
    print(f"{'run':<12} {'seconds':>9} {'GFLOP/s':>9} {'GiB in':>9} {'GiB out':>9} {'evictions':>9} "
          f"{'peak GiB':>9} {'residual':>9}")
    for label, result in best.items():
        print(row(label, result))


if __name__ == "__main__":
    main()
