"""Processes a kernel started and left running: ended with the run, and named.

A kernel that starts a process and returns without waiting for it (``subprocess.Popen``,
``os.system("cmd &")``) leaves it holding the run's stdout and stderr: ``tiledsl run ... | tee
log`` then waited for it after the summary, for ever for a process that never ends. A process
that is tiledsl's own (the command line, a driver, a rank of ``--np``) becomes the *child
subreaper* of what it starts (Linux's ``PR_SET_CHILD_SUBREAPER``), so that a process orphaned
below it (``sh -c "sleep 60 &"``) is re-parented to it rather than to init; when the run ends,
its children that were not there before are asked to end (SIGTERM), then killed, and a warning
names them. Elsewhere (no ``prctl``) only direct children are found.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time

_PR_SET_CHILD_SUBREAPER = 36
GRACE_SECONDS = 1.0  # how long a process left behind has to end on SIGTERM before SIGKILL


def adopt_orphans() -> set[int]:
    """Make this process the subreaper of the processes started below it (Linux); the pids of its
    children now, which are not the run's."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    return set(children())


def children() -> list[int]:
    """The pids of this process's living children (any of its threads'), [] where not known."""
    found = []
    with contextlib.suppress(OSError):
        for thread in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError, ValueError):
                with open(f"/proc/self/task/{thread}/children") as pids:
                    found += [int(pid) for pid in pids.read().split()]
    return [pid for pid in dict.fromkeys(found) if _alive(pid)]


def end_leftovers(before: set[int]) -> list[str]:
    """End this process's children that were not in ``before``: SIGTERM, SIGKILL after
    :data:`GRACE_SECONDS`; each as 'pid N (command line)' for the warning, [] if none."""
    left = [pid for pid in children() if pid not in before]
    named = [f"pid {pid} ({_command_line(pid)})" for pid in left]
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)
        deadline = time.monotonic() + GRACE_SECONDS
        while left and time.monotonic() < deadline:
            left = [pid for pid in left if not _reaped(pid)]
            time.sleep(0.02)
    return named


def _reaped(pid: int) -> bool:
    """Whether ``pid`` has ended (and is collected, not left a zombie)."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:  # not ours to wait for (or already collected)
        return not _alive(pid)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not collected, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _command_line(pid: int) -> str:
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/cmdline", "rb") as line:
            return line.read().replace(b"\0", b" ").decode(errors="replace").strip()[:80] or "?"
    return "?"
