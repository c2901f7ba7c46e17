"""Several compute streams on one GPU: the stream each kernel goes on, and what it waits for.

A GPU task completes when its kernel is launched (DESIGN §4 item 5): the engine
hands the GPU's management thread the next ready task at once, and the order of
the kernels on the device is kept by CUDA streams and events, never by the host.
With one compute stream that order is the launch order. With several, two
kernels on different streams may run at the same time, which small tiles need
to fill a GPU, so each kernel must wait (``wait_event``) for the kernels on the
other streams that touch its tiles first:

* a tile it reads, for the last kernel that wrote it (read after write);
* a tile it writes, for that kernel and for every kernel that read it since
  (write after write, write after read).

:class:`StreamOrder` keeps, for one GPU, each tile's last writer and, per
stream, its latest reader since, as (stream, launch number, event), and gives
each launch its stream and the events to wait for: at most one per other
stream, the latest one needed, since a stream runs its kernels in order. A
kernel goes on the stream of the last writer of the first tile it writes, so
that the chain of updates of one tile stays on one stream and waits for
nothing; a tile never written on this GPU before goes on the next stream in
turn. Tiles are keys chosen by the backend (the start of the tile's memory);
a key whose memory is freed and used again keeps its old records, which only
orders a kernel after more than it needs.

The events are the backend's (CUDA events for :mod:`.cupy_backend`, vector
clocks for the emulated backend, which checks with them that no kernel could
run before what it waits for: :class:`VectorClocks`). Copies are ordered by
the backend: a copy from the device waits for the tile's last writer
(:meth:`StreamOrder.writer`), anything that allocates device memory for the
latest kernel of every stream (:meth:`StreamOrder.latest`), since freed memory
may still be read by a launched kernel.
"""
from __future__ import annotations

from itertools import count


class StreamOrder:
    """The kernels launched on one GPU's ``streams`` compute streams, as the order the next must keep."""

    def __init__(self, streams: int):
        if streams < 1:
            raise ValueError(f"a GPU needs at least one compute stream, got {streams}")
        self.streams = streams
        self._writer: dict = {}  # tile key -> (stream, number, event) of its last writer
        self._readers: dict = {}  # tile key -> {stream: (number, event)}: its readers since that write
        self._latest: dict = {}  # stream -> event after its latest kernel
        self._numbers = count(1)
        self._turn = 0

    def plan(self, reads, writes) -> tuple[int, list]:
        """(stream, events to wait for) of a kernel reading tiles ``reads`` and writing ``writes`` (keys)."""
        stream = self._stream_for(writes)
        needed: dict = {}  # other stream -> (number, event): the latest of its kernels this one waits for
        for key in reads:
            _need(needed, stream, self._writer.get(key))
        for key in writes:
            _need(needed, stream, self._writer.get(key))
            for other, (number, event) in self._readers.get(key, {}).items():
                _need(needed, stream, (other, number, event))
        return stream, [event for _, event in needed.values()]

    def launched(self, stream: int, event, reads, writes) -> None:
        """A kernel was launched on ``stream`` as planned; ``event`` was recorded after it there."""
        number = next(self._numbers)
        for key in writes:
            self._writer[key] = (stream, number, event)
            self._readers.pop(key, None)
        for key in reads:
            if key not in writes:
                self._readers.setdefault(key, {})[stream] = (number, event)
        self._latest[stream] = event

    def writer(self, key):
        """(stream, event) of the last kernel that wrote tile ``key`` here, or None."""
        last = self._writer.get(key)
        return None if last is None else (last[0], last[2])

    def latest(self) -> list:
        """The event after the latest kernel of each stream that has run one."""
        return list(self._latest.values())

    def _stream_for(self, writes) -> int:
        if self.streams == 1:
            return 0
        for key in writes:
            last = self._writer.get(key)
            if last is not None:
                return last[0]
            break
        self._turn = (self._turn + 1) % self.streams
        return self._turn


def _need(needed: dict, stream: int, launch) -> None:
    """Add ``launch`` (stream, number, event) to what a kernel on ``stream`` waits for, unless its own
    stream orders it already or a later kernel of that stream is waited for."""
    if launch is None or launch[0] == stream:
        return
    other, number, event = launch
    if other not in needed or needed[other][0] < number:
        needed[other] = (number, event)


class VectorClocks:
    """The emulated backend's streams as vector clocks, to prove the order a real GPU would keep.

    Each stream (any hashable name: compute streams and copy streams alike) counts
    its kernels; an event is a copy of its stream's clock when recorded, and waiting
    for one takes the larger of each count. A kernel on stream s happens after
    launch k of stream t exactly when s's clock holds at least k for t. :meth:`access`
    records what a kernel touches and raises :class:`StreamRace` when it could run
    before, or beside, a kernel of another stream it conflicts with.
    """

    def __init__(self):
        self._clocks: dict = {}  # stream -> {stream: launches}
        self._host: dict = {}  # what the host has seen finish: anything launched later runs after it
        self._writer: dict = {}  # memory key -> (stream, launch) of the last write
        self._readers: dict = {}  # memory key -> {stream: launch} since that write

    def record(self, stream) -> dict:
        """An event recorded on ``stream`` now."""
        return dict(self._clocks.get(stream, {}))

    def wait(self, stream, event: dict) -> None:
        """``stream`` waits for ``event``."""
        _merge(self._clocks.setdefault(stream, {}), event)

    def host_saw(self, event: dict) -> None:
        """The host saw ``event`` complete (a copy it waited for or found arrived)."""
        _merge(self._host, event)

    def access(self, stream, reads, writes, what: str) -> None:
        """A kernel (or copy) ``what`` on ``stream`` reads memory ``reads`` and writes ``writes`` (keys)."""
        clock = self._clocks.setdefault(stream, {})
        _merge(clock, self._host)  # launched now: after all the host has seen finish
        clock[stream] = launch = clock.get(stream, 0) + 1
        for key in reads:
            self._ordered(clock, stream, self._writer.get(key), what, "written by")
        for key in writes:
            self._ordered(clock, stream, self._writer.get(key), what, "written by")
            for other, number in self._readers.get(key, {}).items():
                self._ordered(clock, stream, (other, number), what, "read by")
        for key in writes:
            self._writer[key] = (stream, launch)
            self._readers.pop(key, None)
        for key in reads:
            if key not in writes:
                self._readers.setdefault(key, {})[stream] = launch

    @staticmethod
    def _ordered(clock: dict, stream, earlier, what: str, how: str) -> None:
        if earlier is None or earlier[0] == stream:
            return
        other, number = earlier
        if clock.get(other, 0) < number:
            raise StreamRace(f"{what} on stream {stream} could run before or beside launch {number} of stream "
                             f"{other}, which touched the same tile ({how} it): a missing wait_event")


def _merge(clock: dict, event: dict) -> None:
    for stream, launches in event.items():
        if clock.get(stream, 0) < launches:
            clock[stream] = launches


class StreamRace(RuntimeError):
    """A kernel that a real GPU could run out of order (the emulated backend's check)."""
