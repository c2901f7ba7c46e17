"""Simulated ranks: the real scheduler state machine driven by a discrete-event clock.

Each simulated rank has a real :class:`~tiledsl.runtime.scheduler.Scheduler` (task
window, APPEND/FIRE over per-tile task lists, priority ready queues: one for the
host's CPU workers, one per GPU) and replays, at its own simulated time, its share
of every task it takes part in (:mod:`.walk`), creating the tasks a real rank's
:class:`~tiledsl.runtime.exchange.Exchange` creates: the owner's task, the copy
tasks and sinks around it, and the send tasks of other ranks, all at transfer
priority on the host's queue as there. Time advances by events in a heap:

* a rank's generation thread reaches its next share after walking the tasks in
  between (``walk_us`` each; a rank that walks only its share of the loop nest
  pays for the other ranks' tasks it meets, spread evenly over the walk: its
  ``walked`` fraction of ``walk_us`` per task) and spends ``submit_us`` on it (a
  share with nothing to create, the reader of a version its rank already has, costs
  nothing there: the share walk passes over it, :func:`tiledsl.runtime.share.among`); a
  full window stops it until the window drains to three quarters, as
  :class:`~tiledsl.runtime.engine.Engine` does;
* a worker (``W`` CPU workers, one per GPU) runs the highest-priority ready task of
  its queue for the modelled time (:class:`.machine.Machine`); FIRE then readies
  its successors;
* a message starts once both its send and its receive are posted; it holds the
  sender's link for ``bytes / bandwidth`` once the link is free, then the
  receiver's link as long, once that is free (each link FIFO, full duplex), and
  arrives ``latency`` later; host/GPU copies hold a GPU's in- or out-stream the
  same way;
* with ``broadcast="tree"`` (:mod:`tiledsl.runtime.broadcast`) the owner's first send
  of a version to run plans a binomial tree over the sends of it ready then: a plan
  reaches each receiver ``latency`` later (its receive is posted only then), the
  owner sends to its children, and each receiver sends it on to its own as it
  arrives; a send whose receiver gets the data from another rank ends at once;
* with ``host_takes`` (``--host-takes on``) an idle CPU worker with no host task ready
  takes the GPU task :func:`~tiledsl.runtime.heteroprio.choose` picks, as a run's
  does, and runs it for its time on a core plus its tiles' copies to the host and
  back (on the PCIe link, not counted on the GPU's copy streams).

The walk runs ahead of the clock only as far as needed: events are processed up to
the earliest time a rank still waiting for its next share could act.
"""
from __future__ import annotations

import heapq
import itertools
from collections import deque

from ..runtime import heteroprio
from ..runtime.broadcast import binomial_tree
from ..runtime.exchange import COPY, SEND, SINK, TRANSFER_PRIORITY
from ..runtime.matrix import part_of
from ..runtime.scheduler import Scheduler, Task, TileState
from .walk import Copy

INFINITY = float("inf")


class SimTask(Task):
    """A task on a simulated rank: its modelled seconds and what its end sets off."""

    __slots__ = ("seconds", "started", "then", "owned", "taken_from")

    def __init__(self, call, tiles, priority, device, seconds, then=None, owned=None):
        super().__init__(call, tiles, None, priority, device)
        self.seconds = seconds
        self.taken_from = 0  # the GPU whose task a CPU worker took (--host-takes), else 0
        self.then = then  # (function, argument) run when a worker is done with it
        self.owned = owned  # the program task's walk.Owned, for traces


class Rank:
    """One simulated rank: its scheduler, workers, links and generation thread."""

    def __init__(self, number: int, window: int, workers: int, gpus: int, walk_s: float):
        self.number = number
        self.walk_s = walk_s  # its walk's seconds per task of the program
        self.scheduler = Scheduler(window, 1 + gpus)
        self.low_water = max(1, window * 3 // 4)
        self.idle = [list(range(workers - 1, -1, -1))] + [[g] for g in range(1, gpus + 1)]
        self.tiles: dict = {}  # tile -> this rank's TileState (the head of its task list)
        self.items: deque = deque()  # (walk index, kind, payload) still to generate
        self.ready_at = 0.0  # when the generation thread is free for its next share
        self.last = -1  # walk index of the last share generated
        self.state = "starved"  # starved (waits for the walk), scheduled, blocked (full window), done
        self.finished = 0.0  # when its last task ended, or its generation did
        self.tasks = 0  # program tasks run
        self.by_device = [0] * (1 + gpus)  # of them, on the host (GPU tasks it took included), on each GPU
        self.submitted = 0  # shares of tasks generated (each costs submit_us)
        self.busy = [0.0] * (workers + gpus)  # seconds of program tasks per worker and GPU
        self.other = [0.0] * (workers + gpus)  # of the runtime's own tasks (sends, copies)
        self.links = [0.0, 0.0]  # when its network link is free: out, in
        self.streams: dict = {}  # (gpu, "in"|"out") -> when that copy stream is free
        self.stream_busy: dict = {}  # (gpu, "in"|"out") -> seconds it copied
        self.device_copies = 0  # host/GPU copies made (a tree's forwarding changes who stages what)
        self.link_busy = self.link_busy_in = 0.0  # seconds its link sent, received
        self.peak_window = 0
        self.plans = [0, 0]  # plans of tree broadcasts sent, received
        self.host_took = 0  # GPU tasks its CPU workers took
        self.gpu_free_at = [0.0] * (1 + gpus)  # when each GPU's running task ends

    def proxy(self, tile) -> TileState:
        state = self.tiles.get(tile)
        if state is None:
            state = self.tiles[tile] = TileState()
        return state


class Simulator:
    """The event loop over every rank (see the module docstring)."""

    def __init__(self, machine, nranks: int, workers: int, gpus: int, window: int, tracer=None, walked=None,
                 broadcast: str = "direct", host_takes: bool = False):
        """``walked``: per rank, the fraction of the program's tasks its walk pays for (None: all)."""
        self.machine = machine
        self.tree = broadcast == "tree"
        self.host_takes = host_takes
        self.traffic = None  # the walk's per-rank messages and bytes, which a tree's forwards move
        runtime = machine.runtime
        walk_s, self.submit_s = runtime["walk_us"] * 1e-6, runtime["submit_us"] * 1e-6
        self.transfer_s, self.notice_s = runtime["transfer_us"] * 1e-6, runtime["notice_us"] * 1e-6
        self.ranks = [Rank(r, window, workers, gpus, walk_s * (1.0 if walked is None else walked[r]))
                      for r in range(nranks)]
        self.passes_over_empty = walked is not None  # a share walk: a share with nothing to create is not met
        self.walk_s = min(rank.walk_s for rank in self.ranks)  # the slowest walk towards the horizon
        self.workers, self.gpus = workers, gpus
        self.events: list = []
        self.sequence = itertools.count()
        self.now = 0.0
        self.starved: list = [(0.0, r, -1) for r in range(nranks)]  # (ready_at - last·walk_s, rank, last)
        self.walked = 0  # tasks the walk has produced so far
        self.horizon = 0.0  # events before it can run: no starved rank can act earlier
        self.walk_over = False
        self.tracer = tracer
        self.handlers = {"owner": self._owner, "helper": self._helper}

    # ---------------------------------------------------------------- feeding and running
    def dispatch(self, rank: int, index: int, kind: str, payload) -> None:
        """The walk hands ``rank`` its share of task ``index``; one with nothing to create (an
        input sent already: ``payload == ()``) is passed over by a share walk, else counted on
        the share queued before it."""
        if not payload and self.passes_over_empty:
            return
        state = self.ranks[rank]
        state.submitted += 1
        items = state.items
        if not payload and items:
            items[-1][3] += 1
            return
        items.append([index, kind, payload, 0])
        if state.state == "starved":
            state.state = "scheduled"
            self._at(state.ready_at + (index - state.last) * state.walk_s, self._generate, state)

    def advance(self, walked: int) -> None:
        """Run every event that no rank still waiting for the walk could precede (a rank that
        starves meanwhile lowers the horizon: see :meth:`_starve`)."""
        self.walked = walked
        events, starved, ranks = self.events, self.starved, self.ranks
        while starved and not _still_starved(ranks[starved[0][1]], starved[0][2]):
            heapq.heappop(starved)
        self.horizon = starved[0][0] + walked * self.walk_s if starved else INFINITY
        pop = heapq.heappop
        while events and events[0][0] < self.horizon:
            self.now, _, function, argument = pop(events)
            function(argument)

    def finish(self, walked: int) -> float:
        """The walk is over: run to the end; the predicted seconds (the last rank done)."""
        self.walk_over, self.walked = True, walked
        for rank in self.ranks:
            if rank.state == "starved":
                self._generation_done(rank)
        self.starved = []
        self.advance(walked)
        stuck = [r.number for r in self.ranks if r.state != "done" or not r.scheduler.idle]
        if stuck:
            raise RuntimeError(f"simulated ranks {stuck[:5]} never finished (a bug of the simulator)")
        return max(rank.finished for rank in self.ranks)

    def _at(self, time: float, function, argument) -> None:
        heapq.heappush(self.events, (time, next(self.sequence), function, argument))

    # ---------------------------------------------------------------- the generation thread
    def _generate(self, rank: Rank) -> None:
        """The generation thread reaches its next share: APPEND it, unless the window is full."""
        scheduler = rank.scheduler
        if scheduler.window_full():
            rank.state = "blocked"
            return
        items = rank.items
        index, kind, payload, empty = items.popleft()
        if payload:
            self.handlers[kind](rank, payload)
        rank.ready_at, rank.last = self.now + self.submit_s, index
        if empty:  # the shares with nothing to create that followed it: only their time
            if scheduler.window_full():  # the first of them waits for room
                items.appendleft([index, "helper", (), empty - 1])
            else:  # the window cannot fill before they are done: they take their time at once
                rank.ready_at += empty * self.submit_s
        if items:
            self._at(rank.ready_at + (items[0][0] - index) * rank.walk_s, self._generate, rank)
        elif self.walk_over:
            self._generation_done(rank)
        else:
            self._starve(rank)

    def _starve(self, rank: Rank) -> None:
        """``rank`` has generated all the walk gave it so far: it waits for its next share (it cannot
        act before ``ready_at + (walked - last)·walk_s`` with the smallest rank's ``walk_s``)."""
        rank.state = "starved"
        key = rank.ready_at - rank.last * self.walk_s
        heapq.heappush(self.starved, (key, rank.number, rank.last))
        self.horizon = min(self.horizon, key + self.walked * self.walk_s)

    def _generation_done(self, rank: Rank) -> None:
        rank.state = "done"
        rank.finished = max(rank.finished, rank.ready_at + (self.walked - 1 - rank.last) * rank.walk_s)

    def _enqueue(self, rank: Rank, task: SimTask, waits: int) -> None:
        scheduler = rank.scheduler
        if scheduler.submit(task, waits):
            self._run_ready(rank, task.device)
        if scheduler.in_flight > rank.peak_window:
            rank.peak_window = scheduler.in_flight

    # ---------------------------------------------------------------- a rank's share of a task
    def _owner(self, rank: Rank, owned) -> None:
        """The owner's task, its input copies, and the sinks of its outputs homed on other devices."""
        proxies = tuple(rank.proxy(t) for t in owned.tiles)
        task = SimTask(owned.call, proxies, owned.priority, owned.device, owned.seconds, owned=owned)
        if owned.device and self.host_takes:
            task.host_kernel = owned.call.kernel  # its CPU body, by name: a CPU worker may take it
        waits = 0
        for copy in owned.copies:
            if copy is None:
                continue
            if not copy.started:
                self._start_copy(rank, copy)
            if not copy.arrived:
                copy.waiters.append((self._satisfy, (rank, task)))
                waits += 1
        self._enqueue(rank, task, waits)
        sinks = []
        for _, copy, message in owned.outgoing:
            if message is None:
                sink = SimTask(SINK, (rank.proxy(copy.tile),), TRANSFER_PRIORITY, 0, self.transfer_s)
                self._enqueue(rank, sink, 1)
                sinks.append(sink)
        if owned.outgoing:
            task.then = (self._outputs_home, (rank, owned, sinks))

    def _helper(self, rank: Rank, actions) -> None:
        for kind, message in actions:
            proxy = rank.proxy(message.tile)
            if kind == "send":
                task = SimTask(SEND, (proxy,), TRANSFER_PRIORITY, 0, self.transfer_s,
                               then=(self._send_tile, (rank, message)))
                task.asynchronous = True
                message.on_sent = (self._complete_pair, (rank, task))
                message.task = task
                self._enqueue(rank, task, 0)
            else:
                self._receive_home(rank, proxy, message)

    def _receive_home(self, rank: Rank, proxy, message) -> None:
        """A sink: the new version of a tile homed here, computed on another rank."""
        task = SimTask(SINK, (proxy,), TRANSFER_PRIORITY, 0, self.transfer_s)
        device = message.tile.device
        if device:
            task.asynchronous = True
            task.then = (self._to_device_then_complete, (rank, task, message))
        message.on_arrived = (self._satisfy, (rank, task))
        self._enqueue(rank, task, 1)
        self._post_receive(message)

    # ---------------------------------------------------------------- copies
    def _start_copy(self, rank: Rank, copy) -> None:
        copy.started = True
        if copy.message is not None:
            copy.message.on_arrived = (self._arrive, copy)
            self._post_receive(copy.message)
        elif copy.staged is not None:
            staged = copy.staged
            if not staged.started:
                self._start_copy(rank, staged)
            move = (self._stage_to_device, (rank, copy))
            if staged.arrived:
                self._stage_to_device((rank, copy))
            else:
                staged.waiters.append(move)
        else:  # from the tile's home device on this rank: a copy task, a reader in the tile's list
            task = SimTask(COPY, (rank.proxy(copy.tile),), TRANSFER_PRIORITY, 0, self.transfer_s)
            task.asynchronous = True
            task.then = (self._copy_across, (rank, task, copy))
            self._enqueue(rank, task, 0)

    def _stage_to_device(self, argument) -> None:
        rank, copy = argument
        self._stream(rank, copy, 0, copy.device, (self._arrive, copy))

    def _copy_across(self, argument) -> None:
        rank, task, copy = argument
        self._stream(rank, copy, copy.tile.device, copy.device, (self._arrived_then_complete, (rank, task, copy)))

    def _arrived_then_complete(self, argument) -> None:
        rank, task, copy = argument
        self._arrive(copy)
        self._complete(rank, task)

    def _arrive(self, copy) -> None:
        copy.arrived = True
        waiters, copy.waiters = copy.waiters, []
        for function, argument in waiters:
            function(argument)

    def _stream(self, rank: Rank, moved, source: int, target: int, then) -> None:
        """A host/GPU copy of ``moved`` (a walk.Copy or Message: its tile, part and bytes) on the copy
        streams of the GPUs involved, then ``then``."""
        nbytes = moved.nbytes
        link = self.machine.gpu_link if source and target else self.machine.pcie
        keys = [key for key in ((source, "out"), (target, "in")) if key[0]]
        begin = max([self.now] + [rank.streams.get(key, 0.0) for key in keys])
        hold = link.seconds(nbytes)
        rank.device_copies += 1
        for key in keys:
            rank.streams[key] = begin + hold
            rank.stream_busy[key] = rank.stream_busy.get(key, 0.0) + hold
        if self.tracer is not None:
            self.tracer.copy(rank.number, begin, begin + hold + link.latency, moved, source, target)
        self._at(begin + hold + link.latency, _call, then)

    def _to_device_then_complete(self, argument) -> None:
        rank, task, message = argument
        self._stream(rank, message, 0, message.tile.device, (self._complete_pair, (rank, task)))

    # ---------------------------------------------------------------- outputs going home
    def _outputs_home(self, argument) -> None:
        rank, owned, sinks = argument
        pending = iter(sinks)
        for _, copy, message in owned.outgoing:
            if message is None:
                self._stream(rank, copy, copy.device, copy.tile.device, (self._satisfy, (rank, next(pending))))
            elif copy.device:
                self._stream(rank, copy, copy.device, 0, (self._post_send, message))
            else:
                if message.kept is not None:
                    message.on_sent = (self._arrive, message.kept)
                self._post_send(message)

    def _send_tile(self, argument) -> None:
        """A send task ran: the tile version goes out (staged to the host first from a GPU), unless
        a tree's plan gives its receiver another source."""
        rank, message = argument
        if self.tree:
            if not message.planned:
                self._plan(rank, message)
            if message.source != rank.number:
                self._complete(rank, message.task)
                return
        device = message.tile.device
        if device:
            self._stream(rank, message, device, 0, (self._post_send, message))
        else:
            self._post_send(message)

    # ---------------------------------------------------------------- tree broadcasts
    def _plan(self, rank: Rank, message) -> None:
        """The owner plans the tree of ``message``'s version over its sends ready now, as
        :class:`~tiledsl.runtime.broadcast.Broadcasts` does; each plan reaches its receiver later."""
        members = [message]
        if message.group is not None:
            members = [m for m in message.group if m is message or (
                not m.planned and m.task is not None and m.task.waiting == 0)]
        tree = binomial_tree(rank.number, [m.target for m in members])
        by_target = {m.target: m for m in members}
        arrival = self.now + self.machine.network.latency + self.notice_s
        for member in members:
            parent, children = tree[member.target]
            rank.plans[0] += 1
            self.ranks[member.target].plans[1] += 1
            member.planned, member.plan_in = True, False
            member.forwards = [by_target[child] for child in children]
            if parent != member.source:  # forwarded: the owner's send task ends when it runs
                self._move_traffic(member, parent)
                member.on_sent = None
            self._at(arrival, self._plan_arrived, member)

    def _move_traffic(self, message, source: int) -> None:
        """``message`` leaves from ``source`` instead of the owner."""
        owner, forwarder = self.traffic[message.source], self.traffic[source]
        owner[0] -= 1
        owner[2] -= message.nbytes
        forwarder[0] += 1
        forwarder[2] += message.nbytes
        message.source = source

    def _plan_arrived(self, message) -> None:
        message.plan_in = True
        if message.posted_at is not None:
            message.posted_at = max(message.posted_at, self.now)
            if message.sent_at is not None:
                self._transmit(message)

    def _forward(self, message) -> None:
        """``message`` arrived: its receiver sends the version on to its children in the tree (posted
        by the thread that sees it arrive, no worker needed)."""
        for child in message.forwards:
            self._post_send(child)

    # ---------------------------------------------------------------- messages
    def _post_send(self, message) -> None:
        message.sent_at = self.now
        if message.posted_at is not None and message.plan_in:
            self._transmit(message)

    def _post_receive(self, message) -> None:
        message.posted_at = self.now
        if message.sent_at is not None and message.plan_in:
            self._transmit(message)

    def _transmit(self, message) -> None:
        """Both sides have posted: the message leaves on the sender's link when it is free, and
        comes in on the receiver's link when that is free (each link FIFO, full duplex)."""
        network = self.machine.network
        source, target = self.ranks[message.source], self.ranks[message.target]
        hold = network.seconds(message.nbytes)
        sent = source.links[0] = max(self.now, source.links[0]) + hold
        received = target.links[1] = max(sent, target.links[1] + hold)
        source.link_busy += hold
        target.link_busy_in += hold
        arrival = received + network.latency + self.notice_s
        if self.tracer is not None:
            self.tracer.message(message, sent - hold, sent + self.notice_s, arrival)
        if message.on_sent is not None:
            self._at(sent + self.notice_s, _call, message.on_sent)
        self._at(arrival, _call, message.on_arrived)
        if message.forwards:
            self._at(arrival, self._forward, message)

    # ---------------------------------------------------------------- workers
    def _satisfy(self, argument) -> None:
        rank, task = argument
        if rank.scheduler.satisfy(task):
            self._run_ready(rank, task.device)

    def _run_ready(self, rank: Rank, device: int) -> None:
        """Idle workers of ``device`` take the highest-priority ready tasks; with ``host_takes``, idle
        CPU workers then take GPU tasks."""
        idle = rank.idle[device]
        scheduler = rank.scheduler
        while idle:
            task = scheduler.pop(device)
            if task is None:
                break
            lane = idle.pop()
            task.started = self.now
            if device:
                rank.gpu_free_at[device] = self.now + task.seconds
            self._at(self.now + task.seconds, self._ran, (rank, lane, task))
        if self.host_takes and rank.idle[0]:
            self._host_takes(rank)

    def _host_takes(self, rank: Rank) -> None:
        """Idle CPU workers take the GPU tasks :func:`~tiledsl.runtime.heteroprio.choose` picks."""
        idle = rank.idle[0]
        busy = [max(0.0, free - self.now) for free in rank.gpu_free_at]
        while idle:
            task = heteroprio.take(rank.scheduler, _host_and_gpu_seconds, busy)
            if task is None:
                return
            rank.host_took += 1
            task.taken_from, task.device, task.seconds = task.device, 0, task.owned.host_seconds  # on the host now
            task.started = self.now
            self._taken_copies(rank, task)
            self._at(self.now + task.seconds, self._ran, (rank, idle.pop(), task))

    def _taken_copies(self, rank: Rank, task: SimTask) -> None:
        """The copies a CPU worker makes of the GPU task it took, counted and traced as the run does: each
        tile to the host as it starts, the written ones back as it ends (its seconds include them)."""
        owned, gpu, pcie = task.owned, task.taken_from, self.machine.pcie
        down = [Copy(tile, 0, part=part_of(tile, view))
                for tile, view in zip(owned.tiles, owned.views or (None,) * len(owned.tiles))]
        up = [down[index] for index in owned.call.writes]
        rank.device_copies += len(down) + len(up)
        if self.tracer is None:
            return
        at = self.now
        for copy in down:
            self.tracer.copy(rank.number, at, at + pcie.seconds(copy.nbytes), copy, gpu, 0)
            at += pcie.seconds(copy.nbytes)
        at = self.now + task.seconds
        for copy in reversed(up):
            at -= pcie.seconds(copy.nbytes)
            self.tracer.copy(rank.number, at, at + pcie.seconds(copy.nbytes), copy, 0, gpu)

    def _ran(self, argument) -> None:
        rank, lane, task = argument
        device = task.device
        index = lane if device == 0 else self.workers + device - 1
        (rank.busy if task.owned is not None else rank.other)[index] += task.seconds
        if task.owned is not None:
            rank.tasks += 1
            rank.by_device[device] += 1
            if self.tracer is not None:
                self.tracer.task(rank.number, lane, device, task)
        rank.idle[device].append(lane)
        if task.then is not None:
            function, then_argument = task.then
            function(then_argument)
        if not task.asynchronous:
            self._complete(rank, task)
        self._run_ready(rank, device)

    def _complete_pair(self, argument) -> None:
        self._complete(*argument)

    def _complete(self, rank: Rank, task: SimTask) -> None:
        """FIRE: ``task`` is finished; its successors may run; the window may have room again."""
        scheduler = rank.scheduler
        devices = {t.device for t in scheduler.finish(task)}
        for device in devices:
            self._run_ready(rank, device)
        if self.now > rank.finished:
            rank.finished = self.now
        if rank.state == "blocked" and scheduler.in_flight <= rank.low_water:
            rank.state = "scheduled"
            self._at(self.now, self._generate, rank)


def _host_and_gpu_seconds(task: SimTask) -> tuple[float, float]:
    """A GPU task's modelled seconds on a core (copies included) and on its GPU."""
    return task.owned.host_seconds, task.seconds


def _still_starved(rank: Rank, last: int) -> bool:
    """Whether a starved-heap entry made when ``rank`` had generated up to ``last`` still holds."""
    return rank.state == "starved" and rank.last == last


def _call(then) -> None:
    function, argument = then
    function(argument)
