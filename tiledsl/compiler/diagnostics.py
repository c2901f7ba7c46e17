"""Diagnostics as data, and their rendering in the style of rustc / mypy --pretty.

Every compile-time problem is a :class:`Diagnostic` (a span, a code, a message,
notes and an optional hint). Passes collect them in a :class:`DiagnosticBag`;
only the command line turns them into text.
"""
from __future__ import annotations

import difflib
import functools
import re
import sys
import unicodedata
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # spans and sources are only read here: source.py imports this module
    from .source import Source, Span

#: Codes and one-line meanings, listed in the language reference.
CODES = {
    "E000": "the file cannot be read",
    "E001": "the file is not program text",
    "E100": "syntax error",
    "E101": "program nested too deeply",
    "E102": "program too long to parse",
    "E200": "unknown name",
    "E201": "unknown kernel",
    "E202": "wrong number of kernel arguments",
    "E203": "a read-only matrix in a written position",
    "E204": "the same tile passed twice where one is written",
    "E205": "wrong kind of expression (integer or condition expected)",
    "E206": "loop bound is not affine in the loop variables",
    "E207": "a name declared twice or shadowing another",
    "E208": "tile index provably out of range",
    "E209": "invalid declaration",
    "E210": "a kernel that writes nothing",
    "E211": "a value beyond the 64-bit range",
    "E212": "a called kernel the module does not define",
    "E213": "a kernel function that cannot take the kernel's tile arguments",
    "E214": "a divisor that is always zero",
    "W300": "declared but never used",
    "W301": "a loop too long to run",
    "W302": "a loop that never runs",
    "W303": "an index in range at s = 1 only (hybrid tiles)",
    "W304": "a user check of no matrix the program writes",
    "W305": "a text direction control in a comment",
    "W306": "a product check at β = 1 of a result no call reads",
    "W307": "an integer passed as a float that float64 does not hold exactly",
    "W308": "a lone carriage return in a file of LF line ends",
}


@dataclass(frozen=True)
class Diagnostic:
    """One problem found in a program; a span on line 0 stands for the whole file."""

    span: Span | None
    code: str
    message: str
    notes: tuple[str, ...] = ()
    hint: str | None = None

    @property
    def is_error(self) -> bool:
        return self.code.startswith("E")


@dataclass
class DiagnosticBag:
    """Collects diagnostics in the order the passes find them."""

    items: list[Diagnostic] = field(default_factory=list)
    # each item -> its index: looked up, not searched (a search per item made 16,000 errors take minutes)
    _known: dict = field(default_factory=dict)
    _lines: set = field(default_factory=set)  # each item as :func:`_on_its_line` keys it

    def error(self, span, code, message, *notes, hint=None):
        self._add(Diagnostic(span, code, message, tuple(notes), hint))

    def warning(self, span, code, message, *notes, hint=None):
        self._add(Diagnostic(span, code, message, tuple(notes), hint))

    def _add(self, diagnostic: Diagnostic) -> None:
        # a pass that looks at one expression twice (its type, then a value's) says it once, with
        # the hint the second look found (knowing what the expression is for) if the first had none
        if diagnostic in self._known:
            return
        index = self._known.get(replace(diagnostic, hint=None)) if diagnostic.hint is not None else None
        if index is not None:
            del self._known[self.items[index]]
            self.items[index] = diagnostic
        else:
            # one cause met twice on a line (a float let as both indices of A[h, h]), its notes naming it, is
            # said once, first; without notes, each place is its own mistake (`priority k and k`)
            line = _on_its_line(diagnostic)
            if diagnostic.notes and line in self._lines:
                return
            self._lines.add(line)
            index = len(self.items)
            self.items.append(diagnostic)
        self._known[diagnostic] = index

    @property
    def has_errors(self) -> bool:
        return any(d.is_error for d in self.items)


def merged_repeats(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """``diagnostics`` (in the file's order) with an unknown name said once, where it is first
    used, noting the other places (one misspelling or rename fixes them all), a name declared
    again alike (a parameter's name taken by two loops); and without the "declared but never
    used" of a matrix or kernel while an unknown one may stand for it."""
    first: dict = {}  # (path, code, message) -> index in out
    places: dict = {}
    out: list[Diagnostic] = []
    for diagnostic in diagnostics:
        key = (diagnostic.span and diagnostic.span.path, diagnostic.code, diagnostic.message)
        if _one_cause(diagnostic) and key in first:
            places[key].append(diagnostic.span)
            continue
        first[key], places[key] = len(out), []
        out.append(diagnostic)
    for key, spans in places.items():
        if spans:
            shown = ", ".join(f"{span.line}:{span.column}" for span in spans[:_MOST_PLACES])
            more = f" and {len(spans) - _MOST_PLACES} more" if len(spans) > _MOST_PLACES else ""
            kept = out[first[key]]
            said = "also used at" if kept.code in ("E200", "E201") else "also at"
            out[first[key]] = replace(kept, notes=kept.notes + (f"{said} {shown}{more}",))
    unknown = {kind for d in out if d.code in ("E200", "E201")
               for kind in ("matrix", "kernel") if d.message.startswith(f"unknown {kind} ")}
    return [d for d in out if not (d.code == "W300" and d.message.split(" ")[0] in unknown)]


_MOST_PLACES = 8  # the places a merged unknown name's note lists


def _one_cause(diagnostic: Diagnostic) -> bool:
    """Whether the same diagnostic elsewhere has the same cause: an unknown name, a name declared again."""
    return (diagnostic.code in ("E200", "E201") and diagnostic.message.startswith("unknown ")
            or diagnostic.code == "E207" and " is already declared" in diagnostic.message)


def _on_its_line(diagnostic: Diagnostic) -> tuple:
    """A diagnostic without its columns: the same words and notes at the same line are one cause."""
    span = diagnostic.span
    where = None if span is None else (span.path, span.line)
    return (where, diagnostic.code, diagnostic.message, diagnostic.notes)


def did_you_mean(word: str, candidates, cutoff: float = 0.6) -> str | None:
    """The candidate that ``word`` most likely misspells, never ``word`` itself: one that differs
    in case only (POTRF for potrf), else the closest in spelling, with case then without, else one
    of its letters in another order."""
    others = [c for c in candidates if c != word]
    folded = {c.casefold(): c for c in reversed(others)}  # the first of candidates equal but for case
    if word.casefold() in folded:
        return folded[word.casefold()]
    close = (difflib.get_close_matches(word, others, n=1, cutoff=cutoff)
             or [folded[c] for c in difflib.get_close_matches(word.casefold(), folded, n=1, cutoff=cutoff)]
             # its letters in another order (fi for if): too short a word for the closeness above
             or [c for c in others if len(c) > 1 and sorted(c.casefold()) == sorted(word.casefold())])
    return close[0] if close else None


def suggestion_notes(word: str, candidates) -> tuple[str, ...]:
    """A diagnostic's "did you mean" note for ``word``, if some candidate is close to it."""
    close = did_you_mean(word, candidates)
    return (f"did you mean '{close}'?",) if close else ()


def headline(diagnostic: Diagnostic) -> str:
    """A diagnostic's first line: ``file:line:col: error[E200]: message``."""
    severity = "error" if diagnostic.is_error else "warning"
    span = diagnostic.span
    path = None if span is None else printable(span.path)
    where = "" if span is None else f"{path}: " if span.line == 0 else f"{path}:{span.line}:{span.column}: "
    return f"{where}{severity}[{diagnostic.code}]: {_shortened(diagnostic.message)}"


def render(diagnostic: Diagnostic, source: Source | None) -> str:
    """Format one diagnostic: its :func:`headline`, the line, a caret, its notes and hint."""
    span = diagnostic.span
    lines = [headline(diagnostic)]
    if source is not None and span is not None and span.line > 0:
        lines += _excerpt(source, span)
    # (a note may name a file of the user's: a NUL or zero-width space in its name is shown escaped, as the
    # headline shows the program's path)
    lines += [f"  = note: {printable(_shortened(note))}" for note in diagnostic.notes]
    if diagnostic.hint:
        lines.append(f"  = hint: {printable(_shortened(diagnostic.hint))}")
    return "\n".join(lines)


#: The longest word (a name, a number) a message, note or hint shows whole
LONGEST_WORD = 80
_LONG_WORD = re.compile(rf"\w{{{LONGEST_WORD + 1},}}")


def _shortened(text: str) -> str:
    """``text`` with each word longer than :data:`LONGEST_WORD` shown as its ends around an ellipsis, as
    the excerpt clips a long line: a name of 100,000 characters was printed whole, in the message and
    again in a "did you mean" note."""
    half = LONGEST_WORD // 2
    return _LONG_WORD.sub(lambda word: f"{word[0][:half]}…{word[0][-half:]}", text)


def _excerpt(source: Source, span: Span, width: int = 160) -> list[str]:
    """The source line under a span with a caret run, clipped around long lines."""
    text = source.line_text(span.line).expandtabs(1)
    start = max(0, span.column - 1 - width // 2) if len(text) > width else 0
    shown = text[start:start + width]
    end_column = span.end_column if span.end_line == span.line else len(text) + 1
    carets = max(1, min(end_column, start + width + 1) - span.column)
    gutter = f"{span.line:>5}"
    pad = " " * len(gutter)
    prefix = "…" if start else ""
    suffix = "…" if start + width < len(text) else ""
    lead = shown[:max(0, span.column - 1 - start)]
    marked = shown[len(lead):len(lead) + carets]
    # the carets follow what a terminal shows: a wide character (CJK) takes two columns, a
    # combining mark none, and an invisible or control character is shown escaped
    return [f"{pad} |", f"{gutter} | {prefix}{printable(shown)}{suffix}",
            f"{pad} | {' ' * (len(prefix) + _columns(lead) + span.column - 1 - start - len(lead))}"
            f"{'^' * max(1, _columns(marked) + carets - len(marked))}"]


def printable(text: str) -> str:
    """``text`` as it is safe to print: control and invisible format characters (an escape
    sequence, a zero-width space) and Unicode's line and paragraph separators as Python escapes,
    the bytes of a file name that were not UTF-8 (decoded as surrogates) as ``\\xNN``, and a
    character that stderr's encoding lacks (``é`` under LANG=C) as Python would write it
    there (``\\xe9``), so that a caret counts the columns the terminal shows."""
    return "".join(map(_printable_char, text))


def _printable_char(char: str) -> str:
    if "\udc80" <= char <= "\udcff":  # os.fsdecode's stand-in for an undecodable byte
        return f"\\x{ord(char) - 0xDC00:02x}"
    if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp") and char != "\t":
        return repr(char)[1:-1]
    if not _encodable(char, getattr(sys.stderr, "encoding", None) or "utf-8"):
        return char.encode("ascii", "backslashreplace").decode("ascii")
    return char


@functools.lru_cache(maxsize=4096)
def _encodable(char: str, encoding: str) -> bool:
    try:
        char.encode(encoding)
    except UnicodeEncodeError:
        return False
    except LookupError:  # an encoding Python does not know: take it as writing everything
        pass
    return True


def _columns(text: str) -> int:
    """The terminal columns ``text`` takes as :func:`printable` shows it: two for a wide or
    full-width character, none for a combining mark, an escape's length, else one."""
    return sum(_char_columns(char) for char in text)


def _char_columns(char: str) -> int:
    shown = _printable_char(char)
    if shown != char:  # an escape, letter by letter
        return len(shown)
    if unicodedata.combining(char) or unicodedata.category(char) == "Me":
        return 0
    if unicodedata.east_asian_width(char) in "WF":
        return 2
    return 1
