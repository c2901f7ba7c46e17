"""The MPI communication thread (runtime/comm.py), exercised in real multi-rank jobs.

Each test launches a helper script from ``tests/runtime/mpi/`` under ``mpiexec``
(MPI can be initialised once per process, so never in the pytest process
itself); the script checks its ranks' results and prints "ok".
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tiledsl.commands import jobs

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "mpi"
_BESIDE = Path(sys.executable).with_name("mpiexec")  # the launcher of the mpich wheel in use
MPIEXEC = str(_BESIDE) if _BESIDE.exists() else shutil.which("mpiexec")

pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec")


def mpirun(script: str, ranks: int, *args, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``script`` on ``ranks`` ranks; on timeout, kill the whole job (its own process group)."""
    command = [MPIEXEC, "-n", str(ranks), sys.executable, str(SCRIPTS / script), *map(str, args)]
    before = jobs.segments()
    job = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    try:
        stdout, stderr = job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        stdout, stderr = job.communicate()
        pytest.fail(f"{script} on {ranks} ranks ran past {timeout} s\n{stdout}\n{stderr}")
    finally:
        if job.returncode != 0:  # an aborted job leaves MPICH's shared memory, as `tiledsl run --np` would not
            jobs.remove_orphans(before)
    return subprocess.CompletedProcess(command, job.returncode, stdout, stderr)


def assert_ok(result: subprocess.CompletedProcess) -> None:
    """The job exited 0 and rank 0 printed "ok"."""
    assert result.returncode == 0 and "ok" in result.stdout.split(), \
        f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"


@pytest.mark.timeout(120)
def test_many_messages_both_ways_arrive_intact_and_in_order():
    assert_ok(mpirun("comm_traffic.py", 2, 40, 4))


@pytest.mark.timeout(120)
def test_all_to_all_on_four_ranks():
    assert_ok(mpirun("comm_traffic.py", 4, 15, 3))


@pytest.mark.timeout(120)
def test_stop_cancels_receives_waits_for_sends_and_callbacks_errors_are_kept():
    assert_ok(mpirun("comm_stop.py", 2))


@pytest.mark.timeout(120)
def test_collectives_from_the_main_thread_while_the_comm_thread_runs():
    assert_ok(mpirun("comm_collectives.py", 3))


@pytest.mark.timeout(120)
def test_refuses_mpi_without_thread_multiple():
    result = mpirun("comm_thread_level.py", 1)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "MPI_THREAD_SERIALIZED" in result.stdout and "MPI_THREAD_MULTIPLE" in result.stdout


@pytest.mark.timeout(120)
def test_abort_on_one_rank_ends_every_rank():
    start = time.monotonic()
    result = mpirun("comm_abort_probe.py", 3, timeout=30)
    # mpiexec ends with the code rank 2 aborted with; the rank's own "aborting" line may be
    # lost, as the abort can take mpiexec's output forwarding down before it is flushed
    assert result.returncode == 3, f"{result.stdout}\n{result.stderr}"
    assert time.monotonic() - start < 30
    deadline = time.monotonic() + 5
    while (left := _running("comm_abort_probe.py")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes left behind: {left}"


def _running(name: str) -> str:
    """Command lines of live processes whose command line mentions ``name``."""
    return subprocess.run(["pgrep", "-af", name], capture_output=True, text=True).stdout.strip()


@pytest.mark.timeout(90)
def test_a_collective_a_stopped_rank_never_reaches_ends_at_the_limit_naming_that_rank():
    assert_ok(mpirun("comm_deadline.py", 2, "stopped", timeout=60))


@pytest.mark.timeout(90)
def test_a_stop_sent_while_mpi_starts_without_a_rank_ends_the_rank_in_seconds():
    """A SIGTERM to rank 0 while MPI's start waited for a rank stopped before it: held back there, it
    waited until the start-up limit (60 s), the job then ending as a rank too late, not as stopped."""
    began = time.monotonic()
    result = mpirun("start_stopped.py", 2, timeout=60)
    assert time.monotonic() - began < 20, result.stderr
    assert "tiledsl: rank 0: stopped by SIGTERM (while it was starting)\n" in result.stderr, result.stderr
    assert "MPI started" not in result.stdout and "did not answer" not in result.stderr, result.stderr


@pytest.mark.timeout(90)
def test_a_collective_waits_past_the_limit_for_a_rank_that_is_late_but_alive():
    assert_ok(mpirun("comm_deadline.py", 2, "late", timeout=60))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("first", [None, 2])
def test_of_ranks_failing_together_or_one_after_another_one_reports(first):
    """None: every rank fails at once; 2: rank 2 fails 0.5 s before the others."""
    result = mpirun("comm_first_failure.py", 4, *([first] if first is not None else []))
    assert result.returncode == 0 and "ok" in result.stdout.split(), result.stdout + result.stderr
