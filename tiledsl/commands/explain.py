"""``tiledsl explain``: where each task runs and which instances every rank creates.

The program's own driver is run once with a rank that takes part in every task;
each task it submits is explained as it comes: it runs where its main output
lives, or on that rank's host if its kernel has no GPU body (a user kernel without
``NAME_gpu``: the kernel module is loaded, as a run loads it, to know), its instance
types on each rank follow from the protocol (:mod:`tiledsl.runtime.protocol`), and tile versions,
tracked in program order, predict the inter-node messages (a version sent to a
rank once) and the intra-node host/GPU copies. Totals are counters, so memory
grows with the tiles, not the tasks; the per-task table is kept only up to
:data:`TABLE_LIMIT` tasks, and :func:`explain` refuses past :data:`WALK_LIMIT`.
"""
from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace

from ..runtime.dataflow import whole_walk_reason
from ..runtime.layout import make_distribution, make_matrices, make_params, tiling_sources
from ..runtime.options import tile_values
from ..runtime.priorities import in_force
from ..runtime.program import argument_texts, check_values, flatten
from ..runtime.matrix import call_views, part_of
from ..runtime.protocol import Instance, delivery, instances, runs_at
from ..runtime.recording import LoopNestTarget, walk as run_walk
from ..runtime.reporting import idle_gpus_warning, no_gpu_task_warning, rank_columns, ratio_text
from ..runtime.resources import bytes_text
from ..runtime.userkernels import gpu_kernels
from ..runtime.world import RankError, UsageError

TABLE_LIMIT = 100_000  # tasks kept one by one (the table, --json's task list); past it, totals only
WALK_LIMIT = 500_000  # tasks explained at all: a streaming walk of 10-50 µs per task


@dataclass
class PlannedTask:
    index: int
    call: object
    tiles: tuple
    places: tuple  # (rank, device) per argument
    per_rank: dict = field(default_factory=dict)  # rank -> [(Instance, arg index)]
    values: tuple = ()  # the value arguments, in declaration order
    at: tuple | None = None  # (rank, device) where it runs: its main output's place (the default), or that host
    views: tuple | None = None  # per tile, the slices of the sub-range it names (call_views); None: whole tiles

    def __post_init__(self):
        if self.at is None:
            self.at = self.places[self.call.main]

    @property
    def owner(self):
        """The place that computes the task (its owner rank, and the device it runs on)."""
        return self.at

    @property
    def on_host_for_want_of_gpu_body(self) -> bool:
        return self.at != self.places[self.call.main]


@dataclass
class Plan:
    """The explained program: its task count, per-rank instance totals, predicted traffic,
    and its tasks one by one (None where they were left out)."""

    program: str
    params: dict
    grid: tuple
    gpus: int
    tasks: list | None
    task_count: int
    counts: dict  # rank -> Counter of instance types
    messages: dict  # (sender, receiver) -> count
    copies: dict  # rank -> count of host/GPU copies
    gpu_ratio: tuple | None = None  # (H, G) host/GPU columns per cycle of uniform tiles on GPUs
    sources: dict = field(default_factory=dict)  # tile setting -> where its value came from
    runs_on: dict = field(default_factory=dict)  # rank -> Counter of tasks by the device they run on
    on_host: dict = field(default_factory=dict)  # kernel -> tasks on the host for want of a GPU body
    volume: dict = field(default_factory=dict)  # (sender, receiver) -> bytes of the messages
    tiling: str = "uniform"  # the program's kind of tiling, which says which params are tile settings
    own_params: tuple = ()  # the program's own parameters' names (``param``), shown with the sizes
    gpu_backend: str | None = None  # whose tuned values were used, with GPUs (None without)
    columns: int | None = None  # the most tile columns a rank holds of one matrix
    held: dict = field(default_factory=dict)  # rank -> the devices holding a tile of its that some task touches
    owned: dict = field(default_factory=dict)  # rank -> the tiles it owns
    # how a run's ranks walk the loop nest (with the program's priorities), as run --json says it
    walk: dict = field(default_factory=dict)
    priorities: str = "program"  # whose priorities order a run's tasks, as run --json's "priorities"

    def rank_stats(self) -> list[dict]:
        """Each rank's statistics as a run's warnings read them: the tasks it runs (on each device), the
        tiles it owns, the tile versions it sends, its GPUs that hold no tile a task touches."""
        sent = Counter()
        for (sender, _), count in self.messages.items():
            sent[sender] += count
        return [{"rank": rank, "tasks": sum(devices.values()), "owned_tiles": self.owned.get(rank, 0),
                 "messages_sent": sent[rank],
                 "tasks_by_device": {_device(d): devices[d] for d in range(self.gpus + 1)},
                 "gpus_without_tiles": [d for d in range(1, self.gpus + 1) if d not in self.held[rank]]}
                for rank, devices in self.runs_on.items()]

    def totals(self) -> dict:
        """rank -> Counter of instance types."""
        return self.counts


def _matrices(driver, options, grid, gpus, rank):
    params = make_params(driver, options)
    distribution = make_distribution(driver.PROGRAM, params, grid, gpus, getattr(options, "gpu_ratio", None))
    return make_matrices(driver, params, distribution, 0 if rank is None else rank), params


def explain(driver, options, grid: tuple[int, int], gpus: int = 0, totals_only: bool = False) -> Plan:
    """:func:`plan` within bounds: tasks counted first (cheaply), a :class:`UsageError` past
    :data:`WALK_LIMIT`, the per-task table left out past :data:`TABLE_LIMIT` or on request."""
    from .graph import count_tasks, too_many_tasks

    count = count_tasks(driver, options, grid, gpus, WALK_LIMIT)
    if count > WALK_LIMIT:
        raise too_many_tasks(driver, options, WALK_LIMIT,
                             f"explain walks at most {WALK_LIMIT} (past {TABLE_LIMIT} it prints totals only)")
    return plan(driver, options, grid, gpus, keep_tasks=not totals_only and count <= TABLE_LIMIT)


def plan(driver, options, grid: tuple[int, int], gpus: int = 0, keep_tasks: bool = True) -> Plan:
    """Explain the driver's program for ``options`` on a ``grid`` with ``gpus`` GPUs per rank."""
    matrices, params = _matrices(driver, options, grid, gpus, None)
    walk = _Walk(matrices, grid[0] * grid[1], keep_tasks, _gpu_kernels(driver) if gpus else frozenset())
    run_walk(driver, walk, params, 0)
    ratio = getattr(options, "gpu_ratio", None) or (1, 1)
    uniform_on_gpus = gpus and driver.PROGRAM.tiling.kind == "uniform"
    return Plan(driver.PROGRAM.name, params.as_dict(), grid, gpus, walk.tasks, walk.count, walk.counts,
                dict(walk.traffic.messages), dict(walk.traffic.copies),
                tuple(ratio) if uniform_on_gpus else None, tiling_sources(driver.PROGRAM, params, options),
                walk.runs_on, dict(walk.on_host), dict(walk.traffic.volume), driver.PROGRAM.tiling.kind,
                tuple(driver.PROGRAM.params), getattr(options, "gpu_backend", None) if gpus else None,
                rank_columns(matrices, grid), walk.held,
                Counter(matrix.rank_of(i, j) for matrix in matrices.values()
                        for i in range(matrix.mt) for j in range(matrix.nt)),
                *_walk(driver, matrices, params, grid[0] * grid[1], options.priorities))


def _walk(driver, matrices, params, ranks: int, priorities: str) -> tuple[dict, str]:
    """How the ranks of a run with ``--priorities priorities`` walk the loop nest, and whose priorities
    that run has (run --json's ``walk`` and ``priorities``)."""
    because = whole_walk_reason(driver, matrices, params, ranks, priorities)
    shares = ranks > 1 and because is None
    return ({"rank_walks": "share" if shares else "whole", "whole_because": because},
            in_force(driver.PROGRAM, priorities, over_shares=shares))


def _gpu_kernels(driver) -> frozenset:
    """The program's kernels with a GPU body, as a run finds them; a module that fails to load is
    a usage error here (explain runs no kernel)."""
    try:
        return gpu_kernels(driver.PROGRAM, driver)
    except RankError as error:
        raise UsageError(str(error)) from None


def _key(tile) -> tuple:
    return (tile.matrix.name, tile.i, tile.j)


class _Walk(LoopNestTarget):
    """What the driver's loop nest submits to while explained (a rank taking part in every
    task): each task is explained as it arrives and kept only if ``keep_tasks``."""

    def __init__(self, matrices: dict, nranks: int, keep_tasks: bool, gpu_kernels: frozenset):
        super().__init__(matrices)  # every rank's share: all of the loop nest
        self.tasks = [] if keep_tasks else None
        self.gpu_kernels = gpu_kernels
        self.count = 0
        self.counts = {rank: Counter() for rank in range(nranks)}
        self.runs_on = {rank: Counter() for rank in range(nranks)}
        self.held = {rank: set() for rank in range(nranks)}  # as a run stores them: the tiles tasks touch
        self.on_host = Counter()
        self.versions = Counter()  # tile key -> versions written so far
        self.traffic = _Traffic()

    def release(self, tile, at=None):
        self.traffic.forget(_key(tile))  # like the runtime: the next read of the tile is sent anew

    def submit(self, call, tiles, regions, priority, values=(), at=None):
        check_values(call, values)  # as a run refuses them: a NaN argument is no plan of a run
        call, tiles, regions = flatten(call, tiles, regions)
        places = tuple((t.rank, t.device) for t in tiles)
        at = runs_at(places[call.main], call.kernel, self.gpu_kernels)
        views = call_views(call, tiles, regions)
        task = PlannedTask(self.count, call, tiles, places, values=values, at=at, views=views)
        unsent = set()  # the inputs whose version is already at the task's rank: no send, no instance
        for position, (tile, place) in enumerate(zip(tiles, places)):
            if call.modes[position] != "out" and place != at:
                key = _key(tile)
                moved = part_of(tile, views[position]) if views is not None and call.modes[position] == "in" else None
                if not self.traffic.move(key, self.versions[key], place, at, tile.shape, part=moved):
                    unsent.add(position)
        for rank in sorted({place[0] for place in places}):  # only a task's own ranks create its instances
            found = [(kind, index) for kind, index in instances(call, places, rank, at)
                     if kind != Instance.INTER_NODE_ALIEN_INPUT or index not in unsent]
            if found:
                task.per_rank[rank] = found
                self.counts[rank].update(kind for kind, _ in found)
        self.runs_on[at[0]][at[1]] += 1
        for rank, device in places:
            self.held[rank].add(device)
        if task.on_host_for_want_of_gpu_body:
            self.on_host[call.kernel] += 1
        for position in call.writes:  # outputs computed elsewhere go home (the main output too, from a host)
            key = _key(tiles[position])
            self.versions[key] += 1
            if places[position] != at:
                self.traffic.move(key, self.versions[key], at, places[position], tiles[position].shape, output=True)
        if self.tasks is not None:
            self.tasks.append(task)
        self.count += 1


class _Traffic:
    """Predicted messages and host/GPU copies, counted as the runtime moves tile versions.

    Only each tile's latest version is remembered (an older one is never read
    again), so memory grows with the tiles, not the tasks.
    """

    def __init__(self):
        self.messages: Counter = Counter()  # (sender, receiver) -> tile versions sent
        self.volume: Counter = Counter()  # (sender, receiver) -> bytes sent
        self.copies: Counter = Counter()  # rank -> host/GPU copies
        self._sent: dict = {}  # tile key -> (version, {rank: parts sent there})
        self._copied: dict = {}  # tile key -> (version, {place: parts copied there})

    def forget(self, key) -> None:
        self._sent.pop(key, None)
        self._copied.pop(key, None)

    def move(self, key, version, source, target, shape, output=False, part=None) -> bool:
        """One tile version (of ``shape``, or the sub-range ``part`` of it that an ``in`` argument
        names) moving from place ``source`` to place ``target`` (rank, device); whether a message
        goes between the ranks (False within a rank).

        An input moves as the runtime moves it (:func:`.protocol.delivery`: once per version
        and place, the part or the whole tile, not at all where the whole version went): a
        message once per rank, staged through the sender's host from a GPU, copied to the
        receiver's GPU; a minor output every time it goes home (a rank that computed it on its
        host keeps that version: it is not sent back there).
        """
        if source[0] == target[0]:
            if _delivery(self._copied, key, version, target, part, shape)[0] or output:
                self.copies[source[0]] += 1
            return False
        moves, what = _delivery(self._sent, key, version, target[0], part, shape)
        if output and source[1] == 0:  # computed on a host, which keeps the version for its own readers
            _delivery(self._sent, key, version, source[0], None, shape)
        if moves or output:
            self.messages[source[0], target[0]] += 1
            rows, cols = shape if what is None else (what[1] - what[0], what[3] - what[2])
            self.volume[source[0], target[0]] += rows * cols * 8
            self.copies[source[0]] += source[1] != 0
            if output:
                self.copies[target[0]] += target[1] != 0
        if not output and target[1] != 0 and _delivery(self._copied, key, version, target, part, shape)[0]:
            self.copies[target[0]] += 1
        return moves or output


def _delivery(deliveries: dict, key, version, where, part, shape) -> tuple[bool, tuple | None]:
    """:func:`.protocol.delivery` for ``version`` of tile ``key`` (the latest one it saw)."""
    known, delivered = deliveries.get(key, (None, None))
    if known != version:
        delivered = {}
        deliveries[key] = (version, delivered)
    return delivery(delivered, where, part, shape)


# ---------------------------------------------------------------- rendering
def _device(device: int) -> str:
    return "host" if device == 0 else f"gpu{device}"


def _place(place) -> str:
    rank, device = place
    return f"({rank}, {_device(device)})"


def _runs_on(task) -> str:
    """Where ``task`` runs; starred when on the host for want of a GPU body (see the table's note)."""
    return _place(task.at) + ("*" if task.on_host_for_want_of_gpu_body else "")


def tiling_text(params: dict, tiling: str) -> str:
    """The settings of a ``tiling`` kind of tiling in ``params``, as ``nb=256`` or ``B=1024 b=128 s=2``."""
    return " ".join(f"{k}={v}" for k, v in tile_values(params, tiling).items())


def render(plan: Plan, source_name: str) -> str:
    lines = [f"{plan.program} ({source_name}) on a {plan.grid[0]}x{plan.grid[1]} grid, "
             f"{plan.gpus} GPU(s) per rank"
             + (f" (host:GPU columns {plan.gpu_ratio[0]}:{plan.gpu_ratio[1]})" if plan.gpu_ratio else "")
             + f": n={plan.params['n']} {tiling_text(plan.params, plan.tiling)}"
             + "".join(f" {name}={plan.params[name]}" for name in plan.own_params)
             + f", {plan.task_count} tasks"]
    tuned = [f"{name} {source}" for name, source in plan.sources.items() if source.startswith("tuned")]
    if tuned:
        lines.append("tuned values: " + ", ".join(tuned))
    lines.append("")
    if plan.tasks is None:
        lines.append(f"(per-task table left out: it is shown up to {TABLE_LIMIT} tasks, without --totals)")
    else:
        lines += _task_table(plan)
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
    for first, last, counts in _rank_runs(totals):
        if counts is None:  # ranks with nothing to do, one line for them all (1,000,000 lines of zeros were printed)
            lines.append(f"{first:>{rank_w}} to {last}: nothing ({last - first + 1} ranks)")
        else:
            lines.append(f"{first:>{rank_w}} " + "".join(f"{counts[k]:>{w}}" for k, w in zip(Instance, type_w))
                         + f"{sum(counts.values()):>{total_w}}")
    lines.append(f"{'all':<{rank_w}} " + "".join(f"{grand[k]:>{w}}" for k, w in zip(Instance, type_w))
                 + f"{sum(grand.values()):>{total_w}}")
    sent = sum(plan.messages.values())
    lines += ["", f"messages between ranks (tile versions sent): {sent} ({bytes_text(sum(plan.volume.values()), 1)})",
              f"host/GPU copies inside ranks: {sum(plan.copies.values())}"]
    if plan.walk["rank_walks"] == "share":
        levels = "; derived priorities over each rank's share" if plan.priorities == "derived-share" else ""
        lines.append(f"walk: each rank walks its share of the loop nest{levels}")
    elif plan.walk["whole_because"]:
        lines.append(f"walk: every rank walks the whole loop nest: {plan.walk['whole_because']}")
    if plan.gpus:
        lines += [""] + _placement(plan)
    return "\n".join(lines)


def _rank_runs(totals: dict):
    """(first, last, counts) of each rank in turn (the ranks are 0 .. P-1), runs of two or more ranks with
    nothing to do (no instance at all) as one (first, last, None)."""
    for idle, group in itertools.groupby(sorted(totals), key=lambda rank: not any(totals[rank].values())):
        ranks = list(group)
        if idle and len(ranks) > 1:
            yield ranks[0], ranks[-1], None
        else:
            yield from ((rank, rank, totals[rank]) for rank in ranks)


def _placement(plan: Plan) -> list[str]:
    """How many tasks each rank runs on its host and on each GPU, and which kernels run on the host
    for want of a GPU body."""
    lines = [f"tasks run on rank {rank}: " + ", ".join(f"{_device(d)} {devices[d]}" for d in range(plan.gpus + 1))
             for rank, devices in plan.runs_on.items() if devices]
    # as a run warns of its GPUs left without work, in the same words; kernels without a GPU body are said below
    ranks = [stats for stats in plan.rank_stats() if stats["tasks"]]
    result = SimpleNamespace(gpus=plan.gpus, gpu_ratio=plan.gpu_ratio, host_only_kernels=(), gpu_kernels=())
    idle = idle_gpus_warning(result, ranks, columns=plan.columns) if not plan.on_host else None
    # (kernels without a GPU body are said below)
    none_on_gpus = no_gpu_task_warning(result, ranks, explained=True) if not plan.on_host else None
    lines += [said for said in (idle, none_on_gpus) if said]
    if plan.on_host:
        lines.append("on the host for want of a GPU body (NAME_gpu), their main output on a GPU: "
                     + ", ".join(f"{kernel} {count} task{'' if count == 1 else 's'}"
                                 for kernel, count in plan.on_host.items()))
    return lines


def _task_table(plan: Plan) -> list[str]:
    """Every task kept (up to :data:`TABLE_LIMIT`): index, line, call, owner (its rank and the
    device the task runs on), and each rank's instance types."""
    nranks = plan.grid[0] * plan.grid[1]
    rows = [(str(task.index), str(task.call.line), call_text(task),
             _runs_on(task), [",".join(str(int(k)) for k, _ in task.per_rank.get(r, [])) or "-"
                              for r in range(nranks)])
            for task in plan.tasks]
    heads = [f"r{r}" for r in range(nranks)]
    # every column as wide as its widest cell
    index_w, line_w = (max([5] + [len(row[c]) for row in rows]) for c in (0, 1))
    call_w, place_w = (max([len(head)] + [len(row[c]) for row in rows]) for c, head in ((2, "call"), (3, "owner")))
    rank_w = [max([len(head)] + [len(row[4][r]) for row in rows]) for r, head in enumerate(heads)]

    def line(index, at, call, place, cells):
        ranks = "  ".join(f"{cell:<{width}}" for cell, width in zip(cells, rank_w))
        return f"{index:>{index_w}} {at:>{line_w}}  {call:<{call_w}}  {place:<{place_w}}  {ranks}".rstrip()

    lines = [line("task", "line", "call", "owner", heads)]
    lines += [line(*row) for row in rows]
    if plan.on_host:
        lines.append("* on its owner's host: the kernel has no GPU body (NAME_gpu) and the main output is on a GPU, "
                     "so the task's GPU tiles are copied to the host and back")
    return lines


def call_text(task: PlannedTask, with_values: bool = True) -> str:
    """``kernel(arguments, name = value, ...)``: the tile arguments of the task as every label names
    them (a panel as its range, a sub-range after its tile: :func:`argument_texts`), then its values
    (unless not ``with_values``), as a call in the language passes them."""
    values = f", {values_text(task)}" if task.values and with_values else ""
    return f"{task.call.kernel}({', '.join(argument_texts(task.call, task.tiles, task.views))}{values})"


def values_text(task: PlannedTask) -> str:
    """The task's value arguments, ``name = value, ...`` as the language writes them ("" for none)."""
    return ", ".join(f"{name} = {_literal(value)}" for name, value in zip(task.call.values, task.values))


def _literal(value) -> str:
    """A value argument as the language writes it: ``"N"``, ``-1.0``, ``7``."""
    value = value.item() if hasattr(value, "item") else value
    return f'"{value}"' if isinstance(value, str) else repr(value)  # (one character: no escape needed)


def as_json(plan: Plan) -> dict:
    totals = plan.totals()
    return {
        # n, tiles, params and gpu_ratio as run's summary has them
        "program": plan.program, "n": plan.params["n"], "tiles": tile_values(plan.params, plan.tiling),
        "params": {name: plan.params[name] for name in plan.own_params if name in plan.params},
        "grid": list(plan.grid), "gpus": plan.gpus, "gpu_backend": plan.gpu_backend,
        "gpu_ratio": ratio_text(plan.gpu_ratio), "sources": plan.sources,
        "task_count": plan.task_count,
        "tasks": None if plan.tasks is None else [{"index": t.index, "kernel": t.call.kernel, "line": t.call.line,
                   # the arguments as the call names them (a panel's range, a tile's sub-range), and their tiles
                   "arguments": argument_texts(t.call, t.tiles, t.views),
                   "tiles": [str(x) for x in t.tiles], "values": dict(zip(t.call.values, t.values)),
                   "owner": list(t.owner),
                   "main_output": list(t.places[t.call.main]),
                   "instances": {str(r): [[int(k), a] for k, a in found] for r, found in t.per_rank.items()}}
                  for t in plan.tasks],
        "totals": {str(r): {str(int(k)): c[k] for k in Instance} for r, c in totals.items()},
        "messages": [[s, r, c] for (s, r), c in sorted(plan.messages.items())],
        "bytes": [[s, r, b] for (s, r), b in sorted(plan.volume.items())],
        "copies": {str(r): plan.copies.get(r, 0) for r in range(plan.grid[0] * plan.grid[1])},  # every rank
        # every device of every rank, as run's and simulate's tasks_by_device give them
        "runs_on": {str(r): {_device(d): devices[d] for d in range(plan.gpus + 1)} for r, devices in plan.runs_on.items()},
        "on_host_without_gpu_body": plan.on_host,
        "walk": plan.walk,
        "priorities": plan.priorities,
    }
