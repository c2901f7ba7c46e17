"""`tiledsl simulate` on Keeneland against the papers' measurements (issue 15).

    python benchmarks/keeneland_table.py [--max-nodes 64 | --nodes 2,4] [--programs cholesky,qr] [--one-row]
                                         [--broadcast auto|direct|tree] [--out rows.jsonl]

The weak-scaling runs of CPE'15 Table I (Song & Dongarra, seeds/): Cholesky from
n = 34,560 and QR from n = 32,256 on one node, the order growing with the square
root of the nodes, on hybrid tiles (Cholesky B = 1152, QR B = 896, host slices of 64:
the paper's tuning formula for 7 workers and 3 GPUs), one rank per node. Each row
(one JSON line, appended to ``--out`` as it is done, since the large ones take
minutes) holds the predicted seconds, TFLOP/s, critical path, the generation
thread's walk and the traffic, beside the paper's total seconds. ``--one-row`` runs
on a 1×P grid instead of the paper's (for QR, whose tile pairs then share a rank);
``--broadcast`` chooses how each tile version reaches its readers, as for ``run`` (auto: along a
tree of them from 8 nodes).
"""
import argparse
import json
import subprocess
import sys

#: CPE'15 Table I: nodes -> (n, grid, total s, computation s, communication s, task generation s)
PAPER = {
    "cholesky": {1: (34560, "1x1", 19.6, 18.3, None, 0.02), 2: (46080, "1x2", 22.6, 20.1, 1.9, 0.04),
                 4: (69120, "2x2", 37.2, 34.8, 5.7, 0.08), 8: (92160, "2x4", 43.7, 39.8, 8.4, 0.08),
                 16: (138240, "4x4", 74.4, 68.7, 15.6, 0.08), 32: (184320, "4x8", 90.7, 80.8, 26.6, 1.0),
                 64: (276480, "8x8", 152.6, 138.6, 48.0, 2.8),
                 100: (345600, "10x10", None, None, None, None)},  # SPAA'12: 75 TFLOP/s
    "qr": {1: (32256, "1x1", 102.7, 102.4, None, 0.01), 2: (43008, "1x2", 120.2, 119.9, 3.7, 0.4),
           4: (64512, "2x2", 218.2, 217.2, 76.3, 0.14), 8: (86016, "2x4", 260.5, 259.3, 101.2, 0.6),
           16: (129024, "4x4", 432.1, 420.2, 166.2, 1.9), 32: (172032, "4x8", 516.4, 503.2, 218.6, 2.1),
           64: (258048, "8x8", 871.4, 820.3, 361.0, 6.8),
           100: (322560, "10x10", None, None, None, None)},  # SPAA'12: 40 TFLOP/s
}
TILES = {"cholesky": ("hetero_cholesky", ("--B", 1152, "--b", 64, "--s", 2)),
         "qr": ("hetero_qr", ("--B", 896, "--b", 64, "--s", 2))}


def simulate(program: str, nodes: int, one_row: bool = False, broadcast: str = "auto") -> dict:
    n, grid, total, *_ = PAPER[program][nodes]
    grid = f"1x{nodes}" if one_row else grid
    name, tiles = TILES[program]
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "simulate", name, "--n", str(n),
                          *map(str, tiles), "--nodes", str(nodes), "--grid", grid, "--machine", "keeneland",
                          "--broadcast", broadcast, "--json"], capture_output=True, text=True)
    if out.returncode:
        sys.exit(out.stderr.strip())
    result = json.loads(out.stdout.strip().splitlines()[-1])
    totals = result["totals"]
    return {"program": program, "nodes": nodes, "grid": grid, "broadcast": result["broadcast"], "n": n, "tasks": result["tasks"], "paper_seconds": total,
            "seconds": round(result["seconds"], 2), "tflops": round(result["gflops"] / 1e3, 2),
            "critical_path": round(result["critical_path"], 2), "area_bound": round(result["area_bound"], 2),
            "walk_seconds": round(result["walk"]["seconds"], 2),
            "messages_per_rank": round(totals["messages_sent"] / nodes),
            "most_messages_sent": max(r["messages_sent"] for r in result["ranks"]),
            "busiest_link_seconds": round(result["busiest"]["link_seconds"], 2),
            "gib_per_rank": round(totals["bytes_sent"] / nodes / 2 ** 30, 2),
            "simulation_seconds": round(result["simulation_seconds"], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-nodes", type=int, default=64)
    parser.add_argument("--nodes", help="only these node counts (comma-separated), e.g. 100 for SPAA'12's")
    parser.add_argument("--programs", default="cholesky,qr")
    parser.add_argument("--one-row", action="store_true", help="1xP grids instead of the paper's")
    parser.add_argument("--broadcast", choices=["auto", "direct", "tree"], default="auto",
                        help="how tile versions reach their readers (as run)")
    parser.add_argument("--out", help="append each row to this file as one JSON line")
    args = parser.parse_args()
    for program in args.programs.split(","):
        wanted = {int(x) for x in args.nodes.split(",")} if args.nodes else None
        for nodes in sorted(PAPER[program]):
            if nodes > args.max_nodes if wanted is None else nodes not in wanted:
                continue
            row = simulate(program, nodes, args.one_row, args.broadcast)
            print(json.dumps(row), flush=True)
            if args.out:
                with open(args.out, "a") as target:
                    target.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
