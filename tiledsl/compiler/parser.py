"""Text to typed AST: Lark's LALR parser (:mod:`.grammar`; its errors explained by
:mod:`.syntax_errors`), then a bottom-up, non-recursive build.

The build walks Lark's tree with ``iter_subtrees`` (iterative), so a pathological
input (20,000 nested parentheses, a 1 MB line of ``a+a+...``) cannot exhaust the
Python stack; nesting beyond :data:`MAX_DEPTH` is reported as a diagnostic.
"""
from __future__ import annotations

import ast as _pyast
import contextlib
import re
import sys
import threading
import warnings

from lark import Token, Tree
from lark.exceptions import UnexpectedInput

from . import nodes as n
from .diagnostics import Diagnostic
from .grammar import TOKEN, GluedKeyword, lark_parser
from .source import Source, SourceError, Span
from .syntax_errors import KEYWORDS, glued_diagnostic, keyword_read_as_expression, random_needs_a_kind, \
    syntax_diagnostic

#: Deepest nesting of brackets or expressions a program may have.
MAX_DEPTH = 100
#: Longest integer literal: sizes and indices fit in 64 bits, and folding never overflows.
MAX_INT_DIGITS = 18
#: Deepest syntax tree (operators chain: a+b+c+... is one level per '+').
MAX_TREE_DEPTH = 300
#: Python frames the passes may take per level of the deepest expression (the typer takes four a
#: level), beyond those of their callers: Python's default 1000 frames ran out at 248 levels
FRAMES_PER_LEVEL = 12
_deep = {"count": 0, "limit": 0}  # compilations under way with room for deep recursion, and the limit before
_deep_lock = threading.Lock()


@contextlib.contextmanager
def room_for_depth():
    """Within the block, Python's recursion limit lets the passes recurse through
    :data:`MAX_TREE_DEPTH` levels of a program's expression; put back when the last block of
    those running at once (threads compiling together) ends."""
    needed = 1000 + FRAMES_PER_LEVEL * MAX_TREE_DEPTH
    with _deep_lock:
        if _deep["count"] == 0:
            _deep["limit"] = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_deep["limit"], needed))
        _deep["count"] += 1
    try:
        yield
    finally:
        with _deep_lock:
            _deep["count"] -= 1
            if _deep["count"] == 0:
                sys.setrecursionlimit(_deep["limit"])


#: and/or/not chained in one condition: the driver nests a call per operator, and Python's parser
#: takes 200 nested brackets at most
MAX_CONDITION_CHAIN = 100
BOOLEAN_RULES = ("or_op", "and_op", "not_op")
#: calls nested in one expression of the driver: each '**', function, query and and/or/not is one
#: (the bound of MAX_CONDITION_CHAIN, said for the conditions that reach it first)
MAX_DRIVER_CALLS = 100
CALL_RULES = frozenset({*BOOLEAN_RULES, "func_ref", "method_ref"})
#: the rules that nest statements (their depth is not an expression's)
NESTING_RULES = frozenset({"start", "program", "block", "for_stmt", "if_stmt"})
#: Most tokens on one line, and in one file: Lark's LALR parser takes ~20 µs a token.
MAX_LINE_TOKENS = 10_000
MAX_FILE_TOKENS = 300_000
_BRACKET = re.compile(r'"(?:[^"\\\n]|\\.)*"|#[^\n]*|[(\[{)\]}]')
_PYTHON_CODEC = re.compile(r"^\(unicode error\) '\w+' codec can't decode bytes? in position [\d-]+: ")




def parse(source: Source, prelude: bool = False) -> n.File:
    """Parse ``source`` into a :class:`nodes.File`, or raise :class:`SourceError`."""
    _check_bracket_depth(source)
    _check_token_counts(source)
    try:
        tree = lark_parser().parse(source.text)
    except UnexpectedInput as error:
        raise SourceError(syntax_diagnostic(source, error)) from None
    except GluedKeyword as glued:
        raise SourceError(glued_diagnostic(source, glued.keyword)) from None
    taken = keyword_read_as_expression(source)  # a file that parses with a keyword read as a name
    if taken is not None:
        raise SourceError(taken)
    return _Builder(source.path, prelude).build(tree)


def _check_bracket_depth(source: Source) -> None:
    """Refuse absurd bracket nesting (outside strings and comments) before parsing."""
    depth = 0
    for match in _BRACKET.finditer(source.text):
        char = match.group()
        if char in "([{":
            depth += 1
            if depth > MAX_DEPTH:
                raise SourceError(Diagnostic(source.span_at(match.start()), "E101",
                                             f"brackets nested more than {MAX_DEPTH} deep"))
        elif char in ")]}":
            depth -= 1


def _check_token_counts(source: Source) -> None:
    """Refuse inputs too big to parse in reasonable time, before parsing them."""
    total = 0
    for number, line in enumerate(source.text.split("\n"), start=1):
        count = sum(1 for token in TOKEN.findall(line) if not token.startswith("#"))
        total += count
        if count > MAX_LINE_TOKENS:
            raise SourceError(Diagnostic(Span.point(source.path, number, 1), "E102",
                                         f"line {number} holds {count} tokens (at most {MAX_LINE_TOKENS})",
                                         hint="split long expressions with 'let' bindings"))
        if total > MAX_FILE_TOKENS:
            raise SourceError(Diagnostic(Span.point(source.path, number, 1), "E102",
                                         f"the program is longer than {MAX_FILE_TOKENS} tokens",
                                         (f"it reaches the limit at line {number}",),
                                         hint="write repeated calls as a loop over an index rather than one "
                                              "call each"))


# ---------------------------------------------------------------- tree -> AST
def _is_power(subtree: Tree) -> bool:
    """Whether ``subtree`` is a ``**`` (a binary_op whose operator is POW)."""
    return subtree.data == "binary_op" and any(isinstance(c, Token) and c.type == "POW" for c in subtree.children)


class _Builder:
    """Builds AST nodes bottom-up; one method per grammar rule or alias."""

    def __init__(self, path: str, prelude: bool):
        self.path = path
        self.prelude = prelude

    def build(self, tree: Tree) -> n.File:
        built: dict[int, object] = {}
        depth: dict[int, int] = {}  # of an expression; 0 for the statements that hold expressions
        nesting: dict[int, int] = {}  # of blocks and the statements that open them
        joined: dict[int, int] = {}  # the and/or/not operators chained in a condition
        calls: dict[int, int] = {}  # the calls the driver nests for an expression (a '**', a function)
        for subtree in tree.iter_subtrees():
            children = [self._child(c, built) for c in subtree.children]
            span = self._span(subtree)
            inner = max((nesting.get(id(c), 0) for c in subtree.children), default=0)
            if subtree.data in NESTING_RULES:  # counted apart: a sum in a deep loop nest is no deeper a sum
                nesting[id(subtree)], depth[id(subtree)] = inner + 1, 0
                if inner + 1 > MAX_TREE_DEPTH:
                    raise SourceError(Diagnostic(span, "E101", f"statements nested more than {MAX_TREE_DEPTH} levels "
                                                               f"deep", ("each 'else if' nests in the 'if' before it",),
                                                 hint="split a long 'else if' chain into separate 'if's"))
            else:
                level = 1 + max((depth.get(id(c), 0) for c in subtree.children), default=0)
                nesting[id(subtree)], depth[id(subtree)] = inner, level
                if level > MAX_TREE_DEPTH:
                    raise SourceError(Diagnostic(span, "E101",
                                                 f"expression nested more than {MAX_TREE_DEPTH} levels deep",
                                                 hint="split it with 'let' bindings"))
            if subtree.data in BOOLEAN_RULES:
                joined[id(subtree)] = 1 + max((joined.get(id(c), 0) for c in subtree.children), default=0)
                if joined[id(subtree)] > MAX_CONDITION_CHAIN:  # each is a nested call in the driver
                    raise SourceError(Diagnostic(span, "E101", f"a condition chains more than {MAX_CONDITION_CHAIN} "
                                                               f"and/or/not", hint="split it into nested 'if's"))
            if subtree.data not in NESTING_RULES:
                called = subtree.data in CALL_RULES or _is_power(subtree)
                calls[id(subtree)] = called + max((calls.get(id(c), 0) for c in subtree.children), default=0)
                if calls[id(subtree)] > MAX_DRIVER_CALLS:  # a '**' chain: Python's parser nests 200 brackets at most
                    raise SourceError(Diagnostic(span, "E101", f"expression nests more than {MAX_DRIVER_CALLS} "
                                                               f"'**', functions and queries",
                                                 ("the driver calls a function for each, one inside the other",),
                                                 hint="split it with 'let' bindings"))
            built[id(subtree)] = getattr(self, subtree.data)(children, span)
        return built[id(tree)]

    def _child(self, child, built):
        if isinstance(child, Tree):
            return built[id(child)]
        if isinstance(child, Token) and child.type == "NAME":
            return n.Ident(str(child), self._token_span(child))
        return child

    def _span(self, tree: Tree) -> Span:
        meta = tree.meta
        if getattr(meta, "empty", True):
            return Span.point(self.path, 1, 1)
        return Span(self.path, meta.line, meta.column, meta.end_line, meta.end_column)

    def _string(self, token: Token) -> str:
        """The value of a string literal (Python escapes), or an E100 at a bad escape."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # an unknown escape such as \e warns in Python: refuse it
                return _pyast.literal_eval(str(token))
        except (SyntaxError, ValueError, Warning) as error:
            reason = error.msg if isinstance(error, SyntaxError) else str(error)
            reason = _PYTHON_CODEC.sub("", reason)  # Python's decoder speaks of itself: "truncated \xXX escape"
            raise SourceError(Diagnostic(self._token_span(token), "E100", f"invalid string literal: {reason}",
                                         hint="write a backslash as \\\\")) from None

    def _token_span(self, token: Token) -> Span:
        return Span(self.path, token.line, token.column, token.end_line, token.end_column)

    # -- file level
    def start(self, items, span):
        pick = lambda kind: tuple(i for i in items if isinstance(i, kind))
        return n.File(self.path, pick(n.Use), pick(n.KernelDecl), pick(n.Program))

    def use_decl(self, c, span):
        return n.Use(self._string(c[0]), span)

    def kernel_decl(self, c, span):
        params = tuple(p for p in c[1:-1] if p is not None)
        return n.KernelDecl(c[0], params, span, self.prelude, c[-1])

    def tile_param(self, c, span):
        return n.KernelParam("tile", c[0], c[1], span)

    def value_param(self, c, span):
        choices = self._string(c[3]) if c[3] is not None else None
        return n.KernelParam(str(c[0]), None, c[1], span, choices, c[4])

    def flops(self, c, span):
        return c[0]

    def mode(self, c, span):
        return str(c[0])

    def program(self, c, span):
        name, rest = c[0], c[1:]
        pick = lambda kind: tuple(i for i in rest if isinstance(i, kind))
        tilings = pick(n.TilingDecl)
        if len(tilings) > 1:
            raise SourceError(Diagnostic(tilings[1].span, "E207", "the tiling is declared twice",
                                         (f"first declared at line {tilings[0].span.line}",)))
        body = tuple(i for i in rest if isinstance(i, (n.For, n.If, n.Let, n.Call, n.Release)))
        return n.Program(name, tilings[0] if tilings else None, pick(n.ParamDecl),
                         pick(n.MatrixDecl), pick(n.WorkspaceDecl), pick(n.CheckDecl), body, span,
                         pick(n.RequireDecl))

    # -- declarations
    def tiling_decl(self, c, span):
        return n.TilingDecl(c[0], tuple(s for s in c[1:] if s is not None), span)

    def setting(self, c, span):
        return n.Setting(c[0], c[1], span)

    def param_decl(self, c, span):
        return n.ParamDecl(c[0], c[1], span)

    def require_decl(self, c, span):
        return n.RequireDecl(c[0], self._string(c[1]) if c[1] is not None else None, span)

    def matrix_decl(self, c, span):
        mode = c[0] if c[0] is not None else "inout"
        return n.MatrixDecl(mode, c[1], c[2], c[3], c[4], span)

    def init_random(self, c, span):
        kind = c[0]
        if kind.span.line > span.line and kind.text in KEYWORDS + ("in", "out", "inout"):
            # `= random` and then `check cholesky(A)` on the next line: 'check' taken for the kind
            raise SourceError(random_needs_a_kind(self.path, span.line, span.column))
        return n.Init("random", kind, None, span)

    def init_load(self, c, span):
        return n.Init("load", None, self._string(c[0]), span)

    def init_named(self, c, span):
        return n.Init("named", c[0], None, span)

    def workspace_decl(self, c, span):
        return n.WorkspaceDecl(c[0], c[1], c[2], span)

    def check_decl(self, c, span):
        args = tuple(a for a in c[1:] if isinstance(a, n.CheckArg))
        return n.CheckDecl(c[0], args, tuple(a for a in c[1:] if isinstance(a, n.Keyword)), span)

    def check_operand(self, c, span):
        return n.CheckArg(tuple(c[:-1]), c[-1], span)

    def check_option(self, c, span):
        return n.Keyword(c[0], c[1], span)

    # -- statements
    def for_stmt(self, c, span):
        return n.For(c[0], c[2], c[3], c[4], c[5], span)

    def step(self, c, span):
        return c[0]

    def if_stmt(self, c, span):
        orelse = c[2] if isinstance(c[2], tuple) else (() if c[2] is None else (c[2],))
        return n.If(c[0], c[1], orelse, span)

    def block(self, c, span):
        return tuple(c)

    def let_stmt(self, c, span):
        return n.Let(c[0], c[1], span)

    def call_stmt(self, c, span):
        args = [a for a in c[1:-1] if a is not None]
        positional = tuple(a for a in args if not isinstance(a, n.Keyword))
        return n.Call(c[0], positional, tuple(a for a in args if isinstance(a, n.Keyword)), c[-1], span)

    def keyword_arg(self, c, span):
        return n.Keyword(c[0], c[1], span)

    def priority(self, c, span):
        return c[0]

    def release_stmt(self, c, span):
        return n.Release(c[0], span)

    def tile_ref(self, c, span):
        rows, cols = c[3] if c[3] is not None else (None, None)
        return n.TileRef(c[0], c[1], c[2], rows, cols, span)

    def tile_range(self, c, span):
        return n.Range(c[0], c[2], span)

    def subrange(self, c, span):
        return c[0], c[1]

    def slice(self, c, span):
        return n.Slice(c[0], c[2], span)

    # -- expressions
    def or_op(self, c, span):
        return n.Binary("or", c[0], c[1], span)

    def and_op(self, c, span):
        return n.Binary("and", c[0], c[1], span)

    def not_op(self, c, span):
        return n.Unary("not", c[0], span)

    def compare_op(self, c, span):
        return n.Binary(str(c[1]), c[0], c[2], span)

    def binary_op(self, c, span):
        return n.Binary(str(c[1]), c[0], c[2], span)

    def neg_op(self, c, span):
        return n.Unary("-", c[1], span)

    def int_lit(self, c, span):
        digits = str(c[0]).lstrip("0") or "0"
        if len(digits) > MAX_INT_DIGITS:
            raise SourceError(Diagnostic(span, "E100", f"integer literal of {len(digits)} digits is too large",
                                         hint=f"tile programs count tiles and rows: at most {MAX_INT_DIGITS} digits"))
        return n.IntLit(int(digits), span)

    def float_lit(self, c, span):
        value = float(str(c[0]))
        if value in (float("inf"), float("-inf")):
            raise SourceError(Diagnostic(span, "E100", f"number literal {c[0]} is too large for a float64",
                                         hint="the largest is about 1.8e308"))
        return n.FloatLit(value, span)

    def str_lit(self, c, span):
        return n.StrLit(self._string(c[0]), span)

    def name_ref(self, c, span):
        return n.Name(c[0], span)

    def attr_ref(self, c, span):
        return n.Attr(c[0], c[1], span)

    def method_ref(self, c, span):
        return n.Method(c[0], c[1], c[2], span)

    def func_ref(self, c, span):
        return n.Func(c[0], tuple(c[1:]), span)



