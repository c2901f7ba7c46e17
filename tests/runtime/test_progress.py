"""The progress bar: its text and time left, when it is drawn, the check's bar, rank 0's bar
under mpiexec; the phases' stopwatch."""
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tiledsl.runtime import Options, execute, progress

ROOT = Path(__file__).resolve().parents[2]


def test_the_bar_shows_the_fraction_done_and_the_time_left_at_the_rate_so_far():
    text = progress.render("qr", 50, 200, 10.0)
    assert text.startswith("qr [" + "#" * 7 + " " * 23 + "]")
    assert " 25.0%  50/200 tasks  10 s, about 30 s left" in text


def test_the_time_left_reads_in_minutes_once_past_one():
    assert progress.render("lu", 10, 100, 20.0).endswith("about 3 min 00 s left")


@pytest.mark.parametrize("done, shown", [(0, "0/40 tasks  3 s"), (40, "40/40 tasks  3 s"), (55, "40/40 tasks  3 s")])
def test_no_time_left_before_the_first_task_or_after_the_last(done, shown):
    text = progress.render("x", done, 40, 3.0)
    assert text.endswith(shown) and "left" not in text


def test_an_empty_phase_is_complete():
    assert "100.0%  0/0 tasks" in progress.render("check", 0, 0, 1.0)


def test_a_bar_is_wanted_on_a_terminal_or_when_the_environment_asks(monkeypatch):
    monkeypatch.delenv(progress.FORCE, raising=False)
    assert not progress.wanted(io.StringIO())
    monkeypatch.setenv(progress.FORCE, "1")
    assert progress.wanted(io.StringIO())
    monkeypatch.setenv(progress.FORCE, "0")
    assert not progress.wanted(io.StringIO())


@pytest.mark.timeout(30)
def test_the_bar_counts_the_tasks_done_since_it_started_and_is_erased_at_the_end():
    done = [7]  # tasks of an earlier phase
    out = io.StringIO()
    with progress.Progress("check", 4, lambda: done[0], delay=0.0, stream=out):
        done[0] = 9
        deadline = time.monotonic() + 10
        while "2/4 tasks" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert "check [" in out.getvalue() and "2/4 tasks" in out.getvalue()
    assert out.getvalue().endswith("\r\033[K")


def test_the_stopwatch_times_each_phase_and_the_whole():
    watch = progress.Stopwatch()
    time.sleep(0.05)
    first = watch.lap("setup")
    time.sleep(0.02)
    watch.lap("run")
    assert first >= 0.05 and watch.laps["run"] >= 0.02
    assert list(watch.laps) == ["setup", "run"]
    assert watch.total() == pytest.approx(sum(watch.laps.values()))


def test_time_the_stopwatch_excludes_is_in_no_phase_nor_the_whole():
    watch = progress.Stopwatch()
    with watch.excluded():
        time.sleep(0.05)
    watch.lap("setup")
    assert watch.laps["setup"] < 0.05 and watch.total() == watch.laps["setup"]


@pytest.mark.timeout(120)
def test_the_libraries_a_kernel_module_imports_are_not_the_run_s_setup(compiled, tmp_path):
    """A kernel module importing scipy made 'setup' a second longer, where the summary's phases
    leave out the libraries' import."""
    (tmp_path / "slow.tile").write_text('use "slow_kernels.py"\nkernel twice(inout A)\nprogram slow {\n'
                                        '  matrix A[n, n] = random spd\n  for i in 0 .. A.mt { twice(A[i, i]) }\n}\n')
    (tmp_path / "slow_kernels.py").write_text("import time\ntime.sleep(2.0)  # as a large library's import\n\n\n"
                                              "def twice(a):\n    a *= 2\n")
    began = time.perf_counter()
    result = execute(compiled(str(tmp_path / "slow.tile")), Options(n=60, tiles={"nb": 20}, workers=1))
    wall = time.perf_counter() - began
    assert result.phases["setup"] < 2.0 and result.total_seconds <= wall - 2.0


@pytest.mark.timeout(120)
def test_the_check_has_a_bar_of_its_own(compiled, monkeypatch, capsys):
    monkeypatch.setenv(progress.FORCE, "1")
    monkeypatch.setenv(progress.FORCE + "_DELAY", "0")
    result = execute(compiled("programs/qr.tile"), Options(n=400, tiles={"nb": 64}, check=True, progress=True,
                                                           workers=2))
    err = capsys.readouterr().err
    assert result.passed
    assert "qr [" in err and "check [" in err
    assert "rank 0's share" not in err  # one rank: the bar is the whole run


@pytest.mark.timeout(300)
def test_rank_0_draws_its_share_under_mpiexec():
    """A real 2-rank job whose stderr is a pipe: the environment asks for the bar."""
    env = dict(os.environ, **{progress.FORCE: "1", progress.FORCE + "_DELAY": "0"})
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "programs/cholesky.tile", "--n", "3600",
                          "--nb", "96", "--check", "--np", "2", "--workers", "1"],
                         cwd=ROOT, capture_output=True, text=True, timeout=280, env=env)
    assert out.returncode == 0, out.stderr
    bars = [part for part in out.stderr.split("\r") if "tasks" in part]
    assert any(" (rank 0's share) [" in part for part in bars), out.stderr[-2000:]
    assert any("left" in part for part in bars), bars
    assert "  check " in out.stdout and "  total " in out.stdout


@pytest.mark.timeout(300)
def test_tiledsl_run_np_on_a_terminal_asks_its_ranks_for_the_bar():
    """`tiledsl run --np` whose stderr is a terminal (a pseudo-terminal here) sets
    TILEDSL_PROGRESS=1 for its ranks, whose own stderr is a pipe to mpiexec. The bar's first
    line, drawn as the run starts, is all it looks for: n = 2400 (25×25 tiles) is plenty."""
    import pty

    env = {k: v for k, v in os.environ.items() if k != progress.FORCE}
    env[progress.FORCE + "_DELAY"] = "0"
    controller, terminal = pty.openpty()
    try:
        job = subprocess.Popen([sys.executable, "-m", "tiledsl.commands.cli", "run", "programs/cholesky.tile",
                                "--n", "2400", "--nb", "96", "--np", "2", "--workers", "1"],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=terminal, env=env)
        os.close(terminal)
        seen = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the job closed the terminal's last writer
                break
            if not chunk:
                break
            seen += chunk
        assert job.wait(timeout=280) == 0, seen.decode(errors="replace")
    finally:
        os.close(controller)
    assert b"(rank 0's share) [" in seen

