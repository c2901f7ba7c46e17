"""The program's own priorities against derived ones (bottom levels) and none, alternated in one run.

    python benchmarks/priorities.py programs/cholesky.tile --n 4096 --nb 256 --rounds 5 [--np 2]

Each round runs ``--priorities program``, ``auto`` and ``none`` one after the
other; the table gives each mode's best seconds and GFLOP/s and its speed
relative to the program's own priorities. Extra options go to ``tiledsl run``.
"""
import argparse
import json
import subprocess
import sys

MODES = ("program", "auto", "none")


def measure(program: str, mode: str, extra: list) -> dict:
    command = [sys.executable, "-m", "tiledsl.commands.cli", "run", program, "--json", "--priorities", mode, *extra]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("program")
    parser.add_argument("--rounds", type=int, default=5)
    args, extra = parser.parse_known_args()
    best: dict = {}
    for _ in range(args.rounds):
        for mode in MODES:
            result = measure(args.program, mode, extra)
            if mode not in best or result["seconds"] < best[mode]["seconds"]:
                best[mode] = result
    print(f"{args.program} {' '.join(extra)}, best of {args.rounds}")
    print(f"{'priorities':<10} {'seconds':>9} {'GFLOP/s':>9} {'vs program':>11}")
    for mode in MODES:
        result = best[mode]
        ratio = best["program"]["seconds"] / result["seconds"]
        print(f"{mode:<10} {result['seconds']:>9.4f} {result['gflops']:>9.2f} {ratio:>10.3f}x")


if __name__ == "__main__":
    main()
