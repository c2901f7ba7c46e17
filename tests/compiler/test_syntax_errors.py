"""Syntax errors: each is E100 at the token the parser refused, with what was expected, what is still
open, and a hint where the text shows a slip or another language's habit."""
import pytest

from parse_helpers import expr, parse_text, span_of, syntax_error, where
from tiledsl.compiler.source import SourceError


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
    ("potrf[A[k, k]]", "a call's arguments go in parentheses: potrf(A[k, k])"),  # no '=' after them: no assignment
    ("see below", "a call's arguments go in parentheses: see(below)"),  # not "did you mean 'use'": a file's word
    ("gemm(A[k, k], A[k, k].m, A[k, k])", None),  # an attribute, not a transpose
    ("if k == 0 { potrf(A[k, k]) } else potrf(A[k, k])", "an else takes braces: else { potrf(A[k, k]) }")])
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
    ("potrf(A[k, k])\n    out matrix B[n, n] = zeros", "out", "unexpected 'out'", "declarations (tiling,"),
    ("potrf(A[k, k])\n    check cholesky(A)", "check", "unexpected 'check'", "declarations (tiling,"),
    ("release A[k, k] priority 3", "priority", "a release takes no priority: it runs no task", "drop the priority"),
    ("potrf(A[k, k]) priority 2 priority k", "priority k", "a call takes one priority",
     "keep one 'priority EXPRESSION'"),
    # tester x's
    ("potrf(A[k, k]) priority = 3", "=", "unexpected '='", "write priority 3 (no '=')"),
    ("gemm(A[k, k], A[k, k], A[k, k], alpha = 1.0f)", "f)", "unexpected 'f'",
     "a number takes no type suffix: write 1.0"),
    ("let z = A.nt()", ")", "unexpected ')'", "A.nt is a number, not a function: write A.nt"),
    ("let x == 3", "= 3", "unexpected '='", "a let binds its name with one '=': let x = 3"),
    ("let x 3", "3", "unexpected '3'", "a let binds its name with '=': let x = 3")])
def test_the_usual_slips_are_pointed_at_with_a_hint(statement, needle, message, hint):
    text = IN_A_LOOP % statement
    d = syntax_error(text)
    line = next(number for number, row in enumerate(text.split("\n"), 1) if needle in row and number >= 4)
    assert (d.message, d.span.line, d.span.column) == (message, line, where(text, line, needle)[1])
    assert d.hint == hint if hint is None else d.hint.startswith(hint)


def test_an_else_without_braces_after_an_if_is_not_a_stray_else():
    text = IN_A_LOOP % "if k == 0 { potrf(A[k, k]) } else potrf(A[k, k])"
    d = syntax_error(text)
    assert (d.message, d.notes, d.hint) == ("unexpected 'potrf'", ("expected 'if' or '{'",),
                                            "an else takes braces: else { potrf(A[k, k]) }")  # (tester x)
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


@pytest.mark.parametrize("literal, reason", [('"\\x"', "truncated \\xXX escape"),
                                             ('"\\N{NO SUCH NAME}"', "unknown Unicode character name"),
                                             ('"\\e"', "invalid escape sequence '\\e'")])
def test_a_bad_escape_in_a_string_says_what_is_wrong_with_it(literal, reason):
    """In the language's words: Python's decoder would speak of itself ("(unicode error) 'unicodeescape'
    codec can't decode bytes in position 0-1")."""
    d = syntax_error(IN_A_LOOP % f"potrf(A[k, k], {literal})")
    assert (d.message, d.span.line, d.span.column) == (f"invalid string literal: {reason}", 4, 20)
    assert d.hint == "write a backslash as \\\\"


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


@pytest.mark.parametrize("text, hint", [
    ("matrix A[n, n] = random spd\nprogram p {\n  potrf(A[0, 0])\n}\n",
     "'matrix' goes inside a program's braces: program NAME { matrix ... }"),
    ("def f(inout A)\nprogram p {\n  matrix A[n, n] = random spd\n  f(A[0, 0])\n}\n", "did you mean 'kernel'?"),
    ("kernel f(inout A, string mode)\nprogram p {\n  matrix A[n, n] = random spd\n  f(A[0, 0], \"x\")\n}\n",
     "write 'char': a value parameter is an int, a float or a char")])
def test_another_languages_declaration_is_named_in_ours(text, hint):
    """Tester x: a declaration before the program, Python's def and a string parameter got the list of
    what was expected and no hint."""
    assert syntax_error(text).hint == hint


def test_a_brace_too_many_is_located_by_the_indentation():
    """Tester x: `} }` where `}` goes closed the program early; the error came at its last line, saying only
    where the program's '{' was closed. The brace whose line is indented otherwise than its '{' is named."""
    text = ("program p {\n  matrix A[n, n] = random spd\n  for k in 0 .. A.nt {\n    for m in k + 1 .. A.mt {\n"
            "      potrf(A[m, k])\n    } }\n    potrf(A[k, k])\n  }\n}\n")
    d = syntax_error(text)
    assert (d.message, d.span.line) == ("unexpected '}'", 9)
    assert d.notes[-1] == ("the '}' at 6:7 closes the '{' at 3:22, whose line is indented otherwise: one '}' too "
                           "many? } }")
