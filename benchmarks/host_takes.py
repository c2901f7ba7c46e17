"""Host cores taking GPU tasks (``--host-takes on``) against static host slices, simulated on Keeneland.

    python benchmarks/host_takes.py [--nodes 1,2,4,8,16] [--programs cholesky,qr]

For each node count of CPE'15 Table I (``keeneland_table.PAPER``: its order and grid),
``tiledsl simulate`` on the ``keeneland`` machine file runs the program three ways:
the paper's hybrid tiles (B = 1152 / 896, host slices of 64: the host's share fixed
before the run), uniform tiles of the same B all on the GPUs (``--gpu-ratio 0:1``),
and the same with idle CPU workers taking GPU tasks as the run goes. Prints one
markdown table: predicted seconds and TFLOP/s of each, the GPU tasks the hosts took,
and the paper's measured seconds.
"""
import argparse
import json
import subprocess
import sys

from keeneland_table import PAPER, TILES

WAYS = {"hybrid tiles (paper)": lambda name, tiles: (name, *tiles),
        "uniform, GPUs only": lambda name, tiles: (name.removeprefix("hetero_"), "--nb", tiles[1],
                                                  "--gpu-ratio", "0:1"),
        "uniform, host takes": lambda name, tiles: (name.removeprefix("hetero_"), "--nb", tiles[1],
                                                   "--gpu-ratio", "0:1", "--host-takes", "on")}


def simulate(args: tuple, n: int, nodes: int, grid: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "simulate", *map(str, args), "--n", str(n),
                          "--nodes", str(nodes), "--grid", grid, "--machine", "keeneland", "--json"],
                         capture_output=True, text=True)
    if out.returncode:
        sys.exit(out.stderr.strip())
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="1,2,4,8,16")
    parser.add_argument("--programs", default="cholesky,qr")
    args = parser.parse_args()
    print("| program | nodes | n | paper (s) | " + " | ".join(f"{way} (s, TFLOP/s)" for way in WAYS)
          + " | GPU tasks the hosts took |")
    print("|---|---:|---:|---:|" + "---:|" * len(WAYS) + "---:|")
    for program in args.programs.split(","):
        name, tiles = TILES[program]
        for nodes in map(int, args.nodes.split(",")):
            n, grid, paper, *_ = PAPER[program][nodes]
            results = [simulate(way(name, tiles), n, nodes, grid) for way in WAYS.values()]
            cells = [f"{r['seconds']:.1f}, {r['gflops'] / 1e3:.2f}" for r in results]
            print(f"| {program} | {nodes} | {n:,} | {paper} | " + " | ".join(cells)
                  + f" | {results[-1]['totals']['host_took']:,} |", flush=True)


if __name__ == "__main__":
    main()
