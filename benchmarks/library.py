"""The closing table of the program library: every program against its LAPACK/BLAS
reference (``tiledsl bench``), and getrf's traffic on 4 ranks against lu.tile's.

    python benchmarks/library.py --n 4096 [--rounds 3] [--workers 2] [--programs getrf,gemm] [--tune [--budget S]]
    python benchmarks/library.py --n 32768 --programs tsqr --set cols=512 --no-traffic

Prints one markdown table of the best seconds, GFLOP/s and the tiledsl/reference
ratio (above 1: tiledsl is faster) of each program, then one of the tasks, messages
and bytes that getrf and lu (LU without pivoting) move on 4 ranks, 2x2 and 1x4, at
the same n and tile size (real ``tiledsl run --np 4`` jobs). Arguments it does not
know (``--set NAME=VALUE``, ``--nb``) go to every ``tiledsl bench``. With ``--tune``, each
program is first tuned at that n (``tiledsl tune PROGRAM --n N``, into a cache of this
script's own, so the user's is left alone) and benched at the tiles tune chose, as a
user who follows the README runs it.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

LIBRARY = ("getrf", "gesv", "posv", "trtri", "potri", "gemm", "syrk", "trmm", "tsqr")


def tiledsl(*args, env=None) -> dict:
    """The JSON last line of a ``tiledsl`` command."""
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", *map(str, args)],
                         capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_rows(programs, n: int, rounds: int, workers: int, extra: list, tune: bool, budget: float) -> list:
    rows = []
    cache = tempfile.TemporaryDirectory(prefix="tiledsl-library-") if tune else None
    env = dict(os.environ, XDG_CACHE_HOME=cache.name) if tune else None
    for program in programs:
        if tune:
            tiledsl("tune", program, "--n", n, "--workers", workers, "--budget", budget, "--json", env=env)
        table = tiledsl("bench", program, "--n", n, "--rounds", rounds, "--workers", workers, "--no-dask",
                        "--json", *extra, env=env)
        ours, *references = table["rows"]
        for reference in references or [None]:
            rows.append((program, table, ours, reference))
    return rows


def _timing(row) -> list:
    """Seconds and GFLOP/s of a bench row (dashes for none)."""
    if row is None:
        return ["-", "-"]
    return [f"{row['seconds']:.3f}", f"{row['gflops']:.1f}" if row["gflops"] else "-"]


def render_bench(rows) -> str:
    lines = ["| program | tiles | reference | tiledsl s | GFLOP/s | reference s | GFLOP/s | ratio | residual |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for program, table, ours, ref in rows:
        tiles = " ".join(f"{k}={v}" for k, v in table["tiles"].items())
        ratio = f"{ref['ratio']:.2f}" if ref and ref["ratio"] else "-"
        residual = f"{table['residual']:.3g}" if table["residual"] is not None else "-"
        cells = [program, tiles, ref["name"] if ref else "-", *_timing(ours), *_timing(ref), ratio, residual]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def traffic(n: int, nb: int) -> str:
    lines = ["| program | grid | tasks | messages | MB sent | seconds |", "|---|---|---:|---:|---:|---:|"]
    for grid in ("2x2", "1x4"):
        for program in ("getrf", "lu"):
            summary = tiledsl("run", f"programs/{program}.tile", "--np", 4, "--grid", grid, "--n", n, "--nb", nb,
                              "--json")
            totals = summary["totals"]
            lines.append(f"| {program} | {grid} | {summary['tasks']} | {totals['messages_sent']} | "
                         f"{totals['bytes_sent'] / 1e6:.0f} | {summary['seconds']:.2f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--traffic-nb", type=int, default=384, help="tile size of the getrf/lu traffic comparison")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--programs", default=",".join(LIBRARY), help="comma-separated (default: the library)")
    parser.add_argument("--no-traffic", action="store_true", help="leave out the getrf/lu traffic table")
    parser.add_argument("--tune", action="store_true", help="tune each program at --n first, bench at its tiles")
    parser.add_argument("--budget", type=float, default=30, help="seconds of each program's tuning (tune's --budget)")
    args, extra = parser.parse_known_args()
    unknown = sorted(set(args.programs.split(",")) - set(LIBRARY))
    if unknown:
        parser.error(f"--programs: {', '.join(unknown)} not in the library ({', '.join(LIBRARY)})")
    rows = bench_rows(args.programs.split(","), args.n, args.rounds, args.workers, extra, args.tune, args.budget)
    print(render_bench(rows))
    if not args.no_traffic:
        print()
        print(traffic(args.n, args.traffic_nb))


if __name__ == "__main__":
    main()
