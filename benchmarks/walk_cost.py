"""One rank's walk of a program's loop nest before a run, against the process grid size.

    python benchmarks/walk_cost.py [--grids 2x2,4x4,8x8,16x16,32x32] [--n 30720] [--nb 480]
                                   [--repeats 3] [--json FILE]

For Cholesky and QR on ``--n``/``--nb`` tiles (64×64 tiles by default) and each
grid, times ``recording.survey`` (the pass over the loop nest a rank makes before
generating its tasks; generation walks the same way) for rank 0 and the last rank,
best of ``--repeats`` rounds, and reports the slower of the two: no MPI, no
kernels. Each is timed twice in the same run: walking the whole loop nest (what
every rank did before, and still does for a program without a share plan) and
walking only the rank's share (``guided``: what a rank of a run does now). The
table gives the program's tasks (a 1×1 survey), the tasks the measured rank takes part
in, both walks, the share walk per task taken part in and against the first grid's, and the tile
objects the rank holds after its share walk (those of its tasks and its own tiles:
tiles are made when first met) against the program's tiles. ``--json`` writes the rows.

It also splits the measured rank's tasks into those it runs (it owns the main output:
they fall as 1/P) and those of other ranks it sends an input to, counts the input
versions it sends (one per tile version and receiving rank: type 4 instances; the
outputs it computes for other ranks, type 8, go home from its runs), and the tasks
among them that post a new one. A rank must meet each task it runs and each task
that posts a message: ``runs + posting`` is the floor of a walk that posts messages
as tasks are met, and messages per rank fall as about 1/sqrt(P), not 1/P. A rank
that met more would be meeting readers of a version already sent to their rank
(``taken part in / floor``).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tiledsl.compiler import compile_path
from tiledsl.driverload import import_driver
from tiledsl.runtime import Options
from tiledsl.runtime.distribution import parse_grid
from tiledsl.runtime.dataflow import events_of
from tiledsl.runtime.layout import make_distribution, make_matrices, make_params
from tiledsl.runtime.recording import record, survey

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ("cholesky", "qr")
PAPER = "paper (CPE'15 Table I, 64 nodes): 2.8 s task generation"


def driver_of(name: str):
    _, text = compile_path(ROOT / "programs" / f"{name}.tile")
    target = Path("/tmp") / f"walk_cost_{name}.py"
    target.write_text(text)
    return import_driver(target, f"walk_cost_{name}")


def surveyed(driver, params, grid: tuple[int, int], rank: int, guided: bool):
    """Seconds of ``rank``'s survey on ``grid`` (of its share when ``guided``), the survey, and
    the tile objects the rank then holds (its tasks' tiles and its own)."""
    matrices = make_matrices(driver, params, make_distribution(driver.PROGRAM, params, grid, 0), rank)
    guided = guided and events_of(driver, matrices, params) is not None
    started = time.perf_counter()
    found = survey(driver, matrices, params, rank, guided=guided)
    seconds = time.perf_counter() - started
    held = sum(len(set(m.made_tiles()) | set(m.local_tiles())) for m in matrices.values())
    return seconds, found, held


def rank_walk(driver, params, grid: tuple[int, int], rank: int, repeats: int, guided: bool):
    """Best seconds of ``repeats`` surveys by ``rank``, the tasks it takes part in, and the tile objects it holds."""
    runs = [surveyed(driver, params, grid, rank, guided) for _ in range(repeats)]
    return min(seconds for seconds, _, _ in runs), runs[0][1].count, runs[0][2]


def participation(driver, params, grid: tuple[int, int], rank: int) -> tuple[int, int, int]:
    """The tasks ``rank`` runs on ``grid``, the tasks of other ranks that make it post a message,
    and the input versions it sends (tile versions times the other ranks that run a task reading
    them, but the rank that computed the version: it keeps it), from a record of every task."""
    matrices = make_matrices(driver, params, make_distribution(driver.PROGRAM, params, grid, 0), rank)
    versions: dict = {}
    producers: dict = {}  # tile -> the rank that computed its current version
    runs, posting, messages = 0, 0, set()
    for kind, event in record(driver, matrices, params).events:
        if kind != "task":
            continue
        call, tiles, _ = event
        runner = tiles[call.main].rank
        runs += runner == rank
        before = len(messages)
        for index, tile in enumerate(tiles):
            if tile.rank == rank != runner != producers.get(tile) and call.modes[index] != "out":
                messages.add((tile, versions.get(tile, 0), runner))
        posting += len(messages) > before
        for index in call.writes:
            versions[tiles[index]] = versions.get(tiles[index], 0) + 1
            producers[tiles[index]] = runner
    return runs, posting, len(messages)


def row(name: str, driver, params, grid: tuple[int, int], total: int, tiles: int, repeats: int) -> dict:
    """The slower of rank 0 and the last rank on ``grid``, walking the whole nest and the share."""
    ranks = grid[0] * grid[1]
    whole = max(rank_walk(driver, params, grid, rank, repeats, False)[0] for rank in (0, ranks - 1))
    (seconds, tasks, held), slower = max((rank_walk(driver, params, grid, rank, repeats, True), rank)
                                         for rank in (0, ranks - 1))
    runs, posting, messages = participation(driver, params, grid, slower)
    return {"program": name, "grid": f"{grid[0]}x{grid[1]}", "ranks": ranks, "tasks_all": total,
            "tasks_rank": tasks, "runs": runs, "posting": posting, "inputs_sent": messages, "whole_walk_s": whole, "walk_s": seconds,
            "us_per_task": seconds / tasks * 1e6 if tasks else None, "tiles_all": tiles, "tiles_rank": held}


def program_rows(name: str, grids: list, n: int, nb: int, repeats: int) -> list[dict]:
    driver = driver_of(name)
    params = make_params(driver, Options(n=n, tiles={"nb": nb}))
    _, whole, _ = surveyed(driver, params, (1, 1), 0, False)
    tiles = sum(m.mt * m.nt for m in whole.matrices.values())
    rows = []
    for grid in grids:
        rows.append(row(name, driver, params, grid, whole.count, tiles, repeats))
        rows[-1]["vs_first"] = rows[-1]["walk_s"] / rows[0]["walk_s"]
        print(json.dumps(rows[-1]), flush=True)
    return rows


def per_task(r: dict) -> str:
    return "–" if r["us_per_task"] is None else f"{r['us_per_task']:.1f}"


def table(rows: list[dict], first: str) -> str:
    lines = [f"| program | grid | ranks | tasks (all) | tasks taken part in | runs | posting | input versions sent "
             f"| taken part in / floor "
             f"| whole walk s | share walk s | whole / share "
             f"| µs per task taken part in | share walk / (at {first}) | tiles (all) | tile objects (rank) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['program']} | {r['grid']} | {r['ranks']} | {r['tasks_all']} | {r['tasks_rank']} "
              f"| {r['runs']} | {r['posting']} | {r['inputs_sent']} | {r['tasks_rank'] / max(1, r['runs'] + r['posting']):.2f} "
              f"| {r['whole_walk_s']:.4f} | {r['walk_s']:.4f} | {r['whole_walk_s'] / r['walk_s']:.1f} "
              f"| {per_task(r)} | {r['vs_first']:.3f} | {r['tiles_all']} | {r['tiles_rank']} |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grids", default="2x2,4x4,8x8,16x16,32x32")
    parser.add_argument("--n", type=int, default=30720)
    parser.add_argument("--nb", type=int, default=480)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    grids = [parse_grid(text) for text in args.grids.split(",")]
    rows = [r for name in PROGRAMS for r in program_rows(name, grids, args.n, args.nb, args.repeats)]
    print(table(rows, args.grids.split(",")[0]))
    print(PAPER)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
