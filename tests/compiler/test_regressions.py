"""Regression tests for compiler bugs found while writing the front end's test suite.

A test marked ``xfail(strict=True)`` states the correct behaviour of a bug not yet
fixed; when the fix lands it passes, the strict marker turns that into a failure, and
the marker must be removed (the test then guards the fix).
"""
from pathlib import Path

import pytest

from tiledsl.compiler.codegen import generate
from tiledsl.compiler import check_path, check_source
from tiledsl.driverload import import_driver
from tiledsl.runtime.engine import TaskFailure
from tiledsl.runtime.launch import execute
from tiledsl.runtime.options import Options
from tiledsl.runtime.world import UsageError
from tiledsl.compiler.source import decode


def check(text: str, path: str = "t.tile"):
    return check_source(decode(path, text.encode()))


def errors(result):
    return [d for d in result.diagnostics if d.is_error]


def run(text: str, folder, n: int, nb: int = 32, **options):
    result = check(text, str(folder / "prog.tile"))
    assert result.ok, result.report()
    path = folder / "driver.py"
    path.write_text(generate(result.checked))
    driver = import_driver(path, f"regression_{folder.name}")
    return execute(driver, Options(n=n, tiles={"nb": nb}, workers=1, **options))


# ---------------------------------------------------------------- analysis
SELF_REFERENCE = {
    "index": "for t in 0 .. A.mt {\n    let k = k + 1\n    potrf(A[k, k])\n  }",
    "bound": "let k = k + 1\n  for t in 0 .. k { potrf(A[t, t]) }",
    "shadowing": "for k in 0 .. A.nt {\n    let k = k + 1\n    potrf(A[k, k])\n  }",
    "tiling parameter": "for k in 0 .. A.nt {\n    let nb = k + nb\n    potrf(A[nb, nb])\n  }",
    "mutual": "for k in 0 .. A.nt {\n    let a = b + 1\n    let b = a + 1\n    potrf(A[b, b])\n  }",
}


@pytest.mark.parametrize("body", list(SELF_REFERENCE.values()), ids=list(SELF_REFERENCE))
def test_self_referential_let_is_a_diagnostic(body):
    result = check("program p {\n  matrix A[n, n] = random spd\n  %s\n}\n" % body)
    assert errors(result), result.report()
    assert all(d.code in ("E200", "E207") for d in errors(result)), result.report()


def test_negative_parameter_is_not_provably_out_of_range(tmp_path):
    text = ("program p {\n  tiling uniform(nb = 32)\n  param q = -3\n  matrix A[n, n] = random spd\n"
            "  potrf(A[-q - 1, -q - 1])\n}\n")
    assert errors(check(text)) == []


def test_out_of_range_note_without_loops_is_a_sentence():
    (d,) = errors(check("program p {\n  matrix A[n, n] = random spd\n  potrf(A[-1, 0])\n}\n"))
    assert d.code == "E208"
    assert not d.notes[0].rstrip().endswith("when"), d.notes


def test_out_of_range_without_loops_is_still_reported():
    result = check("program p {\n  matrix A[n, n] = random spd\n  potrf(A[0, A.nt])\n}\n")
    assert [(d.code, d.span.line, d.span.column) for d in errors(result)] == [("E208", 3, 14)]  # A.nt


def test_geometry_query_in_dimensions(tmp_path):
    text = ("program p {\n  tiling uniform(nb = 32)\n  matrix A[n, n] = random spd\n"
            "  matrix C[A.m, n] = zeros\n  workspace W like A rows A.nt\n"
            "  for k in 0 .. A.nt { potrf(A[k, k]) trsm(A[k, k], C[k, 0]) trsm(A[k, k], W[k, 0]) }\n}\n")
    result = check(text, str(tmp_path / "prog.tile"))
    if errors(result):  # rejecting it at compile time is a fix too
        assert {d.span.line for d in errors(result)} <= {4, 5}, result.report()
        return
    assert run(text, tmp_path, n=64).tasks == 6


def test_check_of_a_workspace_is_rejected():
    text = ("program p {\n  matrix A[n, n] = random spd\n  workspace T like A rows 32\n"
            "  check cholesky(T)\n  for k in 0 .. A.nt { potrf(A[k, k]) potrf(T[k, k]) }\n}\n")
    assert [d.span.line for d in errors(check(text))] == [4]


def test_two_tilings_are_rejected():
    text = ("program p {\n  tiling uniform(nb = 32)\n  tiling hybrid(B = 64, b = 16, s = 2)\n"
            "  matrix A[n, n] = random spd\n  potrf(A[0, 0])\n}\n")
    assert [d.span.line for d in errors(check(text))] == [3]


def test_two_checks_are_rejected():
    text = ("program p {\n  matrix A[n, n] = random spd\n  check cholesky(A)\n  check lu(A)\n"
            "  potrf(A[0, 0])\n}\n")
    assert [d.span.line for d in errors(check(text))] == [4]


def test_duplicate_tiling_setting_is_rejected():
    text = "program p {\n  tiling uniform(nb = 32, nb = 64)\n  matrix A[n, n] = random spd\n  potrf(A[0, 0])\n}\n"
    assert [(d.span.line, d.span.column) for d in errors(check(text))] == [(2, 27)]


def test_consistent_hybrid_defaults_compile():
    text = "program p {\n  tiling hybrid(B = 64, b = 16, s = 4)\n  matrix A[n, n] = random spd\n  potrf(A[0, 0])\n}\n"
    assert errors(check(text)) == []


ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted([*ROOT.glob("programs/*.tile"), *ROOT.glob("docs/examples/*.tile"),
                  *ROOT.glob("benchmarks/*.tile"), *ROOT.glob("tests/runtime/programs/*.tile")])


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_programs_have_no_errors(path):
    """The coincidence check of E204 and the square check of E209 have no false positives here."""
    result = check_path(path)
    assert not errors(result), result.report()


def test_indices_that_coincide_in_the_loop_range_are_e204():
    text = ("program p {\n  matrix A[n, n] = random spd\n  for k in 0 .. A.nt {\n"
            "    for m in k .. A.mt { trsm(A[k, k], A[m, k]) }\n  }\n}\n")
    (d,) = errors(check(text))
    assert (d.code, d.span.line, d.span.column) == ("E204", 4, 40)
    assert d.notes == ("arguments 1 (in) and 2 (inout)",
                       "they are the same tile at every k from 0 to A.nt - 1 (with m = k)")
    # from k + 1 on they never coincide, nor under an 'if' that parts them
    assert errors(check(text.replace("m in k ..", "m in k + 1 .."))) == []
    for parting in ("m > k", "m != k", "k < m"):
        guarded = text.replace("{ trsm(A[k, k], A[m, k]) }", f"{{ if {parting} {{ trsm(A[k, k], A[m, k]) }} }}")
        assert errors(check(guarded)) == [], parting


def test_a_panel_and_a_tile_that_meet_past_the_first_iteration_an_if_lets_run_are_e204():
    """The search goes on past iterations the 'if' skips (m = k) to one it runs (m = k + 1)."""
    text = ("program p {\n  matrix A[n, n] = random spd\n  for k in 0 .. A.nt {\n"
            "    for m in k .. A.mt { if m > k { gemm(A[k : A.mt, k], A[k, k], A[m, k]) } }\n  }\n}\n")
    (d,) = errors(check(text))
    assert (d.code, d.span.line) == ("E204", 4)
    assert d.notes[1] == "they share a tile when k = 0, m = 1 and when k = 1, m = A.nt - 1, for instance"


@pytest.mark.parametrize("condition, meeting", [
    ("m >= k", "when k = 0, m = 0 and when k = A.nt - 1, m = A.nt - 1, for instance"),
    ("k > 0", "when k = 1, m = 1 and when k = A.nt - 1, m = A.nt - 1, for instance"),
    ("m == k and k < A.nt", "when k = 0, m = 0 and when k = A.nt - 1, m = A.nt - 1, for instance")])
def test_indices_that_coincide_where_an_if_lets_the_call_run_are_e204(condition, meeting):
    """The 'if's around the call hold at the iterations where the tiles meet: the call is made there."""
    text = ("program p {\n  matrix A[n, n] = random spd\n  for k in 0 .. A.nt {\n"
            f"    for m in k .. A.mt {{ if {condition} {{ trsm(A[k, k], A[m, k]) }} }}\n  }}\n}}\n")
    (d,) = errors(check(text))
    assert (d.code, d.span.line) == ("E204", 4)
    assert d.notes == ("arguments 1 (in) and 2 (inout)", f"they are the same tile {meeting}")
    assert d.hint == "change a loop bound, or guard the call with 'if', so that they never coincide"


def test_coinciding_tiles_the_compiler_cannot_see_stop_the_run(tmp_path):
    text = ("program p {\n  matrix A[n, n] = random spd\n  for k in 0 .. A.nt {\n"
            "    for m in k .. A.mt { if m % 2 == 0 { trsm(A[k, k], A[m, k]) } }\n  }\n}\n")
    assert errors(check(text)) == []  # whether m % 2 == 0 where m = k, the compiler does not tell
    with pytest.raises(TaskFailure, match=r"tile A\[0, 0\] is passed twice to trsm and written"):
        run(text, tmp_path, n=64)


def test_random_spd_that_is_provably_not_square_is_e209():
    text = "program p {\n  matrix A[n, 2 * n] = random spd\n  potrf(A[0, 0])\n}\n"
    (d,) = errors(check(text))
    assert (d.code, d.span.line, d.span.column) == ("E209", 2, 24)
    assert d.message == "random spd needs a square matrix, but 'A' is n × 2 * n"
    for fine in ("random general", "random diagdom"):
        assert errors(check(text.replace("random spd", fine))) == []


def test_random_spd_not_square_at_run_time_is_a_usage_error(tmp_path):
    text = ("program p {\n  tiling uniform(nb = 32)\n  param q = n\n  matrix A[n, q] = random spd\n"
            "  potrf(A[0, 0])\n}\n")
    assert errors(check(text)) == []  # q may equal n: only the run can tell
    assert run(text, tmp_path, n=64).tasks == 1
    with pytest.raises(UsageError, match=r"^matrix A \(\w+\.tile:4\) is 64×128 with these sizes, but `random spd` "
                                         r"needs a square matrix$"):
        run(text, tmp_path, n=64, sets={"q": 128})


# ---------------------------------------------------------------- parser
@pytest.mark.parametrize("escape", ["\\N{bogus}", "\\x4", "\\u12"])
def test_invalid_string_escape_is_a_diagnostic(escape):
    result = check('program p {\n  matrix A[n, n] = load "a%s.npy"\n  potrf(A[0, 0])\n}\n' % escape)
    (d,) = errors(result)
    assert (d.code, d.span.line) == ("E100", 2)



@pytest.mark.parametrize("name", ["b", "B", "s", "scale"])
def test_a_uniform_programs_parameter_named_like_a_hybrid_setting_may_be_zero(tmp_path, name):
    """The sizes (n, a tile setting) are at least 1; the program's own parameters may be 0,
    even named like hybrid tiling's b, B or s: A[A.mt - 1 + b, ...] is in range for b = 0."""
    text = (f"program p {{\n  tiling uniform(nb = 32)\n  param {name} = 0\n  matrix A[n, n] = random spd\n"
            f"  potrf(A[A.mt - 1 + {name}, A.nt - 1 + {name}])\n}}\n")
    assert not errors(check(text))
    assert run(text, tmp_path, n=70).passed is None
