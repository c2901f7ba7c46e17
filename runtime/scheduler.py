"""The scheduling core: an event-driven state machine over one rank's task window.

No threads here. The engine feeds it events (a task was submitted, a task
finished) under one lock and acts on what it returns: tasks that became ready
go to their device's priority queue, from which workers :meth:`pop` them.

Dependencies follow the seeds' per-tile task lists (DESIGN §4). Each tile keeps
the head of its list in compressed form: ``tile.writer`` (the last unfinished
writer) and ``tile.readers`` (the unfinished readers appended after it, an ordered set). APPEND
links a new task behind them: a reader waits for the writer (RAW); a writer
waits for the writer (WAW) and for every reader (WAR), so all three hazards are
honoured by serialisation. FIRE, when a task finishes, releases the successors
it was linked to. The window is bounded: :meth:`window_full` is the generation
thread's back-pressure signal.
"""
from __future__ import annotations

import heapq
import itertools
from collections import Counter

#: the role of a program's tasks (:attr:`.program.Call.role`); the runtime's own have others
PROGRAM = "task"


class Task:
    """One task instance on this rank: a call site applied to tiles."""

    __slots__ = ("call", "tiles", "regions", "named_regions", "priority", "seq", "device", "waiting",
                 "successors", "done", "kernel", "host_kernel", "values", "sources", "asynchronous", "on_complete")

    def __init__(self, call, tiles, regions, priority, device=0, kernel=None, values=()):
        self.call = call
        self.values = values  # the value arguments, in declaration order
        self.tiles = tiles  # the tiles whose task lists order this task
        self.regions = regions  # the slices of what the kernel runs on (None: the whole source)
        # the sub-ranges of its tiles the call names: ``regions`` reads a received part whole, its
        # copy being the part, and what is said of the task names the part all the same
        self.named_regions = regions
        self.priority = priority
        self.device = device
        self.kernel = kernel
        self.host_kernel = None  # a GPU task's CPU body, which a CPU worker may run instead (.heteroprio)
        self.sources = tiles  # what the kernel runs on (``.data``): tiles, or copies of remote ones
        self.asynchronous = False  # finished by a later event (a send completing), not on return
        self.on_complete = None  # called under the engine lock once the task is finished
        self.seq = 0
        self.waiting = 0
        self.successors: list[Task] = []
        self.done = False

    def __repr__(self):
        names = ", ".join(map(str, self.tiles))
        return f"<Task #{self.seq} {self.call.kernel}({names}) line {self.call.line}>"


class TileState:
    """The head of one tile's task list (mixed into the runtime's tile objects)."""

    __slots__ = ("writer", "readers")

    def __init__(self):
        self.writer: Task | None = None
        self.readers: dict[Task, None] = {}  # insertion-ordered set


def _tiles_of(task) -> str:
    return ", ".join(map(str, task.tiles))


class Scheduler:
    """Task window state: APPEND on submit, FIRE on finish, priority ready queues."""

    def __init__(self, window: int, devices: int = 1):
        self.window = window
        self.in_flight = 0
        self.submitted = 0
        self.completed = 0
        # the runtime's own tasks submitted, by role (Call.role), which a stall report counts apart from the program's
        self.runtime_submitted: Counter = Counter()
        self.ready: list[list] = [[] for _ in range(devices)]
        self.pending: dict[Task, None] = {}  # the window, oldest first
        self._seq = itertools.count()

    # ---------------------------------------------------------------- events
    def submit(self, task: Task, extra_waits: int = 0) -> bool:
        """APPEND ``task`` to its tiles' lists; True if it is ready at once (and queued).

        ``extra_waits`` counts events outside the task lists the task also waits for
        (remote data arriving), each reported later by :meth:`satisfy`.
        """
        task.seq = next(self._seq)
        self.pending[task] = None
        self.in_flight += 1
        self.submitted += 1
        call = task.call
        if call.role != PROGRAM:  # a program's task costs this test only
            self.runtime_submitted[call.role] += 1
        predecessors = set()
        for index, tile in enumerate(task.tiles):
            mode = call.modes[index]
            writer = tile.writer
            if writer is not None and writer is not task:
                predecessors.add(writer)
            if mode == "in":
                tile.readers[task] = None
                continue
            predecessors.update(r for r in tile.readers if r is not task)
            tile.writer = task
            tile.readers = {}
        for predecessor in predecessors:
            predecessor.successors.append(task)
        task.waiting = len(predecessors) + extra_waits
        if task.waiting == 0:
            self._enqueue(task)
            return True
        return False

    def satisfy(self, task: Task) -> bool:
        """One outside event ``task`` waited for happened; True if it became ready (queued)."""
        task.waiting -= 1
        if task.waiting == 0:
            self._enqueue(task)
            return True
        return False

    def finish(self, task: Task) -> list[Task]:
        """FIRE: ``task`` completed; returns (and queues) the successors it made ready."""
        task.done = True
        self.pending.pop(task, None)
        self.in_flight -= 1
        self.completed += 1
        for tile in task.tiles:
            if tile.writer is task:
                tile.writer = None
            else:
                tile.readers.pop(task, None)
        fired = []
        for successor in task.successors:
            successor.waiting -= 1
            if successor.waiting == 0:
                self._enqueue(successor)
                fired.append(successor)
        task.successors = []
        return fired

    # ---------------------------------------------------------------- queues
    def _enqueue(self, task: Task) -> None:
        heapq.heappush(self.ready[task.device], (-task.priority, task.seq, task))

    def pop(self, device: int = 0) -> Task | None:
        """The highest-priority ready task of ``device`` (oldest first on ties), or None."""
        queue = self.ready[device]
        return heapq.heappop(queue)[2] if queue else None

    def window_full(self) -> bool:
        return self.in_flight >= self.window

    @property
    def idle(self) -> bool:
        """True when every submitted task has finished."""
        return self.in_flight == 0

    def describe(self, limit: int = 5, running: list[str] = (), arguments_text=_tiles_of) -> str:
        """An account of the window for stall reports: the program's tasks counted (what the summary and
        explain count), then the runtime's own by their role (transfers, check tasks), ``running`` (lines
        naming the tasks workers run now, which the scheduler does not track), the ready tasks first in their
        queues (each waits for its device: the rank's workers are all busy), then the oldest blocked
        tasks and why, those of the runtime said to be such, each named with ``arguments_text(task)`` (the
        engine's: as every label of a task names them)."""
        queued = {id(entry[2]) for queue in self.ready for entry in queue}
        counts = []
        submitted_as = {PROGRAM: self.submitted - sum(self.runtime_submitted.values()),
                        **dict(sorted(self.runtime_submitted.items()))}
        for role, submitted in submitted_as.items():
            window = [t for t in self.pending if t.call.role == role]
            ready = sum(id(t) in queued for t in window)
            counts.append(f"{len(window)} {role}(s) in the window, {ready} ready, "
                          f"{submitted - len(window)} of {submitted} submitted done")
        lines = ["; ".join(counts), *running]
        for device, queue in enumerate(self.ready):
            for _, _, task in heapq.nsmallest(limit, queue):
                lines.append(f"  ready #{task.seq} {task.call.kernel}({arguments_text(task)}){where(task.call)}: "
                             f"waits for {f'GPU {device}' if device else 'a free CPU worker'}")
            if len(queue) > limit:  # the first of its queue, by priority: not the lowest numbers
                waiting_for = f"GPU {device}" if device else "the CPU workers"
                lines.append(f"  and {len(queue) - limit} more ready for {waiting_for} (those listed are the first "
                             f"{limit} of its queue, by priority)")
        blocked = [t for t in self.pending if t.waiting > 0]
        for task in blocked[:limit]:
            earlier = [(t, shared) for t in self.pending if t.seq < task.seq and (shared := _shared(t, task))]
            reasons = [f"#{t.seq} {t.call.kernel} on {', '.join(map(str, shared))} ({role_text(t.call)}"
                       f"{'blocked' if t.waiting else 'queued' if id(t) in queued else 'running'})"
                       for t, shared in earlier[-3:]]
            lines.append(f"  blocked #{task.seq} {task.call.kernel}({arguments_text(task)}){where(task.call)}: "
                         "waits for "
                         + ("; ".join(reasons) if reasons else "data from another rank or device"))
        if len(blocked) > limit:
            lines.append(f"  and {len(blocked) - limit} more blocked")
        return "\n".join(lines)


def role_text(call) -> str:
    """``a transfer, `` for a task of the runtime's own (:attr:`.program.Call.role`), before what
    it does; nothing for a program's."""
    return "" if call.role == PROGRAM else f"a {call.role}, "


def where(call) -> str:
    """``, line 12`` for a program's task; ``, a transfer`` for one of the runtime's own, of no line."""
    return f", line {call.line}" if call.role == PROGRAM else f", a {call.role}"


def _shared(earlier: Task, later: Task) -> list:
    """The tiles through which ``later`` waits for ``earlier`` (shared, and written by either)."""
    def written(task):
        return {tile for tile, mode in zip(task.tiles, task.call.modes) if mode != "in"}
    hazards = (written(earlier) & set(later.tiles)) | (written(later) & set(earlier.tiles))
    return [tile for tile in dict.fromkeys(earlier.tiles) if tile in hazards]

