"""A one-rank tiledsl run watched from a forked parent (tiledsl/commands/onerank.py): what it leaves behind.
(What it says of a run that ends unseen is tests/runtime/test_crash.py's.)"""
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from tiledsl.commands import onerank


def test_the_folders_of_runs_whose_parent_died_are_removed(tmp_path, monkeypatch):
    """Tester z: a parent killed (kill -9) left its run's folder in /tmp for good."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    abandoned, alive, other = (tmp_path / f"tiledsl-run-{gone.pid}-x", tmp_path / f"tiledsl-run-{os.getpid()}-y",
                               tmp_path / "tiledsl-run-z")
    for folder in (abandoned, alive, other):
        folder.mkdir()
        (folder / "done.0").write_text("0")
    onerank._remove_abandoned()
    assert not abandoned.exists() and alive.exists() and other.exists()


@pytest.mark.timeout(60)
def test_a_run_whose_parent_is_killed_ends_and_the_next_run_removes_its_folder(tmp_path):
    """Tester z: killed with the command's process (as it was in it), the run no longer goes on to say, 2 s
    later over the shell's prompt, that it was stopped by SIGTERM; the folder it leaves goes with the next run."""
    (tmp_path / "nap.py").write_text("import time\n\n\ndef nap(A):\n    time.sleep(3)\n")
    (tmp_path / "nap.tile").write_text('use "nap.py"\nkernel nap(inout A)\nprogram p {\n  tiling uniform(nb = 10)\n'
                                       "  matrix A[n, n] = zeros\n  nap(A[0, 0])\n}\n")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    run = subprocess.Popen([sys.executable, "-m", "tiledsl.commands.cli", "run", "nap.tile", "--n", "10"], cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "TMPDIR": str(temporary)})
    deadline = time.monotonic() + 30
    while not any(temporary.glob("tiledsl-run-*/crash.0")) and time.monotonic() < deadline:
        time.sleep(0.05)  # the child has begun its run
    run.send_signal(signal.SIGKILL)
    out, err = run.communicate(timeout=10)  # (the child, killed too, no longer holds the output)
    assert run.returncode == -9 and err == b"", err
    assert len(list(temporary.iterdir())) == 1
    again = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "cholesky", "--n", "64"],
                           cwd=tmp_path, capture_output=True, env={**os.environ, "TMPDIR": str(temporary)}, timeout=60)
    assert again.returncode == 0 and not any(temporary.iterdir()), again.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_just_after_the_fork_stops_the_run_once(tmp_path, signum):
    """Tester z: a Ctrl-C or SIGTERM in the first milliseconds after the fork was lost (the run finished, exit 0)
    or said twice, two --json objects. The signals wait across the fork, and the child takes the one passed on
    where it says it once. A Ctrl-C while SciPy's modules loaded (about 10 ms after the fork) was dropped inside
    a Cython module's set-up, and the run went on to succeed without a word (2 runs in 15): held until they have
    loaded."""
    (tmp_path / "nap.py").write_text("import time\n\n\ndef nap(A):\n    time.sleep(5)\n")
    (tmp_path / "nap.tile").write_text('use "nap.py"\nkernel nap(inout A)\nprogram p {\n  tiling uniform(nb = 10)\n'
                                       "  matrix A[n, n] = zeros\n  nap(A[0, 0])\n}\n")
    for delay in (0.0, 0.002, 0.01):
        run = subprocess.Popen([sys.executable, "-m", "tiledsl.commands.cli", "run", "nap.tile", "--n", "10", "--json"],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               stdin=subprocess.DEVNULL)
        children = f"/proc/{run.pid}/task/{run.pid}/children"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and run.poll() is None:
            with open(children) as listed:
                if listed.read().split():
                    break
        time.sleep(delay)
        run.send_signal(signum)
        out, err = run.communicate(timeout=30)
        name = signal.Signals(signum).name
        assert run.returncode == 128 + signum, (delay, err)
        assert out.count("\n") == 1 and f'"error": "stopped by {name}"' in out, (delay, out)
        assert err.count(f"stopped by {name}") == 1, (delay, err)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("pidfd", [True, False])
def test_a_signal_noted_while_the_parent_waits_is_handled_at_once(monkeypatch, pidfd):
    """A Ctrl-C 1-2 ms after the fork (1 in ~200 under load) was handled only once the run had ended, which
    it then did, exit 0: noted just before the parent's blocking waitpid began, nothing woke that wait. Here
    the signal is noted by another thread, which wakes no system call of the waiting one either."""
    if not pidfd:
        monkeypatch.delattr(os, "pidfd_open")
    child = os.fork()
    if child == 0:
        time.sleep(3)
        os._exit(0)
    handled = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: handled.append(time.monotonic()))
    noting = threading.Thread(target=lambda: (time.sleep(0.2), signal.pthread_kill(noting.ident, signal.SIGUSR1)))
    try:
        began = time.monotonic()
        noting.start()
        assert os.waitstatus_to_exitcode(onerank._ended(child)) == 0
        ended = time.monotonic()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert len(handled) == 1
    assert handled[0] - began < 1.5 and ended - began > 2.5


@pytest.mark.timeout(120)
def test_a_process_a_crashed_kernel_started_is_ended_with_it(tmp_path):
    """Tester z: a kernel's `sleep 75` outlived the crashed run, holding its output: `| cat` waited 75 s."""
    (tmp_path / "k.py").write_text("import ctypes\nimport subprocess\n\n\ndef crash(A):\n"
                                   "    subprocess.Popen(['sleep', '75'])\n    ctypes.string_at(0)\n")
    (tmp_path / "c.tile").write_text('use "k.py"\nkernel crash(inout A)\nprogram p {\n  tiling uniform(nb = 10)\n'
                                     "  matrix A[n, n] = zeros\n  crash(A[0, 0])\n}\n")
    began = time.monotonic()
    out = subprocess.run(f"{sys.executable} -m tiledsl.commands.cli run c.tile --n 10 2>&1 | cat", shell=True,
                         cwd=tmp_path, capture_output=True, text=True, timeout=100)
    assert time.monotonic() - began < 30 and "crashed (Segmentation fault) in kernel code crash" in out.stdout
