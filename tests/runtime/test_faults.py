"""Faults end a run promptly with a clear message: NaN, stalls, signals, a killed rank."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tiledsl.commands import jobs

# Their jobs fail and are killed on purpose and they count what is left in /dev/shm: one
# pytest-xdist worker runs them all, one after the other.
pytestmark = pytest.mark.xdist_group("shared-memory")

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = "tests/runtime/programs/faults.tile"


@pytest.fixture
def segments_before():
    return jobs.segments()


def start(*args, np_=1, cache, env=None):
    env = dict(os.environ, XDG_CACHE_HOME=str(cache), FAULT_STARTED=str(cache / "stalled"), **(env or {}))
    size = [] if "--n" in args else ["--n", "256"]  # an option given twice is refused
    command = [sys.executable, "-m", "tiledsl.commands.cli", "run", PROGRAM, *size, *map(str, args)]
    if np_ > 1:
        command += ["--np", str(np_)]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finish(process, timeout=60):
    """Exit status, everything printed (stdout, then stderr), seconds it took."""
    began = time.monotonic()
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out + err, time.monotonic() - began


def stalled(cache, seconds=60.0):
    """Wait until the run's stall kernel runs (on a loaded machine the start alone can take
    seconds), then a second more: the window fills behind it."""
    deadline = time.monotonic() + seconds
    while not (cache / "stalled").exists():
        assert time.monotonic() < deadline, "the stall kernel never started"
        time.sleep(0.05)
    time.sleep(1.0)


def nothing_left(cache, segments_before):
    """No process of the run, no temporary file (driver cache, MPICH shared memory) left behind."""
    found = subprocess.run(["pgrep", "-f", str(cache)], capture_output=True, text=True)
    assert found.stdout == "", f"processes left: {found.stdout}"
    assert not list(cache.rglob("*.tmp"))
    assert not orphans(segments_before)
    return True


def orphans(before, wait=5.0):
    """MPICH segments made since ``before`` that no process maps (those mapped are jobs' running
    beside the tests) and that stay: a job that failed beside this one removes its own."""
    deadline = time.monotonic() + wait
    while True:
        in_use = jobs.mapped()
        left = [p for p in jobs.segments() - before if str(p) not in in_use]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


@pytest.mark.timeout(90)
def test_check_finite_stops_at_the_first_nan(tmp_path):
    code, err, _ = finish(start("--set", "fault=1", "--check-finite", cache=tmp_path))
    assert code == 1 and "Traceback" not in err
    assert "kernel poison failed on A[1, 1]" in err and "produced nan" in err and "faults.tile:19" in err


@pytest.mark.timeout(90)
def test_without_check_finite_a_nan_left_in_the_matrix_fails_the_run_at_the_end(tmp_path):
    # the poison is above the diagonal, where no later task looks: only the final count sees it
    code, err, _ = finish(start("--set", "fault=1", cache=tmp_path))
    assert code == 1 and "A holds 1 NaN or infinite value(s) after the run" in err, err


@pytest.mark.timeout(90)
def test_the_watchdog_reports_a_stall_with_the_blocked_tasks(tmp_path):
    # 1 s: the tasks but the stall take milliseconds, and SciPy is loaded before the run
    code, err, elapsed = finish(start("--set", "fault=2", "--watchdog", 1, cache=tmp_path))
    assert code == 1 and elapsed < 30
    assert "watchdog: no task completed for" in err
    assert "waits for #" in err and "stall on A[1, 1] (running)" in err


@pytest.mark.timeout(90)
def test_the_watchdog_fires_while_the_loop_nest_waits_for_a_full_window(tmp_path):
    # 8×8 tiles: the loop nest is far from done (26 tasks to go) when the window fills behind the stall (#9)
    code, err, elapsed = finish(start("--set", "fault=2", "--watchdog", 2, "--window", 4, "--n", 512,
                                      cache=tmp_path))
    assert code == 1 and elapsed < 30
    assert "watchdog: no task completed for" in err and "4 task(s) in the window" in err
    assert "9 of 13 submitted done" in err and "waits for #9 stall on A[1, 1] (running)" in err
    assert "trsm on A[1, 1]" not in err  # readers of a tile do not wait for each other


@pytest.mark.timeout(90)
@pytest.mark.parametrize("extra", [[], ["--window", 4, "--n", 512]], ids=["workers-busy", "loop-nest-waiting"])
def test_sigterm_ends_the_run_with_a_message(tmp_path, segments_before, extra):
    process = start("--set", "fault=2", *extra, cache=tmp_path)
    stalled(tmp_path)
    process.send_signal(signal.SIGTERM)
    code, err, elapsed = finish(process)
    assert code == 128 + signal.SIGTERM and elapsed < 30
    assert "stopped by SIGTERM" in err and "Traceback" not in err
    assert nothing_left(tmp_path, segments_before)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_an_mpi_run_on_every_rank(tmp_path, segments_before, signum):
    """The signal goes to `tiledsl run --np 2`, which passes it once to the ranks."""
    process = start("--set", "fault=2", np_=2, cache=tmp_path)
    stalled(tmp_path)
    process.send_signal(signum)
    code, err, elapsed = finish(process)
    assert code == 128 + signum and elapsed < 30, err
    assert f"stopped by {signal.Signals(signum).name}" in err and "Traceback" not in err
    assert nothing_left(tmp_path, segments_before)


@pytest.mark.timeout(90)
def test_a_signal_to_one_rank_but_0_still_gives_the_json_outcome(tmp_path, segments_before):
    """SIGTERM to rank 1 alone: rank 0, which reported a stop, was not stopped; stdout was empty."""
    process = start("--set", "fault=12", "--json", np_=2, cache=tmp_path)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM and "rank 1: stopped by SIGTERM" in err, err
    assert json.loads(out.strip())["error"] == "stopped by SIGTERM"  # one object
    assert nothing_left(tmp_path, segments_before)


@pytest.mark.timeout(90)
def test_a_rank_waiting_on_a_stopped_rank_names_that_rank_as_the_stall(tmp_path, segments_before):
    """A rank stopped (SIGSTOP) in its kernel: a rank waiting for its data reported the stall as its own
    ("no task completed ... 9 task(s) in the window"), the stopped rank last in its list; then named it
    without saying that its heartbeats had stopped too (and advised a longer --watchdog)."""
    env = {"FAULT_STOP": "1"}
    process = start("--set", "fault=2", "--watchdog", 2, "--nb", 32, np_=3, cache=tmp_path, env=env)
    code, err, elapsed = finish(process)
    assert code == 1 and elapsed < 60, err
    # named by the watchdog of a rank waiting for its data, or by the silence of its heartbeats
    # (which comes first depends on where the others are), never as another rank's own stall
    first = err.splitlines()[0]
    assert re.fullmatch(r"tiledsl: error: rank (\d): (watchdog: no task completed for \d+ s; this rank runs no task "
                        r"and waits for data from rank (?!\1)(\d)(?: and \d+ message\(s\) it sent to ranks? [\d, and]+ are "
                        r"not received yet)?, where the stall is \(rank \3 gave no sign of life "
                        r"for \d+ s: stopped, lost, or a kernel holding Python's lock\); .*|rank (\d) did not "
                        r"answer within 20 s \(stopped or lost\?\))", first), err  # 2.5 × 2 s and 15 s: a run began
    assert nothing_left(tmp_path, segments_before)


@pytest.mark.timeout(90)
def test_a_killed_rank_ends_every_rank(tmp_path, segments_before):
    code, err, elapsed = finish(start("--set", "fault=3", np_=2, cache=tmp_path))
    assert code != 0 and elapsed < 30
    # which rank the message names first is the kernel's order of their ends, which a loaded machine can
    # invert (test_job_faults.py checks the naming, with a second try): here, that the job ends and says why
    assert re.search(r"(rank [01]|ranks 0 and 1) ended without finishing the run and without a word", err), err
    assert "killed by SIGKILL" in err, err
    assert "BAD TERMINATION" not in err  # MPICH's banner, which tiledsl's words say better
    assert nothing_left(tmp_path, segments_before)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("fault", [10, 11], ids=["file descriptors", "python streams"])
def test_a_rank_whose_kernel_closed_its_streams_still_says_why_and_ends_every_rank(tmp_path, segments_before,
                                                                                 fault):
    """Its kernel closed stdout and stderr (their descriptors, or Python's streams): writing the
    error raised, the abort never came, and the other rank waited for its data (minutes). The
    run's own streams (duplicates of the descriptors) still say why."""
    code, err, elapsed = finish(start("--set", f"fault={fault}", np_=2, cache=tmp_path))
    assert code == 1 and elapsed < 30
    assert "rank 1 (faults.tile:" in err and "failed with no stream left to say it" in err, err
    assert nothing_left(tmp_path, segments_before)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_kernel_that_closes_a_stream_and_succeeds_leaves_the_summary(tmp_path, ranks, stream):
    """The summary's print raised on the closed stream: an internal error (1 rank), a traceback (2);
    so did the progress bar's next line on a closed stderr."""
    (tmp_path / "k.py").write_text(f"import sys, time\n\ndef shut(A):\n    time.sleep(0.6)\n    sys.{stream}.close()\n"
                                   f"    time.sleep(0.6)\n")  # the bar drawn before the stream closes, and after
    (tmp_path / "shut.tile").write_text('use "k.py"\nkernel shut(inout A)\nprogram shut {\n'  # a task on every rank
                                        "  tiling uniform(nb = 8)\n  matrix A[n, n] = zeros\n"
                                        "  for i in 0 .. A.mt { shut(A[i, i]) }\n}\n")
    command = [sys.executable, "-m", "tiledsl.commands.cli", "run", "shut.tile", "--n", "16", "--np", str(ranks)]
    out = subprocess.run([*command, "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=100)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["ok"] is True
    out = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=100,  # with the bar
                         env={**os.environ, "TILEDSL_PROGRESS": "1", "TILEDSL_PROGRESS_DELAY": "0"})
    assert out.returncode == 0 and "error" not in out.stderr and out.stdout.startswith("shut: n=16"), out.stderr


@pytest.mark.timeout(90)
def test_check_finite_stops_every_rank_at_the_first_nan(tmp_path, segments_before):
    code, err, elapsed = finish(start("--set", "fault=1", "--check-finite", np_=2, cache=tmp_path))
    assert code != 0 and elapsed < 30 and "Traceback" not in err
    assert "kernel poison failed on A[1, 1]" in err and "produced nan" in err and "faults.tile:19" in err
    assert nothing_left(tmp_path, segments_before)


@pytest.mark.timeout(90)
def test_the_watchdog_stops_every_rank_on_a_stall(tmp_path, segments_before):
    code, err, elapsed = finish(start("--set", "fault=2", "--watchdog", 1, np_=2, cache=tmp_path))
    assert code != 0 and elapsed < 30 and "Traceback" not in err
    assert "watchdog: no task completed for" in err and "stall on A[1, 1] (running)" in err
    assert nothing_left(tmp_path, segments_before)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("fault, raised, ranks", [(5, "SystemExit at fault_kernels.py:35: 0", 1),
                                                 (6, "KeyboardInterrupt at fault_kernels.py:40", 2),
                                                 (7, "Escape at fault_kernels.py:48: unwinding", 2)],
                         ids=["sys-exit-1", "keyboard-interrupt-2", "base-exception-2"])
def test_a_kernel_raising_any_base_exception_fails_the_run(tmp_path, segments_before, fault, raised, ranks):
    """17.3: sys.exit(0) in a kernel is a failed task (exit 1), never a hang or a success. The worker
    that ran the kernel makes any BaseException its task's failure, after which a rank's failure is
    the same whatever was raised: each kind runs once, on 1 rank or 2 (both covered)."""
    code, err, elapsed = finish(start("--set", f"fault={fault}", np_=ranks, cache=tmp_path))
    assert code == 1 and elapsed < 30 and "Traceback" not in err and "release unlocked lock" not in err, err
    assert f"faults.tile:{18 + fault}): kernel " in err and "failed on A[1, 1]" in err and raised in err
    assert "it may not end the run" in err and "rank " in err
    assert nothing_left(tmp_path, segments_before)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("ranks", [1, 2])
def test_a_kernel_writing_an_in_argument_fails_naming_it(tmp_path, segments_before, ranks):
    """17.4: `in` tiles are read-only views, so the ranks cannot silently disagree."""
    code, err, elapsed = finish(start("--set", "fault=4", np_=ranks, cache=tmp_path))
    assert code == 1 and elapsed < 30 and "Traceback" not in err, err
    assert "(faults.tile:22): kernel scribble failed on A[0, 0], A[1, 1]" in err
    assert "assignment destination is read-only" in err and "`in` arguments: A[0, 0] (argument 1)" in err
    assert nothing_left(tmp_path, segments_before)


@pytest.mark.timeout(120)
def test_a_rank_waiting_for_another_that_completes_tasks_is_not_stalled(tmp_path):
    """Rank 1 waits for a tile rank 0 writes at the end of ten 1-second tasks: its watchdog (3 × 2 s
    for a rank only waiting) fired after 6 s while rank 0 went on, failing a run that made progress.
    Heartbeats now carry each rank's count of completed tasks. Here ten half-second tasks under
    --watchdog 1: the same task to limit ratio."""
    (tmp_path / "wait_kernels.py").write_text("import time\n\ndef step(A):\n    time.sleep(0.5)\n    A += 1.0\n\n"
                                              "def take(A, B):\n    B += A\n")
    (tmp_path / "wait.tile").write_text('use "wait_kernels.py"\nkernel step(inout A)\nkernel take(in A, inout B)\n'
                                        "program wait {\n  tiling uniform(nb = 4)\n  matrix A[n, n] = zeros\n"
                                        "  for s in 0 .. 10 { step(A[0, 0]) }\n  take(A[0, 0], A[0, 1])\n}\n")
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "wait.tile", "--n", "8", "--np", "2",
                          "--grid", "1x2", "--watchdog", "1", "--output", "A=a.npy"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=110,
                         env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path)))
    assert out.returncode == 0, out.stderr
    assert np.array_equal(np.load(tmp_path / "a.npy")[:4, 4:], np.full((4, 4), 10.0))


@pytest.mark.timeout(120)
def test_a_stall_report_waits_for_no_version_the_stalled_task_itself_makes_for_another_rank(tmp_path):
    """A kernel writing A[0, 1] (rank 1's) and A[0, 0] (rank 0's) runs on rank 1, which keeps the
    A[0, 0] it makes: its stall report named that version as awaited from rank 0."""
    (tmp_path / "sleepy.py").write_text("import time\n\ndef w2(X, Y):\n    time.sleep(3600)\n")
    (tmp_path / "two.tile").write_text('use "sleepy.py"\nkernel w2(inout X, inout Y)\nprogram two {\n'
                                       "  tiling uniform(nb = 32)\n  matrix A[n, n] = random general\n"
                                       "  w2(A[0, 1], A[0, 0])\n}\n")
    command = [sys.executable, "-m", "tiledsl.commands.cli", "run", "two.tile", "--n", "64", "--np", "2",
               "--watchdog", "2"]
    out = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=100,
                         env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")))
    assert out.returncode == 1 and "running #0 w2(A[0, 1], A[0, 0])" in out.stderr, out.stderr
    assert "waiting for" not in out.stderr, out.stderr
