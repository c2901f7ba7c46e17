"""Running the ranks of an MPI job from the command line, and cleaning up after it.

:func:`run_job` starts the launcher (``mpiexec -n P python driver.py ...``),
forwards SIGINT, SIGTERM and SIGHUP to it (so every rank hears them once, and
the launcher is never left running without us), and removes what a failed job leaves behind.

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
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHARED_MEMORY = Path("/dev/shm")
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_SECONDS = 30  # after a forwarded signal, how long the job has to end before it is killed
ORPHAN_WAIT = 3.0  # after a failed job, how long its ranks have to let go of their segments


def run_job(command: list[str]) -> int:
    """Run ``command`` (a launcher and its ranks) to its end; its exit status, 128+N for signal N."""
    before = segments()
    with private_tmpdir(os.environ) as environment:
        if sys.stderr.isatty():  # the ranks' stderr is a pipe: rank 0's progress bar asks for it (16.11)
            environment["TILEDSL_PROGRESS"] = "1"
        # a session of its own: a Ctrl-C reaches the job once, through us, not twice
        job = subprocess.Popen(command, env=environment, start_new_session=True)
        code = _wait_forwarding_signals(job)
    if code != 0:
        _kill_stragglers(job)
        remove_orphans(before)
    return code


def _kill_stragglers(job: subprocess.Popen) -> None:
    """Kill what is left of a failed job's process group (ranks the launcher has not reaped yet)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(job.pid, signal.SIGKILL)


def _wait_forwarding_signals(job: subprocess.Popen) -> int:
    received = []

    def forward(signum, frame):
        received.append(signum)
        job.send_signal(signum)

    previous = {signum: signal.signal(signum, forward) for signum in FORWARDED}
    try:
        while True:
            try:
                code = job.wait(timeout=GRACE_SECONDS if received else None)
                break
            except subprocess.TimeoutExpired:
                job.kill()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 128 - code if code < 0 else code


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


@contextlib.contextmanager
def private_tmpdir(environment: dict):
    """``environment`` with TMPDIR pointing at a directory removed on exit."""
    with tempfile.TemporaryDirectory(prefix="tiledsl-job-") as folder:
        yield dict(environment, TMPDIR=folder)
