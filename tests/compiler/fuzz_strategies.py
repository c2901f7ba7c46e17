"""Random ``.tile`` programs for fuzzing the compiler: valid ones, mutated ones, and the oracle.

The generators are written once against a :class:`Chooser`, the single source of random
decisions, so the same code serves hypothesis (:func:`programs`, :func:`mutants`:
shrinkable, for the test suite) and seeded ``random`` (:func:`random_program`,
:func:`random_mutant`: fast and reproducible, for ``scripts/fuzz_campaign.py``).

* :class:`ProgramWriter` writes programs the checker should accept: declared names,
  right arities, writable outputs, tile indices in range (loop variables over the
  matrix's own tile counts) or folded into range with ``%``, affine loop bounds. They
  cover ``grammars/tile.lark``: user kernels with a ``use`` line, both tilings with
  settings, params, matrices with modes and every kind of init, workspaces, checks,
  nested for / if / else if / else / let, calls with priorities and sub-ranges,
  release, comments; names are often hostile (Python keywords and builtins, dunders,
  the driver's own names).
* :func:`mutate` breaks a program with random edits: tokens and lines deleted,
  duplicated, swapped or inserted, numbers changed (up to Python's 4300-digit limit
  and past it), identifiers renamed to hostile ones, unicode and quotes inserted.
* :func:`judge` is the oracle: checking never raises and its diagnostics are well
  formed; an accepted program's driver compiles and imports from ``tiledsl.runtime`` only.
"""
from __future__ import annotations

import ast
import keyword
import os
import random
import re
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path

from hypothesis import strategies as st

from tiledsl.compiler.codegen import generate
from tiledsl.compiler import check_source, prelude
from tiledsl.compiler.diagnostics import CODES
from tiledsl.compiler.source import SourceError, decode

ROOT = Path(__file__).resolve().parents[2]
#: The module user kernels ``use``: the folder of the path given to :func:`judge` must hold it.
KERNEL_MODULE = "fuzz_kernels.py"
#: The words of the language (the grammar's quoted keywords): never identifiers.
TILE_WORDS = frozenset(re.findall(r'"([a-z]+)"', (ROOT / "grammars" / "tile.lark").read_text()))
TILING_SETTINGS = {"default": ("nb",), "uniform": ("nb",), "hybrid": ("B", "b", "s")}
DRIVER_NAMES = ("_me", "_submit", "_release", "_r0", "_r1", "CALLS", "PROGRAM", "rt", "p", "p_", "main",
                "generate", "resolve_params", "shapes", "Call", "CheckDecl", "MatrixDecl", "Program", "Tiling",
                "WorkspaceDecl", "user_me", "class_", "self", "tiledsl")
PYTHON_NAMES = ("print", "range", "len", "int", "exec", "eval", "open", "compile", "getattr", "min", "max",
                "__import__", "__builtins__", "__class__", "__name__", "__file__", "__init__")
#: Identifiers that are fine in a .tile program and dangerous in the Python it becomes.
HOSTILE_NAMES = tuple(sorted({*keyword.kwlist, *keyword.softkwlist, *PYTHON_NAMES, *DRIVER_NAMES}
                             - TILE_WORDS - {"n", "nb", "B", "b", "s"}))
MODES = ("in", "out", "inout")
WRITE_MODES = ("out", "inout")
GEOMETRY_ATTRS = ("mt", "nt", "m", "n")
GEOMETRY_METHODS = ("height", "width", "offset")
COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")
STRINGS = ("a.npy", "data/ü.npy", 'q\\"uote.npy', "back\\\\slash.npy", "tab\\t.npy", "\\u00e9.npy",
           "emoji😀.npy", " spaces .npy", "{braces}.npy", "it's.npy")  # a file name: not "" (E209)
COMMENTS = ("note", "café ☕", 'a "quoted" word', "it's", "{ not code }", "# ## #", "\\", "program x {",
            "tab\there", "ﬁ ligature", "'''", '"""')
#: Large numbers a valid program may hold (literals have at most 18 digits; mutants go past that).
LARGE_NUMBERS = ("256", "4096", "2147483648", "9223372036854775", "999999999999999999")
#: Replacement numbers for mutation: boundaries, leading zeros, Python's int-to-str limit and past it.
NUMBERS = ("0", "1", "2", "7", "00", "007", "255", "2147483647", "2147483648", "9223372036854775808",
           "1" + "0" * 40, "9" * 4300, "9" * 4301)
UNICODE = ("é", "ß", "Σ", "变量", "😀", "\u00a0", "\u200b", "\ufeff", "\u2028", "\t", "\r", "\x0c", "\x00",
           "\x7f", "ｆｏｒ")
STRING_EDITS = ('"', '\\"', "\\\\", "\\n", "\\N{bogus}", "\\x4", "\\u12", "\\ud800", "é", "😀", "'", "'''",
                "{", "%s", "\\")
PUNCTUATION = ("(", ")", "[", "]", "{", "}", ",", ":", "=", "..", ".", "+", "-", "*", "//", "%", "==", "!=",
               "<", "<=", ">", ">=")
VOCABULARY = (tuple(sorted(TILE_WORDS)) + PUNCTUATION + HOSTILE_NAMES + NUMBERS[:8]
              + ("A", "k", "n", "nb", "mt", "nt", "offset", "potrf", "gemm", "uniform", "hybrid", "spd",
                 "zeros", "cholesky", "qr", '"a.npy"', f'"{KERNEL_MODULE}"', '""', "# c\n", "\n", "é"))
TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"|#[^\n]*|\w+|\.\.|//|==|!=|<=|>=|\s+|[^\s\w]')
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


# ---------------------------------------------------------------- randomness
class Chooser:
    """The one source of random decisions; subclasses draw integers."""

    def integer(self, low: int, high: int) -> int:
        raise NotImplementedError

    def choice(self, options):
        return options[self.integer(0, len(options) - 1)]

    def chance(self, probability: float) -> bool:
        """True with ``probability``; hypothesis shrinks it to False."""
        return self.integer(0, 999) >= 1000 * (1 - probability)

    def shuffled(self, items: list) -> list:
        items = list(items)
        for i in range(len(items) - 1, 0, -1):
            j = self.integer(0, i)
            items[i], items[j] = items[j], items[i]
        return items


class SeededChooser(Chooser):
    """Decisions from ``random.Random(seed)``: the same seed, the same program."""

    def __init__(self, seed):
        self.rng = random.Random(seed)

    def integer(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)


class DrawChooser(Chooser):
    """Decisions drawn by hypothesis, which can then shrink a failing program."""

    def __init__(self, draw):
        self.draw = draw

    def integer(self, low: int, high: int) -> int:
        return self.draw(st.integers(low, high))


# ---------------------------------------------------------------- valid programs
class ProgramWriter:
    """Writes one program that the checker should accept (see the module docstring)."""

    def __init__(self, chooser: Chooser):
        self.c = chooser
        self.kernels = {k.name.text: tuple(p.mode for p in k.params if p.kind == "tile") for k in prelude().kernels}
        self.taken = set(self.kernels) | TILE_WORDS | {"n", "nb", "B", "b", "s"}
        self.count = 0
        self.ints: list[str] = []  # integer names visible here
        self.kinds: dict[str, str] = {}  # integer name -> param, loop or let (names are never reused)
        self.ranged: dict[str, tuple[str, str]] = {}  # loop variable -> (matrix, 'mt' or 'nt') it stays inside
        self.shapes: list[tuple[str, bool, str]] = []  # (name, writable, matrix whose tile counts it has)
        self.rectangles: set = set()  # matrices whose rows and columns are given differently
        self.check_call: str | None = None  # the call that writes what the check verifies (else E209)
        self.lines: list[str] = []
        self.budget = 30  # statements left

    def program(self) -> str:
        head, tail = self.kernel_section()
        lines = self.declarations()
        self.block(1)
        if self.check_call:
            self.lines.insert(0, "  " + self.check_call)
        lines = head + [f"program {self.fresh()} {{"] + lines + self.lines + ["}"] + tail
        return "\n".join(self.decorate(lines)) + "\n"

    def fresh(self) -> str:
        hostile = [name for name in HOSTILE_NAMES if name not in self.taken]
        if hostile and self.c.chance(0.3):
            name = self.c.choice(hostile)
        else:
            self.count += 1
            name = f"{self.c.choice('vwxAMT')}{self.count}"
        self.taken.add(name)
        return name

    def decorate(self, lines: list[str]) -> list[str]:
        """Sprinkle comment lines, trailing comments and blank lines."""
        out = []
        for line in lines:
            if self.c.chance(0.05):
                out.append(f"# {self.c.choice(COMMENTS)}")
            if self.c.chance(0.03):
                out.append("")
            out.append(line + (f"  # {self.c.choice(COMMENTS)}" if self.c.chance(0.05) else ""))
        return out

    # -------------------------------------------------------------- declarations
    def kernel_section(self) -> tuple[list[str], list[str]]:
        """Lines before and after the program: maybe a ``use`` line and user kernels."""
        if not self.c.chance(0.3):
            return [], []
        decls = [self.kernel_decl() for _ in range(self.c.integer(1, 3))]
        use = f'use "{KERNEL_MODULE}"'
        return ([use], decls) if self.c.chance(0.2) else ([use] + decls, [])

    def kernel_decl(self) -> str:
        modes = [self.c.choice(MODES) for _ in range(self.c.integer(1, 4))]
        if not any(mode in WRITE_MODES for mode in modes):
            modes[self.c.integer(0, len(modes) - 1)] = self.c.choice(WRITE_MODES)
        name = self.fresh()
        self.kernels[name] = tuple(modes)
        return f"kernel {name}({', '.join(f'{mode} {self.fresh()}' for mode in modes)})"

    def declarations(self) -> list[str]:
        """Tiling, params, matrices, workspaces and check, interleaved (params keep their order)."""
        queues = [self.tiling(), [self.param() for _ in range(self.c.integer(0, 3))],
                  [self.matrix(first=i == 0) for i in range(self.c.integer(1, 3))]]
        queues += [[self.workspace() for _ in range(self.c.integer(0, 2))], self.check()]
        lines = []
        while any(queues):
            queue = self.c.choice([q for q in queues if q])
            lines.append("  " + queue.pop(0))
        return lines

    def declare(self, name: str, kind: str):
        self.ints.append(name)
        self.kinds[name] = kind

    def tiling(self) -> list[str]:
        kind = self.c.choice(tuple(TILING_SETTINGS))
        for name in ("n",) + TILING_SETTINGS[kind]:
            self.declare(name, "param")
        if kind == "default":
            return []
        values = {"nb": self.c.integer(1, 512)} if kind == "uniform" else self.hybrid_values()
        settings = [f"{name} = {self.constant(value)}" for name, value in values.items()]
        if not settings and self.c.chance(0.5):
            return [f"tiling {kind}"]
        return [f"tiling {kind}({', '.join(self.c.shuffled(settings))})"]

    def hybrid_values(self) -> dict[str, int]:
        """Some of B, b, s such that, with the defaults, (s - 1)·b < B."""
        b, s = self.c.integer(1, 64), self.c.integer(1, 4)
        values = {"B": (s - 1) * b + self.c.integer(1, 200), "b": b, "s": s}
        kept = {name: value for name, value in values.items() if self.c.chance(0.7)}
        merged = {"B": 512, "b": 128, "s": 2} | kept
        return kept if (merged["s"] - 1) * merged["b"] < merged["B"] else values

    def constant(self, value: int) -> str:
        roll = self.c.integer(0, 9)
        if roll < 7:
            return str(value)
        step = self.c.integer(1, 9)
        return f"{value + step} - {step}" if roll < 9 else f"({value}) * 1"

    def param(self) -> str:
        value = self.expr(geometry=False)
        name = self.fresh()
        self.declare(name, "param")
        return f"param {name} = {value}"

    def matrix(self, first: bool) -> str:
        mode = self.c.choice(("", "inout ", "out ") if first else ("", "in ", "out ", "inout "))
        name = self.fresh()
        self.shapes.append((name, mode != "in ", name))
        rows, cols = self.size(), self.size()
        init = self.init()
        if rows != cols:
            self.rectangles.add(name)
            init = "random general" if init == "random spd" else init  # spd needs a square matrix (E209)
        return f"{mode}matrix {name}[{rows}, {cols}] = {init}"

    def size(self) -> str:
        roll = self.c.integer(0, 9)
        if roll < 5:
            return "n"
        if roll < 7:
            return f"{self.c.integer(1, 3)} * n"
        return self.expr(geometry=False) if roll < 9 else str(self.c.integer(1, 300))

    def init(self) -> str:
        roll = self.c.integer(0, 5)
        if roll < 3:
            return f"random {('spd', 'general', 'diagdom')[roll]}"
        if roll < 5:
            return ("zeros", "identity")[roll - 3]
        return f'load "{self.c.choice(STRINGS)}"'

    def matrices(self) -> list[str]:
        return [name for name, _, extent in self.shapes if name == extent]

    def workspace(self) -> str:
        like = self.c.choice(self.matrices())
        name = self.fresh()
        self.shapes.append((name, True, like))
        return f"workspace {name} like {like} rows {self.size()}"

    def check(self) -> list[str]:
        if not self.c.chance(0.4):
            return []
        workspaces = [(name, like) for name, _, like in self.shapes if name != like and self._writable(like)]
        kind = self.c.choice(("cholesky", "lu", "qr") if workspaces else ("cholesky", "lu"))
        if kind == "qr":  # its check replays geqrt's reflectors: the program calls it
            workspace, like = self.c.choice(workspaces)
            self.check_call = f"geqrt({like}[0, 0], {workspace}[0, 0])"
            return [f"check qr({like}, {workspace})"]
        writable = [name for name in self.matrices() if self._writable(name)]
        square = [name for name in writable if name not in self.rectangles]
        if kind == "cholesky" and not square:  # a Cholesky check of a rectangle is E209
            kind = "lu"
        if not writable:  # a check verifies a matrix the program writes
            return []
        checked = self.c.choice(square if kind == "cholesky" else writable)
        self.check_call = f"getrf_nopiv({checked}[0, 0])"
        return [f"check {kind}({checked})"]

    def _writable(self, matrix: str) -> bool:
        return any(name == matrix and writable for name, writable, _ in self.shapes)

    # -------------------------------------------------------------- statements
    @contextmanager
    def scope(self):
        saved = list(self.ints)
        yield
        self.ints = saved

    def line(self, depth: int, text: str):
        self.lines.append("  " * depth + text)

    def block(self, depth: int):
        with self.scope():
            for _ in range(self.c.integer(1 if depth == 1 else 0, 4)):
                if self.budget <= 0:
                    return
                self.budget -= 1
                self.statement(depth)

    def statement(self, depth: int):
        kind = self.c.choice(("call", "call", "for", "if", "let", "release") if depth < 5 else ("call", "let"))
        if kind == "call":
            self.line(depth, self.call())
        elif kind == "for":
            self.for_loop(depth)
        elif kind == "if":
            self.if_chain(depth)
        elif kind == "let":
            value = self.expr()
            name = self.fresh()
            self.line(depth, f"let {name} = {value}")
            self.declare(name, "let")
        else:
            self.line(depth, f"release {self.tile(self.c.choice(self.shapes), set(), part=False)}")

    def for_loop(self, depth: int):
        var = self.fresh()
        if self.c.chance(0.6):  # over one axis of a matrix: the variable indexes it safely
            name, _, extent = self.c.choice(self.shapes)
            axis = self.c.choice(("mt", "nt"))
            outer = [v for v in self.ints if self.ranged.get(v) == (extent, axis)]
            low = self.c.choice(["0"] + outer + [f"{v} + 1" for v in outer])
            high = f"{name}.{axis}"
            self.ranged[var] = (extent, axis)
        else:
            low, high = self.bound(), self.bound()
        self.line(depth, f"for {var} in {low} .. {high} {{")
        with self.scope():
            self.declare(var, "loop")
            self.block(depth + 1)
        self.line(depth, "}")

    def if_chain(self, depth: int):
        self.line(depth, f"if {self.condition()} {{")
        self.block(depth + 1)
        for _ in range(self.c.integer(0, 2) if self.c.chance(0.3) else 0):
            self.line(depth, f"}} else if {self.condition()} {{")
            self.block(depth + 1)
        if self.c.chance(0.4):
            self.line(depth, "} else {")
            self.block(depth + 1)
        self.line(depth, "}")

    def call(self) -> str:
        kernel = self.c.choice(sorted(self.kernels))
        seen: set = set()
        args = [self.tile(self.c.choice([s for s in self.shapes if s[1] or mode == "in"]), seen)
                for mode in self.kernels[kernel]]
        priority = f" priority {self.expr()}" if self.c.chance(0.3) else ""
        return f"{kernel}({', '.join(args)}){priority}"

    def tile(self, shape, seen: set, part: bool = True) -> str:
        """A tile of ``shape`` not in ``seen`` (a tile passed twice may not be written), sometimes
        a ``part`` of one."""
        name = shape[0]
        row, col = self.index(shape, "mt"), self.index(shape, "nt")
        if (name, row, col) in seen:  # an index no other draw writes this way
            row = f"min({len(seen)}, {name}.mt - 1)"
        seen.add((name, row, col))
        return f"{name}[{row}, {col}]" + (self.subrange() if part and self.c.chance(0.15) else "")

    def index(self, shape, axis: str) -> str:
        name, _, extent = shape
        safe = [v for v in self.ints if self.ranged.get(v) == (extent, axis)]
        roll = self.c.integer(0, 9)
        if safe and roll < 5:
            return self.c.choice(safe)
        if roll < 8:
            return f"({self.expr()}) % {name}.{axis}"
        return "0" if roll == 8 else f"min(max({self.c.choice(self.ints)}, 0), {name}.{axis} - 1)"

    def subrange(self) -> str:
        slices = [self.slice() for _ in range(self.c.integer(1, 2))]
        return f"[{', '.join(slices)}]"

    def slice(self) -> str:
        """Ends of any kind, but literal ones in order and not negative, nor a name negated (-n): the compiler
        refuses those (E208)."""
        start = self.expr(2) if self.c.chance(0.6) else ""
        stop = self.expr(2) if self.c.chance(0.4) else ""
        ends = [_literal(start), _literal(stop)]
        start, stop = ("0" if value is not None and value < 0 or text.startswith("-") else text
                       for text, value in zip((start, stop), ends))
        if None not in ends and max(ends[1], 0) < max(ends[0], 0):
            start, stop = stop, start
        return f"{start}:{stop}"

    # -------------------------------------------------------------- expressions
    def expr(self, depth: int = 0, geometry: bool = True) -> str:
        roll = self.c.integer(0, 9)
        if depth >= 3 or roll < 4:
            return self.atom(geometry)
        left, deeper = self.expr(depth + 1, geometry), depth + 1
        if roll < 7:
            return f"{left} {self.c.choice(('+', '-', '*'))} {self.expr(deeper, geometry)}"
        if roll == 7:
            return f"({left}) {self.c.choice(('//', '%'))} {self.c.integer(1, 5)}"
        if roll == 8:
            rest = [self.expr(deeper, geometry) for _ in range(self.c.integer(1, 2))]
            return f"{self.c.choice(('min', 'max'))}({', '.join([left] + rest)})"
        return f"-({left})"

    def atom(self, geometry: bool) -> str:
        roll = self.c.integer(0, 9)
        if roll < 3:
            return self.number()
        if roll < 7 or not geometry:
            return self.c.choice(self.ints)
        shape = self.c.choice(self.shapes)[0]
        if roll < 9:
            return f"{shape}.{self.c.choice(GEOMETRY_ATTRS)}"
        return f"{shape}.{self.c.choice(GEOMETRY_METHODS)}({self.atom(geometry=False)})"

    def number(self) -> str:
        return self.c.choice(LARGE_NUMBERS) if self.c.chance(0.03) else str(self.c.integer(0, 9))

    def condition(self, depth: int = 0) -> str:
        roll = self.c.integer(0, 9)
        if depth < 2 and roll == 8:
            op = self.c.choice(("and", "or"))
            return f"{self.condition(depth + 1)} {op} {self.condition(depth + 1)}"
        if depth < 2 and roll == 9:
            return f"not ({self.condition(depth + 1)})"
        return f"{self.expr(1)} {self.c.choice(COMPARISONS)} {self.expr(1)}"

    def bound(self) -> str:
        """An affine loop bound: loop variables added, subtracted, min/max'ed, scaled by params."""
        base = self.bound_atom()
        roll = self.c.integer(0, 9)
        if roll < 5:
            return base
        if roll < 7:
            return f"{base} {self.c.choice(('+', '-'))} {self.bound_atom()}"
        if roll < 9:
            return f"{self.c.choice(('min', 'max'))}({base}, {self.bound_atom()})"
        params = [v for v in self.ints if self.kinds[v] == "param"]
        return f"{self.c.choice(params)} * {base}"

    def bound_atom(self) -> str:
        loops = [v for v in self.ints if self.kinds[v] == "loop"]
        roll = self.c.integer(0, 6)
        shape = self.c.choice(self.shapes)[0]
        if loops and roll < 2:
            return self.c.choice(loops) + ("" if roll == 0 else f" + {self.c.integer(1, 3)}")
        if roll < 4:
            return f"{shape}.{self.c.choice(('mt', 'nt'))}" + ("" if roll == 2 else " // 2")
        if roll == 4:
            return f"{shape}.{self.c.choice(GEOMETRY_METHODS)}({self.c.integer(0, 3)})"
        return str(self.c.integer(0, 4)) if roll == 5 else self.c.choice(
            [v for v in self.ints if self.kinds[v] == "param"])


# ---------------------------------------------------------------- mutations
def _tokens(text: str) -> tuple[list[str], list[int]]:
    """The text cut into tokens (whitespace kept, so they join back), and the non-blank ones."""
    tokens = TOKENS.findall(text)
    return tokens, [i for i, t in enumerate(tokens) if not t.isspace()]


def _edit_tokens(text: str, c: Chooser) -> str:
    """Delete, repeat (up to 50 times), swap or follow with a random word one token."""
    tokens, solid = _tokens(text)
    if not solid:
        return text + " " + c.choice(VOCABULARY)
    i, j = c.choice(solid), c.choice(solid)
    roll = c.integer(0, 3)
    if roll == 0:
        tokens[i] = ""
    elif roll == 1:
        tokens[i] = " ".join([tokens[i]] * c.choice((2, 2, 3, 50)))
    elif roll == 2:
        tokens[i], tokens[j] = tokens[j], tokens[i]
    else:
        tokens[i] = f"{tokens[i]} {c.choice(VOCABULARY)}"
    return "".join(tokens)


def _edit_lines(text: str, c: Chooser) -> str:
    """Delete, duplicate or swap lines, or cut the text short."""
    lines = text.split("\n")
    i, j = c.integer(0, len(lines) - 1), c.integer(0, len(lines) - 1)
    roll = c.integer(0, 3)
    if roll == 0:
        del lines[i]
    elif roll == 1:
        lines.insert(i, lines[i])
    elif roll == 2:
        lines[i], lines[j] = lines[j], lines[i]
    else:
        return text[:c.integer(0, len(text))]  # truncated
    return "\n".join(lines)


def _change_number(text: str, c: Chooser) -> str:
    """Replace one integer literal with a boundary value."""
    tokens, _ = _tokens(text)
    numbers = [i for i, t in enumerate(tokens) if t.isdigit()]
    if not numbers:
        return text
    tokens[c.choice(numbers)] = c.choice(NUMBERS)
    return "".join(tokens)


def _rename(text: str, c: Chooser) -> str:
    """Rename one identifier, everywhere or once, to a hostile or another existing one."""
    tokens, _ = _tokens(text)
    names = sorted({t for t in tokens if IDENTIFIER.fullmatch(t)})
    if not names:
        return text
    old = c.choice(names)
    new = c.choice(HOSTILE_NAMES + tuple(names) + tuple(sorted(TILE_WORDS)) + ("é", "x" * 300, "_"))
    if c.chance(0.5):
        return "".join(new if t == old else t for t in tokens)
    tokens[c.choice([i for i, t in enumerate(tokens) if t == old])] = new
    return "".join(tokens)


def _insert_unicode(text: str, c: Chooser) -> str:
    """Insert a non-ASCII, invisible or control character anywhere (comments and strings included)."""
    at = c.integer(0, len(text))
    return text[:at] + c.choice(UNICODE) + text[at:]


def _edit_string(text: str, c: Chooser) -> str:
    """Put quotes, escapes or unicode inside a string literal (or add a new string)."""
    tokens, _ = _tokens(text)
    strings = [i for i, t in enumerate(tokens) if t.startswith('"') and len(t) > 1 and t.endswith('"')]
    if not strings:
        return text + f' "{c.choice(STRING_EDITS)}"'
    i = c.choice(strings)
    at = c.integer(1, len(tokens[i]) - 1)
    tokens[i] = tokens[i][:at] + c.choice(STRING_EDITS) + tokens[i][at:]
    return "".join(tokens)


MUTATIONS = (_edit_tokens, _edit_lines, _change_number, _rename, _insert_unicode, _edit_string)


def mutate(text: str, c: Chooser) -> str:
    """``text`` after one to four random edits."""
    for _ in range(c.integer(1, 4)):
        text = c.choice(MUTATIONS)(text, c)
    return text


SHIPPED = tuple((ROOT / "programs" / f"{name}.tile").read_text()
                for name in ("cholesky", "lu", "qr", "hetero_cholesky", "hetero_qr"))


def _mutant(c: Chooser) -> str:
    base = c.choice(SHIPPED) if c.chance(0.2) else ProgramWriter(c).program()
    return mutate(base, c)


# ---------------------------------------------------------------- entry points
@st.composite
def programs(draw) -> str:
    """Hypothesis strategy: the text of a valid program."""
    return ProgramWriter(DrawChooser(draw)).program()


@st.composite
def mutants(draw) -> str:
    """Hypothesis strategy: a generated or shipped program after random edits."""
    return _mutant(DrawChooser(draw))


def random_program(seed) -> str:
    return ProgramWriter(SeededChooser(seed)).program()


def random_mutant(seed) -> str:
    return _mutant(SeededChooser(seed))


# ---------------------------------------------------------------- the oracle
class PropertyBroken(Exception):
    """The compiler broke a fuzzing property at ``stage``; ``__cause__`` holds the error or warning.

    ``compiled`` tells whether the driver was generated and compiled all the same (a warning).
    """

    def __init__(self, stage: str, error: BaseException, where: str | None = None, compiled: bool = False):
        super().__init__(f"{stage}: {type(error).__name__}: {str(error)[:300]}")
        self.stage = stage
        self.compiled = compiled
        self.__cause__ = error
        self.where = where or _innermost_frame(error)

    @property
    def signature(self) -> tuple[str, str, str]:
        """What tells one bug from another: the stage, the exception's type and where it arose."""
        return self.stage, type(self.__cause__).__name__, self.where


def _innermost_frame(error: BaseException) -> str:
    """``file:line`` of the innermost frame of the compiler (else of anything) in the traceback."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = [f for f in frames if f"{os.sep}tiledsl{os.sep}" in f.filename] or frames
    return f"{Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else "?"


def prepare(folder: Path) -> Path:
    """Make ``folder`` fit for :func:`judge` (it holds the user kernels' module); the program path."""
    # a star import may bind any name: check accepts every user kernel the fuzzer calls
    (folder / KERNEL_MODULE).write_text('"""Kernels of fuzzed programs: never run."""\nfrom fuzz_kernel_bodies import *\n')
    return folder / "fuzz.tile"


def _stage(stage: str, function, *args):
    try:
        return function(*args)
    except Exception as error:
        raise PropertyBroken(stage, error) from error


def _check_diagnostics(result):
    for d in result.diagnostics:
        if d.code not in CODES or not d.message:
            raise AssertionError(f"malformed diagnostic {d!r}")


#: what a driver may import: the runtime's surface; and, to say why the runtime cannot be imported
#: (a file hiding a module of Python's), sys and the driver contract, which import nothing of tiledsl
DRIVER_IMPORTS = {"tiledsl.runtime", "tiledsl.drivercontract"}


def _check_imports(driver: str):
    for node in ast.walk(ast.parse(driver)):
        if (isinstance(node, ast.Import) and [alias.name for alias in node.names] != ["sys"]
                or isinstance(node, ast.ImportFrom) and node.module not in DRIVER_IMPORTS):
            raise AssertionError(f"driver imports outside tiledsl.runtime: {ast.unparse(node)}")


def judge(text: str, path: Path) -> bool:
    """Check the fuzzing properties on one program; True when its driver was generated.

    Raises :class:`PropertyBroken` when checking raises, a diagnostic is malformed or
    does not render, an accepted program's driver does not compile or imports from
    elsewhere than ``tiledsl.runtime``, or any of that emits a Python warning.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = _judge(text, path)
    if caught:
        where = f"{Path(caught[0].filename).name}:{caught[0].lineno}"
        raise PropertyBroken("warning", caught[0].message, where, compiled)
    return compiled


def _judge(text: str, path: Path) -> bool:
    try:
        source = decode(str(path), text.encode())
    except SourceError:
        return False
    result = _stage("check", check_source, source)
    _stage("diagnostics", _check_diagnostics, result)
    _stage("report", result.report)
    if not result.ok:
        return False
    driver = _stage("generate", generate, result.checked)
    _stage("compile", compile, driver, "driver.py", "exec")
    _stage("imports", _check_imports, driver)
    return True


def _literal(text: str) -> int | None:
    """The value of an integer literal (``-3`` too), None for any other expression."""
    try:
        return int(text.replace(" ", "").replace("(", "").replace(")", ""))
    except ValueError:
        return None
