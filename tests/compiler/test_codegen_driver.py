"""What a generated driver states besides its loop nest: the requirements in the order of the
file, the ``.tile`` names of the variables it renames, integer powers with their run-time checks,
loop bounds over intervals where powers or steps vary, and no name bound that nothing reads."""
from pathlib import Path

import pytest

import tiledsl
from tiledsl.compiler import check_source
from tiledsl.compiler.codegen import generate, without_unused
from tiledsl.compiler.source import decode
from tiledsl.driverload import import_driver
from tiledsl.runtime.iterations import LoopBound
from tiledsl.runtime.layout import make_distribution, make_matrices, make_params
from tiledsl.runtime.options import Options


def load(text: str, folder, name: str):
    result = check_source(decode(str(folder / f"{name}.tile"), text.encode()))
    assert result.ok, result.report()
    path = folder / f"{name}.py"
    path.write_text(generate(result.checked))
    return import_driver(path, f"codegen_driver_{name}")


BAND = """\
program bandchol {
  param bw = 2
  param uplo = "L"
  require bw >= 1 "at least one sub-diagonal of tiles"
  require uplo == "L" "only the lower factor is written"
  matrix A[n, n] = random spd
  for k in 0 .. A.nt { potrf(A[k, k], uplo) }
}
"""


def test_requirements_are_checked_in_the_order_of_the_file(tmp_path):
    """The explicit ``require uplo == "L"`` (line 5) comes before the implicit ``uplo in "LU"`` of
    the call (line 7), whichever list the compiler built first."""
    driver = load(BAND, tmp_path, "band")
    params = {"n": 100, "nb": 256, "bw": 2}
    assert driver.unmet({**params, "uplo": "X"}) == (5, 'uplo == "L"', "only the lower factor is written")
    assert driver.unmet({**params, "uplo": "Lower"})[0] == 5
    assert driver.unmet({**params, "bw": 0, "uplo": "X"})[0] == 4
    assert driver.unmet({**params, "uplo": "L"}) is None


def test_renamed_variables_keep_their_tile_names_for_messages(tmp_path):
    """A let ``id`` is ``id_`` in the driver (``id`` is a builtin): the driver maps it back, so that a
    message quoting the loop nest's values can name it as the program does."""
    driver = load("""\
program gs {
  param lambda = 2
  matrix U[n, n] = random general
  for t in 0 .. lambda {
    for _i in 0 .. U.mt {
      let id = min(_i + 1, U.mt - 1)
      gemm(U[id, 0], U[id, 0], U[_i, 0])
    }
  }
}
""", tmp_path, "gs")
    assert driver.SOURCE_NAMES == {"id_": "id", "lambda_": "lambda", "user_i": "_i"}
    assert not hasattr(load(BAND, tmp_path, "plain"), "SOURCE_NAMES")


POWERS = """\
program powers {
  tiling uniform(nb = 32)
  param e = 2
  matrix A[n, n] = random spd
  potrf(A[0, 0]) priority 2 ** e
}
"""


def test_powers_are_integers_checked_at_run_time(tmp_path):
    power = load(POWERS, tmp_path, "powers")._power
    assert [power(2, 10), power(-3, 3), power(0, 0), power(1, 10 ** 18), power(-1, 10 ** 18 + 1)] == \
        [1024, -27, 1, 1, -1]
    with pytest.raises(ValueError, match=r"the exponent of '\*\*' is negative: 2 \*\* -1"):
        power(2, -1)
    with pytest.raises(OverflowError, match=r"2 \*\* 63 is beyond the 64-bit range"):
        power(2, 63)
    with pytest.raises(OverflowError, match=r"3 \*\* 10000000000 is beyond"):
        power(3, 10 ** 10)  # refused before it is computed
    assert power(2, 62) == 2 ** 62


def test_a_negative_exponent_stops_the_run_with_its_line(tmp_path):
    path = tmp_path / "powers.tile"
    path.write_text(POWERS)
    program = tiledsl.load(str(path))
    assert program.run(n=64, params={"e": 3}).tasks == 1
    with pytest.raises(tiledsl.TiledslError, match=r"powers.tile:5\): the loop nest failed: "
                                                   r"the exponent of '\*\*' is negative: 2 \*\* -1"):
        program.run(n=64, params={"e": -1})


def test_a_computed_step_of_zero_names_its_loop(tmp_path):
    """A step the run computes goes through _step: a 0 names the loop, where range() would say only
    that its third argument is zero; a literal step is written as it is. A step of parameters only is
    a requirement, said before the run starts (it was the loop nest's ValueError on every rank)."""
    path = tmp_path / "steps.tile"
    path.write_text("program steps {\n  param s = 1\n  param j0 = 1\n  matrix A[n, n] = random spd\n"
                    "  for k in 0 .. A.nt step s {\n    potrf(A[k, k])\n  }\n"
                    "  for k in A.nt - 1 .. -1 step -1 {\n    potrf(A[k, k])\n  }\n"
                    "  for j in j0 .. 2 {\n    for k in 0 .. A.nt step j {\n      potrf(A[k, k])\n    }\n  }\n}\n")
    program = tiledsl.load(str(path))
    assert program.run(n=64, tiles={"nb": 16}).tasks == 12
    with pytest.raises(tiledsl.TiledslError, match=r"steps requires s != 0 \(a loop's step of 0 would never end\), "
                                                   r"which n = 64, nb = 16, s = 0, j0 = 1 break \(steps.tile:5\)"):
        program.run(n=64, tiles={"nb": 16}, params={"s": 0})
    with pytest.raises(tiledsl.TiledslError, match=r"steps.tile:12\): the loop nest failed: the step "
                                                   r"of the loop at line 12 is 0: the loop would never end"):
        program.run(n=64, tiles={"nb": 16}, params={"j0": 0})
    driver = load(path.read_text(), tmp_path, "steps_driver")
    source = open(driver.__file__).read()
    assert "for k in range(0, A.nt, _step(s, 5)):" in source and "for k in range(A.nt - 1, -1, -1):" in source


def test_loop_bounds_leave_out_what_intervals_cannot_bound(tmp_path):
    """Over intervals, a power of a loop variable is unknown: a let holding one is left out, an if
    naming it counts both branches, and a loop whose step varies is left out with its body (at step
    1 it would count too much). The rest is counted as before."""
    driver = load("""\
program tree {
  tiling uniform(nb = 32)
  param q = 3
  matrix A[n, n] = random spd
  for l in 0 .. q {
    let w = 2 ** l
    let half = 0.5 * w
    if A.mt % w == 0 and half > 0.0 { potrf(A[0, 0]) }
    for i in 0 .. A.mt step 2 ** (l + 1) {
      for m in 0 .. A.mt { potrf(A[i, 0]) }
    }
    for j in 0 .. A.nt step 2 ** q { potrf(A[j, j]) }
  }
}
""", tmp_path, "tree")
    options = Options(n=100, tiles={"nb": 32})  # A: 4 x 4 tiles
    params = make_params(driver, options)
    matrices = make_matrices(driver, params, make_distribution(driver.PROGRAM, params, (1, 1), 0), 0)
    bound = LoopBound(matrices)
    driver.loop_bounds(bound, params)
    assert bound.total == 3 + 3 * 1  # l, then j in steps of 8: the loops over i and m are left out


def test_straight_line_code_binds_only_what_it_reads():
    lines = ["    A = rt.matrix('A')", "    T = rt.matrix('T')", "    o = query(A.offset, 0)",
             "    p = o + 1", "    k, _t1 = loop(0, A.mt, 1)", "    j, _t2 = loop(k, A.nt, _t1)"]
    # T is named only inside a string, p by nothing, and o only by p: all three go; the count
    # nothing reads becomes _, the loop variables stay (they name the loops)
    assert without_unused(lines, ["Event('T', j)"]) == [
        "    A = rt.matrix('A')", "    k, _t1 = loop(0, A.mt, 1)", "    j, _ = loop(k, A.nt, _t1)"]


TWO_MATRICES = """\
program scaled {
  matrix A[n, n] = random general
  matrix B[n, n] = random general
  for k in 0 .. A.nt {
    for j in 0 .. A.mt {
      gemm(A[j, k], A[k, k], B[j, k])
    }
  }
}
"""


def test_drivers_bind_no_unused_matrix_or_count(tmp_path):
    # B's tiles are named in a call, never in a loop bound; the inner loop's count is read by none
    driver = load(TWO_MATRICES, tmp_path, "two_matrices")
    text = open(driver.__file__).read()
    bounds = text[text.index("def loop_bounds"):]
    assert "_bound.matrix('B')" not in bounds and "_t2" not in bounds
    assert "_bound.matrix('A')" in bounds


def test_the_commands_a_driver_names_quote_its_paths(tmp_path):
    """A program or driver named with a space: the commands pasted as written failed (tester u56)."""
    from tiledsl.compiler import compile_path

    (tmp_path / "my chol.tile").write_text((Path(__file__).parents[2] / "programs/cholesky.tile").read_text())
    _, text = compile_path(tmp_path / "my chol.tile", tmp_path / "d 1.py")
    assert "with `tiledsl compile 'my chol.tile' -o 'd 1.py'`." in text
    assert "(`python 'd 1.py' --n 2048 --check`)" in text and "(`mpiexec -n 4 python 'd 1.py' --n 8192`)" in text
