"""The bound on a loop nest's iterations, checked before the survey walks it (issue 16.3):
real drivers, real ``tiledsl run`` processes on one and two ranks."""
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tiledsl.compiler import compile_path
from tiledsl.driverload import import_driver
from tiledsl.language import MAX_ITERATIONS
from tiledsl.runtime.iterations import Interval, LoopBound
from tiledsl.runtime.layout import make_distribution, make_matrices, make_params
from tiledsl.runtime.options import Options
from tiledsl.runtime.recording import record

ROOT = Path(__file__).resolve().parents[2]
LONG = """program p {
  param big = 1000000
  matrix A[n, n] = random general
  gemm(A[0, 0], A[0, 1], A[1, 1])
  for i in 0 .. big {
    for j in i .. big { gemm(A[0, 0], A[0, 1], A[1, 1]) }
  }
}
"""


def tiledsl(*args, cwd):
    return subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=150)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("ranks", [1, 2])
def test_a_loop_nest_too_long_to_walk_is_refused_before_it_is_walked(tmp_path, ranks):
    (tmp_path / "t.tile").write_text(LONG)
    started = time.monotonic()
    out = tiledsl("run", "t.tile", "--n", 64, "--nb", 32, "--np", ranks, cwd=tmp_path)
    assert out.returncode == 1 and time.monotonic() - started < 120, out.stderr
    found = re.findall(r"tiledsl: error: rank \d \(t\.tile:6\): the loop nest would run up to 1,000,001,000,000 "
                       r"loop iterations \(at most 10,000,000,000 are run\); this loop alone up to "
                       r"1,000,000,000,000", out.stderr)
    assert 1 <= len(found) <= ranks and "Traceback" not in out.stderr, out.stderr


@pytest.mark.timeout(300)
@pytest.mark.parametrize("command", [["explain", "--totals"], ["graph", "-o", "g.dot"], ["tune", "--quick", "--no-save"],
                                     ["simulate", "--nodes", "2", "--nb", "32", "--machine", "keeneland"]])
def test_every_command_that_walks_the_loop_nest_refuses_one_too_long(tmp_path, command):
    (tmp_path / "t.tile").write_text(LONG)
    out = tiledsl(command[0], "t.tile", "--n", 64, *command[1:], cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    tunes = "in tune's count of the program's tasks at n=64, nb=64 (tune chooses the sizes; --n and --sizes set " \
            "them): " if command[0] == "tune" else ""  # at sizes tune chose
    where = "rank 0 (t.tile:6)" if command[0] == "tune" else "t.tile:6"  # the others run no rank
    assert f"error: {where}: {tunes}the loop nest would run up to 1,000,001,000,000 loop iterations" in out.stderr, \
        out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.timeout(200)
def test_a_loop_nest_within_the_bound_runs(tmp_path):
    (tmp_path / "t.tile").write_text(LONG)
    out = tiledsl("run", "t.tile", "--n", 64, "--nb", 32, "--set", "big=30", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert '"tasks": 466' in out.stdout  # 1 + 30 * 31 / 2


@pytest.mark.timeout(60)
def test_a_loop_nest_that_will_take_hours_is_warned_of_before_it_is_walked(tmp_path):
    """cholesky at n = 2000, nb = 1 (1.3e9 tasks) said nothing for minutes: the survey walks it silently."""
    import warnings

    import tiledsl

    (tmp_path / "t.tile").write_text(LONG)
    with warnings.catch_warnings(), pytest.raises(tiledsl.TiledslWarning) as said:
        warnings.simplefilter("error", tiledsl.TiledslWarning)  # the warning stops the run, before its walk
        tiledsl.load(tmp_path / "t.tile").run(n=64, tiles={"nb": 32}, params={"big": 20000})
    assert str(said.value) == (
        "the loop nest runs up to 400,020,000 loop iterations (t.tile:6 alone up to 400,000,000): at some 50 µs a "
        "task, tiledsl's own work may take up to 6 hour(s), the first minutes of it before the run, without a word "
        "(larger tiles do the same work in fewer tasks; Ctrl-C stops it)")


def _bound_and_walk(program: str, folder: Path, n: int, **tiles):
    result, text = compile_path(ROOT / "programs" / f"{program}.tile")
    path = folder / f"iterations_{program}.py"
    path.write_text(text)
    driver = import_driver(str(path))
    params = make_params(driver, Options(n=n, tiles=tiles))
    matrices = make_matrices(driver, params, make_distribution(driver.PROGRAM, params, (1, 1), 0), 0)
    bound = LoopBound(matrices)
    driver.loop_bounds(bound, params)
    return bound.total, len(record(driver, matrices, params).submitted)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("program, n, tiles", [("cholesky", 1000, {"nb": 100}), ("qr", 700, {"nb": 100}),
                                               ("lu", 900, {"nb": 100}), ("hqr", 1500, {"nb": 100}),
                                               ("hetero_cholesky", 1000, {"B": 200, "b": 50, "s": 3})])
def test_the_bound_of_every_shipped_program_is_an_upper_bound_of_its_tasks(tmp_path, program, n, tiles):
    # every task is submitted inside its innermost loop, once per iteration at most per call site
    total, tasks = _bound_and_walk(program, tmp_path, n, **tiles)
    calls = {"cholesky": 4, "qr": 4, "lu": 4, "hqr": 6, "hetero_cholesky": 4}[program]
    assert 0 < total <= 20 * tasks and tasks <= calls * max(total, 1)


def test_a_loop_of_one_value_counts_one_iteration_wherever_it_starts():
    """``for i in t + r * s .. t + r * s + 1``: the intervals of its start and stop span the
    outer loops' range, but its width is 1 at every iteration (the compiler passes it)."""
    bound = LoopBound({})
    t, outer = bound.loop(0, 100, 1, 1)
    r, outer = bound.loop(1, 1000, outer, 2)
    start = t + r * 16
    bound.loop(start, start + 1, outer, 3, width=1)
    assert bound.largest == (100 * 999, 2) and bound.total == 100 + 2 * 100 * 999
    stepped, outer = LoopBound({}), 5
    assert stepped.loop(Interval(0, 9), Interval(20, 29), outer, 1, 3, width=20)[1] == 5 * 7
    assert stepped.loop(Interval(20, 29), Interval(0, 9), outer, 1, -3, width=-20)[1] == 5 * 7


def test_intervals_bound_every_value():
    k = Interval(2, 5)
    for value, (lo, hi) in ((k + 1, (3, 6)), (1 - k, (-4, -1)), (k * -2, (-10, -4)), (k // 2, (1, 2)),
                            (k % 3, (0, 2)), (LoopBound.min(k, 4), (2, 4)), (LoopBound.max(k * 2, 7), (7, 10))):
        assert (value.lo, value.hi) == (lo, hi)
    bound = LoopBound({})
    j, trips = bound.loop(k, 10, 3, 7)
    assert (j.lo, j.hi, trips, bound.total) == (2, 9, 24, 24)
    assert MAX_ITERATIONS == 10**10


GUARDED = """program p {
  param big = 0
  matrix A[n, n] = random spd
  for k in 0 .. A.nt {
    potrf(A[k, k])
    if k == 1 and big == 1 { for i in 0 .. 999999999999999999 { } }
    if not (big == 0) { for i in 0 .. 999999999999999999 { } } else if k >= 0 { potrf(A[k, k]) }
  }
}
"""


@pytest.mark.timeout(200)
def test_a_loop_under_a_condition_certainly_false_counts_nothing(tmp_path):
    (tmp_path / "t.tile").write_text(GUARDED)
    out = tiledsl("run", "t.tile", "--n", 64, "--nb", 32, "--json", cwd=tmp_path)
    assert out.returncode == 0 and '"tasks": 4' in out.stdout, out.stderr
    refused = tiledsl("run", "t.tile", "--n", 64, "--nb", 32, "--set", "big=1", cwd=tmp_path)
    assert refused.returncode == 1 and "the loop nest would run up to 4e+18" in refused.stderr, refused.stderr


def test_conditions_over_intervals_are_three_valued():
    from tiledsl.runtime.iterations import MAYBE, and_, not_, or_

    k = Interval(0, 4)
    assert (k == 1) is MAYBE and (k == 7) is False and (Interval(2, 2) == 2) is True
    assert (k < 5) is True and (k >= 5) is False and (k > 3) is MAYBE and (k != 9) is True
    assert and_(k == 1, k == 7) is False and or_(k == 1, k < 5) is True and not_(k == 1) is MAYBE
    assert LoopBound({}).when(k == 7, 10) == 0 and LoopBound({}).when(k == 1, 10) == 10
