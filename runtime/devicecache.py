"""One GPU's bounded cache of tiles (out-of-core runs): the policy, a state machine without threads.

The cache holds at most ``capacity`` bytes of tile buffers. An :class:`Entry` is
one tile's buffer on the GPU, holding one version of it; it is *fetching* (its
memory taken, the copy under way), *resident*, or *writing back* (a dirty entry
being copied to the host). The mechanism (:mod:`.outofcore`) starts the copies and
reports their arrivals here; this module only decides.

Room for a new entry is made by dropping *clean* entries that no running task
pins, best victim first: entries no queued task will use (least recently used
first), then those whose next use in the task window is furthest (queued tasks
are numbered in submission order, :meth:`plan`). When the clean victims are not
enough, the best *dirty* ones are written back first and the caller waits
(:meth:`make_room` says so). A prefetch (``before`` a queued task's number) may
only take victims that no earlier-numbered task will use.
"""
from __future__ import annotations

FETCHING, RESIDENT, WRITING_BACK = "fetching", "resident", "writing back"


class Entry:
    """One tile's buffer on the GPU."""

    __slots__ = ("key", "nbytes", "version", "state", "dirty", "pins", "last_use", "data")

    def __init__(self, key, nbytes: int, version):
        self.key, self.nbytes, self.version = key, nbytes, version
        self.state = FETCHING
        self.dirty = False
        self.pins = 0  # running tasks using it
        self.last_use = 0
        self.data = None  # the device array, once resident (the mechanism's)

    def __repr__(self):
        return f"<Entry {self.key} v{self.version} {self.state}{' dirty' if self.dirty else ''} pins={self.pins}>"


class CacheFull(Exception):
    """A task needs more bytes at once than the cache holds."""


class CachePolicy:
    """The entries of one GPU's cache, what queued tasks will use, and the statistics."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.entries: dict = {}  # key -> Entry
        self.used = 0  # bytes of every entry, fetching ones too
        self.peak = 0
        self.clock = 0  # ticks of use, for least recently used
        self.uses: dict = {}  # key -> {task number: None} of the queued tasks that use it, oldest first
        self.fetches = self.fetched_bytes = 0
        self.write_backs = self.written_bytes = 0
        self.evictions = 0

    # ---------------------------------------------------------------- the window
    def plan(self, number: int, keys) -> None:
        """Queued task ``number`` (numbers grow in submission order) will use ``keys``."""
        for key in keys:
            self.uses.setdefault(key, {})[number] = None

    def unplan(self, number: int, keys) -> None:
        """Task ``number`` is done with ``keys``."""
        for key in keys:
            users = self.uses.get(key)
            if users is not None:
                users.pop(number, None)
                if not users:
                    del self.uses[key]

    def next_use(self, key) -> int | None:
        """The number of the earliest queued task that uses ``key``, or None."""
        users = self.uses.get(key)
        return next(iter(users)) if users else None

    # ---------------------------------------------------------------- entries
    def lookup(self, key, version):
        """The entry of ``key`` if it holds ``version`` (a hit), else None."""
        entry = self.entries.get(key)
        return entry if entry is not None and entry.version == version else None

    def make_room(self, nbytes: int, before: int | None = None) -> tuple[bool, list, list]:
        """Room for ``nbytes`` more: ``(enough, dropped, to_write_back)``.

        ``dropped`` are the clean entries evicted to make it (their buffers the
        caller lets go), and only when that makes enough; otherwise ``to_write_back``
        are dirty entries whose write-backs the caller starts, then waits for. With
        ``before``, only entries no task numbered below it uses are taken.
        Raises :class:`CacheFull` if ``nbytes`` exceeds the capacity.
        """
        if nbytes > self.capacity:
            raise CacheFull(nbytes)
        short = self.used + nbytes - self.capacity
        if short <= 0:
            return True, [], []
        candidates = sorted((e for e in self.entries.values() if self._may_take(e, before)), key=self._rank)
        clean = [e for e in candidates if not e.dirty]
        if sum(e.nbytes for e in clean) >= short:
            dropped = []
            for entry in clean:
                if short <= 0:
                    break
                self.drop(entry)
                self.evictions += 1
                dropped.append(entry)
                short -= entry.nbytes
            return True, dropped, []
        short -= sum(e.nbytes for e in clean)
        short -= sum(e.nbytes for e in self.entries.values() if e.state == WRITING_BACK and not e.pins)
        to_write_back = []
        for entry in (e for e in candidates if e.dirty):
            if short <= 0:
                break
            to_write_back.append(entry)
            short -= entry.nbytes
        return False, [], to_write_back

    def _may_take(self, entry: Entry, before: int | None) -> bool:
        if entry.state != RESIDENT or entry.pins:
            return False
        if before is None:
            return True
        next_use = self.next_use(entry.key)
        return next_use is None or next_use > before

    def _rank(self, entry: Entry) -> tuple:
        """Sort key of victims, best first: unused by the window (oldest use first), then the
        furthest next use."""
        next_use = self.next_use(entry.key)
        return (0, entry.last_use) if next_use is None else (1, -next_use)

    def add(self, key, nbytes: int, version, copied: bool = True) -> Entry:
        """A new entry, fetching (room was made for it): copied from the host, or zeroed."""
        entry = self.entries[key] = Entry(key, nbytes, version)
        self.used += nbytes
        self.peak = max(self.peak, self.used)
        self.fetches += copied
        self.fetched_bytes += nbytes * copied
        return entry

    def drop(self, entry: Entry) -> None:
        """``entry`` leaves the cache (a clean or superseded one)."""
        del self.entries[entry.key]
        self.used -= entry.nbytes

    def arrived(self, entry: Entry) -> None:
        entry.state = RESIDENT

    def pin(self, entry: Entry) -> None:
        entry.pins += 1
        self.clock += 1
        entry.last_use = self.clock

    def unpin(self, entry: Entry) -> None:
        entry.pins -= 1

    def wrote(self, entry: Entry, version) -> None:
        """A task wrote ``entry``: it now holds ``version``, not yet on the host."""
        entry.version = version
        entry.dirty = True

    def write_back(self, entry: Entry) -> None:
        """The copy of dirty ``entry`` to the host starts."""
        entry.state = WRITING_BACK
        self.write_backs += 1
        self.written_bytes += entry.nbytes

    def written_back(self, entry: Entry) -> None:
        entry.state = RESIDENT
        entry.dirty = False

    def statistics(self) -> dict:
        """Copies in (fetches), copies out (write-backs), evictions, and peak and bound of the bytes held."""
        return {"copies_in": self.fetches, "bytes_in": self.fetched_bytes, "copies_out": self.write_backs,
                "bytes_out": self.written_bytes, "evictions": self.evictions, "peak_cache_bytes": self.peak,
                "cache_bytes": self.capacity}
