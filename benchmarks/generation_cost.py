"""One rank's task generation at the sizes of CPE'15 Table I, with the real engine (issue 15).

    python benchmarks/generation_cost.py [--nodes 8,64] [--ranks first,last] [--repeats 1] [--json FILE]

For the hybrid-tile Cholesky of Table I (``programs/hetero_cholesky.tile``, B = 1152,
host slices of b = 64, s = 2; n and the grid as the paper's row, one rank per node,
tiles on the hosts), each chosen rank surveys its share of the loop nest, then walks
it again submitting its share of each task to the runtime's engine (its owner tasks,
the sends of its tiles to other ranks, the copies it receives; nothing runs, no
message is posted). Reported: the tasks the rank takes part in, those it runs, its
sends, the survey's seconds, and the generation thread's CPU seconds (best of
``--repeats``), against the paper's task-generation column (2.8 s at 64 nodes).
Every task stays in the window (nothing runs), so the garbage collector is off while
generating (a run's window of a few hundred tasks keeps its traversals short).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from runtime_costs import driver_of, generation
from keeneland_table import PAPER

from tiledsl.runtime import Options
from tiledsl.runtime.distribution import parse_grid
from tiledsl.runtime.protocol import Instance

ROOT = Path(__file__).resolve().parents[1]
TILES = {"B": 1152, "b": 64, "s": 2}


def measure(driver, nodes: int, rank: int, repeats: int) -> dict:
    n, grid_text, *_, paper_generation = PAPER["cholesky"][nodes]
    options = Options(n=n, tiles=dict(TILES))
    walk = min((generation(driver, options, rank, parse_grid(grid_text), True) for _ in range(repeats)),
               key=lambda walk: walk.seconds)
    created = walk.engine.exchange.created
    return {"nodes": nodes, "grid": grid_text, "n": n, "rank": rank, "tasks_taking_part": walk.survey.count,
            "runs": created[Instance.OWNER], "sends": created[Instance.INTER_NODE_ALIEN_INPUT],
            "shares": walk.shares, "tracker_queries": walk.engine.tracker.queries,
            "survey_s": round(walk.survey_seconds, 2), "generation_s": round(walk.seconds, 2),
            "us_per_share": round(walk.seconds / walk.shares * 1e6, 1) if walk.shares else None,
            "paper_generation_s": paper_generation}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="8,64")
    parser.add_argument("--ranks", default="first,last", help="first, last or rank numbers, comma-separated")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    driver = driver_of(ROOT / "programs/hetero_cholesky.tile", "hetero_cholesky")
    rows = []
    for nodes in map(int, args.nodes.split(",")):
        for which in args.ranks.split(","):
            rank = {"first": 0, "last": nodes - 1}.get(which)
            rows.append(measure(driver, nodes, int(which) if rank is None else rank, args.repeats))
            print(json.dumps(rows[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
