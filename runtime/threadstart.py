"""Starting a thread, or saying it could not start: never waiting for ever.

Python's ``Thread.start`` waits, without a limit, for the new thread to say that it runs. A
thread whose own set-up fails first (memory that ran out as Python made its records, under
``ulimit -v``) never says so, and the thread that started it waited for ever. :func:`start`
waits :data:`START_SECONDS` at most, then raises what Python raises for a thread it cannot
create, which :func:`.errors.shortage` says as what it is. (The wait is the thread's
``_started`` event, Python's own since 3.0: replaced by one whose wait has that limit.)
"""
from __future__ import annotations

import threading

#: the longest a new thread may take to begin running (a loaded machine's is milliseconds)
START_SECONDS = 30.0


class _Started(threading.Event):
    """A thread's "it runs" event, whose endless wait (``Thread.start``'s) has a limit."""

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is not None:
            return super().wait(timeout)
        if super().wait(START_SECONDS):
            return True
        raise RuntimeError(f"can't start new thread: {self.name} did not begin running within "
                           f"{START_SECONDS:g} s (memory ran out as Python set it up)")


def start(thread: threading.Thread) -> threading.Thread:
    """``thread.start()``, raising RuntimeError where the thread does not begin within
    :data:`START_SECONDS`; returns ``thread``."""
    started = _Started()
    started.name = thread.name
    thread._started = started  # Thread.start waits on it
    thread.start()
    return thread
