"""Programs that must not compile, one file per diagnostic kind, and how diagnostics render.

Each ``compile_fail/*.tile`` file states what it expects in header comments:

    # expect: LINE:COL CODE message prefix     (one per diagnostic, in any order)
    # expect-note: text                        (a note of the diagnostic above starts with it)
    # expect-hint: text                        (the hint of the diagnostic above starts with it)
    # xfail: reason                            (a known compiler bug: the test must fail)

The check is exact for errors: every error ``check_path`` reports is expected, and every
expectation is met. Warnings must be reported when expected and are otherwise ignored.
"""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tiledsl.compiler import check_path, check_source
from tiledsl.compiler.diagnostics import CODES, Diagnostic, _columns, did_you_mean, render
from tiledsl.compiler.parser import MAX_FILE_TOKENS, MAX_LINE_TOKENS
from tiledsl.compiler.source import Span, decode

HERE = Path(__file__).resolve().parent
CASES = sorted((HERE / "compile_fail").glob("*.tile"))
EXPECT = re.compile(r"#\s*expect:\s*(\d+):(\d+)\s+([EW]\d{3})\s*(.*?)\s*$")


def expectations(path: Path):
    """[(line, column, code, message prefix, [note prefixes], [hint prefixes])], xfail reason."""
    expected, reason = [], None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if match := EXPECT.match(line):
            expected.append((int(match[1]), int(match[2]), match[3], match[4], [], []))
        elif line.startswith("# expect-note:"):
            expected[-1][4].append(line.split(":", 1)[1].strip())
        elif line.startswith("# expect-hint:"):
            expected[-1][5].append(line.split(":", 1)[1].strip())
        elif line.startswith("# xfail:"):
            reason = line.split(":", 1)[1].strip()
        elif line.startswith("# expect"):
            raise AssertionError(f"{path.name}: malformed header line {raw!r}")
    return expected, reason


def matches(d: Diagnostic, want) -> bool:
    line, column, code, prefix, notes, hints = want
    span = d.span or Span.whole("")
    return ((span.line, span.column, d.code) == (line, column, code) and d.message.startswith(prefix)
            and all(any(note.startswith(n) for note in d.notes) for n in notes)
            and all((d.hint or "").startswith(h) for h in hints))


def describe(d: Diagnostic) -> str:
    span = d.span or Span.whole("")
    return f"{span.line}:{span.column} {d.code} {d.message} notes={list(d.notes)} hint={d.hint!r}"


def params():
    for path in CASES:
        _, reason = expectations(path)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        yield pytest.param(path, id=path.stem, marks=marks)


def test_there_is_a_file_for_every_code_checked_by_files():
    stems = {p.stem.split("_")[0].upper() for p in CASES}
    wanted = {c for c in CODES if c >= "E100"} - {"E102"}  # E102 is generated below
    assert wanted <= stems, f"no compile_fail file for {sorted(wanted - stems)}"


@pytest.mark.parametrize("path", list(params()))
def test_compile_fail(path):
    expected, _ = expectations(path)
    assert expected, f"{path.name} states no '# expect:' line"
    result = check_path(path)
    remaining = list(result.diagnostics)
    missing = []
    for want in expected:
        found = next((d for d in remaining if matches(d, want)), None)
        if found is None:
            missing.append(want)
        else:
            remaining.remove(found)
    unexpected = [d for d in remaining if d.is_error]
    report = "\n".join(describe(d) for d in result.diagnostics)
    assert not missing and not unexpected, (
        f"{path.name}\nmissing: {missing}\nunexpected errors: {[describe(d) for d in unexpected]}\n"
        f"all diagnostics:\n{report}")
    codes = {w[2] for w in expected}
    assert result.ok == (not any(c.startswith("E") for c in codes))


def test_every_file_names_its_code_first():
    for path in CASES:
        expected, _ = expectations(path)
        assert path.stem.split("_")[0].upper() in {w[2] for w in expected}, path.name


# ---------------------------------------------------------------- token limits (E102)
def check_text(text: str):
    return check_source(decode("big.tile", text.encode()))


def test_e102_line_with_too_many_tokens():
    terms = MAX_LINE_TOKENS // 2 + 1  # k + k + ... : 2 tokens per term
    text = "program p {\n  let x = " + " + ".join(["k"] * terms) + "\n}\n"
    result = check_text(text)
    (d,) = result.diagnostics
    assert (d.code, d.span.line, d.span.column) == ("E102", 2, 1)
    assert d.message.startswith(f"line 2 holds {2 * terms + 2} tokens (at most {MAX_LINE_TOKENS})")
    assert d.hint and "let" in d.hint


def test_e102_file_with_too_many_tokens():
    per_line = MAX_LINE_TOKENS - 10
    line = "  let x = " + " + ".join(["1"] * (per_line // 2 - 2))
    lines = MAX_FILE_TOKENS // per_line + 2
    text = "program p {\n" + "\n".join([line] * lines) + "\n}\n"
    result = check_text(text)
    (d,) = result.diagnostics
    assert d.code == "E102"
    assert d.message == f"the program is longer than {MAX_FILE_TOKENS} tokens"
    assert 2 <= d.span.line <= lines + 1


def test_comments_do_not_count_as_tokens():
    text = "program p {\n  # " + "x " * (MAX_LINE_TOKENS + 5) + "\n}\n"
    assert check_text(text).diagnostics == []


def test_e102_just_below_the_line_limit_parses():
    terms = (MAX_LINE_TOKENS - 10) // 2
    text = "program p {\n  let x = " + " + ".join(["1"] * terms) + "\n  potrf(A[0, 0]) priority x\n" \
           "  matrix A[n, n] = zeros\n}\n"
    codes = {d.code for d in check_text(text).diagnostics}
    assert "E102" not in codes


# ---------------------------------------------------------------- suggestions
@pytest.mark.parametrize("word, candidates, suggestion", [
    ("potrff", ["potrf", "getrf"], "potrf"),
    ("POTRF", ["potrf", "getrf"], "potrf"),  # differs in case only: whatever the spelling distance
    ("POTRFF", ["potrf", "getrf"], "potrf"),
    ("x", ["x", "X"], "X"),
    ("else", ["else"], None),  # never the word itself
    ("gemm", ["potrf"], None)])
def test_did_you_mean(word, candidates, suggestion):
    assert did_you_mean(word, candidates) == suggestion


# ---------------------------------------------------------------- rendering
def test_rendered_report_has_header_source_line_and_caret(tmp_path):
    path = tmp_path / "bad.tile"
    path.write_text("program p {\n  matrix A[n, n] = random spd\n"
                    "  for k in 0 .. A.nt { potrf(A[k, kk]) }\n}\n")
    result = check_path(path)
    report = result.report()
    lines = report.split("\n")
    assert lines[0] == f"{path}:3:35: error[E200]: unknown name 'kk'"
    source_line = "  for k in 0 .. A.nt { potrf(A[k, kk]) }"
    assert lines[1].strip() == "|"
    gutter, text = lines[2].split(" | ", 1)
    assert gutter.strip() == "3" and text == source_line
    caret_gutter, carets = lines[3].split(" | ", 1)
    assert caret_gutter.strip() == "" and len(caret_gutter) == len(gutter)
    assert carets == " " * 34 + "^^"
    assert source_line[carets.index("^"):carets.index("^") + 2] == "kk"
    assert lines[4] == "  = note: did you mean 'k'?"


def test_rendered_warning_and_hint(tmp_path):
    path = tmp_path / "w.tile"
    path.write_text("program p {\n  param unused = 1\n  matrix A[n, n] = random spd\n"
                    "  let x = A\n  potrf(A[x, 0])\n}\n")
    text = check_path(path).report()
    assert f"{path}:2:9: warning[W300]: param 'unused' is declared but never used" in text
    assert f"{path}:4:11: error[E205]: 'A' is a matrix, not an integer" in text
    assert "  = hint: use A.mt or A.nt for its number of tile rows or columns" in text


@pytest.mark.timeout(30)
def test_diagnostics_come_in_the_files_order_whichever_pass_finds_them(tmp_path):
    """The kernel module's E213 (checked last) and unused names (W300, listed by kind) in line order."""
    (tmp_path / "k.py").write_text("def scale(A, B):\n    pass\n")
    path = tmp_path / "o.tile"
    path.write_text("use \"k.py\"\nkernel scale(inout A)\nprogram p {\n  param unused = 1\n"
                    "  matrix A[n, n] = random spd\n  matrix B[n, n] = zeros\n"
                    "  for k in 0 .. A.nt { scale(A[k, k]) }\n  for i in 0 .. kk { }\n}\n")
    result = check_path(path)
    assert [(d.code, d.span.line) for d in result.diagnostics] == [("E213", 2), ("W300", 4), ("W300", 6),
                                                                   ("E200", 8)]


def test_rendered_whole_file_problem_has_no_excerpt(tmp_path):
    path = tmp_path / "empty.tile"
    path.write_text("")
    text = check_path(path).report()
    assert text.split("\n")[0] == f"{path}: error[E209]: no program in this file"
    assert " | " not in text


def test_rendered_caret_on_a_long_line_is_clipped_but_aligned():
    source = decode("long.tile", ("program p { let x = " + "1 + " * 100 + "zz }").encode())
    (d,) = [d for d in check_source(source).diagnostics if d.is_error]
    lines = render(d, source).split("\n")
    assert d.code == "E200"
    shown, carets = lines[2].split(" | ", 1)[1], lines[3].split(" | ", 1)[1]
    assert len(shown) <= 170
    at = carets.index("^")
    assert shown[at:at + 2] == "zz"
    assert shown.startswith("…") and not shown.endswith("…")  # cut before the span only


def test_a_long_line_cut_on_both_sides_of_its_span_marks_both_cuts():
    calls = " ".join(["potrf(A[0, 0])"] * 8 + ["potrf(A[kk, 0])"] + ["potrf(A[0, 0])"] * 15)
    source = decode("long.tile", f"program p {{ matrix A[n, n] = random spd {calls} }}".encode())
    (d,) = [d for d in check_source(source).diagnostics if d.is_error]
    shown = render(d, source).split("\n")[2].split(" | ", 1)[1]
    assert shown.startswith("…") and shown.endswith("…") and len(shown) == 162


def test_rendered_carets_count_wide_characters_as_two_columns():
    source = decode("wide.tile", 'program p {\n  matrix A[n, n] = random spd\n  let x = "日本" potrf(A[0, zz])\n}\n'.encode())
    (unknown,) = [d for d in check_source(source).diagnostics if d.code == "E200"]
    shown, carets = (line.split(" | ", 1)[1] for line in render(unknown, source).split("\n")[2:4])
    assert carets == " " * (shown.index("zz") + 2) + "^^"  # 日 and 本 take two columns each
    (char,) = [d for d in check_source(source).diagnostics if d.code == "E205"]
    carets = render(char, source).split("\n")[3].split(" | ", 1)[1]
    assert carets == " " * shown.index('"') + "^" * 6


@pytest.mark.parametrize("length, unknown, near", [(100_000, "x" * 40 + "…" + "x" * 39 + "y",
                                                    "x" * 40 + "…" + "x" * 40), (80, "x" * 79 + "y", "x" * 79)])
def test_a_long_name_is_shortened_in_the_message_and_notes_as_its_line_is(length, unknown, near):
    """A name of 100,000 characters was printed whole in the message and again in the note (300 KB
    of report) while its line was clipped; a name of 80 characters or fewer is printed whole."""
    name = "x" * (length - 1)
    source = decode("long.tile", f"program p {{ matrix A[n, n] = random spd let {name} = 0 potrf(A[{name}y, 0]) }}"
                    .encode())
    (d,) = [d for d in check_source(source).diagnostics if d.is_error]
    lines = render(d, source).split("\n")
    assert lines[0].endswith(f"error[E200]: unknown name '{unknown}'")
    assert lines[4:] == [f"  = note: did you mean '{near}'?"]


@pytest.mark.parametrize("data, line, column", [
    (b"program p {\r  # caf\xe9\r}\r", 2, 8),  # CR line ends, as the parser reads them
    (b"\xef\xbb\xbf# caf\xe9\nprogram p { }\n", 1, 6),  # a byte-order mark is not a column
    ("program p {\n  # 日本".encode() + b"\xe9\n}\n", 2, 7),  # characters, not bytes
])
def test_a_byte_that_is_not_utf8_is_placed_in_the_text_as_read_and_shown(tmp_path, data, line, column):
    """E001's position counted bytes before the byte-order mark was dropped and CR ends read."""
    path = tmp_path / "t.tile"
    path.write_bytes(data)
    result = check_path(path)
    (d,) = result.diagnostics
    assert (d.code, d.span.line, d.span.column) == ("E001", line, column)
    shown, carets = (row.split(" | ", 1)[1] for row in result.report().split("\n")[2:4])
    assert shown.endswith("\ufffd") and carets == " " * _columns(shown[:column - 1]) + "^"


def test_rendered_carets_skip_combining_marks_and_show_invisible_and_control_characters():
    # U+2028 (a line separator, which a terminal may show as a line break) was printed raw
    text = 'program p {\n  require n > 0 "e\u0301\u200b\x1b[2J\u2028" matrix A[n, n] = random spdd\n}\n'
    source = decode("c.tile", text.encode())
    (d,) = [d for d in check_source(source).diagnostics if d.code == "E209"]
    shown, carets = (line.split(" | ", 1)[1] for line in render(d, source).split("\n")[2:4])
    assert '"e\u0301\\u200b\\x1b[2J\\u2028"' in shown  # no escape sequence reaches the terminal
    assert carets == " " * (shown.index("spdd") - 1) + "^^^^"  # the accent takes no column


def test_a_file_name_is_printed_with_its_control_characters_and_odd_bytes_escaped():
    source = decode("a\x1b[7mb\nc\udce9.tile", b"program p { matrix A[n, n] = random spdd }")
    (d,) = [d for d in check_source(source).diagnostics if d.is_error]
    assert render(d, source).split("\n")[0].startswith("a\\x1b[7mb\\nc\\xe9.tile:1:37: error[E209]")
    assert check_path("").report() == "error[E000]: the file name is empty: give the path of a .tile file"


def test_a_note_naming_a_file_shows_its_control_characters_escaped(tmp_path):
    """'looked for k<NUL>.py' reached the terminal as a raw NUL (the headline escaped it; tester t67)."""
    (tmp_path / "t.tile").write_text('use "k\\0\u200b.py"\nkernel s(inout A)\nprogram p { matrix A[n, n] = random spd '
                                     's(A[0, 0]) }\n')
    result = check_path(tmp_path / "t.tile")
    (d,) = [d for d in result.diagnostics if d.code == "E209"]
    note = next(line for line in render(d, result.source).split("\n") if "looked for" in line)
    assert note.endswith("k\\x00\\u200b.py") and "\0" not in note


def test_rendered_multiline_span_underlines_to_end_of_line():
    source = decode("m.tile", b"program p {\n  matrix A[n, n] = random spd\n  gemm(A[0, 0],\n  A[1, 0])\n}\n")
    (d,) = [d for d in check_source(source).diagnostics if d.code == "E202"]  # a missing argument: the call
    lines = render(d, source).split("\n")
    assert lines[2].endswith("  gemm(A[0, 0],")
    assert lines[3].endswith("^" * len("gemm(A[0, 0],"))


def test_an_argument_too_many_is_pointed_at_even_on_a_later_line():
    source = decode("m.tile", b"program p {\n  matrix A[n, n] = random spd\n  getrf_nopiv(A[0, 0],\n  A[1, 0])\n}\n")
    (d,) = [d for d in check_source(source).diagnostics if d.code == "E202"]
    assert (d.span.line, d.span.column) == (4, 3) and d.message == "getrf_nopiv takes 1 argument(s), got 2"


# ---------------------------------------------------------------- the kernel module (E209, E212, E213)
KERNEL_PROGRAM = ('use "k.py"\nkernel scale(in A, inout B)\nprogram p {\n  matrix A[n, n] = random spd\n'
                  '  scale(A[1, 0], A[1, 1])\n}\n')


def tiledsl_check(folder: Path, module_text: str):
    (folder / "k.py").write_text(module_text)
    (folder / "t.tile").write_text(KERNEL_PROGRAM)
    return subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "check", "t.tile"], cwd=folder,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.timeout(90)
def test_check_prints_a_wrong_kernel_arity_with_the_def_line(tmp_path):
    done = tiledsl_check(tmp_path, "import numpy\n\n\ndef scale(A, B, C):\n    C[:] = A @ B\n")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.split("\n")[:7] == [
        "t.tile:2:8: error[E213]: function 'scale' of 'k.py' cannot take the 2 argument(s) of kernel 'scale'",
        "      |", "    2 | kernel scale(in A, inout B)", "      |        ^^^^^",
        "  = note: k.py:4 defines scale(A, B, C): 3 positional argument(s)",
        "  = note: declared as scale(in A, inout B)",
        "  = hint: give the function one positional parameter per argument, in declaration order"]


@pytest.mark.timeout(90)
def test_a_kernel_name_bound_to_a_constant_is_shown_without_suggesting_another_function(tmp_path):
    done = tiledsl_check(tmp_path, "def scal(A, B):\n    B += A\n\n\nscale = 3.0\n")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.split("\n")[:6] == [
        "t.tile:2:8: error[E212]: kernel module 'k.py' defines no function 'scale'",
        "      |", "    2 | kernel scale(in A, inout B)", "      |        ^^^^^",
        "  = note: k.py:5 defines scale = 3.0",
        "  = hint: define it in k.py: def scale(A, B):"]


@pytest.mark.timeout(90)
def test_check_reads_the_kernel_module_without_running_it(tmp_path):
    marker = tmp_path / "ran"
    done = tiledsl_check(tmp_path, f"import sys\nopen({str(marker)!r}, 'w')\nsys.exit(3)\n\n\n"
                                   "def scale(A, B):\n    B += A\n")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.strip() == "checked 1 file(s): no errors"
    assert not marker.exists()


@pytest.mark.timeout(90)
def test_a_module_that_parses_but_does_not_compile_is_still_e209(tmp_path):
    done = tiledsl_check(tmp_path, "def scale(A, B):\n    B += A\n\nreturn scale\n")
    assert done.returncode == 1
    assert "t.tile:1:1: error[E209]: kernel module 'k.py' is not valid Python" in done.stdout
    assert "= note: k.py:4: SyntaxError: 'return' outside function" in done.stdout


def test_a_module_with_a_nul_byte_is_named_without_a_line_it_does_not_have(tmp_path):
    """Python says of NUL bytes a SyntaxError of no line: 'k.py:None:' was written."""
    (tmp_path / "k.py").write_bytes(b"def f(Y):\n    Y += 1\x00\n")
    (tmp_path / "t.tile").write_text('use "k.py"\nkernel f(inout Y)\nprogram t {\n  matrix Y[n, n] = random general\n'
                                     '  f(Y[0, 0])\n}\n')
    (error,) = [d for d in check_path(tmp_path / "t.tile").diagnostics if d.is_error]
    assert error.code == "E209" and all(note.startswith("k.py: ") for note in error.notes), error.notes


@pytest.mark.timeout(90)
@pytest.mark.parametrize("signature, warned", [("before, after", True), ("before, after, params", False)])
def test_a_param_only_a_user_check_can_read_is_not_unused(tmp_path, signature, warned):
    (tmp_path / "k.py").write_text(f"def mine({signature}):\n    return 0.0\n")
    (tmp_path / "t.tile").write_text('use "k.py"\nprogram p {\n  param tol = 3\n  matrix A[n, n] = random spd\n'
                                     "  check mine(A)\n  potrf(A[0, 0])\n}\n")
    result = check_path(tmp_path / "t.tile")
    assert result.ok and [d.code for d in result.diagnostics] == (["W300"] if warned else [])


@pytest.mark.timeout(30)
def test_a_missing_kernel_module_is_matched_to_the_modules_beside_it_by_name_not_by_their_suffix(tmp_path):
    """'.py', which every module beside it shares, made 'sig_app.py' a close match of 'missing_k.py'."""
    (tmp_path / "sig_app.py").write_text("")
    (tmp_path / "kernels.py").write_text("")
    hints = {}
    for name in ("missing_k.py", "kernles.py"):
        path = tmp_path / "p.tile"
        path.write_text(f'use "{name}"\nkernel scale(inout A)\nprogram p {{\n  matrix A[n, n] = random spd\n'
                        "  scale(A[0, 0])\n}\n")
        (d,) = check_path(path).diagnostics
        assert d.message == f"kernel module '{name}' not found"
        hints[name] = d.hint
    assert hints == {"missing_k.py": None, "kernles.py": "did you mean 'kernels.py'?"}


def test_a_python_file_is_said_to_be_one(tmp_path):
    """A compiled driver given to check (or load) was parsed as a program: unexpected '""'."""
    from tiledsl.compiler import compile_path

    result, driver = compile_path(HERE.parents[1] / "programs" / "cholesky.tile")
    (tmp_path / "d.py").write_text(driver)
    assert check_path(tmp_path / "d.py").report() == (
        f"{tmp_path / 'd.py'}: error[E000]: is a Python file, not a .tile program\n"
        f"  = hint: give the .tile it was compiled from (its first line names it)")


def test_an_expression_in_a_deep_loop_nest_is_as_deep_as_it_is():
    """A 270-term sum inside 20 nested loops was 'nested more than 300 levels deep': the loops counted."""
    loops = "".join(f"for i{d} in 0 .. 1 {{ " for d in range(20))
    text = ("program p {\n  matrix A[n, n] = random spd\n  " + loops + "let x = " + " + ".join(["1"] * 270)
            + " potrf(A[x - x, 0])" + " }" * 20 + "\n}\n")
    assert [d for d in check_source(decode("deep.tile", text.encode())).diagnostics if d.is_error] == []


@pytest.mark.parametrize("op", ["%", "//", "-"])
def test_a_chain_within_the_depth_limit_is_checked_and_compiled_without_running_out_of_stack(op):
    """A '%' or '//' chain of 248 terms was a RecursionError (internal error): the typer takes four
    Python frames a level, and Python's default limit is 1000 frames."""
    from tiledsl.compiler.codegen import generate

    text = ("program p {\n  param q = " + f" {op} ".join(["7"] * 298) + "\n  matrix A[n, n] = random spd\n"
            "  potrf(A[q * 0, 0])\n}\n")
    result = check_source(decode("chain.tile", text.encode()))
    assert result.ok, result.report()
    assert "q = " in generate(result.checked) and sys.getrecursionlimit() == 1000  # put back


def test_a_panel_passed_twice_with_sub_ranges_is_not_told_of_one_tile_s_sub_ranges():
    """A panel takes no sub-range (E209): E204's hint on the sub-ranges of one tile is not for it."""
    text = ("program p {\n  tiling uniform(nb = 4)\n  matrix A[n, n] = random general\n"
            "  trsm_l(A[0 : A.mt, 0][0 : 2, 0 : 4], A[0 : A.mt, 0][2 : 4, 0 : 4])\n}\n")
    (twice,) = [d for d in check_source(decode("p.tile", text.encode())).diagnostics if d.code == "E204"]
    assert twice.message.startswith("panel A[0 : A.mt, 0] is passed twice") and twice.hint is None


def test_a_lone_cr_is_warned_of_with_the_syntax_error_it_causes():
    """A comment that seems to hold the text after a lone CR does not: the parse fails on that text,
    and W308 (said before it, in the file's order) is why."""
    source = decode("u.tile", b"program u {\n  matrix A[n, n] = random spd\n  potrf(A[0, 0])  # first\rdone, more\n}\n")
    assert [(d.code, d.span.line, d.span.column) for d in check_source(source).diagnostics] == [
        ("W308", 3, 26), ("E100", 4, 5)]


def test_carets_count_the_escapes_of_characters_stderr_cannot_write(monkeypatch):
    """Under LANG=C, stderr writes é as \\xe9 (four columns): the caret under a later name was three short."""
    import io

    source = decode("e.tile", 'program p {\n  matrix A[n, n] = random spd\n  require n > 0 "café" potrf(A[0, yy])\n}\n'
                    .encode())
    (d,) = [d for d in check_source(source).diagnostics if d.is_error]
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(io.BytesIO(), encoding="ascii", errors="backslashreplace"))
    shown, carets = (line.split(" | ", 1)[1] for line in render(d, source).split("\n")[2:4])
    assert shown == '  require n > 0 "caf\\xe9" potrf(A[0, yy])' and carets.index("^") == shown.index("yy")


@pytest.mark.parametrize("encoding, said", [("utf-16", "UTF-16 text"),
                                            ("utf-16-le", "UTF-16 text without a byte-order mark")])
def test_a_kernel_module_saved_as_utf16_is_said_so(tmp_path, encoding, said):
    """Python's "source code string cannot contain null bytes" alone did not say what to do."""
    (tmp_path / "k.py").write_bytes("def fill(A):\n    A[...] = 1.0\n".encode(encoding))
    (tmp_path / "p.tile").write_text('use "k.py"\nkernel fill(out A)\nprogram p {\n  matrix A[n, n] = zeros\n'
                                     "  fill(A[0, 0])\n}\n")
    (d,) = check_path(tmp_path / "p.tile").diagnostics
    assert d.code == "E209" and d.hint == f"it reads as {said}: save it as UTF-8, as Python reads it"
