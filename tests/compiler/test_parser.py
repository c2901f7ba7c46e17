"""The parser: every construct of the language becomes the right AST node, with its span.

Expected positions are computed from the source text itself (where a piece of text
sits on its line), so each assertion says "this node covers exactly that text".
"""
import pytest

from parse_helpers import expr, parse_text, span_of, where
from tiledsl.compiler import nodes as n
from tiledsl.compiler.expressions import unparse
from tiledsl.compiler.source import SourceError, decode


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


@pytest.mark.parametrize("text, shown", [
    ('side == "L" and rows == n or side == "R" and cols == n',
     '(side == "L" and rows == n) or (side == "R" and cols == n)'),
    ("a or b and c", "a or (b and c)"), ("(a or b) and c", "(a or b) and c"),
    ("not (a and b) or c", "not (a and b) or c"),
    ("(1 + 2) * (3 - k)", "(1 + 2) * (3 - k)"), ("((k + 1))", "k + 1")])
def test_unparse_keeps_the_parentheses_a_reader_needs(text, shown):
    """Tester v: a requirement's '(a and b) or (c and d)' was echoed without its parentheses (right by
    precedence, hard to read): an 'and' inside an 'or' keeps them, as linters ask of Python."""
    assert unparse(expr(text)) == shown


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


def test_power_spans():
    e = expr("2 ** (k + 1)")
    offset = len("program p { let x = ")
    assert (e.op, span_of(e)) == ("**", (1, offset + 1, 1, offset + 13))
    assert span_of(e.right) == (1, offset + 7, 1, offset + 12)  # k + 1, inside its parentheses
    assert unparse(expr("2 ** 3 ** k")) == "2 ** 3 ** k" and unparse(expr("(2 ** 3) ** k")) == "(2 ** 3) ** k"
    assert unparse(expr("(-2) ** k")) == "(-2) ** k" and unparse(expr("2 ** -k")) == "2 ** -k"
    assert unparse(expr("- - 3.0")) == "- -3.0" and unparse(expr("-(-k)")) == "- -k"  # not "--3.0" (tester p55)


#: every keyword of the language but 'not', which an expression may begin with


# ---------------------------------------------------------------- line endings
def test_crlf_positions_match_lf():
    lf = FULL
    crlf = FULL.replace("\n", "\r\n")
    a, b = parse_text(lf), parse_text(crlf)
    assert a.programs[0].body[0].body[1].span == b.programs[0].body[0].body[1].span
    assert span_of(b.programs[0].body[0].body[2]) == where(FULL, 15, "release A[k, k]")
    assert a == b


@pytest.mark.parametrize("encoding, name", [("utf-16", "UTF-16"), ("utf-16-be", "UTF-16"), ("utf-32", "UTF-32")])
def test_a_file_in_another_unicode_encoding_is_named_by_its_mark(encoding, name):
    """Tester x: PowerShell's `>` saves UTF-16; its E001 was 'byte 0xff cannot be decoded', with its first line
    shown as NULs every other character."""
    data = ("\ufeff" if encoding.endswith("-be") else "").encode(encoding) + "program p {\n}\n".encode(encoding)
    with pytest.raises(SourceError) as raised:
        decode("t.tile", data)
    d = raised.value.diagnostic
    assert (d.code, d.span.line, d.message) == ("E001", 0, f"file is {name} text (it begins with a {name} "
                                                           f"byte-order mark), not UTF-8")
    assert d.hint.startswith("save the program as UTF-8")


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


