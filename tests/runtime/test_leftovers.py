"""Processes a kernel leaves running (runtime/leftovers.py): ended with the run, and the process that
ran it no subreaper after it (whole runs: tests/cli/test_jobs.py)."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_a_process_that_ran_a_run_in_it_adopts_no_orphans_after_it(tmp_path):
    """The run made its process a subreaper for good: in a test runner, the launcher of a later
    `tiledsl run --np` killed with SIGKILL was adopted by it, never saw its parent become init,
    and kept the job's ranks running (two job-fault tests timed out in CI)."""
    script = ("import sys\nfrom tiledsl.commands.cli import main\nfrom tiledsl.runtime import leftovers\n"
              f"status = main(['run', {str(ROOT / 'programs' / 'cholesky.tile')!r}, '--n', '64', '--nb', '32'])\n"
              "print(status, leftovers._subreaper())\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=100,
                         env={"PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(tmp_path), "HOME": str(tmp_path)})
    assert out.stdout.splitlines()[-1] == "0 False", out.stderr


@pytest.mark.timeout(30)
def test_a_subreaper_already_stays_one():
    from tiledsl.runtime import leftovers

    leftovers._set_subreaper(True)
    try:
        assert leftovers.end_leftovers(leftovers.adopt_orphans()) == [] and leftovers._subreaper()
    finally:
        leftovers._set_subreaper(False)


@pytest.mark.timeout(30)
def test_a_process_of_the_runtimes_own_is_ended_but_not_named_as_a_kernels():
    """A rank stopped while its start-up watcher ran ended the watcher, a copy of the rank, and named
    it as a process "which a kernel started" (no kernel had run)."""
    from tiledsl.runtime import leftovers

    adoption = leftovers.adopt_orphans()
    own = subprocess.Popen(["sleep", "60"])
    leftovers.runtime_children.add(own.pid)
    try:
        assert leftovers.end_leftovers(adoption) == []
        assert own.wait(timeout=10) is not None
    finally:
        leftovers.runtime_children.discard(own.pid)
