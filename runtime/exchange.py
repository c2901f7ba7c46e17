"""The distributed half of the engine: the protocol's instances and the data they move.

On a run of several ranks every rank submits the tasks it takes part in
(DESIGN §4, SPAA'12 §6) and decides alone, from the distribution, what to create:

* owner (type 1): the task itself. Inputs homed elsewhere are read from a
  :class:`RemoteCopy` of the tile version the task needs, received once per
  version and rank and shared by every local reader; minor outputs homed
  elsewhere are computed into such a copy (or a scratch tile for ``out``) and
  sent home when the task finishes (type 8);
* inter-node alien input (type 4): a send task, a reader in the tile's task list,
  that posts the tile to the owner once the version is ready, at most once per
  version and destination;
* sink minor output (type 6): a writer in the tile's task list that waits for the
  new version from the owner and then takes its buffer (renaming, no copy).

Messages are matched by MPI tag (one per tile) and per-(source, tag) order, which
is version order on both sides. A remote copy is freed when its last local reader
is done and no later reader can appear: the tile got a newer version, ``release``
was called, or generation ended.
"""
from __future__ import annotations

import numpy as np

from .program import Call
from .scheduler import Task

#: Transfers go before computation: a remote rank may be waiting for them.
TRANSFER_PRIORITY = 1 << 40

SEND = Call("send", ("in",), main=0, line=0, text="send a tile version to the rank that needs it")
SINK = Call("receive", ("out",), main=0, line=0, text="receive a tile version computed elsewhere")


class RemoteCopy:
    """This rank's copy of one version of a tile homed on another rank."""

    __slots__ = ("tile", "version", "data", "arrived", "waiters", "readers", "closed")

    def __init__(self, tile, version: int, data: np.ndarray):
        self.tile, self.version, self.data = tile, version, data
        self.arrived = False
        self.waiters: list[Task] = []
        self.readers = 0  # local tasks holding it
        self.closed = False  # no later local task can ask for this version


class Exchange:
    """Creates this rank's instances of distributed tasks; runs under the engine's lock."""

    def __init__(self, engine, comm):
        self.engine = engine
        self.comm = comm
        self.rank = comm.rank
        self.copy_bytes = 0
        self.peak_copy_bytes = 0

    # ---------------------------------------------------------------- instances
    def submit(self, call, tiles, views, priority, kernel) -> None:
        """Create this rank's instances of one task, then count its tiles' new versions."""
        main = tiles[call.main]
        if main.rank == self.rank:
            self._owner(call, tiles, views, priority, kernel)
        else:
            self._helper_instances(call, tiles, main)
        for index in call.writes:
            self.advance(tiles[index])

    def _owner(self, call, tiles, views, priority, kernel) -> None:
        task = Task(call, tiles, views, priority, 0, kernel)
        sources, waits, outgoing = list(tiles), 0, []
        for index, tile in enumerate(tiles):
            if tile.rank == self.rank:
                continue
            mode = call.modes[index]
            copy = self._scratch(tile) if mode == "out" else self._copy_of(tile)
            if not copy.arrived:
                copy.waiters.append(task)
                waits += 1
            copy.readers += 1
            sources[index] = copy
            if mode != "in":
                outgoing.append(copy)
        task.sources = sources
        task.on_complete = lambda: self._owner_done(sources, tiles, outgoing)
        self.engine.enqueue(task, waits)

    def _helper_instances(self, call, tiles, main) -> None:
        for index, tile in enumerate(tiles):
            if tile.rank != self.rank:
                continue
            if call.modes[index] != "out" and tile.sent.get(main.rank) != tile.version:
                tile.sent[main.rank] = tile.version
                self._send_task(tile, main.rank)
            if call.modes[index] != "in" and index != call.main:
                self._sink_task(tile, main.rank)

    def _send_task(self, tile, destination: int) -> None:
        task = Task(SEND, (tile,), None, TRANSFER_PRIORITY)
        task.asynchronous = True
        task.kernel = lambda _data: self.comm.send(tile.data, destination, tile.tag,
                                                   lambda: self.engine.complete(task))
        self.engine.enqueue(task, 0)

    def _sink_task(self, tile, source: int) -> None:
        task = Task(SINK, (tile,), None, TRANSFER_PRIORITY)
        buffer = np.empty(tile.shape, order="F")
        task.sources = (_Holder(buffer),)
        task.kernel = lambda received: setattr(tile, "data", received)
        self.comm.receive(buffer, source, tile.tag, lambda: self.engine.satisfy(task))
        self.engine.enqueue(task, 1)

    # ---------------------------------------------------------------- remote copies
    def _copy_of(self, tile) -> RemoteCopy:
        """The copy of ``tile``'s current version, its receive posted on first request."""
        copy = tile.copies.get(tile.version)
        if copy is None:
            copy = self._new_copy(tile, tile.version)
            self.comm.receive(copy.data, tile.rank, tile.tag, lambda: self._arrived(copy))
        return copy

    def _scratch(self, tile) -> RemoteCopy:
        """A zeroed buffer for an ``out`` minor output homed elsewhere."""
        copy = RemoteCopy(tile, -1, np.zeros(tile.shape, order="F"))
        copy.arrived = True
        self._count(copy.data.nbytes)
        return copy

    def _new_copy(self, tile, version: int) -> RemoteCopy:
        copy = RemoteCopy(tile, version, np.empty(tile.shape, order="F"))
        tile.copies[version] = copy
        self._count(copy.data.nbytes)
        return copy

    def _arrived(self, copy: RemoteCopy) -> None:
        """Comm thread: a copy's data is here; its waiting tasks may become ready."""
        with self.engine.lock:
            copy.arrived = True
            for task in copy.waiters:
                self.engine.satisfy_locked(task)
            copy.waiters = []

    def _owner_done(self, sources, tiles, outgoing) -> None:
        """After an owner task: send minor outputs home, let go of remote copies."""
        for copy in outgoing:
            self.comm.send(copy.data, copy.tile.rank, copy.tile.tag, _nothing)
            copy.closed = True
        for source, tile in zip(sources, tiles):
            if isinstance(source, RemoteCopy):
                source.readers -= 1
                self._maybe_free(source)

    def advance(self, tile) -> None:
        """``tile`` has a new version: copies of older ones can take no new reader."""
        tile.version += 1
        self.close(tile)

    def close(self, tile) -> None:
        """No later task reads the current version of ``tile`` as a copy: free copies once
        read, and forget what was sent (both sides of every transfer decide this alike)."""
        tile.sent.clear()
        for copy in list(tile.copies.values()):
            copy.closed = True
            self._maybe_free(copy)

    def _maybe_free(self, copy: RemoteCopy) -> None:
        if copy.closed and copy.readers == 0 and copy.arrived:
            if copy.tile.copies.get(copy.version) is copy:
                del copy.tile.copies[copy.version]
            self._count(-copy.data.nbytes)
            copy.data = None

    def _count(self, nbytes: int) -> None:
        self.copy_bytes += nbytes
        self.peak_copy_bytes = max(self.peak_copy_bytes, self.copy_bytes)


class _Holder:
    """Gives a bare buffer the ``.data`` a task's sources have."""

    __slots__ = ("data",)

    def __init__(self, data):
        self.data = data


def _nothing() -> None:
    """A completion that needs no action (the comm thread holds the buffer until then)."""
