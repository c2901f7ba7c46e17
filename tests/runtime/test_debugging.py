"""A kernel stopped in Python's debugger (runtime/debugging.py): the watchdog and the progress bar wait."""
import os
import subprocess
import sys
import time

import pytest

from tiledsl.runtime import debugging

KERNELS = "def poke(A):\n    x = 42\n    breakpoint()\n    A += 1.0\n"
PROGRAM = ('use "bp.py"\nkernel poke(inout A)\nprogram bp {\n  tiling uniform(nb = 4)\n  matrix A[n, n] = zeros\n'
           "  poke(A[0, 0])\n}\n")


@pytest.mark.timeout(90)
def test_a_kernel_at_the_debuggers_prompt_is_no_stall_and_the_bar_keeps_off_it(tmp_path):
    """At the prompt for 3 s under --watchdog 1: the run failed after a second (a minute by default),
    and the bar wrote over the prompt four times a second."""
    (tmp_path / "bp.py").write_text(KERNELS)
    (tmp_path / "bp.tile").write_text(PROGRAM)
    env = dict(os.environ, TILEDSL_PROGRESS="1", TILEDSL_PROGRESS_DELAY="0", XDG_CACHE_HOME=str(tmp_path))
    env.pop("PYTHONBREAKPOINT", None)
    run = subprocess.Popen([sys.executable, "-m", "tiledsl.commands.cli", "run", "bp.tile", "--n", "4",
                            "--watchdog", "1", "--output", "A=a.npy"], cwd=tmp_path, env=env, text=True,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    run.stdin.write("p x\n")
    run.stdin.flush()
    time.sleep(3)
    out, err = run.communicate("c\n", timeout=60)
    assert run.returncode == 0, err
    assert "(Pdb) 42" in out and "bp.py(4)poke()" in out  # stopped in the kernel's frame, after breakpoint()
    assert err.count("tasks") <= 3, err  # drawn before the kernel stopped and after it went on, not meanwhile


def test_breakpoints_skipped_by_pythonbreakpoint_0_mark_nothing(monkeypatch):
    monkeypatch.setenv("PYTHONBREAKPOINT", "0")
    with debugging.breakpoints_noticed():
        assert breakpoint() is None and not debugging.active()


def test_a_hook_of_the_programs_own_is_called_and_put_back(monkeypatch):
    monkeypatch.delenv("PYTHONBREAKPOINT", raising=False)
    called = []
    monkeypatch.setattr(sys, "breakpointhook", lambda *args: called.append(args))
    own = sys.breakpointhook
    with debugging.breakpoints_noticed():
        breakpoint()
        assert called == [()] and debugging.active()
        debugging.task_returned()
        assert not debugging.active()
    assert sys.breakpointhook is own
