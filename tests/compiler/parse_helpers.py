"""Helpers of the parser's tests: parse a text, the span of a node or of a needle in the text."""
import pytest

from tiledsl.compiler import nodes as n
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



def syntax_error(text: str):
    with pytest.raises(SourceError) as raised:
        parse_text(text)
    d = raised.value.diagnostic
    assert d.code == "E100"
    return d
