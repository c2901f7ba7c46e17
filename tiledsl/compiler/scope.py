"""The symbol table of the analysis: what a name is bound to, in nested scopes."""
from __future__ import annotations

from dataclasses import dataclass

from .source import Span

#: how a message names a value of each type
TYPE_NOUN = {"int": "an integer", "float": "a float", "char": "a char", "bool": "a condition", "tile": "a tile"}


@dataclass
class Symbol:
    """What a name is bound to: its kind, where, the node that binds it, and what is known of its value."""

    kind: str  # param, matrix, workspace, loop, let
    span: Span | None
    node: object = None
    used: bool = False
    loops: frozenset = frozenset()  # the loop variables a let's value depends on (through lets too)
    affine: bool = True  # a let's value is affine in the loop variables
    form: dict | None = None  # a let's affine form, a symbol of its own where it has none (None: no integer)
    value: int | None = None  # a let's value when it is a constant
    # the value's type: int, float or char (loops and lets of integers: int); None for a let or a param whose
    # value is no number (an error said at the value): a use judged by a type it was never given said it again
    type: str | None = "int"


class Scope:
    """Nested name scopes; lookups walk outwards."""

    def __init__(self):
        self.frames: list[dict[str, Symbol]] = [{}]

    def lookup(self, name: str) -> Symbol | None:
        for frame in reversed(self.frames):
            if name in frame:
                return frame[name]
        return None

    def names(self) -> list[str]:
        return [name for frame in self.frames for name in frame]

