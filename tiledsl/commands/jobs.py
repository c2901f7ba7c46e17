"""Running the ranks of an MPI job from the command line, and cleaning up after it.

:func:`run_job` starts the launcher (``mpiexec -n P python driver.py ...``),
forwards SIGINT, SIGTERM and SIGHUP to it (so every rank hears them once, and
the launcher is never left running without us), kills every process of the job
when it has not ended :data:`GRACE_SECONDS` after the first signal, checks that
every rank finished its run (each records it in the job's folder), and removes
what a failed job leaves behind.

MPICH keeps the ranks of a node in touch through a shared-memory segment
(``/dev/shm/mpich_shm_*``) that the ranks unlink when they finalize; a job that
is aborted, interrupted or loses a rank to SIGKILL never gets there, and the
segment stays until reboot. Hydra (MPICH's ``mpiexec``) also writes topology
files under ``$TMPDIR``. ``tiledsl run --np`` runs the job in a private
``$TMPDIR`` and, after a failed job, removes the segments that appeared during
it and that no process maps any more.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHARED_MEMORY = Path("/dev/shm")
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# mpiexec (hydra) passes SIGINT and SIGTERM on to the ranks but dies of SIGHUP, leaving them
# to be killed without a word: the ranks are sent SIGTERM instead (they stop as for SIGHUP)
SENT_FOR = {signal.SIGHUP: signal.SIGTERM}
PR_SET_PDEATHSIG = 1  # prctl(2)
GRACE_SECONDS = 30  # after the first forwarded signal, how long the job has to end before it is killed
ORPHAN_WAIT = 3.0  # after a failed job, how long its ranks have to let go of their segments
STALE_SECONDS = 600.0  # what a killed job left (segments, its folder) is removed by a later job after this
JOB_DIR_VARIABLE = "TILEDSL_JOB_DIR"  # as runtime.world names it: where ranks record their completion
JOB_PID_VARIABLE = "TILEDSL_JOB_PID"  # as runtime.world names it: this process, which no rank outlives


def run_job(command: list[str], ranks: int | None = None, grace: float = GRACE_SECONDS) -> int:
    """Run ``command`` (a launcher and its ``ranks`` ranks) to its end; its exit status.

    128+N after a forwarded signal N (whatever the job returned); 1 when the launcher
    returned 0 but some rank did not record that it finished the run (it exited in
    the middle: ``os._exit(0)``, ``sys.exit(0)``), or when a rank was lost (killed by a
    signal: the launcher's own status, 9 or 11, is said, not returned).
    """
    remove_stale()
    before = segments()
    with private_tmpdir(os.environ) as environment:
        if sys.stderr.isatty():  # the ranks' stderr is a pipe: rank 0's progress bar asks for it (16.11)
            environment["TILEDSL_PROGRESS"] = "1"
        folder = environment[JOB_DIR_VARIABLE]
        environment[JOB_PID_VARIABLE] = str(os.getpid())  # a rank ends when we are gone, even killed
        # a session of its own: a Ctrl-C reaches the job once, through us, not twice
        job = subprocess.Popen(command, env=environment, start_new_session=True,
                               preexec_fn=_ended_with(os.getpid()))
        code = _wait_forwarding_signals(job, folder, grace)
        if code == 0 and ranks is not None:
            code = _check_every_rank_finished(folder, ranks)
        elif code != 0 and not _forwarded_signal(code):
            code = _recorded_failure(folder, code) if code > 3 else code
            # 141: the launcher died of SIGPIPE, its reader gone (`| head`), a quiet end
            if code != 128 + signal.SIGPIPE and not _some_rank_reported(folder) and \
                    _report_lost_ranks(folder, ranks, code, command[0]) and code > 3:
                code = 1  # a rank lost is a program error (options.EXIT_CODES), not the launcher's status
        if code != 0:
            kill_job(job, folder)
    if code != 0:
        remove_orphans(before)
    return code


def _ended_with(parent: int):
    """What the launcher runs before it starts: Linux sends it SIGTERM, which it passes on to the
    ranks, when ``parent`` (this process) dies, even of SIGKILL, which no handler of ours sees;
    without it the job would run on, orphaned. Elsewhere, nothing."""
    def die_with_parent() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        except (OSError, AttributeError):  # not Linux
            return
        if os.getppid() != parent:  # it died before the call took effect
            os.kill(os.getpid(), signal.SIGTERM)
    return die_with_parent if sys.platform.startswith("linux") else None


def _check_every_rank_finished(folder: str, ranks: int) -> int:
    """0 when every rank recorded that it finished its run with status 0, else 1 (said on stderr)."""
    unfinished = [rank for rank in range(ranks) if _recorded_status(folder, rank) != "0"]
    if unfinished:
        print(f"tiledsl: error: rank {', '.join(map(str, unfinished))} ended without finishing the run",
              file=sys.stderr, flush=True)
    return 1 if unfinished else 0


def _some_rank_reported(folder: str) -> bool:
    """Whether a rank recorded a failure: it printed why before it ended the job."""
    return any(text.strip() not in ("", "0") for text in _read_markers(folder))


def _report_lost_ranks(folder: str, ranks: int | None, code: int, launcher: str) -> bool:
    """Say which ranks ended without a word (killed by a signal, lost), or that none started,
    when none said why; whether there were such ranks."""
    if ranks is None:
        return False
    lost = [rank for rank in range(ranks) if _recorded_status(folder, rank) is None]
    if not lost:
        return False
    if not any(Path(folder).glob("started.*")):
        print(f"tiledsl: error: no rank started: the launcher ({launcher}) ended with exit status {code} before "
              f"any rank reached tiledsl (or every rank died while starting)", file=sys.stderr, flush=True)
        return True
    crashed = _crashes(folder, lost)
    for rank, stack in crashed.items():
        first, _, rest = stack.strip().partition("\n")
        print(f"tiledsl: error: rank {rank} crashed: {first}\n{rest.rstrip()}", file=sys.stderr, flush=True)
    lost = [rank for rank in lost if rank not in crashed]
    if crashed and lost:
        print(f"tiledsl: error: the launcher then ended rank {', '.join(map(str, lost))}", file=sys.stderr, flush=True)
    if crashed:
        return True
    # once one rank dies the launcher kills the others, so which one died first cannot be told
    why = ("at least one died (a crash, a signal) and the launcher then ended the others" if len(lost) > 1
           else "killed by a signal, or lost")
    print(f"tiledsl: error: rank {', '.join(map(str, lost))} ended without finishing the run and without "
          f"a word ({why}; the launcher's exit status is {code})", file=sys.stderr, flush=True)
    return True


def _crashes(folder: str, ranks: list) -> dict:
    """Rank -> the stack its crash left (:mod:`tiledsl.runtime.crash`), for those of ``ranks`` that
    crashed."""
    stacks = {}
    for rank in ranks:
        try:
            stack = Path(folder, f"crash.{rank}").read_text(errors="replace")
        except OSError:
            continue
        if stack.strip():
            stacks[rank] = stack
    return stacks


def _forwarded_signal(code: int) -> bool:
    return code > 128 and code - 128 in FORWARDED


def _recorded_failure(folder: str, code: int) -> int:
    """The exit status a rank recorded before it was killed (its start-up watcher kills a rank
    stuck in MPI, whose launcher then reports the SIGKILL), else the launcher's ``code``."""
    recorded = [text for text in map(str.strip, _read_markers(folder)) if text in ("1", "2", "3")]
    return int(min(recorded)) if recorded else code


def _read_markers(folder: str) -> list:
    texts = []
    for marker in Path(folder).glob("done.*"):
        with contextlib.suppress(OSError):
            texts.append(marker.read_text())
    return texts


def _recorded_status(folder: str, rank: int) -> str | None:
    try:
        return Path(folder, f"done.{rank}").read_text().strip()
    except OSError:
        return None


def kill_job(job: subprocess.Popen, folder: str) -> None:
    """Kill every process of the job: the launcher's process group, and the processes that
    carry the job's folder in their environment (hydra starts its proxies and the ranks in
    sessions of their own, beyond the reach of the launcher's group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(job.pid, signal.SIGKILL)
    for pid in job_processes(folder):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def job_processes(folder: str) -> list[int]:
    """The processes (of this user) whose environment names ``folder`` as their job's."""
    marker = f"{JOB_DIR_VARIABLE}={folder}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError):
            if marker in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
    return found


def _wait_forwarding_signals(job: subprocess.Popen, folder: str, grace: float) -> int:
    """Wait for the job, forwarding signals; ``grace`` seconds after the first one, kill it all."""
    received = []

    def forward(signum, frame):
        received.append(signum)
        with contextlib.suppress(ProcessLookupError):
            job.send_signal(SENT_FOR.get(signum, signum))
        if len(received) == 1:
            raise _Forwarded  # out of a wait without a deadline (waitpid resumes after a handler)

    previous = {signum: signal.signal(signum, forward) for signum in FORWARDED}
    try:
        code = _wait(job, None)
    except _Forwarded:
        code = None
    try:
        if code is None and _wait(job, grace) is None:
            kill_job(job, folder)
            code = job.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received:
        return 128 + received[0]
    return 128 - code if code < 0 else code


class _Forwarded(Exception):
    """The first signal was forwarded: the grace period starts."""


def _wait(job: subprocess.Popen, timeout: float | None) -> int | None:
    """The job's exit status, or None if it is still running after ``timeout`` seconds."""
    try:
        return job.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def segments() -> set[Path]:
    """This user's MPICH shared-memory segments now."""
    try:
        return {p for p in SHARED_MEMORY.glob("mpich_shm_*") if p.stat().st_uid == os.getuid()}
    except OSError:
        return set()


def mapped() -> set[str]:
    """Paths under /dev/shm that some process of this user maps."""
    found = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        with contextlib.suppress(OSError):
            found.update(line.split(None, 5)[5].strip() for line in maps.read_text().splitlines()
                         if "/dev/shm/" in line and len(line.split(None, 5)) == 6)
    return found


def remove_orphans(before: set[Path], wait: float = ORPHAN_WAIT) -> list[Path]:
    """Remove the segments made since ``before`` that no process maps; the paths removed.

    The ranks of a failed job may still be exiting when the launcher returns: a
    segment one of them maps is given up to ``wait`` seconds to be let go.
    """
    deadline = time.monotonic() + wait
    while True:
        made = sorted(segments() - before)
        in_use = mapped() if made else set()
        if not any(str(p) in in_use for p in made) or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    orphans = [p for p in made if str(p) not in in_use]
    for path in orphans:
        with contextlib.suppress(OSError):
            path.unlink()
    return orphans


def remove_stale(age: float = STALE_SECONDS) -> None:
    """Remove what jobs whose ``tiledsl run`` was killed (SIGKILL: nothing of ours ran) left: this
    user's MPICH segments no process maps, and job folders no process names, older than ``age``
    seconds (a job starting now has made neither, or maps them)."""
    now = time.time()
    old = [p for p in segments() if _age(p, now) > age]
    folders = [p for p in Path(tempfile.gettempdir()).glob("tiledsl-job-*")
               if _age(p, now) > age and p.stat().st_uid == os.getuid()]
    if old:
        in_use = mapped()
        for path in old:
            if str(path) not in in_use:
                with contextlib.suppress(OSError):
                    path.unlink()
    for folder in folders:
        if not job_processes(str(folder)):
            shutil.rmtree(folder, ignore_errors=True)


def _age(path: Path, now: float) -> float:
    try:
        return now - path.stat().st_mtime
    except OSError:
        return 0.0


@contextlib.contextmanager
def private_tmpdir(environment: dict):
    """``environment`` with TMPDIR (and the job's folder) pointing at a directory removed on exit."""
    with tempfile.TemporaryDirectory(prefix="tiledsl-job-") as folder:
        yield dict(environment, TMPDIR=folder, **{JOB_DIR_VARIABLE: folder})
