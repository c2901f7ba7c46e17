"""A one-rank ``tiledsl run`` watched from outside, as ``tiledsl run --np`` watches its ranks.

A kernel's code can end its process where no Python code of the run sees it: ``posix._exit``, a C
library's ``exit()`` (a Fortran ``STOP`` in a wrapped library), ``MPI_Abort``, a crash. Run in the
command's own process, the run then ended with that status, 0 among them, having said nothing: a
false success; a crash printed faulthandler's stacks of every thread. So, where it can fork (Linux),
the command forks as the run begins: the child runs it as before (the same memory and streams)
and records its completion, and a crash's stack, in a folder of its own as a job's ranks do
(:func:`~tiledsl.runtime.world.record_completion`, :mod:`tiledsl.runtime.crash`); the parent waits
and says what the child could not: that it ended without finishing the run, or crashed (in the
words ``--np`` uses). As ``--np``'s ranks, the child has a session of its own (so it has no controlling
terminal: a kernel cannot open ``/dev/tty``), and the parent passes it the first SIGINT, SIGTERM, SIGHUP
or SIGQUIT it gets (a Ctrl-C reached it twice, through the terminal and from the parent), and stops it
with itself on Ctrl-Z; the child ends if the parent dies.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import select
import shutil
import signal
import sys
import tempfile

from ..runtime.reporting import failure_json, json_text
from ..runtime.world import JOB_DIR_VARIABLE, launched_by_mpi, process_exists
from .jobs import PR_SET_PDEATHSIG, UNSEEN_ENDS, crashes, recorded_status, report_crashes, signal_name

#: the file the child leaves in its folder once the run returned to the command (or raised to it)
RETURNED = "returned"


def can_watch() -> bool:
    """Whether this process can run a one-rank run in a watched child: on Linux, not itself a rank of a
    job (a launcher, or ``tiledsl run --np``, watches it)."""
    return (sys.platform.startswith("linux") and hasattr(os, "fork") and not os.environ.get(JOB_DIR_VARIABLE)
            and not launched_by_mpi())


def watched(run, program: str | None, n: int | None, program_file: str | None, json_wanted: bool) -> int:
    """The exit status of ``run()`` (a one-rank run of ``program``), run in a forked child: in the child, the
    run's own status (it goes on as the command's process); in the parent, the child's, or 1 where it ended
    without finishing the run (said, with ``--json``'s failure object where ``json_wanted``)."""
    _remove_abandoned()
    try:
        folder = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-")
    except OSError:  # no writable temporary folder: the run goes on in this process, unwatched
        return run()
    parent = os.getpid()
    for stream in (sys.stdout, sys.stderr):  # what is buffered is said once, not by both processes
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    # the stopping signals wait across the fork: one that came in its first milliseconds was lost (the parent
    # not yet passing it on) or taken twice (by the parent's handler, and by the child's fork hooks)
    held = signal.pthread_sigmask(signal.SIG_BLOCK, PASSED_ON)
    child = os.fork()
    if child == 0:
        os.setsid()
        os.environ[JOB_DIR_VARIABLE] = folder
        _end_with_parent()
        try:  # (a signal passed on meanwhile comes as the mask is put back: inside, so that it is said once)
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            return run()
        finally:  # the run returned, or raised for the command's handlers: Python code ends it, saying why
            with contextlib.suppress(OSError):
                open(os.path.join(folder, RETURNED), "w").close()
            if os.getppid() != parent:  # the parent is gone (killed): nobody else removes the folder
                shutil.rmtree(folder, ignore_errors=True)
    try:
        return _outcome(_wait(child, held), folder, program, n, program_file, json_wanted, child)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


#: the signals the parent passes on to the child (the first of them only: a repeated one changes nothing)
PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


#: the start of a watched run's folder's name, the parent's pid after it
FOLDER_PREFIX = "tiledsl-run-"


def _remove_abandoned() -> None:
    """Remove the folders of watched runs whose parent died without removing them (killed, the child then
    ended by SIGTERM), as a job's are (:func:`~.jobs.remove_stale`)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(tempfile.gettempdir()):
            owner = entry.name.removeprefix(FOLDER_PREFIX).split("-", 1)[0]
            if entry.name.startswith(FOLDER_PREFIX) and owner.isdigit() and not process_exists(int(owner)):
                shutil.rmtree(entry.path, ignore_errors=True)


def _end_with_parent() -> None:
    """SIGKILL to this process when its parent dies (of SIGKILL, of a signal it does not pass on): the run
    ends with the command's process, as it did in it, rather than going on to say, over the shell's
    prompt, that it was stopped."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


#: the signal passed on to the child, once one was (a run stopped so is said as stopped, not as lost)
_passed: list = []


def _wait(child: int, held) -> int:
    """The child's exit status (-N: killed by signal N), the first stopping signal passed on to it (those
    the command was started ignoring stay ignored: nohup's SIGHUP; a repeated one changes nothing, as for
    ``--np``), Ctrl-Z stopping it too; ``held``: the signal mask to put back once the handlers are set."""
    def pass_on(signum, frame):
        _passed.append(signum)
        if len(_passed) == 1:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)

    def suspend(signum, frame):  # stopped with the child, and both go on together (fg, bg)
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGSTOP)
            os.kill(os.getpid(), signal.SIGSTOP)
            os.kill(child, signal.SIGCONT)

    for signum in PASSED_ON:
        if signal.getsignal(signum) != signal.SIG_IGN:
            signal.signal(signum, pass_on)
    signal.signal(signal.SIGTSTP, suspend)
    signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a signal that came since the fork is passed on now
    return os.waitstatus_to_exitcode(_ended(child))


#: seconds between looks at a child that cannot be watched by a file descriptor (no pidfd)
LOOK_SECONDS = 0.1


def _ended(child: int) -> int:
    """The wait status of ``child`` once it has ended, the handlers of signals that come meanwhile run as they
    come. Not a blocking ``waitpid``: a signal that came just before it began (its handler noted, not yet run)
    was run only once the child had ended, so a Ctrl-C 2 ms after the fork was lost and the run succeeded
    (1 in ~200 under load). The wait is a ``select`` that the signal's wake-up byte ends, and the child's end."""
    woken, waking = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    watched = [woken]
    with contextlib.suppress(OSError, AttributeError):  # Linux 5.3: the child's end makes its pidfd readable
        watched.append(os.pidfd_open(child))
    try:
        previous = signal.set_wakeup_fd(waking, warn_on_full_buffer=False)
    except ValueError:  # not the main thread (a test's): no handler runs here anyway
        previous = None
    try:
        while True:
            pid, status = os.waitpid(child, os.WNOHANG)
            if pid:
                return status
            select.select(watched, [], [], LOOK_SECONDS if len(watched) == 1 else None)
            with contextlib.suppress(BlockingIOError):
                os.read(woken, 512)
    finally:
        if previous is not None:
            signal.set_wakeup_fd(previous)
        for fd in (*watched, waking):
            os.close(fd)


def _outcome(code: int, folder: str, program: str | None, n: int | None, program_file: str | None,
             json_wanted: bool, child: int) -> int:
    """The command's status once the child ended with ``code``: its own where it recorded the end of
    its run; else what ended it, said, and 1 (128 + N where it was stopped by the signal N passed on).
    The processes a kernel started, which the run ends with it, are ended where it could not (tester z:
    a crash left a kernel's `sleep 75` holding the command's output, and `| cat` waited for it)."""
    if code >= 0 and os.path.exists(os.path.join(folder, RETURNED)):
        return code
    recorded = recorded_status(folder, 0)
    if recorded is not None:  # (ended by the run itself, or killed as it exited, after its summary)
        return code if code >= 0 else int(recorded) if recorded.isdigit() else 1
    with contextlib.suppress(OSError):  # the child's process group, which its session began with
        os.killpg(child, signal.SIGKILL)
    crashed, status = crashes(folder, [0]), 1
    if crashed:
        error = "; ".join(report_crashes(crashed, program_file))
    elif _passed and code in (-_passed[0], 128 + _passed[0]):  # (killed by it, or ended as it asks)
        error, status = f"stopped by {signal_name(_passed[0])}", 128 + _passed[0]
        print(f"tiledsl: {error}", file=sys.stderr, flush=True)
    else:
        how = f"was killed by {signal_name(-code)}" if code < 0 else f"ended with exit status {code}"
        hint = (" (the system's out-of-memory killer sends it, see `dmesg`, as does `kill -9`)"
                if code == -signal.SIGKILL else f": code the run called ended the process ({UNSEEN_ENDS})"
                if code >= 0 else "")
        error = f"rank 0 {how} without finishing the run{hint}"
        print(f"tiledsl: error: {error}", file=sys.stderr, flush=True)
    if json_wanted:
        print(json_text({**failure_json(program, n, 1), "error": error}), flush=True)
    return status
