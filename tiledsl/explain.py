"""``tiledsl explain``: who owns each task and which instances every rank creates.

The program's own driver is run once with a rank that takes part in every task,
recording the global task sequence; each task's instance types on each rank
then follow from the protocol (:mod:`tiledsl.runtime.protocol`). Tile versions
are tracked in program order to predict the inter-node messages (a version sent
to a rank once) and the intra-node host/GPU copies.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .runtime.layout import make_distribution, make_matrices, make_params, tiling_sources
from .runtime.protocol import Instance, instances
from .runtime.recording import record


@dataclass
class PlannedTask:
    index: int
    call: object
    tiles: tuple
    places: tuple  # (rank, device) per argument
    per_rank: dict = field(default_factory=dict)  # rank -> [(Instance, arg index)]

    @property
    def owner(self):
        return self.places[self.call.main]


@dataclass
class Plan:
    """The explained program: its tasks, per-rank instances and predicted traffic."""

    program: str
    params: dict
    grid: tuple
    gpus: int
    tasks: list
    messages: dict  # (sender, receiver) -> count
    copies: dict  # rank -> count of host/GPU copies
    gpu_ratio: tuple | None = None  # (H, G) host/GPU columns per cycle of uniform tiles on GPUs
    sources: dict = field(default_factory=dict)  # tile setting -> where its value came from

    def totals(self) -> dict:
        """rank -> Counter of instance types."""
        counts = {r: Counter() for r in range(self.grid[0] * self.grid[1])}
        for task in self.tasks:
            for rank, found in task.per_rank.items():
                counts[rank].update(kind for kind, _ in found)
        return counts


def _recorded(driver, options, grid, gpus, rank):
    params = make_params(driver, options)
    distribution = make_distribution(driver.PROGRAM, params, grid, gpus, getattr(options, "gpu_ratio", None))
    matrices = make_matrices(driver, params, distribution, 0 if rank is None else rank)
    return record(driver, matrices, params, rank), params


def submitted_tasks(driver, options, grid, gpus, rank) -> list:
    """(call, tile positions) of the tasks the driver submits on ``rank`` (None: every task)."""
    recorder, _ = _recorded(driver, options, grid, gpus, rank)
    return [(call, tuple((t.matrix.name, t.i, t.j) for t in tiles)) for call, tiles, _ in recorder.submitted]


def plan(driver, options, grid: tuple[int, int], gpus: int = 0) -> Plan:
    """Explain the driver's program for ``options`` on a ``grid`` with ``gpus`` GPUs per rank."""
    recorder, params = _recorded(driver, options, grid, gpus, None)
    ranks = range(grid[0] * grid[1])
    tasks, versions = [], Counter()
    sent: set = set()
    copied: set = set()
    messages: Counter = Counter()
    copies: Counter = Counter()
    for kind, event in recorder.events:
        if kind == "release":  # like the runtime: the next read of the tile is sent anew
            key = (event.matrix.name, event.i, event.j)
            sent -= {entry for entry in sent if entry[0] == key}
            copied -= {entry for entry in copied if entry[0] == key}
            continue
        call, tiles, _ = event
        index = len(tasks)
        places = tuple((t.rank, t.device) for t in tiles)
        task = PlannedTask(index, call, tiles, places)
        for rank in ranks:
            found = instances(call, places, rank)
            if found:
                task.per_rank[rank] = found
        main = places[call.main]
        for position, (tile, place) in enumerate(zip(tiles, places)):
            key = (tile.matrix.name, tile.i, tile.j)
            if call.modes[position] != "out" and place != main:
                _count_move(key, versions[key], place, main, sent, copied, messages, copies)
        for position in call.writes:
            key = (tiles[position].matrix.name, tiles[position].i, tiles[position].j)
            versions[key] += 1
            if position != call.main and places[position] != main:
                _count_move(key, versions[key], main, places[position], sent, copied, messages, copies, output=True)
        tasks.append(task)
    ratio = getattr(options, "gpu_ratio", None) or (1, 1)
    uniform_on_gpus = gpus and driver.PROGRAM.tiling.kind == "uniform"
    return Plan(driver.PROGRAM.name, params.as_dict(), grid, gpus, tasks, dict(messages), dict(copies),
                tuple(ratio) if uniform_on_gpus else None, tiling_sources(driver.PROGRAM, params, options))


def _count_move(key, version, source, target, sent, copied, messages, copies, output=False):
    """One tile version moving from place ``source`` to place ``target`` (rank, device).

    Counted as the runtime moves it: an input once per version and place (a message
    once per version and rank, staged through the sender's host from a GPU, copied to
    the receiver's GPU); a minor output every time it goes home.
    """
    if source[0] == target[0]:
        if output or (key, version, target) not in copied:
            copied.add((key, version, target))
            copies[source[0]] += 1
        return
    if output or (key, version, target[0]) not in sent:
        sent.add((key, version, target[0]))
        messages[source[0], target[0]] += 1
        copies[source[0]] += source[1] != 0
        if output:
            copies[target[0]] += target[1] != 0
    if not output and target[1] != 0 and (key, version, target) not in copied:
        copied.add((key, version, target))
        copies[target[0]] += 1


# ---------------------------------------------------------------- rendering
def _place(place) -> str:
    rank, device = place
    return f"({rank}, {'host' if device == 0 else f'gpu{device}'})"


def render(plan: Plan, source_name: str, limit: int = 400) -> str:
    nranks = plan.grid[0] * plan.grid[1]
    tiles = " ".join(f"{k}={v}" for k, v in plan.params.items() if k in ("nb", "B", "b", "s") and v is not None)
    lines = [f"{plan.program} ({source_name}) on a {plan.grid[0]}x{plan.grid[1]} grid, "
             f"{plan.gpus} GPU(s) per rank"
             + (f" (host:GPU columns {plan.gpu_ratio[0]}:{plan.gpu_ratio[1]})" if plan.gpu_ratio else "")
             + f": n={plan.params['n']} {tiles}, {len(plan.tasks)} tasks"]
    tuned = [f"{name} {source}" for name, source in plan.sources.items() if source.startswith("tuned")]
    if tuned:
        lines.append("tuned values: " + ", ".join(tuned))
    lines.append("")
    rows = [(str(task.index), str(task.call.line), f"{task.call.kernel}({', '.join(str(t) for t in task.tiles)})",
             _place(task.owner), [",".join(str(int(k)) for k, _ in task.per_rank.get(r, [])) or "-"
                                  for r in range(nranks)])
            for task in plan.tasks[:limit]]
    heads = [f"r{r}" for r in range(nranks)]
    # every column as wide as its widest cell
    index_w, line_w = (max([5] + [len(row[c]) for row in rows]) for c in (0, 1))
    call_w, owner_w = (max([len(head)] + [len(row[c]) for row in rows]) for c, head in ((2, "call"), (3, "owner")))
    rank_w = [max([len(head)] + [len(row[4][r]) for row in rows]) for r, head in enumerate(heads)]

    def line(index, at, call, owner, cells):
        ranks = "  ".join(f"{cell:<{width}}" for cell, width in zip(cells, rank_w))
        return f"{index:>{index_w}} {at:>{line_w}}  {call:<{call_w}}  {owner:<{owner_w}}  {ranks}".rstrip()

    lines.append(line("task", "line", "call", "owner", heads))
    lines += [line(*row) for row in rows]
    if len(plan.tasks) > limit:
        lines.append(f"  ... {len(plan.tasks) - limit} more tasks (use a smaller size to see them all)")
    lines += ["", "instance types: " + ", ".join(f"{int(k)} {k.label}" for k in Instance), ""]
    totals = plan.totals()
    grand = Counter()
    for counts in totals.values():
        grand.update(counts)
    # the grand totals are the widest numbers of their columns
    type_w = [max(6, len(str(grand[k]))) + 1 for k in Instance]
    total_w = max(7, len(str(sum(grand.values())))) + 1
    rank_w = max(4, len(str(len(totals) - 1)))
    lines.append(f"{'rank':<{rank_w}} " + "".join(f"{int(k):>{w}}" for k, w in zip(Instance, type_w))
                 + f"{'total':>{total_w}}")
    for rank, counts in totals.items():
        lines.append(f"{rank:>{rank_w}} " + "".join(f"{counts[k]:>{w}}" for k, w in zip(Instance, type_w))
                     + f"{sum(counts.values()):>{total_w}}")
    lines.append(f"{'all':<{rank_w}} " + "".join(f"{grand[k]:>{w}}" for k, w in zip(Instance, type_w))
                 + f"{sum(grand.values()):>{total_w}}")
    sent = sum(plan.messages.values())
    lines += ["", f"messages between ranks (tile versions sent): {sent}",
              f"host/GPU copies inside ranks: {sum(plan.copies.values())}"]
    return "\n".join(lines)


def as_json(plan: Plan) -> dict:
    totals = plan.totals()
    return {
        "program": plan.program, "params": plan.params, "grid": list(plan.grid), "gpus": plan.gpus,
        "gpu_ratio": list(plan.gpu_ratio) if plan.gpu_ratio else None, "sources": plan.sources,
        "tasks": [{"index": t.index, "kernel": t.call.kernel, "line": t.call.line,
                   "tiles": [str(x) for x in t.tiles], "owner": list(t.owner),
                   "instances": {str(r): [[int(k), a] for k, a in found] for r, found in t.per_rank.items()}}
                  for t in plan.tasks],
        "totals": {str(r): {str(int(k)): c[k] for k in Instance} for r, c in totals.items()},
        "messages": [[s, r, c] for (s, r), c in sorted(plan.messages.items())],
        "copies": {str(r): c for r, c in plan.copies.items()},
    }
