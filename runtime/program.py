"""The static description of a compiled program, as a generated driver states it.

A driver module (written by ``tiledsl compile``) defines three things that the
runtime consumes:

* ``PROGRAM``: a :class:`Program` describing the matrices, workspaces, tiling,
  parameters, kernel call sites and the numerical check;
* ``shapes(p)``: the global ``(rows, cols)`` of every matrix for parameters ``p``;
* ``generate(rt, p)``: the program's loop nest, which calls ``rt.submit`` once per
  task instance this rank takes part in.

These types are plain frozen data so that a driver is readable and the runtime
never needs the compiler.
"""
from __future__ import annotations

from dataclasses import dataclass, field

READ_MODES = frozenset({"in", "inout"})
WRITE_MODES = frozenset({"out", "inout"})


@dataclass(frozen=True)
class Tiling:
    """How matrices are cut into tiles: ``uniform`` (nb) or ``hybrid`` (B, b, s)."""

    kind: str
    defaults: dict = field(default_factory=dict)


@dataclass(frozen=True)
class MatrixDecl:
    """A matrix parameter: created by ``init`` (spd, general, diagdom, zeros) or loaded.

    ``load`` is the path as the program writes it; a relative one is relative to
    the ``.tile`` file's directory, which the compiler records as ``base``
    (absolute) so that a driver run from any directory finds the file.
    """

    name: str
    init: str
    line: int
    load: str | None = None
    base: str | None = None


@dataclass(frozen=True)
class WorkspaceDecl:
    """A workspace with the tile grid of matrix ``like`` (its tile height is in ``shapes``)."""

    name: str
    like: str
    line: int


@dataclass(frozen=True)
class CheckDecl:
    """The residual check ``kind`` applied to ``args`` (see :mod:`.verify` and :mod:`.usercheck`)."""

    kind: str                 # a built-in kind, or the name of a function of the program's kernel module
    args: tuple[str, ...]     # matrix / workspace names, in order
    line: int
    qualifiers: tuple[tuple[str, ...], ...] = ()   # per argument: the words written before its name
    options: tuple[tuple[str, object], ...] = ()   # NAME = constant pairs, e.g. (("alpha", -1.0),)
    user: bool = False        # True: kind names a function of the kernel module


@dataclass(frozen=True)
class Call:
    """One kernel call site of the program.

    ``modes`` holds the access mode of each argument; ``main`` is the index of the
    first written argument (the task's main output). ``line`` and ``text`` point back
    at the ``.tile`` source for messages.
    """

    kernel: str
    modes: tuple[str, ...]
    main: int
    line: int
    text: str

    @property
    def reads(self) -> tuple[int, ...]:
        return tuple(i for i, m in enumerate(self.modes) if m in READ_MODES)

    @property
    def writes(self) -> tuple[int, ...]:
        return tuple(i for i, m in enumerate(self.modes) if m in WRITE_MODES)


@dataclass(frozen=True)
class Program:
    """Everything static about a compiled ``.tile`` program."""

    name: str
    source: str
    tiling: Tiling
    matrices: tuple[MatrixDecl, ...]
    workspaces: tuple[WorkspaceDecl, ...] = ()
    params: tuple[str, ...] = ()
    check: CheckDecl | None = None
    kernel_module: str | None = None
    calls: tuple[Call, ...] = ()
    derive_priorities: bool = False  # no call states a priority: the runtime derives them
