"""Lark's syntax errors explained: for the token the parser refused, a :class:`Diagnostic` at its
place that says what was expected, which bracket or block is still open, and, where the text
shows a habit from another language or a slip (a misspelt keyword, a missing operator, Python's
``range``, an assignment), a hint with the form to write."""
from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from lark import Token
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from ..language import (NAMED_INITS, OPERATOR_WORDS, RANDOM_KINDS, STATEMENT_WORDS, TILING_SETTINGS,
                        statement_word_kernel)
from .diagnostics import Diagnostic, did_you_mean
from .grammar import TOKEN, WORD, GluedKeyword, lark_parser
from .source import Source, Span

#: (an integer and a float are both "a number" where an expression may begin: they come together)
_TOKEN_WORDS = {"NAME": ("a name",), "INT": ("a number",), "FLOAT": ("a number",), "STRING": ("a string",),
                "CMP_OP": ("a comparison",), "MUL_OP": ("'*'", "'//'", "'%'"), "SLASH": ("'/'",),
                "VALUE_TYPE": ("int", "float", "char"), "$END": ("end of file",)}


def _describe(terminal: str) -> tuple[str, ...]:
    """The words a note of what was expected gives a terminal (one per token it stands for)."""
    if terminal in _TOKEN_WORDS:
        return _TOKEN_WORDS[terminal]
    try:
        pattern = lark_parser().get_terminal(terminal).pattern
    except KeyError:
        return (terminal,)
    return (f"'{pattern.value}'",) if pattern.type == "str" else (terminal.lower(),)


def _keyword_of(terminal: str) -> str | None:
    """The keyword a terminal stands for ('program' for PROGRAM), or None for other terminals."""
    try:
        pattern = lark_parser().get_terminal(terminal).pattern
    except KeyError:
        return None
    return pattern.value if pattern.type == "str" and pattern.value.isidentifier() else None


def _acceptable(error: UnexpectedInput, terminals: frozenset) -> frozenset:
    """The terminals the parser would take where it failed, as its note lists them: the LALR
    state's own set (``terminals``) names some it refuses once its reductions are made ('else'
    after a for loop's brace) and leaves out some it takes ('for' after a call's line)."""
    parser = getattr(error, "interactive_parser", None)
    return frozenset(parser.accepts()) - {"$END"} if parser is not None else terminals


def syntax_diagnostic(source: Source, error: UnexpectedInput) -> Diagnostic:
    """The E100 (or a more telling code's) diagnostic of the parser's ``error`` in ``source``."""
    line, column = max(error.line, 1), max(error.column, 1)
    if isinstance(error, UnexpectedCharacters):
        return _character_diagnostic(source, error.pos_in_stream, Span.point(source.path, line, column))
    terminals = frozenset(getattr(error, "expected", ()))
    accepts = _acceptable(error, terminals)
    expected = sorted({word for t in accepts for word in _describe(t)} - {""})
    if isinstance(error, UnexpectedEOF) or (isinstance(error, UnexpectedToken) and error.token.type == "$END"):
        where = Span.point(source.path, *_end_position(source))
        found = "end of file"
    else:
        token = error.token
        where = Span(source.path, line, column, token.end_line or line,
                     token.end_column or column + max(1, len(token)))
        found = f"'{token}'" if len(token) <= 40 else f"'{token[:40]}…'"
    notes = (f"expected {_join(expected)}",) if expected else ()
    if found == "end of file":
        notes += _unclosed_braces(source.text)
    token = getattr(error, "token", None)
    if token is None or found == "end of file":  # (the '$END' token's line is the last token's)
        return Diagnostic(where, "E100", f"unexpected {found}", notes)
    text = source.text.split("\n")[line - 1]
    before, after = text[:column - 1], text[column - 1 + len(token):]
    in_expression = "PLUS" in terminals  # where an operator could follow
    notes += _open_on_earlier_lines(source.text, line) + _program_closed_before(source.text, token, after)
    return (keyword_read_as_expression(source, token)
            or _workspace_form(source, line)
            or _operator_word_declared(source, token)
            or _initial_value_missing(source, line)
            or _call_taken_for_a_kind(source.path, line, before, str(token))
            or _python_number(source, line, before, str(token))
            or _bare_exponent(source, line, before, str(token))
            or _no_such_statement(source, line, before, accepts)
            or _operator_missing(source, line, before, terminals)
            or _line_ended_early(source, line, before, token, terminals, notes)
            or _expression_missing(source, line, before, token, notes)
            or _misspelt_word(source.path, line, before, called=terminals == {"LPAR"},
                              declared=_DECLARED_KERNEL.findall(source.text),
                              in_block=_in_braces(source.text, line, column))
            or _value_dependent(source, line, before, token, in_expression)
            or _stray_else(where, before, token, terminals)
            or _declaration_read_as_call(where, before, token, terminals)
            or _misplaced_priority(where, before, source.text.split("\n")[line - 2] if line > 1 else "")
            or Diagnostic(where, "E100", f"unexpected {found}", notes,
                          _token_hint(before, token, after, terminals, _in_braces(source.text, line, column))
                          or _keyword_in_capitals(source.text, token)
                          or _habit_hint(before, token, after, accepts)
                          or _operator_between_hint(before, str(token), after, terminals)))


#: an integer as Python writes it and the language does not: with '_' between digits, or in hex, octal, binary
_PYTHON_NUMBER = re.compile(r"(?<![\w.])(\d+(?:_\d+)+|0[xX][0-9a-fA-F]+(?:_?[0-9a-fA-F]+)*|0[oO][0-7_]+|0[bB][01_]+)"
                            r"(?![\w.])")


_STRING_OR_COMMENT = re.compile(r'"[^"]*"?|#.*')


def _python_number(source: Source, line: int, before: str, token: str) -> Diagnostic | None:
    """``1_000`` or ``0x10`` on the line up to the unexpected ``token`` (``before`` it), or on the
    line before when the token begins its line: the language reads ``1`` and then a name, so the
    error falls later; said at the number, with its decimal spelling."""
    code = lambda text: _STRING_OR_COMMENT.sub(lambda found: " " * len(found.group()), text)  # columns kept
    number = _PYTHON_NUMBER.search(code(before + token))
    if number is None and not before.strip() and line > 1:
        line -= 1
        number = _PYTHON_NUMBER.search(code(source.text.split("\n")[line - 1]))
    if number is None:
        return None
    try:
        value = int(number.group(1), 0)
    except ValueError:  # 0b_ and the like: no number at all
        return None
    return Diagnostic(Span(source.path, line, number.start(1) + 1, line, number.end(1) + 1), "E100",
                      f"'{number.group(1)}' is not a number in a tile program", (),
                      f"write it in decimal digits: {value}")


#: a number whose exponent has no digits (``1.5e``, ``1e-``): the language reads a number and a name ``e``
_BARE_EXPONENT = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[eE]([+-]?)(?![\w.])")


def _bare_exponent(source: Source, line: int, before: str, token: str) -> Diagnostic | None:
    """``1.5e`` or ``1e-`` just before the unexpected ``token`` (or ending the line before, when the
    token begins its line): read as a number and then a name ``e``, it failed at the ``e`` (``alpha =
    1e)``) or after it, as a kernel called ``e`` (``let x = 1.5e`` at the end of a line). Said at the
    number."""
    text = _STRING_OR_COMMENT.sub(lambda found: " " * len(found.group()), before) + token  # no number in a string
    found = [match for match in _BARE_EXPONENT.finditer(text) if text[match.end():].strip() in ("", token)]
    if not found and not before.strip() and line > 1:
        line -= 1
        text = _code(source.text.split("\n")[line - 1]).rstrip()
        found = [match for match in _BARE_EXPONENT.finditer(text) if match.end() == len(text)]
    if not found:
        return None
    number = found[-1]
    return Diagnostic(Span(source.path, line, number.start() + 1, line, number.end() + 1), "E100",
                      f"'{number.group()}' is not a number: its exponent has no digits", (),
                      f"an exponent needs digits: {number.group(1)}e{number.group(2)}3")


#: a line whose expressions no kernel call may follow on it (a statement may follow a call or a block)
_EXPRESSION_LINE = re.compile(r"\s*(?:let|param|require|if|for)\b|.*\bpriority\b")
#: an operand (a name, a number or a closing parenthesis) and then a name, at the end of a line's code
_TWO_OPERANDS = re.compile(r"(?:(?<![\w.])([A-Za-z_]\w*|\d+(?:\.\d*)?)|\))\s+([A-Za-z_]\w*)\s*$")


_OPERATOR_MISSING = "write an operator before '{}' (* + - / // % **)"
_COMPARISON_MISSING = "write a comparison or an operator before '{}' (< <= == != >= > * + - / // % **)"


def _operator_missing(source: Source, line: int, before: str, terminals: frozenset) -> Diagnostic | None:
    """``let j = k k`` or ``let j = k A.mt``: two operands with nothing between them. A statement may
    follow another on its line, so the parser reads the second as a kernel called and fails after it
    (at its '.', or on the next line, '(' due); said at the second operand, as an operator missing."""
    if terminals != {"LPAR"}:
        return None
    lines = source.text.split("\n")
    if not before.strip():  # the line before ended with the two operands
        line = next((number for number in range(line - 1, 0, -1) if _code(lines[number - 1]).strip()), 0)
        before = lines[line - 1] if line else ""
    code = _code(before)
    operands = _TWO_OPERANDS.search(code)
    if operands is None or not _EXPRESSION_LINE.match(code) or {*operands.groups()} & {*KEYWORDS}:
        return None
    second = re.match(r"[A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)?", lines[line - 1][operands.start(2):]).group()
    return Diagnostic(Span(source.path, line, operands.start(2) + 1, line, operands.start(2) + len(second) + 1),
                      "E100", f"unexpected '{operands.group(2)}'",
                      (f"an expression ends before '{second}', and no operator joins them (a name without '(' after "
                       f"it calls no kernel)",), _OPERATOR_MISSING.format(second))


def _line_ended_early(source: Source, line: int, before: str, token, terminals, notes) -> Diagnostic | None:
    """A token first on its line where no statement may begin (``param alpha`` and then ``matrix A``
    on the next line): the line before ended early. Said there, at its end, not at the next token."""
    if before.strip() or terminals & _STATEMENT_STARTS:
        return None
    lines = source.text.split("\n")
    previous = next((number for number in range(line - 1, 0, -1) if _code(lines[number - 1]).strip()), None)
    if previous is None:
        return None
    code = _code(lines[previous - 1])
    named = _NAMED_AND_WORD.search(code)
    misspelt = _misspelt_word(source.path, previous, code[:named.end()], in_block=True) if named else None
    if misspelt is not None:
        return misspelt
    end = len(code.rstrip()) + 1
    return Diagnostic(Span.point(source.path, previous, end), "E100", "unexpected end of line",
                      (*notes, f"the next line begins with '{token}'"))


#: a line that begins with a kernel call, up to the unexpected token; a line that ends where an expression is due
_CALL_BEGINS_LINE = re.compile(r"\s*([A-Za-z_]\w*)\s*\(")
_EXPRESSION_DUE = re.compile(r"(?:[=<>!]=|\*\*|//|[=<>+\-*/%]|\.\.|\b(?:step|priority|require|flops|in|if|and|or|not|check))"
                             r"\s*$")


#: what is due after a word ending a line, where it is not an expression (tester u83e: a bare `check`)
_DUE_AFTER = {"check": "the check's name and matrices (check cholesky(A))"}


def _expression_missing(source: Source, line: int, before: str, token, notes) -> Diagnostic | None:
    """A line that ends where an expression is due (``step``, ``let j =``, ``priority``; or a check), followed by
    a kernel call (read as the missing expression, it failed inside it: ``potrf(A[k, k])``, a tile
    is no value) or by a token no expression begins with (``}``). Said at the end of the line
    before, as a line that ended early."""
    call = _CALL_BEGINS_LINE.match(before)
    if line == 1 or (call.group(1) in KEYWORDS if call else before.strip()):
        return None
    lines = source.text.split("\n")
    previous = next((number for number in range(line - 1, 0, -1) if _code(lines[number - 1]).strip()), None)
    due = _EXPRESSION_DUE.search(_code(lines[previous - 1])) if previous else None
    if due is None:
        return None
    end = len(_code(lines[previous - 1]).rstrip()) + 1
    earlier = tuple(note for note in notes if not note.startswith("expected "))  # not the token's: the line's
    return Diagnostic(Span.point(source.path, previous, end), "E100", "unexpected end of line",
                      (*earlier, f"expected {_DUE_AFTER.get(due.group().strip(), 'an expression')} after "
                                 f"'{due.group().strip()}'",
                       f"the next line begins with '{call.group(1) if call else token}'"))


def _code(line: str) -> str:
    """A line without its comment (a '#' outside a string)."""
    return line[:next((column for column, char in _outside_strings(line) if char == "#"), len(line))]


def _outside_strings(line: str):
    """``(column, character)`` of the characters of ``line`` outside its strings, from 0."""
    in_string = False
    for column, char in enumerate(line):
        if char == '"':
            in_string = not in_string
        elif not in_string:
            yield column, char


#: Terminals that may begin a statement or a declaration, or close a block: where one is expected,
#: the line before was complete
_STATEMENT_STARTS = frozenset({"RBRACE", "FOR", "IF", "LET", "RELEASE", "NAME", "PARAM", "MATRIX", "WORKSPACE",
                               "CHECK", "REQUIRE", "TILING", "KERNEL", "USE", "PROGRAM", "ELSE", "PRIORITY"})


def _open_on_earlier_lines(text: str, line: int) -> tuple[str, ...]:
    """Notes naming the '(' and '[' opened on the lines before ``line`` and still open there: an
    argument list never closed reads the next line as more of it."""
    still_open = []  # (line, column from 1)
    lines = text.split("\n")
    for number, row in enumerate(lines[:line - 1], 1):
        for column, char in _outside_strings(_code(row)):
            if char in "([":
                still_open.append((number, column + 1, char))
            elif char in ")]" and still_open:
                still_open.pop()
    return tuple(f"the '{char}' at {number}:{column} is still open here: {_quoted(lines[number - 1], column)}"
                 for number, column, char in still_open[-2:])


def _quoted(line: str, column: int, width: int = 80) -> str:
    """``line`` as a note quotes it: stripped, and when longer than ``width`` clipped around ``column``
    (from 1) between ellipses, as the excerpt clips a long line (a 650-character line was quoted whole)."""
    text = line.strip()
    if len(text) <= width:
        return text
    at = column - 1 - (len(line) - len(line.lstrip()))
    start = max(0, min(at - width // 2, len(text) - width))
    return ("…" if start else "") + text[start:start + width] + ("…" if start + width < len(text) else "")


@lru_cache(maxsize=1)
def _grammar_keywords() -> frozenset[str]:
    """The grammar's keywords (``int``, ``float`` and ``char`` are one terminal's words): any of them may
    begin a line, and where an expression is due the parser reads it as a name."""
    words = {t.pattern.value for t in lark_parser().terminals if t.pattern.type == "str" and t.pattern.value.isidentifier()}
    return frozenset(words | set(WORD.findall(lark_parser().get_terminal("VALUE_TYPE").pattern.value)))


#: the end of a line after which an expression may come: a clause's word or operator, a bracket or a comma
_EXPRESSION_MAY_FOLLOW = re.compile(r"[(\[,:]\s*$|" + _EXPRESSION_DUE.pattern)
_LEADING_WORD = re.compile(r"\s*(\w*)")


def keyword_read_as_expression(source: Source, unexpected: Token | None = None) -> Diagnostic | None:
    """A clause whose expression is missing at the end of its line (``flops``, ``priority``, ``param
    q =``, ``require``): a keyword may also be a name, so the parser takes the word that begins the
    next line (``kernel``, ``for``, ``matrix``, ``check``) for the expression, and the error falls
    later (on that line, with a note expecting the very keyword written there; on a later one, as a
    ``tiling`` taken leaves its settings for a call and the declarations after it among statements),
    or the file parses and the word is an unknown name. Said at the clause instead.

    ``unexpected`` is the token the parse failed at, or None for a file that parsed: a keyword taken
    before it is said so if it is on its line, or if it is no name the program declares (a ``param
    check`` may begin a line in an expression). The file is parsed again step by step (only where a
    line that leaves an expression due is followed by one that begins with a keyword): the parser's
    state before each token says whether an expression may begin there, which no reading of the text
    alone can tell."""
    code = [line for line in source.text.split("\n") if line.strip() and not line.lstrip().startswith("#")]
    keywords = _grammar_keywords()
    if not any(_LEADING_WORD.match(following).group(1) in keywords and _EXPRESSION_MAY_FOLLOW.search(_code(line))
               for line, following in zip(code, code[1:])):  # (the cheap test first: a file parsed may be long)
        return None
    end = len(source.text) if unexpected is None else unexpected.start_pos
    parser = lark_parser().parse_interactive(source.text)
    previous = None
    try:
        for token in parser.iter_parse():  # each token is yielded before it is fed: choices() are the state's
            if token.start_pos >= end:
                break
            if (token.type == "NAME" and token in keywords and previous is not None
                    and token.line > previous.end_line and "INT" in parser.choices()
                    and (unexpected is not None and token.line == unexpected.line
                         or not _declared(source.text, token))):
                return _expression_taken(source.path, previous, token)
            previous = token
    except (UnexpectedInput, GluedKeyword):  # the error met again (the lexer's, where no token fits)
        pass
    return None


def _declared(text: str, word: Token) -> bool:
    """Whether the name ``word`` is one the program in ``text`` declares where it is (a parameter, a
    matrix, a let or loop variable open there), or a kernel's value parameter."""
    return (str(word) in _names_in_scope(text, text[:word.start_pos])
            or re.search(rf"\b(?:int|float|char)\s+{word}\b", text) is not None)


def _expression_taken(path: str, clause: Token, keyword: Token) -> Diagnostic:
    """The error of a ``clause`` whose expression is missing: the ``keyword`` on a later line taken for it."""
    span = Span(path, clause.line, clause.column, clause.end_line, clause.end_column)
    return Diagnostic(span, "E100", f"an expression is missing after '{clause}'",
                      (f"the '{keyword}' at {keyword.line}:{keyword.column} was read as the expression: a keyword "
                       f"can also be a name",),
                      f"write the expression after '{clause}', on line {clause.line}")


#: the words before a name that declare it, and the kind the analysis names it by
_DECLARED_AS = {"let": "let", "for": "loop", "param": "param", "matrix": "matrix", "workspace": "workspace"}
#: within a kernel's parentheses: the words before a parameter's name
_KERNEL_PARAMETER = {"in": "tile parameter", "out": "tile parameter", "inout": "tile parameter",
                     "int": "value parameter", "float": "value parameter", "char": "value parameter"}


def _operator_word_declared(source: Source, unexpected: Token) -> Diagnostic | None:
    """A name spelt like an operator of conditions (``let not = 1``, ``matrix not[n, n]``) is
    declared where the parser expects a name, and its use read as the operator, failing at the
    token after it (``A[not, 0]``: "unexpected ','"). Said at the declaration, as the analysis says
    it of a declaration never used (E207), with the use read so in a note."""
    tokens = [match for match in TOKEN.finditer(source.text, 0, unexpected.start_pos)
              if not match.group().startswith(("#", '"'))]
    if not tokens or tokens[-1].group() not in OPERATOR_WORDS:
        return None
    use, declared, kind, header = tokens[-1], None, None, 0  # header: the depth of a kernel's parentheses
    kernel = None  # the name of the kernel whose parameters are read
    for index, (before, token) in enumerate(zip(tokens, tokens[1:-1])):
        word = token.group()
        if header:
            header += (word == "(") - (word == ")")
        elif word == "(" and index and tokens[index - 1].group() == "kernel":  # its name, then its parameters
            header, kernel = 1, before.group()
        if word == use.group() and WORD.fullmatch(before.group()):
            meaning = (f"{_KERNEL_PARAMETER[before.group()]} of kernel '{kernel}'"
                       if header and before.group() in _KERNEL_PARAMETER else None if header
                       else _DECLARED_AS.get(before.group()))
            if meaning is not None:
                declared, kind = token, meaning
    if declared is None:
        return None
    start, where = source.span_at(declared.start()), source.span_at(use.start())
    return Diagnostic(Span(source.path, start.line, start.column, start.line, start.column + len(declared.group())),
                      "E207", f"'{use.group()}' is an operator of conditions, and cannot name a {kind}",
                      (f"the '{use.group()}' at {where.line}:{where.column} was read as the operator",),
                      hint="choose another name")


#: a matrix declaration ending in ``=`` or ``= random``: its value, or its kind, was read from the next line
_VALUE_AT_END = re.compile(r"\bmatrix\b[^=]*(=)\s*(random)?\s*$")


#: the parts of a workspace's declaration, each with what comes before it: the longest start that matches
#: tells where the declaration left its form
_WORKSPACE_PARTS = tuple(map(re.compile, (r"\s*workspace\b", r"\s+[A-Za-z_]\w*", r"\s+like\b", r"\s+[A-Za-z_]\w*",
                                           r"\s+rows\b", r"\s+(?=[\w(-])")))


def _workspace_form(source: Source, line: int) -> Diagnostic | None:
    """A workspace declared in another form than ``workspace NAME like MATRIX rows EXPRESSION`` on
    the error's line, or on the line before, which the parser read on into this one (``rows`` at the
    end of a line takes the next line's first word). Said where the declaration left its form."""
    lines = source.text.split("\n")
    previous = next((number for number in range(line - 1, 0, -1) if _code(lines[number - 1]).strip()), None)
    for number in (line, previous):
        code = _code(lines[number - 1]).rstrip() if number else ""
        if not _WORKSPACE_PARTS[0].match(code):
            continue
        end = 0
        for part in _WORKSPACE_PARTS:
            found = part.match(code, end)
            if found is None:
                break
            end = found.end()
        else:
            return None  # the whole form: the error is past it
        column = end + len(code[end:]) - len(code[end:].lstrip())
        word = re.match(r"\w+|\S", code[column:])
        found = f"'{word.group()}'" if word else "end of line"
        names = re.findall(r"[A-Za-z_]\w*", code[:column])[1:]  # its name, 'like', the matrix
        name, matrix = names[0] if names else "T", names[2] if len(names) > 2 else "A"
        height = "B" if re.search(r"\btiling\s+hybrid\b", source.text) else "nb"
        return Diagnostic(Span.point(source.path, number, column + 1), "E100", f"unexpected {found}",
                          ("a workspace is declared as: workspace NAME like MATRIX rows EXPRESSION",),
                          f"give its tiles' height after the matrix it is like: workspace {name} like {matrix} "
                          f"rows {height}")
    return None


def _initial_value_missing(source: Source, line: int) -> Diagnostic | None:
    """``matrix A[n, n] = random`` with no kind, or ``matrix A[n, n] =`` with no value: the first
    word of the next line (``for``, ``potrf``) was taken for them, and the error came later on that
    line. Said at ``random``, or at the ``=``."""
    lines = source.text.split("\n")
    previous = next((number for number in range(line - 1, 0, -1) if _code(lines[number - 1]).strip()), None)
    found = _VALUE_AT_END.search(_code(lines[previous - 1]).rstrip()) if previous else None
    if found is None:
        return None
    if found.group(2):
        return random_needs_a_kind(source.path, previous, found.start(2) + 1)
    return Diagnostic(Span.point(source.path, previous, found.start(1) + 1), "E100",
                      "the matrix's initial value is missing after '='",
                      hint="write 'random general' (or another kind), 'zeros', 'identity' or 'load \"FILE.npy\"'")


#: ``= random NAME`` before a '(': a call on the same line taken for the kind ``random`` was not given
_KIND_TAKEN = re.compile(r"\bmatrix\b[^=]*=\s*(random)\s+(\w+)\s*$")


def _call_taken_for_a_kind(path: str, line: int, before: str, token: str) -> Diagnostic | None:
    """``matrix A[n, n] = random potrf(A[0, 0])``, the kind forgotten (tester u83e): the call's name was read
    as the kind, and its '(' was the error. Said at ``random``."""
    found = _KIND_TAKEN.search(before) if token == "(" else None
    if found is None or found.group(2) in RANDOM_KINDS:
        return None
    return random_needs_a_kind(path, line, found.start(1) + 1)


def random_needs_a_kind(path: str, line: int, column: int) -> Diagnostic:
    """The error of a ``random`` at ``line``:``column`` given no kind."""
    return Diagnostic(Span(path, line, column, line, column + len("random")), "E100", "'random' needs a kind", (),
                      "write " + _join([f"'random {kind}'" for kind in RANDOM_KINDS]))


def _in_braces(text: str, line: int, column: int) -> bool:
    """Whether a '{' opened before ``line``:``column`` (outside strings and comments) is open there."""
    depth = 0
    for number, row in enumerate(text.split("\n")[:line], 1):
        code = _code(row)[:column - 1] if number == line else _code(row)
        for _, char in _outside_strings(code):
            depth += (char == "{") - (char == "}")
    return depth > 0


def _unclosed_braces(text: str) -> tuple[str, ...]:
    """Notes naming the '{' a file ending early leaves open. A '}' first on its line closes the
    last open '{' of a line indented as much, where there is one (the braces opened since are
    the unclosed ones: a program is indented as it nests); any other closes the last open."""
    open_braces, unclosed = [], []  # (line, column from 1, indent)
    for number, line in enumerate(text.split("\n"), 1):
        code = _code(line)
        indent = len(code) - len(code.lstrip(" \t"))
        for column, char in _outside_strings(code):
            if char == "{":
                open_braces.append((number, column + 1, indent))
            elif char == "}" and open_braces:
                first = column == indent
                if first and any(brace[2] == indent for brace in open_braces):
                    while open_braces[-1][2] != indent:
                        unclosed.append(open_braces.pop())
                open_braces.pop()
    unclosed += open_braces
    lines = text.split("\n")
    return tuple(f"the '{{' at {line}:{column} is never closed: {_quoted(lines[line - 1], column)}"
                 for line, column, _ in sorted(unclosed)[-2:])


# -- characters outside the language
_CHARACTER_HINTS = {"&": "write 'and' (conditions join with and, or, not)",
                    "|": "write 'or' (conditions join with and, or, not)",
                    "!": "write 'not' (and '!=' for 'is not equal to')",
                    ";": "statements need no separator: put each on its own line, or leave a space",
                    "^": "write '**' for a power (2 ** 3)"}
#: Letters of other scripts drawn like Latin ones (Cyrillic, Greek): a name typed with another keyboard
#: layout, or pasted, looks right and does not parse
_FOREIGN_LETTERS = dict(zip("АВЕЅІЈКМНОРСТХУаеіјорсухѕһԁԛԝΑΒΕΖΗΙΚΜΝΟΡΤΥΧονακιρυ",
                            "ABESIJKMHOPCTXYaeijopcyxshdqwABEZHIKMNOPTYXovakipu"))
#: Typographic signs (word processors and chat tools put them in) and what the language writes instead
_TYPOGRAPHIC_SIGNS = {"×": "*", "∗": "*", "÷": "/", "≤": "<=", "≥": ">=", "≠": "!=", "…": "..", "⩽": "<=",
                      "⩾": ">="}
#: Unicode's compatibility forms that are a variant of an ASCII character: full-width, no-break, styled
_ASCII_VARIANTS = ("<wide>", "<narrow>", "<noBreak>", "<compat>", "<font>")


def _character_diagnostic(source: Source, offset: int, where: Span) -> Diagnostic:
    """The syntax error of a character no token can start with."""
    char = source.text[offset] if offset < len(source.text) else ""
    rest_of_line = source.text[offset + 1:].split("\n", 1)[0]
    if char == '"':  # a string token would have matched, had it ended on its line
        return Diagnostic(where, "E100", "string not closed on this line",
                          hint="end it with '\"' on the same line: a string cannot span lines")
    line_before = _code(source.text[source.text.rfind("\n", 0, offset) + 1:offset])
    if char == ";" and _OPEN_TILE_INDEX.search(line_before):  # A[0; 0]: no statement separator, but a comma
        return Diagnostic(where, "E100", f"unexpected character {char!r}", hint=_TILE_INDEX_HINT)
    if char == ";" and line_before.count("(") > line_before.count(")"):  # potrf(A[k, k]; uplo = "L")
        return Diagnostic(where, "E100", f"unexpected character {char!r}", hint=_CALL_ARGUMENTS_HINT)
    return Diagnostic(where, "E100", f"unexpected character {char!r}",
                      hint=_character_hint(char, rest_of_line, line_before))


#: a tile's indices opened and left open (``A[0, k``), up to the end of the text, with what is inside them
_OPEN_TILE_INDEX = re.compile(r"(?<![\w.\]])[A-Za-z_]\w*\s*\[([^\[\]]*)$")
_TILE_INDEX_HINT = "tile indices are separated by ',': A[i, j]"
_CALL_ARGUMENTS_HINT = ("a call's arguments are separated by ',', its options after its tiles: "
                        "potrf(A[k, k], uplo = \"L\")")


def _character_hint(char: str, rest_of_line: str, line_before: str = "") -> str | None:
    """What to type instead of ``char``, from the text around it on its line (``line_before``,
    ``rest_of_line``)."""
    if char in _CHARACTER_HINTS:
        return _CHARACTER_HINTS[char]
    if char == "'":
        quoted = rest_of_line.split("'", 1)
        return f'strings are double-quoted: write "{quoted[0]}"' if len(quoted) == 2 else "strings are double-quoted"
    if char.isascii() and unicodedata.category(char) != "Cc":
        return None
    name = unicodedata.name(char, None)
    what = f"this is U+{ord(char):04X} {name}" if name else f"this is U+{ord(char):04X} (a control character)"
    spelt = _greek_name(char, line_before, rest_of_line)
    if spelt is not None:
        return f"{what}: names are ASCII, write '{spelt}' instead"
    instead = _ascii_look_alike(char)
    if instead is None:
        return f"{what}: outside strings and comments a program is written in ASCII"
    if instead == "":
        return f"{what}, which does not show: delete it"
    if instead in (" ", "\n"):
        return f"{what}: type a plain {'space' if instead == ' ' else 'newline'} instead"
    letter = " the Latin letter" if char in _FOREIGN_LETTERS else ""
    return f"{what}: type{letter} '{instead}' instead"


#: Unicode's names of Greek letters spelt otherwise in ASCII names
_GREEK_SPELLING = {"LAMDA": "lambda"}
_GREEK_LETTER = re.compile(r"GREEK (SMALL|CAPITAL) LETTER ([A-Z]+)")


def _greek_name(char: str, line_before: str, rest_of_line: str) -> str | None:
    """The name a Greek letter stands for, spelt in ASCII (``α`` is ``alpha``, ``λ2`` is
    ``lambda2``), where the letter is a name of its own: no ASCII letter or other non-ASCII one in
    its word. Inside an ASCII word it is a look-alike typed with another keyboard layout, and so is
    a capital drawn as a Latin one (``Α``, a matrix's name)."""
    found = _GREEK_LETTER.fullmatch(unicodedata.name(char, ""))
    if found is None or (found.group(1) == "CAPITAL" and char in _FOREIGN_LETTERS):
        return None
    head, tail = re.search(r"\w*$", line_before).group(), re.match(r"\w*", rest_of_line).group()
    if not (head + tail).isascii() or re.search(r"[A-Za-z]", head + tail) or head.strip("_"):
        return None  # (digits before it: '2α' is no name)
    spelt = _GREEK_SPELLING.get(found.group(2), found.group(2)).lower()
    return head + (spelt.capitalize() if found.group(1) == "CAPITAL" else spelt) + tail


def _ascii_look_alike(char: str) -> str | None:
    """The ASCII text ``char`` is mistaken for ('' for a character that does not show), or None."""
    if char in _FOREIGN_LETTERS:
        return _FOREIGN_LETTERS[char]
    if char in _TYPOGRAPHIC_SIGNS:
        return _TYPOGRAPHIC_SIGNS[char]
    name, category = unicodedata.name(char, ""), unicodedata.category(char)
    folded = unicodedata.normalize("NFKC", char)
    # not <super> and <sub>: ² is not 2, but a power
    if unicodedata.decomposition(char).startswith(_ASCII_VARIANTS) and folded.isascii():
        return folded
    if category == "Pd" or name.endswith("MINUS SIGN"):
        return "-"
    if "QUOTATION MARK" in name:  # curly, low and angle quotes: strings take the ASCII double quote
        return '"'
    if category == "Zs":
        return " "
    if category in ("Zl", "Zp"):  # a word processor's line or paragraph break
        return "\n"
    if category in ("Cf", "Cc"):
        return ""
    return None


# -- tokens in the wrong place
#: Words that begin a declaration or a statement, for "did you mean" on a misspelt one
KEYWORDS = ("program", "kernel", "use", "tiling", "param", "require", "matrix", "workspace", "check", "for", "if",
             "else", "let", "release", "priority")
_DECLARATIONS = ("param", "require", "matrix", "workspace", "check", "tiling")
_MODES = ("in", "out", "inout")
_DECLARATIONS_FIRST = "declarations (tiling, param, require, matrix, workspace, check) come before the program's " \
                      "statements"


def _stray_else(where: Span, before: str, token: Token, terminals: frozenset) -> Diagnostic | None:
    """An ``else`` that follows no ``if`` block: read as a name (a kernel's, awaiting '('), or
    as a keyword where a statement begins."""
    if token == "else" and "LET" in terminals:
        span = where
    else:
        word = _NAME_BEFORE.search(before)
        if not word or word.group(1) != "else" or "LBRACE" in terminals:  # an if's else awaits '{'
            return None
        span = Span(where.path, where.line, word.start(1) + 1, where.line, word.end(1) + 1)
    return Diagnostic(span, "E100", "'else' must follow the closing brace of an 'if' block",
                      hint="write if CONDITION { ... } else { ... }")


_PRIORITY_AFTER = re.compile(r"\b(?:(release)\b.*|priority\b.*)\b(priority)\s*$")


def _declaration_read_as_call(where: Span, before: str, token: Token, terminals: frozenset) -> Diagnostic | None:
    """A declaration after a statement whose word the parser read as a kernel's name (``check cholesky(A)``,
    ``matrix B[n, n]``, ``in matrix B``: '(' awaited after it): said at that word, which is out of place."""
    word = _NAME_BEFORE.search(before)
    if "LPAR" not in terminals or not word or not (
            word.group(1) in _DECLARATIONS or word.group(1) in _MODES and token == "matrix"):
        return None
    span = Span(where.path, where.line, word.start(1) + 1, where.line, word.end(1) + 1)
    return Diagnostic(span, "E100", f"unexpected '{word.group(1)}'", (), _DECLARATIONS_FIRST)


def _misplaced_priority(where: Span, before: str, previous: str) -> Diagnostic | None:
    """A ``priority`` where none goes, read as a kernel's name (awaiting '('): after a ``release``,
    which is no task, or after a call's priority, on its line or the ``previous`` one (newlines
    only separate tokens)."""
    shift = 0
    if re.fullmatch(r"\s*priority\s*", before):
        shift, before = len(previous) + 1, previous + " " + before
    found = _PRIORITY_AFTER.search(before)
    if not found:
        return None
    span = Span(where.path, where.line, found.start(2) + 1 - shift, where.line, found.end(2) + 1 - shift)
    if found.group(1):
        return Diagnostic(span, "E100", "a release takes no priority: it runs no task",
                          hint="drop the priority; a release frees the tiles once the tasks before it are done")
    return Diagnostic(span, "E100", "a call takes one priority", hint="keep one 'priority EXPRESSION'")


#: an 'if' or a 'require' whose condition the text ends in (no block opened or closed since)
_CONDITION_OPEN = re.compile(r"\b(?:if|require)\b[^{}]*$")
_COMPARED = re.compile(r"(<=|>=|==|!=|<|>)\s*[\w.)\]]+\s*$")  # a comparison just made: its right operand ends the text


def _token_hint(before: str, token: Token, after: str, terminals: frozenset, in_braces: bool) -> str | None:
    """What the usual mistake behind an unexpected ``token`` is, from the text ``before`` and
    ``after`` it on its line, the ``terminals`` the parser expected and whether it is ``in_braces``
    (within a program's block)."""
    if token.type == "CMP_OP" and _COMPARED.search(before):  # 0 < k < n, not '1 -> 2' or 'A[0, <0]'
        return "comparisons do not chain: join them with 'and' (0 < k and k < n)"
    if token == "=" and _CONDITION_OPEN.search(before):  # if k = 0 {, require q = 2
        return "compare with '=='"
    if token == "//":  # unexpected: so not between two numbers, where it divides
        return "comments start with '#' ('//' divides integers)"
    if token == "/" and after.startswith("*") or token == "*" and before.endswith("/"):
        # a C block comment: '/' where no division goes, or a division whose '*' cannot follow it
        return "comments start with '#', one on each line ('/*' opens no comment)"
    if token == ".":
        return _number_hint(before, after) or _dot_hint(before, after)
    index = _OPEN_TILE_INDEX.search(before)
    if index and (token == ":" and re.fullmatch(r"(?:[^,]*,)?\s*", index.group(1))
                  or token in (",", "]") and index.group(1).rstrip().endswith(":")):  # A[:, k], A[k:, k]
        return "a panel names both ends of its range: A[k : A.mt, k]"
    if token.type == "NAME" and _PARAMETER_WORDS.search(before):  # inout float B, in out B
        return "a parameter is a tile (in|out|inout NAME) or a value (int|float|char NAME), not both"
    loop = _PYTHON_RANGE.search(before)
    if loop and token in ("{", ":"):
        return f"write the range as START .. STOP: for {loop.group(1)} in {_range_text(loop.group(2))}"
    word = _NAME_BEFORE.search(before)
    word = word.group(1) if word else None
    if word == "elif":
        return "write 'else if'"
    if word == "not" and token in (")", ",", "]", "}"):  # 'not' where a value ends: a name spelt so
        return "'not' negates a condition, so it cannot name a value: give the let or param another name"
    if _declaration_among_statements(token, after, terminals):
        return _DECLARATIONS_FIRST
    if word in ("kernel", "use") and in_braces:
        return f"'{word}' declarations go outside the program's block"
    close = _misspelt_keyword_token(token, terminals)  # a word before the token: _misspelt_word
    return f"did you mean '{close}'?" if close else None


_PARAMETER_WORD = r"(?:in|out|inout|int|float|char)"
#: two words of a kind in a kernel's parameter, before its name: a mode and a type, or two of either
_PARAMETER_WORDS = re.compile(rf"\bkernel\s+\w+\s*\((?:[^()]*,)?\s*{_PARAMETER_WORD}\s+{_PARAMETER_WORD}\s*$")
#: a loop over Python's range: its variable, and range's arguments
_PYTHON_RANGE = re.compile(r"\bfor\s+([A-Za-z_]\w*)\s+in\s+range\s*\((.*)\)\s*$")


def _range_text(arguments: str) -> str:
    """``range(ARGUMENTS)`` as a loop of the language writes it: ``0 .. n``, ``1 .. n step 2``
    (``START .. STOP`` where its arguments are not one, two or three)."""
    parts, depth, start = [], 0, 0
    for column, char in enumerate(arguments):
        depth += (char in "([") - (char in ")]")
        if char == "," and depth == 0:
            parts.append(arguments[start:column].strip())
            start = column + 1
    parts.append(arguments[start:].strip())
    if not all(parts) or len(parts) > 3:
        return "START .. STOP"
    if len(parts) == 1:
        parts.insert(0, "0")
    return f"{parts[0]} .. {parts[1]}" + (f" step {parts[2]}" if len(parts) == 3 else "")


def _number_hint(before: str, after: str) -> str | None:
    """A number with no digits before its point (.5) or after it (2.)."""
    digits_after, digits_before = re.match(r"\d+", after), re.search(r"(?<![\w.])\d+$", before)
    if digits_after and not re.search(r"[\w.]$", before):
        return f"write 0.{digits_after.group()}: a number has digits on both sides of its point"
    if digits_before and not re.match(r"[A-Za-z_]", after):
        return f"write {digits_before.group()}.0: a number has digits on both sides of its point"
    return None


def _declaration_among_statements(token: Token, after: str, terminals: frozenset) -> bool:
    """Whether a declaration starts where a statement begins, its word read as a keyword (one read
    as a kernel's name is :func:`_declaration_read_as_call`'s)."""
    starts = token in _DECLARATIONS or (token in _MODES and re.match(r"\s*matrix\b", after))
    return bool(starts) and "LET" in terminals


def _misspelt_keyword(before: str, word: str | None, called: bool = False, in_block: bool = False) -> str | None:
    """The keyword that the word ending ``before`` misspells, where a keyword goes: at the start
    of its line or of a statement after a call or a brace (a program on one line), or
    ``priority`` after a call; or where the parser read the word as a called kernel's name
    (``called``: a statement begins there, as after ``= random spd`` or a let), not a declared one's."""
    if word is None or word in KEYWORDS or word == "elif":  # a keyword in the wrong place is not misspelt
        return None  # (and 'elif' is Python's: its hint says to write 'else if')
    ahead = before.rstrip()[:-len(word)].rstrip()
    statement = not ahead or ahead.endswith(("{", "}", ")")) or called and not _NAMING.search(ahead)
    candidates = KEYWORDS if statement else _INITS if _MATRIX_EQUALS.search(ahead) else ()
    return did_you_mean(word, [c for c in candidates if not (in_block and c in _FILE_KEYWORDS)])


_FILE_KEYWORDS = ("use", "kernel", "program")  # the statements of a file, outside its program's braces


def statement_word_kernels(source: Source) -> list[Diagnostic]:
    """E207 for each kernel declared with a name that begins a statement (``kernel let(inout
    A)``), said at its declaration with its calls: read before the parse, which its calls break
    wherever the error is met (a call of one in a loop may parse, at the program's top not)."""
    lines = [_code(line) for line in source.text.split("\n")]
    found = []
    for number, code in enumerate(lines, 1):
        declared = _DECLARED_KERNEL.search(code)
        if declared is None or declared.group(1) not in STATEMENT_WORDS:
            continue
        name = declared.group(1)
        call = re.compile(rf"(?<![\w.]){name}\s*\(")
        calls = tuple(f"{other}:{match.start() + 1}" for other, text in enumerate(lines, 1)
                      for match in call.finditer(text) if other != number)
        message, note, hint = statement_word_kernel(name, calls)
        found.append(Diagnostic(Span(source.path, number, declared.start(1) + 1, number, declared.end(1) + 1),
                                "E207", message, (note,), hint))
    return found


_INITS = ("random", "load")  # the keywords that may begin a matrix's initial value
_DECLARED_KERNEL = re.compile(r"\bkernel\s+([A-Za-z_]\w*)")
_MATRIX_EQUALS = re.compile(r"\bmatrix\b[^=]*=$")
_NAMING = re.compile(r"\b(?:kernel|tiling|check)$")  # the words before a name that awaits '(' and is no call
#: a matrix declaration whose value is a name and another word (``= tandom spd``): a misspelt
#: ``random`` taken for a named value, the word after it for a call on the next line
_NAMED_AND_WORD = re.compile(r"\bmatrix\b[^=]*=\s*[A-Za-z_]\w*(?=\s+[A-Za-z_]\w*\s*$)")


#: keywords that begin with another (``inout`` and ``int`` with ``in``): a word the lexer read as the
#: shorter one and more letters may misspell the longer
_LONGER_KEYWORDS = {"in": ("inout", "int")}


def glued_diagnostic(source: Source, keyword: Token) -> Diagnostic:
    """``inn`` where ``in`` goes: one word, said whole, with the keyword expected; ``inot``
    misspells ``inout`` rather than ``in``, which it only begins with."""
    word = WORD.match(source.text, keyword.start_pos).group()
    after = word[len(keyword):]
    longer_ones = _LONGER_KEYWORDS.get(str(keyword), ())
    longer = None if word in longer_ones else did_you_mean(word, (str(keyword), *longer_ones))
    if longer is not None and longer != keyword:  # (a keyword of its own where 'in' goes: 'in' it is)
        return Diagnostic(Span(source.path, keyword.line, keyword.column, keyword.line, keyword.column + len(word)),
                          "E100", f"unexpected '{word}'", (), f"did you mean '{longer}'?")
    return Diagnostic(Span(source.path, keyword.line, keyword.column, keyword.line, keyword.column + len(word)),
                      "E100", f"unexpected '{word}'", (f"expected '{keyword}'",),
                      f"did you mean '{keyword}'? (or '{keyword} {after}': a keyword is a word of its own)"
                      if WORD.fullmatch(after) and _parses_apart(source.text, keyword)
                      else f"did you mean '{keyword}'?")


def _parses_apart(text: str, keyword: Token) -> bool:
    """Whether ``text`` with a space after ``keyword`` (``in n`` for ``inn``) parses past the token
    after the word it began: ``in out k`` does not (``out`` is a name there, and ``k`` cannot follow)."""
    split = keyword.end_pos
    text = f"{text[:split]} {text[split:]}"
    following = re.compile(r"\w*\s*").match(text, split + 1).end()  # the token after the word
    try:
        lark_parser().parse(text)
    except UnexpectedEOF:  # all of it read
        return True
    except UnexpectedInput as error:
        return error.pos_in_stream > following
    except GluedKeyword as glued:
        return glued.keyword.start_pos > following
    return True


def _misspelt_word(path: str, line: int, before: str, called: bool = False, declared=(),
                   in_block: bool = False) -> Diagnostic | None:
    """A keyword misspelt where one goes (``matrx A``, ``fro k``): said at the word, which the
    parser read as a name (``called``: a called kernel's, unless the file ``declared`` a kernel of
    that name: its call lacks its '('), not at the token after it; ``in_block``: inside a
    program's braces, where the file's own keywords (``use``, ``kernel``, ``program``) do not go."""
    found = _NAME_BEFORE.search(before)
    if found and (called and found.group(1) in declared or found.group(1) in _grammar_keywords()):
        return None  # (a keyword where it cannot go, 'or' after a requirement's message: no misspelling)
    close = _misspelt_keyword(before, found.group(1), called, in_block) if found else None
    if close is None:
        return None
    return Diagnostic(Span(path, line, found.start(1) + 1, line, found.end(1) + 1), "E100",
                      f"'{found.group(1)}' is not a keyword", (), f"did you mean '{close}'?")


def _misspelt_keyword_token(token: Token, terminals: frozenset) -> str | None:
    """The expected keyword that an unexpected word misspells (``progam`` at the top of a file)."""
    if not str(token).isidentifier():
        return None
    words = [word for terminal in terminals for word in _TERMINAL_WORDS.get(terminal, (_keyword_of(terminal),)) if word]
    if _OTHER_LANGUAGES_WORDS.get(str(token)) in words:  # import "k.py": another language's word for ours
        return _OTHER_LANGUAGES_WORDS[str(token)]
    return did_you_mean(str(token), words)


#: other languages' words for a keyword, where the keyword goes (no misspelling: no closeness finds them)
_OTHER_LANGUAGES_WORDS = {"import": "use", "include": "use", "def": "kernel", "function": "kernel", "fn": "kernel",
                          "func": "kernel"}


#: terminals that are one of several words (a pattern, not a keyword of their own)
_TERMINAL_WORDS = {"VALUE_TYPE": ("int", "float", "char")}


# -- habits of other languages: what the language writes instead
def _keyword_in_capitals(text: str, token: Token) -> str | None:
    """``AND`` for ``and``, ``Step`` for ``step``: a keyword in capitals is a name to the lexer.
    Said only where the keyword in lower case parses on past it (the hint is then the fix)."""
    word = str(token)
    if token.type != "NAME" or word.islower() or word.lower() not in _grammar_keywords():
        return None
    return f"keywords are lower case: write '{word.lower()}'" if _parses_past(text, token, word.lower()) else None


def _parses_past(text: str, token: Token, replacement: str) -> bool:
    """Whether ``text`` with ``token`` replaced by ``replacement`` parses on past the replacement."""
    end = token.start_pos + len(replacement)
    try:
        lark_parser().parse(text[:token.start_pos] + replacement + text[token.end_pos:])
    except UnexpectedEOF:  # all of it read
        return True
    except UnexpectedInput as error:
        return error.pos_in_stream >= end
    except GluedKeyword as glued:
        return glued.keyword.start_pos >= end
    return True


#: the words of statements other languages have and this one does not, and what to do instead
_NO_SUCH_STATEMENT = {
    "return": "a program runs its statements to the end of its block: put those to skip in an 'if'",
    "break": "a loop runs all its iterations: narrow its bounds, or put its statements in an 'if'",
    "continue": "a loop runs all its iterations: put the statements to skip in an 'if'"}


def _no_such_statement(source: Source, line: int, before: str, accepts: frozenset) -> Diagnostic | None:
    """``return``, ``break``, ``continue``: read as a kernel's name awaiting its '(' (the token
    after it on its line, or the next line's first). Said at the word, unless a kernel has its name."""
    if accepts != {"LPAR"}:
        return None
    if not before.strip():  # the word ends the line before (the one the token's line follows)
        lines = source.text.split("\n")
        line = next((number for number in range(line - 1, 0, -1) if _code(lines[number - 1]).strip()), 0)
        before = lines[line - 1] if line else ""
    word = _NAME_BEFORE.search(_code(before))
    if (word is None or word.group(1) not in _NO_SUCH_STATEMENT or _NAMING.search(before[:word.start(1)].rstrip())
            or word.group(1) in _DECLARED_KERNEL.findall(source.text)):
        return None
    return Diagnostic(Span(source.path, line, word.start(1) + 1, line, word.end(1) + 1), "E100",
                      f"there is no '{word.group(1)}' statement", (), _NO_SUCH_STATEMENT[word.group(1)])


#: the tokens that begin a statement or a declaration, which a program's block takes
_BLOCK_WORDS = frozenset({"FOR", "IF", "LET", "RELEASE", "PARAM", "MATRIX", "WORKSPACE", "CHECK", "REQUIRE", "TILING"})


def _program_closed_before(text: str, token: Token, after: str) -> tuple[str, ...]:
    """A note where a '}', a statement or a declaration comes after the program's block has
    closed (a '}' too many closed it early): where the program's '{' was closed."""
    call = token.type == "NAME" and after.lstrip().startswith("(")
    if not (token == "}" or token.type in _BLOCK_WORDS or call):
        return ()
    depth, opened, pair = 0, None, None
    for number, row in enumerate(text[:token.start_pos].split("\n"), 1):
        for column, char in _outside_strings(_code(row)):
            if char == "{":
                opened = opened if depth else (number, column + 1)
                depth += 1
            elif char == "}" and depth:
                depth -= 1
                pair = (opened, (number, column + 1)) if depth == 0 else pair
    if depth or pair is None:
        return ()
    (line, column), (closed_line, closed_column) = pair
    closed = (f"the program's '{{' at {line}:{column} is closed by the '}}' at {closed_line}:{closed_column}: "
              f"{text.split(chr(10))[closed_line - 1].strip()}",)
    return closed + _surplus_brace(text[:token.start_pos])


def _surplus_brace(text: str) -> tuple[str, ...]:
    """The note naming the '}' that is likely one too many (tester x: `} }` for `}` inside the program was
    not located): the first that closes a '{' of an earlier line indented otherwise than its own line (a
    program is indented as it nests); none where every brace matches its line's indentation."""
    lines, opened = text.split("\n"), []  # (line, column from 1, indent of its line)
    for number, row in enumerate(lines, 1):
        code = _code(row)
        indent = len(code) - len(code.lstrip(" \t"))
        for column, char in _outside_strings(code):
            if char == "{":
                opened.append((number, column + 1, indent))
            elif char == "}" and opened:
                line, start, expected = opened.pop()
                if line != number and indent != expected:
                    return (f"the '}}' at {number}:{column + 1} closes the '{{' at {line}:{start}, whose line is "
                            f"indented otherwise: one '}}' too many? {_quoted(row, column + 1)}",)
    return ()


def _dot_hint(before: str, after: str) -> str | None:
    """A '.' where none goes, not a number's: ``0 ... n`` (a range has two dots), ``A[i, j].T``."""
    if before.endswith(".."):
        return "a range is written with two dots: START .. STOP"
    if _code(before).rstrip().endswith("]") and _TRANSPOSE.match(after):
        return "a transpose is a kernel's option, not an attribute: pass the tile, and the kernel's char argument " \
               "(gemm's transa = \"T\")"
    return None


_TRANSPOSE = re.compile(r"\s*(?:T|H|t|mT|transpose|conj)\b")


def _habit_hint(before: str, token: Token, after: str, accepts: frozenset) -> str | None:
    """What the language writes for a form of another one (an assignment, a C loop, a statement's
    parentheses), from the text ``before`` and ``after`` the unexpected ``token`` on its line and
    the terminals the parser ``accepts`` there: each rule asks for the parser's state as well as the
    text, so that it speaks only where the form it names is what failed."""
    code, rest = _code(before), _code(after)
    for rule in _HABITS:
        hint = rule(code, token, rest, accepts)
        if hint is not None:
            return hint
    return None


_NO_ASSIGNMENT = "there is no assignment: a 'let' binds a name once, and tiles change only through kernel calls"
#: ``= VALUE`` after a name's indices, up to the value's first word: ``A[0, 0] = 0``, ``B[n, n] = random``
_INDEXED_ASSIGNMENT = re.compile(r"([^\[\]]*)\]\s*(?:[-+*/%]|//|\*\*)?=(?!=)\s*(\w*)")


def _assignment_hint(code: str, token: Token, after: str, accepts: frozenset) -> str | None:
    """``x = 1``, ``x += 1``, ``x++``, ``A[0, 0] = 0``: a name that begins a statement, read as a
    kernel's (awaiting its '('), then an assignment's sign. A matrix declared without its word
    (``B[n, n] = random spd``) says so."""
    name = _NAME_BEFORE.search(code)
    if accepts != {"LPAR"} or name is None or _NAMING.search(code[:name.start(1)].rstrip()):
        return None
    if token == "[":
        target = _INDEXED_ASSIGNMENT.match(after)
        if target and target.group(2) in (*_INITS, *NAMED_INITS):
            return f"declare a matrix with the word 'matrix': matrix {name.group(1)}[{target.group(1)}] = ..."
        return _NO_ASSIGNMENT if target else None
    compound = token.type in ("PLUS", "MINUS", "MUL_OP", "SLASH", "POW") and re.match(r"=(?!=)", after)
    stepped = token in ("+", "-") and after.startswith(str(token))  # x++, x--
    return _NO_ASSIGNMENT if token == "=" or compound or stepped else None


def _tile_form_hint(code: str, token: Token, after: str, accepts: frozenset) -> str | None:
    """A tile named by one index or three (``A[k]``, ``A[k][k]``, ``A[k, k, 0]``), or indexed
    again with no range (``A[0, 0][0]``); a matrix declared with one size or three."""
    index = _OPEN_TILE_INDEX.search(code)
    if index is not None:
        commas = _top_level_commas(index.group(1))
        if (token == "]" and accepts == {"COMMA"} and commas == 0) or (token == "," and accepts == {"RSQB"}
                                                                        and commas == 1):
            name = re.match(r"\w+", index.group()).group()
            if re.search(r"\bmatrix\s*$", code[:index.start()]):
                return f"a matrix is declared with its rows and columns: matrix {name}[ROWS, COLUMNS]"
            return f"a tile is named {name}[i, j]: its tile row and tile column"
    part = _PART_OPEN.search(code)
    if part is not None and accepts == {"COLON"} and token in ("]", ","):
        name = re.match(r"\w+", part.group(1)).group()
        return (f"a tile is named {name}[i, j]; a part of it is ranges of rows and columns: "
                f"{part.group(1)}[r0 : r1, c0 : c1]")
    return None


#: a tile's sub-range opened and left open, and the tile (``A[0, 0][0``)
_PART_OPEN = re.compile(r"(?<![\w.\]])([A-Za-z_]\w*\s*\[[^\[\]]*\])\s*\[[^\[\]]*$")


def _top_level_commas(text: str) -> int:
    """The commas of ``text`` outside its parentheses (``min(k, 1), k`` has one)."""
    depth, commas = 0, 0
    for char in text:
        depth += (char == "(") - (char == ")")
        commas += char == "," and depth == 0
    return commas


#: a loop's header the text ends in (no brace since 'for'), with what follows 'for'
_FOR_HEADER = re.compile(r"\bfor\b([^{}]*)$")


def _loop_form_hint(code: str, token: Token, after: str, accepts: frozenset) -> str | None:
    """A loop's header in another language's form: ``for (k = 0; k < n; k++)``, ``for k = 0 .. n``,
    ``for k in 0 : n``, ``.. n by 2``, ``step=2``, ``.. n:``. Said where the header's next part
    (its variable, 'in', '..', 'step' or '{') or the step's value was due."""
    header = _FOR_HEADER.search(code)
    if header is None:
        return None
    # (its block's '{' due: whatever came instead is no part of a header, 'by 2' or a ':')
    due = ((accepts == {"NAME"} and not header.group(1).strip()) or "IN" in accepts or _terminal("..") in accepts
           or "LBRACE" in accepts or (token in ("=", ":") and code.rstrip().endswith("step")))
    if not due:
        return None
    # an operand the header's 'step' or '{' follows, after another: 0 .. 2 A.mt {, step 2 1 { (or, '..'
    # due, its stop after its start: 0 A.nt {)
    operand = re.match(r"(?:\s*\.\s*[A-Za-z_]\w*)?\s*(?:\{|step\b)", after)
    operator = operand and (_separator_hint(code, token, after, accepts)
                            or _operator_between_hint(code, str(token), after, accepts))
    if operator:
        return operator
    variable = re.match(r"\s*\(?\s*([A-Za-z_]\w*)", header.group(1) if header.group(1).strip() else after)
    return f"write the loop as for {variable.group(1) if variable else 'k'} in START .. STOP [step S] {{ ... }}"


#: an operand (a name, a number or a closing parenthesis) and a space ending a line's code so far
_OPERAND_ENDS = re.compile(r"(?:(?<![\w.])([A-Za-z_]\w*|\d+(?:\.\d*)?)|\))\s+$")


def _innermost_open(code: str) -> int | None:
    """The column of the innermost '(' or '[' of ``code`` still open at its end (strings skipped), or None."""
    opened: list = []
    for column, char in _outside_strings(code):
        if char in "([":
            opened.append(column)
        elif char in ")]" and opened:
            opened.pop()
    return opened[-1] if opened else None


def _operator_between_hint(before: str, token: str, after: str, terminals: frozenset) -> str | None:
    """Two operands with nothing between them in an expression (``priority 3 (A.nt - k)``, ``(k + 1)
    (k + 2)``, ``if k A.mt``, ``A[2 k, k]``): an operator missing before the second, or in a tile's
    indices or a call's arguments a ',' (``A[k k]``, ``min(k 2, 3)``)."""
    code = _code(before)
    first = _OPERAND_ENDS.search(code)
    keywords = _grammar_keywords()
    if first is None or first.group(1) in keywords or token.lower() in keywords:
        return None  # (a keyword in capitals, 'if k == 0 IN k', is no operand meant)
    opened = _innermost_open(code)
    in_index = opened is not None and code[opened] == "["
    in_arguments = opened is not None and code[opened] == "(" and re.search(r"\w\s*$", code[:opened]) is not None
    if not ("PLUS" in terminals or in_index or _EXPRESSION_LINE.match(code) and "COMMA" not in terminals):
        return None  # (a kernel's parameters, a call's tiles: a ',' is as likely)
    if not re.fullmatch(r"[A-Za-z_]\w*|\d+(?:\.\d*)?|\(", token):
        return None
    query = re.match(r"\s*\.\s*[A-Za-z_]\w*", after) if token != "(" else None
    second = token + ("".join(query.group().split()) if query else "")
    comma = (", or ',' if it begins the next index" if in_index else ", or ',' between two arguments" if in_arguments
             else "")
    condition = _CONDITION_OPEN.search(code)
    if condition and not comma and not re.search(r"[<>=!]=?", condition.group()):  # if k A.mt {: k < A.mt, likely
        return _COMPARISON_MISSING.format(second)
    return _OPERATOR_MISSING.format(second) + comma


@lru_cache(maxsize=None)
def _terminal(text: str) -> str | None:
    """The grammar's terminal for the literal ``text`` ('..' is an anonymous one)."""
    return next((t.name for t in lark_parser().terminals if t.pattern.type == "str" and t.pattern.value == text), None)


#: what begins a statement: a keyword, or a kernel's name and its '('
_STATEMENT_BEGINS = re.compile(r"(?:for|if|let|release)\b|[A-Za-z_]\w*\s*\(")


def _if_block_hint(code: str, token: Token, after: str, accepts: frozenset) -> str | None:
    """``if (k == 0) potrf(...)``, ``if k == 0:``, ``if k == 0 then``: an if's statements go in braces."""
    if "LBRACE" not in accepts or not re.search(r"\bif\b[^{}]*$", code):
        return None
    if token in (":", "then") or _STATEMENT_BEGINS.match(str(token) + after):
        return "an 'if' takes its statements in braces: if CONDITION { ... }"
    return None


def _shape_hint(code: str, token: Token, after: str, accepts: frozenset) -> str | None:
    """``A.shape[0]``: a matrix's sizes are its queries."""
    shape = re.search(r"(?<![\w.])([A-Za-z_]\w*)\s*\.\s*shape\s*$", code)
    if token != "[" or shape is None:
        return None
    matrix = shape.group(1)
    return f"a matrix's sizes are {matrix}.m and {matrix}.n (rows, columns), {matrix}.mt and {matrix}.nt (tiles)"


def _release_hint(code: str, token: Token, after: str, accepts: frozenset) -> str | None:
    """``release(A[k, k])``: a statement, not a call."""
    if token != "(" or not re.search(r"\brelease\s*$", code):
        return None
    tile = re.match(r"\s*([A-Za-z_]\w*\s*\[[^\[\]]*\])\s*\)", after)
    return f"write release {tile.group(1) if tile else 'A[i, j]'}: a release takes no parentheses"


def _path_hint(code: str, token: Token, after: str, accepts: frozenset) -> str | None:
    """``use k.py``, ``load a.npy``: a path is a string."""
    word = re.search(r"\b(use|load)\s*$", code)
    if accepts != {"STRING"} or word is None or token.type == "STRING":
        return None
    path = re.match(r"[^\s\"#(){}\[\],]+", str(token) + after)
    return f'a path is a string: {word.group(1)} "{path.group() if path else "FILE"}"'


def _check_hint(code: str, token: Token, after: str, accepts: frozenset) -> str | None:
    """``check cholesky A``: a check's arguments go in parentheses. Not where a '(' follows the word
    after the name (``check fro k(A)``: a name in two words, not arguments)."""
    check = re.search(r"\bcheck\s+([A-Za-z_]\w*)\s*$", code)
    if accepts != {"LPAR"} or check is None or token.type != "NAME" or re.match(r"\s*\(", after):
        return None
    rest = (str(token) + after).strip()
    return f"a check's arguments go in parentheses: check {check.group(1)}({rest if WORD.fullmatch(rest) else '...'})"


def _require_hint(code: str, token: Token, after: str, accepts: frozenset) -> str | None:
    """``require q > 0, "why"``: the message follows the condition without a comma."""
    if token == "," and "STRING" in accepts and re.search(r"\brequire\b[^{}]*$", code) and after.lstrip()[:1] == '"':
        return "drop the ',': require CONDITION \"MESSAGE\""
    # the condition goes on after the message: require n >= 1 "why" and nb >= 1
    split = re.match(r'\s*require\s+([^"{}]+?)\s*("[^"]*")\s*((?:and|or)\b[^"{}#]*?)\s*(?:#.*)?$',
                     code + str(token) + after)
    if split:
        return (f"the message ends the requirement: write the whole condition before it, require "
                f"{split.group(1)} {split.group(3)} {split.group(2)}")
    return None


def _tiling_hint(code: str, token: Token, after: str, accepts: frozenset) -> str | None:
    """``tiling uniform(256)``: a tiling's settings are named; ``tiling uniform nb = 64``: they go in
    parentheses; ``tiling(nb = 64)``: the tiling's kind comes first."""
    bare = re.match(r"\s*tiling\s+([A-Za-z_]\w*)\s+([A-Za-z_]\w*)\s*$", code)
    if bare and token in ("=", ":"):
        value = re.match(r"\s*([\w.]+)", after)
        return (f"a tiling's settings go in parentheses: tiling {bare.group(1)}({bare.group(2)} = "
                f"{value.group(1) if value else '...'})")
    if re.match(r"\s*tiling\s*$", code) and token == "(":
        kinds = " or ".join(f"tiling {kind}({', '.join(f'{setting} = ...' for setting in settings)})"
                            for kind, settings in TILING_SETTINGS.items())
        return f"name the tiling's kind before its settings: {kinds}"
    tiling = re.search(r"\btiling\s+([A-Za-z_]\w*)\s*\(([^()]*)$", code)
    if tiling is None or "NAME" not in accepts or token.type == "NAME":
        return None
    settings, position = TILING_SETTINGS.get(tiling.group(1), ()), tiling.group(2).count(",")
    if not settings:
        return "a tiling's settings are named: NAME = VALUE"
    value = str(token) if token.type in ("INT", "FLOAT") else "..."
    named = ", ".join(f"{setting} = {value if number == position else '...'}"
                      for number, setting in enumerate(settings))
    return f"a tiling's settings are named: {tiling.group(1)}({named})"


def _named_argument_hint(code: str, token: Token, after: str, accepts: frozenset) -> str | None:
    """``alpha: 2.0`` for ``alpha = 2.0`` in a call's or a check's arguments."""
    name = re.search(r"[(,]\s*([A-Za-z_]\w*)\s*$", code)
    if token != ":" or "EQUAL" not in accepts or name is None:
        return None
    value = re.match(r"\s*([\w.\"+-]+)\s*[,)]", after)
    return f"a named argument takes '=': {name.group(1)} = {value.group(1) if value else '...'}"


#: the start of a kernel's parameter: after its '(' or a ','
_PARAMETER_SLOT = re.compile(r"\bkernel\s+[A-Za-z_]\w*\s*\((?:[^()]*,)?\s*$")
#: other languages' types for a value parameter, and the language's
_OTHER_TYPES = {"double": "float", "real": "float", "float32": "float", "float64": "float", "long": "int",
                "integer": "int", "int32": "int", "int64": "int", "size_t": "int", "bool": "int", "string": "char",
                "str": "char", "character": "char"}


def _kernel_parameter_hint(code: str, token: Token, after: str, accepts: frozenset) -> str | None:
    """A kernel's parameter with another language's type (``double alpha``), or a bare name (``A``)."""
    if token.type != "NAME" or "VALUE_TYPE" not in accepts or not _PARAMETER_SLOT.search(code):
        return None
    word = str(token)
    if word in _OTHER_TYPES and re.match(r"\s+[A-Za-z_]", after):
        return f"write '{_OTHER_TYPES[word]}': a value parameter is an int, a float or a char"
    if re.match(r"\s*[,)]", after):
        return f"a parameter needs a mode or a type: 'inout {word}' for a tile, 'float {word}' for a value"
    return None


def _kernel_body_hint(code: str, token: Token, after: str, accepts: frozenset) -> str | None:
    """``kernel f(inout A) { ... }``: a kernel's body is Python, in the kernel module."""
    if token in ("{", ":") and "FLOPS" in accepts and re.search(r"\bkernel\s+[A-Za-z_]\w*\s*\(.*\)\s*$", code):
        return "a kernel's body is a Python function, in the module 'use \"FILE.py\"' names: its declaration " \
               "ends at ')'"
    return None


_STATEMENT_OF_LINE = re.compile(r"[^{};]*$")  # the statement the text ends in: after the last brace
_SEPARATED_UP_TO = re.compile(r"[^{}#]*?(?=\s*(?:\{|\}|\bpriority\b|$))")  # what follows: up to a brace or priority


def _separator_hint(code: str, token: Token, after: str, accepts: frozenset) -> str | None:
    """Two words with nothing between them where the statement's form has a word of its own, not an
    operator (which the parser does not take there): ``let x 3`` and ``param q 2`` ('='), ``for j in 0
    A.nt`` ('..'), ``potrf A[k, k]`` ('('). Said with the statement as it reads once mended."""
    if _terminal("+") in accepts:
        return None
    statement = _STATEMENT_OF_LINE.search(code).group().strip()
    rest = f"{token}{_SEPARATED_UP_TO.match(after).group()}".strip()
    typed = re.fullmatch(r"(let|param)\s+(int|float|char|" + "|".join(_OTHER_TYPES) + ")", statement)
    if _terminal("=") in accepts and typed:  # param float alpha = 2.0
        return f"a {typed[1]} takes its type from its value, and has no type word: {typed[1]} {rest}"
    if _terminal("=") in accepts and re.fullmatch(r"(let|param)\s+[A-Za-z_]\w*", statement):
        return f"a {statement.split()[0]} binds its name with '=': {statement} = {rest}"
    bound = re.fullmatch(r"((let|param)\s+[A-Za-z_]\w*)\s*=", statement)
    if bound and str(token) == "=":  # let x == 3: the lexer took '=' and then '=' where a value was due
        return f"a {bound[2]} binds its name with one '=': {bound[1]} = {_SEPARATED_UP_TO.match(after).group().strip()}"
    if _terminal("..") in accepts and re.match(r"for\b", statement):
        return f"a loop's range is START .. STOP: {statement} .. {rest}"
    if accepts == {_terminal("(")} and re.fullmatch(r"[A-Za-z_]\w*", statement) and statement not in KEYWORDS \
            and re.match(r'[\w"\[-]', str(token)):  # what follows could be an argument (not 'then, trsm(...)')
        bracketed = re.fullmatch(r"\[(.*)\]", rest)  # potrf[A[k, k]]
        return f"a call's arguments go in parentheses: {statement}({bracketed.group(1) if bracketed else rest})"
    return None


def _else_block_hint(code: str, token: Token, after: str, accepts: frozenset) -> str | None:
    """``} else potrf(A[k, k])``: an else's statements go in braces, as an if's."""
    if not re.search(r"\belse\s*$", code) or not accepts <= {"IF", "LBRACE"}:
        return None
    return f"an else takes braces: else {{ {f'{token}{_SEPARATED_UP_TO.match(after).group()}'.strip()} }}"


def _priority_equals_hint(code: str, token: Token, after: str, accepts: frozenset) -> str | None:
    """``potrf(A[k, k]) priority = 3``: a priority is its word and an expression."""
    if str(token) != "=" or not re.search(r"\bpriority\s*$", code):
        return None
    return f"write priority {_SEPARATED_UP_TO.match(after).group().strip() or 'EXPRESSION'} (no '=')"


_C_SUFFIXES = frozenset({"f", "F", "d", "D", "l", "L", "u", "U", "ul", "UL", "f32", "f64"})


def _number_suffix_hint(code: str, token: Token, after: str, accepts: frozenset) -> str | None:
    """``alpha = 1.0f``: a C or Rust literal's type suffix."""
    number = re.search(r"(?<![\w.])(\d+(?:\.\d*)?)$", code)  # touching the suffix: no space between
    if number is None or str(token) not in _C_SUFFIXES:
        return None
    return f"a number takes no type suffix: write {number[1]}"


def _query_called_hint(code: str, token: Token, after: str, accepts: frozenset) -> str | None:
    """``A.nt()``: a matrix's count or size is a number, not a function."""
    query = re.search(r"\b([A-Za-z_]\w*)\s*\.\s*(mt|nt|m|n)\s*\($", code)
    if query is None or str(token) != ")":
        return None
    return f"{query[1]}.{query[2]} is a number, not a function: write {query[1]}.{query[2]}"


_PROGRAM_WORDS = frozenset({*_DECLARATIONS, "for", "if", "let", "release"})


def _outside_a_program_hint(code: str, token: Token, after: str, accepts: frozenset) -> str | None:
    """``matrix A[n, n] = ...`` (or a loop) before ``program p {`` or after its '}': it belongs inside."""
    if str(token) not in _PROGRAM_WORDS or not accepts <= {"KERNEL", "PROGRAM", "USE"}:
        return None
    return f"'{token}' goes inside a program's braces: program NAME {{ {token} ... }}"


_HABITS = (_tiling_hint, _shape_hint, _assignment_hint, _tile_form_hint, _loop_form_hint, _if_block_hint, _release_hint,
           _path_hint, _check_hint, _require_hint, _named_argument_hint, _kernel_parameter_hint, _kernel_body_hint,
           _separator_hint, _else_block_hint, _priority_equals_hint, _number_suffix_hint, _query_called_hint,
           _outside_a_program_hint)


#: Why a loop nest cannot read matrix values, and what to do instead
_FIXED_GRAPH = "a loop nest's control (its loop bounds, conditions and lets) cannot depend on matrix values: the " \
               "task graph is fixed by the parameters before the run"
_IN_PYTHON = "to repeat until a result converges (a norm, a residual), call prog.run in a Python loop and test " \
             "the matrices it returns"
_WHILE = re.compile(r"(?:^|[\s{}])(while)\b[^{}]*$")
_NAME_BEFORE = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*$")


def _value_dependent(source: Source, line: int, before: str, token: Token, in_expression: bool) -> Diagnostic | None:
    """The syntax error of a loop nest that would depend on matrix values, from the text ``before``
    the unexpected ``token`` on its line: a ``while`` loop, a tile read as a value in an expression
    (``if s[0, 0] > 0``)."""
    path = source.path
    loop = _WHILE.search(before)
    if loop:
        return Diagnostic(Span(path, line, loop.start(1) + 1, line, loop.end(1) + 1), "E100",
                          "there is no 'while' loop", (_FIXED_GRAPH,),
                          f"loop with 'for VAR in START .. STOP', whose bounds are known when the run starts; "
                          f"{_IN_PYTHON}")
    name = _NAME_BEFORE.search(before)
    call = re.search(r"([A-Za-z_]\w*)\s*\(\s*\(\s*$", before[:name.start(1)]) if name else None
    if token == "[" and in_expression and call and call.group(1) not in KEYWORDS:
        return Diagnostic(Span(path, line, name.start(1), line, name.start(1) + 1), "E100",  # kernel((A[k, k]))
                          "a tile argument takes no parentheses", (),
                          f"pass it as {name.group(1)}[...], without the '(' before it")
    if token == "[" and name and in_expression:
        return _indexed_in_an_expression(source, line, before, name, token)
    return None


def _indexed_in_an_expression(source: Source, line: int, before: str, name: re.Match, token: Token) -> Diagnostic:
    """``NAME[`` in an expression (``name`` matched in the text ``before`` the '[' on its line): a
    matrix's tile read as a value, which neither a loop nest's control nor a kernel's value argument
    can do; else a name that is no matrix (said as the analysis says it of a tile argument) or none
    the program knows."""
    word = name.group(1)
    earlier = source.text[:token.start_pos]
    kinds = _names_in_scope(source.text, earlier)
    kind = kinds.get(word)
    if kind is None:
        close = did_you_mean(word, kinds)
        return Diagnostic(Span(source.path, line, name.start(1) + 1, line, name.end(1) + 1), "E200",
                          f"unknown name '{word}'", (f"did you mean '{close}'?",) if close else ())
    if kind not in ("matrix", "workspace"):
        return Diagnostic(Span(source.path, line, name.start(1) + 1, line, name.end(1) + 1), "E205",
                          f"'{word}' is a {kind}, not a matrix")
    span = Span(source.path, line, name.start(1) + 1, line, len(before) + 2)
    if _in_value_argument(_code_tokens(earlier)):
        return Diagnostic(span, "E100", f"{word}[...] is a tile, not a value", (_TASK_VALUES,),
                          "pass the tile as a tile argument, and read its entries in the kernel")
    return Diagnostic(span, "E100", f"{word}[...] is a tile, not a value", (_FIXED_GRAPH,),
                      f"pass the tile to a kernel; {_IN_PYTHON}")


#: Why a kernel's value argument cannot read a matrix entry
_TASK_VALUES = "a kernel's value arguments are computed as the task graph is built, before any task runs: they " \
               "cannot read a tile's entries"
#: The words that declare a name of the program, and the kind the analysis gives it
_DECLARING = {"param": "param", "matrix": "matrix", "workspace": "workspace"}
#: The words after which a name followed by '(' is in an expression (min, max) or a declaration
#: (check, tiling, kernel), not a kernel called by a statement
_NOT_A_STATEMENT_END = frozenset({"if", "in", "step", "priority", "require", "flops", "not", "and", "or", "let", "for",
                                  "check", "tiling", "kernel", "release", "rows", "like", "load", "use", "program",
                                  "else", "param", "matrix", "workspace"})


def _code_tokens(text: str) -> list[str]:
    """The words, numbers, strings and single punctuation characters of ``text``, comments left out."""
    return [token for token in TOKEN.findall(text) if not token.startswith("#")]


def _names_in_scope(text: str, earlier: str) -> dict[str, str]:
    """The names the program in ``text`` declares (n, the tiling's settings, the parameters, matrices
    and workspaces) and the loop variables and lets bound in the blocks still open at the end of
    ``earlier`` (a start of ``text``), each with its kind as the analysis names it."""
    tokens = _code_tokens(text)
    tiling = next((tokens[i + 1] for i in range(len(tokens) - 1) if tokens[i] == "tiling"), "uniform")
    kinds = {name: "param" for name in ("n",) + TILING_SETTINGS.get(tiling, ())}
    for word, following in zip(tokens, tokens[1:]):
        if word in _DECLARING and WORD.fullmatch(following):
            kinds[following] = _DECLARING[word]
    bound, depth = [], 0  # (name, kind, the depth of the block it is bound in)
    earlier_tokens = _code_tokens(earlier)
    for word, following in zip(earlier_tokens, earlier_tokens[1:] + [""]):
        if word in "{}":
            depth += 1 if word == "{" else -1
            bound = [binding for binding in bound if binding[2] <= depth]
        elif word in ("for", "let") and WORD.fullmatch(following):
            # a loop variable is bound in the loop's block, which opens after its bounds
            bound.append((following, "loop" if word == "for" else "let", depth + (word == "for")))
    return kinds | {name: kind for name, kind, _ in bound}


def _in_value_argument(tokens: list[str]) -> bool:
    """Whether the end of ``tokens`` is within a kernel call's arguments (a value argument), rather
    than in a tile's indices, a loop nest's control or a declaration."""
    open_brackets = []  # "call", "parentheses" or "index"
    for index, token in enumerate(tokens):
        if token == "[":
            open_brackets.append("index")
        elif token == "(":
            called = index >= 1 and WORD.fullmatch(tokens[index - 1]) and tokens[index - 1] not in KEYWORDS
            # a kernel's name begins a statement: it follows the end of one, not an operator or a keyword
            statement = index < 2 or tokens[index - 2] in "{})]" or (tokens[index - 2][0] in '"0123456789') or (
                WORD.fullmatch(tokens[index - 2]) and tokens[index - 2] not in _NOT_A_STATEMENT_END)
            open_brackets.append("call" if called and statement else "parentheses")
        elif token in ")]" and open_brackets:
            open_brackets.pop()
    innermost = next((kind for kind in reversed(open_brackets) if kind != "parentheses"), None)
    return innermost == "call"


def _end_position(source: Source) -> tuple[int, int]:
    lines = source.text.split("\n")
    return len(lines), len(lines[-1]) + 1


#: the most words a note of what was expected lists; past it, how many more it leaves out
_MOST_EXPECTED = 20


def _join(words: list[str]) -> str:
    if len(words) > _MOST_EXPECTED:  # (cut silently, the list left out words the parser takes: 'workspace', '}')
        words = words[:_MOST_EXPECTED - 1] + [f"{len(words) - _MOST_EXPECTED + 1} more"]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]
