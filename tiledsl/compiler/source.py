"""Source text and spans: where a piece of a ``.tile`` program came from.

Reading a file is the first place a user mistake can surface (missing path, a
directory, bytes that are not UTF-8, NUL characters), so :func:`read_source`
turns each of those into a :class:`~tiledsl.compiler.diagnostics.Diagnostic` instead of
an exception.
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from .diagnostics import Diagnostic


@dataclass(frozen=True)
class Span:
    """A region of a source file: 1-based line and column of its start and end."""

    path: str
    line: int
    column: int
    end_line: int
    end_column: int

    @classmethod
    def point(cls, path: str, line: int, column: int) -> "Span":
        return cls(path, line, column, line, column + 1)

    @classmethod
    def whole(cls, path: str) -> "Span":
        """The whole file, for problems with no single position (line 0)."""
        return cls(path, 0, 0, 0, 0)


@dataclass(frozen=True)
class Source:
    """The decoded text of one ``.tile`` file, with newlines normalised to ``\\n``."""

    path: str
    text: str
    lone_returns: tuple = ()  # lines a lone CR ended in a file whose other lines end in LF (or CRLF)

    @cached_property
    def lines(self) -> list[str]:
        return self.text.split("\n")  # once: each diagnostic's excerpt split the whole text again

    def line_text(self, line: int) -> str:
        return self.lines[line - 1] if 1 <= line <= len(self.lines) else ""

    def span_at(self, offset: int) -> Span:
        """The one-character span at character ``offset``."""
        line = self.text.count("\n", 0, offset) + 1
        column = offset - (self.text.rfind("\n", 0, offset) + 1) + 1
        return Span.point(self.path, line, column)


class SourceError(Exception):
    """A file that cannot be read as a ``.tile`` program; carries its diagnostic, and the text
    its excerpt shows where there is one."""

    def __init__(self, diagnostic, source: Source | None = None):
        super().__init__(diagnostic.message)
        self.diagnostic, self.source = diagnostic, source


#: byte-order marks of the encodings an editor or a shell may save a program in instead of UTF-8 (PowerShell's
#: ``>`` writes UTF-16), longest first: UTF-32's little-endian mark begins as UTF-16's
_OTHER_ENCODINGS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
                    (b"\xfe\xff", "UTF-16"))


def marked_encoding(data: bytes) -> str | None:
    """The encoding other than UTF-8 whose byte-order mark ``data`` begins with ("UTF-16"), or None."""
    return next((name for mark, name in _OTHER_ENCODINGS if data.startswith(mark)), None)


def unmarked_utf16(data: bytes) -> bool:
    """Whether ``data`` reads as ASCII text saved as UTF-16 without a byte-order mark: a NUL
    beside every character."""
    return len(data) >= 4 and (not any(data[1::2]) or not any(data[0::2]))


def decode(path: str, data: bytes) -> Source:
    """Decode ``data`` as UTF-8 program text, or raise :class:`SourceError`."""
    encoding = marked_encoding(data)
    if encoding is not None:  # said of the whole file: its first line, a NUL every other byte, says nothing
        raise SourceError(Diagnostic(
            Span.whole(path), "E001", f"file is {encoding} text (it begins with a {encoding} byte-order mark), "
                                      f"not UTF-8",
            hint=f"save the program as UTF-8 (an editor's encoding setting; PowerShell's Out-File -Encoding utf8; "
                 f"Python: text = open(path, encoding='{encoding.lower()}').read(), then open(path, 'w', "
                 f"encoding='utf-8').write(text))"))
    try:
        text = data.decode("utf-8")
        source = Source(path, _as_program_text(text), _lone_returns(text))
    except UnicodeDecodeError as error:
        # the position in the text as read (a byte-order mark dropped, line ends as LF), in characters
        shown = Source(path, _as_program_text(data.decode("utf-8", errors="replace")))
        before = len(_as_program_text(data[:error.start].decode("utf-8")))
        raise SourceError(Diagnostic(
            shown.span_at(before), "E001", f"file is not UTF-8 text (byte 0x{data[error.start]:02x} cannot be decoded)",
            hint="save the program as UTF-8"), shown) from None
    nul = source.text.find("\0")
    if nul >= 0:
        raise SourceError(Diagnostic(source.span_at(nul), "E001",
                                     "NUL character in program text; is this a binary file?",
                                     hint="it reads as UTF-16 text without a byte-order mark: save the program as "
                                          "UTF-8" if unmarked_utf16(data) else None), source)
    return source


def _lone_returns(text: str) -> tuple:
    """The lines (1-based, as the compiler reads them) that a lone CR ends in a file whose other lines end
    in LF or CRLF: the compiler ends a line there, as Python reads files, where an editor set to LF shows
    one line (and a comment before it, seeming to hold what follows, does not)."""
    if "\n" not in text or "\r" not in text:
        return ()
    # the line a lone CR ends: one past the LFs (a CRLF's too) and the lone CRs before it
    return tuple(text.count("\n", 0, match.start()) + number + 1
                 for number, match in enumerate(re.finditer(r"\r(?!\n)", text)))


def lone_returns(source: Source) -> list[Diagnostic]:
    """A W308 warning at the end of each line a lone CR ends (:func:`_lone_returns`)."""
    return [Diagnostic(Span.point(source.path, line, len(source.line_text(line)) + 1), "W308",
                       "a lone carriage return (CR) ends this line, in a file whose lines end in LF",
                       ("tiledsl ends a line at it, as Python reads files; an editor may show this line and the next "
                        "as one (and a comment here, seeming to hold what follows, does not)",),
                       hint="end the line with LF, or remove the CR")
            for line in source.lone_returns]


#: the controls that reorder how text is shown (Unicode's embeddings, overrides and isolates): in a comment,
#: they can make the code a reader sees differ from the code that runs ("Trojan Source", CVE-2021-42574)
DIRECTION_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def direction_controls(source: Source) -> list[Diagnostic]:
    """A W305 warning for each comment holding a text direction control (elsewhere the parser refuses one)."""
    found = []
    for number, line in enumerate(source.lines, start=1):
        comment = _comment_start(line)
        controls = [column for column, char in enumerate(line) if char in DIRECTION_CONTROLS and
                    comment is not None and column > comment]
        if controls:
            found.append(Diagnostic(Span.point(source.path, number, controls[0] + 1), "W305",
                                    f"a text direction control (U+{ord(line[controls[0]]):04X}) in a comment",
                                    ("it can show the line in another order than the one it is read in",),
                                    hint="remove it: a comment needs none"))
    return found


def _comment_start(line: str) -> int | None:
    """The column of the '#' that begins the line's comment (outside a string), or None."""
    in_string = False
    for column, char in enumerate(line):
        if char == '"':
            in_string = not in_string
        elif char == "#" and not in_string:
            return column
    return None


def _as_program_text(text: str) -> str:
    """Decoded text as the compiler reads it: a byte-order mark dropped, CRLF and CR line ends as LF."""
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def _neither_file_nor_folder(path: str | Path) -> bool:
    try:
        mode = os.stat(path).st_mode
    except OSError:  # missing, or unreadable: the read says which
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def read_source(path: str | Path, data: bytes | None = None) -> Source:
    """Read and decode a ``.tile`` file (``data``: its bytes, where they were read already), or raise
    :class:`SourceError`."""
    name = str(path)
    if not name:
        raise SourceError(Diagnostic(None, "E000", "the file name is empty: give the path of a .tile file"))
    if data is None and _neither_file_nor_folder(path):  # a pipe with no writer would block the read for ever
        raise SourceError(Diagnostic(Span.whole(name), "E000", "is not a regular file (a device, a pipe or a "
                                     "socket): save the program in a file"))
    try:
        data = Path(path).read_bytes() if data is None else data
    except IsADirectoryError:
        raise SourceError(Diagnostic(Span.whole(name), "E000", "is a directory, not a .tile file")) from None
    except FileNotFoundError:
        raise SourceError(Diagnostic(Span.whole(name), "E000", "no such file")) from None
    except OSError as error:
        raise SourceError(Diagnostic(Span.whole(name), "E000", f"cannot read ({error.strerror})")) from None
    if name.endswith(".py"):  # a compiled driver, or a kernel module: parsed, it was "unexpected '\"\"'"
        driver = data.startswith(b'"""Driver of the tile program')
        raise SourceError(Diagnostic(Span.whole(name), "E000", "is a Python file, not a .tile program",
                                     hint="give the .tile it was compiled from (its first line names it)" if driver
                                     else None))
    return decode(name, data)
