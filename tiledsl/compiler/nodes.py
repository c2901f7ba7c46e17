"""The typed AST of a ``.tile`` file: frozen dataclasses, each with its source span.

Nodes carry no behaviour; passes in ``analysis`` and ``codegen`` walk them.
"""
from __future__ import annotations

from dataclasses import dataclass

from .source import Span


@dataclass(frozen=True)
class Ident:
    """A name as written, with where it was written."""

    text: str
    span: Span


# ---------------------------------------------------------------- expressions
@dataclass(frozen=True)
class IntLit:
    value: int
    span: Span


@dataclass(frozen=True)
class FloatLit:
    value: float
    span: Span


@dataclass(frozen=True)
class StrLit:
    """A quoted string: the value of a ``char`` argument (``"T"``)."""

    value: str
    span: Span


@dataclass(frozen=True)
class Name:
    ident: Ident
    span: Span


@dataclass(frozen=True)
class Attr:
    """A geometry query without argument: ``A.mt``, ``A.nt``, ``A.m``, ``A.n``."""

    matrix: Ident
    attr: Ident
    span: Span


@dataclass(frozen=True)
class Method:
    """A geometry query with an argument: ``A.height(i)``, ``A.width(j)``, ``A.offset(j)``."""

    matrix: Ident
    method: Ident
    arg: "Expr"
    span: Span


@dataclass(frozen=True)
class Func:
    """A built-in integer function: ``min(a, b, ...)``, ``max(a, b, ...)``."""

    func: Ident
    args: tuple["Expr", ...]
    span: Span


@dataclass(frozen=True)
class Unary:
    op: str  # "-" or "not"
    operand: "Expr"
    span: Span


@dataclass(frozen=True)
class Binary:
    op: str  # + - * / // % == != < <= > >= and or
    left: "Expr"
    right: "Expr"
    span: Span


Expr = IntLit | FloatLit | StrLit | Name | Attr | Method | Func | Unary | Binary


# ---------------------------------------------------------------- tiles
@dataclass(frozen=True)
class Slice:
    """``start : stop`` inside a tile, either end optional."""

    start: Expr | None
    stop: Expr | None
    span: Span


@dataclass(frozen=True)
class Range:
    """``start : stop`` as a tile index: the tiles start .. stop − 1 along that index (a panel)."""

    start: Expr
    stop: Expr
    span: Span


@dataclass(frozen=True)
class TileRef:
    """``A[i, j]`` optionally narrowed to ``[rows]`` or ``[rows, cols]`` of the tile; a panel
    ``A[k : A.mt, j]`` when one index is a :class:`Range`."""

    matrix: Ident
    row: Expr | Range
    col: Expr | Range
    rows: Slice | None
    cols: Slice | None
    span: Span


# ---------------------------------------------------------------- statements
@dataclass(frozen=True)
class For:
    var: Ident
    start: Expr
    stop: Expr
    step: Expr | None
    body: tuple["Stmt", ...]
    span: Span


@dataclass(frozen=True)
class If:
    cond: Expr
    then: tuple["Stmt", ...]
    orelse: tuple["Stmt", ...]
    span: Span


@dataclass(frozen=True)
class Let:
    name: Ident
    value: Expr
    span: Span


@dataclass(frozen=True)
class Keyword:
    """``NAME = value``: a value argument given by name (calls), or a check's option."""

    name: Ident
    value: Expr
    span: Span


@dataclass(frozen=True)
class Call:
    """A kernel call: positional arguments (tiles, panels, values) then keyword values."""

    kernel: Ident
    args: tuple[TileRef | Expr, ...]
    keywords: tuple[Keyword, ...]
    priority: Expr | None
    span: Span


@dataclass(frozen=True)
class Release:
    tile: TileRef
    span: Span


Stmt = For | If | Let | Call | Release


# ---------------------------------------------------------------- declarations
@dataclass(frozen=True)
class KernelParam:
    """A tile parameter (``kind`` "tile", ``mode`` in/out/inout) or a value parameter
    (``kind`` int, float or char, with its allowed ``choices`` and its ``default``)."""

    kind: str
    mode: str | None
    name: Ident
    span: Span
    choices: str | None = None
    default: Expr | None = None


@dataclass(frozen=True)
class KernelDecl:
    name: Ident
    params: tuple[KernelParam, ...]
    span: Span
    prelude: bool = False
    flops: Expr | None = None  # the flop count, an expression of the arguments' shapes and values


@dataclass(frozen=True)
class Use:
    """``use "module.py"``: the Python module holding the program's own kernels."""

    path: str
    span: Span


@dataclass(frozen=True)
class Setting:
    name: Ident
    value: Expr
    span: Span


@dataclass(frozen=True)
class TilingDecl:
    kind: Ident  # uniform or hybrid
    settings: tuple[Setting, ...]
    span: Span


@dataclass(frozen=True)
class ParamDecl:
    name: Ident
    default: Expr
    span: Span


@dataclass(frozen=True)
class RequireDecl:
    """``require CONDITION ["why"]``: what the parameters must satisfy for the program to make sense."""

    condition: Expr
    message: str | None
    span: Span



@dataclass(frozen=True)
class Init:
    """How ``run`` makes a matrix: ``random KIND`` (one of :data:`tiledsl.language.RANDOM_KINDS`), a named constant,
    or ``load "f.npy"``."""

    kind: str  # random, named, load
    what: Ident | None
    path: str | None
    span: Span


@dataclass(frozen=True)
class MatrixDecl:
    mode: str  # in, out, inout
    name: Ident
    rows: Expr
    cols: Expr
    init: Init
    span: Span


@dataclass(frozen=True)
class WorkspaceDecl:
    name: Ident
    like: Ident
    rows: Expr
    span: Span


@dataclass(frozen=True)
class CheckArg:
    """A matrix named by a check, with the words written before it (``lower A``)."""

    qualifiers: tuple[Ident, ...]
    name: Ident
    span: Span


@dataclass(frozen=True)
class CheckDecl:
    kind: Ident
    args: tuple[CheckArg, ...]
    options: tuple[Keyword, ...]
    span: Span


@dataclass(frozen=True)
class Program:
    name: Ident
    tiling: TilingDecl | None
    params: tuple[ParamDecl, ...]
    matrices: tuple[MatrixDecl, ...]
    workspaces: tuple[WorkspaceDecl, ...]
    checks: tuple[CheckDecl, ...]
    body: tuple[Stmt, ...]
    span: Span
    requires: tuple[RequireDecl, ...] = ()


@dataclass(frozen=True)
class File:
    path: str
    uses: tuple[Use, ...]
    kernels: tuple[KernelDecl, ...]
    programs: tuple[Program, ...]
