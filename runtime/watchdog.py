"""The watchdog: no rank waits forever, whether for tasks or for its own loop nest.

Its limit (``Options.watchdog``, ``Engine(watchdog=...)``) is one of:

* ``None``, the default: automatic, ``max(FLOOR_SECONDS, TASK_FACTOR × the longest
  task this rank has run)``. The floor leaves room for a slow first task and for
  the waits of a rank whose work comes late; the factor for the spread of task
  times on a loaded machine. Tasks are kernels: waiting for a transfer is not one;
* ``0``: disabled;
* ``> 0``: that many seconds.

Two stalls are reported. The engine's: no task completed for the limit while
tasks are in the window. The loop nest's (:class:`LoopNestWatch`): it ran for the
limit without submitting a task (a spinning loop), before the run (the survey
pass, :func:`watched`) or during it. A thread spinning in pure-Python arithmetic
takes no lock and waits on nothing, so the watch raises :class:`Stalled` in it
asynchronously (``PyThreadState_SetAsyncExc``), delivered at its next bytecode;
a :class:`Monitor` thread checks once per :data:`TICK_SECONDS`. The user's code
that runs outside tasks (a kernel module as it loads, a user check) has a
:func:`deadline`: past it, :class:`Overdue` is raised in it and the rank fails
saying what has not returned (a wait on the main thread that Python can interrupt, a sleep, a
lock, a read, is woken for it by :data:`WAKE_SIGNAL`); code that no exception reaches (C code,
code that swallows it) makes the rank say so and end the job.
"""
from __future__ import annotations

import contextlib
import ctypes
import signal
import sys
import threading
import time
from dataclasses import dataclass

from . import threadstart
from .crash import RunStop, frozen_backstop
from .errors import tile_line
from .notes import arguments_text
from .scheduler import where
from .world import RankError, launcher_size, say_ending

FLOOR_SECONDS = 60.0
TASK_FACTOR = 20.0
TICK_SECONDS = 0.25
#: how much later than its time a tick must come for :class:`Monitor` to take the interpreter as frozen
FROZEN_SECONDS = 1.0


class Limit:
    """The watchdog's limit on this rank, as it stands now (see the module docstring)."""

    def __init__(self, setting: float | None):
        if setting is not None and setting < 0:
            raise ValueError(f"the watchdog's limit must be at least 0 seconds, got {setting}")
        self.setting = setting
        self.longest_task = 0.0

    def task_took(self, seconds: float) -> None:
        if seconds > self.longest_task:
            self.longest_task = seconds

    def automatic_note(self, spelling) -> str:
        """`` (the automatic limit ...)`` for a stall report under the automatic limit, which a
        slow but sound kernel may reach, and which a stuck one takes a minute to reach (longer than
        tune's budget), naming the setting as ``spelling`` (the interface that started the run, an
        :class:`.options.Spelling`) writes it; nothing for a limit the user set."""
        if self.setting is not None:
            return ""
        return (f" (the automatic limit, the larger of {FLOOR_SECONDS:.0f} s and {TASK_FACTOR:.0f} times the "
                f"longest task so far: {spelling.valued('watchdog', 'SECONDS')} sets another, longer for a slower "
                f"kernel or shorter to stop a stuck one sooner, and {spelling.valued('watchdog', '0')} turns it off)")

    @property
    def seconds(self) -> float | None:
        """Seconds without progress that make a stall; None when disabled."""
        if self.setting is None:
            return max(FLOOR_SECONDS, TASK_FACTOR * self.longest_task)
        return self.setting or None


class Stalled(RunStop):
    """Raised asynchronously in a loop nest that stalled (not an Exception: nothing may swallow it)."""


class LoopNestWatch:
    """Watches the calling thread's loop nest: it must submit a task at least once per limit."""

    def __init__(self, limit: Limit):
        self.limit = limit
        self.thread = threading.get_ident()
        self.last_submit = time.monotonic()
        self._guard = threading.Lock()  # orders interrupt() with waiting() and finish()
        self._armed, self._waiting, self.fired = True, False, False

    def submitted(self) -> None:
        self.last_submit = time.monotonic()

    @contextlib.contextmanager
    def waiting(self):
        """The loop nest waits for the tasks (a full window): not its own time, never interrupted."""
        with self._guard:
            self._waiting = True
        try:
            yield
        finally:
            self._waiting = False
            self.last_submit = time.monotonic()

    def stalled(self) -> float | None:
        """Seconds since the last submit, when that is over the limit (monitor thread)."""
        limit = self.limit.seconds
        quiet = time.monotonic() - self.last_submit
        if limit is None or self._waiting or self.fired or quiet <= limit:
            return None
        return quiet

    def line(self) -> int | None:
        """The ``.tile`` line the loop nest is at, read from the watched thread's stack."""
        frame = sys._current_frames().get(self.thread)
        while frame is not None and frame.f_code.co_name != "generate":
            frame = frame.f_back
        return None if frame is None else tile_line(frame.f_code.co_filename, frame.f_lineno)

    def interrupt(self) -> None:
        """Unwind the loop nest with :class:`Stalled` (once, and only while it runs and does not wait)."""
        with self._guard:
            if self._armed and not self._waiting and not self.fired:
                self.fired = True
                _raise_in(self.thread, Stalled)

    def finish(self) -> None:
        """The loop nest is over (watched thread): no Stalled may arrive after this returns."""
        try:
            with self._guard:
                self._armed = False
            if self.fired:
                _let_it_arrive()
        except Stalled:  # it arrived on the way out; it was the only one
            self._armed = False

    def message(self, quiet: float) -> str:
        return f"watchdog: the loop nest ran {quiet:.0f} s without submitting a task"


class Monitor:
    """A thread calling ``check()`` every :data:`TICK_SECONDS` while the ``with`` block runs; with
    ``backstop`` (a function of no argument: the watchdog's limit, None when off), arming after each
    check the GIL-free end of a process whose interpreter froze (:func:`.crash.frozen_backstop`)
    :data:`BACKSTOP_FACTOR` times the limit later, plus :data:`BACKSTOP_GRACE`: the check would have
    reported the stall long before, had it been able to run."""

    def __init__(self, check, backstop=None):
        self.check, self.backstop = check, backstop
        self.armed = (None, 0.0)  # (the backstop's seconds, when it was armed)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="watchdog", daemon=True)

    def __enter__(self):
        self._arm()  # before a kernel can take the GIL and keep it: the first tick may never come
        try:
            threadstart.start(self.thread)
        except BaseException:  # an interrupt while start() waited for the thread: it runs, so it must end
            self.stop.set()  # (else it would watch a loop nest long gone, and raise Stalled into the caller)
            raise
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        if self.backstop is not None:
            frozen_backstop(None)

    def _run(self) -> None:
        last, skipped = time.monotonic(), False
        while not self.stop.wait(TICK_SECONDS):
            now = time.monotonic()
            # A tick far later than asked: the interpreter was frozen (a kernel held the GIL in C), and
            # the thread that takes the GIL first as it is released decides: this check, finding no task
            # done all that time, or the worker recording the kernel's end. Once, let the worker go first
            # (a next late tick checks: a kernel taking the GIL again and again is still found).
            frozen = now - last > TICK_SECONDS + FROZEN_SECONDS and not skipped
            last, skipped = now, frozen
            if not frozen:
                self.check()
            self._arm()

    def _arm(self) -> None:
        """Arm the backstop again when its time changed or a quarter of it has passed: each arming
        starts a thread of faulthandler's, which a tick need not do four times a second."""
        if self.backstop is None:
            return
        limit = self.backstop()
        seconds = None if limit is None else backstop_seconds(limit)
        now = time.monotonic()
        if seconds != self.armed[0] or seconds is not None and now - self.armed[1] > seconds / 4:
            frozen_backstop(seconds)
            self.armed = (seconds, now)


#: how much longer than the watchdog's limit an interpreter may stop running Python code before
#: the process ends (:class:`Monitor`)
BACKSTOP_FACTOR = 2.0
BACKSTOP_GRACE = 10.0
#: seconds, past a silent rank's backstop, for its stacks to reach the launcher (:func:`outlasting`)
REPORT_SECONDS = 5.0


def backstop_seconds(limit: float) -> float:
    """How long after its monitor's last tick a rank whose interpreter froze ends itself (:class:`Monitor`)."""
    return BACKSTOP_FACTOR * limit + BACKSTOP_GRACE


def outlasting(limit: float) -> float:
    """How long, during a run, a rank waits for another that gives no sign of life: a rank frozen in C
    code holding the GIL sends no heartbeat, and only its backstop can name the kernel, so the others
    wait past it (the same ``limit``), its last heartbeat up to a sixth of the limit before it froze,
    and :data:`REPORT_SECONDS` more: its end, and not their giving up, is what the launcher reports."""
    return backstop_seconds(limit) + limit / 2 + REPORT_SECONDS


def running_lines(running: dict, now: float) -> list[str]:
    """Lines naming the tasks the workers run now (``running``: task -> (lane, monotonic start)),
    oldest first: a stalled kernel blocks no other task when it is the last, so only these name it."""
    lines = []
    for task, (lane, began) in sorted(running.items(), key=lambda item: item[1][1]):
        lines.append(f"  running #{task.seq} {task.call.kernel}({arguments_text(task)}){where(task.call)}, "
                     f"for {now - began:.0f} s on {lane_text(lane)}")
    return lines


@dataclass(frozen=True)
class CodeLimit:
    """A :func:`deadline`'s seconds, and the setting that sets them as the run was given it
    (``--watchdog``, or ``watchdog=`` from Python): the message names it."""

    seconds: float
    setting: str = "--watchdog"


def user_code_limit(setting: float | None, automatic: float, named: str = "--watchdog") -> CodeLimit | None:
    """The :func:`deadline` of the user's code for a ``--watchdog`` setting (named ``named``): the
    setting's seconds, None when it is 0 (off), ``automatic`` when it is not given."""
    if setting is None:
        return CodeLimit(automatic, named)
    return CodeLimit(setting, named) if setting else None


class Overdue(RunStop):
    """Raised asynchronously in the thread whose user code (outside the engine) outlived its :func:`deadline`."""


@contextlib.contextmanager
def deadline(limit: CodeLimit | None, what: str, rank: int):
    """The user's code run outside the engine (a kernel module's import, a user check) ends
    within ``limit`` (None: no limit), or this rank fails saying ``what`` (what has not happened):
    :class:`Overdue` is raised in that code, which unwinds to a :class:`.world.RankError` (a run from
    Python leaves the interpreter usable); code that it cannot reach within :data:`OVERDUE_SECONDS`
    (a sleep, a lock, a C library) makes the rank say so and end the job, and code holding the GIL in C,
    where no thread of the rank runs, ends the rank by the frozen interpreter's backstop
    (:func:`backstop_seconds`; within :func:`.crash.fatal_signals_traced`, in tiledsl's own process)."""
    if limit is None:
        yield
        return
    seconds = limit.seconds
    said = f"watchdog: {what} after {seconds:g} s ({limit.setting})"
    returned, guard, caller = threading.Event(), threading.Lock(), threading.get_ident()
    state = {"armed": True, "fired": False}
    waking = _waking()
    size = launcher_size()
    # every rank may be stuck alike (loading one module): rank 0 says it and its end ends the
    # job, the others say it only where they outlive that (one error a job, as a failed run's)
    later = DEFERRED_SECONDS if rank and size is not None and size[1] > 1 else 0.0

    def watch():
        if returned.wait(seconds):
            return
        with guard:  # past the limit: unwind the code, unless it has just returned
            if state["armed"]:
                state["fired"] = True
                _raise_in(caller, Overdue)
                if waking is not None:  # a sleep or a lock of the main thread: its handler takes the exception
                    signal.pthread_kill(caller, WAKE_SIGNAL)
        if returned.wait(OVERDUE_SECONDS):  # it unwound (or returned): the rank fails the usual way
            return
        returned.wait(later)
        # said when it ends: past the limit by the time given to unwind (a rank's report ~8 s after a limit of 1 s)
        say_ending(f"rank {rank}: {said}, nor stopped {OVERDUE_SECONDS + later:g} s later (it waits where Python "
                   f"cannot interrupt it: C code, a wait of another thread than the main one, or code that catches the "
                   f"exception)")
    _backstops.append(backstop_seconds(seconds))  # code holding the GIL in C: no thread of ours runs
    frozen_backstop(_backstops[-1])
    try:  # an interrupt as the thread starts (start() waits for it) must end it too: else it ended the process
        threadstart.start(threading.Thread(target=watch, name="deadline", daemon=True))
        try:
            yield
        finally:
            with guard:
                state["armed"] = False
            if state["fired"]:
                _let_it_arrive()  # one still pending arrives here, not in the caller's next lines
        if state["fired"]:  # the code swallowed it and returned all the same: it still overran
            raise Overdue
    except Overdue:
        raise RankError(said) from None
    finally:
        returned.set()
        if waking is not None:
            signal.signal(WAKE_SIGNAL, waking)
        _backstops.pop()
        frozen_backstop(_backstops[-1] if _backstops else None)  # an enclosing deadline's (a check's module)


#: seconds the user's code past its deadline has to unwind before the rank ends the job
OVERDUE_SECONDS = 5.0
#: the backstops of the deadlines in force, innermost last (:func:`.crash.frozen_backstop`: armed within
#: :func:`.crash.fatal_signals_traced`, which encloses them)
_backstops: list = []


#: the signal that wakes the main thread from a wait Python can interrupt (a sleep, a lock, a read): its handler,
#: Python code, takes the :class:`Overdue` raised in it; ignored by default, so one that comes after the handler
#: is put back does nothing
WAKE_SIGNAL = signal.SIGURG


def _waking():
    """On the main thread, where signal handlers run: :data:`WAKE_SIGNAL`'s handler set to take delivery of a
    pending exception, and the handler it had, to be put back (the default where C code set it); None on
    another thread."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(WAKE_SIGNAL, lambda signum, frame: _let_it_arrive()) or signal.SIG_DFL


#: seconds a rank other than 0 whose user code outlived its deadline waits for rank 0's report
DEFERRED_SECONDS = 3.0


def running_line(running: dict) -> int | None:
    """The ``.tile`` line a stall points at: the one line of every running program task, if one."""
    lines = {task.call.line for task in running if task.call.line > 0}
    return lines.pop() if len(lines) == 1 else None


def lane_text(lane: str) -> str:
    """``cpu-1`` -> ``CPU worker 1``, ``gpu-2`` -> ``GPU 2`` (the engine's thread names)."""
    kind, _, number = lane.partition("-")
    return f"GPU {number}" if kind == "gpu" else f"CPU worker {number}"


def watched(walk, driver, setting: float | None, failure):
    """``walk(driver)``, a pass over the loop nest with no engine (the survey), under the watchdog.

    ``driver`` is handed on with a ``generate`` that notes each submit; a loop nest
    that runs for the limit without one raises ``failure(message, line)``.
    """
    watch = LoopNestWatch(Limit(setting))

    def check():
        quiet = watch.stalled()
        if quiet is not None:
            check.found = (watch.message(quiet), watch.line())
            watch.interrupt()
    check.found = None
    try:
        with Monitor(check):
            try:
                return walk(_NotingDriver(driver, watch))
            finally:
                watch.finish()
    except Stalled:
        pass
    raise failure(*check.found)


class _NotingDriver:
    """A driver whose loop nest tells ``watch`` of every submit."""

    def __init__(self, driver, watch: LoopNestWatch):
        self.driver, self.watch = driver, watch

    def __getattr__(self, name):
        return getattr(self.driver, name)

    def generate(self, runtime, params):
        return self.driver.generate(_NotingRuntime(runtime, self.watch), params)


class _NotingRuntime:
    def __init__(self, runtime, watch: LoopNestWatch):
        self._runtime, self._watch = runtime, watch

    def __getattr__(self, name):
        return getattr(self._runtime, name)

    def submit(self, *args, **kwargs):
        self._watch.submitted()
        return self._runtime.submit(*args, **kwargs)


def _raise_in(thread: int, exception) -> None:
    """Raise ``exception`` (a class) in the thread ``thread``, at its next bytecode check."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), ctypes.py_object(exception))


def _let_it_arrive() -> None:
    """Take delivery of an exception raised in this thread by :func:`_raise_in` and still pending: a loop's
    back edges check for it. Withdrawing it instead (``PyThreadState_SetAsyncExc`` with NULL) leaves the
    interpreter's flag of a pending one set, which no thread clears: every thread's loops then enter the
    interpreter's slow path for good (a pure-Python loop twice as slow), and a run under cProfile hung."""
    for _ in range(3):
        pass
