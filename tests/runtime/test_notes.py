"""What kernels say without failing (runtime/notes.py): kept per call site while tasks run,
dropped outside a task, said once per line over every rank, through the command line and the API."""
import re
import threading
import warnings

import numpy as np
import pytest

import tiledsl
from tiledsl.api import TiledslError, TiledslWarning
from tiledsl.runtime.crash import in_kernel
from tiledsl.runtime.kernels import getrf
from tiledsl.runtime.notes import KernelNotes, note, warnings_of


class Call:
    kernel, line, text = "getrf", 21, "getrf(A[k : A.mt, k], P[k, k])"
    groups = None  # the tiles' labels as they are
    values = computed = ()  # no value argument

    @staticmethod
    def declared(tiles):
        return [(1, "inout", tuple(tiles), False)]


class Task:
    call = Call()
    device = 0  # a host task
    regions = named_regions = None  # whole tiles
    values = None

    def __init__(self, seq, *tiles):
        self.seq, self.tiles = seq, list(tiles)


def test_a_note_outside_a_task_is_dropped_and_one_inside_is_kept_per_line():
    notes = KernelNotes()
    note("nobody hears this")  # no run: nothing to keep it in
    in_kernel.notes = notes
    try:
        note("still no task")
        for seq, tile in ((5, "A[1, 1]"), (2, "A[0, 0]"), (9, "A[2, 2]")):  # as workers finish them
            in_kernel.task = Task(seq, tile)
            note(f"U of {tile} is singular")
            note("and said again")  # the same task: counted once
    finally:
        in_kernel.notes = in_kernel.task = None
    assert notes.summary() == [{"line": 21, "text": "kernel getrf on A[0, 0] (getrf(A[k : A.mt, k], P[k, k])): "
                                                    "U of A[0, 0] is singular", "tasks": 3}]


def test_a_long_note_is_one_line_cut_as_a_failures_message_is():
    notes = KernelNotes()
    in_kernel.notes, in_kernel.task = notes, Task(1, "A[0, 0]")
    try:
        note("first\n\tsecond " + "z" * 100_000)
    finally:
        in_kernel.notes = in_kernel.task = None
    text = notes.summary()[0]["text"]
    said = text.partition("P[k, k])): ")[2]
    assert said.startswith("first | second zzz") and said.endswith("… (100015 characters)") and len(said) < 600


def test_every_ranks_notes_are_one_warning_per_line_named_by_the_first_rank():
    ranks = [{"rank": 0, "kernel_notes": []},
             {"rank": 1, "kernel_notes": [{"line": 21, "text": "getrf said so", "tasks": 2}]},
             {"rank": 2, "kernel_notes": [{"line": 9, "text": "potrf said so", "tasks": 1},
                                          {"line": 21, "text": "getrf said it too", "tasks": 1}]}]
    assert warnings_of("p.tile", ranks) == ["rank 2 (p.tile:9): potrf said so",
                                            "rank 1 (p.tile:21): getrf said so (and 2 more task(s) at this line)"]


def test_a_kernel_called_directly_on_a_singular_matrix_still_factors_it():
    a = np.asfortranarray(np.array([[1.0, 2.0], [2.0, 4.0]]))
    pivots = np.zeros((1, 2), order="F")
    getrf(a, pivots)  # no run around it: no note, no error
    assert a[1, 1] == 0.0


@pytest.mark.timeout(60)
def test_a_singular_matrix_given_to_getrf_is_said_to_be_singular_and_the_run_passes():
    a = np.random.default_rng(1).random((64, 64))
    a[:, 20] = 0.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = tiledsl.load("getrf").run(A=a, tiles={"nb": 16}, check=True)
    said = [str(w.message) for w in caught if issubclass(w.category, TiledslWarning)]
    assert out.summary()["passed"] is True
    assert said == ["rank 0 (getrf.tile:25): kernel getrf on A[1:4, 1], P[1, 1] (getrf(A[k : A.mt, k], P[k, k])"
                    "): U(4, 4) of the matrix it was given is exactly zero: the matrix is singular"]
    assert out.notes == said


@pytest.mark.timeout(60)
def test_a_solve_with_a_zero_on_the_triangles_diagonal_is_said_to_divide_by_it():
    """tsqr of a matrix with a zero column: R(50, 50) is 0, and the run said only that B held NaNs."""
    a = np.random.default_rng(3).standard_normal((400, 100))
    a[:, 50] = 0.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(TiledslError, match="B holds 816 NaN or infinite value"):
            tiledsl.load("tsqr").run(A=a, B=np.ones((400, 16)), tiles={"nb": 64})
    said = [str(w.message) for w in caught if issubclass(w.category, TiledslWarning)]
    assert [text.split("): ", 2)[-1] for text in said] == [
        "the triangle of A it was given has an exact zero on its diagonal, at (50, 50): the triangle is singular "
        "and the solve divides by zero"], said


def test_the_notes_of_concurrent_runs_stay_apart():
    a = np.random.default_rng(1).random((64, 64))
    a[:, 20] = 0.0
    found = {}

    def run(name, matrix):
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            found[name] = tiledsl.load("getrf").run(A=matrix, tiles={"nb": 16}).notes
    threads = [threading.Thread(target=run, args=("singular", a)),
               threading.Thread(target=run, args=("regular", np.eye(64) + a))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(found["singular"]) == 1 and found["regular"] == []


NOTING = """\
use "noting.py"
kernel look(inout A)

program p {
  tiling uniform(nb = 10)
  matrix A[n, n] = random general
  for k in 0 .. A.nt {
    look(A[k, k])
  }
}
"""


@pytest.mark.timeout(60)
def test_a_user_kernel_says_what_it_found_with_tiledsl_note(tmp_path):
    (tmp_path / "noting.py").write_text("import tiledsl\n\n\ndef look(A):\n"
                                        "    tiledsl.note(f'the tile sums to {A.sum() > 0}')\n")
    (tmp_path / "p.tile").write_text(NOTING)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        out = tiledsl.load(tmp_path / "p.tile").run(n=30)
    assert out.notes == ["rank 0 (p.tile:8): kernel look on A[0, 0] (look(A[k, k])): the tile sums to True "
                         "(and 2 more task(s) at this line)"]
    with (tmp_path / "noting.py").open("a") as module:
        module.write("\n\nlook_gpu = look\n")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        out = tiledsl.load(tmp_path / "p.tile").run(n=30, gpus=1, gpu_ratio=(0, 1))
    assert out.notes == ["rank 0 (p.tile:8): kernel look on A[0, 0] on GPU 1 (look(A[k, k])): the tile sums to "
                         "True (and 2 more task(s) at this line)"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("gpus", [0, 1])
def test_a_triangle_wider_than_the_other_operand_needs_is_said(tmp_path, gpus):
    """trsm(A[0, 0], B[1, 0], "L", ...) at n = 160: B[1, 0] is 60 rows, so the top-left 60x60 of A[0, 0] was
    used without a word (gemm refuses the same slip); a taller triangle alone (a hybrid tiling's), or a triangle
    for a sub-range, is as meant."""
    (tmp_path / "p.tile").write_text('program p {\n  tiling uniform(nb = 100)\n  in matrix A[n, n] = random general\n'
                                     '  matrix B[n, n] = random general\n  matrix T[n, 100] = random general\n'
                                     '  trsm(A[0, 0], B[1, 0], "L", "L", "N", "N")\n'
                                     '  trsm(T[0 : T.mt, 0], B[1, 0], "R", "L", "N", "N")\n'
                                     '  trsm(A[1, 1], B[0, 1][0 : 20, 0 : 60], "L", "L", "N", "N")\n}\n')  # a sub-range
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        out = tiledsl.load(tmp_path / "p.tile").run(n=160, gpus=gpus, gpu_ratio=(0, 1) if gpus else None)
    on = " on GPU 1" if gpus else ""
    assert out.notes == [f'rank 0 (p.tile:6): kernel trsm on A[0, 0], B[1, 0]{on} (trsm(A[0, 0], B[1, 0], "L", "L", '
                         f'"N", "N")): A is 100x100, larger than B (60x100) needs: its top-left 60x60 triangle was '
                         f'used (a tile of another row or column than meant, or the other side, does that)']


def test_a_solve_scaled_by_zero_does_not_read_the_triangle_and_says_nothing(tmp_path):
    """alpha = 0 gives zeros without reading A: its zero pivot was said to be divided by."""
    (tmp_path / "t.tile").write_text('program t {\n  tiling uniform(nb = 4)\n  param alpha = 1.0\n'
                                     '  in matrix L[n, n] = random general\n  matrix B[n, n] = random general\n'
                                     '  trsm(L[0, 0], B[0, 0], "L", "L", "N", "N", alpha)\n}\n')
    lower = np.tril(np.random.default_rng(2).random((4, 4))) + np.eye(4)
    lower[2, 2] = 0.0
    program = tiledsl.load(tmp_path / "t.tile")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = program.run(L=lower, n=4, params={"alpha": 0.0})
    assert not [w for w in caught if issubclass(w.category, TiledslWarning)] and not out["B"].any()
    with warnings.catch_warnings(record=True) as caught, pytest.raises(TiledslError, match="NaN or infinite"):
        warnings.simplefilter("always")
        program.run(L=lower, n=4)
    assert [str(w.message).split("): ", 2)[-1] for w in caught if issubclass(w.category, TiledslWarning)] == [
        "the triangle of A it was given has an exact zero on its diagonal, at (2, 2): the triangle is singular "
        "and the solve divides by zero"]


def test_a_kernel_failure_names_the_non_finite_values_the_inputs_held():
    """An Inf below the diagonal made potrf fail two tiles on as 'not positive definite ... the
    tile holds a NaN', the input never named."""
    g = np.random.default_rng(0).standard_normal((200, 200))
    a = g @ g.T + 200 * np.eye(200)
    a[150, 20] = np.inf
    with pytest.raises(TiledslError, match=r"kernel potrf failed on A\[2, 2\] .*the tile holds a NaN\); the input "
                                           r"tiles the run reads held NaN or infinite values: A \(1 value\) \(numpy.argwhere"
                                           r"\(~numpy.isfinite\(A\)\) finds them\)$"):
        tiledsl.load("cholesky").run(A=a, tiles={"nb": 64})
    a = g @ g.T + 200 * np.eye(200)  # a failure that is not about a NaN is not given the clause
    a[0, 0], a[199, 199] = -1.0, np.nan
    with pytest.raises(TiledslError, match=r"leading minor 1 of 64 is not positive\)$"):
        tiledsl.load("cholesky").run(A=a, tiles={"nb": 64})


@pytest.mark.timeout(60)
def test_a_kernel_on_a_sub_range_is_named_with_the_rows_and_columns_it_ran_on(tmp_path):
    """A minor that potrf counts from the sub-range's first row can be read back to the matrix."""
    (tmp_path / "p.tile").write_text("program p {\n  tiling uniform(nb = 6)\n  matrix A[n, n] = identity\n"
                                     "  potrf(A[1, 1][2 :, 2 :])\n  potrf(A[0, 0])\n}\n")
    a = np.eye(12)
    a[9, 9] = -1.0  # tile A[1, 1]'s row 3: the sub-range's second
    with pytest.raises(TiledslError, match=re.escape("kernel potrf failed on A[1, 1][2:6, 2:6] (potrf(A[1, 1][2:, 2:]"
                                                     ")): matrix is not positive definite (leading minor 2 of 4")):
        tiledsl.load(tmp_path / "p.tile").run(A=a)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ranks, grid", [(1, "1x1"), (2, "2x1")])
def test_a_failed_kernel_names_a_received_sub_range_as_one_rank_does(tmp_path, ranks, grid):
    """A[1, 0] on rank 1: rank 0 receives its part [0:1, 0:4] alone and reads that copy whole, and
    the message named the tile whole ("kernel f failed on A[1, 0], A[0, 0]") where one rank names the part."""
    import subprocess
    import sys

    (tmp_path / "k.py").write_text("def f(X, Y):\n    raise RuntimeError('boom')\n")
    (tmp_path / "p.tile").write_text('use "k.py"\nkernel f(in X, inout Y) flops 0\nprogram p {\n'
                                     "  tiling uniform(nb = 4)\n  matrix A[n, n] = random general\n"
                                     "  f(A[1, 0][0 : 1], A[0, 0])\n}\n")
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "p.tile", "--n", "8", "--no-tune",
                          "--np", str(ranks), "--grid", grid], cwd=tmp_path, capture_output=True, text=True, timeout=110)
    assert "kernel f failed on A[1, 0][0:1, 0:4], A[0, 0] (f(A[1, 0][0:1], A[0, 0]))" in out.stderr, out.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ranks", ["1", "2"])
def test_what_kernels_said_before_a_failure_is_said_with_it(tmp_path, ranks):
    """gesv of a singular matrix under --check-finite: the failure of the trsm that made a NaN was all that
    was said, where the warning of getrf's exactly zero pivot, its cause, came first in a run without it."""
    import os
    import subprocess
    import sys

    (tmp_path / "k.py").write_text("import tiledsl\n\n\ndef warn(A):\n    tiledsl.note('the pivot is zero')\n\n\n"
                                   "def fail(A):\n    raise ValueError('it broke')\n")
    (tmp_path / "p.tile").write_text('use "k.py"\nkernel warn(inout A)\nkernel fail(inout A)\nprogram p {\n'
                                     "  tiling uniform(nb = 8)\n  matrix A[n, n] = zeros\n  warn(A[0, 0])\n"
                                     "  fail(A[0, 0])\n}\n")
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "p.tile", "--n", "16", "--np", ranks],
                         cwd=tmp_path, capture_output=True, text=True, timeout=100,
                         env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")))
    said = [line for line in out.stderr.splitlines() if line.startswith("tiledsl: ")]
    assert out.returncode == 1 and said[:2] == [
        "tiledsl: warning: rank 0 (p.tile:7): kernel warn on A[0, 0] (warn(A[0, 0])): the pivot is zero",
        "tiledsl: error: rank 0 (p.tile:8): kernel fail failed on A[0, 0] (fail(A[0, 0])): ValueError at k.py:9: "
        "it broke"], out.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize("gpus", [0, 1])
def test_a_workspace_tile_read_before_any_task_wrote_it_is_said(tmp_path, gpus):
    """gemqrt before the geqrt that writes its T: it applied Q = I (T holds zeros) without a word. Said at
    the reading call, on one rank without GPUs (no version is counted there) and with them; a workspace
    accumulated from zeros (inout) and a T read after its geqrt are as meant."""
    body = ("  for k in 0 .. A.nt {\n    for j in k + 1 .. A.nt { gemqrt(A[k, k], T[k, k], A[k, j]) }\n"
            "    geqrt(A[k, k], T[k, k])\n    for j in k + 1 .. A.nt { gemqrt(A[k, k], T[k, k], A[k, j]) }\n"
            "    gemm(A[k, k], A[k, k], W[k, k])\n  }\n")
    (tmp_path / "p.tile").write_text("program p {\n  tiling uniform(nb = 100)\n  matrix A[n, n] = random general\n"
                                     "  workspace T like A rows 32\n  workspace W like A rows 100\n" + body + "}\n")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        out = tiledsl.load(tmp_path / "p.tile").run(n=300, gpus=gpus, gpu_ratio=(0, 1) if gpus else None)
    # (said as the task is made, before it runs anywhere: no GPU named)
    assert out.notes == ["rank 0 (p.tile:7): kernel gemqrt on A[0, 0], T[0, 0], A[0, 1] (gemqrt(A[k, k], T[k, k], "
                         "A[k, j])): reads T[0, 0], which no task wrote before it (a workspace holds zeros until one "
                         "does) (and 2 more task(s) at this line)"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("priorities", ["program", "none"])
def test_a_workspace_tile_another_rank_wrote_is_no_read_of_zeros(tmp_path, priorities):
    """On a 1x2 grid geqrt writes T[k, k] on one rank and gemqrt reads it on the other, whose walk of
    its share knew no version of T[k, k] yet: it warned of a read of zeros in every QR. The owner of
    the tile says it, from its count of every write, naming the rank that runs the task."""
    import os
    import subprocess
    import sys

    def warned(body: str) -> list:
        (tmp_path / "p.tile").write_text("program p {\n  tiling uniform(nb = 100)\n"
                                         "  matrix A[n, n] = random general\n  workspace T like A rows 32\n"
                                         "  for k in 0 .. A.nt {\n" + body + "  }\n}\n")
        out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "p.tile", "--n", "300", "--np",
                              "2", "--grid", "1x2", "--no-tune", "--priorities", priorities], cwd=tmp_path,
                             capture_output=True, text=True, timeout=100,
                             env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")))
        assert out.returncode == 0, out.stderr
        return [line for line in out.stderr.splitlines() if line.startswith("tiledsl: warning")]

    geqrt = "    geqrt(A[k, k], T[k, k])\n"
    gemqrt = "    for j in k + 1 .. A.nt { gemqrt(A[k, k], T[k, k], A[k, j]) }\n"
    assert warned(geqrt + gemqrt) == []
    assert warned(gemqrt + geqrt) == [
        "tiledsl: warning: rank 0 (p.tile:6): kernel gemqrt on A[0, 0], T[0, 0], A[0, 1] on rank 1 (gemqrt(A[k, k], "
        "T[k, k], A[k, j])): reads T[0, 0], which no task wrote before it (a workspace holds zeros until one does) "
        "(and 2 more task(s) at this line)"]


@pytest.mark.timeout(120)
def test_a_nan_a_task_wrote_points_at_check_finite(tmp_path):
    """Tester w: a user's gemm wrote a NaN, and potrf failed on it two steps on ('the tile holds a NaN'), the
    culprit never named and --check-finite, which names it, never offered."""
    import subprocess
    import sys

    (tmp_path / "k.py").write_text("import numpy as np\n\n\ndef spoil(A):\n    A[0, 0] = np.nan\n")
    (tmp_path / "s.tile").write_text('use "k.py"\nkernel spoil(inout A)\nprogram s {\n  tiling uniform(nb = 32)\n'
                                     "  matrix A[n, n] = random spd\n  spoil(A[1, 1])\n"
                                     "  for k in 0 .. A.nt { potrf(A[k, k]) }\n}\n")
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "s.tile", "--n", "64"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=100)
    assert out.returncode == 1 and out.stderr.startswith("tiledsl: error: rank 0 (s.tile:7): kernel potrf failed on "
                                                         "A[1, 1]"), out.stderr
    assert out.stderr.rstrip().endswith("the tile holds a NaN) (no input held one: an earlier task wrote it, and "
                                        "--check-finite names the first task that writes one)"), out.stderr
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "s.tile", "--n", "64",
                          "--check-finite"], cwd=tmp_path, capture_output=True, text=True, timeout=100)
    assert out.returncode == 1 and "kernel spoil failed on A[1, 1]" in out.stderr, out.stderr


def test_a_note_says_the_value_arguments_as_a_failure_does():
    """Tester u83g: a note of `nk(A[i, 0], A[i, j], i, j)` did not say i and j, which its failure says."""
    class Valued(Call):
        kernel, text, values, computed = "nk", "nk(A[i, j], i, j)", ("i", "j"), ()

    task = Task(0, "A[0, 2]")
    task.call, task.values = Valued(), (0, 2)
    notes = KernelNotes()
    notes.add(task, "even tile")
    assert notes.summary()[0]["text"] == "kernel nk on A[0, 2] (nk(A[i, j], i, j); arguments i = 0, j = 2): even tile"
