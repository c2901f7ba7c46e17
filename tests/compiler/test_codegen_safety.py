"""Generated drivers are safe: hostile identifiers and strings never become code.

Identifiers come from the grammar (``[A-Za-z_][A-Za-z0-9_]*``), so Python keywords,
builtins and the driver's own names (``rt``, ``p``, ``_me``, ``_submit``, ...) are legal
``.tile`` names; the generator must rename them. Strings must be emitted with ``repr``.
Every driver here is compiled with ``compile()`` and most are run with the real runtime
(one rank, checked residual).
"""
import re

import numpy as np
import pytest

from tiledsl.runtime.share import every_value

from tiledsl.compiler.codegen import generate
from tiledsl.compiler import check_path, check_source
from tiledsl.driverload import import_driver
from tiledsl.runtime.launch import execute
from tiledsl.runtime.options import Options
from tiledsl.compiler.source import decode

TEMPLATE = """\
program hostile {
  tiling uniform(nb = 32)
  param P = 1
  matrix M[n, n] = random spd
  check cholesky(M)
  for L in 0 .. M.nt {
    let T = L * P
    potrf(M[T, T]) priority M.nt - L
    for m in L + 1 .. M.mt { trsm(M[L, L], M[m, L]) }
    for j in L + 1 .. M.nt {
      syrk(M[j, L], M[j, j])
      for m in j + 1 .. M.mt { gemm(M[m, L], M[j, L], M[m, j]) }
    }
  }
}
"""
ROLES = {"P": "param", "M": "matrix", "L": "loop", "T": "let"}

# Names that work in every role today.
HOSTILE = ["rt", "p", "range", "min", "max", "__import__", "_me", "_submit", "_release", "_r0",
           "user_me", "print", "int", "main", "generate", "shapes", "resolve_params", "Call",
           "match", "case", "type", "_", "__name__", "__builtins__", "exec", "self", "range_", "p_"]
# Python keywords: fine as loops, lets and matrices (renamed), broken as params (see below).
KEYWORDS = ["class", "def", "lambda", "None", "True", "False", "import", "return", "is", "while"]


def compile_text(text: str, path: str = "hostile.tile") -> str:
    result = check_source(decode(path, text.encode()))
    assert result.ok, result.report()
    driver = generate(result.checked)
    compile(driver, "driver.py", "exec")
    return driver


def run_driver(text: str, folder, name: str, n: int = 70, **options):
    path = folder / f"{name}.py"
    path.write_text(text)
    driver = import_driver(path, f"safety_{name}")
    return driver, execute(driver, Options(n=n, tiles={"nb": 32}, check=True, workers=1, **options))


def hostile_program(role: str, name: str) -> str:
    return re.sub(r"\b%s\b" % role, name, TEMPLATE)


def cases(names, roles):
    for name in names:
        for role in roles:
            yield pytest.param(role, name, id=f"{ROLES[role]}-{name}")


@pytest.mark.parametrize("role, name", list(cases(HOSTILE, "PMLT")) + list(cases(KEYWORDS, "MLT")))
def test_hostile_identifier_runs(tmp_path, role, name):
    text = compile_text(hostile_program(role, name))
    _, result = run_driver(text, tmp_path, "driver")
    assert result.tasks == 10  # 3x3 tiles: 3 potrf, 3 trsm, 3 syrk, 1 gemm
    assert result.passed, result.residual


@pytest.mark.parametrize("name", ["class", "None", "lambda"])
def test_keyword_parameter_compiles(name):
    compile_text(hostile_program("P", name))


@pytest.mark.parametrize("role, name", [("L", "CALLS"), ("M", "CALLS"), ("T", "PROGRAM"), ("P", "PROGRAM")])
def test_driver_names_are_reserved(tmp_path, role, name):
    text = compile_text(hostile_program(role, name))
    _, result = run_driver(text, tmp_path, "driver")
    assert result.passed


def test_every_hostile_role_at_once(tmp_path):
    text = compile_text("""\
program everything {
  tiling uniform(nb = 32)
  param range = 1
  param min = 0
  param __import__ = 2
  matrix class[n, n] = random spd
  check cholesky(class)
  for rt in min(0, min) .. max(class.nt, 0) {
    let _me = rt * range + min
    let None = _me
    potrf(class[None, _me]) priority 3 * (class.nt - rt) + __import__
    for _submit in rt + 1 .. class.mt { trsm(class[rt, rt], class[_submit, rt]) }
    for def in rt + 1 .. class.nt {
      let True = def
      syrk(class[True, rt], class[def, def])
      for lambda in def + 1 .. class.mt { gemm(class[lambda, rt], class[def, rt], class[lambda, def]) }
    }
  }
}
""")
    assert "min(0, min_)" in text and "max(class_.nt, 0)" in text  # the builtins stay reachable
    driver, result = run_driver(text, tmp_path, "everything", n=100)
    assert result.tasks == 20 and result.passed
    assert driver.PROGRAM.params == ("range", "min", "__import__")
    assert [m.name for m in driver.PROGRAM.matrices] == ["class"]


def test_renamed_names_do_not_collide_with_user_names():
    text = compile_text("""\
program clash {
  tiling uniform(nb = 32)
  matrix A[n, n] = random spd
  for range in 0 .. A.nt {
    let range_ = range
    let range__ = range_
    let user_me = range__
    let _me = user_me
    potrf(A[_me, _me])
  }
}
""")
    body = text[text.index("def generate"):text.index("def dataflow")]
    bound = re.findall(r"^\s+(\w+) = ", body, re.M) + re.findall(r"^\s+for (\w+) in", body, re.M)
    user = [name for name in bound if not name.startswith("_r") and name not in
            ("_me", "_submit", "_release", "_among", "CALLS", "n", "A")]
    assert len(user) == len(set(user)) == 5, user  # five distinct Python names for five .tile names
    assert "_me = rt.rank" in body and "_me == _r0" in body


# ---------------------------------------------------------------- strings
def tile_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def test_load_path_with_quotes_and_newlines_is_emitted_with_repr(tmp_path):
    weird = tmp_path / "in'put\"s\nx\\y.npy"
    data = np.asfortranarray(np.random.default_rng(3).standard_normal((64, 64)))
    np.save(weird, data)
    program = tmp_path / "load.tile"
    program.write_text("program loader {\n  tiling uniform(nb = 32)\n"
                       f"  matrix A[n, n] = load {tile_string(str(weird))}\n"
                       "  matrix C[n, n] = zeros\n"
                       "  for i in 0 .. A.mt { for j in 0 .. A.nt { syrk(A[i, j], C[i, j]) } }\n}\n")
    result = check_path(program)
    assert result.diagnostics == [], result.report()
    text = generate(result.checked)
    compile(text, "driver.py", "exec")
    assert repr(str(weird)) in text
    driver = import_driver(_write(tmp_path, "load_driver", text), "safety_load")
    assert driver.PROGRAM.matrices[0].load == str(weird)
    run = execute(driver, Options(n=64, tiles={"nb": 32}, workers=1))
    assert run.tasks == 4
    assert np.array_equal(run.matrices["A"].assemble(), data)  # read from the oddly named file
    block = data[32:, :32]
    assert np.allclose(np.tril(run.matrices["C"].assemble()[32:, :32]), np.tril(-block @ block.T))


def test_kernel_module_with_quotes_and_newlines(tmp_path):
    module_name = "ker'nels\"\n\\x.py"
    (tmp_path / module_name).write_text("def scale(A):\n    A *= 2.0\n")
    program = tmp_path / "scale.tile"
    program.write_text(f"use {tile_string(module_name)}\nkernel scale(inout A)\n"
                       "program scaler {\n  tiling uniform(nb = 32)\n  matrix A[n, n] = zeros\n"
                       "  for i in 0 .. A.mt { for j in 0 .. A.nt { scale(A[i, j]) } }\n}\n")
    result = check_path(program)
    assert result.ok, result.report()
    text = generate(result.checked)
    compile(text, "driver.py", "exec")
    driver = import_driver(_write(tmp_path, "scale_driver", text), "safety_scale")
    assert driver.PROGRAM.kernel_module == module_name
    ones = np.ones((70, 70))
    run = execute(driver, Options(n=70, tiles={"nb": 32}, workers=1), arrays={"A": ones})
    assert run.tasks == 9
    assert np.array_equal(run.matrices["A"].assemble(), 2 * ones)


def _write(folder, name, text):
    path = folder / f"{name}.py"
    path.write_text(text)
    return path


@pytest.mark.parametrize("folder, name", [('q"""q', "prog.tile"), ("back\\N", "prog.tile"),
                                          ("plain", "new\nline.tile")], ids=["quotes", "backslash", "newline"])
def test_source_path_is_escaped(tmp_path, folder, name):
    directory = tmp_path / folder
    directory.mkdir()
    path = directory / name
    path.write_text(TEMPLATE)
    result = check_path(path)
    assert result.ok, result.report()
    compile(generate(result.checked), "driver.py", "exec")


def test_generated_text_names_tile_lines():
    text = compile_text(TEMPLATE)
    assert "# hostile.tile:8: potrf(M[T, T]) priority M.nt - L" in text
    assert "MatrixDecl('M', 'spd', line=4)" in text
    assert "CheckDecl('cholesky', ('M',), line=5)" in text


# ---------------------------------------------------------------- expression semantics

from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tiledsl.runtime.options import Params  # noqa: E402

VALUES = {"x": 3, "y": -5, "z": 7}


class FakeMatrix:
    mt, nt, m, n = 4, 6, 128, 192

    def rank_of(self, i, j):
        return 0

    def tile(self, i, j, line):
        return (i, j)


class FakeRuntime:
    rank = 0
    among = staticmethod(every_value)

    def __init__(self):
        self.priorities = []

    def matrix(self, name):
        return FakeMatrix()

    def submit(self, call, tiles, regions, priority, values=(), at=None):
        self.priorities.append(priority)

    def release(self, tile, at=None):
        pass


def integers():
    leaves = st.one_of(st.integers(0, 12).map(str), st.sampled_from(["x", "y", "z", "A.mt", "A.nt", "A.m"]))

    def extend(inner):
        return st.one_of(
            st.tuples(inner, st.sampled_from(["+", "-", "*", "//", "%"]), inner).map(" ".join),
            inner.map(lambda e: f"-{e}"),
            inner.map(lambda e: f"({e})"),
            st.tuples(st.sampled_from(["min", "max"]), st.lists(inner, min_size=2, max_size=3))
            .map(lambda t: f"{t[0]}({', '.join(t[1])})"))
    return st.recursive(leaves, extend, max_leaves=12)


def conditions():
    comparisons = st.tuples(integers(), st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), integers()).map(
        " ".join)

    def extend(inner):
        return st.one_of(st.tuples(inner, st.sampled_from(["and", "or"]), inner).map(" ".join),
                         inner.map(lambda e: f"not {e}"), inner.map(lambda e: f"({e})"))
    return st.recursive(comparisons, extend, max_leaves=6)


def evaluate_generated(body: str):
    text = ("program e {\n  tiling uniform(nb = 32)\n  param x = 3\n  param y = 0 - 5\n  param z = 7\n"
            "  matrix A[n, n] = zeros\n" + body + "\n}\n")
    result = check_source(decode("e.tile", text.encode()))
    if any(d.code == "E214" for d in result.diagnostics):
        return None  # a divisor that is always zero is refused, even where `and`/`or` would skip it
    assert result.ok, result.report()
    namespace = {}
    exec(compile(generate(result.checked), "e_driver.py", "exec"), namespace)
    runtime = FakeRuntime()
    namespace["generate"](runtime, Params(dict(n=128, nb=32, **VALUES)))
    return runtime.priorities


def python_value(text: str):
    scope = dict(VALUES, A=FakeMatrix(), min=min, max=max)
    try:
        return eval(text, {"__builtins__": {}}, scope)
    except ZeroDivisionError:
        return ZeroDivisionError


EXPRESSIONS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@EXPRESSIONS
@given(integers())
def test_generated_integer_expressions_keep_their_meaning(text):
    expected = python_value(text)  # the .tile operators mean what Python's do, with the same precedence
    assume(expected is not ZeroDivisionError)
    submitted = evaluate_generated(f"  potrf(A[0, 0]) priority {text}")
    assume(submitted is not None)
    assert submitted == [expected]


@EXPRESSIONS
@given(conditions())
def test_generated_conditions_keep_their_meaning(text):
    expected = python_value(text)
    assume(expected is not ZeroDivisionError)
    submitted = evaluate_generated(f"  if {text} {{ potrf(A[0, 0]) priority 1 }} else {{ potrf(A[0, 0]) priority 2 }}")
    assume(submitted is not None)
    assert submitted == [1 if expected else 2]


@pytest.mark.parametrize("text, value", [("x - y - z", 1), ("x - (y - z)", 15), ("-x * y", 15), ("- -x", 3),
                                         ("x - -y", -2), ("z // x * x", 6), ("z % x % 2", 1),
                                         ("-(x + z) // 3", -4), ("min(x, y) - max(x, z)", -12),
                                         ("A.mt * (A.nt - 1) + A.m // 32", 24), ("-x ** 2", -9),
                                         ("2 ** x ** 2", 512), ("(-x) ** 2", 9), ("x ** 2 * 2 - z", 11),
                                         ("2 ** -y", 32), ("(2 ** x) ** 2", 64)])
def test_integer_expression_examples(text, value):
    assert python_value(text) == value
    assert evaluate_generated(f"  potrf(A[0, 0]) priority {text}") == [value]


@pytest.mark.parametrize("body", ["", "  matrix A[n, n] = zeros\n  let x = 1\n  if x > 0 { }\n"
                                      "  for k in 0 .. 0 { }\n  release A[0, 0]\n"], ids=["empty", "empty-blocks"])
def test_programs_without_tasks(tmp_path, body):
    text = compile_text("program nothing {\n" + body + "}\n")
    assert "pass" in text
    path = _write(tmp_path, "nothing", text)
    result = execute(import_driver(path, "safety_nothing"), Options(n=10, workers=1))
    assert result.tasks == 0


# ---------------------------------------------------------------- deep programs (issue 17.10)
from pathlib import Path as _Path  # noqa: E402

from fuzz_strategies import judge  # noqa: E402

from tiledsl.compiler.analysis import MAX_LOOP_NESTING  # noqa: E402


def _nest(shape: list[str], call: str = "potrf(A[0, 0])") -> str:
    """A program whose statements nest as ``shape`` says, outermost first: 'for', 'if',
    or 'elif N' (an if with N 'else if' links, the call in the last one)."""
    opening, closing = [], []
    for depth, kind in enumerate(shape):
        if kind == "for":
            opening.append(f"for i{depth} in 0 .. 2 {{")
            closing.append("}")
        elif kind == "if":
            opening.append(f"if n > {depth} {{")
            closing.append("}")
        else:
            links = int(kind.split()[1])
            opening.append(" else ".join(f"if n == {k} {{ potrf(A[0, 0]) }}" for k in range(links))
                           + f" else if n > {depth} {{")
            closing.append("}")
    body = "\n".join(opening) + f"\n{call}\n" + "\n".join(reversed(closing))
    return f"program deep {{\n  matrix A[n, n] = random spd\n{body}\n}}\n"


def _driver(text: str) -> str:
    result = check_source(decode("deep.tile", text.encode()))
    assert result.ok, result.report()
    return generate(result.checked)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("shape", [
    ["for"] * MAX_LOOP_NESTING,
    ["elif 120"],
    ["elif 140"],
    ["if"] * 97,
    ["for"] * MAX_LOOP_NESTING + ["if"] * 70,
    ["for", "elif 50", "for", "elif 50"] + ["for"] * (MAX_LOOP_NESTING - 2),
], ids=["20 loops", "else-if 120", "else-if 140", "97 ifs", "20 loops and 70 ifs", "chains in loops"])
def test_drivers_of_programs_at_the_nesting_limits_compile(shape):
    driver = _driver(_nest(shape))
    compile(driver, "driver.py", "exec")
    if shape[0].startswith("elif"):
        assert driver.count("elif ") == int(shape[0].split()[1])


@pytest.mark.timeout(60)
def test_one_loop_too_many_is_a_diagnostic():
    result = check_source(decode("deep.tile", _nest(["for"] * (MAX_LOOP_NESTING + 1)).encode()))
    errors = [d for d in result.diagnostics if d.is_error]
    assert [(d.code, d.message) for d in errors] == [("E101", "loops nested more than 20 deep")]
    assert errors[0].span.line == 3 + MAX_LOOP_NESTING


@pytest.mark.timeout(300)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(shape=st.lists(st.sampled_from(["for", "if"]) | st.integers(1, 40).map(lambda k: f"elif {k}"),
                      min_size=1, max_size=110))
def test_every_deep_program_check_accepts_has_a_driver_that_compiles(tmp_path_factory, shape):
    # judge: check_source never raises; a program it accepts has a driver compile() accepts
    judge(_nest(shape), _Path(tmp_path_factory.getbasetemp()) / "deep.tile")


# ---------------------------------------------------------------- parameter names (issue 17.11)
COLLIDING_PARAMS = ["__class__", "__dict__", "as_dict", "_values", "__getattr__", "__getitem__", "keys"]


@pytest.mark.timeout(150)
def test_parameters_may_have_any_name_the_grammar_allows(tmp_path, capsys, monkeypatch):
    """Runs of the command line (a run claims its process: a subprocess), and explain's plan (main(),
    in this process: the same command, without a process's imports)."""
    import json
    import subprocess
    import sys

    from tiledsl.commands.cli import main

    declared = "\n".join(f"  param {name} = 1" for name in COLLIDING_PARAMS)
    product = " * ".join(COLLIDING_PARAMS)
    (tmp_path / "t.tile").write_text(f"program p {{\n{declared}\n  matrix A[n, n] = random spd\n"
                                     f"  let x = {product}\n  potrf(A[x, x])\n}}\n")
    monkeypatch.chdir(tmp_path)
    for sets, tile in (([], 1), (["--set", "as_dict=0"], 0)):
        out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "t.tile", "--n", "64", "--nb", "32",
                              *sets], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert main(["explain", "t.tile", "--n", "64", "--nb", "32", "--json", *sets]) == 0
        explained = json.loads(capsys.readouterr().out)
        assert explained["params"]["as_dict"] == tile
        assert [task["tiles"] for task in explained["tasks"]] == [[f"A[{tile}, {tile}]"]]
