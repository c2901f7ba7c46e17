"""A progress bar on the terminal for runs longer than a moment.

Shown only when standard error is a terminal and the run has lasted
``delay`` seconds; the total comes from a counting pass over the loop nest
(cheap: integer arithmetic only, no kernels), taken only in that case.
"""
from __future__ import annotations

import sys
import threading
import time


class Progress:
    """Draws ``done/total`` tasks on stderr from a background thread until stopped."""

    def __init__(self, label: str, total: int, completed, delay: float = 2.0, stream=sys.stderr):
        self.label, self.total, self.completed = label, total, completed
        self.delay, self.stream = delay, stream
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._draw, name="progress", daemon=True)
        self.drawn = False

    def __enter__(self):
        self.start = time.monotonic()
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join()
        if self.drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()

    def _draw(self) -> None:
        if self.stop_event.wait(self.delay):
            return
        while not self.stop_event.is_set():
            done = self.completed()
            fraction = min(1.0, done / self.total) if self.total else 1.0
            bar = "#" * int(30 * fraction)
            elapsed = time.monotonic() - self.start
            self.stream.write(f"\r{self.label} [{bar:<30}] {100 * fraction:5.1f}%  "
                              f"{done}/{self.total} tasks  {elapsed:.0f} s")
            self.stream.flush()
            self.drawn = True
            self.stop_event.wait(0.25)


def wanted(stream=sys.stderr) -> bool:
    """True when a progress bar can be drawn (a terminal, not a pipe or a file)."""
    return hasattr(stream, "isatty") and stream.isatty()

