"""Moving tiles between places: the protocol's instances and the data they carry.

A place is ``(rank, device)``: device 0 is the host, ``g >= 1`` a GPU of that rank.
Every rank submits the tasks it takes part in (DESIGN §4, SPAA'12 §6) and
decides alone, from the distribution, what to create:

* owner (type 1): the task itself, on its main output's device, or on the host
  when its kernel has no GPU body (:func:`.protocol.runs_at`). An input homed
  at another place is read from a :class:`Copy` of the tile version it needs,
  made once per version and place and shared by every reader there: received
  over MPI from another rank (type 4 on the sender), copied from another device
  of this rank (type 3), or both (received on the host, then copied). A minor
  output homed elsewhere is computed into such a copy (or a zeroed one for
  ``out``) and goes home when the task finishes (types 7 and 8), as does the main
  output of a task run on the host while it lives on a GPU;
* send (type 4, on the input's rank): a reader in the tile's list that posts the
  tile to the owner's rank once the version is ready (staged to the host first
  when the tile lives on a GPU), at most once per version and destination; with
  ``--broadcast tree`` the version goes along a tree of the ranks that read it,
  each forwarding it on (:mod:`.broadcast`);
* sink (type 6, on the minor output's rank): a writer in the tile's list that
  waits for the new version and then takes its buffer (renaming, no copy).

Host/GPU copies are started by the copy thread (:class:`Mover`, the seeds' CUDA
communication thread) and overlap; MPI messages are matched by tag (one per tile) and
per-(source, tag) order, which is version order on both sides. A copy is freed
when its last reader is done and no later reader can appear: the tile got a
newer version, ``release`` was called, or generation ended. Every instance
created is counted by type (``created``, in the run's statistics), so tests can
hold the run to what ``tiledsl explain`` predicts.

An out-of-core rank (:mod:`.outofcore`) keeps its GPU tiles on the host: the hooks
marked "out-of-core" hand its GPU tasks to the GPUs' caches, place tasks by the
tiles' GPUs, and write tiles back to the host before another place touches them.
"""
from __future__ import annotations

import math
import queue
import threading
import time
from collections import Counter

import numpy as np

from . import polling, threadstart
from .matrix import moved_part, part_text, region_view
from .program import Call
from .broadcast import Broadcasts
from .protocol import Instance, delivery, runs_at
from .scheduler import Task
from .trace import copy_args

#: Transfers go before computation: another rank or device may be waiting for them. Above every priority a
#: program may give (its arithmetic is exact: 2 ** 62 * i passes any integer bound).
TRANSFER_PRIORITY = math.inf
#: Copies under way on the copy thread at most (each holds a pinned staging buffer on a GPU).
IN_FLIGHT = 8
_NO_JOB = object()  # the copy thread's "no new copy to start yet"

SEND = Call("send", ("in",), main=0, line=0, text="send a tile version to the rank that needs it", role="transfer")
SINK = Call("receive", ("out",), main=0, line=0, text="receive a tile version computed elsewhere", role="transfer")
COPY = Call("copy", ("in",), main=0, line=0, text="copy a tile version to another device", role="transfer")

# instance types as plain numbers, the indices of ``Exchange.created``: counting is on every task's
# path, and looking up an enum member costs several times the count itself
(OWNER, NATIVE_INPUT, INTRA_NODE_ALIEN_INPUT, INTER_NODE_ALIEN_INPUT, NATIVE_MINOR_OUTPUT, SINK_MINOR_OUTPUT,
 INTRA_NODE_SOURCE_MINOR_OUTPUT, INTER_NODE_SOURCE_MINOR_OUTPUT) = map(int, Instance)


class Copy:
    """This place's copy of one version of a tile homed at another place, or of a part of it
    (``part`` = (r0, r1, c0, c1), the sub-range an ``in`` argument names; None: the whole tile)."""

    __slots__ = ("tile", "version", "device", "part", "data", "arrived", "waiters", "readers", "closed", "source")

    def __init__(self, tile, version: int, device: int, part: tuple | None = None):
        self.tile, self.version, self.device, self.part = tile, version, device, part
        self.source = tile.rank  # the rank it comes from (a tree broadcast's plan may name another; None:
        # a version this rank computed for another and keeps)
        self.data = None
        self.arrived = False
        self.waiters: list = []  # callables run (engine lock held) when the data is here
        self.readers = 0  # tasks and transfers still to use it
        self.closed = False  # no later task can ask for this version


class Mover:
    """The copy thread (the seeds' CUDA communication thread).

    It starts each copy as it is asked for, on its device's in- or out-stream,
    and runs the copy's callback once it has arrived, so that copies to and from
    every GPU overlap with each other and with the kernels. It polls the copies
    in flight (:mod:`.polling`); at most :data:`IN_FLIGHT` are, which bounds the
    pinned staging memory, and callbacks run in the order the copies started
    among those that have arrived.
    """

    def __init__(self, on_error, tracer):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.on_error = on_error
        self.tracer = tracer  # the engine's current tracer, if any
        self.copies = 0
        # started by the first copy, within the run, whose end stops it: started with the engine,
        # an interrupt before the run (Ctrl-C while it is set up) left it waiting for ever
        self.thread = threading.Thread(target=self._run, name="copy", daemon=True)
        self._start_lock = threading.Lock()

    def move(self, start, on_done, copied: tuple | None) -> None:
        """``start()`` (on the copy thread) begins a copy and returns its transfer; ``on_done(data)``
        once it has arrived. ``copied``: the copy's (tile, part, from device, to device), which the
        statistics count and the trace records (:func:`.trace.copy_args`); None for a zeroed buffer
        made on a GPU, which moves nothing: neither counted nor traced, as explain and simulate
        count the copies (traced, a run's trace had more copies than its device_copies)."""
        self.jobs.put((start, on_done, copied))
        if self.thread.ident is None:
            with self._start_lock:  # the engine's lock is not always held here (copy callbacks)
                if self.thread.ident is None:
                    threadstart.start(self.thread)

    def stop(self) -> None:
        self.jobs.put(None)
        with self._start_lock:
            if self.thread.ident is not None:
                self.thread.join()

    def _run(self) -> None:
        in_flight: list = []  # (transfer, on_done, copied, began), in the order they started
        last_activity = time.perf_counter()
        try:
            while (job := self._next_job(in_flight, last_activity)) is not None:
                if job is not _NO_JOB:
                    self._start(job, in_flight)
                    last_activity = time.perf_counter()
                if in_flight and self._arrivals(in_flight):
                    last_activity = time.perf_counter()
        except BaseException as error:  # the thread's own failure stops the run at once, not at the watchdog
            self.on_error(error)

    def _next_job(self, in_flight: list, last_activity: float):
        """The next copy to start, None to stop, or _NO_JOB after a pause (:mod:`.polling`) while
        copies are in flight: blocks only while none is."""
        if not in_flight:
            return self.jobs.get()
        pause = polling.interval(time.perf_counter() - last_activity)
        if len(in_flight) >= IN_FLIGHT:
            time.sleep(pause)
            return _NO_JOB
        try:
            return self.jobs.get(timeout=pause) if pause else self.jobs.get_nowait()
        except queue.Empty:
            return _NO_JOB

    def _start(self, job, in_flight: list) -> None:
        start, on_done, copied = job
        began = time.perf_counter()
        try:
            in_flight.append((start(), on_done, copied, began))
        except BaseException as error:  # reported as the run's failure, never lost (17.3)
            self.on_error(error)

    def _arrivals(self, in_flight: list) -> bool:
        """Run the callbacks of the copies that have arrived; True if there were any."""
        arrived = [item for item in in_flight if item[0].ready()]
        for item in arrived:
            in_flight.remove(item)
            transfer, on_done, copied, began = item
            try:
                result = transfer.result()
                if copied is not None:
                    self.copies += 1
                    tracer = self.tracer()
                    if tracer is not None:
                        tracer.transfer("copy", began, "copy", copy_args(*copied, getattr(result, "nbytes", 0)))
                on_done(result)
            except BaseException as error:  # reported as the run's failure, never lost (17.3)
                self.on_error(error)
        return bool(arrived)


class Exchange:
    """Creates this rank's instances of tasks whose tiles live at several places.

    Runs under the engine's lock; ``comm`` is None on one rank, ``devices`` (a
    backend) None without GPUs.
    """

    def __init__(self, engine, comm, devices, broadcast: str = "direct"):
        self.engine, self.comm, self.devices = engine, comm, devices
        self.rank = comm.rank if comm is not None else 0
        # tile versions to several ranks along a tree of them (:mod:`.broadcast`), or each from its owner
        self.broadcasts = Broadcasts(self, TRANSFER_PRIORITY) if broadcast == "tree" and comm is not None else None
        self.mover = Mover(engine.fail_from_thread, lambda: engine.tracer) if devices is not None else None
        if comm is not None and comm.on_error is None:  # an MPI error stops the run, not just its thread
            comm.on_error = engine.fail_from_thread
        self.copy_bytes = 0
        self.peak_copy_bytes = 0
        self.posted: Counter = Counter()  # (kind, tag, peer) -> messages posted, to pair sends with receives
        self.unposted: dict = {}  # (tag, peer) -> sends of one tile to one rank not posted yet, in program order
        self.created = [0] * (len(Instance) + 1)  # [type]: instances of that type this rank created
        self.out_of_core = None  # an outofcore.OutOfCore when this rank's GPU tiles live on the host

    def go_out_of_core(self, plan) -> None:
        """Out-of-core hook: run with this rank's GPU tiles on the host (an :class:`.outofcore.Plan`)."""
        from .outofcore import OutOfCore

        self.out_of_core = OutOfCore(self, plan)

    # ---------------------------------------------------------------- instances
    def submit(self, call, tiles, views, priority, kernel, values=()) -> None:
        """Create this rank's instances of one task, then count its tiles' new versions."""
        main = tiles[call.main]
        device = self._device_for(call, main) if main.rank == self.rank else None
        if self.out_of_core is not None:  # out-of-core: tiles another place wrote come home first
            self.out_of_core.submitting(call, tiles, device)
        if device is not None:
            kept = self._owner(call, tiles, views, priority, kernel, device, values)
        else:
            self._helpers(call, tiles, views, main)
        for index in call.writes:
            self.advance(tiles[index])
        if device == 0:
            for copy in kept:
                kept[copy] = self._new_copy(copy.tile, 0, None)  # of the version the task makes
                kept[copy].source = None  # made here: not a transfer to wait for
        elif device is None and self._on_its_host(call, main):
            self._held_by_producer(call, tiles, main.rank)

    def _device_for(self, call, main) -> int:
        """The device of this rank that computes a task whose main output is ``main``."""
        device = main.device if self.out_of_core is None else self.out_of_core.device_of(main)  # out-of-core
        if not device:
            return 0
        return runs_at((main.rank, device), call.kernel, self.devices.kernels)[1]

    def _on_its_host(self, call, main) -> bool:
        """Whether a task whose main output is ``main`` runs on its rank's host, as every rank tells
        from the distribution (not from where an out-of-core rank keeps the tile's data)."""
        return not main.device or not runs_at((main.rank, main.device), call.kernel, self.devices.kernels)[1]

    def _owner(self, call, tiles, views, priority, kernel, device, values) -> dict:
        """The owner instance; returns, for each minor output it sends to another rank from the
        host, the copy it computes into, to map (once the new version is counted) to the copy of
        that version this rank keeps for its own later readers."""
        if device and self.out_of_core is not None:  # out-of-core: the GPU's cache serves every tile
            self.out_of_core.owner(call, tiles, views, priority, device, values)
            return {}
        host_kernel = kernel
        if device:
            kernel = self.devices.kernels[call.kernel]
        task = Task(call, tiles, views, priority, device, kernel, values)
        if device and call.line > 0:
            task.host_kernel = host_kernel
        self.created[OWNER] += 1
        ready = lambda: self.engine.satisfy_locked(task)
        sources, waits, outgoing = list(tiles), 0, []
        for index, tile in enumerate(tiles):
            mode = call.modes[index]
            if (tile.rank, tile.device) == (self.rank, device):
                self.created[NATIVE_INPUT] += mode != "out"
                self.created[NATIVE_MINOR_OUTPUT] += mode != "in" and index != call.main
                continue
            here = tile.rank == self.rank
            self.created[INTRA_NODE_ALIEN_INPUT] += mode != "out" and here
            copy = self._scratch(tile, device) if mode == "out" else self.copy_at(tile, device,
                                                                                 moved_part(call, tiles, views, index))
            if copy.part is not None:  # the copy is the sub-range itself
                task.regions = read_whole(task.regions, index)
            waits += self.wait_for(copy, ready)
            copy.readers += 1
            sources[index] = copy
            if mode != "in":
                outgoing.append(copy)
                self.created[INTRA_NODE_SOURCE_MINOR_OUTPUT if here else INTER_NODE_SOURCE_MINOR_OUTPUT] += 1
        task.sources = sources
        self.engine.enqueue(task, waits)
        # after the task in its tiles' lists: later readers wait for the data to be home
        sinks = [self._local_sink(copy) for copy in outgoing if copy.tile.rank == self.rank]
        kept = {copy: None for copy in outgoing if copy.tile.rank != self.rank} if device == 0 else {}
        task.on_complete = lambda: self._owner_done(sources, tiles, outgoing, sinks, kept)
        return kept

    def _helpers(self, call, tiles, views, main) -> None:
        """Instances for a task computed on another rank: sends of inputs, sinks of outputs."""
        for index, tile in enumerate(tiles):
            if tile.rank != self.rank:
                continue
            if call.modes[index] != "out":
                moves, what = delivery(tile.delivered, (main.rank, 0), moved_part(call, tiles, views, index),
                                       tile.shape)  # as the receiver decides (:meth:`copy_at`)
                if moves:  # an inter-node alien input is a send: a reader of a version already there has none
                    self.created[INTER_NODE_ALIEN_INPUT] += 1
                    self._send_task(tile, main.rank, what)
            if call.modes[index] != "in" and index != call.main:
                self._remote_sink(tile, main.rank)

    def _held_by_producer(self, call, tiles, producer: int) -> None:
        """The versions of this rank's tiles that a task computes on rank ``producer``'s host: that
        rank keeps a copy of each for its own readers (:meth:`_owner`), so none is sent back there."""
        for index in call.writes:
            tile = tiles[index]
            if index != call.main and tile.rank == self.rank:
                tile.delivered[(producer, 0)] = {None: 0}

    # ---------------------------------------------------------------- copies of inputs
    def copy_at(self, tile, device: int, wanted: tuple | None = None) -> Copy:
        """The copy of ``tile``'s current version at ``device`` of this rank that serves a reader of
        ``wanted`` of it (None: the whole tile), made on first request: a copy of that part, or of
        the whole tile as :func:`.protocol.delivery` rules (the sender follows the same rule)."""
        for key in ((tile.version, device, None), (tile.version, device, wanted)):
            copy = tile.copies.get(key)
            if copy is not None and not copy.closed:  # a closed one was released: the home sends anew
                return copy
        _, part = delivery(tile.delivered, (self.rank, device), wanted, tile.shape)
        copy = self._new_copy(tile, device, part)
        if tile.rank != self.rank and device == 0:
            copy.data = np.empty(_shape(tile, part), order="F")
            self._count(copy.data.nbytes)
            if self.broadcasts is not None:
                self.broadcasts.expect(copy)
            else:
                done = self.traced("receive", tile, tile.rank, copy.data.nbytes, lambda: self.arrive(copy, copy.data))
                self.comm.receive(copy.data, tile.rank, tile.tag, done)
        elif tile.rank != self.rank:
            staged = self.copy_at(tile, 0, wanted)  # received on the host, then copied to the GPU
            staged.readers += 1
            move = lambda: self._move(lambda: self.devices.start_to_device(_part(staged, part), device), copy, staged,
                                      (tile, part, 0, device))
            if not self.wait_for(staged, move):
                move()  # the host copy is already here
        else:
            self._copy_task(tile, copy)
        return copy

    def _copy_task(self, tile, copy: Copy) -> None:
        """A reader of ``tile`` at home that copies the version (or the copy's part of it) to another device."""
        task = Task(COPY, (tile,), _view_of(tile, copy.part), TRANSFER_PRIORITY)
        task.asynchronous = True
        move = self._mover_function(tile.device, copy.device)
        task.kernel = lambda data: self.mover.move(lambda: move(data), lambda result: self._copied(task, copy, result),
                                                   (tile, copy.part, tile.device, copy.device))
        self.engine.enqueue(task, 0)

    def _copied(self, task, copy: Copy, data) -> None:
        self.arrive(copy, data)
        self.engine.complete(task)

    def _move(self, function, copy: Copy, staged: Copy, copied: tuple) -> None:
        """Copy thread: ``function()`` makes ``copy``'s data from the host copy ``staged`` (``copied``:
        as :meth:`Mover.move` takes it)."""
        def done(data):
            self.arrive(copy, data)
            with self.engine.lock:
                staged.readers -= 1
                self.maybe_free(staged)
        self.mover.move(function, done, copied)

    def _mover_function(self, source: int, target: int):
        if source == 0:
            return lambda data: self.devices.start_to_device(data, target)
        if target == 0:
            return self.devices.start_to_host
        return lambda data: self.devices.start_copy(data, target)

    def _scratch(self, tile, device: int) -> Copy:
        """A zeroed buffer at ``device`` for an ``out`` minor output homed elsewhere: on a GPU, made
        on its in-stream by the copy thread (the task waits for it as for a copy)."""
        copy = Copy(tile, -1, device)
        if device:
            self.mover.move(lambda: self.devices.start_zeros(tile.shape, device),
                            lambda data: self.arrive(copy, data), None)
            return copy
        copy.data = np.zeros(tile.shape, order="F")
        copy.arrived = True
        self._count(copy.data.nbytes)
        return copy

    def _new_copy(self, tile, device: int, part: tuple | None) -> Copy:
        copy = Copy(tile, tile.version, device, part)
        tile.copies[(tile.version, device, part)] = copy
        return copy

    def wait_for(self, copy: Copy, callback) -> int:
        """Run ``callback`` once ``copy`` is here; 1 if that is later, 0 if it already is."""
        if copy.arrived:
            return 0
        copy.waiters.append(callback)
        return 1

    def arrive(self, copy: Copy, data) -> None:
        """Any thread: ``copy``'s data is here; what waited for it may go on."""
        with self.engine.lock:
            if copy.data is None:
                copy.data = data
                self._count(getattr(data, "nbytes", 0))
            copy.arrived = True
            waiters, copy.waiters = copy.waiters, []
            for callback in waiters:
                callback()

    # ---------------------------------------------------------------- outputs going home
    def _local_sink(self, copy: Copy):
        """A writer of a tile homed on another device of this rank: takes the computed copy."""
        tile = copy.tile
        self.created[SINK_MINOR_OUTPUT] += 1
        task = Task(SINK, (tile,), None, TRANSFER_PRIORITY)
        holder = Copy(tile, -1, tile.device)
        task.sources = (holder,)
        task.kernel = lambda data: setattr(tile, "data", data)
        self.engine.enqueue(task, 1)
        return task, holder

    def _owner_done(self, sources, tiles, outgoing, sinks, kept: dict) -> None:
        """After an owner task: minor outputs go home (a copy of those sent from the host is kept
        for later readers here); copies are let go."""
        pending = iter(sinks)
        for copy in outgoing:
            if copy.tile.rank == self.rank:
                self._move_home(copy, *next(pending))
            else:
                self.send_home(copy, kept.get(copy))
            copy.closed = True
        for source, tile in zip(sources, tiles):
            if isinstance(source, Copy):
                source.readers -= 1
                self.maybe_free(source)

    def _move_home(self, copy: Copy, sink, holder: Copy) -> None:
        """A minor output computed here goes to its home device of this rank, then to ``sink``.

        A method of its own, not a loop body: the closures given to the copy thread
        run later and must each keep their own copy, sink and holder (16.1)."""
        move, data = self._mover_function(copy.device, copy.tile.device), copy.data
        self.mover.move(lambda: move(data), lambda result: self._sink_arrived(sink, holder, result),
                        (copy.tile, copy.part, copy.device, copy.tile.device))

    def _sink_arrived(self, sink, holder: Copy, data) -> None:
        holder.data = data
        self.engine.satisfy(sink)

    def send_home(self, copy: Copy, kept: Copy | None = None) -> None:
        """A minor output computed here, or a tile an out-of-core GPU cache wrote back, goes to its home
        rank (via the host). ``kept``: this rank's copy of the version, which holds the data sent
        once the send is done (a later writer here must not change the buffer MPI still reads)."""
        tile, data = copy.tile, copy.data  # the task's own copy lets go of its data before the send is done
        sent = _nothing if kept is None else lambda: self._kept_arrived(kept, data)
        send = lambda host: self.comm.send(host, tile.rank, tile.tag,
                                           self.traced("send", tile, tile.rank, host.nbytes, sent))
        if copy.device == 0:
            send(data)
        else:
            self.mover.move(lambda: self.devices.start_to_host(data), send, (tile, copy.part, copy.device, 0))

    def _kept_arrived(self, kept: Copy, data) -> None:
        self.arrive(kept, data)
        with self.engine.lock:
            self.maybe_free(kept)  # no reader here took it, and the version is closed already

    def _send_task(self, tile, destination: int, part: tuple | None) -> None:
        """A reader of ``tile`` that sends the version, or the sub-range ``part`` of it, to
        ``destination`` (via the host).

        The receiver posts its receives for one tile in program order and MPI matches them
        in posting order, so the sends of one tile to one rank are posted in program order
        too: each waits for the one before it to be posted (two parts of one version are
        ready at the same time)."""
        task = Task(SEND, (tile,), _view_of(tile, part), TRANSFER_PRIORITY)
        task.asynchronous = True
        order = self.unposted.setdefault((tile.tag, destination), [])

        def send(host):
            self.comm.send(host, destination, tile.tag,
                           self.traced("send", tile, destination, host.nbytes, lambda: self.engine.complete(task)))
            self.posted_in_order((tile.tag, destination))
        if tile.device == 0:
            task.kernel = lambda data: send(np.asfortranarray(data))  # a sub-range of rows is strided
        else:
            task.kernel = lambda data: self.mover.move(lambda: self.devices.start_to_host(data), send,
                                                       (tile, part, tile.device, 0))
        if self.broadcasts is not None:
            self.broadcasts.send(task, tile, destination, part, task.kernel)
        order.append(task)
        self.engine.enqueue(task, len(order) > 1)

    def posted_in_order(self, key) -> None:
        """Any thread: the oldest unposted send of one tile to one rank is posted; the next may go."""
        with self.engine.lock:
            order = self.unposted[key]
            order.pop(0)
            if order:
                self.engine.satisfy_locked(order[0])
            else:
                del self.unposted[key]

    def traced(self, kind: str, tile, peer: int, nbytes: int, then):
        """``then``, as the completion of a message posted now; traced as ``kind`` when tracing,
        and what it raises made the run's failure.

        Messages are numbered per tile and peer in posting order, which MPI keeps
        between two ranks on one tag: the n-th send of a tile to a rank is its
        n-th receive there, so the trace can tell when a transfer really began.
        """
        key = (kind, tile.tag, peer)
        self.posted[key] += 1
        tracer = self.engine.tracer
        posted, number = time.perf_counter(), self.posted[key]

        def done():
            try:
                if tracer is not None:
                    peer_key = "to" if kind == "send" else "from"
                    tracer.transfer("mpi", posted, kind, {"tile": str(tile), peer_key: peer, "tag": tile.tag,
                                                          "message": number,
                                                          "bytes": nbytes})
                then()
            except BaseException as error:  # the MPI thread must live on, and the run must hear of it (17.3)
                self.engine.fail_from_thread(error)
        return done

    def _remote_sink(self, tile, source: int) -> None:
        """A writer of ``tile`` that waits for its new version from rank ``source``."""
        self.created[SINK_MINOR_OUTPUT] += 1
        task = Task(SINK, (tile,), None, TRANSFER_PRIORITY)
        buffer = np.empty(tile.shape, order="F")
        holder = Copy(tile, -1, 0)
        holder.data = buffer
        task.sources = (holder,)
        if tile.device == 0:
            task.kernel = lambda received: setattr(tile, "data", received)
        else:
            task.asynchronous = True
            task.kernel = lambda received: self.mover.move(lambda: self.devices.start_to_device(received, tile.device),
                                                           lambda data: self._home(task, tile, data),
                                                           (tile, None, 0, tile.device))
        self.comm.receive(buffer, source, tile.tag, self.traced("receive", tile, source, buffer.nbytes,
                                                                 lambda: self.engine.satisfy(task)))
        self.engine.enqueue(task, 1)

    def _home(self, task, tile, data) -> None:
        tile.data = data
        self.engine.complete(task)

    # ---------------------------------------------------------------- versions and freeing
    def advance(self, tile) -> None:
        """``tile`` has a new version: copies of older ones can take no new reader."""
        tile.version += 1
        self.close(tile)

    def release(self, tile) -> None:
        """Release_Tile, or the end of generation: :meth:`close`, and (out-of-core) the tile goes home."""
        self.close(tile)
        if self.out_of_core is not None:
            self.out_of_core.release(tile)

    def holds(self, tile) -> bool:
        """Whether this rank holds something of ``tile``'s current version that its next
        version or a release must close: an open copy, or a record of what was delivered."""
        if tile.delivered:
            return True
        for copy in tile.copies.values():  # (a loop: this is asked for most touches of a share walk)
            if not copy.closed:
                return True
        return False

    def make_resident(self, task) -> None:
        """Out-of-core hook: a GPU's management thread waits for ``task``'s tiles in the GPU's cache."""
        if self.out_of_core is not None:
            self.out_of_core.make_resident(task)

    def close(self, tile) -> None:
        """No later task reads the current version of ``tile`` as a copy: free copies once
        read, and forget what was sent (both sides of every transfer decide this alike)."""
        tile.delivered.clear()
        for copy in list(tile.copies.values()):
            copy.closed = True
            self.maybe_free(copy)

    def maybe_free(self, copy: Copy) -> None:
        if copy.closed and copy.readers == 0 and copy.arrived:
            key = (copy.version, copy.device, copy.part)
            if copy.tile.copies.get(key) is copy:
                del copy.tile.copies[key]
            self._count(-getattr(copy.data, "nbytes", 0))
            copy.data = None

    def _count(self, nbytes: int) -> None:
        self.copy_bytes += nbytes
        self.peak_copy_bytes = max(self.peak_copy_bytes, self.copy_bytes)

    def _waiting(self, matrices) -> list:
        """The copies still to come from another place (not those this rank's own tasks make
        and keep, which are here once their send home is done)."""
        return [copy for matrix in matrices for tile in matrix.made_tiles()
                for copy in tile.copies.values() if not copy.arrived and copy.source is not None]

    def waited_ranks(self, matrices) -> list[int]:
        """The other ranks this rank waits for a tile version from."""
        return sorted({copy.source for copy in self._waiting(matrices) if copy.tile.rank != self.rank})

    def describe(self, matrices) -> str:
        """Copies this rank is still waiting for, for stall reports."""
        waiting = self._waiting(matrices)
        lines = [f"  waiting for {copy.tile}{part_text(copy.part)} version {copy.version} "
                 + (f"from rank {copy.source}" + (f" to GPU {copy.device}" if copy.device else "")
                    if copy.tile.rank != self.rank else f"from {_place(copy.tile.device)} to {_place(copy.device)}")
                 + (" (its plan from the owner is not in yet)" if self.broadcasts and self.broadcasts.unplanned_copy(copy)
                    else "")
                 for copy in waiting[:5]]
        return "\n".join(lines)

    def instance_counts(self) -> list[int]:
        """Instances created on this rank, by type: element ``t - 1`` counts type ``t`` (out-of-core:
        as the tiles are placed, what ``tiledsl explain`` predicts)."""
        if self.out_of_core is None:
            return self.created[1:]
        return [self.created[kind] if kind == INTER_NODE_ALIEN_INPUT else self.out_of_core.created[kind]
                for kind in Instance]

    @property
    def device_copies(self) -> int:
        return self.mover.copies if self.mover is not None else 0

    def stop(self) -> None:
        if self.mover is not None:
            self.mover.stop()
        if self.out_of_core is not None:  # out-of-core: the tiles are home; later runs (checks) are the host's
            self.out_of_core.stop()
            self.out_of_core = None


def _nothing() -> None:
    """A completion that needs no action (the comm thread holds the buffer until then)."""


def _view_of(tile, part: tuple | None):
    """The task regions that read ``part`` of ``tile`` (None: the whole tile)."""
    return None if part is None else (region_view(tile, part),)


def _part(copy: Copy, part: tuple | None):
    """The data of ``copy`` that a copy of ``part`` is made from: the part itself when ``copy``
    holds the whole tile."""
    assert copy.part in (part, None), "a GPU copy takes no more of a tile than its host copy holds"
    return copy.data if copy.part == part else copy.data[region_view(copy.tile, part)]


def _shape(tile, part: tuple | None) -> tuple[int, int]:
    return tile.shape if part is None else (part[1] - part[0], part[3] - part[2])


def read_whole(views: tuple, index: int) -> tuple:
    """``views`` with argument ``index`` read whole: its copy is already the sub-range."""
    return views[:index] + (None,) + views[index + 1:]


def _place(device: int) -> str:
    """Device 0 is the host, device g ≥ 1 GPU g."""
    return f"GPU {device}" if device else "the host"
