"""The threaded engine of one rank: task generation, CPU workers, the window, failures.

Threads only run kernels and move data; every scheduling decision is the
:class:`~tiledsl.runtime.scheduler.Scheduler`'s, taken under one lock. The
calling thread is the task-generation thread: it runs the driver's loop nest and
blocks while the window is full (back-pressure, released at three quarters).
A kernel exception stops every thread promptly and is re-raised as a
:class:`TaskFailure` naming the kernel, its tiles and the ``.tile`` line. The
watchdog (:mod:`.watchdog`, on by default) runs on a monitor thread of its own:
it reports a window where no task completed for its limit, and a loop nest that
ran that long without submitting a task.
"""
from __future__ import annotations

import contextlib
import inspect
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from ..language import WRITE_MODES
from . import debugging, heteroprio, threadstart
from .crash import KernelExit, fatal_signals_traced, guard_exit, in_kernel
from .dataflow import Tracker
from .devices import first_nonfinite, read_only
from .errors import (InternalFailure, KernelFailure, KernelFault, TaskFailure, loop_nest_failure,
                     message_of, shortage, user_code_line)
from .matrix import call_views, part_of, sends_nothing
from .notes import KernelNotes, arguments_text, values_text, where_ran
from .options import COMMAND_LINE, Spelling
from .flops import PRELUDE_FLOPS, task_flops
from .panels import Panel
from .program import check_values, flatten, tiles_text
from .resources import address_space_note
from .scheduler import Scheduler, Task
from .share import among, every_value
from .trace import copy_args
from .watchdog import Limit, LoopNestWatch, Monitor, Stalled, lane_text, outlasting, running_line, running_lines
from .world import HeldInterrupts, act_on, environment_switch, ranks_text


#: A rank running nothing, only waiting for other ranks, reports a stall after this many times the
#: watchdog's limit (at least :func:`.watchdog.outlasting` it): the rank running the kernel that holds
#: everything up names it first.
WAITING_FACTOR = 3
#: seconds the GPUs' management threads have to ready their devices before a run gives up
PREPARE_SECONDS = 120.0
#: seconds a failed or interrupted run waits for the kernels its workers are running to return
STOP_SECONDS = 2.0


class _Abort(Exception):
    """Raised inside the generation thread to unwind the loop nest after a failure."""


@dataclass
class Stats:
    """What one rank did: program tasks per worker, their busy seconds and the seconds of the
    runtime's own tasks (sends, copies, check tasks), the window's high-water mark."""

    tasks: int = 0
    flops: float | None = 0.0  # of the tasks this rank owns, by their kernels' counts; None: a kernel has none
    uncounted: str | None = None  # the first kernel run without a flop count
    per_worker: list = field(default_factory=list)
    busy: list = field(default_factory=list)
    other: list = field(default_factory=list)  # per worker: seconds on tasks not of the program
    peak_window: int = 0
    host_took: int = 0  # GPU tasks a CPU worker took (--host-takes)
    taken_copies: list = field(default_factory=list)  # per worker: host/GPU copies of the tasks it took


class _SwitchInterval:
    """The interpreter's switch interval, short while any run of this process runs: a worker back
    from BLAS must not wait 5 ms for the GIL. Runs may overlap (the Python API, from two threads):
    the first to start saves the interval, the last to end puts it back."""

    SHORT = 1e-4

    def __init__(self):
        self.lock = threading.Lock()
        self.runs = 0
        self.saved = None

    def shorten(self) -> None:
        with self.lock:
            if self.runs == 0:
                self.saved = sys.getswitchinterval()
                sys.setswitchinterval(self.SHORT)
            self.runs += 1

    def restore(self) -> None:
        with self.lock:
            self.runs -= 1
            if self.runs == 0:
                sys.setswitchinterval(self.saved)


_SWITCH = _SwitchInterval()

#: the worker threads runs left running a kernel (a stall's, one past STOP_SECONDS): still in the process
_LEFT_RUNNING: list = []


def kernels_left_running() -> bool:
    """Whether a kernel a run left running (:meth:`Engine._stop`) is still running in this process."""
    _LEFT_RUNNING[:] = [thread for thread in _LEFT_RUNNING if thread.is_alive()]
    return bool(_LEFT_RUNNING)


class Engine:
    """Runs a driver's ``generate`` on this rank with ``workers`` CPU threads."""

    def __init__(self, program, kernels: dict, workers: int, window: int = 4096,
                 watchdog: float | None = None, comm=None, devices=None, check_finite: bool = False,
                 count_flops: bool = True, broadcast: str = "direct", spelling: Spelling = COMMAND_LINE):
        self.program = program
        self.kernels = {id(call): kernels[call.kernel] for call in program.calls}
        # workspace tiles read before any task wrote them are noted (KernelNotes.add_read_of_zeros); on one
        # rank without GPUs no version is counted, so the tiles written so far are kept here
        self.workspaces = frozenset(decl.name for decl in program.workspaces)
        self.workspace_written: set = set()
        self.submitted = 0  # this rank's tasks so far: the order of the notes made as they come
        # a task's flops cost the generation thread ~2 µs: counted only where no standard count serves
        self.flop_counts = ({id(call): call.flops or PRELUDE_FLOPS.get(call.kernel) for call in program.calls}
                            if count_flops else None)
        self.workers = workers
        self.comm = comm
        self.rank = comm.rank if comm is not None else 0
        self.limit = Limit(watchdog)  # None: automatic, 0: off, > 0: seconds (see .watchdog)
        self.spelling = spelling  # how the interface that started the run names its settings (a stall's advice)
        self.loop_nest: LoopNestWatch | None = None
        self.check_finite = check_finite
        self.tracer = None  # a trace.Tracer while a traced run is on
        self.wall_span = (0.0, 0.0)  # the last run's start and end on the wall clock (time.time())
        self.kernel_clock = None  # a rates.KernelClock while kernels are timed in the run (tune)
        self.priority_of = None  # (call, tiles, given) -> priority, to replace the program's own
        self.host_costs = None  # --host-takes: heteroprio.Costs, for idle CPU workers to take GPU tasks
        self.devices = devices
        self.gpus = devices.gpus if devices is not None else 0
        self.gpu_busy_until = [0.0] * (1 + self.gpus)  # --host-takes: when each GPU's started tasks end
        self.scheduler = Scheduler(window, 1 + self.gpus)
        self.low_water = window * 3 // 4  # below the window: a window of 1 drains to 0 before the next task
        self.lock = threading.Lock()
        self.work = [threading.Condition(self.lock) for _ in range(1 + self.gpus)]  # one per ready queue
        self.space = threading.Condition(self.lock)
        self.failure: TaskFailure | None = None
        self.stopping = False
        self.stalled = False  # the watchdog found the running kernels stuck: the run does not wait for them
        self.memory_remedies: str | None = None  # what helps this run where memory runs out (errors.shortage)
        self.threads: list = []  # the run's workers (and GPUs' threads), and its watchdog's monitor
        self.monitor: Monitor | None = None
        self.last_progress = time.monotonic()
        self.running: dict = {}  # task -> (lane, monotonic start), under the lock: what a stall report names
        threads = workers + self.gpus
        self.stats = Stats(per_worker=[0] * threads, busy=[0.0] * threads, other=[0.0] * threads,
                           taken_copies=[0] * threads)
        self.kernel_notes = KernelNotes()  # what kernels said without failing (.notes)
        self.matrices: dict = {}
        self.exchange = None
        self.among = every_value  # the loop values to walk: all, unless guided
        self.tracker = None  # versions of tiles owned elsewhere, when guided
        if (comm is not None and comm.size > 1) or devices is not None:
            from .exchange import Exchange

            self.exchange = Exchange(self, comm, devices, broadcast)

    def attach(self, matrices: dict) -> None:
        """Use ``matrices``; on several ranks, count skipped tasks' versions under the lock."""
        self.matrices = dict(matrices)
        if self.exchange is not None:
            for matrix in matrices.values():
                matrix.advance = self._advance

    def _advance(self, tile) -> None:
        with self.lock:
            self.exchange.advance(tile)

    # ---------------------------------------------------------------- driver surface
    def matrix(self, name: str):
        return self.matrices[name]

    def guide(self, events: dict) -> None:
        """Walk only this rank's share of the loop nest (:mod:`.share`): tiles owned elsewhere
        change version when :mod:`.dataflow` says, not as the walk passes tasks of other ranks."""
        self.among = among
        self.tracker = Tracker(events, self.rank, self.exchange.advance, self.exchange.release, self.exchange.holds)
        for matrix in self.matrices.values():
            matrix.counts_foreign_writes = False

    def submit(self, call, tiles, regions, priority, values=(), kernel=None, at=None) -> None:
        """APPEND one task (the generated driver's call: a panel argument is a tuple of tiles;
        ``values`` are the value arguments; checks pass their own ``kernel``; ``at`` is the
        task's schedule key, for a rank that walks only its share)."""
        if self.failure is not None:
            raise _Abort()
        if self.loop_nest is not None:
            self.loop_nest.submitted()
        site = id(call)
        if values:
            check_values(call, values)
        call, tiles, regions = flatten(call, tiles, regions)
        views, kernel = call_views(call, tiles, regions), kernel or self.kernels[site]
        if self.tracker is not None and sends_nothing(call, tiles, views, self.rank):
            # a reader that :func:`.share.among` could not pass over; its writes are of another
            # rank's tiles: the tracker sees to those this rank holds
            return
        if self.priority_of is not None:
            priority = self.priority_of(call, tiles, priority)
        if self.flop_counts is not None and tiles[call.main].rank == self.rank and call.line > 0:
            self._count_flops(site, call, tiles, views, values)
        tracker = self.tracker if at is not None else None
        with self.lock:
            self._wait_for_window()
            if tracker is not None:
                tracker.reach(at)
            if self.workspaces and call.line > 0:
                self._note_reads_of_zeros(call, tiles, views)
            if self.exchange is None:
                self.enqueue(Task(call, tiles, views, priority, 0, kernel, values), 0)
            else:
                self.exchange.submit(call, tiles, views, priority, kernel, values)
        if tracker is not None:
            tracker.touched(at, tiles)

    def _note_reads_of_zeros(self, call, tiles, views) -> None:
        """Note a task that reads a workspace tile (mode ``in``) no task wrote before it (lock held;
        before the task's own writes are counted). On several ranks or with GPUs, where versions are
        counted, the tile's owner says it, whichever rank runs the task: the owner takes part in every
        task on its tiles, so its count is every write's (another rank's walk of its share knows a
        foreign tile's version only once it touches it). Else :attr:`workspace_written` does."""
        counted = self.exchange is not None
        self.submitted += 1
        runner = tiles[call.main].rank
        for tile, mode in zip(tiles, call.modes):
            if tile.matrix.name not in self.workspaces or counted and tile.rank != self.rank:
                continue
            if mode == "in" and not (tile.version if counted else tile in self.workspace_written):
                self.kernel_notes.add_read_of_zeros(call, tiles, views, tile, self.submitted,
                                                    None if runner == self.rank else runner)
            elif mode != "in" and not counted:
                self.workspace_written.add(tile)

    def _count_flops(self, site: int, call, tiles, views, values) -> None:
        """Add an owned task's flops (its kernel's count, from its arguments' shapes and values)."""
        count = self.flop_counts[site]
        if count is None or self.stats.flops is None:
            self.stats.flops = None
            self.stats.uncounted = self.stats.uncounted or call.kernel
            return
        self.stats.flops += task_flops(call, count, call.shapes(tiles, views), values)

    def _wait_for_window(self) -> None:
        """Back-pressure: a full window blocks generation until it drains to low water."""
        scheduler = self.scheduler
        if scheduler.window_full():
            with self.loop_nest.waiting() if self.loop_nest is not None else contextlib.nullcontext():
                while scheduler.in_flight > self.low_water and self.failure is None:
                    self.space.wait(timeout=1.0)
                    self._find_lost_threads()
        if self.failure is not None:
            raise _Abort()

    def enqueue(self, task: Task, waits: int) -> None:
        """APPEND ``task`` (lock held), waiting also for ``waits`` outside events."""
        if self.scheduler.submit(task, waits):
            self._wake_for(task)
        if self.scheduler.in_flight > self.stats.peak_window:
            self.stats.peak_window = self.scheduler.in_flight

    def satisfy(self, task: Task) -> None:
        """An outside event ``task`` waited for happened (any thread)."""
        with self.lock:
            self.satisfy_locked(task)

    def satisfy_locked(self, task: Task) -> None:
        if self.scheduler.satisfy(task):
            self._wake_for(task)

    def _wake_for(self, task: Task) -> None:
        """A worker of the queue ``task`` is ready in; and a CPU worker, which may take a GPU task."""
        self.work[task.device].notify()
        if task.device and self.host_costs is not None:
            self.work[0].notify()

    def complete(self, task: Task) -> None:
        """An asynchronous task (a send) is finished (any thread)."""
        with self.lock:
            self._finished(task)

    def release(self, tile, at=None) -> None:
        """Release_Tile: copies of ``tile`` held here are freed once their readers are done (none is
        left open, so a rank walking its share asks for the tile's next event only at its next touch)."""
        if self.exchange is not None:
            with self.lock:
                if self.tracker is not None and at is not None:
                    self.tracker.reach(at)
                self.exchange.release(tile)


    # ---------------------------------------------------------------- running
    def run(self, generate, params, begin=None) -> float:
        """Run the loop nest to completion; returns the seconds it took: from the moment the run's
        threads are ready (its GPUs prepared, its workers and watchdog started, and ``begin`` returned:
        the ranks' barrier) to its last task's end, its GPUs' kernels included. Starting and ending the
        threads is set-up, as a runtime's start is in PaRSEC's and StarPU's testers, and as the GPUs'
        preparation always was here; :attr:`wall_span` holds the same interval on the wall clock. After
        a failure or an interrupt it returns (raises) once no worker runs a kernel (see :meth:`_stop`)."""
        self.stopping = self.stalled = False
        prepared = threading.Barrier(self.gpus + 1)
        threads = [threading.Thread(target=self._manage_gpu, args=(self.workers + g - 1, g, prepared),
                                    name=f"gpu-{g}", daemon=True) for g in range(1, self.gpus + 1)]
        threads += [threading.Thread(target=self._worker, args=(w, 0, f"cpu-{w}"), name=f"cpu-{w}", daemon=True)
                    for w in range(self.workers)]
        self.threads, self.monitor = threads, None
        held, shortened, came = HeldInterrupts(), False, []  # a Ctrl-C between shortening and try left it short
        try:  # an interrupt while the threads start stops those started too (they waited for tasks forever)
            _SWITCH.shorten()
            shortened = True
            held.release()
            for thread in threads[:self.gpus]:
                threadstart.start(thread)
            self._wait_until_prepared(prepared)
            for thread in threads[self.gpus:]:  # they wait for tasks until the clock starts
                threadstart.start(thread)
            self.last_progress = time.monotonic()
            guard_exit()
            self._outlast_frozen_ranks()  # before the first tick: a rank's share may end sooner
            with fatal_signals_traced(), debugging.breakpoints_noticed(), \
                    Monitor(self._check_stalls, lambda: self.limit.seconds) as self.monitor:
                if begin is not None:
                    begin()
                start, wall_start = time.perf_counter(), time.time()
                if self.tracer is not None and self.comm is None:
                    self.tracer.begin_at(start)
                elif self.tracer is not None:  # moved to the first rank's start after the run
                    self.tracer.begin_at_wall(wall_start)
                self.last_progress = time.monotonic()
                self._generate(generate, params)
                self._wait_until_idle()
                self._wait_for_gpus()
                end = time.perf_counter()
                self.wall_span = (wall_start, wall_start + end - start)
        except BaseException as interrupted:  # Ctrl-C (KeyboardInterrupt), or a stopping signal's exception
            prepared.abort()  # a GPU's thread still waiting to start gives up
            left = self._stop(threads)
            if left:
                interrupted.add_note(left)
            raise
        finally:
            held.release(act=False)
            if shortened:
                restoring = HeldInterrupts()
                _SWITCH.restore()
                came = restoring.release(act=False)
        left = self._stop(threads)
        act_on(came)  # a Ctrl-C as the interval was put back, once the workers are stopped
        if self.failure is not None:
            raise self._reported(left)
        return end - start

    def _stop(self, threads: list) -> str:
        """End the workers: none takes a new task, each finishes the kernel it runs. A kernel still
        running :data:`STOP_SECONDS` later (none is waited for after a stall: the watchdog names
        those) is left running, since Python cannot stop a thread; the text naming them, or ""."""
        with self.lock:
            self.stopping = True
            self._wake_all()
        deadline = time.monotonic() + (0.0 if self.stalled else STOP_SECONDS)
        for thread in threads:
            if thread.ident is not None:  # a CPU worker is not started before the GPUs are ready
                thread.join(max(0.0, deadline - time.monotonic()))
        _LEFT_RUNNING.extend(thread for thread in threads if thread.is_alive())
        if self.stalled or not any(thread.is_alive() for thread in threads):
            return ""
        with self.lock:
            lines = running_lines(self.running, time.monotonic())
        if not lines:  # the threads left are past their kernels, about to end
            return ""
        return "\n".join([f"{len(lines)} kernel(s) of rank {self.rank} still running {STOP_SECONDS:g} s after the run "
                          f"stopped, not waited for (Python cannot stop a thread: it ends as it returns, or with "
                          f"the process):", *lines])

    def _reported(self, left: str) -> TaskFailure:
        """The run's failure, naming the kernels ``left`` running, with what kernels said before it
        (a singular pivot's warning may be its cause: --check-finite stops at what follows)."""
        failure = self.failure
        if left:
            reported = type(failure)(f"{failure}\n{left}", failure.rank, failure.line)
            reported.__cause__, failure = failure.__cause__, reported
        failure.kernel_notes = self.kernel_notes.summary()
        return failure

    def _manage_gpu(self, index: int, device: int, prepared: threading.Barrier) -> None:
        """GPU ``device``'s management thread: readied before the clock starts, then a worker of its queue."""
        try:
            self.devices.prepare(device)
        except BaseException as error:  # a GPU that cannot run its first kernels
            self._fail(TaskFailure(f"GPU {device} cannot run kernels: {type(error).__name__}: {error}", self.rank))
        try:
            prepared.wait()
        except threading.BrokenBarrierError:  # the run gave up waiting, and said why
            return
        self._worker(index, device, f"gpu-{device}")

    def _wait_until_prepared(self, prepared: threading.Barrier) -> None:
        try:
            prepared.wait(timeout=PREPARE_SECONDS)
        except threading.BrokenBarrierError:
            self._fail(TaskFailure(f"a GPU did not get ready within {PREPARE_SECONDS:.0f} s "
                                   f"(its first kernels never finished)", self.rank))

    def _wait_for_gpus(self) -> None:
        """Kernels launched on GPUs may still run when their tasks are done: the run ends with them."""
        if self.devices is None or self.failure is not None:
            return
        try:
            self.devices.synchronize()
        except Exception as error:  # an asynchronous GPU error surfaces here
            self._fail(TaskFailure(f"a GPU failed: {type(error).__name__}: {error}", self.rank))

    def _generate(self, generate, params) -> None:
        watch = self.loop_nest = LoopNestWatch(self.limit)
        try:
            try:
                generate(self, params)
            finally:
                watch.finish()
                self.loop_nest = None
            self._generation_ended()
        except (_Abort, Stalled):  # the failure is recorded already
            pass
        except Exception as error:  # the program's own mistake: a missing tile, a division by zero
            self._fail(loop_nest_failure(error, self.rank, self.memory_remedies))

    def _generation_ended(self) -> None:
        """No task can read a remote copy any more: free those nobody holds (out-of-core, tiles
        written on a GPU go home)."""
        if self.exchange is None:
            return
        with self.lock:
            if self.tracker is not None:
                self.tracker.finish()
            for matrix in self.matrices.values():
                for tile in matrix.made_tiles():
                    self.exchange.release(tile)

    def _wait_until_idle(self) -> None:
        with self.lock:
            while not self.scheduler.idle and self.failure is None:
                self.space.wait(timeout=1.0)
                self._find_lost_threads()

    def _find_lost_threads(self) -> None:
        """(lock held) A thread of the run that ended before the run, having said nothing (Python could
        not set it up, or it could not report its own failure: memory ran out) fails the run: its
        tasks would wait for ever, or the watchdog's checks never come."""
        if self.stopping or self.failure is not None:
            return
        lost = [lane_text(thread.name) for thread in self.threads if thread.ident is not None and not thread.is_alive()]
        if self.monitor is not None and not self.monitor.thread.is_alive():
            lost.append("the watchdog")
        if lost:
            said = shortage(MemoryError(f"the thread of {' and '.join(lost)} ended before the run, without a word"),
                            self.memory_remedies)
            self.failure = TaskFailure(said, self.rank)
            self._wake_all()

    def _check_stalls(self) -> None:
        """The watchdog's monitor thread: a window without progress, or a loop nest without tasks."""
        self._outlast_frozen_ranks()
        with self.lock:
            self._check_tasks()
        watch = self.loop_nest
        quiet = watch.stalled() if watch is not None and self.failure is None else None
        if quiet is not None:
            self._fail(TaskFailure(watch.message(quiet), self.rank, watch.line()))
            watch.interrupt()

    def _outlast_frozen_ranks(self) -> None:
        """From the run on, this rank's collectives wait for a silent rank past the time it would end
        itself, frozen (:func:`.watchdog.outlasting`; the limit may grow, the automatic one)."""
        limit = self.limit.seconds
        if self.comm is not None and self.comm.limit is not None and limit is not None:
            self.comm.limit = max(self.comm.limit, outlasting(limit))

    def _check_tasks(self) -> None:
        limit = self.limit.seconds
        if debugging.active():  # a person at the debugger's prompt: no stall, and the clock starts when it returns
            self.last_progress = time.monotonic()
        if limit is None or self.scheduler.idle or self.failure is not None:
            return
        now, since = time.monotonic(), self.last_progress
        if not self.running and self.comm is not None and self.comm.size > 1:
            # only waiting for other ranks: give the rank whose kernel is stuck the time to say so,
            # and wait while another rank completes tasks (the data may be at the end of its work)
            limit = max(limit * WAITING_FACTOR, outlasting(limit))
            since = max(since, self.comm.others_progressed())
        elif self.running:  # until its oldest task began, the rank was waiting: not stalled (it then failed a
            # rank whose data came at the end of another's 5 s of work, as the tick met the task it started)
            since = max(since, min(began for _, began in self.running.values()))
        stalled = now - self.last_progress
        if now - since > limit:
            transfers = self.exchange.describe(self.matrices.values()) if self.exchange is not None else ""
            window = self.scheduler.describe(running=running_lines(self.running, time.monotonic()),
                                             arguments_text=arguments_text)
            said = f"{stalled:.1f}" if stalled < 10 else f"{stalled:.0f}"  # under a second too: --watchdog 0.5
            # idle here, waiting for other ranks: the stall is theirs (stopped, or slow), said first
            elsewhere, peers = self._waits_elsewhere()
            silent = self.comm.silences(peers) if peers else {}
            elsewhere += "".join(f" (rank {rank} gave no sign of life for {seconds:.0f} s: stopped, lost, or a kernel "
                                 f"holding Python's lock)" for rank, seconds in silent.items())
            note = "" if silent else self.limit.automatic_note(self.spelling)  # no slower kernel: a silent rank
            self.failure = TaskFailure(f"watchdog: no task completed for {said} s{note}"
                                       f"{elsewhere}{address_space_note()}; {window}"
                                       + (f"\n{transfers}" if transfers else ""), self.rank, running_line(self.running))
            self.stalled = True
            self._wake_all()

    def _waits_elsewhere(self) -> tuple[str, list]:
        """Of a stalled rank that runs no task: what it waits for from other ranks, data to come or
        messages it sent that they have not taken (a rank stopped), said as where the stall is, and
        those ranks; ("", []) where it runs a task, or waits for no other rank."""
        if self.running or self.exchange is None or self.comm is None:
            return "", []
        waited = self.exchange.waited_ranks(self.matrices.values())
        sending = self.comm.unfinished_sends()
        waits = ([f"waits for data from {ranks_text(waited)}"] if waited else []) + (
            [f"{sum(sending.values())} message(s) it sent to {ranks_text(sending)} are not received yet"]
            if sending else [])
        if not waits:
            return "", []
        return f"; this rank runs no task and {' and '.join(waits)}, where the stall is", sorted({*waited, *sending})

    def _worker(self, index: int, device: int, lane: str) -> None:
        """A CPU worker (device 0) or a GPU's management thread: run ready tasks of ``device``. A
        kernel's error fails its task; any other is a bug of tiledsl, which stops the run (a worker
        thread that died of one left the run waiting for it until the watchdog blamed a task)."""
        try:
            self._run_tasks(index, device, lane)
        except BaseException as error:
            said = shortage(error, self.memory_remedies)
            if said:  # a tile or buffer the runtime makes for a task, a thread: not a bug
                self._fail(TaskFailure(f"{said} (in {lane_text(lane)})", self.rank))
                return
            if environment_switch("TILEDSL_DEBUG"):
                traceback.print_exc()
            self._fail(InternalFailure(f"internal error in {lane_text(lane)}: {type(error).__name__}: {error}",
                                       self.rank))

    def _run_tasks(self, index: int, device: int, lane: str) -> None:
        scheduler = self.scheduler
        busy = other = 0.0
        count = 0
        idle_since = None
        in_kernel.notes = self.kernel_notes  # where .notes.note puts what this thread's kernels say
        finite = self.spelling.flag("check_finite") if self.check_finite else None
        copied = self._copied_for(index)  # (of the GPU tasks this worker takes)
        in_kernel.device = device
        with self.lock:
            # checked before each task, not only when none is ready: a failed or interrupted run
            # starts nothing more (its caller has the error, and the kernels must stop being called)
            while not (self.stopping or self.failure is not None):
                task = scheduler.pop(device)
                if self.host_costs is not None:
                    task = self._host_takes(task, device)
                if task is None:
                    idle_since = idle_since or time.perf_counter()
                    self.work[device].wait()
                    continue
                self.running[task] = (lane, time.monotonic())
                self.lock.release()
                began = time.perf_counter()
                if idle_since is not None and self.tracer is not None:
                    self.tracer.idle(lane, idle_since, began)
                idle_since = None
                try:
                    if task.device and not device:  # a GPU task this CPU worker took (--host-takes)
                        _execute_on_host(task, finite, self.devices, copied)
                    else:
                        if task.device and self.exchange is not None:  # out-of-core: its tiles onto the GPU first
                            self.exchange.make_resident(task)
                        _execute(task, finite, self.devices)
                    error = None
                except BaseException as caught:  # sys.exit() or KeyboardInterrupt in a kernel too (17.3)
                    error = caught
                ended = time.perf_counter()
                if debugging.active():
                    debugging.task_returned()
                program = task.call.line > 0  # a program task, not a transfer or a check task
                if program:
                    busy += ended - began
                else:
                    other += ended - began
                self.limit.task_took(ended - began)
                count += program
                if self.tracer is not None and program:  # transfers have lanes of their own
                    self.tracer.task(lane, began, ended, task)
                timed = (self.kernel_clock.measure(task, lane, [a.shape for a in _arrays(task)])
                         if self.kernel_clock is not None and task.call.line > 0 and error is None else None)
                self.lock.acquire()
                if timed is not None:  # the sums under the lock, the flops counted outside it
                    self.kernel_clock.add(timed, ended - began)
                del self.running[task]
                if error is not None:
                    self.failure = self.failure or _task_failure(task, error, self.rank, device, self.memory_remedies)
                    self._wake_all()
                    break
                if not task.asynchronous:
                    self._finished(task)
        self.stats.per_worker[index] = count
        self.stats.busy[index], self.stats.other[index] = busy, other

    def _copied_for(self, index: int):
        """What counts and traces the host/GPU copies of the tasks CPU worker ``index`` takes (in its own
        slot of the statistics: no lock), as the copy thread counts and traces its own."""
        def copied(task: Task, tile: int, source: int, target: int, began: float, nbytes: int) -> None:
            self.stats.taken_copies[index] += 1
            if self.tracer is not None:
                part = part_of(task.tiles[tile], task.named_regions[tile] if task.named_regions else None)
                self.tracer.transfer("copy", began, "copy", copy_args(task.tiles[tile], part, source, target, nbytes))
        return copied

    def _host_takes(self, task: Task | None, device: int) -> Task | None:
        """--host-takes (lock held): a CPU worker without a task of its own may take a GPU's; a GPU
        starting one is busy that much longer (by the estimates: a CuPy kernel returns at launch)."""
        now = time.perf_counter()
        if task is None and device == 0:
            backlog = [max(0.0, until - now) for until in self.gpu_busy_until]
            task = heteroprio.take(self.scheduler, self.host_costs, backlog)
            self.stats.host_took += task is not None
        elif task is not None and device:
            self.gpu_busy_until[device] = max(now, self.gpu_busy_until[device]) + self.host_costs(task)[1]
        return task

    def _finished(self, task: Task) -> None:
        """FIRE after ``task`` (lock held): wake workers for what became ready."""
        fired = self.scheduler.finish(task)
        self.last_progress = time.monotonic()
        if self.comm is not None:
            self.comm.tasks_done += 1  # the heartbeats tell the other ranks
        if task.on_complete is not None:
            task.on_complete()
        for ready in fired:
            self._wake_for(ready)
        if self.scheduler.in_flight <= self.low_water:
            self.space.notify_all()

    def fail_from_thread(self, error: BaseException) -> None:
        """A helper thread (the copy thread, the MPI thread) failed: stop the run with its error."""
        self._fail(TaskFailure(f"a transfer failed: {type(error).__name__}: {error}", self.rank))

    def _fail(self, failure: TaskFailure) -> None:
        with self.lock:
            self.failure = self.failure or failure
            self._wake_all()

    def _wake_all(self) -> None:
        for condition in self.work:
            condition.notify_all()
        self.space.notify_all()


def _execute(task: Task, check_finite: str | None, devices) -> None:
    """Run ``task`` where its tiles are; ``check_finite``: the option that asks for its written tiles to be
    checked for NaN and infinities, as the interface spells it (None: not asked)."""
    arrays = _arrays(task)
    _call_kernel(task, task.kernel, arrays, devices, on_gpu=bool(task.device))
    if check_finite and task.call.line > 0:
        _check_finite(task, arrays, devices, check_finite)


def _execute_on_host(task: Task, check_finite: str | None, devices, copied) -> None:
    """A GPU task run by a CPU worker: its CPU body on host copies of its tiles (each waits for the
    kernels launched on its GPU), then the written ones copied back, before the task completes;
    ``copied(task, index, source, target, began, nbytes)`` is told of each copy of its tile ``index``."""
    on_gpu = _arrays(task)
    arrays = []
    for index, array in enumerate(on_gpu):
        began = time.perf_counter()
        arrays.append(devices.to_host(array))
        copied(task, index, task.device, 0, began, array.nbytes)
    _call_kernel(task, task.host_kernel, arrays, devices)
    if check_finite:
        _check_finite(task, arrays, devices, check_finite)
    for index in task.call.writes:
        began = time.perf_counter()
        devices.write_into(on_gpu[index], arrays[index])
        copied(task, index, 0, task.device, began, arrays[index].nbytes)


def _arrays(task: Task) -> list:
    """What the kernel runs on, per tile argument: the source's data, or the view the call names."""
    sources, views = task.sources, task.regions
    if views is None:
        return [s.data for s in sources]
    return [s.data if v is None else s.data[v] for s, v in zip(sources, views)]


def _call_kernel(task: Task, kernel, arrays: list, devices, on_gpu: bool = False) -> None:
    """Run ``kernel`` on the task's ``arrays`` (``on_gpu``: a GPU body, told the tiles it writes,
    which order it on the GPU's streams)."""
    call = task.call
    arrays = list(arrays)
    extra = {"written": [arrays[index] for index in call.writes]} if on_gpu else {}
    for index in call.reads_only:  # a write would change this rank's copy only: refuse it (17.4)
        array = arrays[index]
        arrays[index] = read_only(array) if isinstance(array, np.ndarray) else devices.read_only(array)
    shapes = [arrays[index].shape for index in call.writes]
    arguments = arrays if call.plain else call.arguments(arrays, task.values)
    in_kernel.task = task  # os._exit in the kernel fails the task (see .crash)
    rank_pid = os.getpid()
    try:
        returned = call.runner(kernel, arguments, extra)
    finally:
        in_kernel.task = None
        if os.getpid() != rank_pid:  # a copy the kernel forked (no exec), back here: it would hang in
            os._exit(0)  # the rank's locks, holding its output open, and the job with it
    for index, shape in zip(call.writes, shapes):  # ndarray.resize in place: the tile would no longer be its tile
        if arrays[index].shape != shape:
            raise KernelFault(f"changed the shape of {task.tiles[index]} from {shape} to "
                              f"{arrays[index].shape}: a kernel writes into its tiles, it cannot resize them")
    if not call.plain:
        _check_panels_kept(task, arguments, arrays)
    _check_returned(returned, arrays, kernel, task)


def _check_returned(returned, arrays: list, kernel, task: Task) -> None:
    """What a kernel returns is dropped: a new array (alone, or in a tuple, list or dict), a generator
    or a coroutine is a result lost, and the kernel's own generator or coroutine a body that never ran
    (``yield``, ``async def``)."""
    if inspect.isgenerator(returned) or inspect.iscoroutine(returned) or inspect.isasyncgen(returned):
        if not inspect.isasyncgen(returned):  # (an async generator closes by awaiting: none to await)
            returned.close()  # never finished: closing it keeps Python from warning of it
        code = getattr(inspect.unwrap(kernel), "__code__", None)
        if _code_of(returned) is code:
            where = f"{code.co_name} at {os.path.basename(code.co_filename)}:{code.co_firstlineno}"
            raise KernelFault(f"returned a {type(returned).__name__} without running its body ({where} is a "
                              f"function with 'yield', or an 'async def'): a kernel is a plain function that "
                              f"writes into its tiles")
        # a generator expression, or another function's generator: the kernel's body ran, its result is lost
        raise KernelFault(f"returned a {type(returned).__name__}, which is dropped: {_in_place(kernel, task)}")
    held = isinstance(returned, (dict, tuple, list))
    results = returned.values() if isinstance(returned, dict) else returned if held else (returned,)
    for result in results:
        if getattr(result, "shape", ()) != () and not _is_argument(result, arrays):
            what = f"a new {type(result).__name__} of shape {tuple(result.shape)}"
            raise KernelFault(f"returned {f'a {type(returned).__name__} holding {what}' if held else what}, which is "
                              f"dropped: {_in_place(kernel, task)}")


def _in_place(kernel, task: Task) -> str:
    """How the kernel keeps a result: written in place into the argument it writes, named as the
    kernel's Python function names it (``Y[...] = ...``; a panel's tiles ``P[i][...] = ...``)."""
    written = next(((number, panel) for number, mode, _, panel in task.call.declared(task.tiles)
                    if mode in WRITE_MODES), None)
    try:
        name = list(inspect.signature(kernel).parameters)[written[0] - 1]
    except (TypeError, ValueError, IndexError):  # no tile it writes, no signature to read (a C function), *args
        return "a kernel writes its results into its tiles in place (T[...] = ...)"
    example = f"{name}[i][...] = ..., for each tile of the panel" if written[1] else f"{name}[...] = ..."
    return f"a kernel writes its results into its tiles in place ({example})"


def _code_of(returned):
    """The code object a generator, coroutine or async generator runs."""
    return getattr(returned, "gi_code", None) or getattr(returned, "cr_code", None) or returned.ag_code


def _check_panels_kept(task: Task, arguments: list, arrays: list) -> None:
    """A written panel still lists its tiles' arrays: ``P[k] = P[k] * 2`` (for ``P[k] *= 2``) would
    drop the result."""
    groups = [(first, count) for first, count, _ in task.call.groups or () if count is not None]
    panels = [argument for argument in arguments if isinstance(argument, Panel)]
    for (first, count), panel in zip(groups, panels):
        tiles = arrays[first:first + count]
        if panel.written and (len(panel) != count or any(a is not b for a, b in zip(panel, tiles))):
            raise KernelFault(f"changed the list of its panel {tiles_text(task.tiles[first:first + count])}, "
                              f"which drops what it put there: a kernel writes into a panel's tiles in place "
                              f"(P[k][...] = ..., not P[k] = ...)")


def _is_argument(array, arrays) -> bool:
    """Whether a kernel's returned array is (a view of) one of its tiles, which it wrote in place:
    numpy's by shared memory, a GPU array's (CuPy's) by its chain of bases."""
    if isinstance(array, np.ndarray):
        return any(isinstance(a, np.ndarray) and np.shares_memory(array, a) for a in arrays)
    bases = []
    while array is not None and len(bases) < 64:
        bases.append(array)
        array = getattr(array, "base", None)
    return any(b is a for b in bases for a in arrays)


def _check_finite(task: Task, arrays, devices, option: str) -> None:
    """``option`` (--check-finite, or check_finite=True): a NaN or an infinity in a written tile stops the
    run here, said at its place in the tile (a sub-range's array starts inside it)."""
    for index in task.call.writes:
        array = arrays[index]
        found = first_nonfinite(array) if isinstance(array, np.ndarray) else devices.first_nonfinite(array)
        if found is not None:
            row, col, value = found
            view = task.named_regions[index] if task.named_regions is not None else None
            if view is not None:
                row, col = row + view[0].start, col + view[1].start
            raise KernelFault(f"produced {value} at ({row}, {col}) of {task.tiles[index]} ({option})")


def _task_failure(task: Task, error: BaseException, rank: int, device: int,
                  remedies: str | None = None) -> TaskFailure:
    """The failure of ``task`` run by a worker of ``device`` (0: a CPU worker, which may have taken a GPU task);
    ``remedies``: what helps the run where memory ran out."""
    call = task.call
    arguments = call.declared(task.tiles)
    at = user_code_line(error)
    text = message_of(error)
    reason = text if error.__class__.__name__ == "KernelError" or isinstance(error, (KernelFault, KernelExit)) else \
        shortage(error, remedies, at) if isinstance(error, MemoryError) else \
        f"{type(error).__name__}{at}: {text}" if text else f"{type(error).__name__}{at}"
    if not isinstance(error, Exception):
        reason += " (a kernel must return, or raise an Exception; it may not end the run)"
    elif isinstance(error, ValueError) and "read-only" in text:
        # numbered as the kernel declares them: a panel is one argument, value arguments count
        inputs = ", ".join(f"{tiles_text(group)} (argument {number}{', a panel' if panel else ''})"
                           for number, mode, group, panel in arguments if mode == "in")
        reason += f": a kernel may not write its `in` arguments: {inputs}"
    where = where_ran(task, device)
    failure = KernelFailure(f"kernel {call.kernel} failed on {arguments_text(task)}{where} ({call.text}"
                            f"{values_text(task)}): {reason}", rank, call.line)
    # the kernel's own exception, for a caller of the Python API to inspect (a finding of the runtime's is none)
    failure.__cause__ = None if isinstance(error, KernelFault) else error
    return failure

