"""Which rank of a job on this node ended first: said when ranks end without a word.

Once one rank dies (the out-of-memory killer's SIGKILL, ``kill -9``) the launcher ends
the others, and no rank can say which went first. The order their processes ended in
does: Linux's pidfd (``os.pidfd_open``) becomes readable when a process ends, even one
that is not our child. A thread opens one for each rank of this node as the rank
records its pid (``started.<rank>`` in the job's folder) and notes when each ended.
The thread may wake only after several ended (a loaded machine, within the launcher's few
milliseconds): epoll hands them over in the order they became readable, which still tells
the first, but not by how much. Where pidfds do not exist, or for ranks on other nodes,
nothing is known.
"""
from __future__ import annotations

import contextlib
import os
import selectors
import threading
import time
from pathlib import Path

POLL_SECONDS = 0.05  # how often new ranks' records are looked for


class RankWatch:
    """``with RankWatch(folder, is_ours):`` watches the ranks of the job in ``folder`` whose pids
    ``is_ours(pids)`` confirms are the job's processes on this node; :meth:`first_of` tells."""

    def __init__(self, folder: str, is_ours):
        self.folder, self.is_ours = folder, is_ours
        self.ended: dict[int, float] = {}  # rank -> when its end was seen (monotonic seconds)
        self._wakes: dict[int, int] = {}  # rank -> the count of the wake-up that saw it end
        self._order: list[int] = []  # ranks in the order they ended
        self._seen: set[int] = set()  # ranks whose record was read
        self._watched: set[int] = set()  # ranks whose process was watched from its start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="rank-watch", daemon=True)

    def __enter__(self) -> RankWatch:
        if hasattr(os, "pidfd_open"):
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(1.0)

    def first_of(self, ranks: list[int]) -> tuple[int, float | None] | None:
        """The rank of ``ranks`` that ended first and how many seconds before the next one (None
        where one wake-up saw both end), when every one of them was watched; else None. The order
        is the kernel's: the launcher ends the others once the first has closed its files, a step
        before its end is announced, so a machine too loaded to run that step can invert it."""
        if len(ranks) < 2 or not all(rank in self._watched and rank in self.ended for rank in ranks):
            return None
        first, second = [rank for rank in self._order if rank in ranks][:2]
        if self._wakes[first] == self._wakes[second]:
            return first, None
        return first, self.ended[second] - self.ended[first]

    def last_end(self, ranks: int) -> float | None:
        """When (monotonic seconds) the last of the job's ``ranks`` ranks ended, once every one of them
        was watched on this node and has ended; else None."""
        if not all(rank in self._watched and rank in self.ended for rank in range(ranks)):
            return None
        return max(self.ended[rank] for rank in range(ranks))

    def _watch(self) -> None:
        # epoll, not DefaultSelector's choice: its events come in the order they happened
        with selectors.EpollSelector() as selector:
            try:
                wake = 0
                while not self._stop.is_set():
                    self._add_new_ranks(selector)
                    wake += 1
                    for key, _ in selector.select(timeout=POLL_SECONDS):
                        self._order.append(key.data)
                        self._wakes[key.data], self.ended[key.data] = wake, time.monotonic()
                        selector.unregister(key.fileobj)
                        os.close(key.fileobj)
            finally:
                for key in list(selector.get_map().values()):
                    os.close(key.fileobj)

    def _add_new_ranks(self, selector) -> None:
        records = {}
        # not Path.glob: the job's folder removed while it lists it (a job stopped as it starts)
        # raised FileNotFoundError out of this thread, whose traceback the ending process cut short
        try:
            names = os.listdir(self.folder)
        except OSError:
            names = []
        for name in names:
            stem, _, rank = name.partition(".")
            if stem == "started" and rank.isdigit() and int(rank) not in self._seen:
                with contextlib.suppress(OSError, ValueError):
                    records[int(rank)] = int(Path(self.folder, name).read_text())
        if not records:
            return
        self._seen.update(records)
        ours = self.is_ours(list(records.values()))
        for rank, pid in records.items():
            if pid not in ours:  # on another node, or already gone
                continue
            try:
                selector.register(os.pidfd_open(pid), selectors.EVENT_READ, rank)
            except OSError:  # ended meanwhile: when is not known
                continue
            self._watched.add(rank)
