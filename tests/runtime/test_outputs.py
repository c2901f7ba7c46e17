"""runtime.outputs: a run's files, renamed into place all together or not at all."""
import os
import subprocess

import pytest

from tiledsl.runtime.outputs import Staging, remove_abandoned


def test_a_target_that_cannot_be_replaced_is_a_failure_to_report_not_an_error(tmp_path, monkeypatch):
    target = tmp_path / "out.npy"
    target.write_text("before")
    replace = os.replace

    def refuse(source, destination):
        if destination == str(target):
            raise PermissionError(1, "Operation not permitted")
        replace(source, destination)
    monkeypatch.setattr(os, "replace", refuse)
    with Staging(None) as staging:
        kept = staging.temporary(str(tmp_path / "trace.json"))
        refused = staging.temporary(str(target))
        failures = staging.commit(True)
    assert failures == [f"cannot write {target}: Operation not permitted"]
    assert (tmp_path / "trace.json").exists() and target.read_text() == "before"
    assert not os.path.exists(kept) and not os.path.exists(refused)  # no temporary left behind


@pytest.mark.parametrize("succeeded", [True, False])
def test_files_are_renamed_only_when_the_run_succeeded(tmp_path, succeeded):
    with Staging(None) as staging:
        with open(staging.temporary(str(tmp_path / "a.npy")), "w") as file:
            file.write("new")
        assert staging.commit(succeeded) == []
    assert (tmp_path / "a.npy").exists() == succeeded
    assert staging.withheld == ([] if succeeded else [str(tmp_path / "a.npy")])
    assert [p.name for p in tmp_path.iterdir()] == (["a.npy"] if succeeded else [])


@pytest.mark.timeout(120)
def test_an_output_on_a_full_disk_is_one_line_and_leaves_nothing(tmp_path):
    """A real 1 MiB file system (root only: mount) for a 5 MB output."""
    import subprocess
    import sys
    from pathlib import Path

    disk = tmp_path / "tiny"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
                                           capture_output=True).returncode:
        pytest.skip("mounting a small file system needs root")
    try:
        out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "programs/cholesky.tile", "--n", "800",
                              "--nb", "100", "--output", f"A={disk / 'o.npy'}"], capture_output=True, text=True,
                             timeout=100, cwd=Path(__file__).resolve().parents[2])
        assert out.returncode == 1 and "No space left on device" in out.stderr and "Traceback" not in out.stderr
        assert list(disk.iterdir()) == []
    finally:
        subprocess.run(["umount", str(disk)])


def test_a_replaced_file_keeps_its_mode(tmp_path):
    target = tmp_path / "out.npy"
    target.write_text("before")
    target.chmod(0o640)
    with Staging(None) as staging:
        with open(staging.temporary(str(target)), "w") as file:
            file.write("after")
        assert staging.commit(True) == []
    assert target.read_text() == "after" and target.stat().st_mode & 0o7777 == 0o640


def test_a_read_only_output_file_is_refused_not_replaced(tmp_path, monkeypatch):
    """Renaming over a file ignores its mode: a read-only one is the user's to unlock (root's
    access checks pass whatever the mode, so the check is shown as a user would meet it)."""
    from tiledsl.runtime.outputs import check_writable
    from tiledsl.runtime.world import UsageError

    target = tmp_path / "out.npy"
    target.write_text("keep me")
    access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if path == str(target) else access(path, mode))
    with pytest.raises(UsageError, match=r"--output A=out.npy: '.*out.npy' is read-only: make it writable to "
                                         r"replace it, or name another file"):
        check_writable(str(target), "--output A=out.npy")


def test_the_temporary_files_of_ranks_gone_are_removed_and_no_others(tmp_path):
    """A rank killed while the outputs were written left .A.npy.PID-TOKEN.tiledsl-partial, 18 MB,
    for good: tiledsl run --np removes those of processes that are gone once its job ends."""
    gone = _a_finished_pid()
    target = tmp_path / "A.npy"
    target.write_bytes(b"before")
    left = tmp_path / f".A.npy.{gone}-0123abcd.tiledsl-partial"
    live = tmp_path / f".A.npy.{os.getpid()}-4567cdef.tiledsl-partial"  # a job still writing it
    other = tmp_path / f".B.npy.{gone}-89abcdef.tiledsl-partial"  # not an output of this job
    for path in (left, live, other):
        path.write_bytes(b"part")
    remove_abandoned([str(target), str(tmp_path / "trace.json")])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name, "A.npy"])
    assert target.read_bytes() == b"before"


def _a_finished_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid
