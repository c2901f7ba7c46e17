"""What `tiledsl run --np` leaves behind after a failed job: MPICH segments are removed once free."""
import mmap
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tiledsl.commands import jobs
from tiledsl.commands.rankwatch import RankWatch

# Their jobs fail and are killed on purpose and they count what is left in /dev/shm: one
# pytest-xdist worker runs them all, one after the other.
pytestmark = pytest.mark.xdist_group("shared-memory")

HOLD = """
import mmap, sys, time
with open(sys.argv[1], "r+b") as f:
    view = mmap.mmap(f.fileno(), 4096)
    print("mapped", flush=True)
    time.sleep(float(sys.argv[2]))
"""


@pytest.fixture(autouse=True)
def shared_memory(tmp_path, monkeypatch):
    """A folder of its own for the segments these tests make: a failing job running beside the
    tests (pytest-xdist's other worker) removes the unmapped segments it finds in /dev/shm."""
    folder = tmp_path / "shm"
    folder.mkdir()
    monkeypatch.setattr(jobs, "SHARED_MEMORY", folder)
    return folder


def segment():
    path = jobs.SHARED_MEMORY / f"mpich_shm_test_{uuid.uuid4().hex[:8]}"
    path.write_bytes(bytes(mmap.PAGESIZE))
    return path


def hold(path, seconds):
    """A process mapping ``path`` for ``seconds``, as an exiting rank does."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "mapped"
    return process


@pytest.mark.timeout(30)
def test_a_segment_is_removed_once_the_exiting_rank_lets_go():
    before = jobs.segments()
    path = segment()
    rank = hold(path, 0.5)
    began = time.monotonic()
    assert jobs.remove_orphans(before) == [path]
    assert not path.exists() and time.monotonic() - began >= 0.3
    rank.wait(5)


@pytest.mark.timeout(30)
def test_a_segment_still_in_use_is_kept():
    before = jobs.segments()
    path = segment()
    rank = hold(path, 20)
    try:
        began = time.monotonic()
        assert jobs.remove_orphans(before, wait=0.5) == []
        assert path.exists() and time.monotonic() - began < 5
    finally:
        rank.kill()
        rank.wait(5)
        path.unlink()


@pytest.mark.timeout(30)
def test_what_a_killed_job_left_is_removed_by_a_later_one_once_stale(tmp_path, monkeypatch):
    import os

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(jobs.tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    old_segment, young_segment, held_segment = segment(), segment(), segment()
    old_folder, young_folder = tmp_path / "tiledsl-job-old", tmp_path / "tiledsl-job-young"
    for folder in (old_folder, young_folder):
        folder.mkdir()
        (folder / "started.0").write_text("")
    stale = time.time() - 2 * jobs.STALE_SECONDS
    for path in (old_segment, held_segment, old_folder):
        os.utime(path, (stale, stale))
    rank = hold(held_segment, 20)
    try:
        jobs.remove_stale()
        assert not old_segment.exists() and young_segment.exists() and held_segment.exists()
        assert not old_folder.exists() and young_folder.exists()
    finally:
        rank.kill()
        rank.wait(5)
        for path in (young_segment, held_segment):
            path.unlink()


OPEN = """
import sys, time
with open(sys.argv[1]) as held:
    print("open", flush=True)
    time.sleep(float(sys.argv[2]))
"""


@pytest.mark.timeout(30)
def test_the_topology_files_a_job_made_are_removed_and_no_other(tmp_path, monkeypatch):
    """hydra's proxy writes /tmp/hydra_hwloc_xmlfile_*, holds it open, and leaves it when aborted."""
    monkeypatch.setattr(jobs, "TOPOLOGY_FOLDER", tmp_path)
    older = tmp_path / "hydra_hwloc_xmlfile_older"
    older.write_text("<topology/>")
    before = jobs.topology_files()
    left, running = tmp_path / "hydra_hwloc_xmlfile_left", tmp_path / "hydra_hwloc_xmlfile_running"
    for path in (left, running):
        path.write_text("<topology/>")
    holder = subprocess.Popen([sys.executable, "-c", OPEN, str(running), "20"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"  # a job running beside this one
        assert jobs.remove_topology_files(before, str(tmp_path / "no-such-job")) == [left]
        assert not left.exists() and running.exists() and older.exists()
    finally:
        holder.kill()
        holder.wait(5)


@pytest.mark.timeout(30)
def test_stale_topology_files_no_process_holds_are_removed_by_a_later_job(tmp_path, monkeypatch):
    """A `tiledsl run` killed by SIGKILL cannot remove its hydra topology files: a later job
    removes those older than STALE_SECONDS that no process holds open."""
    import os

    monkeypatch.setattr(jobs, "TOPOLOGY_FOLDER", tmp_path / "topology")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(jobs.tempfile, "tempdir", None)
    (tmp_path / "topology").mkdir()
    old, young, held = (tmp_path / "topology" / f"hydra_hwloc_xmlfile_{name}" for name in ("old", "young", "held"))
    stale = time.time() - 2 * jobs.STALE_SECONDS
    for path in (old, young, held):
        path.write_text("<topology/>")
    for path in (old, held):
        os.utime(path, (stale, stale))
    holder = subprocess.Popen([sys.executable, "-c", OPEN, str(held), "20"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"  # a long job running beside this one
        jobs.remove_stale()
        assert not old.exists() and young.exists() and held.exists()
    finally:
        holder.kill()
        holder.wait(5)


FAILS = """use "fails.py"
kernel fail(inout A)

program fails {
  tiling uniform(nb = 32)
  matrix A[n, n] = zeros
  for k in 0 .. A.nt { fail(A[k, k]) }
}
"""


@pytest.mark.timeout(120)
def test_a_job_ended_by_mpi_abort_leaves_no_topology_file(tmp_path):
    (tmp_path / "fails.tile").write_text(FAILS)
    (tmp_path / "fails.py").write_text("def fail(A):\n    raise ValueError('no')\n")
    before = jobs.topology_files()
    run = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "fails.tile", "--np", "2", "--n", "64"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=100,
                         env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")))
    assert run.returncode == 1 and "kernel fail failed on A[" in run.stderr, run.stderr
    assert left_behind(before) == set()  # an aborted job left its own


def left_behind(before, wait=5.0):
    """The topology files made since ``before`` that no process holds open (those held open are
    other jobs') and that stay: a job that failed beside this one (on pytest-xdist's other
    worker) removes its own within a second or two; this test's jobs have ended."""
    deadline = time.monotonic() + wait
    while True:
        made = jobs.topology_files() - before
        left = made - {Path(path) for path in jobs.opened(made)}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


ENDS_AT_ONCE = """
import sys, time
from tiledsl.commands import jobs

# the launcher dies of the first signal at once (ranks still starting); a second one comes while
# this process finishes (here: a second's work after the job)
code = jobs.run_job([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"])
time.sleep(1)
sys.exit(code)
"""


@pytest.mark.timeout(60)
def test_a_signal_repeated_after_the_job_ended_changes_nothing(tmp_path):
    job = subprocess.Popen([sys.executable, "-c", ENDS_AT_ONCE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, cwd=tmp_path)
    assert job.stdout.readline().strip() == "started"
    job.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    job.send_signal(signal.SIGTERM)
    out, err = job.communicate(timeout=30)
    assert job.returncode == 143, err
    assert err == "tiledsl: stopped by SIGTERM\n"


ENDS_AS_IT_WENT = """
import os, signal, sys
from tiledsl.commands import jobs

outcome = jobs._outcome


def signalled_as_it_reports(*args, **kwargs):  # a Ctrl-C as the job's outcome is read, every rank done
    os.kill(os.getpid(), signal.SIGINT)
    return outcome(*args, **kwargs)


jobs._outcome = signalled_as_it_reports
sys.exit(jobs.run_job([sys.executable, "-c", "print('ran')"]))
"""


@pytest.mark.timeout(60)
def test_a_signal_after_the_launcher_ended_leaves_the_run_as_it_went(tmp_path):
    """Tester v82d: a Ctrl-C that came as `tiledsl run --np 4` read the outcome of a job that had succeeded
    (its summary printed, its files written) said "stopped by SIGINT", exit 130."""
    out = subprocess.run([sys.executable, "-c", ENDS_AS_IT_WENT], capture_output=True, text=True, cwd=tmp_path,
                         timeout=50)
    assert (out.returncode, out.stdout, out.stderr) == (0, "ran\n", "")


def test_a_process_that_ends_while_its_files_are_looked_at_is_passed_over(tmp_path, monkeypatch):
    """A process gone between the listing of /proc and that of its descriptors: Path.glob raised
    FileNotFoundError out of `tiledsl run` (an internal error at the end of a good run)."""
    every_process = jobs._of_every_process
    monkeypatch.setattr(jobs, "_of_every_process",
                        lambda entry: [Path("/proc", "999999999", entry), *every_process(entry)])
    held = tmp_path / "held"
    with open(held, "w"):
        assert jobs.opened({held}) == {str(held)}
    assert jobs.job_processes(str(tmp_path)) == [] and isinstance(jobs.mapped(), set)


@pytest.mark.timeout(180)
def test_a_job_leaves_its_stdin_to_the_shell_loop_that_feeds_it(tmp_path):
    """The launcher forwarded our stdin to rank 0: in `while read n; do tiledsl run --np 2 ...; done
    < sizes` the first job ate the other sizes, and the loop ran once, exit status 0."""
    (tmp_path / "sizes").write_text("64\n96\n")
    script = (f"while read n; do {sys.executable} -m tiledsl.commands.cli run cholesky --np 2 --n $n --nb 32 "
              "| head -1; done < sizes")
    run = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=170,
                         env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")))
    assert run.returncode == 0, run.stderr
    assert [line.split()[1] for line in run.stdout.splitlines()] == ["n=64", "n=96"], run.stdout


LEAVING = {"popen": "import subprocess\n\ndef leave(A):\n    subprocess.Popen(['sleep', '60'])\n    A += 0.0\n",
           "fork": "import os\n\ndef leave(A):\n    os.fork()\n    A += 0.0\n",
           "shell": "import os\n\ndef leave(A):\n    os.system('sleep 60 &')\n    A += 0.0\n",
           # a shell whose own child would outlive it, and a multiprocessing pool left open (ended by
           # multiprocessing as the process exits: killed first, its exit handler waited for ever)
           "tree": "import subprocess\n\ndef leave(A):\n    subprocess.Popen(['sh', '-c', 'sleep 60; echo late'])\n"
                   "    A += 0.0\n",
           "pool": "import multiprocessing\n\ndef leave(A):\n    leave.pool = multiprocessing.Pool(1)\n    A += 0.0\n"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how, ranks", [("popen", "2"), ("fork", "2"), ("fork", "1"), ("popen", "1"),
                                        ("shell", "1"), ("shell", "2"), ("tree", "1"), ("pool", "1")])
def test_a_kernel_leaving_a_process_does_not_hang_the_run(tmp_path, how, ranks):
    """A helper left running held the ranks' output open, and the launcher waited for it after the
    summary; a forked copy of a rank (no exec) hung in the rank's locks, on 1 rank left behind. On one
    rank (no launcher) `tiledsl run | tee` waited for the helper, an orphan once its shell had ended."""
    (tmp_path / "k.py").write_text(LEAVING[how])
    (tmp_path / "f.tile").write_text('use "k.py"\nkernel leave(inout A)\nprogram f {\n  tiling uniform(nb = 64)\n'
                                     "  matrix A[n, n] = random spd\n  leave(A[0, 0])\n}\n")
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "f.tile", "--n", "128", "--np", ranks],
                         cwd=tmp_path, capture_output=True, text=True, timeout=100,
                         env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")))
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert time.monotonic() - start < 40 and "f: n=128" in run.stdout
    left = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
            if _runs_in(pid, str(tmp_path)) and not _zombie(pid)]
    assert left == []
    if how in ("popen", "shell"):  # the rank that started it ends it, and says so; a shell's child
        # found between its fork and its exec still has the shell's command line, and during its exec
        # none (its executable's name stands in)
        assert re.search(r"warning: rank \d: pid \d+ \((sleep 60|sh -c sleep 60 &|sleep|sh)\), which a kernel started, "
                         r"still ran when the run "
                         r"ended: ended \(a kernel must not leave processes behind\)", run.stderr), run.stderr


def _runs_in(pid: int, text: str) -> bool:
    """Whether process ``pid`` runs in folder ``text`` (the kernels' leftovers do)."""
    try:
        return os.readlink(f"/proc/{pid}/cwd").startswith(text)
    except OSError:
        return False


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.timeout(30)
@pytest.mark.parametrize("ranks, said", [(3, "tiledsl: stopped by SIGTERM (sent to a rank while it was starting)\n"),
                                         (1, "tiledsl: rank 0: stopped by SIGTERM (while it was starting)\n")])
def test_a_rank_stopped_by_sigterm_while_starting_ends_the_job_with_143(tmp_path, capsys, ranks, said):
    """SIGTERM to a rank before it handles signals killed it, and hydra exits 15: the job said the rank
    "ended without finishing the run and without a word" and exited 1; a later one gives 143."""
    launcher = SimpleNamespace(returncode=15, pid=1)
    with RankWatch(str(tmp_path), lambda pids: set()) as watch:
        assert jobs._outcome(launcher, 15, str(tmp_path), ranks, "mpiexec", watch) == 143
    assert capsys.readouterr().err == said


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ranks", ["1", "2"])
def test_an_error_python_ignores_as_the_process_ends_is_one_warning_line(tmp_path, ranks):
    """A kernel module's object whose ``__del__`` raised as the process ended (a multiprocessing pool
    left open, collected after its own pipes: `OSError: [Errno 9] Bad file descriptor`, now and then)
    printed Python's "Exception ignored in" traceback after a good run."""
    (tmp_path / "k.py").write_text("class Loud:\n    def __del__(self):\n        raise OSError('closed already')\n\n\n"
                                   "def keep(A):\n    keep.held = Loud()\n    A += 0.0\n")
    (tmp_path / "f.tile").write_text('use "k.py"\nkernel keep(inout A)\nprogram f {\n  tiling uniform(nb = 64)\n'
                                     "  matrix A[n, n] = random spd\n  keep(A[0, 0])\n}\n")
    run = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "f.tile", "--n", "128", "--np", ranks],
                         cwd=tmp_path, capture_output=True, text=True, timeout=100,
                         env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")))
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert re.search(r"tiledsl: warning: rank 0: an error was ignored in Loud.__del__ \(\S*k.py:3\): "
                     r"OSError: closed already", run.stderr), run.stderr


@pytest.mark.timeout(120)
def test_a_job_without_a_watchdog_watches_its_start_up_all_the_same(tmp_path):
    """--watchdog 0 on 2 ranks: the start-up watcher (no limit, only the job's end to watch) raised
    formatting its limit of None, and each rank printed an internal error, even of a good run."""
    run = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "cholesky", "--n", "256", "--nb", "64",
                          "--np", "2", "--watchdog", "0"], cwd=tmp_path, capture_output=True, text=True, timeout=100,
                         env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")))
    assert run.returncode == 0 and run.stderr == "", run.stderr


@pytest.mark.timeout(30)
def test_a_signal_after_every_rank_finished_its_run_is_no_stop(tmp_path, capsys):
    """SIGTERM to `tiledsl run --np 2` just after the summary, the ranks exiting: exit 143 and 'stopped by
    SIGTERM', where the JSON object said "ok": true and every file was written."""
    for rank in range(2):
        (tmp_path / f"done.{rank}").write_text("0")
    launcher = SimpleNamespace(returncode=0, pid=1)
    with RankWatch(str(tmp_path), lambda pids: set()) as watch:
        assert jobs._outcome(launcher, 143, str(tmp_path), 2, "mpiexec", watch) == 0
        (tmp_path / "done.1").unlink()  # one rank had not finished: the run was stopped
        assert jobs._outcome(launcher, 143, str(tmp_path), 2, "mpiexec", watch) == 143
    assert capsys.readouterr().err == "tiledsl: stopped by SIGTERM\n"


@pytest.mark.timeout(30)
def test_a_rank_killed_after_every_rank_finished_its_run_leaves_a_success(tmp_path, capsys):
    """kill -9 of a rank just after the summary: exit status 9 (the launcher's) and not a word, where the
    summary was out and every file written."""
    for rank in range(2):
        (tmp_path / f"done.{rank}").write_text("0")
    launcher = SimpleNamespace(returncode=9, pid=1)
    with RankWatch(str(tmp_path), lambda pids: set()) as watch:
        assert jobs._outcome(launcher, 9, str(tmp_path), 2, "mpiexec", watch) == 0
    assert capsys.readouterr().err.startswith("tiledsl: warning: the launcher ended with exit status 9, which is how "
                                              "it reports a rank killed by SIGKILL")


def test_a_launcher_outliving_its_ranks_of_itself_is_not_blamed_on_a_kernel(tmp_path, capsys):
    """A stopped hydra proxy held the ranks' output: 'a process that a kernel left running held their
    output open' (cholesky has no user kernel), and the ranks' failure, said into its pipe, was lost."""
    from tiledsl.commands import jobs

    launcher = subprocess.Popen(["sleep", "100"], start_new_session=True)  # a group, as a launcher has
    (tmp_path / "done.0").write_text("0")
    (tmp_path / "done.1").write_text("1")
    jobs._end_leftovers(launcher, str(tmp_path))
    assert launcher.poll() is not None
    assert capsys.readouterr().err == ("tiledsl: error: every rank ended, but the launcher did not (a process of its own "
                                       "stopped or stuck): killed; rank 1 ended with exit status 1, and what it said "
                                       "may not have come through\n")


@pytest.mark.parametrize("ended, code, said", [
    ({0: "0"}, 1, "tiledsl: error: rank 1 did not end its run within 60 s of a rank that had (stopped or lost?): the "
                  "job was ended\n"),
    ({0: "0", 1: "0"}, 0, "tiledsl: warning: every rank ended its run, but not its process within 60 s (one stopped, "
                          "or stuck as it exited): the job was ended\n"),
])
def test_a_rank_stopped_as_the_run_ends_does_not_hold_the_job(tmp_path, capsys, ended, code, said):
    """Rank 1 stopped once rank 0 had printed its summary: the job waited for ever (in MPI's end)."""
    from tiledsl.commands import jobs

    launcher = subprocess.Popen(["sleep", "100"], start_new_session=True)  # a group, as a launcher has
    for rank, status in ended.items():
        (tmp_path / f"done.{rank}").write_text(status)
        os.utime(tmp_path / f"done.{rank}", (time.time() - jobs.END_SECONDS - 1,) * 2)
    assert jobs._wait_for_launcher(launcher, str(tmp_path), lambda: 0.0, 2) == code
    assert launcher.poll() is not None and capsys.readouterr().err == said


@pytest.mark.timeout(30)
def test_a_rank_that_starts_after_a_ctrl_c_is_sent_it_too(tmp_path):
    """Ctrl-C as `tiledsl run --np 4` started its ranks: the three that had started stopped, the fourth,
    not told, held the job 30 s, until the grace ran out."""
    import threading

    launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    late = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                             "signal.signal(signal.SIGINT, lambda *a: sys.exit(7))\nprint('ready', flush=True)\n"
                             "time.sleep(30)"], env={**os.environ, jobs.JOB_DIR_VARIABLE: str(tmp_path)},
                            stdout=subprocess.PIPE, text=True)
    assert late.stdout.readline().strip() == "ready"
    threading.Timer(0.3, lambda: (tmp_path / "started.3").write_text(str(late.pid))).start()
    try:  # the signal went to the ranks started then (a pid of none here)
        assert jobs._wait_passing_on(launcher, str(tmp_path), 2.0, signal.SIGINT, {-1}) is None
        assert late.wait(timeout=5) == 7
    finally:
        launcher.kill()
        late.kill()


@pytest.mark.timeout(120)
def test_a_stalled_kernels_busy_pool_does_not_outlive_the_run(tmp_path):
    """A kernel stalled while its multiprocessing pool's worker was busy (in CI, one blocked on a pool
    lock at a fork in a threaded process): the rank ended on the watchdog by os._exit (its kernel
    still running), where multiprocessing's exit handler does not run, and the worker held the run's
    output open for ever (`| tee` and the test waiting on it never ended)."""
    (tmp_path / "k.py").write_text("import multiprocessing, time\n\ndef stuck(A):\n"
                                   "    pool = multiprocessing.get_context('fork').Pool(1)\n"
                                   "    pool.apply_async(time.sleep, (600,))\n    time.sleep(600)\n")
    (tmp_path / "s.tile").write_text('use "k.py"\nkernel stuck(inout A)\nprogram s {\n  tiling uniform(nb = 64)\n'
                                     "  matrix A[n, n] = random spd\n  stuck(A[0, 0])\n}\n")
    run = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "s.tile", "--n", "64", "--watchdog", "2"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")))
    assert run.returncode == 1 and "watchdog: no task completed" in run.stderr, run.stderr
    assert re.search(r"warning: rank 0: pid \d+ \(.*\), which a kernel started, still ran when the run ended: ended",
                     run.stderr), run.stderr
    assert [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
            if _runs_in(pid, str(tmp_path)) and not _zombie(pid)] == []


@pytest.mark.timeout(120)
def test_a_kernel_reading_standard_input_gets_its_end_on_every_rank(tmp_path):
    """Rank 1's read waited for the watchdog (hydra gives the ranks but 0 an input that never ends):
    every rank reads nothing, as one rank does."""
    (tmp_path / "k.py").write_text("import sys\n\ndef read(A):\n    A[0, 0] = len(sys.stdin.read()) + 1.0\n")
    (tmp_path / "r.tile").write_text('use "k.py"\nkernel read(inout A)\nprogram r {\n  tiling uniform(nb = 8)\n'
                                     "  matrix A[n, n] = zeros\n  for i in 0 .. A.mt { read(A[i, i]) }\n}\n")
    run = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "r.tile", "--n", "16", "--np", "2",
                          "--watchdog", "20", "--output", "A=a.npy"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=100, input="typed\n", env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")))
    assert run.returncode == 0, run.stderr
    assert np.load(tmp_path / "a.npy")[[0, 8], [0, 8]].tolist() == [1.0, 1.0]


def test_a_rank_lost_inside_mpis_start_is_said_so_with_the_address_limit(tmp_path, monkeypatch):
    """Under `ulimit -v 350000`, UCX could not start its thread as MPI started and aborted the rank: the job
    said only 'ended without finishing the run and without a word' (exit status 6, SIGABRT)."""
    import resource

    from tiledsl.commands import jobs

    (tmp_path / "joining.0").write_text("")
    (tmp_path / "joining.1").write_text("")
    (tmp_path / "joined.1").write_text("")
    monkeypatch.setattr(jobs.resource, "getrlimit", lambda which: (350000 * 1024, resource.RLIM_INFINITY))
    assert jobs._start_note(str(tmp_path), 0) == (
        " as MPI started,", "; under the address-space limit (ulimit -v 350000, in KiB) MPI's libraries may find no "
                            "room for their threads and buffers: raise the limit")
    assert jobs._start_note(str(tmp_path), 1) == ("", "")  # in MPI: what killed it is the run's
    monkeypatch.setattr(jobs.resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert jobs._start_note(str(tmp_path), 0) == (" as MPI started,", "")
