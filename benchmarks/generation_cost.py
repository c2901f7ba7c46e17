"""One rank's task generation at the sizes of CPE'15 Table I, with the real engine (issue 15).

    python benchmarks/generation_cost.py [--nodes 8,64] [--ranks first,last] [--repeats 3] [--json FILE]

For the hybrid-tile Cholesky of Table I (``programs/hetero_cholesky.tile``, B = 1152,
host slices of b = 64, s = 2; n and the grid as the paper's row, one rank per node,
tiles on the hosts), each chosen rank surveys its share of the loop nest, then walks
it again submitting its share of each task to the runtime's engine (its owner tasks,
the sends of its tiles to other ranks, the copies it receives; nothing runs, no
message is posted). Reported: the tasks the rank takes part in, those it runs, its
sends, the survey's and the generation thread's CPU seconds (each the best of
``--repeats`` runs, each in a process of its own), against the paper's
task-generation column (2.8 s at 64 nodes). Every task stays in the window (nothing
runs), so the garbage collector is off while generating (a run's window of a few
hundred tasks keeps its traversals short).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from runtime_costs import driver_of, generation
from keeneland_table import PAPER

from tiledsl.runtime import Options
from tiledsl.runtime.distribution import parse_grid
from tiledsl.runtime.protocol import Instance

ROOT = Path(__file__).resolve().parents[1]
TILES = {"B": 1152, "b": 64, "s": 2}


def measure(driver, nodes: int, rank: int) -> dict:
    """One rank's survey and generation (:func:`runtime_costs.generation`) at Table I's ``nodes``."""
    n, grid_text, *_, paper_generation = PAPER["cholesky"][nodes]
    walk = generation(driver, Options(n=n, tiles=dict(TILES)), rank, parse_grid(grid_text), True)
    created = walk.engine.exchange.created
    return {"nodes": nodes, "grid": grid_text, "n": n, "rank": rank, "tasks_taking_part": walk.survey.count,
            "runs": created[Instance.OWNER], "sends": created[Instance.INTER_NODE_ALIEN_INPUT],
            "shares": walk.shares, "tracker_queries": walk.engine.tracker.queries,
            "survey_s": round(walk.survey_seconds, 2), "generation_s": round(walk.seconds, 2),
            "paper_generation_s": paper_generation}


def best_of(nodes: int, rank: int, repeats: int) -> dict:
    """The least survey and generation seconds of ``repeats`` runs of :func:`measure`, each in a
    process of its own (a fresh heap each time, as a rank's)."""
    runs = [json.loads(subprocess.run([sys.executable, __file__, "--child", str(nodes), str(rank)], check=True,
                                      capture_output=True, text=True).stdout) for _ in range(repeats)]
    best = dict(runs[0])
    best.update({key: min(run[key] for run in runs) for key in ("survey_s", "generation_s")})
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="8,64")
    parser.add_argument("--ranks", default="first,last", help="first, last or rank numbers, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(driver_of(ROOT / "programs/hetero_cholesky.tile", "hetero_cholesky"), *args.child)))
        return
    rows = []
    for nodes in map(int, args.nodes.split(",")):
        for which in args.ranks.split(","):
            rank = {"first": 0, "last": nodes - 1}.get(which)
            rows.append(best_of(nodes, int(which) if rank is None else rank, args.repeats))
            print(json.dumps(rows[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")

if __name__ == "__main__":
    main()
