"""runtime.outputs: a run's files, renamed into place all together or not at all."""
import os
import re
import subprocess
import time
from pathlib import Path

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


def test_an_output_on_a_read_only_mount_says_so_not_to_make_the_file_writable(tmp_path, monkeypatch):
    """A read-only mount: 'out.npy is read-only: make it writable', and chmod there fails as well."""
    from types import SimpleNamespace

    from tiledsl.runtime.outputs import check_writable
    from tiledsl.runtime.world import UsageError

    target = tmp_path / "out.npy"
    target.write_text("keep me")
    statvfs, access = os.statvfs, os.access
    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(f_flag=os.ST_RDONLY) if path == str(tmp_path)
                        else statvfs(path))
    monkeypatch.setattr(os, "access", lambda path, mode: False if path == str(target) else access(path, mode))
    with pytest.raises(UsageError, match=r"--output A=out.npy: directory '.*' is on a file system mounted "
                                         r"read-only: name a file elsewhere"):
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


def test_the_temporary_file_of_a_rank_killed_but_not_yet_reaped_is_removed(tmp_path):
    """A rank killed by the launcher is a zombie for a moment, until its parent reaps it: its file was
    kept as a live process's (1 run in 30 stopped by SIGTERM left 32 MB beside the output)."""
    zombie = os.fork()
    if zombie == 0:
        os._exit(0)
    try:
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{zombie}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        left = tmp_path / f".A.npy.{zombie}-0123abcd.tiledsl-partial"
        left.write_bytes(b"part")
        remove_abandoned([str(tmp_path / "A.npy")])
        assert not left.exists()
    finally:
        os.waitpid(zombie, 0)


def _a_finished_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_a_long_target_name_gets_a_temporary_name_the_file_system_takes(tmp_path):
    """A 250-byte name is legal, but '.NAME.PID-TOKEN.tiledsl-partial' beside it was not: the
    run computed everything, then failed to write. The temporary's NAME is cut short instead,
    and a killed rank's such file is still found and removed."""
    target = tmp_path / ("L" * 246 + ".npy")
    with Staging(None) as staging:
        temporary = staging.temporary(str(target))
        assert len(os.path.basename(temporary)) <= 255
        with open(temporary, "w") as file:
            file.write("new")
        assert staging.commit(True) == []
    assert target.read_text() == "new"
    left = tmp_path / os.path.basename(temporary).replace(f".{os.getpid()}-", f".{_a_finished_pid()}-")
    left.write_text("part")
    remove_abandoned([str(target)])
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


def test_a_file_name_longer_than_the_file_system_takes_is_refused_before_the_run(tmp_path):
    from tiledsl.runtime.outputs import check_writable
    from tiledsl.runtime.world import UsageError

    with pytest.raises(UsageError, match=r"--output A=L+\.npy: the file name is 300 bytes long, and the file system "
                                         r"takes at most 255: name a shorter file"):
        check_writable(str(tmp_path / ("L" * 296 + ".npy")), f"--output A={'L' * 296}.npy")


def test_a_path_longer_than_the_system_takes_is_refused_before_the_run(tmp_path, monkeypatch):
    """In a working directory nested past PATH_MAX, `compile -o x.py` said its folder (where the link
    leads) did not exist; `run --output` computed everything, then failed as an internal error."""
    import os

    from tiledsl.runtime.outputs import check_writable
    from tiledsl.runtime.world import UsageError

    monkeypatch.chdir(tmp_path)
    for _ in range(21):  # one level at a time: each path given stays short
        os.mkdir("d" * 200)
        os.chdir("d" * 200)
    whole = len(os.fsencode(os.path.join(os.getcwd(), "x.py")))
    with pytest.raises(UsageError, match=rf"^-o x\.py: its whole path is {whole} bytes long, and the system takes "
                                         rf"at most 4095: name a file in a folder nearer the root$"):
        check_writable("x.py", "-o x.py")


@pytest.mark.parametrize("array, held", [
    (lambda np: np.array([{"experiment": "settings"}], dtype=object), "an array of object values"),
    (lambda np: np.array(["alpha", "beta"]), "an array of <U5 values"),
    (lambda np: np.arange(5.0), "an array of 1 dimension(s)"),
])
def test_an_output_replaces_a_npy_matrix_only_not_other_npy_data(tmp_path, array, held):
    """The docs promise an output replaces an earlier result or any matrix saved so, never a file
    of another kind; a pickled dict or text labels in a .npy were replaced all the same."""
    import numpy as np

    from tiledsl.runtime.options import Options
    from tiledsl.runtime.outputs import check_output_paths
    from tiledsl.runtime.world import UsageError

    path = tmp_path / "data.npy"
    np.save(path, array(np), allow_pickle=True)
    before = path.read_bytes()
    message = f"--output A={path}: {path} is there and holds {held}, not a matrix"
    with pytest.raises(UsageError, match=re.escape(message)):
        check_output_paths(Options(None, outputs={"A": str(path)}))
    assert path.read_bytes() == before
    np.save(path, np.ones((3, 2), dtype=np.int32))  # a matrix, whoever saved it: replaced
    check_output_paths(Options(None, outputs={"A": str(path)}))


@pytest.mark.timeout(120)
def test_a_file_a_good_run_cannot_write_is_not_blamed_on_the_run(tmp_path):
    """A trace past the disk's room (here past `ulimit -f`): 'the run failed, so t.json was not
    written', where the run had succeeded and the write failed."""
    import resource
    import sys

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))  # Python ignores SIGXFSZ: EFBIG

    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "cholesky", "--n", "400", "--nb",
                          "20", "--trace", "t.json"], cwd=tmp_path, capture_output=True, text=True, timeout=100,
                         preexec_fn=small_files, env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert out.returncode == 1 and out.stderr.endswith(
        f"tiledsl: error: cannot write the trace '{tmp_path / 't.json'}': File too large\n"
        "tiledsl: note: t.json was not written (a file already there is left as it was)\n"), out.stderr
    assert not (tmp_path / "t.json").exists()


@pytest.mark.parametrize("name, advice", [("res.npz", "res.npy"), ("res.txt", "res.npy"), ("res.csv", "res.npy")])
def test_an_output_named_other_than_npy_is_refused_saying_what_it_would_be(tmp_path, name, advice):
    """--output A=res.npz (or .txt, .csv) ran and wrote .npy bytes there, which np.load(...)['A'] and
    np.loadtxt then failed to read."""
    from tiledsl.runtime import Options
    from tiledsl.runtime.outputs import check_output_paths
    from tiledsl.runtime.world import UsageError

    path = tmp_path / name
    message = (f"--output A={path}: an output is written as a .npy file (numpy.save's format, which numpy.load "
               f"reads), not as its {path.suffix} suffix says: name it {tmp_path / advice}")
    with pytest.raises(UsageError, match=re.escape(message)):
        check_output_paths(Options(None, outputs={"A": str(path)}))
    assert not path.exists()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ranks", [1, 2])
def test_a_run_that_fails_in_a_kernel_says_its_output_was_not_written(tmp_path, ranks):
    """A failed check said 'the run failed, so out.npy was not written'; a kernel's failure left the file as
    well, and said nothing of it (then nothing of the trace)."""
    out = _run_with_outputs(tmp_path, "bump", "raise RuntimeError('boom')", ranks)
    assert out.returncode == 1 and not (tmp_path / "out.npy").exists(), out.stderr
    assert out.stderr.endswith("tiledsl: note: the run failed, so t.json, out.npy were not written (a file already "
                               "there is left as it was)\n"), out.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ranks", [1, 2])
def test_a_run_that_ends_failed_still_writes_its_trace(tmp_path, ranks):
    """Testers w and y: a run that ran every task and then failed (a NaN left in a matrix) withheld its trace
    with its outputs, where the trace is what shows which task wrote the NaN, and when. The outputs are still
    withheld; the trace says the run failed (plot's title too)."""
    import json

    out = _run_with_outputs(tmp_path, "spoil", "A[0, 0] = float('nan')", ranks)
    assert out.returncode == 1 and not (tmp_path / "out.npy").exists(), out.stderr
    assert out.stderr.endswith("tiledsl: note: the run failed, so out.npy was not written (a file already there is "
                               "left as it was)\n"), out.stderr
    trace = json.loads((tmp_path / "t.json").read_text())
    assert trace["otherData"]["ok"] is False
    assert sorted(e["name"] for e in trace["traceEvents"] if e.get("cat") == "task") == ["spoil", "spoil"]


def _run_with_outputs(folder, kernel: str, body: str, ranks: int):
    """A run of ``kernel`` (its body one line) on each diagonal tile of a 128x128 A on ``ranks`` ranks,
    with an output and a trace."""
    import subprocess
    import sys

    (folder / "k.py").write_text(f"def {kernel}(A):\n    {body}\n")
    (folder / "f.tile").write_text(f'use "k.py"\nkernel {kernel}(inout A)\nprogram f {{\n  tiling uniform(nb = 64)\n'
                                   f"  matrix A[n, n] = random general\n"
                                   f"  for i in 0 .. A.mt {{ {kernel}(A[i, i]) }}\n}}\n")
    return subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "f.tile", "--n", "128", "--np",
                           str(ranks), "--output", "A=out.npy", "--trace", "t.json"], cwd=folder, capture_output=True,
                          text=True, timeout=100)
