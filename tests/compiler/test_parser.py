"""The parser: every construct of the language becomes the right AST node, with its span.

Expected positions are computed from the source text itself (where a piece of text
sits on its line), so each assertion says "this node covers exactly that text".
"""
from pathlib import Path

import pytest

from tiledsl.compiler import nodes as n
from tiledsl.compiler.expressions import unparse
from tiledsl.compiler.parser import parse
from tiledsl.compiler.source import SourceError, decode


def parse_text(text: str, path: str = "t.tile") -> n.File:
    return parse(decode(path, text.encode()))


def where(text: str, line: int, needle: str, nth: int = 0):
    """(line, column, end_line, end_column) of the nth occurrence of ``needle`` on ``line``."""
    row = text.split("\n")[line - 1]
    start = -1
    for _ in range(nth + 1):
        start = row.index(needle, start + 1)
    return (line, start + 1, line, start + 1 + len(needle))


def span_of(node):
    s = node.span
    return (s.line, s.column, s.end_line, s.end_column)


def expr(text: str):
    """The AST of one expression (as the value of a let)."""
    return parse_text("program p { let x = %s }" % text).programs[0].body[0].value


# ---------------------------------------------------------------- file level
FULL = """\
# a comment line
use "my_kernels.py"
kernel axpy(in X, out Y, inout Z)   # trailing comment
program demo {
  tiling hybrid(B = 512, b = 128, s = 3)
  param ib = 32
  matrix A[n, n] = random spd
  matrix C[n, 2 * n] = zeros
  matrix D[n, n] = load "d.npy"
  workspace T like A rows ib
  check qr(A, T)
  for k in 0 .. A.nt {
    let o = A.offset(k)
    axpy(A[k, k][o:], T[k, k][:, o:], C[k, k][o : o + 2, 1:3]) priority 3 * (A.nt - k)
    release A[k, k]
  }
}
"""


@pytest.fixture(scope="module")
def full():
    return parse_text(FULL)


def test_use_declaration(full):
    (use,) = full.uses
    assert isinstance(use, n.Use)
    assert use.path == "my_kernels.py"
    assert span_of(use) == (2, 1, 2, 20)


def test_kernel_declaration_with_modes(full):
    (kernel,) = full.kernels
    assert kernel.name.text == "axpy" and not kernel.prelude
    assert span_of(kernel.name) == where(FULL, 3, "axpy")
    assert [(p.mode, p.name.text) for p in kernel.params] == [("in", "X"), ("out", "Y"), ("inout", "Z")]
    assert span_of(kernel.params[0]) == where(FULL, 3, "in X")
    assert span_of(kernel.params[1]) == where(FULL, 3, "out Y")
    assert span_of(kernel.params[2]) == where(FULL, 3, "inout Z")
    assert span_of(kernel.params[2].name) == where(FULL, 3, "Z")
    assert span_of(kernel) == where(FULL, 3, "kernel axpy(in X, out Y, inout Z)")


def test_kernel_without_parameters():
    file = parse_text("kernel nothing()\nprogram p { }")
    assert file.kernels[0].params == ()


def test_program(full):
    (program,) = full.programs
    assert program.name.text == "demo"
    assert span_of(program.name) == where(FULL, 4, "demo")
    assert (program.span.line, program.span.column) == (4, 1)
    assert (program.span.end_line, program.span.end_column) == (17, 2)


def test_hybrid_tiling_with_settings(full):
    tiling = full.programs[0].tiling
    assert tiling.kind.text == "hybrid"
    assert [(s.name.text, s.value.value) for s in tiling.settings] == [("B", 512), ("b", 128), ("s", 3)]
    assert span_of(tiling) == where(FULL, 5, "tiling hybrid(B = 512, b = 128, s = 3)")
    assert span_of(tiling.settings[1]) == where(FULL, 5, "b = 128")
    assert span_of(tiling.settings[1].value) == where(FULL, 5, "128")


@pytest.mark.parametrize("text, kind, settings", [
    ("tiling uniform(nb = 64)", "uniform", [("nb", 64)]),
    ("tiling uniform", "uniform", []),
    ("tiling uniform()", "uniform", []),
    ("tiling hybrid(s = 2)", "hybrid", [("s", 2)]),
])
def test_tiling_forms(text, kind, settings):
    tiling = parse_text("program p {\n  %s\n}" % text).programs[0].tiling
    assert tiling.kind.text == kind
    assert [(s.name.text, s.value.value) for s in tiling.settings] == settings
    assert span_of(tiling) == (2, 3, 2, 3 + len(text))


def test_no_tiling():
    assert parse_text("program p { }").programs[0].tiling is None


def test_param(full):
    (param,) = full.programs[0].params
    assert param.name.text == "ib" and param.default == n.IntLit(32, param.default.span)
    assert span_of(param) == where(FULL, 6, "param ib = 32")
    assert span_of(param.name) == where(FULL, 6, "ib")


def test_matrices_and_inits(full):
    a, c, d = full.programs[0].matrices
    assert (a.mode, a.name.text, unparse(a.rows), unparse(a.cols)) == ("inout", "A", "n", "n")
    assert (a.init.kind, a.init.what.text, a.init.path) == ("random", "spd", None)
    assert span_of(a) == where(FULL, 7, "matrix A[n, n] = random spd")
    assert span_of(a.init) == where(FULL, 7, "random spd")
    assert span_of(a.init.what) == where(FULL, 7, "spd")
    assert (c.init.kind, c.init.what.text, c.init.path) == ("named", "zeros", None)
    assert unparse(c.cols) == "2 * n" and span_of(c.cols) == where(FULL, 8, "2 * n")
    assert span_of(c.init) == where(FULL, 8, "zeros")
    assert (d.init.kind, d.init.what, d.init.path) == ("load", None, "d.npy")
    assert span_of(d.init) == where(FULL, 9, 'load "d.npy"')


@pytest.mark.parametrize("before, mode", [("", "in"), ("", "out"), ("param q = 3", "inout"),
                                          ("matrix A[n, n] = zeros", "in")])
def test_matrix_mode_prefix(before, mode):
    file = parse_text("program p {\n  %s\n  %s matrix B[n, n] = random general\n}" % (before, mode))
    matrix = file.programs[0].matrices[-1]
    assert matrix.mode == mode and matrix.name.text == "B"
    assert (matrix.span.line, matrix.span.column) == (3, 3)


def test_workspace(full):
    (ws,) = full.programs[0].workspaces
    assert (ws.name.text, ws.like.text, unparse(ws.rows)) == ("T", "A", "ib")
    assert span_of(ws) == where(FULL, 10, "workspace T like A rows ib")
    assert span_of(ws.like) == where(FULL, 10, "A")


def test_check(full):
    (check,) = full.programs[0].checks
    assert check.kind.text == "qr" and [a.name.text for a in check.args] == ["A", "T"]
    assert span_of(check) == where(FULL, 11, "check qr(A, T)")
    assert span_of(check.args[1]) == where(FULL, 11, "T")


def test_for_let_call_release(full):
    (loop,) = full.programs[0].body
    assert isinstance(loop, n.For)
    assert loop.var.text == "k" and span_of(loop.var) == where(FULL, 12, "k")
    assert unparse(loop.start) == "0" and unparse(loop.stop) == "A.nt"
    assert span_of(loop.stop) == where(FULL, 12, "A.nt")
    assert (loop.span.line, loop.span.column, loop.span.end_line, loop.span.end_column) == (12, 3, 16, 4)
    let, call, release = loop.body
    assert isinstance(let, n.Let) and let.name.text == "o"
    assert span_of(let) == where(FULL, 13, "let o = A.offset(k)")
    assert isinstance(let.value, n.Method) and let.value.method.text == "offset"
    assert isinstance(call, n.Call) and call.kernel.text == "axpy"
    line14 = FULL.split("\n")[13]
    assert span_of(call) == (14, 5, 14, len(line14) + 1)
    assert span_of(call.kernel) == where(FULL, 14, "axpy")
    assert unparse(call.priority) == "3 * (A.nt - k)"
    assert span_of(call.priority) == where(FULL, 14, "3 * (A.nt - k)")
    assert isinstance(release, n.Release)
    assert span_of(release) == where(FULL, 15, "release A[k, k]")
    assert span_of(release.tile) == where(FULL, 15, "A[k, k]")
    assert release.tile.rows is None and release.tile.cols is None


def test_tile_references_and_sub_ranges(full):
    call = full.programs[0].body[0].body[1]
    first, second, third = call.args
    # A[k, k][o:]
    assert span_of(first) == where(FULL, 14, "A[k, k][o:]")
    assert (unparse(first.row), unparse(first.col)) == ("k", "k")
    assert unparse(first.rows.start) == "o" and first.rows.stop is None and first.cols is None
    assert span_of(first.rows) == where(FULL, 14, "o:")
    # T[k, k][:, o:]
    assert span_of(second) == where(FULL, 14, "T[k, k][:, o:]")
    assert second.rows.start is None and second.rows.stop is None
    assert unparse(second.cols.start) == "o" and second.cols.stop is None
    # C[k, k][o : o + 2, 1:3]
    assert span_of(third) == where(FULL, 14, "C[k, k][o : o + 2, 1:3]")
    assert (unparse(third.rows.start), unparse(third.rows.stop)) == ("o", "o + 2")
    assert span_of(third.rows) == where(FULL, 14, "o : o + 2")
    assert (unparse(third.cols.start), unparse(third.cols.stop)) == ("1", "3")
    assert span_of(third.cols) == where(FULL, 14, "1:3")


@pytest.mark.parametrize("ref, rows, cols", [
    ("A[i, j][a:b]", ("a", "b"), None),
    ("A[i, j][:b]", (None, "b"), None),
    ("A[i, j][:]", (None, None), None),
    ("A[i, j][a:b, c:d]", ("a", "b"), ("c", "d")),
    ("A[i, j][:, c:]", (None, None), ("c", None)),
    ("A[i, j][a:, :d]", ("a", None), (None, "d")),
])
def test_sub_range_forms(ref, rows, cols):
    tile = parse_text("program p { release %s }" % ref).programs[0].body[0].tile
    text = lambda e: None if e is None else unparse(e)
    assert (text(tile.rows.start), text(tile.rows.stop)) == rows
    assert (None if tile.cols is None else (text(tile.cols.start), text(tile.cols.stop))) == cols


def test_call_without_priority_and_without_arguments():
    body = parse_text("program p { foo(A[0, 0]) bar() }").programs[0].body
    assert body[0].priority is None and len(body[0].args) == 1
    assert body[1].args == () and body[1].kernel.text == "bar"


def test_if_else_chain():
    text = """\
program p {
  if a == 0 {
    let x = 1
  } else if a < 3 {
    let y = 2
  } else {
    let z = 3
    let w = 4
  }
  if b { }
}
"""
    first, second = parse_text(text).programs[0].body
    assert isinstance(first, n.If)
    assert span_of(first.cond) == where(text, 2, "a == 0")
    assert [s.name.text for s in first.then] == ["x"]
    (inner,) = first.orelse
    assert isinstance(inner, n.If)
    assert (inner.span.line, inner.span.column) == where(text, 4, "if a < 3")[:2]
    assert unparse(inner.cond) == "a < 3"
    assert [s.name.text for s in inner.then] == ["y"]
    assert [s.name.text for s in inner.orelse] == ["z", "w"]
    assert (first.span.line, first.span.column, first.span.end_line, first.span.end_column) == (2, 3, 9, 4)
    assert second.then == () and second.orelse == ()


def test_nested_loops_keep_order():
    text = "program p {\n for i in 0 .. 3 {\n  for j in i .. 4 { f(A[i, j]) }\n  g(A[i, i])\n }\n}"
    (outer,) = parse_text(text).programs[0].body
    inner, call = outer.body
    assert isinstance(inner, n.For) and unparse(inner.start) == "i"
    assert inner.body[0].kernel.text == "f" and call.kernel.text == "g"


def test_comments_are_ignored_everywhere():
    text = "# head\nprogram p { # after brace\n  let x = 1 # trailing\n  # alone\n  let y = x # more\n} # tail"
    body = parse_text(text).programs[0].body
    assert [s.name.text for s in body] == ["x", "y"]
    assert span_of(body[1]) == where(text, 5, "let y = x")


# ---------------------------------------------------------------- expressions
def shape(e):
    """A compact structural rendering of an expression tree."""
    match e:
        case n.IntLit(value=v):
            return v
        case n.Name(ident=i):
            return i.text
        case n.Attr(matrix=m, attr=a):
            return f"{m.text}.{a.text}"
        case n.Method(matrix=m, method=q, arg=arg):
            return (f"{m.text}.{q.text}", shape(arg))
        case n.Func(func=f, args=args):
            return (f.text, *[shape(a) for a in args])
        case n.Unary(op=op, operand=o):
            return (op, shape(o))
        case n.Binary(op=op, left=l, right=r):
            return (op, shape(l), shape(r))
    raise AssertionError(e)


@pytest.mark.parametrize("text, tree", [
    ("7", 7),
    ("a", "a"),
    ("a - b - c", ("-", ("-", "a", "b"), "c")),
    ("a - (b - c)", ("-", "a", ("-", "b", "c"))),
    ("a + b * c", ("+", "a", ("*", "b", "c"))),
    ("a * b + c", ("+", ("*", "a", "b"), "c")),
    ("(a + b) * c", ("*", ("+", "a", "b"), "c")),
    ("a // b % c * d", ("*", ("%", ("//", "a", "b"), "c"), "d")),
    ("a - b + c", ("+", ("-", "a", "b"), "c")),
    ("-a * b", ("*", ("-", "a"), "b")),
    ("-(a * b)", ("-", ("*", "a", "b"))),
    ("- - a", ("-", ("-", "a"))),
    ("a - -b", ("-", "a", ("-", "b"))),
    ("a + 1 < b * 2", ("<", ("+", "a", 1), ("*", "b", 2))),
    ("a <= b", ("<=", "a", "b")),
    ("a >= b", (">=", "a", "b")),
    ("a > b", (">", "a", "b")),
    ("a == b", ("==", "a", "b")),
    ("a != b", ("!=", "a", "b")),
    ("not a < b", ("not", ("<", "a", "b"))),
    ("not not a == b", ("not", ("not", ("==", "a", "b")))),
    ("a < b and c < d or e < f", ("or", ("and", ("<", "a", "b"), ("<", "c", "d")), ("<", "e", "f"))),
    ("a < b or c < d and e < f", ("or", ("<", "a", "b"), ("and", ("<", "c", "d"), ("<", "e", "f")))),
    ("not a < b and c < d", ("and", ("not", ("<", "a", "b")), ("<", "c", "d"))),
    ("a or b or c", ("or", ("or", "a", "b"), "c")),
    ("a and b and c", ("and", ("and", "a", "b"), "c")),
    ("min(a, b)", ("min", "a", "b")),
    ("max(a - 1, b, 0)", ("max", ("-", "a", 1), "b", 0)),
    ("min(A.mt, A.nt) - 1", ("-", ("min", "A.mt", "A.nt"), 1)),
    ("A.mt", "A.mt"),
    ("A.nt + A.m + A.n", ("+", ("+", "A.nt", "A.m"), "A.n")),
    ("A.height(i)", ("A.height", "i")),
    ("A.width(j + 1)", ("A.width", ("+", "j", 1))),
    ("A.offset(k) // 2", ("//", ("A.offset", "k"), 2)),
    ("((a))", "a"),
    ("2 ** k", ("**", 2, "k")),
    ("2 ** 3 ** k", ("**", 2, ("**", 3, "k"))),  # right-associative, as Python's
    ("(2 ** 3) ** k", ("**", ("**", 2, 3), "k")),
    ("-2 ** k", ("-", ("**", 2, "k"))),  # tighter than unary minus on its left
    ("2 ** -k", ("**", 2, ("-", "k"))),  # and the exponent may be negated
    ("(-2) ** k", ("**", ("-", 2), "k")),
    ("a * 2 ** k", ("*", "a", ("**", 2, "k"))),
    ("2 ** k * a", ("*", ("**", 2, "k"), "a")),
    ("2 ** A.mt + 1", ("+", ("**", 2, "A.mt"), 1)),
    ("2 ** min(a, b)", ("**", 2, ("min", "a", "b"))),
])
def test_expression_structure(text, tree):
    assert shape(expr(text)) == tree


def test_expression_spans():
    e = expr("a - b * (c + 1)")
    offset = len("program p { let x = ")
    assert span_of(e) == (1, offset + 1, 1, offset + 1 + len("a - b * (c + 1)"))
    assert span_of(e.left) == (1, offset + 1, 1, offset + 2)
    assert span_of(e.right) == (1, offset + 5, 1, offset + 1 + len("a - b * (c + 1)"))
    inner = e.right.right
    assert unparse(inner) == "c + 1"
    assert span_of(inner) == (1, offset + 10, 1, offset + 15)
    neg = expr("-k")
    assert span_of(neg) == (1, offset + 1, 1, offset + 3)
    method = expr("A.height(i)")
    assert span_of(method) == (1, offset + 1, 1, offset + 12)
    assert span_of(method.matrix) == (1, offset + 1, 1, offset + 2)
    assert span_of(method.method) == (1, offset + 3, 1, offset + 9)


@pytest.mark.parametrize("text", ["a < b < c", "a == b == c", "A.b.c", "max()", "a +", "* a", "a = b", "1 2",
                                  "a **", "** a", "a * * b", "a ** ** b", "a ^ b"])
def test_malformed_expressions_are_syntax_errors(text):
    with pytest.raises(SourceError) as raised:
        expr(text)
    assert raised.value.diagnostic.code == "E100"


@pytest.mark.parametrize("statement, hint", [
    ("if k = 0 { potrf(A[k, k]) }", "compare with '=='"),
    ("if 0 < k < 2 { potrf(A[k, k]) }", "comparisons do not chain: join them with 'and'"),
    ("if k > 0 && k < 2 { potrf(A[k, k]) }", "write 'and'"),
    ("if k > 0 || k < 2 { potrf(A[k, k]) }", "write 'or'"),
    ("potrf(A[k ^ 2, k])", "write '**' for a power"),
    ("if k > 0 { potrf(A[k, k]) } elif k == 0 { potrf(A[k, k]) }", "write 'else if'"),
    ("potrf(A[k, k]); potrf(A[k, k])", "statements need no separator"),
    ("fro j in 0 .. 2 { potrf(A[k, k]) }", "did you mean 'for'?"),
    ("potrf(A[k, k]) prority 2", "did you mean 'priority'?"),
    ("potrf(A[k, k]) relase A[k, k]", "did you mean 'release'?"),  # a statement after another, on one line
    ("if k > 0 { potrf(A[k, k]) } els { potrf(A[k, k]) }", "did you mean 'else'?"),
    ("matrix B[n, n] = zeros", "declarations (tiling, param, require, matrix, workspace, check) come before"),
    ("kernel f(inout A)", "'kernel' declarations go outside the program's block"),
    ('use "k.py"', "'use' declarations go outside the program's block"),
    ("potrf(A[k, k])", None)])
def test_the_usual_syntax_mistakes_get_a_hint(statement, hint):
    text = "program p {\n  matrix A[n, n] = random spd\n  for k in 0 .. A.nt {\n    %s\n  }\n}\n" % statement
    if hint is None:
        parse_text(text)
        return
    with pytest.raises(SourceError) as raised:
        parse_text(text)
    assert raised.value.diagnostic.code == "E100" and raised.value.diagnostic.hint.startswith(hint)


@pytest.mark.parametrize("statement, hint", [
    ("for m inn .. 4 { potrf(A[m, m]) }", "did you mean 'in'? (or 'in n': a keyword is a word of its own)"),
    ("for m inout k .. A.mt { potrf(A[m, m]) }", "did you mean 'in'?")])  # 'in out k' is no loop either
def test_a_keyword_glued_to_a_word_is_told_apart_only_where_that_parses(statement, hint):
    text = "program p {\n  matrix A[n, n] = random spd\n  for k in 0 .. A.nt {\n    %s\n  }\n}\n" % statement
    with pytest.raises(SourceError) as raised:
        parse_text(text)
    assert raised.value.diagnostic.hint == hint


@pytest.mark.parametrize("mode, hint", [("inot", "did you mean 'inout'?"), ("inou", "did you mean 'inout'?"),
                                        ("inut", "did you mean 'inout'?"), ("inn", "did you mean 'in'?")])
def test_a_misspelt_inout_is_not_told_to_be_in(mode, hint):
    """The lexer reads 'inot' as 'in' and 'ot': the hint was 'in', which turned a written argument
    into a read one."""
    with pytest.raises(SourceError) as raised:
        parse_text("kernel f(%s A)\nprogram p {\n  matrix A[n, n] = random spd\n  f(A[0, 0])\n}\n" % mode)
    diagnostic = raised.value.diagnostic
    assert (diagnostic.code, diagnostic.span.line, diagnostic.span.column) == ("E100", 1, 10)
    assert diagnostic.message == f"unexpected '{mode}'" and diagnostic.hint == hint


@pytest.mark.parametrize("word, hint", [("chr", "char"), ("flaot", "float")])
def test_a_misspelt_value_type_gets_a_hint(word, hint):
    with pytest.raises(SourceError) as raised:
        parse_text("kernel f(inout A, %s s)\nprogram p {\n  matrix A[n, n] = random spd\n}\n" % word)
    diagnostic = raised.value.diagnostic
    assert (diagnostic.span.line, diagnostic.span.column, diagnostic.message) == (1, 19, f"unexpected '{word}'")
    assert diagnostic.hint == f"did you mean '{hint}'?"


@pytest.mark.parametrize("statement", ["let x = 1 -> 2", "potrf(A[0, <k])", "if 1 * == 2 { potrf(A[k, k]) }"])
def test_a_comparison_sign_where_no_comparison_was_made_is_not_told_to_chain(statement):
    text = "program p {\n  matrix A[n, n] = random spd\n  for k in 0 .. A.nt {\n    %s\n  }\n}\n" % statement
    with pytest.raises(SourceError) as raised:
        parse_text(text)
    assert "do not chain" not in (raised.value.diagnostic.hint or "")


@pytest.mark.parametrize("text", ['use kernels "k.py"\nprogram p {\n}\n', "kernel kernel f(inout A)\nprogram p {\n}\n",
                                  'program p {\n}\nuse {"k.py"}\n'])
def test_a_declaration_outside_the_block_is_not_told_to_go_outside(text):
    """The hint for 'kernel'/'use' read as a call's name is for one inside the block only."""
    with pytest.raises(SourceError) as raised:
        parse_text(text)
    assert "outside the program's block" not in (raised.value.diagnostic.hint or "")


@pytest.mark.parametrize("after", ["  for i in 0 .. A.mt {\n    potrf(A[i, i])\n  }\n", "  potrf(A[0, 0])\n", "",
                                   # a keyword the grammar takes for the kind: the error was E209 'check'
                                   "  check cholesky(A)\n", "  in matrix B[n, n] = zeros\n"])
def test_random_without_its_kind_is_said_at_random(after):
    """The next line's first word was taken for the kind ('random for'), and the error came
    later on that line: it is said at 'random'."""
    text = "program p {\n  matrix A[n, n] = random   # input\n%s}\n" % after
    with pytest.raises(SourceError) as raised:
        parse_text(text)
    d = raised.value.diagnostic
    assert (d.message, span_of(d)) == ("'random' needs a kind", where(text, 2, "random"))
    assert d.hint == "write 'random spd', 'random general' or 'random diagdom'"


def test_a_matrix_without_its_value_is_said_at_the_equals_sign():
    """'potrf' on the next line was taken for a named value, and '(' was unexpected there."""
    text = "program p {\n  matrix A[n, n] =\n  potrf(A[0, 0])\n}\n"
    with pytest.raises(SourceError) as raised:
        parse_text(text)
    d = raised.value.diagnostic
    assert (d.message, span_of(d)) == ("the matrix's initial value is missing after '='", (2, 18, 2, 19))


def test_power_spans():
    e = expr("2 ** (k + 1)")
    offset = len("program p { let x = ")
    assert (e.op, span_of(e)) == ("**", (1, offset + 1, 1, offset + 13))
    assert span_of(e.right) == (1, offset + 7, 1, offset + 12)  # k + 1, inside its parentheses
    assert unparse(expr("2 ** 3 ** k")) == "2 ** 3 ** k" and unparse(expr("(2 ** 3) ** k")) == "(2 ** 3) ** k"
    assert unparse(expr("(-2) ** k")) == "(-2) ** k" and unparse(expr("2 ** -k")) == "2 ** -k"


LOOP_NEST = "program p {\n  matrix s[1, 1] = zeros\n  for t in 0 .. 9 {\n    %s\n  }\n}\n"


@pytest.mark.parametrize("statement, needle, nth, message", [
    ("while s.mt > 0 { potrf(s[0, 0]) }", "while", 0, "there is no 'while' loop"),
    ("while (t < 3) { potrf(s[0, 0]) }", "while", 0, "there is no 'while' loop"),
    ("if s[0, 0] > 0.001 { potrf(s[0, 0]) }", "s[", 0, "s[...] is a tile, not a value"),
    ("let nrm = s[0, 0]", "s[", 0, "s[...] is a tile, not a value"),
    ("for i in 0 .. s [0, 0] { potrf(s[0, 0]) }", "s [", 0, "s[...] is a tile, not a value"),
    ("potrf(s[0, 0]) priority s[0, 0]", "s[", 1, "s[...] is a tile, not a value")])
def test_a_loop_nest_that_would_read_matrix_values_is_told_why_it_cannot(statement, needle, nth, message):
    """A while loop or a tile used as a value: the task graph is fixed by the parameters before
    the run, and a convergence loop goes in Python around prog.run."""
    text = LOOP_NEST % statement
    with pytest.raises(SourceError) as raised:
        parse_text(text)
    d = raised.value.diagnostic
    assert (d.code, d.message, span_of(d)) == ("E100", message, where(text, 4, needle, nth))
    assert d.notes == ("a loop nest's control (its loop bounds, conditions and lets) cannot depend on matrix "
                       "values: the task graph is fixed by the parameters before the run",)
    assert "call prog.run in a Python loop" in d.hint


def test_brackets_after_a_name_elsewhere_keep_the_plain_syntax_error():
    with pytest.raises(SourceError) as raised:
        parse_text("kernel f(inout A[0]) program p { matrix A[n, n] = random spd potrf(A[0, 0]) }")
    d = raised.value.diagnostic
    assert (d.message, d.notes) == ("unexpected '['", ("expected ')' or ','",))


def test_a_misspelt_declaration_word_gets_a_hint():
    with pytest.raises(SourceError) as raised:
        parse_text("program p {\n  matirx A[n, n] = random spd\n}\n")
    assert raised.value.diagnostic.hint == "did you mean 'matrix'?"


def syntax_error(text: str):
    with pytest.raises(SourceError) as raised:
        parse_text(text)
    d = raised.value.diagnostic
    assert d.code == "E100"
    return d


#: every keyword of the language but 'not', which an expression may begin with
KEYWORDS = ("program", "kernel", "use", "in", "out", "inout", "int", "float", "char", "flops", "tiling", "param",
            "require", "matrix", "workspace", "like", "rows", "check", "random", "load", "for", "step", "if", "else",
            "let", "priority", "release", "and", "or")


@pytest.mark.parametrize("keyword", KEYWORDS)
@pytest.mark.parametrize("clause, at", [("  param q =", (2, 11)), ("  require", (2, 3)),
                                        ("  matrix A[n, n] = random spd\n  let x = 1 +", (3, 13))])
def test_a_keyword_taken_for_a_missing_expression_is_said_at_the_clause(keyword, clause, at):
    """Wherever the error falls after it, and where the file parses ('param q = tiling' left the tiling's
    settings for a call, the declarations after it among statements; 'check' was an unknown name)."""
    for following in (f"  {keyword}\n", f"  {keyword} uniform(nb = 4)\n  matrix B[n, n] = zeros\n"):
        d = syntax_error(f"program p {{\n{clause}\n{following}  potrf(B[0, 0])\n}}\n")
        line, column = at
        assert (d.message.split(" '")[0], d.span.line, d.span.column) == ("an expression is missing after", line,
                                                                             column)
        assert d.notes == (f"the '{keyword}' at {line + 1}:3 was read as the expression: a keyword can also be "
                           f"a name",)


def test_a_keyword_a_program_declares_as_a_name_may_begin_a_line_in_an_expression():
    parse_text("program p {\n  param check = 2\n  matrix A[n, n] = random spd\n  let x =\n    check + 1\n"
               "  potrf(A[x - 3, 0])\n}\n")


IN_A_LOOP = "program p {\n  matrix A[n, n] = random spd\n  for k in 0 .. A.nt {\n    %s\n  }\n}\n"


@pytest.mark.parametrize("char, hint", [
    ("\u2013", "this is U+2013 EN DASH: type '-' instead"),
    ("\u2014", "this is U+2014 EM DASH: type '-' instead"),
    ("\u2212", "this is U+2212 MINUS SIGN: type '-' instead"),
    ("\u0391", "this is U+0391 GREEK CAPITAL LETTER ALPHA: type the Latin letter 'A' instead"),
    ("\u043e", "this is U+043E CYRILLIC SMALL LETTER O: type the Latin letter 'o' instead"),
    ("\uff0c", "this is U+FF0C FULLWIDTH COMMA: type ',' instead"),
    ("\u00a0", "this is U+00A0 NO-BREAK SPACE: type a plain space instead"),
    ("\u2009", "this is U+2009 THIN SPACE: type a plain space instead"),
    ("\u3000", "this is U+3000 IDEOGRAPHIC SPACE: type a plain space instead"),
    ("\u2028", "this is U+2028 LINE SEPARATOR: type a plain newline instead"),
    ("\u2029", "this is U+2029 PARAGRAPH SEPARATOR: type a plain newline instead"),
    ("\u200b", "this is U+200B ZERO WIDTH SPACE, which does not show: delete it"),
    ("\ufeff", "this is U+FEFF ZERO WIDTH NO-BREAK SPACE, which does not show: delete it"),
    ("\x0b", "this is U+000B (a control character), which does not show: delete it"),
    ("\u201e", "this is U+201E DOUBLE LOW-9 QUOTATION MARK: type '\"' instead"),
    ("\u2019", "this is U+2019 RIGHT SINGLE QUOTATION MARK: type '\"' instead"),
    ("\u00ab", "this is U+00AB LEFT-POINTING DOUBLE ANGLE QUOTATION MARK: type '\"' instead"),
    ("\u00d7", "this is U+00D7 MULTIPLICATION SIGN: type '*' instead"),
    ("\u2264", "this is U+2264 LESS-THAN OR EQUAL TO: type '<=' instead"),
    ("\u00e9", "this is U+00E9 LATIN SMALL LETTER E WITH ACUTE: outside strings and comments a program is written "
                "in ASCII"),
    ("\u00b2", "this is U+00B2 SUPERSCRIPT TWO: outside strings and comments a program is written in ASCII"),
    ("$", None)])
def test_a_character_outside_the_language_is_named_with_what_to_type(char, hint):
    """Look-alikes of ASCII (other dashes and scripts, full-width forms, spaces and line breaks that
    are not ASCII's, curly quotes) say which character they are; ² is a power, not a 2."""
    text = IN_A_LOOP % f"potrf(A[k, {char}k])"
    d = syntax_error(text)
    assert (d.message, d.hint) == (f"unexpected character {char!r}", hint)
    assert (d.span.line, d.span.column) == where(text, 4, char)[:2]


def test_look_alikes_inside_strings_and_comments_are_fine():
    parse_text('program p {\n  # a “quoted” − comment\n  matrix A[n, n] = load "données−1.npy"\n}\n')


@pytest.mark.parametrize("name, hint", [
    ("\u03b1", "this is U+03B1 GREEK SMALL LETTER ALPHA: names are ASCII, write 'alpha' instead"),
    ("\u03bb2", "this is U+03BB GREEK SMALL LETTER LAMDA: names are ASCII, write 'lambda2' instead"),
    ("\u0394", "this is U+0394 GREEK CAPITAL LETTER DELTA: names are ASCII, write 'Delta' instead"),
    ("m\u03b1x", "this is U+03B1 GREEK SMALL LETTER ALPHA: type the Latin letter 'a' instead"),
    ("\u0391", "this is U+0391 GREEK CAPITAL LETTER ALPHA: type the Latin letter 'A' instead"),
    ("\u03b1\u03b2", "this is U+03B1 GREEK SMALL LETTER ALPHA: type the Latin letter 'a' instead")])
def test_a_greek_letter_that_is_a_name_of_its_own_is_spelt_out(name, hint):
    """α or λ2 stands for a name (alpha, lambda2); in an ASCII word, in a word of other letters (typed
    with a Greek keyboard layout), or a capital drawn as a Latin one, it is a look-alike."""
    d = syntax_error(IN_A_LOOP % f"let {name} = 1")
    assert d.hint == hint


@pytest.mark.parametrize("statement, hint", [
    ("if k > 0 { x = 1 }", "there is no assignment"),  # the '=' is in the if's block: no comparison
    ("if k == 0 IN k { potrf(A[k, k]) }", None),  # 'in' does not parse there either: no "lower case" hint
    ("potrf[A[k, k]]", None),  # no '=' after the brackets: no assignment
    ("gemm(A[k, k], A[k, k].m, A[k, k])", None),  # an attribute, not a transpose
    ("if k == 0 { potrf(A[k, k]) } else potrf(A[k, k])", None)])
def test_another_languages_form_is_hinted_only_where_it_is_what_failed(statement, hint):
    d = syntax_error(IN_A_LOOP % statement)
    assert d.hint == hint if hint is None else d.hint.startswith(hint)


@pytest.mark.parametrize("statement, needle, message, hint", [
    ("potrf(A[k, k], 'L')", "'", "unexpected character \"'\"", 'strings are double-quoted: write "L"'),
    ("potrf(A[k, k], 'L)", "'", "unexpected character \"'\"", "strings are double-quoted"),
    ('potrf(A[k, k], "L)', '"', "string not closed on this line",
     "end it with '\"' on the same line: a string cannot span lines"),
    ("potrf(A[k, k], alpha = .25)", ".", "unexpected '.'", "write 0.25: a number has digits on both sides"),
    ("potrf(A[k, k], alpha = -.5)", ".", "unexpected '.'", "write 0.5: a number has digits on both sides"),
    ("potrf(A[k, k], alpha = 2.)", ".", "unexpected '.'", "write 2.0: a number has digits on both sides"),
    ("// the diagonal", "//", "unexpected '//'", "comments start with '#'"),
    ("potrf(A[k, k]) // the diagonal", "//", "unexpected '//'", "comments start with '#'"),
    ("else { potrf(A[k, k]) }", "else", "'else' must follow the closing brace of an 'if' block",
     "write if CONDITION { ... } else { ... }"),
    ("let x = k else { potrf(A[x, k]) }", "else", "'else' must follow the closing brace of an 'if' block",
     "write if CONDITION { ... } else { ... }"),
    ("for j in 0 .. k { } else { potrf(A[k, k]) }", "else", "'else' must follow the closing brace of an 'if' block",
     "write if CONDITION { ... } else { ... }"),
    ("for j in 0 .. k stpe 2 { potrf(A[k, k]) }", "stpe", "unexpected 'stpe'", "did you mean 'step'?"),
    ("let x = 1\n    param q = 2", "param", "unexpected 'param'", "declarations (tiling, param, require, matrix,"),
    ("let x = 1\n    in matrix B[n, n] = zeros", "in", "unexpected 'in'", "declarations (tiling, param, require,"),
    ("potrf(A[k, k])\n    out matrix B[n, n] = zeros", "matrix", "unexpected 'matrix'", "declarations (tiling,"),
    ("release A[k, k] priority 3", "priority", "a release takes no priority: it runs no task", "drop the priority"),
    ("potrf(A[k, k]) priority 2 priority k", "priority k", "a call takes one priority",
     "keep one 'priority EXPRESSION'")])
def test_the_usual_slips_are_pointed_at_with_a_hint(statement, needle, message, hint):
    text = IN_A_LOOP % statement
    d = syntax_error(text)
    line = next(number for number, row in enumerate(text.split("\n"), 1) if needle in row and number >= 4)
    assert (d.message, d.span.line, d.span.column) == (message, line, where(text, line, needle)[1])
    assert d.hint == hint if hint is None else d.hint.startswith(hint)


def test_an_else_without_braces_after_an_if_is_not_a_stray_else():
    text = IN_A_LOOP % "if k == 0 { potrf(A[k, k]) } else potrf(A[k, k])"
    d = syntax_error(text)
    assert (d.message, d.notes, d.hint) == ("unexpected 'potrf'", ("expected 'if' or '{'",), None)
    assert (d.span.line, d.span.column) == where(text, 4, "potrf", 1)[:2]


@pytest.mark.parametrize("text", ["program p {\n  matrix A[n, n] = random spd\n  let h = A.nt // 2 potrf(A[h, h])\n}\n",
                                  "program p {\n  param h = 4 // 2\n  matrix A[n, n] = random spd potrf(A[h, h])\n}\n"])
def test_integer_division_is_not_taken_for_a_comment(text):
    parse_text(text)


@pytest.mark.parametrize("word", ["program", "kernel", "use", "tiling", "param", "require", "matrix", "workspace",
                                  "check", "for", "if", "else", "let", "release", "priority", "in", "step"])
def test_a_word_is_never_suggested_for_itself(word):
    """A keyword in the wrong place is spelt right: "did you mean 'else'?" for else helps no one."""
    for statement in (f"{word} x y", f"{word} {{ }}", f"potrf(A[k, k]) {word} {word}"):
        try:
            parse_text(IN_A_LOOP % statement)
        except SourceError as error:
            assert error.diagnostic.hint != f"did you mean '{word}'?", statement


@pytest.mark.parametrize("text, hint", [("progam p { }", "did you mean 'program'?"),
                                        ("Program p { }", "did you mean 'program'?"),
                                        ("kernal f(inout A) program p { }", "did you mean 'kernel'?")])
def test_a_misspelt_word_where_a_keyword_is_expected_gets_a_hint(text, hint):
    d = syntax_error(text)
    assert (d.span.line, d.span.column, d.hint) == (1, 1, hint)


@pytest.mark.parametrize("text, column, hint", [
    ("program p { matrix A[n, n] = random spd fro k in 0 .. A.nt { potrf(A[k, k]) } }", 41, "did you mean 'for'?"),
    ("program p { matrix A[n, n] = zeros lte x = 1 potrf(A[x, x]) }", 36, "did you mean 'let'?"),
    ("program p { param q = n matrx A[n, n] = zeros potrf(A[q, q]) }", 25, "did you mean 'matrix'?"),
    ("program p { matrix A[n, n] = zeros let x = 1 fro k in 0 .. x { potrf(A[k, k]) } }", 46, "did you mean 'for'?"),
    ("program p { matrix A[n, n] = zeros release A[0, 0] fro k in 0 .. 1 { potrf(A[k, k]) } }", 52,
     "did you mean 'for'?"),
    ("kernel fro k(inout A) program p { }", 12, None),  # a kernel's, a check's, a tiling's name: no keyword
    ("program p { matrix A[n, n] = zeros check fro k(A) potrf(A[0, 0]) }", 46, None),
    ("program p { tiling fro k matrix A[n, n] = zeros potrf(A[0, 0]) }", 26, None)])
def test_a_misspelt_keyword_after_a_declaration_or_statement_on_one_line_gets_a_hint(text, column, hint):
    """Where the parser reads a word as a called kernel's name a statement begins: after a declaration
    that ends in a word (``= random spd``), a let, a release, as after a call or a brace."""
    d = syntax_error(text)
    assert (d.span.line, d.span.column, d.hint) == (1, column, hint)


# ---------------------------------------------------------------- line endings
def test_crlf_positions_match_lf():
    lf = FULL
    crlf = FULL.replace("\n", "\r\n")
    a, b = parse_text(lf), parse_text(crlf)
    assert a.programs[0].body[0].body[1].span == b.programs[0].body[0].body[1].span
    assert span_of(b.programs[0].body[0].body[2]) == where(FULL, 15, "release A[k, k]")
    assert a == b


def test_lone_cr_and_bom():
    text = "\ufeffprogram p {\r  let x = 1\r  let y = 2\r}"
    body = parse_text(text).programs[0].body
    assert span_of(body[1]) == (3, 3, 3, 12)
    assert span_of(parse_text(text).programs[0].name) == (1, 9, 1, 10)


def test_string_escapes_are_decoded():
    file = parse_text('program p { matrix A[n, n] = load "a\\"b\\\\c.npy" }')
    assert file.programs[0].matrices[0].init.path == 'a"b\\c.npy'


def test_spans_carry_the_path():
    file = parse_text("program p { let x = 1 }", path="dir/x.tile")
    assert file.path == "dir/x.tile"
    assert file.programs[0].body[0].span.path == "dir/x.tile"


@pytest.mark.parametrize("literal, reason", [('"\\x"', "truncated \\xXX escape"),
                                             ('"\\N{NO SUCH NAME}"', "unknown Unicode character name"),
                                             ('"\\e"', "invalid escape sequence '\\e'")])
def test_a_bad_escape_in_a_string_says_what_is_wrong_with_it(literal, reason):
    """In the language's words: Python's decoder would speak of itself ("(unicode error) 'unicodeescape'
    codec can't decode bytes in position 0-1")."""
    d = syntax_error(IN_A_LOOP % f"potrf(A[k, k], {literal})")
    assert (d.message, d.span.line, d.span.column) == (f"invalid string literal: {reason}", 4, 20)
    assert d.hint == "write a backslash as \\\\"


def test_the_parser_tables_are_kept_in_the_users_cache_and_a_bad_copy_is_rebuilt(tmp_path, monkeypatch):
    from tiledsl.compiler import parser

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    text = "program p {\n  matrix A[n, n] = zeros\n  potrf(A[0, 0])\n}\n"
    expected = parser._lark().parse(text)
    parser._lark.__wrapped__()
    (tables,) = (tmp_path / "tiledsl" / "grammar").glob("tile-*.lark")
    for damaged in (None, b"", tables.read_bytes()[:500], b"not a pickle\n"):
        if damaged is not None:
            tables.write_bytes(damaged)
        tree = parser._lark.__wrapped__().parse(text)  # from the tables, or rebuilt
        assert tree == expected and tree.children[-1].meta.line == expected.children[-1].meta.line == 1
        assert tables.stat().st_size > 10_000  # written again whole


def test_saved_tables_are_read_by_the_next_process_without_building_anew(tmp_path, monkeypatch):
    """Lark's own cache keyed its tables by the cache file's name, so tables written beside their
    place and moved there were never read: every command built them again (a fifth of a second)."""
    import lark

    from tiledsl.compiler import parser

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    built = parser._lark.__wrapped__()
    (tables,) = (tmp_path / "tiledsl" / "grammar").glob("tile-*.lark")
    saved = tables.read_bytes()

    def no_build(*args, **kwargs):
        raise AssertionError("the tables were built again")

    monkeypatch.setattr(lark.Lark, "__init__", no_build)
    text = "program p {\n  matrix A[n, n] = zeros\n  potrf(A[0, 0])\n}\n"
    assert parser._lark.__wrapped__().parse(text) == built.parse(text)
    assert tables.read_bytes() == saved


def test_tables_that_could_not_be_written_whole_are_never_published(tmp_path, monkeypatch):
    """A full disk left a truncated table file, with a digest file half written beside it."""
    import errno

    from tiledsl.compiler import parser

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    built = parser._lark.__wrapped__()
    folder = tmp_path / "tiledsl" / "grammar"
    for left in folder.iterdir():
        left.unlink()
    write_bytes = Path.write_bytes

    def disk_full(path, data):
        write_bytes(path, data[:28672])
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(Path, "write_bytes", disk_full)
    parser._publish_tables(built, Path(parser._tables_path(built.source_grammar)))
    assert list(folder.iterdir()) == []
    monkeypatch.setattr(Path, "write_bytes", write_bytes)
    parser._publish_tables(built, Path(parser._tables_path(built.source_grammar)))
    assert sorted(p.suffix for p in folder.iterdir()) == [".lark", ".sha256"]


def test_a_cache_that_cannot_be_made_only_costs_the_tables_build(tmp_path, monkeypatch):
    from tiledsl.compiler import parser

    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))
    assert parser._lark.__wrapped__().parse("program p {\n}\n") == parser._lark().parse("program p {\n}\n")


@pytest.mark.timeout(120)
def test_a_damaged_grammar_cache_is_built_anew(tmp_path, monkeypatch):
    """Lark's hash covers the grammar, not its tables: `[A-Za-z_]` edited to `[B-Za-z_]` in them made every
    later `check` say "unexpected character 'A'", and a fifo there blocked it. (Each load here is a new
    process's: the parser is built from the cache, not the one this process holds.)"""
    import os

    from tiledsl.compiler import parser

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    source = (Path(__file__).resolve().parents[2] / "programs" / "cholesky.tile").read_text()
    expected = parser._lark.__wrapped__().parse(source)  # builds the tables and caches them
    (tables,) = (tmp_path / "tiledsl" / "grammar").glob("tile-*.lark")
    whole = tables.read_bytes()
    assert b"[A-Za-z_]" in whole
    tables.write_bytes(whole.replace(b"[A-Za-z_]", b"[B-Za-z_]", 1))
    for _ in range(2):  # and the cache written anew serves the next one
        assert parser._lark.__wrapped__().parse(source) == expected
    assert b"[B-Za-z_]" not in tables.read_bytes()
    tables.unlink()
    os.mkfifo(tables)
    assert parser._lark.__wrapped__().parse(source) == expected
    tables.unlink()  # a fifo, or bytes that are no text, where the tables' digest goes: built anew too
    for damage in (os.mkfifo, lambda path: path.write_bytes(b"\xff\xfe\x00")):
        parser._lark.__wrapped__()
        (seal,) = (tmp_path / "tiledsl" / "grammar").glob("tile-*.sha256")
        seal.unlink()
        damage(seal)
        assert parser._lark.__wrapped__().parse(source) == expected


def test_a_note_quoting_a_long_line_clips_it_around_the_bracket():
    """'the ( at 1:646 is still open here: ...' quoted the whole 650-character line."""
    calls = " ".join(["potrf(A[0, 0])"] * 40)
    d = syntax_error(f"program p {{ matrix A[n, n] = random spd {calls} potrf(A[0, 0]\n}}\n")
    (still_open,) = [note for note in d.notes if "still open" in note]
    assert still_open == "the '(' at 1:646 is still open here: …" + f"{calls} potrf(A[0, 0]"[-80:]
    d = syntax_error(f"program p {{ matrix A[n, n] = random spd {calls}\n")
    (never_closed,) = [note for note in d.notes if "never closed" in note]
    line = f"program p {{ matrix A[n, n] = random spd {calls}"
    assert never_closed == f"the '{{' at 1:11 is never closed: {line[:80]}…"
