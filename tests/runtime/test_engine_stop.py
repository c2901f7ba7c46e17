"""A failed or interrupted run stops its workers (runtime/engine.py): once ``run()`` has raised no
kernel is called any more and no worker thread is left, and a kernel that does not return is
named; on several ranks, one error a job (runtime/comm.py's ``first_to_fail``, tested in test_comm.py)."""
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import tiledsl
from tiledsl.runtime import engine

_BESIDE = Path(sys.executable).with_name("mpiexec")  # the launcher of the mpich wheel in use
MPIEXEC = str(_BESIDE) if _BESIDE.exists() else shutil.which("mpiexec")

# 16 tiles written 20 times: 320 tasks, two workers run them for seconds unless stopped
PROGRAM = """use "kernels.py"
kernel work(inout A, int i, int j) flops 0

program calls {
  tiling uniform(nb = 10)
  matrix A[n, n] = zeros
  for r in 0 .. 20 { for i in 0 .. A.mt { for j in 0 .. A.nt { work(A[i, j], i + r, j + r) } } }
}
"""
# every call is logged; the task on tile BAD of the first sweep fails, (0, 1)'s sleeps LONG s
KERNELS = """import time
from pathlib import Path

LOG = Path(__file__).with_name("calls.log")
BAD, LONG = {bad}, {long}


def work(A, i, j):
    with LOG.open("a") as log:
        log.write("call\\n")
    if (i, j) == BAD:
        time.sleep(0.3)
        raise ValueError("tile (0, 0) is bad")
    time.sleep(LONG if (i, j) == (0, 1) else 0.02)
    A += 1
"""


def program(folder: Path, long: float = 0.02, bad=(0, 0)):
    (folder / "calls.tile").write_text(PROGRAM)
    (folder / "kernels.py").write_text(KERNELS.format(bad=bad, long=long))
    return tiledsl.load(folder / "calls.tile")


def calls(folder: Path) -> int:
    return len((folder / "calls.log").read_text().split())


@pytest.fixture
def workers():
    """workers() -> the engine's worker threads started since the test began (a test before it
    may have left a stalled kernel's thread)."""
    before = set(threading.enumerate())
    return lambda: [thread for thread in set(threading.enumerate()) - before if thread.name.startswith("cpu-")]


@pytest.mark.timeout(60)
def test_after_a_failed_task_no_kernel_is_called_and_no_worker_is_left(tmp_path, workers):
    began = time.monotonic()
    with pytest.raises(tiledsl.TiledslError, match=r"kernel work failed on A\[0, 0\] .*tile \(0, 0\) is bad"):
        program(tmp_path).run(n=40, workers=2)
    assert time.monotonic() - began < 2.5  # 0.3 s to the failure, then the other worker's last 20 ms
    made = calls(tmp_path)
    assert workers() == []
    time.sleep(0.5)
    assert calls(tmp_path) == made < 40  # the other worker stopped at once, not after its 320 tasks


@pytest.mark.timeout(60)
def test_ctrl_c_stops_the_workers_before_the_keyboard_interrupt_reaches_the_caller(tmp_path, workers):
    prog = program(tmp_path, bad=None)
    sent = []

    def interrupt_once_kernels_run():
        while not (tmp_path / "calls.log").exists():
            time.sleep(0.01)
        time.sleep(0.2)
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    # Python's own handler, even where the tests were started in the background (SIGINT ignored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=interrupt_once_kernels_run, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            prog.run(n=40, workers=2)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - sent[0] < 1.0
    made = calls(tmp_path)
    assert workers() == []
    time.sleep(0.5)
    assert calls(tmp_path) == made < 100


@pytest.mark.timeout(60)
def test_an_interrupt_while_the_workers_start_stops_them(tmp_path, monkeypatch, workers):
    """Ctrl-C between the workers' start and the loop nest's: they waited for tasks forever."""
    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(engine, "guard_exit", interrupted)  # the step after the threads start
    with pytest.raises(KeyboardInterrupt):
        program(tmp_path, bad=None).run(n=40, workers=2, gpus=1)
    assert workers() == [] and not [t for t in threading.enumerate() if t.name == "gpu-1"]


@pytest.mark.timeout(60)
def test_a_kernel_still_running_when_the_run_stops_is_named(tmp_path, monkeypatch, workers):
    monkeypatch.setattr(engine, "STOP_SECONDS", 0.5)
    began = time.monotonic()
    with pytest.raises(tiledsl.TiledslError) as failure:
        program(tmp_path, long=4.0).run(n=40, workers=2)
    assert time.monotonic() - began < 2.0
    text = str(failure.value)
    assert "kernel work failed on A[0, 0]" in text
    assert "1 kernel(s) of rank 0 still running 0.5 s after the run stopped, not waited for" in text
    assert re.search(r"\n  running #1 work\(A\[0, 1\]\), line 7, for [01] s on CPU worker [01]$", text), text
    assert calls(tmp_path) == 2
    for thread in workers():  # leave no thread to the next test
        thread.join(10)
    assert calls(tmp_path) == 2 and workers() == []


MINOR = """use "minor.py"
kernel two(inout Y, out H, float v) flops Y.m * Y.n

program minor {
  tiling uniform(nb = 100)
  matrix Y[n, n] = random general
  matrix W[n, n] = random general
  for i in 0 .. Y.mt {
    for j in 0 .. Y.nt {
      two(Y[i, j], W[(i + 1) % W.mt, (j + 1) % W.nt][1 : 3, 5 : 50], 1.0 * (i * 10 + j))
    }
  }
}
"""


@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec")
@pytest.mark.timeout(120)
def test_a_bad_sub_range_met_by_every_rank_is_one_error_of_the_job(tmp_path):
    """n = 420: the last tile column is 20 wide, and every rank's loop nest meets [5 : 50] past it."""
    (tmp_path / "minor.tile").write_text(MINOR)
    (tmp_path / "minor.py").write_text("def two(Y, H, v):\n    Y += 1.0\n    H[...] = v\n")
    job = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "minor.tile", "--np", "4",
                          "--n", "420"], cwd=tmp_path, capture_output=True, text=True, timeout=100,
                         env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")))
    errors = [line for line in job.stderr.splitlines() if line.startswith("tiledsl: error:")]
    assert job.returncode == 1 and len(errors) == 1, job.stderr
    assert "(minor.tile:10): sub-range [1:3, 5:50] is outside tile W[" in errors[0], job.stderr
    assert "Traceback" not in job.stderr


def test_interrupts_held_come_once_released_and_the_handlers_are_as_they_were():
    """Process state changed in steps (BLAS thread counts, the switch interval) was left half changed
    by a Ctrl-C between two steps: such steps hold it back, and it comes as they are done."""
    from tiledsl.runtime.world import HeldInterrupts

    handler = signal.getsignal(signal.SIGINT)
    held = HeldInterrupts()
    signal.raise_signal(signal.SIGINT)  # held: nothing raised here
    with pytest.raises(KeyboardInterrupt):
        held.release()
    assert signal.getsignal(signal.SIGINT) is handler and held.release() == []
    quiet = HeldInterrupts()
    signal.raise_signal(signal.SIGINT)
    assert [signum for signum, _ in quiet.release(act=False)] == [signal.SIGINT]


@pytest.mark.timeout(60)
def test_a_worker_thread_that_ends_without_a_word_fails_the_run_instead_of_hanging_it(tmp_path, monkeypatch):
    """Under `ulimit -v` a worker's own set-up could fail (Python could not make its records: 'Exception
    ignored in thread started by ... MemoryError') and the run waited for its tasks for ever, the
    watchdog's thread dead of the same."""
    monkeypatch.setattr(engine.Engine, "_worker", lambda self, index, device, lane: None)
    began = time.monotonic()
    with pytest.raises(tiledsl.TiledslError) as failed:
        program(tmp_path, bad=None).run(n=40, workers=2)
    assert time.monotonic() - began < 20
    assert str(failed.value).startswith("rank 0: out of memory: the thread of CPU worker 0 and CPU worker 1 ended "
                                        "before the run, without a word; "), str(failed.value)
    assert "or a smaller n" in str(failed.value)  # the API's own spelling of the run's remedies
