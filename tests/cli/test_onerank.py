"""A one-rank tiledsl run watched from a forked parent (tiledsl/commands/onerank.py): what it leaves behind.
(What it says of a run that ends unseen is tests/runtime/test_crash.py's.)"""
import os
import signal
import subprocess
import sys
import tempfile
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
def test_a_run_whose_parent_is_killed_stops_and_removes_its_folder(tmp_path):
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
    run.wait(10)
    deadline = time.monotonic() + 30
    while any(temporary.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(temporary.iterdir())
