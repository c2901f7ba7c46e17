"""Value arguments, loops with a step and panels of tiles, run end to end.

``programs/values.tile`` passes integers, numbers and chars (by position, by name and by
default), counts down and by threes, and hands kernels columns and rows of tiles; its
kernels write what they received into its matrices, so the results state it exactly.
The same program on 4 ranks (2x2) and with 2 emulated GPUs gives the same bits.
"""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tiledsl
from tiledsl.compiler import compile_path
from tiledsl.driverload import import_driver
from tiledsl.runtime import Options
from tiledsl.runtime.inputs import make_matrix

from submitted import submitted_tasks

PROGRAM = Path(__file__).parent / "programs" / "values.tile"
N, NB = 10, 4  # 3×3 tiles, the last ragged


@pytest.fixture(scope="module")
def output():
    return tiledsl.load(PROGRAM).run(n=N)


def test_values_reach_the_kernel_by_position_name_and_default(output):
    d = output["D"]
    assert (d[0, 0], d[0, 1], d[0, 2]) == (7, 0.5, ord("T"))  # x by default, c by name
    assert (d[4, 4], d[4, 5], d[4, 6]) == (3, 0.125, ord("N"))  # D.nt, half / 4


def test_loops_count_down_and_by_steps(output):
    assert output["D"][0, 4] == 3210  # for k in 3 .. -1 step -1
    assert output["D"][4, 0] == 147  # for k in 0 .. 7 step 3: k + 1 = 1, 4, 7


def test_panels_hand_kernels_lists_of_tiles(output):
    original = make_matrix("general", 42, 0, N, N)
    assert np.allclose(output["C"][0], original.sum(axis=0))  # column panels A[0 : A.mt, j]
    assert np.allclose(output["R"][:, 0], original.sum(axis=1))  # row panels A[i, 0 : A.nt]
    expected = original.copy()
    expected[NB:, :NB] *= -1.0  # scale_panel(A[1 : A.mt, 0]) with its default alpha
    assert np.array_equal(output["A"], expected)


def test_a_panel_is_one_task_with_one_access_per_tile(tmp_path):
    result, text = compile_path(PROGRAM)
    (tmp_path / "values.py").write_text(text)
    driver = import_driver(tmp_path / "values.py")
    tasks = [t for t in submitted_tasks(driver, Options(n=N), (1, 1), 0, None) if t[0].kernel == "column_sums"]
    assert [len(tiles) for _, tiles in tasks] == [4, 4, 4]  # 3 tiles of column j and C[0, j]
    assert tasks[0][0].modes == ("in", "in", "in", "inout") and tasks[0][0].main == 3


@pytest.mark.timeout(240)
@pytest.mark.parametrize("extra", [["--np", "4", "--grid", "2x2"], ["--gpus", "2", "--gpu-backend", "emulated"]],
                         ids=["2x2", "2-emulated-gpus"])
def test_ranks_and_gpus_give_the_same_bits(output, tmp_path, extra):
    files = {name: tmp_path / f"{name}.npy" for name in ("A", "C", "D", "R")}
    command = [sys.executable, "-m", "tiledsl.commands.cli", "run", str(PROGRAM), "--n", str(N), "--no-tune",
               "--watchdog", "60", *extra, *(f"--output={name}={path}" for name, path in files.items())]
    done = subprocess.run(command, capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stderr
    for name, path in files.items():
        assert np.array_equal(np.load(path), output[name]), name


def test_float_parameters_are_set_and_integer_ones_refuse_fractions():
    program = tiledsl.load(PROGRAM)
    assert program.run(n=N, params={"half": 0.25})["D"][4, 5] == 0.25 / 4
    done = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "programs/hetero_qr.tile", "--n", "100",
                           "--no-tune", "--set", "ib=2.5"], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).parents[2])
    assert done.returncode == 2 and done.stderr.strip() == \
        "tiledsl: error: --set ib=2.5: ib is an integer parameter (its default is 32)"


def test_a_float_parameter_set_to_a_whole_number_is_a_float(tmp_path):
    """--set x=3 of a float param is 3.0: -(x - x) is -0.0, 2**53 + 1 rounds to 2**53 (a branch on it
    ran as integer arithmetic), and a number beyond float64 is refused as such."""
    (tmp_path / "k.py").write_text("import math\ndef put(T, a, b):\n    T[0, 0], T[0, 1] = a, math.copysign(1.0, b)\n")
    (tmp_path / "f.tile").write_text('use "k.py"\nkernel put(inout T, float a, float b)\nprogram f {\n'
                                     '  param x = 0.5\n  matrix A[n, n] = zeros\n'
                                     '  put(A[0, 0], x - 9007199254740992, -(x - x))\n}\n')
    program = tiledsl.load(tmp_path / "f.tile")
    for given in (9007199254740993, np.int64(9007199254740993)):
        result = program.run(n=4, params={"x": given})
        assert result.params["x"] == 2.0 ** 53 and isinstance(result.params["x"], float)
        assert list(result["A"][0, :2]) == [0.0, -1.0]
    with pytest.raises(tiledsl.TiledslError, match=r"params=\{'x': inf\}: inf is not a finite number \(x's "
                                                    r"default is 0\.5\)$"):  # as --set x=inf is
        program.run(n=4, params={"x": float("inf")})
    done = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "f.tile", "--n", "4", "--set",
                           "x=-0", "--json", "--output", "A=a.npy"], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert done.returncode == 0 and np.load(tmp_path / "a.npy")[0, 1] == -1.0, done.stderr  # the sign of -(x - x)
    assert str(json.loads(done.stdout.splitlines()[-1])["params"]["x"]) == "-0.0"  # -0 is -0.0, not 0
    done = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "f.tile", "--n", "4", "--set",
                           "x=1" + "0" * 400], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip().endswith(
        ": 1000000000...0000 (401 digits) is beyond float64's range (about ±1.8e308)"), done.stderr


@pytest.mark.parametrize("value", [2 ** 63, -2 ** 63, 10 ** 23])
def test_an_integer_parameter_stays_within_64_bits(value):
    with pytest.raises(tiledsl.TiledslError, match=r"is beyond the 64-bit range: an integer parameter stays within "
                                                    r"±9223372036854775807"):
        tiledsl.load(Path(__file__).parents[2] / "programs/hetero_qr.tile").run(n=100, params={"ib": value})


_OPTIONAL_SOLVE = """program g {
  param side = "N"
  matrix A[n, n] = random spd
  matrix B[n, n] = random general
  potrf(A[0, 0])
  for k in 0 .. B.nt {
    if side != "N" {
      trsm(A[0, 0], B[0, k], side)
    } else {
      if k > 0 { potrf(A[0, 0], side) }
    }
  }
}
"""


def test_a_char_parameter_a_kernel_takes_inside_an_if_is_required_where_the_if_holds(tmp_path):
    """`if side != "N" { trsm(..., side) }` with side = "N" was E205 'the default ... is not a value every
    use of it accepts': the default never reaches trsm."""
    (tmp_path / "g.tile").write_text(_OPTIONAL_SOLVE.replace('potrf(A[0, 0], side)', 'potrf(A[0, 0])'))
    program = tiledsl.load(tmp_path / "g.tile")
    assert program.run(n=8, tiles={"nb": 4}).tasks == 2  # potrf, then potrf again at k = 1
    assert program.run(n=8, tiles={"nb": 4}, params={"side": "R"}).tasks == 3  # potrf and a trsm per k
    with pytest.raises(tiledsl.TiledslError, match=r'g requires side in "LR" \(it is passed as trsm\'s side when '
                                                   r'side != "N"\), which .* side = "X" break \(g.tile:8\)'):
        program.run(n=8, tiles={"nb": 4}, params={"side": "X"})


def test_a_char_parameter_inside_an_if_of_a_loop_variable_is_required_before_the_run(tmp_path):
    """An if that reads a loop variable cannot be tested before the run: the requirement holds as it is."""
    (tmp_path / "g.tile").write_text(_OPTIONAL_SOLVE)
    program = tiledsl.load(tmp_path / "g.tile")
    with pytest.raises(tiledsl.TiledslError, match=r'g requires side in "LU" \(it is passed as potrf\'s uplo when '
                                                   r'side == "N"\)'):
        program.run(n=8, tiles={"nb": 4})


def test_the_parameter_part_of_an_and_guard_conditions_the_requirement(tmp_path):
    """`if side != "N" and k >= 0 { trsm(..., side) }` with side = "N" was refused: the whole condition
    reads a loop variable, but its first part, which holds wherever the call is made, does not."""
    (tmp_path / "g.tile").write_text(_OPTIONAL_SOLVE.replace('if side != "N" {', 'if side != "N" and k >= 0 {')
                                     .replace('potrf(A[0, 0], side)', 'potrf(A[0, 0])'))
    program = tiledsl.load(tmp_path / "g.tile")
    assert program.run(n=8, tiles={"nb": 4}).tasks == 2
    with pytest.raises(tiledsl.TiledslError, match=r'\(it is passed as trsm\'s side when side != "N"\)'):
        program.run(n=8, tiles={"nb": 4}, params={"side": "X"})
