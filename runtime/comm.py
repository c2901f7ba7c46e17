"""One rank's MPI communication thread (DESIGN §4 item 6).

:class:`Communicator` posts non-blocking sends and receives of tile buffers from
any thread (MPI is initialised with ``MPI_THREAD_MULTIPLE``) and runs each
request's ``on_done`` callback on its own daemon thread, ``"mpi"``, once MPI
reports the request complete.

Why the thread polls instead of blocking in ``Waitsome``: MPICH's progress
engine (ch4, the ``mpich`` wheel) never blocks in the kernel; ``Wait``,
``Waitany`` and ``Waitsome`` spin, with a ``sched_yield`` every 1000 polls.
Measured with 2 ranks on 2 cores, a thread parked in ``Waitsome`` takes half of
its core and halves the matmul throughput of its rank's compute thread.
``MPIR_CVAR_ENABLE_HEAVY_YIELD`` does not help; ``MPIR_CVAR_CH4_PROGRESS_THROTTLE``
keeps the compute at full speed only by starving the waiter, which then notices
a message 1.6 ms late (median; 3.7 ms at p90) while the ranks compute. So the
thread tests its requests with ``Testsome`` (which releases the GIL) and sleeps
in between on a :class:`threading.Event`:

* with no request in flight it sleeps until ``send``/``receive``/``stop`` sets
  the event: a real kernel block, which costs the other threads nothing;
* right after any activity (a post or a completion) it polls back to back for
  ``spin`` seconds (50 µs), since messages come in bursts and a rendezvous
  handshake takes its next step within tens of µs;
* then it sleeps for as long as it has been quiet, between 50 µs and
  ``max_interval`` (1 ms). A wake-up and a poll cost 20-40 µs of CPU on the
  2-core VM, so pending receives cost 2-3.5% of a core, and a message that
  arrives while the ranks compute is noticed about 0.6 ms late (median).
  ``Testsome`` adds about 35 ns per request in flight to each poll.

Messages are matched by MPI on (source, tag) in a private duplicate of the
given communicator, so no other traffic can match them; the caller keeps tags
unique per tile and posts in the same order on both sides per (source, tag)
(MPI's non-overtaking rule then pairs them up).
"""
from __future__ import annotations

import pickle
import sys
import threading
import time
import traceback
from dataclasses import dataclass

import numpy as np

from . import polling, threadstart
from .world import abort_job, ranks_text

#: seconds a failed rank listens for the notices of ranks that failed before it, before it reports
FAILURE_WINDOW = 0.1
STOPPED_TAG = 1  # on the failures' communicator: a rank stopped for a signal (failures are tag 0)
STOP_POLL_SECONDS = 0.2  # how often the heartbeat thread looks for another rank's stop notice


def mpi_module():
    """mpi4py's MPI module, initialised with ``MPI_THREAD_MULTIPLE`` if this call initialises it."""
    import mpi4py
    if "mpi4py.MPI" not in sys.modules:
        mpi4py.rc.thread_level = "multiple"  # only read when mpi4py.MPI is first imported
    from mpi4py import MPI
    if not MPI.Is_initialized():  # mpi4py.rc.initialize was switched off by someone
        MPI.Init_thread(MPI.THREAD_MULTIPLE)
    return MPI


@dataclass
class CommStats:
    """Completed transfers of one rank (updated on the communication thread only)."""

    sends: int = 0
    receives: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    plans_sent: int = 0  # the small messages that say where a tile version comes from (not counted above)
    plans_received: int = 0


@dataclass
class _Pending:
    """What to do when a request completes: the buffer kept alive, and the callback."""

    kind: str  # "send", "receive", "plan-send" or "plan-receive"
    array: np.ndarray
    on_done: object
    peer: int = -1  # the rank sent to or received from


class Communicator:
    """One rank's MPI communication thread: non-blocking sends/receives, completions as callbacks.

    ``comm`` (default ``MPI.COMM_WORLD``) is duplicated, which is collective:
    every rank of it constructs its Communicator at the same point.
    ``on_error(exc)`` is called on the communication thread with each exception
    a callback (or MPI) raised there; the first one is kept in ``error``.
    ``spin`` and ``max_interval`` (seconds) tune the polling (module docstring).
    ``limit`` (seconds, None: none): how long a collective waits for a rank that shows no
    sign of life (no arrival, no heartbeat); ranks still at work keep beating.
    Callbacks may post sends and receives, but must not call :meth:`stop`.
    """

    def __init__(self, comm=None, on_error=None, spin: float = polling.SPIN,
                 max_interval: float = polling.MAX_INTERVAL, limit: float | None = None):
        MPI = mpi_module()
        provided = MPI.Query_thread()
        if provided < MPI.THREAD_MULTIPLE:
            raise RuntimeError(
                f"MPI was initialised with thread level {_level_name(MPI, provided)}; the "
                "communication thread needs MPI_THREAD_MULTIPLE: create the Communicator (or set "
                "mpi4py.rc.thread_level = 'multiple') before mpi4py.MPI is first imported")
        self._MPI = MPI
        self._comm = (MPI.COMM_WORLD if comm is None else comm).Dup()
        self._arrivals = self._comm.Dup()  # for the arrival announcements of collectives alone
        self._beats = self._comm.Dup()  # for the heartbeats alone
        self._plans = self._comm.Dup()  # for the plans of tree broadcasts alone (:mod:`.broadcast`)
        self._failures = self._comm.Dup()  # for the notices of failed ranks alone (:meth:`first_to_fail`)
        self._notice = np.zeros(1)  # the time this rank failed, which its failure notices carry
        self._stopped_notice = np.zeros(1)  # the signal this rank stopped for, which its stop notices carry
        self._notices: list = []  # those notices in flight
        #: ``on_stop_elsewhere(signum, rank)``, called once from the heartbeat thread when another ``rank`` says
        #: it stopped for a signal (a `kill` of one rank): this one stops as for that signal (None: it does not)
        self.on_stop_elsewhere = None
        self._stop_relayed = False
        self._stops_heard: set = set()  # the ranks whose stop notices were taken
        self._stop_lock = threading.Lock()  # one thread at a time probes and takes the stop notices
        self._first_to_fail: bool | None = None  # decided once: a rank reports its failure or stays quiet
        self._token = np.zeros(1, np.uint8)
        self._rounds = 0
        self.limit = limit
        self.rank = self._comm.Get_rank()
        self.size = self._comm.Get_size()
        self._heard = [time.monotonic()] * self.size  # when each rank last showed it is alive
        self.tasks_done = 0  # this rank's tasks completed so far, which its heartbeats carry
        self._done = [0] * self.size  # each rank's count, as its last heartbeat carried it
        self._progressed = list(self._heard)  # when each rank's count last grew
        self._listened = [self._heard[0]] * 2  # when the heartbeats were noted: the last two times
        self._beating: threading.Thread | None = None
        self._quiet = threading.Event()  # set: the heartbeat thread ends
        self.max_tag = self._comm.Get_attr(MPI.TAG_UB)
        self.on_error = on_error
        self.error: BaseException | None = None
        self.stats = CommStats()
        self.spin = spin
        self.max_interval = max_interval
        self._lock = threading.Lock()  # guards _posted and _stopping
        self._posted: list = []  # (request, _Pending) posted by any thread, not yet adopted
        self._stopping = False
        self._stopped = False
        self._wake = threading.Event()
        self._requests: list = []  # in flight; owned by the communication thread
        self._pending: list[_Pending] = []  # parallel to _requests
        self._statuses: list = []  # reused by Testsome
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- posting (any thread)
    def start(self) -> None:
        """Start the communication thread."""
        self._thread = threading.Thread(target=self._run, name="mpi", daemon=True)
        threadstart.start(self._thread)
        if self.limit is not None and self.size > 1:
            self._beating = threading.Thread(target=self._beat, name="mpi-heartbeat", daemon=True)
            threadstart.start(self._beating)

    def send(self, array: np.ndarray, dest: int, tag: int, on_done) -> None:
        """Post an Isend of ``array``'s bytes, in memory order; ``on_done()`` once it completed.

        ``array`` is kept referenced until then: the caller must not modify it before.
        """
        flat = self._flat(array, tag)
        self._post(lambda: self._comm.Isend([flat, self._MPI.DOUBLE], dest, tag),
                   _Pending("send", array, on_done, dest))

    def receive(self, array: np.ndarray, source: int, tag: int, on_done) -> None:
        """Post an Irecv into ``array``; ``on_done()`` once the message arrived.

        ``array`` is preallocated to the message's exact size (another size is
        reported as an error) and must not be touched until then.
        """
        if not array.flags.writeable:
            raise ValueError("receive buffer is read-only")
        flat = self._flat(array, tag)
        self._post(lambda: self._comm.Irecv([flat, self._MPI.DOUBLE], source, tag),
                   _Pending("receive", array, on_done))

    def send_plan(self, plan: np.ndarray, dest: int, tag: int) -> None:
        """Post an Isend of the small float64 array ``plan`` on the plans' own communicator
        (matched by (source, tag) there, apart from the tiles' messages)."""
        flat = self._flat(plan, tag)
        self._post(lambda: self._plans.Isend([flat, self._MPI.DOUBLE], dest, tag),
                   _Pending("plan-send", plan, _ignore))

    def receive_plan(self, plan: np.ndarray, source: int, tag: int, on_done) -> None:
        """Post an Irecv of a plan (see :meth:`send_plan`) into ``plan``; ``on_done()`` once here."""
        flat = self._flat(plan, tag)
        self._post(lambda: self._plans.Irecv([flat, self._MPI.DOUBLE], source, tag),
                   _Pending("plan-receive", plan, on_done))

    def _flat(self, array: np.ndarray, tag: int) -> np.ndarray:
        """The 1-D view of a contiguous float64 ``array`` (no copy); checks ``tag``."""
        if not 0 <= tag <= self.max_tag:
            raise ValueError(f"tag {tag} is outside 0..{self.max_tag} (MPI_TAG_UB)")
        if array.dtype != np.float64:
            raise TypeError(f"only float64 buffers are sent, not {array.dtype}")
        if not (array.flags.c_contiguous or array.flags.f_contiguous):
            raise ValueError("a buffer must be C- or Fortran-contiguous")
        return array.ravel(order="A")  # a view: "A" follows the array's own contiguous order

    def _post(self, isend_or_irecv, pending: _Pending) -> None:
        """Post the request (MPI_THREAD_MULTIPLE: from the caller's thread) and hand it over."""
        with self._lock:
            if self._stopping:
                raise RuntimeError("the communicator is stopped")
            self._posted.append((isend_or_irecv(), pending))
        self._wake.set()

    # ---------------------------------------------------------------- the thread
    def _run(self) -> None:
        """Adopt new requests, test them, run callbacks; sleep between polls (see module doc)."""
        last_activity = time.perf_counter()
        try:
            while not self._stopping:
                timeout = self._sleep_for(time.perf_counter() - last_activity)
                rung = self._wake.wait(timeout) if timeout != 0 else self._wake.is_set()
                active = rung and self._adopt()
                if self._requests and self._complete_some():
                    active = True
                if active:
                    last_activity = time.perf_counter()
        except Exception as exc:  # an MPI error: nothing more will complete here
            self._record(exc)
        else:
            self._drain()

    def _sleep_for(self, quiet: float) -> float | None:
        """How long to sleep before the next poll, after ``quiet`` seconds without activity."""
        if not self._requests:
            return None  # nothing can complete: wait for a post or stop()
        return polling.interval(quiet, self.spin, self.max_interval)

    def _adopt(self) -> bool:
        """Move requests posted by other threads into the active list; True if there were any."""
        self._wake.clear()  # before taking the list: a later post rings again
        with self._lock:
            posted, self._posted = self._posted, []
        for request, pending in posted:
            self._requests.append(request)
            self._pending.append(pending)
        return bool(posted)

    def _complete_some(self) -> bool:
        """Test the active requests once; run the callbacks of those done. True if any was."""
        done = self._MPI.Request.Testsome(self._requests, self._statuses)
        if not done:
            return False
        for index, status in zip(done, self._statuses):  # statuses follow ``done``'s order
            self._finish(self._pending[index], status)
        finished = set(done)
        self._requests = [r for i, r in enumerate(self._requests) if i not in finished]
        self._pending = [p for i, p in enumerate(self._pending) if i not in finished]
        return True

    def _finish(self, pending: _Pending, status) -> None:
        """Count a completed request and run its callback, recording what it raises."""
        stats = self.stats
        try:
            if pending.kind == "plan-send":
                stats.plans_sent += 1
            elif pending.kind == "send":
                stats.sends += 1
                stats.bytes_sent += pending.array.nbytes
            elif pending.kind == "plan-receive":
                stats.plans_received += 1
            else:
                received = status.Get_count(self._MPI.BYTE)
                stats.receives += 1
                stats.bytes_received += received
                if received != pending.array.nbytes:
                    raise ValueError(
                        f"received {received} bytes from rank {status.Get_source()} (tag "
                        f"{status.Get_tag()}) into a {pending.array.nbytes}-byte buffer")
            pending.on_done()
        except Exception as exc:
            self._record(exc)

    def _record(self, exc: BaseException) -> None:
        """Keep the first error and report it through ``on_error`` (or on stderr without one)."""
        if self.error is None:
            self.error = exc
        if self.on_error is None:
            traceback.print_exception(exc)
            return
        try:
            self.on_error(exc)
        except Exception:  # the hook failed too: say so rather than lose the thread
            traceback.print_exc()

    def _drain(self) -> None:
        """At stop: cancel the receives, wait for the sends (they complete once matched)."""
        self._adopt()
        for request, pending in zip(self._requests, self._pending):
            if pending.kind.endswith("receive"):
                request.Cancel()
        statuses = [self._MPI.Status() for _ in self._requests]
        self._MPI.Request.Waitall(self._requests, statuses)
        for pending, status in zip(self._pending, statuses):
            if not status.Is_cancelled():
                self._finish(pending, status)
        self._requests, self._pending = [], []

    # ---------------------------------------------------------------- ending
    def stop(self) -> None:
        """Stop the thread after draining what is in flight (see :meth:`_drain`); idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopping = self._stopped = True
        self._wake.set()
        self._quiet.set()
        if self._beating is not None:
            self._beating.join()
        if self._thread is not None:
            self._thread.join()
        else:
            self._drain()

    def first_to_fail(self, window: float = FAILURE_WINDOW) -> bool:
        """Whether this rank, which just failed, is the one to report the job's failure: the first
        rank to fail, by the failure notices the ranks exchange (the time of the failure; the lower
        rank on a tie), as far as they arrive within ``window`` seconds. Ranks often fail together
        (a bad sub-range met by every rank's loop nest), and one error a job is what the user
        reads; the reporter's abort ends the others. Decided once: asked again, the same answer."""
        if self._first_to_fail is None:
            self._first_to_fail = self._decide_first(window)
        return self._first_to_fail

    def _decide_first(self, window: float) -> bool:
        failed = self._notice[0] = time.time()  # the wall clock: ranks on other nodes compare it too
        # eager sends: they complete without their receives (the job ends soon)
        self._notices = [self._failures.Isend([self._notice, self._MPI.DOUBLE], rank, 0)
                         for rank in range(self.size) if rank != self.rank]
        deadline = time.monotonic() + window
        while time.monotonic() < deadline:  # a notice may still be on its way: ranks fail together
            if any((when, rank) < (failed, self.rank) for rank, when in self._failure_notices()):
                return False
            time.sleep(0.005)
        return True

    def _failure_notices(self) -> list:
        """(rank, time of its failure) of the notices that arrived since the last call."""
        status, when, found = self._MPI.Status(), np.empty(1), []
        while self._failures.Iprobe(self._MPI.ANY_SOURCE, 0, status):
            self._failures.Recv([when, self._MPI.DOUBLE], status.Get_source(), 0)
            found.append((status.Get_source(), float(when[0])))
        return found

    def wait_for_stopped_ranks(self, window: float, signum: int) -> None:
        """This rank stopped for signal ``signum``, as every rank of its node may have: tell the others,
        and wait up to ``window`` seconds for each of them to say so too, so that a rank still waiting for
        a kernel (``engine.STOP_SECONDS``) names it before this rank's abort ends it. A rank the signal did
        not reach (another node's, or the signal sent to this rank alone) stops as for it on hearing this
        (:attr:`on_stop_elsewhere`, within a heartbeat); one without heartbeats is waited for the whole
        window."""
        with self._stop_lock:
            self._stop_relayed = True  # stopped already: another rank's notice changes nothing here
        self._stopped_notice[0] = signum
        self._notices += [self._failures.Isend([self._stopped_notice, self._MPI.DOUBLE], rank, STOPPED_TAG)
                          for rank in range(self.size) if rank != self.rank]
        status = self._MPI.Status()
        deadline = time.monotonic() + window
        while len(self._stops_heard) < self.size - 1 and time.monotonic() < deadline:
            with self._stop_lock:
                while self._take_stop_notice(status) is not None:
                    pass
            time.sleep(0.005)

    def abort(self, code: int = 1) -> None:
        """Abort the whole MPI job with exit status ``code``, after what was printed is out."""
        abort_job(self._MPI, code)

    # ---------------------------------------------------------------- collectives (main thread)
    # Each collective is non-blocking and polled, so that a rank stopped or lost never leaves
    # the others waiting for ever: a rank that gave no sign of life for ``limit`` seconds (None:
    # no limit) ends the wait. Every rank tells rank 0 that it arrived, so that rank 0 can name
    # those that did not, and a heartbeat thread tells every rank that it is still alive.
    def allreduce_sum(self, array: np.ndarray) -> np.ndarray:
        """Element-wise sum of ``array`` over all ranks (a new array)."""
        source = np.ascontiguousarray(array)
        result = np.empty_like(source)
        self._collective(lambda: self._comm.Iallreduce(source, result, op=self._MPI.SUM))
        return result

    def allreduce_max(self, value: float) -> float:
        """The largest ``value`` over all ranks."""
        result = np.empty(1)
        self._collective(lambda: self._comm.Iallreduce(np.array([value], dtype=np.float64), result,
                                                       op=self._MPI.MAX))
        return float(result[0])

    def gather(self, value, root: int = 0) -> list | None:
        """Every rank's picklable ``value`` in rank order on ``root``; None on the other ranks."""
        data = np.frombuffer(pickle.dumps(value), dtype=np.uint8)
        sizes = np.zeros(self.size, dtype=np.int64)
        self._collective(lambda: self._comm.Igather(np.array([data.size], dtype=np.int64), sizes, root=root))
        if self.rank != root:
            self._collective(lambda: self._comm.Igatherv(data, None, root=root))
            return None
        gathered = np.empty(int(sizes.sum()), dtype=np.uint8)
        self._collective(lambda: self._comm.Igatherv(data, [gathered, sizes, self._MPI.BYTE], root=root))
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        return [pickle.loads(gathered[a:b].tobytes()) for a, b in zip(bounds[:-1], bounds[1:])]

    def broadcast(self, value, root: int = 0):
        """``root``'s picklable ``value``, on every rank."""
        data = np.frombuffer(pickle.dumps(value), dtype=np.uint8) if self.rank == root else None
        size = np.array([data.size if data is not None else 0], dtype=np.int64)
        self._collective(lambda: self._comm.Ibcast(size, root=root))
        if data is None:
            data = np.empty(int(size[0]), dtype=np.uint8)
        self._collective(lambda: self._comm.Ibcast(data, root=root))
        return value if self.rank == root else pickle.loads(data.tobytes())

    def barrier(self) -> None:
        """Wait until every rank reached this call."""
        self._collective(self._comm.Ibarrier)

    def _collective(self, post) -> None:
        """Post a non-blocking collective and poll it to completion, or raise :class:`Unanswered`."""
        self._rounds += 1
        arrivals = self._announce_arrival(self._rounds % (self.max_tag + 1))
        request = post()
        began = time.monotonic()
        while not request.Test():
            if self.limit is not None:
                self._check_alive(arrivals)
            time.sleep(polling.interval(time.monotonic() - began, self.spin, self.max_interval))
        self._MPI.Request.Waitall([r for _, r in arrivals])

    def _check_alive(self, arrivals: list) -> None:
        """Raise :class:`Unanswered` when a rank this collective waits for has given no sign of
        life (an arrival, a heartbeat) for ``limit`` seconds. A rank still busy with its share
        beats, so an uneven end of the run is waited for; a stopped or lost one does not."""
        # silence counts up to the next-to-last time this rank listened: a rank resumed after
        # being stopped itself has not heard the others yet (MPI may hand over what they sent
        # meanwhile only on a later probe), and must not take them for lost
        silent = [r for r in self._missing(arrivals) if self._listened[0] - self._heard[r] > self.limit]
        if silent:
            raise Unanswered(self.rank, silent, self.limit)

    def _beat(self) -> None:
        """The heartbeat thread: every ``limit / 6`` seconds (0.5 s at least) a message to every
        other rank carrying this rank's count of completed tasks, and the note of every heartbeat
        received since the last time (and of the ranks whose count grew); every
        :data:`STOP_POLL_SECONDS`, a look for another rank's stop notice (:meth:`_relay_stop`)."""
        interval = max(0.5, self.limit / 6)
        sends: list = []  # (request, its buffer, kept until the send ends)
        status = self._MPI.Status()
        next_beat = time.monotonic()
        try:
            while True:
                if time.monotonic() >= next_beat:
                    sends = self._exchange_beats(sends, status)
                    next_beat = time.monotonic() + interval
                self._relay_stop(status)
                if self._quiet.wait(min(STOP_POLL_SECONDS, max(0.0, next_beat - time.monotonic()))):
                    break
            self._MPI.Request.Waitall([r for r, _ in sends])
        except Exception as exc:  # an MPI error: the collectives then judge by arrivals alone
            self._record(exc)

    def _exchange_beats(self, sends: list, status) -> list:
        """One heartbeat to every other rank, and the note of those received; the sends still in flight."""
        sends = [(r, count) for r, count in sends if not r.Test()]  # 8 bytes go eagerly: at once
        count = np.array([self.tasks_done], np.int64)
        sends += [(self._beats.Isend([count, self._MPI.INT64_T], r, 0), count)
                  for r in range(self.size) if r != self.rank]
        incoming = np.empty(1, np.int64)
        while self._beats.Iprobe(self._MPI.ANY_SOURCE, 0, status):
            source = status.Get_source()
            self._beats.Recv([incoming, self._MPI.INT64_T], source, 0)
            self._heard[source] = time.monotonic()
            if incoming[0] != self._done[source]:
                self._done[source], self._progressed[source] = int(incoming[0]), self._heard[source]
        self._listened = [self._listened[1], time.monotonic()]
        return sends

    def _relay_stop(self, status) -> None:
        """Where another rank said it stopped for a signal and this one has not, :attr:`on_stop_elsewhere`
        with that signal, once."""
        with self._stop_lock:
            if self._stop_relayed or self.on_stop_elsewhere is None:
                return
            signum = self._take_stop_notice(status)
            if signum is None:
                return
            self._stop_relayed = True
        self.on_stop_elsewhere(signum, status.Get_source())

    def _take_stop_notice(self, status) -> int | None:
        """The signal of a stop notice that has come (its sender counted as stopped), or None."""
        if not self._failures.Iprobe(self._MPI.ANY_SOURCE, STOPPED_TAG, status):
            return None
        signum = np.empty(1)
        self._failures.Recv([signum, self._MPI.DOUBLE], status.Get_source(), STOPPED_TAG)
        self._stops_heard.add(status.Get_source())
        return int(signum[0])

    def unfinished_sends(self) -> dict:
        """The tile messages posted and not yet completed (their receiver has not taken them), by
        destination rank: rank -> count. For stall reports, from another thread than the communication
        thread's (copies of its lists: a count of a moment)."""
        with self._lock:
            posted = [pending for _, pending in self._posted]
        counts: dict = {}
        for pending in [*list(self._pending), *posted]:
            if pending.kind == "send":
                counts[pending.peer] = counts.get(pending.peer, 0) + 1
        return dict(sorted(counts.items()))

    def silences(self, ranks) -> dict:
        """Of ``ranks``, those whose heartbeats stopped (none for three of their intervals, counted to
        the last time this rank listened): rank -> seconds since the last one."""
        if self._beating is None:  # no heartbeats (no limit): nothing to tell
            return {}
        interval = max(0.5, self.limit / 6)  # as :meth:`_beat` sends them
        listened = self._listened[1]
        return {rank: listened - self._heard[rank] for rank in ranks if listened - self._heard[rank] > 3 * interval}

    def others_progressed(self) -> float:
        """When another rank was last seen completing a task (``time.monotonic()``; its heartbeats
        tell, so this is as late as they are: ``limit / 6``), the start of the job if none was."""
        return max(when for rank, when in enumerate(self._progressed) if rank != self.rank)

    def _announce_arrival(self, tag: int) -> list:
        """Rank 0 listens for every other rank's arrival at this collective; the others announce it.
        ``(rank, request)`` pairs: on rank 0 one per other rank, elsewhere the announcement."""
        if self.rank != 0:
            return [(0, self._arrivals.Isend([self._token, self._MPI.BYTE], 0, tag))]
        return [(r, self._arrivals.Irecv([np.empty(1, np.uint8), self._MPI.BYTE], r, tag))
                for r in range(1, self.size)]

    def _missing(self, arrivals: list) -> list:
        """The ranks that did not reach the collective, as far as this rank can tell: on rank 0
        those whose arrival never came, elsewhere every other rank."""
        if self.rank != 0:
            return [r for r in range(self.size) if r != self.rank]
        return [rank for rank, request in arrivals if not request.Test()]


def _ignore() -> None:
    """The completion of a send that needs no action."""


class Unanswered(Exception):
    """Some rank did not reach a collective within the time limit (stopped, lost or stuck)."""

    def __init__(self, rank: int, missing: list, limit: float):
        super().__init__(f"rank {rank}: {ranks_text(missing)} did not answer within {limit:g} s (stopped or lost?)")
        self.rank, self.missing = rank, missing


def _level_name(MPI, level: int) -> str:
    """``MPI_THREAD_SERIALIZED`` for MPI.THREAD_SERIALIZED, and so on."""
    for name in ("SINGLE", "FUNNELED", "SERIALIZED", "MULTIPLE"):
        if getattr(MPI, f"THREAD_{name}") == level:
            return f"MPI_THREAD_{name}"
    return str(level)
