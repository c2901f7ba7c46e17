"""Traces of a run and the bounds that judge it (DESIGN §6; RR-8513 §4.4).

While tracing, each rank records one event per task it ran (lane, start, end),
per wait of a worker for work ("idle"), per MPI transfer and per host/GPU copy, with times relative to rank 0
leaving the barrier every rank passes just before the run, so lanes of all ranks line up. Rank 0
merges them into one Chrome trace-event file (Perfetto opens it).

Bounds use the program's own task graph, rebuilt in program order from the
tiles every task reads and writes, with each task's measured time:

* critical path: the longest chain of dependent tasks;
* area bound: an LP over kernel types and worker kinds (CPU workers, GPUs):
  the least time in which the workers could run every task, each kernel at
  its measured speed on each kind (a linear program, solved by one sweep: :func:`least_time`).

And how well communication was hidden (CPE'15 §7.2.1): on each rank, the time
some MPI message was in flight (from the later of its send and its receive
being posted, to its arrival) against the time the rank's compute lanes were
idle. Communication that did not leave a lane idle was hidden:
``hidden = 1 - Σ min(comm, idle) / Σ comm`` over ranks, a lower bound.
"""
from __future__ import annotations

import math
import time
from collections import Counter, defaultdict

import numpy as np

from .matrix import part_text
from .program import argument_texts
from .recording import record


class Tracer:
    """Collects this rank's events: ``(lane, start, end, name, args)``, times in seconds."""

    def __init__(self):
        self.origin = time.perf_counter()
        self.events: list = []
        self.occurrences: Counter = Counter()

    def move_origin(self, started: float) -> None:
        """Time zero moved to the wall-clock time ``started``, when the first rank left the barrier
        that started the run, the events with it. Ranks leave a polled barrier up to a polling interval
        apart, so each one's own start would misplace its lanes by milliseconds (a message
        received before it was sent): read through the wall clock, the first rank's moment is the
        same instant on every rank of a machine, and as close as the nodes' clocks are kept (NTP)
        across machines. Told after the run, which a broadcast before it would have delayed."""
        self._shift_to(_perf_counter_at(started))

    def begin_at(self, origin: float) -> None:
        """Time zero moved to ``time.perf_counter()`` reading ``origin``, when this rank's run started
        timing (its threads ready): what happened before it is cut off, as ``seconds`` leaves it out."""
        self._shift_to(origin, cut=True)

    def begin_at_wall(self, started: float) -> None:
        """:meth:`begin_at` the wall-clock time ``started``, read through the clock that
        :meth:`move_origin` reads the first rank's start with: that rank's events then stay at 0 or after."""
        self._shift_to(_perf_counter_at(started), cut=True)

    def _shift_to(self, origin: float, cut: bool = False) -> None:
        """Time zero moved to perf_counter reading ``origin``, the events with it (``cut``: from it on)."""
        shift = origin - self.origin
        self.events = [(lane, max(began - shift, 0.0) if cut else began - shift, ended - shift, *rest)
                       for lane, began, ended, *rest in self.events if not cut or ended - shift > 0]
        self.origin = origin

    def task(self, lane: str, began: float, ended: float, task) -> None:
        """A program task, named the same on every rank (:func:`task_args`); a GPU task a CPU worker
        took (``--host-takes``) says from which GPU."""
        args = task_args(self.occurrences, task.call, task.tiles, task.priority, task.values, task.named_regions)
        if task.device and lane.startswith("cpu"):
            args["taken from"] = f"gpu-{task.device}"
        self.events.append((lane, began - self.origin, ended - self.origin, task.call.kernel, args))

    def idle(self, lane: str, began: float, ended: float) -> None:
        """A worker waited for work from ``began`` to ``ended`` (from time zero at the earliest)."""
        self.events.append((lane, max(began - self.origin, 0.0), ended - self.origin, "idle", {}))

    def transfer(self, lane: str, began: float, name: str, args: dict) -> None:
        self.events.append((lane, began - self.origin, time.perf_counter() - self.origin, name, args))


def _perf_counter_at(wall: float) -> float:
    """The ``time.perf_counter()`` reading of the wall-clock time ``wall``: the two clocks read
    together several times, the tightest pair kept (a thread switched out between two reads
    would shift the answer by its pause)."""
    pairs = []
    for _ in range(5):
        before, now, after = time.perf_counter(), time.time(), time.perf_counter()
        pairs.append((after - before, (before + after) / 2 - (now - wall)))
    return min(pairs)[1]


def compute_lanes(workers: int, gpus: int) -> list[str]:
    """The lanes of a rank's CPU workers and GPUs, each of which may have run no task."""
    return [f"cpu-{w}" for w in range(workers)] + [f"gpu-{g}" for g in range(1, gpus + 1)]


def chrome_trace(ranks: list, about: dict | None = None, lanes: list = ()) -> dict:
    """One trace-event document from every rank's events (``ranks[r]`` = rank r's list), with
    a lane for each of ``lanes`` (:func:`compute_lanes`) on every rank, tasks or none, and each
    other one that has events; ``about`` (the program, its sizes) goes in ``otherData``."""
    events = []
    for rank, rank_events in enumerate(ranks):
        rank_events = _transfers_apart(rank_events)
        lanes_here = sorted({*lanes, *(e[0] for e in rank_events)}, key=_lane_order)
        events.append({"ph": "M", "pid": rank, "name": "process_name", "args": {"name": f"rank {rank}"}})
        for tid, lane in enumerate(lanes_here):
            events.append({"ph": "M", "pid": rank, "tid": tid, "name": "thread_name", "args": {"name": lane}})
        ids = {lane: tid for tid, lane in enumerate(lanes_here)}
        for lane, start, end, name, args in rank_events:
            # the end rounded, not the length: a slice then ends where the next one begins, never past it;
            # none before time zero (a rank's first wait, which the two clocks' reading may put a tenth of a
            # microsecond before the first rank's start)
            ts = max(round(start * 1e6, 3), 0.0)
            te = max(round(end * 1e6, 3), ts)
            events.append({"ph": "X", "pid": rank, "tid": ids[lane], "name": name, "cat": _category(lane, name),
                           "ts": ts, "dur": round(te - ts, 3), "args": args})
    # the maker first: --trace replaces a file that opens so (outputs.TRACE_START), not another profiler's trace
    return {"otherData": {"made_by": "tiledsl", **(about or {})}, "traceEvents": events, "displayTimeUnit": "ms"}


def _transfers_apart(rank_events: list) -> list:
    """``rank_events`` with the transfers of the ``mpi`` and ``copy`` lanes that overlap in time
    (messages in flight together) spread over lanes ``mpi``, ``mpi 2``, ...: the trace format
    wants the slices of one lane disjoint or nested, and Perfetto drops the others."""
    ends: dict = {}  # lane -> the end of the last slice on each of its lanes
    spread = []
    for lane, start, end, *rest in sorted(rank_events, key=lambda event: event[1]):
        if lane.startswith(("mpi", "copy")):
            taken = ends.setdefault(lane, [])
            free = next((k for k, last in enumerate(taken) if last <= start), len(taken))
            taken[free:free + 1] = [end]
            lane = lane if free == 0 else f"{lane} {free + 1}"
        spread.append((lane, start, end, *rest))
    return spread


def _lane_order(lane: str):
    base, _, extra = lane.partition(" ")  # mpi 2: the second lane of the MPI thread's transfers
    kind, _, number = base.partition("-")
    return ({"cpu": 0, "gpu": 1, "mpi": 2, "copy": 3}.get(kind, 4), int(number) if number.isdigit() else 0,
            int(extra) if extra.isdigit() else 0)


def _category(lane: str, name: str) -> str:
    if name == "idle":
        return "idle"
    return "transfer" if lane.startswith(("mpi", "copy")) else "task"


# ---------------------------------------------------------------- bounds
def task_times(ranks: list) -> dict:
    """Measured (seconds, lane kind) of every program task, by its key."""
    times = {}
    for rank_events in ranks:
        for lane, start, end, _, args in rank_events:
            if "key" in args:
                line, tiles, occurrence = args["key"]
                times[(line, tuple(tiles), occurrence)] = (end - start, lane.partition("-")[0])
    return times


class CriticalPath:
    """The longest chain of tasks each reading what the one before wrote (the data flow), fed
    every task in program order: a lower bound of any run. A writer's wait for the earlier
    readers of its tile is left out: a reader on another rank or device reads a copy, and the
    owner may overwrite the tile at once (counted, the "bound" exceeded simulated runs by 44%)."""

    def __init__(self):
        self.writer_end: dict = {}  # tile -> when its last writer ends
        self.longest = 0.0

    def add(self, modes, tiles, seconds: float) -> None:
        writer_end = self.writer_end
        start = 0.0
        for tile, mode in zip(tiles, modes):
            if mode != "out":
                end = writer_end.get(tile, 0.0)
                if end > start:
                    start = end
        end = start + seconds
        for tile, mode in zip(tiles, modes):
            if mode != "in":
                writer_end[tile] = end
        if end > self.longest:
            self.longest = end


def critical_path(driver, matrices: dict, params, times: dict) -> float:
    """The :class:`CriticalPath` of the program, with measured task times (seconds)."""
    path = CriticalPath()
    occurrences: Counter = Counter()
    for call, tiles, _ in record(driver, matrices, params).submitted:
        names = tuple(str(t) for t in tiles)
        occurrences[(call.line, names)] += 1
        path.add(call.modes, names, times.get((call.line, names, occurrences[(call.line, names)]), (0.0, "cpu"))[0])
    return path.longest


def area_bound(times: dict, capacity: dict) -> float:
    """Least time for all tasks on ``capacity`` workers per kind (LP over kernel types and kinds)."""
    counts, spent = Counter(), defaultdict(list)
    for (line, _, _), (seconds, kind) in times.items():
        counts[line] += 1
        spent[line, kind].append(seconds)
    work = {(line, kind): counts[line] * float(np.mean(seconds)) for (line, kind), seconds in spent.items()}
    return least_time(work, capacity)


def least_time(work: dict, capacity: dict) -> float:
    """Least time in which ``capacity[kind]`` workers of each kind (cpu, gpu) run every call site's tasks,
    where ``work[line, kind]`` is the seconds all of ``line``'s tasks take on one worker of ``kind`` and a
    line's tasks may be split freely between kinds; 0.0 when some line can run on no worker.

    The linear program (minimise T with Σ_line x·work ≤ capacity·T for each kind, each line's shares
    summing to 1) has, for two kinds, a solution by one sweep: the lines that may run on either go to
    the first kind in the order of their work there over their work on the second (where it is
    relatively fastest first) until its load reaches the other's, the line at the crossing split
    between them (an exchange of any two lines against that order cannot lower the larger load).
    No solver: scipy.optimize cost a trace with GPUs 0.5 s of import, more than the runs it bounded."""
    kinds = [kind for kind in capacity if capacity[kind] > 0]
    lines = {line for line, _ in work}
    if not kinds or any(all((line, kind) not in work for kind in kinds) for line in lines):
        return 0.0
    if len(kinds) == 1:
        return sum(seconds for (_, kind), seconds in work.items() if kind == kinds[0]) / capacity[kinds[0]]
    if len(kinds) > 2:
        raise ValueError(f"least_time: workers of two kinds at most, got {', '.join(kinds)}")
    first, second = kinds
    load_first = load_second = 0.0  # per worker, every line that may run on the second kind on it
    either = []
    for line in lines:
        on_first, on_second = work.get((line, first)), work.get((line, second))
        if on_second is None:
            load_first += on_first / capacity[first]
        elif on_first is None:
            load_second += on_second / capacity[second]
        else:
            load_second += on_second / capacity[second]
            either.append((on_first / capacity[first], on_second / capacity[second]))
    either.sort(key=lambda pair: pair[0] / pair[1] if pair[1] else math.inf)
    for to_first, from_second in either:
        if load_first + to_first >= load_second - from_second:  # the loads cross within this line: split it
            gap, both = load_second - load_first, to_first + from_second
            share = min(max(gap / both, 0.0), 1.0) if both else 0.0
            return max(load_first + share * to_first, load_second - share * from_second)
        load_first, load_second = load_first + to_first, load_second - from_second
    return max(load_first, load_second)


def communication(ranks: list, seconds: float) -> dict:
    """Seconds of MPI traffic per rank and the fraction of it hidden behind computation."""
    sent = {(rank, args["to"], args["tag"], args["message"]): start
            for rank, rank_events in enumerate(ranks) for lane, start, _, name, args in rank_events
            if name == "send"}
    traffic, idle = {}, {}
    for rank, rank_events in enumerate(ranks):
        spans, busy, lanes = [], 0.0, set()
        for lane, start, end, name, args in rank_events:
            if name == "send":
                spans.append((start, end))
            elif name == "receive":  # from its send, which the ranks' clocks may put after its end
                sent_at = sent.get((args["from"], rank, args["tag"], args["message"]), start)
                spans.append((min(max(start, sent_at), end), end))
            elif not lane.startswith(("mpi", "copy")):
                busy += end - start if name != "idle" else 0.0
                lanes.add(lane)
        traffic[rank] = _covered(spans)
        idle[rank] = max(0.0, seconds - busy / len(lanes)) if lanes else seconds
    total = sum(traffic.values())
    hidden = 1.0 - sum(min(traffic[r], idle[r]) for r in traffic) / total if total > 0 else None
    return {"communication": {str(r): round(t, 6) for r, t in traffic.items()},
            "communication_hidden": None if hidden is None else round(hidden, 4)}


def _covered(spans: list) -> float:
    """Length of the union of intervals."""
    covered, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            covered += end - max(start, reach)
            reach = end
    return covered


def utilisation(ranks: list, seconds: float, lanes: list = ()) -> dict:
    """Busy fraction of every compute lane (``lanes`` on every rank, :func:`compute_lanes`, and any
    other with events), and the load imbalance max/avg of busy time: a worker that ran nothing
    counts, at 0."""
    busy = {}
    for rank, rank_events in enumerate(ranks):
        busy.update((f"{rank}/{lane}", 0.0) for lane in lanes)
        for lane, start, end, name, args in rank_events:
            if not lane.startswith(("mpi", "copy")):
                busy[f"{rank}/{lane}"] = busy.get(f"{rank}/{lane}", 0.0) + (end - start if name != "idle" else 0.0)
    if not busy or seconds <= 0:
        return {"busy": {}, "imbalance": None}
    values = list(busy.values())
    mean = sum(values) / len(values)
    return {"busy": {lane: round(b / seconds, 4) for lane, b in busy.items()},
            "imbalance": round(max(values) / mean, 4) if mean > 0 else None}  # None: no task ran


def task_args(occurrences: Counter, call, tiles, priority, values, views=None) -> dict:
    """A task event's arguments: its tile arguments as explain and graph name them (a panel as its
    range, a sub-range after its tile: :func:`.program.argument_texts`, ``views`` from
    :func:`.matrix.call_views`), line, priority, values, and ``key`` (line, tiles one by one,
    occurrence), which names it the same on every rank (``occurrences`` counts them)."""
    key = (call.line, tuple(str(t) for t in tiles))
    occurrences[key] += 1
    args = {"tiles": argument_texts(call, tiles, views), "line": call.line, "priority": priority,
            "key": [key[0], list(key[1]), occurrences[key]]}
    if values:
        args["values"] = {name: _json_value(value) for name, value in zip(call.values, values)}
    return args


def copy_args(tile, part, source: int, target: int, nbytes: int) -> dict:
    """A host/GPU copy's arguments: its tile (a sub-range after it, as a task's tiles name it), the
    devices it goes from and to (named as their lanes: ``host``, ``gpu-1``, ...) and its bytes, so
    that copies of one rank can be told apart as its messages are."""
    return {"tile": f"{tile}{part_text(part)}", "from": _device_name(source), "to": _device_name(target),
            "bytes": nbytes}


def _device_name(device: int) -> str:
    return f"gpu-{device}" if device else "host"


def _json_value(value):
    """A value argument as JSON holds it: an infinite or NaN float as its Python spelling ('inf'),
    since JSON has no such number and the trace viewers' parsers refuse Python's ``Infinity``."""
    return repr(value) if isinstance(value, float) and not math.isfinite(value) else value
