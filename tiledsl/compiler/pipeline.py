"""The compiler's front door: read, parse, analyze and generate, collecting diagnostics.

Each step hands data to the next (text -> AST -> checked program -> driver text);
any diagnostic stops the chain and is returned, never raised.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

from . import nodes
from .analysis import Checked, analyze
from .diagnostics import Diagnostic, headline, merged_repeats, render
from .parser import parse, room_for_depth
from .syntax_errors import statement_word_kernels
from .source import Source, SourceError, decode, direction_controls, lone_returns, read_source


@dataclass
class Result:
    """What compiling one file produced: its source, diagnostics and checked program."""

    path: str
    source: Source | None = None
    checked: Checked | None = None
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.checked is not None and not any(d.is_error for d in self.diagnostics)

    def report(self) -> str:
        return "\n\n".join(render(d, self.source) for d in self.diagnostics)

    def warnings(self) -> tuple[str, ...]:
        """The first line of each warning (the driver keeps them for a run's --json notes)."""
        return tuple(headline(d) for d in self.diagnostics if not d.is_error)


@lru_cache(maxsize=1)
def prelude() -> nodes.File:
    """The standard kernel declarations every program sees."""
    text = resources.files("tiledsl.compiler").joinpath("prelude.tile").read_bytes()
    return parse(decode("<prelude>", text), prelude=True)


def check_source(source: Source) -> Result:
    """Parse and analyze already-decoded program text."""
    result = Result(source.path, source)
    # what the text itself warns of (a lone CR, direction controls) may be what broke the syntax
    of_text = [*direction_controls(source), *lone_returns(source)]
    unusable = statement_word_kernels(source)  # their calls would break the parse, or parse as something else
    if unusable:
        result.diagnostics.extend(sorted([*unusable, *of_text], key=_position))
        return result
    try:
        tree = parse(source)
    except SourceError as error:
        result.diagnostics.extend(sorted([error.diagnostic, *of_text], key=_position))
        return result
    with room_for_depth():
        result.checked, bag = analyze(tree, prelude())
    result.diagnostics.extend(merged_repeats(sorted([*bag.items, *of_text], key=_position)))
    return result


def _position(diagnostic: Diagnostic) -> tuple[int, int]:
    """Where a diagnostic points, to list them in the file's order whichever pass found them
    (the whole file, line 0, first)."""
    span = diagnostic.span
    return (span.line, span.column) if span is not None else (0, 0)


def check_path(path, data: bytes | None = None) -> Result:
    """Read, parse and analyze the ``.tile`` file at ``path`` (``data``: its bytes, where they were
    read already)."""
    try:
        source = read_source(path, data)
    except SourceError as error:
        return Result(str(path), error.source, None, [error.diagnostic])
    return check_source(source)


def compile_path(path, driver_path=None) -> tuple[Result, str | None]:
    """Check ``path`` and, if it is clean of errors, generate its driver text (to be written at
    ``driver_path``, if known: the driver then finds the kernel module from anywhere)."""
    from .codegen import generate

    result = check_path(path)
    return result, (generate(result.checked, driver_path, warnings=result.warnings()) if result.ok else None)
