"""The watchdog (runtime/watchdog.py): its limits, and stalls of the loop nest and of the tasks.

``programs/faults.tile`` with ``fault=8`` spins at k = 1 in a call-free loop of 10^9
iterations (under the bound on a loop nest's iterations, but many seconds long); ``fault=2``
runs a kernel that sleeps for ten minutes.
"""
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tiledsl.commands.explain import plan
from tiledsl.runtime import blas, watchdog
from tiledsl.runtime.engine import Engine, TaskFailure
from tiledsl.runtime.layout import make_distribution, make_matrices, make_params
from tiledsl.runtime.options import API, COMMAND_LINE, Options
from tiledsl.runtime.program import Call
from tiledsl.runtime.scheduler import Task
from tiledsl.runtime.userkernels import kernels
from tiledsl.runtime.watchdog import FLOOR_SECONDS, TASK_FACTOR, Limit

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = "tests/runtime/programs/faults.tile"


@pytest.mark.timeout(60)
def test_a_run_under_a_profiler_ends(tmp_path):
    """The loop nest's watch withdrew a Stalled never raised (``PyThreadState_SetAsyncExc`` with NULL),
    which left the interpreter's flag of a pending one set for good: every loop of every thread took the
    slow path after, and under cProfile a run hung once its loop nest was over."""
    run = subprocess.run([sys.executable, "-m", "cProfile", "-o", os.devnull, "-m", "tiledsl.commands.cli", "run",
                          "cholesky", "--n", "64", "--nb", "32"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=50, env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")))
    assert run.returncode == 0 and "cholesky: n=64" in run.stdout, run.stderr


def test_the_automatic_limit_scales_with_the_longest_task():
    limit = Limit(None)
    assert limit.seconds == FLOOR_SECONDS
    limit.task_took(FLOOR_SECONDS / TASK_FACTOR / 2)
    assert limit.seconds == FLOOR_SECONDS
    limit.task_took(10.0)
    limit.task_took(1.0)  # a shorter task later does not lower it
    assert limit.seconds == TASK_FACTOR * 10.0


def test_zero_disables_the_watchdog_and_a_positive_limit_is_fixed():
    assert Limit(0).seconds is None
    fixed = Limit(2.5)
    fixed.task_took(100.0)
    assert fixed.seconds == 2.5
    with pytest.raises(ValueError):
        Limit(-1)


def test_the_automatic_limits_advice_names_the_setting_as_the_interface_spells_it():
    """From the Python API it advised --watchdog SECONDS, which run() does not take: it takes watchdog=.
    It advised a longer limit only: a stuck kernel, past a tune's budget, is stopped sooner by a shorter one."""
    advice = "SECONDS sets another, longer for a slower kernel or shorter to stop a stuck one sooner, and "
    assert Limit(None).automatic_note(COMMAND_LINE).endswith(f": --watchdog {advice}--watchdog 0 turns it off)")
    assert Limit(None).automatic_note(API).endswith(f": watchdog={advice}watchdog=0 turns it off)")
    assert Limit(2.0).automatic_note(API) == ""  # a limit the user set: no advice


def engine_for(driver, options: Options, watchdog_limit):
    """An engine on 1 rank with the program's matrices, as launch.execute makes it (no survey): SciPy's
    BLAS found first, else the first kernel imports it, which on a loaded machine outlasts a 1 s limit."""
    blas.load()
    params = make_params(driver, options)
    matrices = make_matrices(driver, params, make_distribution(driver.PROGRAM, params, (1, 1), 0), 0)
    for matrix in matrices.values():
        matrix.allocate(lambda r0, r1, c0, c1: np.eye(r1 - r0, c1 - c0, k=r0 - c0, order="F") * 4)
    engine = Engine(driver.PROGRAM, kernels(driver.PROGRAM, driver), workers=1, watchdog=watchdog_limit)
    engine.attach(matrices)
    return engine, params


@pytest.mark.timeout(60)
def test_a_loop_nest_spinning_during_the_run_is_stopped_with_its_line(compiled):
    driver = compiled(PROGRAM)
    engine, params = engine_for(driver, Options(n=256, sets={"fault": 8}), 1)
    began = time.monotonic()
    with pytest.raises(TaskFailure) as failure:
        engine.run(driver.generate, params)
    assert time.monotonic() - began < 15
    assert str(failure.value).startswith("watchdog: the loop nest ran 1 s without submitting a task")
    assert failure.value.line == 27 and failure.value.rank == 0
    assert engine.scheduler.completed > 0  # the tasks before the loop ran


@pytest.mark.timeout(60)
def test_the_automatic_limit_stops_a_stalled_task(compiled, monkeypatch):
    """None is automatic: a stall longer than the floor (here lowered) and 20 × the longest task."""
    monkeypatch.setattr(watchdog, "FLOOR_SECONDS", 2.0)
    driver = compiled(PROGRAM)
    engine, params = engine_for(driver, Options(n=256, sets={"fault": 2}), None)
    began = time.monotonic()
    with pytest.raises(TaskFailure, match=r"(?s)watchdog: no task completed for [\d.]+ s \(the automatic limit, the "
                                          r"larger of 2 s and 20 times the longest task so far: --watchdog "
                                          r"SECONDS sets another, longer for a slower kernel or shorter to stop a "
                                          r"stuck one sooner, and --watchdog 0 turns it off\); "
                                          r".*stall on A\[1, 1\] \(running\)"):
        engine.run(driver.generate, params)
    assert 2.0 <= time.monotonic() - began < 15


@pytest.mark.timeout(60)
def test_a_loop_nest_spinning_before_the_run_is_stopped_in_the_survey(tmp_path):
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", PROGRAM, "--n", "256", "--set",
                          "fault=8", "--watchdog", "1"], cwd=ROOT, capture_output=True, text=True, timeout=50)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    warning, error = out.stderr.strip().splitlines()  # a loop of 10^9 iterations: hours, said first
    assert warning.startswith("tiledsl: warning: the loop nest runs up to 4,000,000,012 loop iterations")
    assert error == ("tiledsl: error: rank 0 (faults.tile:27): watchdog: the loop nest ran 1 s without submitting a "
                     "task (surveying it before the run)")


@pytest.mark.timeout(60)
def test_a_stalled_task_that_blocks_no_other_is_named_with_its_line_and_worker(compiled):
    """At n = 128 (2×2 tiles) the stall at k = 1 is the last task: no blocked task points at it."""
    driver = compiled(PROGRAM)
    engine, params = engine_for(driver, Options(n=128, sets={"fault": 2}), 1)
    with pytest.raises(TaskFailure) as failure:
        engine.run(driver.generate, params)
    head, running = str(failure.value).split("\n")
    assert re.fullmatch(r"watchdog: no task completed for \d\.\d s; 1 task\(s\) in the window, 0 ready, "
                        r"3 of 4 submitted done", head), head
    assert re.fullmatch(r"  running #3 stall\(A\[1, 1\]\), line 20, for \d s on CPU worker 0", running), running
    assert failure.value.line == 20 and failure.value.rank == 0


@pytest.mark.timeout(30)
def test_a_task_begun_after_a_wait_has_the_whole_limit_before_it_is_a_stall(compiled):
    """A rank that waited 5 s for another's data (no stall: the other progressed) failed as the watchdog's
    tick met the task it had just begun ("no task completed for 5.0 s", the task running "for 0 s"): the
    time without progress counted from its last completed task, its wait included."""
    engine, _ = engine_for(compiled(PROGRAM), Options(n=128), 1.0)
    engine.scheduler = SimpleNamespace(idle=False, describe=lambda **_: "1 task(s) in the window")
    task = Task(Call("take", ("in", "inout"), 0, 8, "take(A[0, 0], A[0, 1])"), ("A[0, 0]", "A[0, 1]"), None, 0)
    task.seq = 0
    now = time.monotonic()
    engine.last_progress = now - 5.0
    engine.running = {task: ("cpu-0", now - 0.1)}
    with engine.lock:
        engine._check_tasks()
    assert engine.failure is None
    engine.running = {task: ("cpu-0", now - 1.5)}  # running past the limit: a stall
    with engine.lock:
        engine._check_tasks()
    assert str(engine.failure).startswith("watchdog: no task completed for 5.0 s"), engine.failure


@pytest.mark.timeout(10)
def test_running_tasks_are_named_oldest_first_with_their_lanes():
    call = Call("stall", ("inout",), 0, 9, "stall(A[k, k])")
    copy = Call("copy", ("inout",), 0, 0, "", role="transfer")
    older, newer = Task(call, ("A[3, 3]",), None, 0), Task(copy, ("B[0, 1]",), None, 0)
    older.seq, newer.seq = 10, 12
    running = {newer: ("gpu-2", 95.0), older: ("cpu-1", 90.0)}
    assert watchdog.running_lines(running, 100.0) == ["  running #10 stall(A[3, 3]), line 9, for 10 s on CPU worker 1",
                                                      "  running #12 copy(B[0, 1]), a transfer, for 5 s on GPU 2"]
    assert watchdog.running_line(running) == 9  # transfers have no line of their own
    assert watchdog.running_line({}) is None


def test_a_running_panel_task_is_named_with_its_panel_as_one_argument():
    """gemm(A[0 : 2, 0], ...) was named gemm(A[0, 0], A[1, 0], ...): the panel's tiles as that many arguments."""
    matrix = SimpleNamespace(name="A")
    column = [SimpleNamespace(matrix=matrix, i=i, j=0) for i in range(2)]
    call = Call("gemm", ("in", "inout"), 1, 4, "gemm(A[0 : 2, 0], C[0, 0])", panels=(0,)).expanded((2,))
    running = Task(call, (*column, "C[0, 0]"), None, 0)
    running.seq = 7
    assert watchdog.running_lines({running: ("cpu-0", 98.0)}, 100.0) == [
        "  running #7 gemm(A[0:2, 0], C[0, 0]), line 4, for 2 s on CPU worker 0"]


@pytest.mark.timeout(60)
def test_a_stall_with_gpus_counts_the_programs_tasks_as_explain_does_and_transfers_apart(compiled):
    """The report counted the runtime's copies among the tasks (8 of the program's 11 done read '9 of 13
    submitted done') and listed a receive as if it were one of the program's. Explain's count is its plan's,
    which `tiledsl explain` prints as task_count."""
    tasks = plan(compiled(PROGRAM), Options(n=256, sets={"fault": 2}), (1, 1), 2).task_count
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", PROGRAM, "--n", "256", "--set",
                          "fault=2", "--gpus", "2", "--watchdog", "1"], cwd=ROOT, capture_output=True, text=True,
                         timeout=50)
    assert out.returncode == 1, out.stderr
    counts = re.search(r"; (\d+) task\(s\) in the window, \d+ ready, (\d+) of (\d+) submitted done; 1 transfer\(s\) "
                       r"in the window, 0 ready, 1 of 2 submitted done\n", out.stderr)
    assert counts, out.stderr  # how many other tasks ran before the stall varies with the workers and the load
    window, done, submitted = map(int, counts.groups())
    assert submitted == tasks and window + done == tasks, out.stderr
    assert "  blocked #7 receive(A[1, 1]), a transfer: waits for #6 stall on A[1, 1] (running)\n" in out.stderr
    assert "#7 receive on A[1, 1] (a transfer, blocked)" in out.stderr


def test_a_frame_between_two_lines_has_no_tile_line():
    """The watchdog reads the loop nest's line from a running frame, whose f_lineno can be None."""
    from tiledsl.runtime.errors import tile_line
    assert tile_line(__file__, None) is None


def test_an_interrupt_while_the_monitor_starts_stops_its_thread(monkeypatch):
    """Thread.start waits for the thread to begin: a Ctrl-C there skipped __exit__, and the monitor
    went on watching a loop nest long gone, raising Stalled into the caller a minute later."""
    monitor = watchdog.Monitor(lambda: None)
    real_start = monitor.thread.start

    def start_then_interrupt():
        real_start()
        raise KeyboardInterrupt
    monkeypatch.setattr(monitor.thread, "start", start_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        with monitor:
            pass
    monitor.thread.join(5 * watchdog.TICK_SECONDS)
    assert not monitor.thread.is_alive()


def test_overlapping_runs_put_the_switch_interval_back():
    """Two runs at once (the API from two threads): the second saved the first's short interval and
    put it back last, leaving the process at 1e-4 for good."""
    from tiledsl.runtime.engine import _SWITCH

    before = sys.getswitchinterval()
    _SWITCH.shorten()
    _SWITCH.shorten()
    assert sys.getswitchinterval() == pytest.approx(_SWITCH.SHORT)
    _SWITCH.restore()
    assert sys.getswitchinterval() == pytest.approx(_SWITCH.SHORT)  # one run still going
    _SWITCH.restore()
    assert sys.getswitchinterval() == before


def write_gil_kernels(folder: Path) -> None:
    """``gil_kernels.py``: ``hog(A)``, line 6, sleeps in C code holding the GIL for an hour."""
    (folder / "gil_kernels.py").write_text("import ctypes\n\n_libc = ctypes.PyDLL(None)\n\n"
                                           "def hog(A):\n    _libc.sleep(3600)\n")


#: the other ranks' work once A[1, 1] froze: none (they wait at the end of the run), or tasks that wait for it
AFTER_THE_FREEZE = {"at the end": "", "for data": "    for j in k + 1 .. A.nt { syrk(A[j, k], A[j, j]) }\n"}
#: gil.tile with a hog on every diagonal tile, run at --n 16: every rank frozen
EVERY_RANK_FROZEN = ('use "gil_kernels.py"\nkernel hog(inout A)\nprogram gil {\n  tiling uniform(nb = 8)\n'
                     "  matrix A[n, n] = zeros\n  for i in 0 .. A.mt { hog(A[i, i]) }\n}\n")


def frozen_runs(folder: Path, runs: dict) -> dict:
    """``runs`` (case -> (gil.tile, --n, --np)) under --watchdog 1, each in a folder of its own, started together:
    each spends 12 s frozen (sleeping in C code) before its backstop ends it, so that at once they take about the
    time of one. Case -> (the run, its seconds)."""
    def run(case):
        program, n, ranks = runs[case]
        (folder / case).mkdir()
        write_gil_kernels(folder / case)
        (folder / case / "gil.tile").write_text(program)
        began = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "gil.tile", "--n", str(n), "--np",
                              str(ranks), "--watchdog", "1"], cwd=folder / case, capture_output=True, text=True,
                             timeout=100)
        return out, time.monotonic() - began
    with ThreadPoolExecutor(len(runs)) as pool:
        return dict(zip(runs, pool.map(run, runs)))


@pytest.mark.timeout(120)
def test_a_kernel_that_never_lets_go_of_the_gil_still_ends_the_run(tmp_path):
    """C code holding the GIL for ever (a deadlocked extension) froze every Python thread, the
    watchdog's and the signal handlers' too: the run hung. faulthandler's own thread ends it, at
    twice the limit and 10 s, with the stacks (on several ranks, the kernel's told by name). A run
    on 1 rank and one on 2, at once."""
    runs = frozen_runs(tmp_path, {f"np{ranks}": (EVERY_RANK_FROZEN, 16, ranks) for ranks in (1, 2)})
    for ranks in (1, 2):
        out, seconds = runs[f"np{ranks}"]
        assert out.returncode == 1 and seconds < 60, out.stderr
        assert 'gil_kernels.py", line 6 in hog' in out.stderr, out.stderr
        if ranks > 1:
            assert re.match(r"tiledsl: error: rank \d \(gil.tile:\d+\) crashed \(frozen for 0:00:12: C code held the "
                            r"GIL, and no Python code ran, past the watchdog's limit\) in kernel code hog "
                            r"\(gil_kernels.py:6\), in `hog\(A\[", out.stderr), out.stderr


@pytest.mark.timeout(120)
def test_a_kernel_frozen_with_the_gil_on_one_rank_is_named_before_the_others_give_up(tmp_path):
    """One rank frozen in C code holding the GIL sends no heartbeat: the others gave up first (5 s at a
    collective, 3 times the limit waiting for data), and their abort ended it before its backstop could
    name the kernel. They now wait past that backstop (watchdog.outlasting). Both ways of waiting
    (AFTER_THE_FREEZE), run at once."""
    runs = frozen_runs(tmp_path, {
        waiting.replace(" ", "-"): ('use "gil_kernels.py"\nkernel hog(inout A)\nprogram gil {\n'
                                    "  tiling uniform(nb = 8)\n  matrix A[n, n] = random spd\n"
                                    "  for k in 0 .. A.nt {\n    potrf(A[k, k])\n    if k == 1 { hog(A[k, k]) }\n"
                                    "    for m in k + 1 .. A.mt { trsm(A[k, k], A[m, k]) }\n"
                                    f"{after}  }}\n}}\n", 32, 3) for waiting, after in AFTER_THE_FREEZE.items()})
    for out, seconds in runs.values():
        assert out.returncode == 1 and seconds < 60, out.stderr
        assert re.search(r"^tiledsl: error: rank 1 \(gil.tile:8\) crashed \(frozen for 0:00:12: C code held the GIL, "
                         r".*\) in kernel code hog \(gil_kernels.py:6\), in `hog\(A\[k, k\]\)`$", out.stderr,
                         re.MULTILINE), out.stderr
        assert "did not answer" not in out.stderr and "where the stall is" not in out.stderr, out.stderr


def test_a_frozen_interpreters_stacks_name_the_thread_in_the_users_code():
    from tiledsl.commands.jobs import _crash_parts

    stack = ("Timeout (0:00:12)!\nThread 0x00007f01 (most recent call first):\n"
             f'  File "{sys.modules["threading"].__file__}", line 331 in wait\n'
             f'  File "{watchdog.__file__}", line 160 in _run\n\n'
             "Thread 0x00007f02 (most recent call first):\n"
             '  File "/home/u/k.py", line 6 in hog\n'
             f'  File "{sys.modules["tiledsl.runtime.engine"].__file__}", line 565 in _call_kernel\n')
    what, site, frames = _crash_parts(stack)
    assert what == "frozen for 0:00:12: C code held the GIL, and no Python code ran, past the watchdog's limit"
    assert site == " in kernel code hog (k.py:6)" and len(frames) == 2


GIL_HOLDER = """import ctypes

_libc = ctypes.PyDLL(None)  # a C function called with the GIL held, as an extension that never releases it


def hold(A):
    _libc.usleep(2500000)
"""


@pytest.mark.timeout(120)
def test_a_kernel_that_held_the_gil_past_the_limit_and_returned_is_no_stall_every_time(tmp_path):
    """Held 5 s under --watchdog 2: whichever thread took the GIL first as it was released decided (the
    monitor: 'no task completed for 3 s', blaming a potrf starved of the GIL; the worker: success);
    7 runs of 8 failed. Here 2.5 s under --watchdog 1, three runs at once."""
    (tmp_path / "hold_kernels.py").write_text(GIL_HOLDER)
    (tmp_path / "hold.tile").write_text('use "hold_kernels.py"\nkernel hold(inout A)\nprogram held {\n'
                                        "  tiling uniform(nb = 64)\n  matrix A[n, n] = random spd\n"
                                        "  for k in 0 .. A.nt {\n    potrf(A[k, k])\n    if k == 1 { hold(A[k, k]) }\n"
                                        "    for m in k + 1 .. A.mt { trsm(A[k, k], A[m, k]) }\n  }\n}\n")
    command = [sys.executable, "-m", "tiledsl.commands.cli", "run", "hold.tile", "--n", "256", "--watchdog", "1"]
    with ThreadPoolExecutor(3) as pool:  # at once: each sleeps 2.5 s holding its own process's GIL
        runs = list(pool.map(lambda _: subprocess.run(command, cwd=tmp_path, capture_output=True, text=True,
                                                      timeout=100), range(3)))
    for out in runs:
        assert out.returncode == 0 and out.stderr == "", out.stderr


@pytest.mark.timeout(60)
def test_a_kernel_left_blocked_on_stdin_ends_the_process_with_the_runs_status(tmp_path):
    """A kernel in input() on a stdin left open: the watchdog failed the run (exit 1), then Python's
    end waited on stdin's lock, held by the kernel's thread: 'Fatal Python error', exit 134."""
    (tmp_path / "k.py").write_text("def k(A):\n    input()\n")
    (tmp_path / "t.tile").write_text('use "k.py"\nkernel k(inout A)\nprogram t {\n  tiling uniform(nb = 8)\n'
                                     "  matrix A[n, n] = zeros\n  k(A[0, 0])\n}\n")
    reading, writing = os.pipe()  # kept open: input() waits for ever
    try:
        out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "t.tile", "--n", "8",
                              "--watchdog", "1"], cwd=tmp_path, stdin=reading, capture_output=True, text=True,
                             timeout=50)
    finally:
        os.close(reading)
        os.close(writing)
    assert out.returncode == 1 and "watchdog: no task completed" in out.stderr, out.stderr
    assert "Fatal Python error" not in out.stderr


def test_a_backstop_whose_timer_cannot_start_leaves_the_watchdog_checking(monkeypatch):
    """Under ulimit -v, faulthandler could not start its timer thread: 'RuntimeError: unable to start
    watchdog thread' out of the monitor's start (an internal error) or out of its thread, which died
    (a stall was never reported: the run hung)."""
    import faulthandler

    from tiledsl.runtime import crash

    def cannot_start(*args, **kwargs):
        raise RuntimeError("unable to start watchdog thread")
    monkeypatch.setattr(faulthandler, "dump_traceback_later", cannot_start)
    monkeypatch.setattr(crash, "_traced_to", object())
    monkeypatch.setattr(crash, "_claimed", True)
    checks = []
    with watchdog.Monitor(lambda: checks.append(1), backstop=lambda: 60.0) as monitor:
        deadline = time.monotonic() + 30
        while len(checks) < 3 and time.monotonic() < deadline:
            time.sleep(watchdog.TICK_SECONDS)
        assert monitor.thread.is_alive()
    assert len(checks) >= 3


def test_an_interrupt_as_a_deadline_s_thread_starts_ends_that_thread_too(monkeypatch):
    """Thread.start waits for the thread to begin: a Ctrl-C there skipped the deadline's end, and its
    thread ended the process minutes after the interrupted run ('kernel module ... has not finished
    loading after 300 s')."""
    import threading

    said = []
    monkeypatch.setattr(watchdog, "say_ending", said.append)
    real_start = threading.Thread.start

    def start_then_interrupt(thread):
        real_start(thread)
        raise KeyboardInterrupt
    monkeypatch.setattr(threading.Thread, "start", start_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        with watchdog.deadline(watchdog.CodeLimit(0.3), "the module has not finished loading", 0):
            pass
    monkeypatch.setattr(threading.Thread, "start", real_start)
    time.sleep(0.6)
    assert said == [] and not [t for t in threading.enumerate() if t.name == "deadline"]
