"""The loop nest walked once for every rank: each task's instances and the data they move.

The program's own driver runs once against :class:`Walk`, whose rank number equals
every rank (:class:`~tiledsl.runtime.recording.Everyone`), so it submits every task.
For each task the walk takes, in program order, the decisions every real rank takes
alone in :mod:`tiledsl.runtime.exchange` (which its tests hold to the protocol of
:mod:`tiledsl.runtime.protocol`):

* the owner (the rank of the main output) computes it on the main output's device,
  or on its host for a kernel without a GPU body; an input homed elsewhere is read
  from a copy made once per tile version and place (received over MPI, copied
  from another device, or both); a written tile homed elsewhere is computed into a
  copy that goes home when the task ends (a message to another rank, a copy to
  another device);
* the rank of an input sends it to the owner's rank at most once per version (a
  ``release`` or a new version starts over: both sides decide alike), or only the
  sub-range an ``in`` argument names, as :func:`~tiledsl.runtime.protocol.delivery` rules;
* the rank of a written tile computed elsewhere receives the new version (a sink).

Each rank taking part gets one item (its share of the task) to replay at its own
simulated time (:mod:`.engine`); a rank taking no part is never touched, which is
what makes 100 ranks × 10⁶ tasks cheap. What one message carries, and so its size,
is decided by :func:`message_bytes` alone.
"""
from __future__ import annotations

from ..runtime.matrix import call_views, check_distinct_writes, part_of
from ..runtime.program import check_values, flatten
from ..runtime.protocol import Instance, delivery, runs_at
from ..runtime.recording import LoopNestTarget

OUT, IN = "out", "in"


def message_bytes(shape: tuple, part: tuple | None) -> int:
    """Bytes one message of a tile of ``shape`` carries: the whole tile, or the sub-range
    ``part`` = (r0, r1, c0, c1) of it that :func:`~tiledsl.runtime.protocol.delivery` chose
    (one buffer of float64 either way)."""
    rows, cols = shape if part is None else (part[1] - part[0], part[3] - part[2])
    return rows * cols * 8


class Message:
    """One MPI message: posted by both sides at their own times, then on the links."""

    __slots__ = ("tile", "source", "target", "part", "nbytes", "sent_at", "posted_at", "on_sent", "on_arrived", "fresh",
                 "group", "task", "planned", "plan_in", "forwards", "kept")

    def __init__(self, tile, source: int, target: int, part: tuple | None = None):
        self.tile, self.source, self.target, self.part = tile, source, target, part  # part: as Copy's
        self.nbytes = message_bytes(tile.shape, part)
        self.sent_at = self.posted_at = None  # simulated times the send and the receive were posted
        self.on_sent = self.on_arrived = None  # (function, argument) for the sender and the receiver
        self.fresh = True  # no send of it has been planned yet
        # a tree broadcast (runtime.broadcast): the messages of the same whole version (None for a part)
        self.group = None
        self.task = None  # the owner's send task, once its walk reached it
        self.planned = False  # its source (the owner or a forwarding reader) is decided
        self.plan_in = True  # the receiver knows where it comes from (False until its plan arrives)
        self.forwards: list = []  # the messages its receiver sends on once it has arrived
        self.kept = None  # a version going home: the Copy its sender keeps, there once it is sent


class Copy:
    """A rank's copy of one version of a tile homed at another place: made by ``message``
    (received on the host), from ``staged`` (the host copy, then to a GPU) or from the
    tile's home device of the same rank (neither). A scratch copy (an ``out`` argument
    computed away from home) has arrived from the start. ``part``: the sub-range it holds
    (None: the whole tile)."""

    __slots__ = ("tile", "device", "message", "staged", "started", "arrived", "waiters", "part")

    def __init__(self, tile, device: int, message=None, staged=None, scratch=False, part=None):
        self.tile, self.device, self.message, self.staged, self.part = tile, device, message, staged, part
        self.started = self.arrived = scratch
        self.waiters: list = []  # (function, argument) run once it has arrived

    @property
    def nbytes(self) -> int:
        return message_bytes(self.tile.shape, self.part)


class Owned:
    """The owner's share of a task: what it computes, where, and the copies it uses."""

    __slots__ = ("call", "tiles", "device", "priority", "seconds", "host_seconds", "copies", "outgoing", "values",
                 "views")

    def __init__(self, call, tiles, device, priority, seconds, values):
        self.call, self.tiles, self.device, self.priority = call, tiles, device, priority
        self.seconds, self.values = seconds, values
        self.views = None  # each argument's sub-range (call_views; None: whole tiles), which the trace names
        self.host_seconds = None  # a GPU task's seconds on a core, its tiles copied there and back
        self.copies: list = []  # per argument: None (native) or the Copy it reads or writes
        self.outgoing: list = []  # (position, Copy, Message or None): written copies going home, in order

    def outgoing_message(self, position: int):
        return next(message for index, _, message in self.outgoing if index == position)


class Walk(LoopNestTarget):
    """The stand-in runtime the driver submits every task to (see the module docstring).

    ``dispatch(rank, index, kind, payload)`` receives each rank's share of task
    ``index``: ``"owner"`` (an :class:`Owned`) or ``"helper"`` (a tuple of ``("send",
    Message)``, an input to send once its version is ready, and ``("sink", Message)``,
    a written tile coming home, in argument order; maybe empty).
    ``timing(call, tiles, regions, values, device)`` gives ``(seconds, flops, host seconds)`` of a
    task (the last: a GPU task's on a core, its tiles' copies included; else None).
    """

    def __init__(self, matrices: dict, nranks: int, gpu_kernels: frozenset, dispatch, timing, priority_of=None):
        super().__init__(matrices)  # every rank's share: all of the loop nest
        self.gpu_kernels = gpu_kernels
        self.dispatch = dispatch
        self.timing = timing
        self.priority_of = priority_of
        self.count = 0  # tasks walked
        self.touched: set = set()  # the tiles some task touches: those a run stores (on its owner)
        self.instances = [[0] * len(Instance) for _ in range(nranks)]
        self.traffic = [[0, 0, 0, 0] for _ in range(nranks)]  # messages sent, received, bytes sent, received
        self.flops = [0.0] * nranks  # of the tasks each rank owns
        self.uncounted: list = [None] * nranks  # the first kernel without a flop count each rank ran
        self.open: dict = {}  # tile -> {(rank, device, part): Copy} of its current version
        self.delivered: dict = {}  # tile -> {(rank, device): parts} of its current version (protocol.delivery)
        self.sent: dict = {}  # tile -> {rank: [Message]} of its current version, in program order
        self.versions: dict = {}  # tile -> [Message] of its current version moving whole (a tree's members)

    def release(self, tile, at=None) -> None:
        """Release_Tile: later readers of the version get it sent or copied anew."""
        self.open.pop(tile, None)
        self.delivered.pop(tile, None)
        self.sent.pop(tile, None)
        self.versions.pop(tile, None)

    def submit(self, call, tiles, regions, priority, values=(), at=None) -> None:
        check_values(call, values)  # as a run refuses them
        call, tiles, regions = flatten(call, tiles, regions)
        check_distinct_writes(call, tiles)  # as a run's survey finds it
        views = call_views(call, tiles, regions)  # a bad sub-range names its line
        parts = _parts(call, tiles, views)
        index = self.count
        self.count += 1
        self.touched.update(tiles)
        if self.priority_of is not None:
            priority = self.priority_of(call, tiles, priority)
        main = tiles[call.main]
        device = runs_at((main.rank, main.device), call.kernel, self.gpu_kernels)[1] if main.device else 0
        seconds, flops, host_seconds = self.timing(call, tiles, regions, values, device)
        owner = main.rank
        self.flops[owner] += flops
        if self.uncounted[owner] is None and call.kernel in getattr(self.timing, "uncounted", ()):
            self.uncounted[owner] = call.kernel  # (the timing notes it as it models the task)
        owned = self._owned(call, tiles, parts, device, priority, seconds, values)
        owned.host_seconds, owned.views = host_seconds, views
        self.dispatch(owner, index, "owner", owned)
        for rank in sorted({t.rank for t in tiles if t.rank != owner}):
            self._helper(rank, index, call, tiles, owned)
        for position in call.writes:  # a new version: copies and sends of the old one are done with
            self.release(tiles[position])
        if device == 0:
            self._keep_sent_home(owned)

    def _keep_sent_home(self, owned: Owned) -> None:
        """The owner keeps a copy of each version it computed on its host and sends home, for its own
        later readers (the runtime's exchange does): that version is never sent back to it. The
        copy is there once the send is done."""
        rank = owned.tiles[owned.call.main].rank
        for _, _, message in owned.outgoing:
            if message is not None:
                kept = Copy(message.tile, 0)
                kept.started = True
                message.kept = kept
                self.open.setdefault(message.tile, {})[(rank, 0, None)] = kept
                self.delivered.setdefault(message.tile, {})[(rank, 0)] = {None: 0}

    # ---------------------------------------------------------------- the owner
    def _owned(self, call, tiles, parts, device, priority, seconds, values) -> Owned:
        rank = tiles[call.main].rank
        owned = Owned(call, tiles, device, priority, seconds, values)
        counts = self.instances[rank]
        counts[Instance.OWNER - 1] += 1
        for index, tile in enumerate(tiles):
            mode = call.modes[index]
            if tile.rank == rank and tile.device == device:
                counts[Instance.NATIVE_INPUT - 1] += mode != OUT
                counts[Instance.NATIVE_MINOR_OUTPUT - 1] += mode != IN and index != call.main
                owned.copies.append(None)
                continue
            here = tile.rank == rank
            counts[Instance.INTRA_NODE_ALIEN_INPUT - 1] += mode != OUT and here
            copy = Copy(tile, device, scratch=True) if mode == OUT else self._copy(tile, rank, device, parts[index])
            owned.copies.append(copy)
            if mode != IN:
                counts[(Instance.INTRA_NODE_SOURCE_MINOR_OUTPUT if here else Instance.INTER_NODE_SOURCE_MINOR_OUTPUT) - 1] += 1
                owned.outgoing.append((index, copy, None if here else self._message(tile, rank, tile.rank)))
        for _, copy, message in owned.outgoing:
            counts[Instance.SINK_MINOR_OUTPUT - 1] += message is None
        return owned

    def _copy(self, tile, rank: int, device: int, wanted: tuple | None) -> Copy:
        """The copy of ``tile``'s current version at ``(rank, device)`` that serves a reader of
        ``wanted`` of it (None: the whole tile), planned on first request: of that part, or of
        the whole tile, as the runtime's exchange decides."""
        held = self.open.setdefault(tile, {})
        copy = held.get((rank, device, None)) or held.get((rank, device, wanted))
        if copy is not None:
            return copy
        _, part = delivery(self.delivered.setdefault(tile, {}), (rank, device), wanted, tile.shape)
        if tile.rank != rank and device == 0:
            message = self._message(tile, tile.rank, rank, part)
            if part is None:
                message.group = self.versions.setdefault(tile, [])
                message.group.append(message)
            self.sent.setdefault(tile, {}).setdefault(rank, []).append(message)
            copy = Copy(tile, 0, message=message, part=part)
        elif tile.rank != rank:
            copy = Copy(tile, device, staged=self._copy(tile, rank, 0, wanted), part=part)
        else:
            copy = Copy(tile, device, part=part)
        held[(rank, device, part)] = copy
        return copy

    def _message(self, tile, source: int, target: int, part: tuple | None = None) -> Message:
        message = Message(tile, source, target, part)
        sender, receiver = self.traffic[source], self.traffic[target]
        sender[0] += 1
        receiver[1] += 1
        sender[2] += message.nbytes
        receiver[3] += message.nbytes
        return message

    # ---------------------------------------------------------------- the other ranks
    def _helper(self, rank: int, index: int, call, tiles, owned: Owned) -> None:
        """``rank``'s share of a task it does not own: per argument homed here, the send of an
        input to the owner (once per version), the sink of a tile written there."""
        counts = self.instances[rank]
        owner = tiles[call.main].rank
        actions = []
        for position, tile in enumerate(tiles):
            if tile.rank != rank:
                continue
            mode = call.modes[position]
            if mode != OUT:
                for message in self.sent.get(tile, {}).get(owner, ()):
                    if message.fresh:  # planned by this task's owner: the first reader of it there
                        message.fresh = False
                        actions.append(("send", message))
                        counts[Instance.INTER_NODE_ALIEN_INPUT - 1] += 1  # (a reader of one sent before: none)
            if mode != IN and position != call.main:
                counts[Instance.SINK_MINOR_OUTPUT - 1] += 1
                actions.append(("sink", owned.outgoing_message(position)))
        self.dispatch(rank, index, "helper", tuple(actions))


def _parts(call, tiles, views) -> tuple:
    """Per argument, what of its tile a task run elsewhere needs: the sub-range an ``in``
    argument names (``views``: :func:`~tiledsl.runtime.matrix.call_views`), else None (the
    whole tile; written tiles go home whole)."""
    if views is None:
        return (None,) * len(tiles)
    return tuple(part_of(tile, view) if mode == IN else None for tile, view, mode in zip(tiles, views, call.modes))
