"""Kernels that misbehave on purpose, for the fault tests."""
import os
import signal
import sys
import time


def poison(a):
    """Write a NaN where no check would look (above the diagonal)."""
    a[0, a.shape[1] - 1] = float("nan")


def stall(a):
    """Never finish in any reasonable time (stopped by SIGSTOP where $FAULT_STOP is set); say it
    started where $FAULT_STARTED names a file."""
    if os.environ.get("FAULT_STARTED"):
        open(os.environ["FAULT_STARTED"], "w").close()
    os.kill(os.getpid(), signal.SIGSTOP) if os.environ.get("FAULT_STOP") else time.sleep(600)


def die(a):
    """The process disappears, as if the node or the OOM killer took it (rank 1 only)."""
    if os.environ.get("PMI_RANK") == "1":
        os.kill(os.getpid(), 9)


def scribble(a, b):
    """Write the `in` argument A (on two ranks, a copy of the tile: the ranks would disagree)."""
    a[0, 0] = 0.0
    b[0, 0] += 1.0


def leave(a):
    """End the process as if all were well."""
    sys.exit(0)


def interrupt(a):
    """Raise what Ctrl-C raises, from a worker thread."""
    raise KeyboardInterrupt


class Escape(BaseException):
    """Neither an Exception nor an exit: what a kernel might raise to unwind everything."""


def escape(a):
    raise Escape("unwinding")


def nap(a, b):
    """A slow kernel (a second) reading the previous diagonal tile: a chain through every rank."""
    time.sleep(1.0)


def mute(a):
    """Close stdout and stderr (as a library might), then fail: the rank cannot say why (rank 1 only)."""
    if os.environ.get("PMI_RANK") == "1":
        os.close(1)
        os.close(2)
        raise RuntimeError("failed with no stream left to say it")


def halt(a):
    """Send this process SIGTERM, as a batch system or an administrator might one rank (rank 1 only)."""
    if os.environ.get("PMI_RANK") == "1":
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)


def hush(a):
    """Close Python's sys.stdout and sys.stderr, then fail (rank 1 only)."""
    if os.environ.get("PMI_RANK") == "1":
        sys.stdout.close()
        sys.stderr.close()
        raise RuntimeError("failed with no stream left to say it")
