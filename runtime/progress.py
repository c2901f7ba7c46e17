"""What a run tells the terminal while it runs, and how long each of its phases took.

A progress bar of the tasks done with an estimate of the time left is drawn on
stderr by rank 0 once a phase (the factorization, the check) has lasted
:data:`DELAY` seconds (``TILEDSL_PROGRESS_DELAY`` if set): when stderr is a
terminal, or when ``TILEDSL_PROGRESS=1`` says so (``tiledsl run --np`` sets it for its ranks, whose stderr is a pipe to
``mpiexec``). On several ranks the bar counts rank 0's own tasks, and says so.
:class:`Stopwatch` times the phases of a run for its summary.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

from . import debugging

#: seconds a phase runs before its bar appears (short phases stay quiet)
DELAY = 2.0
#: the environment variable that asks for a bar when stderr is not a terminal
FORCE = "TILEDSL_PROGRESS"
WIDTH = 30


def render(label: str, done: int, total: int, elapsed: float) -> str:
    """The bar's text for ``done`` of ``total`` tasks after ``elapsed`` seconds.

    The time left assumes the tasks still to run take as long, on average, as
    those done so far.
    """
    done = max(0, min(done, total))
    fraction = done / total if total else 1.0
    bar = "#" * int(WIDTH * fraction)
    text = f"{label} [{bar:<{WIDTH}}] {100 * fraction:5.1f}%  {done}/{total} tasks  {elapsed:.0f} s"
    if 0 < done < total:
        text += f", about {_duration(elapsed * (total - done) / done)} left"
    return text


def _duration(seconds: float) -> str:
    """``42 s`` or ``3 min 05 s``."""
    seconds = round(seconds)
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s"


class Progress:
    """Draws the bar of the tasks ``completed()`` counts from now on, from a background thread,
    until the context ends (``total`` tasks are expected)."""

    def __init__(self, label: str, total: int, completed, delay: float | None = None, stream=None):
        self.label, self.total, self.completed = label, total, completed
        self.delay = float(os.environ.get(FORCE + "_DELAY", DELAY)) if delay is None else delay
        self.stream = sys.stderr if stream is None else stream
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._draw, name="progress", daemon=True)
        self.drawn = False

    def __enter__(self):
        self.start = time.monotonic()
        self.already_done = self.completed()  # tasks of earlier phases
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join()
        if self.drawn:
            self._write("\r\033[K")

    def _draw(self) -> None:
        if self.stop_event.wait(self.delay):
            return
        while not self.stop_event.is_set():
            if not debugging.active():  # (a kernel in the debugger: the bar would write over its prompt)
                if not self._write("\r\033[K" + render(self.label, self.completed() - self.already_done,
                                                        self.total, time.monotonic() - self.start)):
                    return
                self.drawn = True
            self.stop_event.wait(0.25)

    def _write(self, text: str) -> bool:
        """Whether ``text`` reached the stream: a kernel may have closed it (the bar then stops, and
        the run goes on)."""
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            return False
        return True


def wanted(stream=None) -> bool:
    """True when a progress bar can be drawn: ``stream`` (stderr) is a terminal, or
    ``TILEDSL_PROGRESS=1`` asks for one."""
    stream = sys.stderr if stream is None else stream
    return os.environ.get(FORCE) == "1" or (hasattr(stream, "isatty") and stream.isatty())


def tasks_done(engine) -> int:
    """Kernel tasks completed on ``engine``'s rank: every task the scheduler finished but the
    transfers (messages sent and received, copies between devices)."""
    transfers = 0
    if engine.comm is not None:
        transfers += engine.comm.stats.sends + engine.comm.stats.receives
    if engine.exchange is not None:
        transfers += engine.exchange.device_copies
    return engine.scheduler.completed - transfers


class Stopwatch:
    """Wall seconds of a run's phases, each :meth:`lap` ending one."""

    def __init__(self):
        self.start = self.last = time.perf_counter()
        self.laps: dict = {}

    def lap(self, phase: str) -> float:
        """End ``phase`` now; its seconds."""
        now = time.perf_counter()
        self.laps[phase] = now - self.last
        self.last = now
        return self.laps[phase]

    def total(self) -> float:
        return self.last - self.start

    @contextlib.contextmanager
    def excluded(self):
        """Time that counts in no phase, as Python's start-up does not: the libraries a kernel
        module imports (scipy alone took a second of 'setup')."""
        began = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - began
            self.start += spent
            self.last += spent
