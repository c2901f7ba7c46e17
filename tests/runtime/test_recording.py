"""Walks of the loop nest outside the engine (the survey before a run, explain, graph):
a mistake of the program's loop nest is a clean error naming the ``.tile`` line and the
rank, exit 1, on one rank and on two (real mpiexec), never a traceback (issues 16.6, 17.11)."""
import re
import subprocess
import sys

import pytest

from tiledsl.compiler import compile_path
from tiledsl.driverload import import_driver
from tiledsl.runtime.layout import make_distribution, make_matrices, make_params
from tiledsl.runtime.options import Options
from tiledsl.runtime.recording import record, survey

PROGRAMS = {
    # name: (program, line of the mistake, message)
    "tile out of range": ("""program p {
  matrix A[n, n] = random general
  matrix B[2 * n, n] = random general
  for k in 0 .. B.mt {
    gemm(B[k, 0], A[k, 0], B[k, 1])
  }
}""", 5, "tile A[2, 0] does not exist: A, 64×64, has 2×2 tiles (in `gemm(B[k, 0], A[k, 0], B[k, 1])`, with k = 2)"),
    # every tile of the call outside the matrix: owned by no rank, so met by no rank's share walk
    "a call wholly past the matrix": ("""program p {
  matrix A[n, n] = random spd
  for i in 0 .. A.mt + 1 step 2 { potrf(A[i, i]) priority 1 }
}""", 3, "tile A[2, 2] does not exist: A, 64×64, has 2×2 tiles (in `potrf(A[i, i]) priority 1`, with i = 2)"),
    "division by zero": ("""program p {
  param z = 0
  matrix A[n, n] = random spd
  for k in 0 .. A.nt {
    potrf(A[k // z, k])
  }
}""", 5, "the loop nest failed: a division by zero (the right operand of '//', '%' or '/' is 0) "
             "(in `potrf(A[k // z, k])`, with z = 0, k = 0)"),
    # a term of the loop's share (computed at the loop's head) was said at the loop's line, 4
    "division by zero in a loop-invariant index": ("""program p {
  param z = 0
  matrix A[n, n] = random spd
  for k in 0 .. A.nt {
    potrf(A[k + 1 // z, k])
  }
}""", 5, "the loop nest failed: a division by zero (the right operand of '//', '%' or '/' is 0) "
             "(in `potrf(A[k + 1 // z, k])`, with z = 0, k = 0)"),
    "modulo by zero": ("""program p {
  param z = 0
  matrix A[n, n] = random spd
  for k in 0 .. A.nt {
    let q = k % z
    potrf(A[k, q])
  }
}""", 5, "the loop nest failed: a division by zero (the right operand of '//', '%' or '/' is 0) "
             "(in `let q = k % z`, with z = 0, k = 0)"),
    "negative height": ("""program p {
  matrix A[n, n] = random spd
  for k in 0 .. A.nt {
    if A.height(k - 1) > 0 { potrf(A[k, k]) }
  }
}""", 4, "A.height(-1): A has no tile row -1 (its tile rows are 0 .. 1) (with k = 0)"),
    "width past the end": ("""program p {
  matrix A[n, n] = random spd
  for k in 0 .. A.nt {
    let w = A.width(k + 5)
    potrf(A[k, k]) priority w
  }
}""", 4, "A.width(5): A has no tile column 5 (its tile columns are 0 .. 1) (in `let w = A.width(k + 5)`, with k = 0)"),
    "offset below zero": ("""program p {
  matrix A[n, n] = random spd
  for k in 0 .. A.nt {
    potrf(A[k, k]) priority A.offset(k - 3)
  }
}""", 4, "A.offset(-3): A has no tile column -3 (its tile columns are 0 .. 1) "
             "(in `potrf(A[k, k]) priority A.offset(k - 3)`, with k = 0)"),
    "a loop that ended before": ("""program p {
  matrix A[n, n] = random spd
  matrix B[n // 2, n] = random general
  for i in 0 .. A.mt { potrf(A[i, i]) }
  for k in 0 .. A.nt {
    let m = k
    if m >= 0 { trsm(A[k, k], B[m, 0]) }
  }
}""", 7, "tile B[1, 0] does not exist: B, 32×64, has 1×2 tiles (in `trsm(A[k, k], B[m, 0])`, with k = 1, m = 1)"),
    # the compiler cannot tell under an 'if' it cannot decide (E204 otherwise): every walk finds it, before the run
    "a tile passed twice and written": ("""program p {
  matrix A[n, n] = random spd
  for k in 0 .. A.nt {
    for m in k .. A.mt { if m % 2 == 0 { trsm(A[k, k], A[m, k]) } }
  }
}""", 4, "tile A[0, 0] is passed twice to trsm and written (in `trsm(A[k, k], A[m, k])`, with k = 0, m = 0)"),
    "release of a missing tile": ("""program p {
  matrix A[n, n] = random spd
  for k in 0 .. A.nt {
    potrf(A[k, k])
    release A[(k + 1) % 3, k]
  }
}""", 5, "tile A[2, 1] does not exist: A, 64×64, has 2×2 tiles (in `release A[(k + 1) % 3, k]`, with k = 1)"),
}
ERROR = re.compile(r"tiledsl: error: rank (\d+) \(t\.tile:(\d+)\): (.*?)(?=tiledsl: |Abort|\n|$)")


def _numbers_out(text: str) -> str:
    return re.sub(r"-?[0-9]+", "#", text)


def tiledsl(*args, cwd):
    return subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=150)


# Before a run, one rank walks the whole loop nest; each of several ranks walks its share of it
# (runtime/launch.py, runtime/share.py), which the cases are made to try: every case runs on two
# ranks. One rank's walk takes every value of every loop, whatever the case: it runs a case of each kind
# of check a mistake meets (a tile's index, Python's arithmetic, a matrix's geometry, a tile written
# twice, a release).
ONE_RANK_TOO = ("tile out of range", "division by zero", "negative height", "a tile passed twice and written",
                "release of a missing tile")


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """`tiledsl check` of every program of PROGRAMS, each a t.tile in a folder of its own, in one process."""
    folder = tmp_path_factory.mktemp("checked")
    for index, (text, _, _) in enumerate(PROGRAMS.values()):
        (folder / str(index)).mkdir()
        (folder / str(index) / "t.tile").write_text(text + "\n")
    return tiledsl("check", *(f"{index}/t.tile" for index in range(len(PROGRAMS))), cwd=folder)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case, ranks", [(case, ranks) for case in PROGRAMS
                                         for ranks in ((1, 2) if case in ONE_RANK_TOO else (2,))])
def test_a_mistake_of_the_loop_nest_is_one_clean_error_per_rank(tmp_path, checked, case, ranks):
    text, line, message = PROGRAMS[case]
    (tmp_path / "t.tile").write_text(text + "\n")
    # only the run can tell: check finds no error in any of the programs
    assert checked.returncode == 0 and f"checked {len(PROGRAMS)} file(s): no errors" in checked.stdout, \
        checked.stdout
    out = tiledsl("run", "t.tile", "--n", 64, "--nb", 32, "--np", ranks, cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr and "internal error" not in out.stderr, out.stderr
    found = ERROR.findall(out.stderr)
    assert 1 <= len(found) <= ranks and len({rank for rank, _, _ in found}) == len(found), out.stderr
    # each rank reports the first mistake of its own share (a rank walking its share skips other
    # ranks' iterations): the same line and the same sentence, maybe at another index
    assert all((int(at), _numbers_out(said.strip())) == (line, _numbers_out(message)) for _, at, said in found), \
        out.stderr


@pytest.mark.timeout(200)
@pytest.mark.parametrize("case", ["tile out of range", "a tile passed twice and written"])
@pytest.mark.parametrize("command", ["explain", "graph", "simulate --machine keeneland --gpus 0"])
def test_explain_graph_and_simulate_report_the_mistake_too(tmp_path, command, case):
    """simulate predicted a run of a tile passed twice and written, which a run refuses (tester s56)."""
    text, line, message = PROGRAMS[case]
    (tmp_path / "t.tile").write_text(text + "\n")
    command, *options = command.split()
    out = tiledsl(command, "t.tile", "--n", 64, "--nb", 32, *options, cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert out.stderr.strip() == f"tiledsl: error: t.tile:{line}: {message}"  # no rank ran


@pytest.mark.parametrize("program,by_columns", [("getrf", {"A"}), ("gesv", {"A", "B"}), ("cholesky", set())])
def test_the_survey_names_the_matrices_built_in_kernels_take_column_panels_of(compiled, program, by_columns):
    """getrf's and laswp's column panels: those matrices are stored by columns (factored and
    swapped in place); in a program without panels every tile is an array of its own."""
    assert column_panels(compiled(f"programs/{program}.tile")) == by_columns


def test_a_user_kernels_panels_leave_every_tile_an_array_of_its_own(tmp_path):
    (tmp_path / "norms.py").write_text("def sum_squares(P, S):\n    for tile in P:\n        S += (tile ** 2).sum(0)\n")
    (tmp_path / "norms.tile").write_text(
        'use "norms.py"\nkernel sum_squares(in P, inout S)\n'
        "program norms {\n  matrix A[n, n] = random general\n  workspace S like A rows 1\n"
        "  for j in 0 .. A.nt {\n    sum_squares(A[0 : A.mt, j], S[0, j])\n  }\n}\n")
    _, text = compile_path(tmp_path / "norms.tile")
    (tmp_path / "norms_driver.py").write_text(text)
    assert column_panels(import_driver(tmp_path / "norms_driver.py", "norms_driver")) == set()


def column_panels(driver) -> set:
    params = make_params(driver, Options(n=600, tiles={"nb": 128}))
    matrices = make_matrices(driver, params, make_distribution(driver.PROGRAM, params, (1, 1), 0), 0)
    return survey(driver, matrices, params, 0).column_panels


@pytest.mark.parametrize("program", ["cholesky", "qr", "getrf"])
def test_each_rank_counts_the_tasks_it_runs_apart_from_those_it_meets(compiled, program):
    """A progress bar's total: the tasks this rank runs. On several ranks the bar counted every
    task the rank took part in (sends included) and ended at 48-63%."""
    driver = compiled(f"programs/{program}.tile")
    params = make_params(driver, Options(n=700, tiles={"nb": 100}))
    surveys = []
    for rank in range(4):
        matrices = make_matrices(driver, params, make_distribution(driver.PROGRAM, params, (2, 2), rank), rank)
        surveys.append(survey(driver, matrices, params, rank, guided=True))
    everyone = make_matrices(driver, params, make_distribution(driver.PROGRAM, params, (2, 2), 0), 0)
    tasks = record(driver, everyone, params).submitted  # every task, flattened
    assert [s.runs for s in surveys] == [sum(tiles[call.main].rank == rank for call, tiles, _ in tasks)
                                         for rank in range(4)]
    assert sum(s.runs for s in surveys) == len(tasks) and all(s.runs < s.count for s in surveys)
