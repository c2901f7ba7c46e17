"""Priorities derived from a program's task graph, for programs that state none.

A task's priority is its *bottom level*: the longest chain of dependent work
from its start to the end of the program, itself included (the classic list
scheduling rank of HEFT; StarPU and PaRSEC schedulers use the same idea). Ready
tasks that many others wait on, transitively, go first, so the critical path
is worked on as early as it can be.

The graph is the program's own: every task in program order with the tiles it
reads and writes (read after write, write after read, write after write). Each
task's work is estimated from its largest tile, as ``(rows × cols)^1.5``: the
cube of a square tile's order, which is what a BLAS-3 tile kernel costs up to
a constant, so that hybrid programs weigh a GPU's large tile above a core's
small one. One pass in reverse program order computes every bottom level.

The sequence is kept compact (a kernel code and tile numbers per task, about
15 bytes a task), since a run may have millions of tasks; a rank then hands
out the levels of the tasks it submits, in the order it submits them.

On up to :data:`EXACT_LEVELS_RANKS` ranks every rank walks every task for the
levels (at most that many times its share). On more, where the ranks walk their
shares of the loop nest, a rank's graph is the tasks it walks: those it runs,
and the other ranks' that read its tiles, whose writes reach its later readers.
Each level is then the longest chain within that graph (never above the exact
one: the chains through other ranks' tasks it does not see are left out).

``--priorities`` chooses: ``program`` (the program's own; derived when it
gives none), ``auto`` (derived always) or ``none`` (all equal: oldest first).
"""
from __future__ import annotations

from array import array

from ..language import WRITE_MODES

MODES = ("program", "auto", "none")

#: the most ranks on which derived priorities are the whole task graph's: each rank walks every task
#: (a Cholesky of 40-80 tiles on 16 simulated Keeneland nodes ran 5-9% longer on the levels of each
#: rank's share, whose walk saved under 1%); past it, a walk of every task grows with the ranks
EXACT_LEVELS_RANKS = 16


class TaskSequence:
    """Every task of a program in program order, compactly, and which of them are this rank's."""

    def __init__(self):
        self.calls: list = []  # each distinct call site, by code
        self._codes: dict = {}
        self.code = array("H")  # per task: its call's code
        self.tiles = array("i")  # per task: its tiles' numbers, as many as the call has arguments
        self.mine = bytearray()  # per task: 1 if this rank submits it
        self.runs = bytearray()  # per task: 1 if this rank runs it (its main tile is the rank's)
        self._numbers: dict = {}  # id(tile) -> number
        self.work: list[float] = []  # per tile number: the work of a task on it (see work())

    def add(self, call, tiles, mine: bool, runs: bool = False) -> None:
        code = self._codes.get(id(call))
        if code is None:
            code = self._codes[id(call)] = len(self.calls)
            self.calls.append(call)
        self.code.append(code)
        for tile in tiles:
            number = self._numbers.get(id(tile))
            if number is None:
                number = self._numbers[id(tile)] = len(self.work)
                self.work.append(work((tile,)))
            self.tiles.append(number)
        self.mine.append(mine)
        self.runs.append(runs)

    def __len__(self) -> int:
        return len(self.code)


def bottom_levels(sequence: TaskSequence, which: bytearray | None = None) -> array:
    """The bottom level of every task of ``sequence`` this rank submits (``which``: of those marked
    there, as ``sequence.runs``), in program order."""
    which = sequence.mine if which is None else which
    next_writer = [0.0] * len(sequence.work)  # per tile: the level of its next writer (later in program order)
    readers_before_it = [0.0] * len(sequence.work)  # per tile: the highest level of its readers up to that writer
    modes = [call.modes for call in sequence.calls]
    writes = [[mode in WRITE_MODES for mode in m] for m in modes]
    mine = array("d")
    end = len(sequence.tiles)
    for index in range(len(sequence) - 1, -1, -1):
        written = writes[sequence.code[index]]
        start = end - len(written)
        tiles = sequence.tiles[start:end]
        end = start
        after, cost = 0.0, 0.0
        for tile, write in zip(tiles, written):
            after = max(after, next_writer[tile], readers_before_it[tile] if write else 0.0)
            cost = max(cost, sequence.work[tile])
        level = cost + after
        for tile, write in zip(tiles, written):
            if write:
                next_writer[tile], readers_before_it[tile] = level, 0.0
            elif level > readers_before_it[tile]:
                readers_before_it[tile] = level
        if which[index]:
            mine.append(level)
    mine.reverse()
    return mine


def work(tiles) -> float:
    """A task's estimated work: its largest tile's ``(rows × cols)^1.5``."""
    largest = max(h * w for h, w in (t.shape for t in tiles))
    return float(largest) ** 1.5


def in_turn(levels: array):
    """``priority_of`` for the engine: the next level for each program task this rank submits."""
    upcoming = iter(levels)

    def priority_of(call, tiles, given):
        return next(upcoming, given)  # after the program's tasks: the checks' own priorities
    return priority_of


def equal(call, tiles, given) -> int:
    """``--priorities none``: every task the same, so the oldest ready task runs first."""
    return 0


def in_force(program, choice: str, over_shares: bool = False) -> str:
    """What ``--priorities choice`` gives a run, as its summary says it: ``"none"``, ``"derived"`` (from
    the task graph), ``"derived-share"`` (from each rank's share of it: ``over_shares``, ranks walking
    their shares) or ``"program"`` (its calls' priority clauses)."""
    if choice == "none":
        return "none"
    return ("derived-share" if over_shares else "derived") if derived(program, choice) else "program"


def walks_every_task(program, choice: str, ranks: int) -> bool:
    """Whether the derived priorities of ``--priorities choice`` make each of ``ranks`` walk every
    task of the program (exact levels; else, on several ranks, each walks its share)."""
    return ranks <= EXACT_LEVELS_RANKS and derived(program, choice)


def derived(program, choice: str) -> bool:
    """Whether ``--priorities choice`` derives the priorities from the task graph (``auto``, or the
    program's own choice when it asks for them)."""
    return choice == "auto" or (choice == "program" and program.derive_priorities)
