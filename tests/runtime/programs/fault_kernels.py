"""Kernels that misbehave on purpose, for the fault tests."""
import os
import time


def poison(a):
    """Write a NaN where no check would look (above the diagonal)."""
    a[0, a.shape[1] - 1] = float("nan")


def stall(a):
    """Never finish in any reasonable time."""
    time.sleep(600)


def die(a):
    """The process disappears, as if the node or the OOM killer took it (rank 1 only)."""
    if os.environ.get("PMI_RANK") == "1":
        os.kill(os.getpid(), 9)
