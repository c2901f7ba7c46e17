"""`tiledsl simulate` against real runs on this machine (issue 15's validation).

    python benchmarks/simulate_vs_real.py cholesky --n 4096 --nb 256 --ranks 1,2,4 --rounds 3

For each rank count, the best and the median of ``--rounds`` real runs (``tiledsl run
--np P --json``) and the simulation of the same run on this machine (the ``local``
machine file with ``tiledsl tune``'s rates: tune the program first), with the error of
the prediction against the best run. Prints a Markdown table (``--json``: the rows).
"""
import argparse
import json
import statistics
import subprocess
import sys


def tiledsl(*args) -> dict:
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", *map(str, args), "--json"],
                         capture_output=True, text=True, timeout=900)
    if out.returncode:
        sys.exit(out.stderr.strip())
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("program")
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args, size = parser.parse_known_args()
    ranks = [int(p) for p in args.ranks.split(",")]
    real = {p: [] for p in ranks}
    for _ in range(args.rounds):  # rounds alternate the rank counts: load from elsewhere hits all alike
        for p in ranks:
            real[p].append(tiledsl("run", args.program, "--np", p, *size))  # a shipped name runs from anywhere
    rows = []
    for p in ranks:
        simulated = tiledsl("simulate", args.program, "--nodes", p, *size)
        seconds = sorted(r["seconds"] for r in real[p])
        exact = all(s == r for r in real[p] for s, r in [(simulated["totals"]["messages_sent"],
                                                          r["totals"]["messages_sent"])])
        rows.append({"ranks": p, "workers": simulated["workers"], "tasks": simulated["tasks"],
                     "real_best": seconds[0], "real_median": statistics.median(seconds),
                     "simulated": simulated["seconds"], "error": simulated["seconds"] / seconds[0] - 1,
                     "messages": simulated["totals"]["messages_sent"], "messages_exact": exact})
    if args.json:
        print(json.dumps(rows))
        return
    print("| ranks | workers | tasks | real best (s) | real median (s) | simulated (s) | error | messages |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['ranks']} | {r['workers']} | {r['tasks']} | {r['real_best']:.3f} | {r['real_median']:.3f} | "
              f"{r['simulated']:.3f} | {r['error']:+.1%} | {r['messages']}{'' if r['messages_exact'] else ' (differ!)'} |")


if __name__ == "__main__":
    main()
