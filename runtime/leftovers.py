"""Processes a kernel started and left running: ended with the run, and named.

A kernel that starts a process and returns without waiting for it (``subprocess.Popen``,
``os.system("cmd &")``) leaves it holding the run's stdout and stderr: ``tiledsl run ... | tee
log`` then waited for it after the summary, for ever for a process that never ends. A process
that is tiledsl's own (the command line, a driver, a rank of ``--np``) becomes the *child
subreaper* of what it starts (Linux's ``PR_SET_CHILD_SUBREAPER``), so that a process orphaned
below it (``sh -c "sleep 60 &"``) is re-parented to it rather than to init; when the run ends,
its children that were not there before are asked to end (SIGTERM), then killed, and a warning
names them, and the process is no subreaper any more (unless it was one before). Elsewhere (no
``prctl``) only direct children are found.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from dataclasses import dataclass

_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37
GRACE_SECONDS = 1.0  # how long a process left behind has to end on SIGTERM before SIGKILL


@dataclass(frozen=True)
class Adoption:
    """What :func:`adopt_orphans` found: this process's children then (not the run's), and whether it
    was a subreaper already (given back by :func:`end_leftovers`)."""

    children: frozenset
    was_subreaper: bool


def adopt_orphans() -> Adoption:
    """Make this process the subreaper of the processes started below it (Linux), until
    :func:`end_leftovers`: a process that goes on after the run (a test runner, an application)
    must not adopt what others orphan, nor keep the processes it starts from their launcher's
    notice that their parent died (a launcher checks that its parent became init)."""
    was = _subreaper()
    _set_subreaper(True)
    return Adoption(frozenset(children()), was)


def _subreaper() -> bool:
    flag = ctypes.c_int(0)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)
    return bool(flag.value)


def _set_subreaper(on: bool) -> None:
    with contextlib.suppress(OSError, AttributeError):  # not Linux: only direct children are found
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)


def children(pid: int | str = "self") -> list[int]:
    """The pids of the living children of process ``pid`` (any of its threads'), [] where not known."""
    found = []
    with contextlib.suppress(OSError):
        for thread in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError):
                with open(f"/proc/{pid}/task/{thread}/children") as pids:
                    found += [int(child) for child in pids.read().split()]
    return [child for child in dict.fromkeys(found) if _alive(child)]


def _with_descendants(pids: list[int]) -> list[int]:
    """``pids`` and every process below them: a shell's `sleep` would outlive the shell, and holds the
    output as well."""
    found, unseen = [], list(pids)
    while unseen:
        pid = unseen.pop()
        if pid not in found:
            found.append(pid)
            unseen += children(pid)
    return found


def _multiprocessings() -> set[int]:
    """The processes Python's multiprocessing started and ends itself as this process exits (a Pool's
    workers; killed before, its exit handler waited for them for ever), and its resource tracker."""
    multiprocessing = sys.modules.get("multiprocessing")
    if multiprocessing is None:
        return set()
    ours = {process.pid for process in multiprocessing.active_children()}
    tracker = getattr(sys.modules.get("multiprocessing.resource_tracker"), "_resource_tracker", None)
    return ours | ({tracker._pid} if getattr(tracker, "_pid", None) else set())


#: processes the runtime itself started (a rank's start-up watcher, :func:`.world._start_up_watch`):
#: ended with the kernels' leftovers where the rank ends with them, but not named as a kernel's
runtime_children: set = set()


def end_leftovers(adoption: Adoption, exiting_normally: bool = True) -> list[str]:
    """End this process's children that were not there at ``adoption``: SIGTERM, SIGKILL after
    :data:`GRACE_SECONDS`; each as 'pid N (command line)' for the warning, [] if none. The process
    is a subreaper again only if it was one before. Multiprocessing's own children are spared where
    the process is ``exiting_normally``: its exit handler ends them (it does not run under
    ``os._exit``, where a pool's worker blocked on a lock outlived the run, holding its output)."""
    spared = adoption.children | (_multiprocessings() if exiting_normally else set())
    left = [pid for pid in children() if pid not in spared]
    named = [f"pid {pid} ({_command_line(pid)})" for pid in left if pid not in runtime_children]
    left = _with_descendants(left)
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)
        deadline = time.monotonic() + GRACE_SECONDS
        while left and time.monotonic() < deadline:
            left = [pid for pid in left if not _reaped(pid)]
            time.sleep(0.02)
    if not adoption.was_subreaper:
        _set_subreaper(False)
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
    """A process's command line; while it execs another program it has none for a moment, and its
    executable's name (``comm``) stands in for it; "?" once it is gone."""
    for source in ("cmdline", "comm"):
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/{source}", "rb") as line:
                text = line.read().replace(b"\0", b" ").decode(errors="replace").strip()[:80]
            if text:
                return text
    return "?"
