"""Out-of-core GPUs: the matrix in host memory, a bounded cache of tiles on each GPU.

When the tiles homed on this rank's GPUs do not fit them (``--gpu-memory``, or
their free memory: :func:`plan`), the run goes out of core instead of being
refused. Those tiles keep their place in the distribution, so their tasks still
run on their GPU, but their data lives on the host (pinned where the backend
can: ``Backend.pinned``), and each GPU holds a :class:`GpuCache` of at most the
bound's bytes of tile buffers (the policy is :mod:`.devicecache`'s):

* a task on a GPU lists its tiles as :class:`Use`\\ s at submission (the cache
  learns their next use from the window) and, once the GPU's management thread
  takes it, waits until all are resident (:meth:`OutOfCore.make_resident`): a
  hit, or a copy from the host started by the copy thread (tiles received from
  other ranks land on the host first). The next few ready tasks of the GPU are
  prefetched meanwhile, so copies overlap the kernels;
* a tile a task writes stays in the cache, dirty; it goes to the host before its
  entry is evicted, when another place (the host, another GPU, another rank)
  touches it (a *write-back* task, a writer in the tile's task list appended just
  before that access, so that the access waits for the data to be home), when it
  is released, and when generation ends. A minor output homed on another rank is
  written back and sent home at once;
* a task whose tiles exceed the bound is refused when submitted, with the sizes.

Each task sees the same kernels and the same data, in the same order per tile,
as in an in-memory run, so the results are bitwise equal. Statistics (copies in
and out with their bytes, evictions, peak bytes held) go to the run's summary.
Instances are counted by placement, as ``tiledsl explain`` predicts them.
"""
from __future__ import annotations

import heapq
import itertools
import threading
from collections import Counter
from dataclasses import dataclass

from .devicecache import RESIDENT, CachePolicy
from .errors import SettingFailure
from .exchange import TRANSFER_PRIORITY, Copy, read_whole
from .matrix import moved_part, part_text
from .program import Call
from .protocol import Instance, instances, runs_at
from .resources import compared_bytes, gpu_cache_bytes
from .scheduler import Task

#: Ready tasks of a GPU whose tiles are fetched ahead of their turn.
PREFETCH_DEPTH = 4
#: the most tiles a refusal names of a task's (a panel of 1×1 tiles has hundreds), and a 1×1 tile's bytes
SHOWN_TILES, DOUBLE = 6, 8

WRITE_BACK = Call("write back", ("inout",), main=0, line=0, text="write a tile back from a GPU's cache to the host",
                  role="transfer")


@dataclass
class Plan:
    """An out-of-core run on this rank: each GPU's cache bound, and where the tiles moved to the host are homed."""

    capacity: int
    bound: str  # what set the capacity, for messages
    placement: dict  # tile -> its GPU (its data now on the host)


def plan(matrices: dict, share, window: int, devices, limit: int | None, rank: int,
         limit_name: str = "--gpu-memory") -> Plan | None:
    """None when this rank's GPUs hold their tiles (an in-memory run); else the :class:`Plan`, the
    GPU tiles set to live on the host (before their inputs are made); ``limit_name``: how the
    interface names ``limit`` (the rest: :func:`.resources.gpu_cache_bytes`)."""
    capacity = gpu_cache_bytes(matrices, share, window, devices, limit, rank, limit_name)
    if capacity is None:
        return None
    placement = {}
    for matrix in matrices.values():
        for tile in matrix.local_tiles():
            if tile.device:
                placement[tile], tile.device = tile.device, 0
    return Plan(capacity, limit_name if capacity == limit else "the GPU's free memory", placement)


class Use:
    """One tile argument of a task on an out-of-core GPU: where its data comes from, and its buffer
    while the task runs (``data``, what the kernel gets)."""

    __slots__ = ("tile", "key", "shape", "version", "source", "held", "writes", "number", "entry", "data")

    def __init__(self, tile, source, held, writes: bool, number: int):
        self.tile, self.version = tile, tile.version
        part = getattr(source, "part", None)  # a received copy of the rows an `in` argument names
        self.key = tile if part is None else (tile, part)  # what the cache holds: a part apart from its tile
        self.shape = tile.shape if part is None else (part[1] - part[0], part[3] - part[2])
        self.source = source  # what holds its data on the host (``.data``): the tile, a received copy; None: zeros
        self.held = held  # the received copy this task holds a reader of, or None
        self.writes = writes
        self.number = number  # its task's number in submission order
        self.entry = None  # its cache entry, once taken
        self.data = None

    @property
    def nbytes(self) -> int:
        height, width = self.shape
        return 8 * height * width

    def __str__(self):
        return str(self.tile) + (part_text(self.key[1]) if self.key is not self.tile else "")


class OutOfCore:
    """This rank's out-of-core GPUs: the caches, the write-backs, and the exchange's hooks.

    Runs under the engine's lock, except :meth:`make_resident` and the copies' arrivals.
    """

    def __init__(self, exchange, out_of_core: Plan):
        self.exchange, self.engine, self.devices = exchange, exchange.engine, exchange.devices
        self.rank = exchange.rank
        self.placement = out_of_core.placement
        self.capacity = out_of_core.capacity
        self.bound = out_of_core.bound
        self.caches = {g: GpuCache(self, g, out_of_core.capacity) for g in range(1, self.devices.gpus + 1)}
        self.latest: dict = {}  # own tile -> the GPU whose cache will hold its newest version, dirty
        self.numbers = itertools.count()
        self.created: Counter = Counter()  # protocol.Instance -> instances, by placement
        # Column by column: a rank's tiles of a column are views of one array, freed once the
        # column's last tile has its pinned copy (in row order every array would live to the end).
        for tile in sorted(self.placement, key=lambda tile: (tile.matrix.name, tile.j, tile.i)):
            if tile.data is not None:
                tile.data = self.devices.pinned(tile.data)

    # ---------------------------------------------------------------- submission (lock held)
    def device_of(self, tile) -> int:
        """The device ``tile`` is placed on (a GPU, though its data is on the host)."""
        return self.placement.get(tile, tile.device)

    def submitting(self, call, tiles, device: int | None) -> None:
        """Before a task's instances are made (``device``: where it runs here; None: on another rank):
        write back what another place wrote and it touches; count its instances as placed."""
        for index, tile in enumerate(tiles):
            holder = self.latest.get(tile)
            if holder is not None and holder != device:
                self._write_back_task(tile, holder)
            if device and index in call.writes and tile.rank == self.rank:
                self.latest[tile] = device
        places = [(t.rank, self.device_of(t)) for t in tiles]
        at = (self.rank, device) if device is not None else runs_at(places[call.main], call.kernel,
                                                                   self.devices.kernels)
        self.created.update(kind for kind, _ in instances(call, places, self.rank, at)
                            if kind != Instance.INTER_NODE_ALIEN_INPUT)  # the sends: the exchange counts them

    def release(self, tile) -> None:
        """Release_Tile, or the end of generation: a tile written on a GPU goes home."""
        holder = self.latest.get(tile)
        if holder is not None:
            self._write_back_task(tile, holder)

    def _write_back_task(self, tile, device: int) -> None:
        """A writer in ``tile``'s task list that brings its newest version home from GPU ``device``."""
        del self.latest[tile]
        task = Task(WRITE_BACK, (tile,), None, TRANSFER_PRIORITY)
        task.asynchronous = True
        cache = self.caches[device]
        task.kernel = lambda data: cache.write_back_for(tile, lambda: self.engine.complete(task))
        self.engine.enqueue(task, 0)

    def owner(self, call, tiles, views, priority, device: int, values) -> None:
        """The owner instance of a task on GPU ``device``: its tiles served by that GPU's cache."""
        task = Task(call, tiles, views, priority, device, self.devices.kernels[call.kernel], values)
        number = next(self.numbers)
        ready = lambda: self.engine.satisfy_locked(task)
        uses, waits = [], 0
        for index, tile in enumerate(tiles):
            source = held = self._source(tile, call.modes[index], device, moved_part(call, tiles, views, index))
            if getattr(source, "part", None) is not None:  # the received copy is the sub-range itself
                task.regions = read_whole(task.regions, index)
            if tile.rank == self.rank or source is None:
                held = None
            else:
                held.readers += 1
                waits += self.exchange.wait_for(held, ready)
            uses.append(Use(tile, source, held, index in call.writes, number))
        cache = self.caches[device]
        whole = views is not None and any(view is not None and use.key is use.tile for view, use in zip(views, uses))
        cache.check_fits(call, uses, partial=whole)
        cache.policy.plan(number, {use.key for use in uses})
        task.sources = uses
        task.on_complete = lambda: cache.done(uses)
        self.engine.enqueue(task, waits)

    def _source(self, tile, mode: str, device: int, wanted):
        """Where a task on GPU ``device`` finds ``tile``'s data: the tile (on this rank's host), the
        copy received from its rank (of the part ``wanted``, or the whole tile, as the sender sends
        it), or None for zeros (``out``, placed elsewhere, as in an in-memory run)."""
        if mode == "out" and (tile.rank != self.rank or self.device_of(tile) != device):
            return None
        return tile if tile.rank == self.rank else self.exchange.copy_at(tile, 0, wanted)

    # ---------------------------------------------------------------- running
    def make_resident(self, task) -> None:
        """A GPU's management thread: wait until every tile of ``task`` is in the GPU's cache."""
        self.caches[task.device].make_resident(task.sources)

    def statistics(self) -> dict:
        """This rank's copies, evictions and peak bytes, over its GPUs (the peak: the largest GPU's)."""
        per_gpu = [cache.policy.statistics() for cache in self.caches.values()]
        totals = {key: sum(s[key] for s in per_gpu) for key in per_gpu[0]}
        totals["peak_cache_bytes"] = max(s["peak_cache_bytes"] for s in per_gpu)
        totals["cache_bytes"] = self.capacity
        return totals

    def stop(self) -> None:
        """Let go of every GPU buffer (the tiles are home: generation ended with write-backs)."""
        for cache in self.caches.values():
            cache.clear()


class GpuCache:
    """One GPU's cache: the mechanism (copies on the copy thread) around a :class:`CachePolicy`."""

    def __init__(self, out_of_core: OutOfCore, device: int, capacity: int):
        self.ooc, self.device = out_of_core, device
        self.engine, self.devices = out_of_core.engine, out_of_core.devices
        self.policy = CachePolicy(capacity)
        self.wake = threading.Condition(self.engine.lock)  # an entry arrived or was written back
        self.admitting = False  # the running task still waits for room: no prefetch takes any
        self.write_back_waiters: dict = {}  # tile -> callbacks once its write-back has arrived

    def check_fits(self, call, uses, partial: bool = False) -> None:
        """Refuse (a one-line failure naming the sizes) a task whose tiles exceed the cache (``partial``:
        the call names a sub-range of a tile of this rank, which the cache holds whole; one received
        from another rank is its own entry)."""
        tiles = {str(use): use.nbytes for use in uses}
        if sum(tiles.values()) > self.policy.capacity:
            whole = "; a sub-range of this rank's tile holds the whole tile out of core" if partial else ""
            needs, capacity = compared_bytes(sum(tiles.values()), self.policy.capacity)
            names = list(tiles)
            named = ", ".join(names[:SHOWN_TILES]) + (f" and {len(names) - SHOWN_TILES} more"
                                                      if len(names) > SHOWN_TILES else "")
            smaller = ", or use smaller tiles" if max(tiles.values()) > DOUBLE else ""  # none at 1×1 tiles
            raise SettingFailure(f"a call of {call.kernel} needs its {len(tiles)} tile(s) {named} "
                                 f"({needs}{whole}) at once on GPU {self.device}, more than its cache of {capacity} "
                                 f"({self.ooc.bound}): allow more{smaller}", self.ooc.rank, call.line)

    # ---------------------------------------------------------------- a task's tiles
    def make_resident(self, uses) -> None:
        """The GPU's management thread (lock not held): take an entry for every use, making room
        and fetching, and wait until all are resident."""
        with self.engine.lock:
            self.admitting = True
            try:
                while not self._admitted(uses):
                    if self.engine.failure is not None:
                        raise RuntimeError("the run stopped")  # the failure already recorded is reported
                    self.wake.wait(timeout=1.0)
            finally:
                self.admitting = False
            for use in uses:
                use.data = use.entry.data
            self._prefetch()

    def _admitted(self, uses) -> bool:
        """Take (pin) entries for the uses that have none yet, hits first so that making room for
        the others cannot evict them; True once all are resident."""
        for use in uses:
            if use.entry is None and use.source is not None:
                self._take(use, self.policy.lookup(use.key, use.version))
        for use in uses:
            if use.entry is None and not self._take(use, self._entry_for(use)):
                return False
        return all(use.entry.state == RESIDENT for use in uses)

    def _take(self, use, entry) -> bool:
        if entry is not None:
            use.entry = entry
            self.policy.pin(entry)
        return entry is not None

    def _entry_for(self, use, before: int | None = None):
        """``use``'s entry: a hit, or a new one being fetched; None while there is no room yet."""
        policy = self.policy
        if use.source is not None:
            entry = policy.lookup(use.key, use.version)
            if entry is not None:
                return entry
        old = policy.entries.get(use.key)
        if old is not None:  # an older version, or a buffer about to be overwritten by zeros
            if old.state != RESIDENT or old.pins:
                return None
            assert not old.dirty or use.source is None, f"{use.tile} is dirty at version {old.version}"
            policy.drop(old)
            old.data = None
        enough, dropped, to_write_back = policy.make_room(use.nbytes, before)
        for entry in dropped:
            entry.data = None
        for entry in to_write_back:
            self._write_back(entry)
        if not enough:
            return None
        entry = policy.add(use.key, use.nbytes, use.version, copied=use.source is not None)
        self._fetch(entry, use)
        return entry

    def _fetch(self, entry, use) -> None:
        device, devices = self.device, self.devices
        if use.source is None:  # zeros: no copy (as in an in-memory run)
            shape, copied = use.shape, None
            start = lambda: devices.start_zeros(shape, device)
        else:
            host, copied = use.source.data, (use.tile, getattr(use.source, "part", None), 0, device)
            start = lambda: devices.start_to_device(host, device)
        self.ooc.exchange.mover.move(start, lambda data: self._arrived(entry, data), copied)

    def _arrived(self, entry, data) -> None:
        """The copy thread: a fetch arrived."""
        with self.engine.lock:
            entry.data = data
            self.policy.arrived(entry)
            self.wake.notify_all()
            self._prefetch()

    def done(self, uses) -> None:
        """A task finished (lock held): its written tiles are dirty (one homed on another rank goes
        home now); its entries and received copies are let go."""
        policy = self.policy
        for use in uses:
            entry = use.entry
            if use.writes:
                policy.wrote(entry, use.version + 1)
                if use.tile.rank != self.ooc.rank:
                    self._write_back(entry)
            policy.unpin(entry)
            use.entry = use.data = None
            if use.held is not None:
                use.held.readers -= 1
                self.ooc.exchange.maybe_free(use.held)
        policy.unplan(uses[0].number, {use.key for use in uses})
        self._prefetch()

    def _prefetch(self) -> None:
        """Start fetching the tiles of the next ready tasks of this GPU, where there is room that no
        earlier task needs (lock held)."""
        if self.admitting:
            return
        for _, _, task in heapq.nsmallest(PREFETCH_DEPTH, self.engine.scheduler.ready[self.device]):
            for use in task.sources:
                if use.source is None or use.key in self.policy.entries:
                    continue  # zeros and replacements are made when the task runs
                if self._entry_for(use, before=use.number) is None:
                    return

    # ---------------------------------------------------------------- write-backs
    def _write_back(self, entry) -> None:
        """Start copying dirty ``entry`` to the host: into its tile's host data, or, for a tile of
        another rank, into a new buffer then sent home (lock held)."""
        self.policy.write_back(entry)
        tile, data = entry.key, entry.data
        into = tile.data if tile.rank == self.ooc.rank else None
        self.ooc.exchange.mover.move(lambda: self.devices.start_to_host(data, into),
                                     lambda host: self._written(entry, host), (tile, None, self.device, 0))

    def _written(self, entry, host) -> None:
        """The copy thread: a write-back arrived."""
        with self.engine.lock:
            self.policy.written_back(entry)
            tile = entry.key
            if tile.rank != self.ooc.rank:
                home = Copy(tile, -1, 0)
                home.data = host
                self.ooc.exchange.send_home(home)
            waiters = self.write_back_waiters.pop(tile, [])
            self.wake.notify_all()
            self._prefetch()
        for callback in waiters:
            callback()

    def write_back_for(self, tile, done) -> None:
        """A write-back task (lock not held): ``done()`` once ``tile``'s newest version is home."""
        with self.engine.lock:
            entry = self.policy.entries.get(tile)
            if entry is not None and entry.dirty:
                if entry.state == RESIDENT:
                    self._write_back(entry)
                self.write_back_waiters.setdefault(tile, []).append(done)
                return
        done()  # home already: written back when evicted, or never written here

    def clear(self) -> None:
        for entry in self.policy.entries.values():
            entry.data = None
        self.policy.entries.clear()
