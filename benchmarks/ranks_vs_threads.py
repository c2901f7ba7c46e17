"""One rank with W workers against W ranks of one worker each, alternated in one run.

    python benchmarks/ranks_vs_threads.py programs/cholesky.tile --n 4096 --ranks 2 --rounds 5

Prints the best seconds and GFLOP/s of each layout and their ratio (issue 4's bar:
P ranks of one worker reach at least 0.8x one rank of P workers).
"""
import argparse
import json
import subprocess
import sys


def measure(program, n, extra, ranks, workers):
    command = [sys.executable, "-m", "tiledsl.commands.cli", "run", program, "--n", str(n), "--json",
               "--np", str(ranks), "--workers", str(workers), *extra]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("program")
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args, extra = parser.parse_known_args()
    best = {"threads": None, "ranks": None}
    for _ in range(args.rounds):
        for layout, (ranks, workers) in (("threads", (1, args.ranks)), ("ranks", (args.ranks, 1))):
            result = measure(args.program, args.n, extra, ranks, workers)
            if best[layout] is None or result["seconds"] < best[layout]["seconds"]:
                best[layout] = result
    for layout, result in best.items():
        print(f"{layout:<8} np={result['np']} workers={result['workers']}: {result['seconds']:.4f} s "
              f"{result['gflops']:.2f} GFLOP/s")
    print(f"ratio (ranks / threads, GFLOP/s): {best['ranks']['gflops'] / best['threads']['gflops']:.3f}")


if __name__ == "__main__":
    main()
