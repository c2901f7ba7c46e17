"""Checks of any program: solve, inverse, product, pivoted LU and user checks, on one rank and on
several, and the GFLOP/s of any program.

The built-in checks run on the cases of :mod:`check_cases` (results made with numpy/scipy,
ragged and hybrid tiles, non-square products): a right result passes, a wrong one (one
entry off by 1e-3) fails with the residual the dense formula gives. The user checks run
end to end, through a cholesky driver whose check is a function of its kernel module.
"""
import ast
import json
import math
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from check_cases import Harness, cases, decl
from test_comm import mpirun
from tiledsl.runtime import Options, checks, execute, operands, reporting
from tiledsl.runtime.checks import THRESHOLD, CheckError
from tiledsl.runtime.operands import View, view_of
from tiledsl.runtime.program import CheckDecl, Program, Tiling
from tiledsl.runtime.world import UsageError

ROOT = Path(__file__).resolve().parents[2]
CASES = cases()


@pytest.fixture(scope="module")
def harness():
    return Harness()


# ---------------------------------------------------------------- built-in checks
@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(CASES))
def test_a_right_result_passes_and_a_wrong_one_fails_with_the_dense_residual(harness, name):
    case = CASES[name]
    right = harness.residuals(case)
    assert set(right) == set(harness.dense(case)) and all(0 <= r < 1 for r in right.values()), right
    wrong, expected = harness.residuals(case, wrong=True), harness.dense(case, wrong=True)
    assert all(expected[k] > 1e3 * THRESHOLD for k in expected)
    assert wrong == pytest.approx(expected, rel=1e-6)


@pytest.mark.timeout(120)
def test_every_check_gives_on_several_ranks_what_it_gives_on_one(harness):
    """A 2x2 grid: every tile product, mirror and norm crosses ranks, along process rows and columns
    both (as on 1x2 along rows alone)."""
    job = mpirun("check_cases_job.py", 4, timeout=100)
    assert job.returncode == 0, job.stderr
    found = json.loads(job.stdout.strip().splitlines()[-1])
    assert found["agree"] and found["ranks"] == 4
    for name, case in CASES.items():
        got = found["cases"][name]
        assert all(r < 1 for r in got["right"].values()), (name, got)
        assert got["wrong"] == pytest.approx(harness.dense(case, wrong=True), rel=1e-6), name


@pytest.mark.timeout(60)
def test_a_numerically_singular_matrix_passes_its_check_with_a_note_saying_so(harness):
    """DPLASMA's scalings measure the residual against ‖A‖·‖X‖: for an A whose condition is past 1/ε
    the check passes an X with no correct digit, so the run says that A is numerically singular."""
    for name in ("trtri", "trsm", "posv", "potri"):  # well conditioned: no note
        harness.residuals(CASES[name])
        assert harness.notes == [], name
    singular = CASES["trtri"].matrices["A"][0].copy()
    singular[5, 5] = 1e-17
    inverse = replace(CASES["trtri"], matrices={"A": (singular, np.linalg.inv(np.tril(singular)))})
    general = CASES["inverse transposed"].matrices["A"][0].copy()
    general[:, -1] = general[:, :-1] @ np.ones(general.shape[0] - 1)  # a column the others sum to
    b0 = CASES["trsm"].matrices["B"][0]
    solve = replace(CASES["trsm"], decl=decl("solve", "A X B", ["", "", ""]),
                    matrices={"A": (general, general), "X": (np.zeros_like(b0), np.linalg.solve(general, b0)),
                              "B": (b0, b0)})
    for case, estimate in ((inverse, "‖A‖₁·‖X‖₁ (X the computed inverse)"),
                           (solve, "‖A‖∞·‖X‖∞/‖B‖∞ (X the solution, B the right-hand side as given)")):
        assert all(r < 1 for r in harness.residuals(case).values())
        assert len(harness.notes) == 1 and harness.notes[0].startswith(f"A is numerically singular: {estimate}")
        assert float(re.search(r"condition number, is (\S+), past 1/ε", harness.notes[0])[1]) > 1 / np.finfo(float).eps


def test_pivots_that_name_no_row_fail_the_check_with_one_line(harness):
    case = CASES["getrf"]
    pivots = case.matrices["P"][1].copy()
    pivots[0, 3] = 1e6
    broken = replace(case, matrices={**case.matrices, "P": (None, pivots)})
    with pytest.raises(CheckError, match=r"^check lu: the pivots interchange row 3 with row 1e\+06, which is not"):
        harness.residuals(broken)


def test_pivots_applied_out_of_order_fail(harness):
    """Two interchanges swapped: P·A is another matrix, the check fails."""
    case = CASES["getrf"]
    pivots = case.matrices["P"][1].copy()
    pivots[0, [0, 1]] = pivots[0, [1, 0]] + 5
    assert harness.residuals(replace(case, matrices={**case.matrices, "P": (None, pivots)}))["lu"] > THRESHOLD


@pytest.mark.parametrize("check, message", [
    (decl("solve", "A B B", ["lower upper", "", ""]), r"A: the qualifiers 'lower upper' mean nothing together"),
    (decl("solve", "A B B", ["", "transposed", ""]), r"check solve \(line 3\): B takes no qualifier, not 'transposed'"),
    (decl("product", "C A B", ["unit lower", "", ""]), r"C takes lower, upper or symmetric, not 'unit lower'"),
    (decl("product", "C A B", gamma=2.0), r"unknown option gamma \(a product takes alpha and beta\)"),
    (decl("solve", "A B"), r"check solve \(line 3\): takes 3 argument\(s\), got 2"),
    (decl("norm", "A"), r"there is no built-in check norm"),
    (decl("product", "C A A"), r"op\(A\) = A is 130×70 and op\(B\) = A is 130×70: their product cannot be C"),
    # one matrix in both roles, read two ways: 'op(A) is 130×70 and op(A) is 70×130'
    (decl("product", "C A A", ["", "", "transposed"]), r"op\(A\) = A is 130×70 and op\(B\) = transposed A is "
                                                         r"70×130: their product cannot be C"),
    (decl("inverse", "A B"), r"check inverse \(line 3\): A is 130×70, not square"),
    # a symmetric operand or result mirrors its lower triangle: an internal error on a rectangle
    (decl("product", "C A B", ["", "symmetric", ""]), r"check product \(line 3\): symmetric A is 130×70, not square"),
    (decl("product", "C A B", ["symmetric", "", ""]), r"check product \(line 3\): symmetric C is \d+×\d+, not square"),
])
def test_a_check_that_cannot_apply_is_a_usage_error(harness, check, message):
    with pytest.raises(UsageError, match=message):
        harness.residuals(replace(CASES["gemm"], decl=check))


def test_a_solution_of_another_shape_is_a_usage_error(harness):
    """Said as 'both need 150 rows' when their rows were A's, 150: the columns differed."""
    with pytest.raises(UsageError, match=r"^check solve \(line 3\): B is 150×37 and A is 150×150; they need one "
                                         r"shape \(one column of B for each of A\)$"):
        harness.residuals(replace(CASES["posv"], decl=decl("solve", "A B A")))


# ---------------------------------------------------------------- operands
@pytest.mark.parametrize("words, view", [
    ((), View("all")), (("lower",), View("lower")), (("unit", "upper"), View("strict upper", None, True)),
    (("symmetric",), View("lower", "strict upper")), (("transposed", "symmetric"), View("lower", "strict upper")),
    (("transposed",), View(None, "all")), (("lower", "transposed"), View(None, "upper")),
    (("transposed", "lower", "unit"), View(None, "strict upper", True)),
])
def test_qualifiers_read_the_stored_matrix(words, view):
    assert view_of(words, "check") == view
    stored = np.arange(1.0, 10.0).reshape(3, 3)
    expected = stored.copy()
    for word in words:
        expected = {"lower": np.tril, "upper": np.triu, "symmetric": lambda x: np.tril(x) + np.tril(x, -1).T,
                    "unit": lambda x: x, "transposed": lambda x: x}[word](expected)
    if "unit" in words:
        np.fill_diagonal(expected, 1.0)
    if "transposed" in words and "symmetric" not in words:
        expected = expected.T
    block = operands.original_block(lambda r0, r1, c0, c1: stored[r0:r1, c0:c1], view, 0, 3, 0, 3)
    assert block.tolist() == expected.tolist()


@pytest.mark.parametrize("words", [("symmetric", "upper"), ("upper", "symmetric", "transposed")])
def test_a_symmetric_operand_may_be_stored_in_its_upper_triangle(words):
    """symm with uplo "U" reads the upper triangle: `symmetric upper A` (it was E209)."""
    assert view_of(words, "check") == View("upper", "strict lower")
    stored = np.arange(1.0, 10.0).reshape(3, 3)
    block = operands.original_block(lambda r0, r1, c0, c1: stored[r0:r1, c0:c1], view_of(words, "check"), 0, 3, 0, 3)
    assert block.tolist() == (np.triu(stored) + np.triu(stored, 1).T).tolist()
    with pytest.raises(UsageError, match="mean nothing together"):
        view_of(("symmetric", "unit", "upper"), "check")


@pytest.mark.timeout(120)
def test_a_product_with_an_operand_stored_upper_passes_its_check(tmp_path):
    """C = C + B·A with A symmetric in its upper triangle (symm "R", "U"), checked as such."""
    import tiledsl

    (tmp_path / "symm_ru.tile").write_text("""program symm_ru {
  tiling uniform(nb = 64)
  param m = 150
  in matrix A[n, n] = random general
  in matrix B[m, n] = random general
  matrix C[m, n] = random general
  check product(C, B, symmetric upper A)
  for i in 0 .. C.mt {
    for j in 0 .. C.nt {
      for l in 0 .. A.nt {
        if l == j { symm(A[j, j], B[i, j], C[i, j], "R", "U", 1.0, 1.0) }
        else if l < j { gemm(B[i, l], A[l, j], C[i, j], "N", "N", 1.0, 1.0) }
        else { gemm(B[i, l], A[j, l], C[i, j], "N", "T", 1.0, 1.0) }
      }
    }
  }
}
""")
    program = tiledsl.load(str(tmp_path / "symm_ru.tile"))
    assert program.run(n=170, check=True).passed


def test_a_view_knows_which_tiles_are_zero():
    lower = View("lower")
    assert lower.zero(0, 10, 10, 20) and not lower.zero(10, 20, 0, 10) and not lower.zero(0, 10, 9, 20)
    assert View("strict lower").zero(0, 10, 9, 20) and not View("strict lower", None, True).zero(0, 10, 9, 20)
    assert View().zero(0, 0, 0, 10) and not View().zero(0, 1, 5, 6)


def test_tiles_off_the_diagonal_go_to_blas_as_they_are():
    """Only the tiles that cross the diagonal are copied to cut out a triangle."""
    block = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    assert operands.triangle(block, 10, 0, upper=False, unit=True) is block
    assert operands.triangle(block, 0, 10, upper=True) is block
    cut = operands.triangle(block, 0, 0, upper=False, unit=True)
    assert cut.flags.f_contiguous
    assert cut.tolist() == [[1, 0, 0, 0], [4, 1, 0, 0], [8, 9, 1, 0]]


# ---------------------------------------------------------------- user checks
CHECKS = '''
import sys
import numpy as np


def llt(before, after):
    a, l = before["A"], np.tril(after["A"])
    scale = np.linalg.norm(a, 1) * a.shape[0] * np.finfo(float).eps
    return {"llt": np.linalg.norm(a - l @ l.T, 1) / scale, "rows": float(len(a) % 7)}


def too_large(before, after):
    return 60


def with_params(before, after, params):
    """The run's parameters, as a third argument: n and nb here."""
    return {"n": float(params["n"]), "nb": float(params["nb"]) / 100, "count": float(len(params))}


def not_a_number(before, after):
    return float("nan")


def one_of_two(before, after):
    return {"fine": 1.0, "broken": float("nan")}


def raising(before, after):
    return {"x": 1.0}["y"]


def wrong_type(before, after):
    return [1.0]


def exits(before, after):
    sys.exit(3)


def negative(before, after):
    return -5.0


def bad_entry(before, after):
    return {"a": 1.0, "b": [1]}


def negative_entry(before, after):
    return {"a": 1.0, "b": -0.5}


def past_floats(before, after):
    return {"big": 10 ** 400, "fine": 1}


def negative_past_floats(before, after):
    return -10 ** 400


def ends_a_generator(before, after):
    raise GeneratorExit("not an Exception")


class _Halving:
    def __call__(self, before, after):
        return 0.5


def _scaled(x, before, after):
    return x


a_callable = _Halving()
a_partial = __import__("functools").partial(_scaled, 0.125)
not_callable = 3.0
'''



def line_of(text: str) -> int:
    """The line of :data:`CHECKS` (as a file) that holds ``text``."""
    return next(number for number, line in enumerate(CHECKS.splitlines(), 1) if text in line)


RAISES_AT, EXITS_AT, BASE_AT = line_of('["y"]'), line_of("exit(3)"), line_of("GeneratorExit(")


def with_user_check(text: str, function: str, folder: Path) -> str:
    """The driver ``text`` with its PROGRAM's check the user check ``function`` of checks.py."""
    tree = ast.parse(text)
    program = next(node.value for node in tree.body if isinstance(node, ast.Assign) and node.targets[0].id == "PROGRAM")
    values = {"check": f"CheckDecl({function!r}, ('A',), line=7, user=True)", "kernel_module": "'checks.py'",
              "source": repr(str(folder / "p.tile"))}
    for keyword in program.keywords:
        if keyword.arg in values:
            keyword.value = ast.parse(values[keyword.arg], mode="eval").body
    return ast.unparse(tree)


@pytest.fixture(scope="module")
def user_driver(tmp_path_factory):
    """user_driver(function) -> path of a cholesky driver whose check is ``checks.function``."""
    from tiledsl.compiler import compile_path

    folder = tmp_path_factory.mktemp("user_checks")
    result, text = compile_path(ROOT / "programs/cholesky.tile")
    assert text is not None, result.report()
    (folder / "checks.py").write_text(CHECKS)

    def write(function: str) -> Path:
        path = folder / f"driver_{function}.py"
        path.write_text(with_user_check(text, function, folder))
        return path
    return write


def run_user(user_driver, function):
    from tiledsl.driverload import import_driver

    driver = import_driver(user_driver(function), f"user_{function}")
    return execute(driver, Options(n=250, tiles={"nb": 64}, check=True, workers=2))


@pytest.mark.timeout(60)
def test_a_user_check_sees_the_original_and_the_final_matrices(user_driver):
    result = run_user(user_driver, "llt")
    assert set(result.residuals) == {"llt", "rows"} and result.residuals["rows"] == 250 % 7
    assert 0 < result.residuals["llt"] < 1 and result.passed and result.ok
    assert result.residual == result.residuals["rows"]


@pytest.mark.timeout(60)
def test_a_user_check_taking_three_arguments_gets_the_runs_parameters(user_driver):
    result = run_user(user_driver, "with_params")  # cholesky has no params of its own: n and nb
    assert result.residuals == {"n": 250.0, "nb": 0.64, "count": 2.0} and not result.passed


@pytest.mark.timeout(60)
@pytest.mark.parametrize("function", ["too_large", "not_a_number"])
def test_a_user_residual_at_the_threshold_or_nan_fails(user_driver, function):
    result = run_user(user_driver, function)
    assert result.passed is False and not result.errors
    assert result.residuals == {function: 60.0} or math.isnan(result.residuals[function])


@pytest.mark.timeout(60)
def test_the_failure_names_the_residual_that_failed(user_driver):
    result = run_user(user_driver, "one_of_two")
    assert reporting.failure_reasons(result) == ["check failed: the broken check gave no residual (NaN)"]


def test_each_failing_residual_is_said_with_its_own_value():
    """{b: nan, c: inf} said "residual (b, c) nan": the largest for both."""
    assert checks.failure_line({"a": 1.0, "b": math.nan, "c": math.inf}) == \
        "check failed: the b check gave no residual (NaN); the c residual inf is not below 60"
    assert checks.failure_line({"": 1000.0}) == "check failed: the residual 1e+03 is not below 60"
    assert checks.failure_line({"x": 61.0}) == "check failed: the x residual 61 is not below 60"  # its only one, named


@pytest.mark.timeout(60)
@pytest.mark.parametrize("function, residual", [("a_callable", 0.5), ("a_partial", 0.125)])
def test_a_user_check_may_be_any_callable_but_a_class_as_a_kernel_body_may(user_driver, function, residual):
    """A functools.partial or an object with __call__ "defined no function" (tester v57)."""
    result = run_user(user_driver, function)
    assert result.passed and result.residual == residual, result.errors


@pytest.mark.timeout(60)
def test_an_integer_residual_past_floats_is_infinite_and_fails(user_driver):
    """10**400 was an internal error (OverflowError) on one rank, a traceback and a minute's wait on four."""
    result = run_user(user_driver, "past_floats")
    assert result.residuals == {"big": math.inf, "fine": 1.0} and result.passed is False and not result.errors
    negative = run_user(user_driver, "negative_past_floats")
    assert negative.errors == ["check negative_past_floats (p.tile:7): negative_past_floats returned -inf, below 0: "
                               "a residual is a ratio of norms (a signed difference would always pass)"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("function, message", [
    ("raising", rf"^check raising \(p.tile:7\): raising raised KeyError at checks.py:{RAISES_AT}: 'y'$"),
    ("wrong_type", r"^check wrong_type \(p.tile:7\): wrong_type returned list; a check returns a float residual"),
    ("exits", rf"^check exits \(p.tile:7\): exits raised sys.exit\(3\) at checks.py:{EXITS_AT}$"),
    ("ends_a_generator", rf"^check ends_a_generator \(p.tile:7\): ends_a_generator raised GeneratorExit at "
                         rf"checks.py:{BASE_AT}: not an Exception$"),  # a BaseException: it was a traceback
    ("missing", r"^check missing \(p.tile:7\): kernel module checks.py defines no function missing$"),
    ("not_callable", r"^check not_callable \(p.tile:7\): kernel module checks.py: not_callable must be a function, "
                     r"not float 3.0$"),
    ("negative", r"^check negative \(p.tile:7\): negative returned -5, below 0: a residual is a ratio of norms"),
    ("bad_entry", r"^check bad_entry \(p.tile:7\): bad_entry returned a dict whose entry 'b' is list, not a number$"),
    ("negative_entry", r"negative_entry returned a dict whose entry 'b' is -0.5, below 0"),
])
def test_a_user_check_that_gives_no_residual_fails_with_one_line(user_driver, function, message):
    result = run_user(user_driver, function)
    assert not result.ok and result.passed is False and math.isnan(result.residual)
    assert len(result.errors) == 1 and result.errors[0].count("\n") == 0
    assert re.search(message, result.errors[0]), result.errors[0]


def run_cli(*args, timeout=100):
    return subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(120)
def test_a_user_check_on_two_ranks_gathers_on_rank_0_and_every_rank_gets_the_verdict(user_driver):
    out = run_cli(user_driver("llt"), "--n", 250, "--nb", 64, "--np", 2, "--check", "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["np"] == 2 and summary["passed"] and set(summary["residuals"]) == {"llt", "rows"}
    assert summary["residuals"]["llt"] < 1 and all(r["messages_sent"] > 0 for r in summary["ranks"])
    failed = run_cli(user_driver("raising"), "--n", 250, "--nb", 64, "--np", 2, "--check")
    assert failed.returncode == 1
    errors = [line for line in failed.stderr.splitlines() if "raising raised" in line]
    reason = f"raising raised KeyError at checks.py:{RAISES_AT}: 'y'"
    assert errors == [f"tiledsl: error: check raising (p.tile:7): {reason}"]
    assert "gave no residual (NaN)" not in failed.stderr  # the cause, not its NaN, is the error
    assert "  raising   no residual  (FAIL: the check failed, see below)" in failed.stdout.splitlines()
    assert "Traceback" not in failed.stderr
    # one stream, as a terminal shows both: the error below the summary that points at it (it came above)
    merged = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", user_driver("raising"), "--n", "250",
                             "--nb", "64", "--np", "2", "--check"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=100).stdout.splitlines()
    assert merged.index(f"tiledsl: error: check raising (p.tile:7): {reason}") == len(merged) - 1
    assert merged.index("  raising   no residual  (FAIL: the check failed, see below)") < len(merged) - 1


# ---------------------------------------------------------------- GFLOP/s
class Shaped:
    """A matrix's shape, all that the flop counts read of it."""

    def __init__(self, m, n):
        self.m, self.n = m, n


def _program(check=None):
    return Program("p", "p.tile", Tiling("uniform"), matrices=(), check=check)


@pytest.mark.parametrize("kind, m, n, flops", [
    ("cholesky", 300, 300, 300 ** 3 / 3), ("lu", 300, 300, 2 * 300 ** 3 / 3),
    ("lu", 500, 200, 500 * 200 ** 2 - 200 ** 3 / 3), ("lu", 200, 500, 500 * 200 ** 2 - 200 ** 3 / 3),
    ("qr", 1440, 180, 2 * 1440 * 180 ** 2 - 2 * 180 ** 3 / 3), ("qr", 300, 300, 4 * 300 ** 3 / 3),
])
def test_the_standard_counts_follow_the_matrix_shape(kind, m, n, flops):
    program = _program(CheckDecl(kind, ("A",), line=1))
    assert reporting.flop_count(program, {"A": Shaped(m, n)}, [{"flops": 7.0, "tasks": 1}]) == \
        (pytest.approx(flops), "standard")


def test_the_summary_says_where_its_flops_come_from():
    """A standard count is named with the shape it counts: a program doing less than the dense
    factorization its check names (a banded one) would otherwise show an impossible rate."""
    program = _program(CheckDecl("lu", ("A",), line=1))
    assert reporting.count_text(program, {"A": Shaped(1500, 1000)}, "standard") == \
        " (LAPACK's leading-term count for a 1500×1000 LU)"
    assert reporting.count_text(program, {}, "kernels") == " (from the kernels' flop counts)"


@pytest.mark.parametrize("value, text", [(59.96, "59.96"), (60.0, "60"), (59.9999999, "59.9999999"),
                                         (60.00001, "60"), (0.00123456, "0.00123"), (-0.0, "0"), (math.nan, "nan")])
def test_a_residual_is_shown_on_its_side_of_the_threshold(value, text):
    """Three digits made 59.96 read "60 (pass)" beside 60.0's "60 (FAIL)"."""
    assert reporting._residual_text(value) == text


def test_a_program_without_a_standard_count_reports_its_kernels_flops():
    ranks = [{"flops": 3e9, "tasks": 2}, {"flops": 1e9, "tasks": 1}]
    for check in (None, CheckDecl("product", ("C", "A", "B"), line=1),
                  CheckDecl("lu", ("A",), line=1, user=True)):
        assert reporting.gflops(_program(check), {"A": Shaped(9, 9)}, ranks, 2.0) == (2.0, "kernels")
    assert reporting.gflops(_program(), {}, [{"flops": 0.0, "tasks": 1}], 2.0) == (None, None)


def test_the_json_of_a_summary_is_strict_json_with_null_for_a_non_finite_number():
    text = reporting.json_text({"residual": math.nan, "residuals": {"mine": math.inf}, "gflops": np.float64(-math.inf),
                                "ranks": [{"seconds": 1.5}], "passed": False})
    assert json.loads(text, parse_constant=lambda word: pytest.fail(f"{word} in strict JSON")) == \
        {"residual": None, "residuals": {"mine": None}, "gflops": None, "ranks": [{"seconds": 1.5}], "passed": False}


def test_a_kernel_without_a_count_leaves_no_rate_and_the_summary_names_it():
    ranks = [{"flops": 3e9, "uncounted": None, "tasks": 1}, {"flops": None, "uncounted": "fill", "tasks": 1}]
    assert reporting.gflops(_program(), {}, ranks, 2.0) == (None, None)
    assert reporting.rate_text(None, ranks) == "   (no GFLOP/s: kernel fill declares no flop count)"
    assert reporting.rate_text(2.5, ranks) == "   2.50 GFLOP/s"
    assert reporting.rate_text(None, [{"flops": 0.0, "uncounted": None, "tasks": 0}]) == \
        "   (no GFLOP/s: no task ran)"


@pytest.mark.parametrize("flops, text", [(-1e4, "-1e+04"), (math.inf, "inf"), (0.0, "0")])
def test_flop_counts_that_add_up_to_no_work_or_to_infinity_give_no_rate_and_say_so(flops, text):
    ranks = [{"flops": flops, "uncounted": None, "tasks": 3}]
    assert reporting.gflops(_program(), {}, ranks, 2.0) == (None, None)
    assert reporting.rate_text(None, ranks) == f"   (no GFLOP/s: the kernels' flop counts add up to {text})"


def test_a_run_in_which_no_task_ran_has_no_rate_even_with_a_standard_count_and_warns():
    program = _program(CheckDecl("qr", ("A",), line=1))
    ranks = [{"flops": 0.0, "uncounted": None, "tasks": 0}] * 2
    assert reporting.gflops(program, {"A": Shaped(100, 100)}, ranks, 2.0) == (None, None)
    program = Program("p", "p.tile", Tiling("uniform"), matrices=(), params=("domains",))
    assert reporting.idle_warning(program, {"n": 157, "domains": 0}, ranks) == \
        "no task ran: the loop nest of p calls no kernel at n=157 with domains=0; its matrices are left as they were"
    assert reporting.idle_warning(program, {"n": 157, "domains": 2}, [{"tasks": 1}]) is None
    assert reporting.idle_warning(program, {"n": 157, "domains": 0}, ranks, planned=True) == (  # explain, simulate
        "no task would run: the loop nest of p calls no kernel at n=157 with domains=0; its matrices would be left "
        "as they were")
    # and no rank is said to be idle for want of a grid that no grid mends (tester s56)
    nothing = [{"rank": 0, "tasks": 0, "owned_tiles": 1, "messages_sent": 0},
               {"rank": 1, "tasks": 0, "owned_tiles": 0, "messages_sent": 0}]
    assert reporting.idle_ranks_warning(nothing, (2, 1), pytest.fail) is None


def test_ranks_that_ran_no_task_are_warned_of_with_another_grid_to_try():
    ranks = [{"rank": 0, "tasks": 40, "owned_tiles": 2, "messages_sent": 0},
             {"rank": 1, "tasks": 0, "owned_tiles": 2, "messages_sent": 3}]
    assert reporting.idle_ranks_warning(ranks, (1, 2), lambda: "use --grid 2x1, on which every rank runs a task") == (
        "rank 1 ran no task on the 1x2 grid: no task writes first a tile it owns, so it only sent tiles; "
        "use --grid 2x1, on which every rank runs a task")
    assert reporting.idle_ranks_warning(ranks, (1, 2), lambda: "ADVICE").endswith("so it only sent tiles; ADVICE")
    unasked = pytest.fail  # the grids are walked for only when there is a warning
    both_work = [{"rank": 0, "tasks": 4, "owned_tiles": 2}, {"rank": 1, "tasks": 3, "owned_tiles": 2}]
    assert reporting.idle_ranks_warning(both_work, (1, 2), unasked) is None
    assert reporting.idle_ranks_warning([{"rank": 0, "tasks": 4, "owned_tiles": 2}], (1, 1), unasked) is None
    # a rank without tiles sent nothing either: the warning of ranks without tiles names it (resources)
    without_tiles = [{"rank": 0, "tasks": 4, "owned_tiles": 2}, {"rank": 1, "tasks": 0, "owned_tiles": 0}]
    assert reporting.idle_ranks_warning(without_tiles, (1, 2), unasked) is None


@pytest.mark.timeout(60)
def test_the_summary_says_which_count_it_used():
    out = run_cli("programs/qr.tile", "--n", 300, "--nb", 100, "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["flops_source"] == "standard"
    assert summary["gflops"] == pytest.approx(4 * 300 ** 3 / 3 / summary["seconds"] / 1e9)



SCALED_PRODUCT = """\
program scaled {
  tiling uniform(nb = 64)
  param alpha = 2.0
  matrix A[n, n] = random general
  matrix B[n, n] = random general
  matrix C[n, n] = random general
  check product(C, A, B, alpha = alpha, beta = 2.0 - alpha / alpha)
  for k in 0 .. A.nt {
    for j in 0 .. C.nt {
      gemm(A[0 : A.mt, k], B[k, j], C[0 : C.mt, j], "N", "N", alpha, 1.0)
    }
  }
}
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("alpha", [2.0, -3.5])
def test_a_check_option_may_be_a_parameter_and_follows_the_run(tmp_path, alpha):
    import tiledsl

    (tmp_path / "scaled.tile").write_text(SCALED_PRODUCT)
    out = tiledsl.load(tmp_path / "scaled.tile").run(n=150, params={"alpha": alpha}, check=True)
    residual = out.summary()["residuals"]
    assert 0 <= residual["product"] < 1, residual


@pytest.mark.timeout(60)
def test_a_check_option_the_parameters_cannot_give_is_a_usage_error(tmp_path):
    import tiledsl

    (tmp_path / "scaled.tile").write_text(SCALED_PRODUCT.replace("alpha = alpha,", "alpha = 1.0 / (alpha - 2.0),"))
    with pytest.raises(tiledsl.TiledslError, match=r"^check product \(scaled\.tile:7\): option alpha cannot be "
                                                   r"computed with these parameters: float division by zero$"):
        tiledsl.load(tmp_path / "scaled.tile").run(n=100, check=True)
    # an infinite option made the residual NaN, said nowhere (one of constants alone is E211 at compile time)
    (tmp_path / "scaled.tile").write_text(SCALED_PRODUCT.replace("alpha = alpha,", "alpha = alpha * 1.0e308,"))
    with pytest.raises(tiledsl.TiledslError, match=r"^check product \(scaled\.tile:7\): option alpha is inf: a "
                                                   r"check's options are finite numbers$"):
        tiledsl.load(tmp_path / "scaled.tile").run(n=100, check=True)


def test_a_rate_past_a_million_gflops_is_written_in_four_figures_not_hundreds_of_digits():
    ranks = [{"flops": 1e308, "uncounted": None, "tasks": 1}]
    assert reporting.rate_text(999999.5, ranks) == "   999999.50 GFLOP/s"
    assert reporting.rate_text(1.23456e6, ranks) == "   1.235e+06 GFLOP/s"
    assert reporting.rate_text(1.4e297, ranks) == "   1.4e+297 GFLOP/s"


def test_a_rate_below_a_hundredth_of_a_gflops_keeps_its_digits_rather_than_reading_zero():
    """A cheap user kernel's count gave "0.00 GFLOP/s", which reads as a zero count (that has its own words)."""
    ranks = [{"flops": 1e3, "uncounted": None, "tasks": 1}]
    assert reporting.rate_text(0.00156, ranks) == "   0.00156 GFLOP/s"
    assert reporting.rate_text(0.01, ranks) == "   0.01 GFLOP/s"



@pytest.mark.parametrize("steps, unwritten", [(1, "P[1, 1], P[2, 2], P[3, 3]"), (0, "P[0, 0], P[1, 1], P[2, 2], P[3, 3]")])
def test_pivots_no_task_wrote_fail_the_check_naming_the_tiles(tmp_path, steps, unwritten):
    """An unwritten tile was an internal error (its data None); read as zeros it would name
    interchanges (each row with its panel's first), and an LU without pivoting would fail by far."""
    import tiledsl

    path = tmp_path / "partial.tile"
    path.write_text("program partial {\n  tiling uniform(nb = 32)\n  param steps = 1\n"
                    "  matrix A[n, n] = random general\n  workspace P like A rows 1\n  check lu(A, P)\n"
                    "  for k in 0 .. min(steps, A.nt) { getrf(A[k : A.mt, k], P[k, k]) }\n}\n")
    with pytest.raises(tiledsl.TiledslError) as error:
        tiledsl.load(path).run(n=100, params={"steps": steps}, check=True)
    assert str(error.value) == (f"check lu: no task wrote {unwritten}, where the check reads the interchanges of "
                                f"A's panels; an LU without pivoting is checked by lu(A)")


def test_pivots_written_as_nan_are_said_to_name_no_row_not_to_be_unwritten(harness):
    case = CASES["getrf"]
    pivots = case.matrices["P"][1].copy()
    pivots[0, 3] = np.nan
    broken = replace(case, matrices={**case.matrices, "P": (None, pivots)})
    with pytest.raises(CheckError, match=r"^check lu: the pivots interchange row 3 with row nan, which is not"):
        harness.residuals(broken)


@pytest.mark.timeout(200)
def test_a_rank_owning_tiles_no_task_touches_is_warned_of_in_the_json_notes_and_by_simulate(tmp_path):
    """potrf(A[k, k]) alone on 2x2: ranks 1 and 2 own the off-diagonal tiles and ran nothing, with
    no warning (it looked at the tiles a rank had touched); --json's notes and simulate said nothing
    of a rank that ran no task either."""
    import json

    (tmp_path / "diag.tile").write_text("program diag {\n  tiling uniform(nb = 100)\n  matrix A[n, n] = random spd\n"
                                        "  for k in 0 .. A.mt { potrf(A[k, k]) }\n}\n")
    out = run_cli(str(tmp_path / "diag.tile"), "--n", 400, "--np", 4, "--json")
    summary = json.loads(out.stdout.splitlines()[-1])
    said = ("ranks 1 and 2 ran no task on the 2x2 grid: no task writes first a tile they own, nor reads one; use --grid "
            "1x4 or --grid 4x1, on which every rank runs a task")
    assert [r["tasks"] for r in summary["ranks"]] == [2, 0, 0, 2] and said in out.stderr, out.stderr
    assert said in summary["notes"], summary["notes"]
    simulated = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "simulate", str(tmp_path / "diag.tile"),
                                "--n", "400", "--nodes", "4", "--machine", "local", "--json"], cwd=ROOT,
                               capture_output=True, text=True, timeout=100)
    assert said in json.loads(simulated.stdout)["notes"], simulated.stdout


@pytest.mark.timeout(120)
@pytest.mark.parametrize("program", ["cholesky", "qr"])
def test_a_check_of_a_matrix_among_the_subnormal_numbers_gives_no_residual_and_fails(tmp_path, program):
    """A 64×64 matrix whose largest entry is 1e-310: `residual 0 (pass)` for Cholesky, whose exact residual
    is 245 (its differences, formed on float64's absolute grid there, rounded away)."""

    a = np.random.default_rng(1).standard_normal((64, 64))
    a = a + a.T + 128 * np.eye(64)
    np.save(tmp_path / "tiny.npy", a * (1e-310 / np.abs(a).max()))
    out = run_cli(program, "--nb", 32, "--input", f"A={tmp_path / 'tiny.npy'}", "--check", "--json")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    summary = json.loads(out.stdout.splitlines()[-1])
    assert summary["passed"] is False and any(
        re.match(rf"check {program}: the norms it measures the residual against \(\S+\) are so small", error)
        for error in summary["errors"]), summary["errors"]
    # every residual the check gives is there, with none (tester n54: QR's orthogonality was left out)
    assert summary["residuals"] == ({"qr": None, "orthogonality": None} if program == "qr" else {program: None})


@pytest.mark.timeout(120)
def test_a_check_that_has_no_residual_for_an_infinite_input_says_why(tmp_path):
    """An infinity in A left trtri's inverse finite (1/inf = 0): 'residual nan (FAIL)' and nothing said of the
    input; a run whose result holds one says 'its input held 1'."""
    a = np.random.default_rng(0).standard_normal((300, 300)) + 300 * np.eye(300)
    a[0, 0] = np.inf
    np.save(tmp_path / "inf.npy", a)
    out = run_cli("trtri", "--nb", 128, "--input", f"A={tmp_path / 'inf.npy'}", "--check", "--json")
    assert out.returncode == 1, out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["errors"][0] == (
        "the check has no residual: A's input held 1 NaN or infinite value(s), which no backward error measures")
    # then 'check failed: residual nan is not below 60' and, in the summary, 'residual nan (FAIL, threshold 60)'
    out = run_cli("trtri", "--nb", 128, "--input", f"A={tmp_path / 'inf.npy'}", "--check")
    assert "residual nan" not in out.stdout + out.stderr and "inverse   no residual  (FAIL" in out.stdout, out.stdout


def test_a_long_list_of_idle_ranks_is_cut_as_the_other_lists_are():
    """simulate --nodes 4096: 'rank 1, 2, 3, … ran no task' named all 276 idle ranks in one 1,532-character line."""
    from tiledsl.runtime import reporting

    ranks = [{"rank": r, "tasks": r % 2, "owned_tiles": 1, "messages_sent": 0} for r in range(40)]
    said = reporting.idle_ranks_warning(ranks, (5, 8), lambda: [])
    assert said.startswith("ranks 0, 2, 4, 6, 8 and 15 more ran no task on the 5x8 grid"), said


def test_a_residual_in_a_0_d_array_is_a_number():
    """np.array(0.5) was refused as "returned ndarray" where np.float64(0.5) is taken (tester l64); an array of
    residuals, and a 0-d array of a bool, still are not residuals."""
    from tiledsl.runtime.usercheck import _residuals

    assert _residuals("r", np.array(0.5)) == ({"r": 0.5}, None)
    assert _residuals("r", {"a": np.array(2), "b": np.float32(1.0)}) == ({"a": 2.0, "b": 1.0}, None)
    assert _residuals("r", np.array([0.5]))[1].startswith("returned ndarray; a check returns a float residual")
    assert _residuals("r", np.array(True))[1].startswith("returned bool")
    assert _residuals("r", np.array(-1.0))[1].startswith("returned -1, below 0")
