"""Access summaries: the read/write set of every call site of every shipped program.

Each expectation is written by hand from the program text and the prelude's
signatures: (matrix, row index, column index, sub-range or None, mode) per
argument, in order, and the index of the main output (the first written argument).
"""
from pathlib import Path

import pytest

from tiledsl.compiler.expressions import unparse
from tiledsl.compiler import check_path, check_source
from tiledsl.compiler.source import decode

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "programs"


def sub_range(tile):
    if tile.rows is None and tile.cols is None:
        return None
    parts = []
    for part in (tile.rows, tile.cols):
        if part is not None:
            start = unparse(part.start) if part.start is not None else ""
            stop = unparse(part.stop) if part.stop is not None else ""
            parts.append(f"{start}:{stop}")
    return ", ".join(parts)


def summary(call):
    return (call.kernel.name.text, call.call.span.line,
            [(a.matrix, unparse(a.tile.row), unparse(a.tile.col), sub_range(a.tile), a.mode)
             for a in call.accesses],
            call.main)


EXPECTED = {
    "cholesky": [
        ("potrf", 10, [("A", "k", "k", None, "inout")], 0),
        ("trsm", 12, [("A", "k", "k", None, "in"), ("A", "m", "k", None, "inout")], 1),
        ("syrk", 15, [("A", "j", "k", None, "in"), ("A", "j", "j", None, "inout")], 1),
        ("gemm", 17, [("A", "m", "k", None, "in"), ("A", "j", "k", None, "in"),
                      ("A", "m", "j", None, "inout")], 2),
    ],
    "hetero_cholesky": [
        ("potrf", 17, [("A", "t", "k", "o:", "inout")], 0),
        ("gemm", 21, [("A", "t", "k", "oj:", "in"), ("A", "t", "k", "oj:oj + A.width(j)", "in"),
                      ("A", "t", "j", "oj:", "inout")], 2),
        ("trsm", 24, [("A", "t", "k", "o:", "in"), ("A", "i", "k", None, "inout")], 1),
        ("gemm", 30, [("A", "i", "k", None, "in"), ("A", "j // s", "k", "oj:oj + A.width(j)", "in"),
                      ("A", "i", "j", None, "inout")], 2),
    ],
    "hetero_qr": [
        ("geqrt", 16, [("A", "t", "k", "o:", "inout"), ("T", "t", "k", None, "out")], 0),
        ("gemqrt", 18, [("A", "t", "k", "o:", "in"), ("T", "t", "k", None, "in"),
                        ("A", "t", "j", "o:", "inout")], 2),
        ("tpqrt", 21, [("A", "t", "k", "o:", "inout"), ("A", "i", "k", None, "inout"),
                       ("T", "i", "k", None, "out")], 0),
        ("tpmqrt", 23, [("A", "i", "k", None, "in"), ("T", "i", "k", None, "in"),
                        ("A", "t", "j", "o:", "inout"), ("A", "i", "j", None, "inout")], 2),
    ],
    "lu": [
        ("getrf_nopiv", 12, [("A", "k", "k", None, "inout")], 0),
        ("trsm_l", 14, [("A", "k", "k", None, "in"), ("A", "k", "j", None, "inout")], 1),
        ("trsm_u", 17, [("A", "k", "k", None, "in"), ("A", "i", "k", None, "inout")], 1),
        ("gemm_nn", 19, [("A", "i", "k", None, "in"), ("A", "k", "j", None, "in"),
                         ("A", "i", "j", None, "inout")], 2),
    ],
    "qr": [
        ("geqrt", 14, [("A", "k", "k", None, "inout"), ("T", "k", "k", None, "out")], 0),
        ("gemqrt", 16, [("A", "k", "k", None, "in"), ("T", "k", "k", None, "in"),
                        ("A", "k", "j", None, "inout")], 2),
        ("tpqrt", 19, [("A", "k", "k", None, "inout"), ("A", "i", "k", None, "inout"),
                       ("T", "i", "k", None, "out")], 0),
        ("tpmqrt", 21, [("A", "i", "k", None, "in"), ("T", "i", "k", None, "in"),
                        ("A", "k", "j", None, "inout"), ("A", "i", "j", None, "inout")], 2),
    ],
}

PRIORITIES = {
    "cholesky": ["3 * (A.nt - k)", "2 * (A.nt - k)", "2 * (A.nt - j)", "A.nt - j"],
    "hetero_cholesky": ["3 * (A.nt - k)", "3 * (A.nt - j)", "2 * (A.nt - k)", "A.nt - j"],
    "hetero_qr": ["3 * (A.nt - k)", "2 * (A.nt - k)", "2 * (A.nt - k)", "A.nt - j"],
    "lu": ["3 * (A.nt - k)", "2 * (A.nt - k)", "2 * (A.nt - k)", "A.nt - j"],
    "qr": ["3 * (A.nt - k)", "2 * (A.nt - k)", "2 * (A.nt - k)", "A.nt - j"],
}

STATIC = {  # tiling and its settings (the values are tuned, so not pinned here)
    "cholesky": ("uniform", {"nb"}),
    "hetero_cholesky": ("hybrid", {"B", "b", "s"}),
    "hetero_qr": ("hybrid", {"B", "b", "s"}),
    "lu": ("uniform", {"nb"}),
    "qr": ("uniform", {"nb"}),
}


@pytest.fixture(scope="module")
def checked():
    cache = {}

    def get(name):
        if name not in cache:
            result = check_path(PROGRAMS / f"{name}.tile")
            assert result.ok, result.report()
            assert result.diagnostics == [], result.report()
            cache[name] = result.checked
        return cache[name]
    return get


#: the library's programs, checked end to end (against scipy, on ranks and GPUs) by tests/runtime/test_library.py
LIBRARY = ("gemm", "gesv", "getrf", "hqr", "posv", "potri", "syrk", "trmm", "trtri", "tsqr")


def test_every_shipped_program_has_expectations():
    assert sorted(p.stem for p in PROGRAMS.glob("*.tile")) == sorted([*EXPECTED, *LIBRARY])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_access_summaries(checked, name):
    calls = checked(name).calls
    assert [summary(c) for c in calls] == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_main_output_is_first_written_argument(checked, name):
    for call in checked(name).calls:
        written = [i for i, a in enumerate(call.accesses) if a.mode in ("out", "inout")]
        assert call.main == written[0]
        assert [a.mode for a in call.accesses] == [p.mode for p in call.kernel.params if p.kind == "tile"]
        assert not call.under_condition


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_priorities_and_static_facts(checked, name):
    program = checked(name)
    assert [unparse(c.call.priority) for c in program.calls] == PRIORITIES[name]
    tiling, defaults = STATIC[name]
    assert (program.tiling, set(program.tiling_defaults)) == (tiling, defaults)
    assert all(isinstance(v, int) and v >= 1 for v in program.tiling_defaults.values())
    assert program.kernel_module is None
    assert program.program.name.text == name


DEPENDS = [
    # (program, call index, argument index, loop/let names the tile indices depend on)
    ("cholesky", 0, 0, {"k"}),
    ("cholesky", 1, 0, {"k"}),
    ("cholesky", 1, 1, {"m", "k"}),
    ("cholesky", 2, 1, {"j"}),
    ("cholesky", 3, 0, {"m", "k"}),
    ("cholesky", 3, 1, {"j", "k"}),
    ("cholesky", 3, 2, {"m", "j"}),
    ("hetero_cholesky", 0, 0, {"t", "k", "d"}),          # k = t * s + d
    ("hetero_cholesky", 1, 2, {"t", "j"}),
    ("hetero_cholesky", 2, 1, {"i", "k", "t", "d"}),
    ("hetero_cholesky", 3, 1, {"j", "k", "t", "d"}),     # A[j // s, k]
    ("hetero_qr", 0, 1, {"t", "k", "d"}),
    ("lu", 3, 1, {"k", "j"}),
    ("qr", 3, 1, {"i", "k"}),
]


@pytest.mark.parametrize("name, call, arg, expected", DEPENDS)
def test_depends(checked, name, call, arg, expected):
    assert checked(name).calls[call].accesses[arg].depends == frozenset(expected)


# ---------------------------------------------------------------- small programs
def analyze_text(text):
    result = check_source(decode("t.tile", text.encode()))
    assert result.ok, result.report()
    return result.checked


def test_user_kernel_main_output_and_minor_outputs(tmp_path):
    (tmp_path / "k.py").write_text("def split(A, B, C):\n    B[:] = A\n")
    path = tmp_path / "t.tile"
    path.write_text("""\
use "k.py"
kernel split(in A, out B, inout C)
program p {
  matrix A[n, n] = random general
  matrix B[n, n] = zeros
  for k in 1 .. A.nt {  # from 1: A[k, k] and A[k, 0] are never the same tile (E204)
    split(A[k, k], B[k, k], A[k, 0])
  }
}
""")
    result = check_path(path)
    assert result.ok, result.report()
    (call,) = result.checked.calls
    assert summary(call) == ("split", 7, [("A", "k", "k", None, "in"), ("B", "k", "k", None, "out"),
                                          ("A", "k", "0", None, "inout")], 1)
    assert result.checked.kernel_module == "k.py"
    assert call.accesses[2].depends == {"k"}


def test_calls_under_conditions_are_marked():
    checked = analyze_text("""\
program p {
  matrix A[n, n] = random spd
  for k in 0 .. A.nt {
    if k > 0 { potrf(A[k, k]) } else { potrf(A[0, 0]) }
    potrf(A[k, 0])
  }
}
""")
    assert [c.under_condition for c in checked.calls] == [True, True, False]
    assert [c.accesses[0].depends for c in checked.calls] == [{"k"}, set(), {"k"}]


def test_depends_through_nested_lets():
    checked = analyze_text("""\
program p {
  param q = 2
  matrix A[n, n] = random spd
  for i in 0 .. A.mt {
    for j in 0 .. A.nt {
      let a = i + q
      let b = a * 2
      let c = 5
      potrf(A[b, c])
      potrf(A[c, q])
    }
  }
}
""")
    first, second = checked.calls
    # the lets named and the loops through lets; not 'a', bound before 'b' (linear in the lets)
    assert first.accesses[0].depends == {"b", "i", "c"}
    assert second.accesses[0].depends == {"c"}


def test_unparse_minimal_parentheses():
    from tiledsl.compiler.parser import parse

    def value(text):
        return parse(decode("t", f"program p {{ let x = {text} }}".encode())).programs[0].body[0].value

    assert unparse(value("a - b - c")) == "a - b - c"
    assert unparse(value("a - (b - c)")) == "a - (b - c)"
    assert unparse(value("not a < b")) == "not a < b" and unparse(value("(not a) < b")) == "(not a) < b"
    assert unparse(value("-(a + 1)")) == "-(a + 1)"
    assert unparse(value("min(a, b + 1)")) == "min(a, b + 1)"
    assert unparse(value("(a + 1) * 2 - (3 - a) // 4")) == "(a + 1) * 2 - (3 - a) // 4"
    assert unparse(value("-a * b")) == "-a * b" and unparse(value("(-a) - -b")) == "-a - -b"


# ---------------------------------------------------------------- size of programs (issue 17.8)
def _let_chain(count: int) -> str:
    lets = "\n".join(f"  let x{i} = x{i - 1} + 1" for i in range(1, count))
    return (f"program p {{\n  matrix A[n, n] = random spd\n  let x0 = 1\n{lets}\n"
            f"  potrf(A[x{count - 1} - {count - 1}, 0])\n}}\n")


@pytest.mark.timeout(300)
def test_a_chain_of_lets_is_analyzed_in_linear_time():
    """Four times the lets take about four times as long, not sixteen (a ratio, so that a slow
    machine does not fail it: the best of three of each, in CPU time)."""
    import time

    from tiledsl.compiler.analysis import analyze
    from tiledsl.compiler import prelude
    from tiledsl.compiler.parser import parse
    from tiledsl.compiler.source import decode

    def analyzed(count: int) -> float:
        tree = parse(decode("lets.tile", _let_chain(count).encode()))
        best = float("inf")
        for _ in range(3):
            started = time.process_time()
            checked, bag = analyze(tree, prelude())
            best = min(best, time.process_time() - started)
        assert checked is not None and not bag.has_errors
        # the value of the chain is known: x{count - 1} = count, so the index is the constant 0
        assert checked.calls[0].accesses[0].depends == {f"x{count - 1}"}
        return best

    small, large = analyzed(1_000), analyzed(4_000)
    assert large < 8 * small, f"4,000 lets took {large:.2f} s CPU, 1,000 took {small:.2f} s (quadratic?)"


@pytest.mark.timeout(120)
def test_chained_products_stop_at_the_first_value_beyond_64_bits():
    import time

    lets = "\n".join(f"  let a{i} = a{i - 1} * a{i - 1}" for i in range(1, 40))
    text = f"program p {{\n  matrix A[n, n] = random spd\n  let a0 = 99999 * 99999\n{lets}\n  potrf(A[a39 - a39, 0])\n}}\n"
    from tiledsl.compiler import check_source
    from tiledsl.compiler.source import decode

    started = time.process_time()
    result = check_source(decode("products.tile", text.encode()))
    assert time.process_time() - started < 10
    errors = [d for d in result.diagnostics if d.is_error]
    assert [(d.code, d.span.line, d.span.column) for d in errors] == [("E211", 4, 12)]
    assert "99996000059999600001" in errors[0].message


# ---------------------------------------------------------------- powers and steps
def diagnostics_of(text):
    return [(d.code, d.span.line, d.span.column) for d in check_source(decode("t.tile", text.encode())).diagnostics]


def test_powers_of_constants_fold_and_prove_ranges():
    """A power of constants is a constant: its let has a value, and an index made of it is proved in
    range or not, as an index of sums would be."""
    checked = analyze_text("""\
program p {
  matrix A[n, n] = random spd
  let w = 2 ** 3 ** 2 - (-2) ** 9
  potrf(A[w - 1024, 2 ** 0 - 1])
}
""")
    assert unparse(checked.calls[0].accesses[0].tile.row) == "w - 1024"
    assert diagnostics_of("program p {\n  matrix A[n, n] = random spd\n"
                          "  for k in 0 .. A.nt { potrf(A[k + 2 ** 0, k]) }\n}\n") == [("E208", 3, 32)]


def test_powers_are_affine_only_of_loop_invariant_values():
    """``2 ** q`` bounds a loop (a parameter); ``2 ** k`` of a loop variable does not, but serves as
    an index, a condition or a step."""
    text = """\
program p {
  param q = 2
  matrix A[n, n] = random spd
  for k in 0 .. 2 ** q * A.nt {
    for l in 0 .. %s { if k %% 2 ** l == 0 { potrf(A[(k + 2 ** l) %% A.mt, 0]) } }
  }
}
"""
    assert diagnostics_of(text % "A.nt step 2 ** (k % 3)") == []
    assert diagnostics_of(text % "2 ** k") == [("E206", 5, 19)]


def test_a_step_that_varies_proves_nothing_about_its_loop():
    """A constant step of 2 visits the loop's start, where A[i, 0] is A[0, 0] (E204); a step
    ``2 ** l`` is not known to be positive, so nothing is proved and the run checks the call. Such
    a loop leaves the affine class: every rank walks the nest."""
    from tiledsl.compiler import dataflow

    text = """\
program p {
  matrix A[n, n] = random spd
  for l in 0 .. 3 {
    for i in 0 .. A.mt step %s { trsm(A[0, 0], A[i, 0]) }
  }
}
"""
    assert diagnostics_of(text % "2") == [("E204", 4, 47)]
    assert diagnostics_of(text % "2 ** l") == []
    assert dataflow.plan(analyze_text(text % "2 ** l")) is None
    assert dataflow.plan(analyze_text((text % "2").replace("A[0, 0], A[i, 0]", "A[0, 0], A[i + 1, 0]"))) is not None


def test_char_uses_record_where_each_parameter_is_passed():
    checked = analyze_text("""\
program p {
  param side = "R"
  param uplo = "L"
  matrix A[n, n] = random spd
  trsm(A[0, 0], A[1, 0], side, uplo)
  potrf(A[1, 1], uplo = uplo)
}
""")
    assert [(u.name, u.choices, u.where, u.span.line, u.span.column) for u in checked.char_uses] == [
        ("side", "LR", "trsm's side", 5, 26), ("uplo", "LU", "trsm's uplo", 5, 32),
        ("uplo", "LU", "potrf's uplo", 6, 25)]


# ---------------------------------------------------------------- errors that hide no other
def test_a_refused_hybrid_setting_is_the_only_error_of_the_tiling():
    """b = 0 is refused; the relation (s - 1)·b < B is then not judged on b's default, 128, which the
    program never wrote."""
    assert diagnostics_of("program p { tiling hybrid(B = 8, b = 0, s = 2) matrix A[n, n] = random spd "
                          "potrf(A[0, 0]) }") == [("E209", 1, 38)]
    assert diagnostics_of("program p { tiling hybrid(B = 8, b = 4, s = 3) matrix A[n, n] = random spd "
                          "potrf(A[0, 0]) }") == [("E209", 1, 13)]  # the relation, of values written


def test_a_kernel_with_two_parameters_of_one_name_has_that_error_only():
    """Its calls' arguments would be told apart by those names: no E204/E205 follows."""
    for params in ("inout A, in A", "inout A, int A"):
        assert diagnostics_of(f"kernel cpy({params})\nprogram p {{\n  matrix A[n, n] = random spd\n"
                              f"  cpy(A[0, 0], A[1, 1])\n}}\n") == [("E207", 1, len(f"kernel cpy({params}"))]


def test_a_loop_inside_one_of_another_step_is_not_said_never_to_run_from_its_first_value():
    """The first value of a loop of step -2 (A.mt - 1) leaves the inner loop empty; the later ones do
    not: W302 judged the inner loop from that value alone, a false warning."""
    assert diagnostics_of("program p {\n  matrix A[n, n] = random spd\n  matrix W[n, n] = zeros\n"
                          "  for v in A.mt - 1 .. -1 step -2 {\n"
                          "    for u in v + 1 .. W.mt { potrf(W[u, 0]) }\n  }\n}\n") == []


def test_a_loop_between_tile_counts_that_runs_at_some_size_is_not_said_never_to_run():
    """W302 compares the tile counts of lengths it can order (D.mt >= A.mt for D of n + 1 rows, A of
    n); a loop up to the larger count runs for some sizes (n = nb: 1 .. 2), one over counts of
    unordered lengths (a parameter's) or of other kinds (a hybrid tiling's blocks and slices) may:
    no warning for any of them."""
    loops = ("for k in A.mt .. D.mt { potrf(A[0, 0]) }", "for k in A.m .. A.mt { potrf(A[0, 0]) }",
             "for k in A.mt .. C.mt { potrf(A[0, 0]) }", "for k in C.mt .. A.mt { potrf(A[0, 0]) }",
             "for k in A.m .. D.m { potrf(A[0, 0]) }", "for k in D.m - 2 .. A.m { potrf(A[0, 0]) }")
    for tiling in ("", "tiling hybrid(B = 100, b = 30, s = 2)\n"):
        for loop in loops:
            text = (f"program p {{\n  {tiling}param r = 3\n  matrix A[n, n] = random spd\n"
                    f"  matrix D[n + 1, n] = random general\n  matrix C[r, n] = random general\n"
                    f"  {loop}\n  getrf_nopiv(D[0, 0])\n  getrf_nopiv(C[0, 0])\n}}\n")
            assert diagnostics_of(text) == [], (tiling, loop)
    assert diagnostics_of("program p {\n  tiling hybrid(B = 100, b = 30, s = 2)\n  matrix A[n, n] = random spd\n"
                          "  for k in A.mt .. A.nt { potrf(A[0, 0]) }\n}\n") == []


def test_every_built_in_check_is_written_with_as_many_matrices_as_it_takes():
    from tiledsl.compiler.checks import CHECK_ARITY, CHECK_FORMS

    assert {kind: tuple(len(form.split(", ")) for form in forms) for kind, forms in CHECK_FORMS.items()} == CHECK_ARITY


def test_check_cholesky_takes_the_triangle_of_its_factor():
    """An upper Cholesky (potrf "U") is checked with `check cholesky(upper A)`; lower is the default,
    and said or not it is accepted; other qualifiers, or both triangles, are not."""
    def program(declared):
        return (f"program p {{\n  matrix A[n, n] = random spd\n  check cholesky({declared})\n"
                f"  potrf(A[0, 0], \"U\")\n}}\n")
    for declared in ("upper A", "lower A", "A"):
        assert diagnostics_of(program(declared)) == [], declared
    for declared in ("unit upper A", "symmetric A", "transposed upper A", "upper lower A"):
        assert [code for code, *_ in diagnostics_of(program(declared))] == ["E209"], declared


def test_an_index_times_a_parameter_proves_no_extreme():
    """``t * 2 + 1`` reaches 2·A.nt - 1, past A.nt - 1 (E208); ``t * p + 1`` may not (p = 0): a
    parameter's sign is unknown, so its product with a loop variable has no known greatest value."""
    text = ("program p {\n  param p = 2\n  matrix A[n, n] = random spd\n"
            "  for t in 0 .. A.mt { potrf(A[t + p - p, t * %s + 1]) }\n}\n")
    assert diagnostics_of(text % "2") == [("E208", 4, 43)]  # at the column index
    assert diagnostics_of(text % "p") == []


def test_a_matrix_called_as_a_function_is_not_also_said_to_be_unused_nor_to_be_no_tile():
    """One mistake, one error: E200's hint says how a tile is written (E205 said it again)."""
    assert diagnostics_of("program p {\n  matrix A[n, n] = random spd\n  potrf(A(0, 0))\n}\n") == [("E200", 3, 9)]


def test_an_int_parameter_takes_integers_past_float64_without_w307(tmp_path):
    """W307 (an integer float64 does not hold) is for float parameters: an int one gets the integer
    itself (it was said of int parameters too, with a hint that then failed as E205: tester z80d)."""
    (tmp_path / "k.py").write_text("def show(A, g, x):\n    pass\n")
    (tmp_path / "t.tile").write_text('use "k.py"\nkernel show(inout A, int g, float x) flops 0\n'
                                     'program p {\n  matrix A[n, n] = zeros\n'
                                     '  show(A[0, 0], 2 ** 62 - 1 + 2 ** 62, 2 ** 53 + 1)\n}\n')
    said = [(d.code, d.span.column) for d in check_path(tmp_path / "t.tile").diagnostics]
    assert said == [("W307", 40)]  # the float argument only
