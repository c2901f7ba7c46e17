"""A kernel stopped in Python's debugger (``breakpoint()`` in its code): the run waits for the person at the prompt.

While a kernel's task is in the debugger the progress bar is not drawn (it wrote over the prompt four
times a second) and the watchdog counts no stall (it failed the run after a minute at the prompt); the
watchdog's clock starts again when the task returns. ``breakpoint()`` stops in the kernel's own frame,
as it does outside a run; ``PYTHONBREAKPOINT`` is honoured (``0``: breakpoints are skipped). On several
ranks only rank 0 reads the terminal (the launcher gives the others no input), and the other ranks'
watchdogs keep counting: debug on one rank, or give ``--watchdog 0``.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading

_in_debugger: set = set()  # the threads whose kernel called breakpoint(), until their task returns


def active() -> bool:
    """Whether some kernel of this process is in the debugger."""
    return bool(_in_debugger)


def task_returned() -> None:
    """The calling worker's task returned: it is no longer in the debugger (if it was)."""
    _in_debugger.discard(threading.get_ident())


@contextlib.contextmanager
def breakpoints_noticed():
    """Within: ``breakpoint()`` in a kernel marks its thread as in the debugger (:func:`active`), then
    stops there. A hook the program set itself is kept, and called the same way."""
    previous = sys.breakpointhook

    def hook(*args, **kws):
        wanted = os.environ.get("PYTHONBREAKPOINT", "")
        if wanted == "0":
            return None
        _in_debugger.add(threading.get_ident())
        if previous is sys.__breakpointhook__ and wanted in ("", "pdb.set_trace"):
            import pdb

            if sys.stderr.isatty():  # the progress bar's line, which the debugger's first line would continue
                sys.stderr.write("\r\033[K")
            return pdb.Pdb().set_trace(sys._getframe(1))  # the kernel's frame (this hook's would be pdb's)
        return previous(*args, **kws)

    sys.breakpointhook = hook
    try:
        yield
    finally:
        if sys.breakpointhook is hook:
            sys.breakpointhook = previous
        _in_debugger.clear()
