"""Stand-in runtimes that record what a driver's loop nest would submit.

:class:`LoopNestTarget` is what ``generate`` runs against, and the base of every
stand-in (here, and explain's and simulate's walks). Running ``generate`` against
one of these costs only the loop nest's integer arithmetic. :class:`Everyone` is a rank number equal to every rank, so the
driver submits every task of the program (``tiledsl explain``, the reflector
list of the QR check); a real rank number records that rank's share.
:class:`Survey` walks every task once before a run and keeps only what the run
needs: this rank's task count and tiles, and the compact task sequence that
derived priorities are computed from. Every walk turns a mistake of the
program's loop nest (a tile that does not exist, a division by zero) into the
:class:`~.errors.TaskFailure` a run reports, naming the ``.tile`` line.
"""
from __future__ import annotations

from .errors import ValueArgumentError, loop_nest_failure
from .iterations import check_iterations
from .kernels import CPU_KERNELS
from .matrix import call_views, check_distinct_writes, moved_part, sends_nothing
from .program import check_values, flatten
from .protocol import delivery
from .share import among, every_value


class Everyone:
    """A rank number equal to every rank: the driver then submits every task."""

    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


class LoopNestTarget:
    """What a driver's ``generate(rt, p)`` runs against: ``rank`` (the rank whose tasks it
    submits; :class:`Everyone` here), ``among`` (the values of a loop that can lead to that
    rank's tasks; here all of them), ``matrix(name)``, ``submit(call, tiles, regions, priority,
    values=(), at=None)`` and ``release(tile, at=None)``. The engine is the real one; the
    stand-ins (recorders, the survey, explain's and simulate's walks) derive from this class."""

    among = staticmethod(every_value)

    def __init__(self, matrices: dict):
        self.matrices = matrices
        self.rank = Everyone()

    def matrix(self, name):
        return self.matrices[name]

    def submit(self, call, tiles, regions, priority, values=(), at=None):
        raise NotImplementedError

    def release(self, tile, at=None):
        """A stand-in that keeps no copies has nothing to forget."""


class Recorder(LoopNestTarget):
    """Records ``(call, tiles, regions)`` of every submit whose kernel ``keep`` accepts, and
    ``events``: the same submits and the released tiles, in program order."""

    def __init__(self, matrices: dict, rank, keep=lambda call: True):
        super().__init__(matrices)
        self.rank = rank
        self.keep = keep
        self.submitted: list = []
        self.events: list = []  # ("task", (call, tiles, regions)) or ("release", tile)
        self.count = 0

    def submit(self, call, tiles, regions, priority, values=(), at=None):
        self.count += 1
        check_values(call, values)  # as a run refuses them (graph, the critical path)
        call, tiles, regions = flatten(call, tiles, regions)
        check_distinct_writes(call, tiles)
        if self.keep(call):
            self.submitted.append((call, tiles, regions))
            self.events.append(("task", (call, tiles, regions)))

    def release(self, tile, at=None):
        self.events.append(("release", tile))


class Survey(LoopNestTarget):
    """What a run needs to know of the loop nest before it starts, in one pass over every task.

    A rank submits a task when it owns one of the task's tiles (the driver's own
    test), so the pass can run as :class:`Everyone` and still tell this rank's tasks
    (derived priorities then look at every task: ``sequence``). When ``guided``, it
    walks as this rank (derived priorities look at the tasks it walks), only the loop
    values that can lead to its tasks (:mod:`.share`),
    and ``foreign`` counts the tiles written by tasks of other ranks it met on the way
    (what a guided walk does for them: a bump each; a whole walk counts them alike). A
    guided walk notes, as the run's exchange does, what of this rank's tiles' versions goes
    to another rank (:meth:`_note_sends`), and passes over their later readers there as the
    run does (the run notes more: the versions computed on that rank's host, which it
    keeps; so the survey never passes over a reader the run meets).
    """

    def __init__(self, matrices: dict, rank: int, sequence=None, guided: bool = False):
        super().__init__(matrices)
        self.guided = guided
        self.rank = rank if self.guided else Everyone()
        self.among = among if self.guided else every_value
        self.me = rank
        self.count = 0  # tasks this rank submits
        self.runs = 0  # those it runs (it owns their main tile): a progress bar's total
        self.foreign = 0  # the tiles that tasks of other ranks write, met on the way
        self.foreign_tasks = 0  # those tasks, where the walk sees them (a whole walk; a guided one bumps their tiles)
        self.needed: set = set()  # tiles they touch
        self.run_on: dict = {}  # device -> the tiles touched by the tasks this rank runs there (0: the host)
        self.kernels_on: dict = {}  # device -> the kernels of those tasks
        self.column_panels: set = set()  # matrices of which they give a built-in kernel column panels
        self.sequence = sequence  # a priorities.TaskSequence to fill, or None

    def submit(self, call, tiles, regions, priority, values=(), at=None):
        columns = [tiles[i] for i, axis in zip(call.panels, call.panel_axes) if axis == 0]
        call, tiles, regions = flatten(call, tiles, regions)
        mine = any(tile.rank == self.me for tile in tiles)
        if mine and self.guided:  # as the run's walk: a task it reads only versions already sent for is passed over
            mine = self._note_sends(call, tiles, regions)
        if mine:  # the tasks this rank runs or sends for: those whose mistakes it must find before the run
            check_distinct_writes(call, tiles)
            self.count += 1
            main = tiles[call.main]
            if main.rank == self.me:  # a task runs where its main output lives
                self.runs += 1
                self.run_on.setdefault(main.device, set()).update(tiles)
                self.kernels_on.setdefault(main.device, set()).add(call.kernel)
            self.needed.update(tiles)
            if call.kernel in CPU_KERNELS:
                self.column_panels.update(panel[0].matrix.name for panel in columns if len(panel) > 1)
        if self.sequence is not None:
            self.sequence.add(call, tiles, mine, mine and tiles[call.main].rank == self.me)
        self.foreign += 0 if mine else len(call.writes)
        self.foreign_tasks += not mine

    def _note_sends(self, call, tiles, regions) -> bool:
        """Whether a task that touches this rank's tiles gives it anything to do, as the run's
        engine decides (:func:`.matrix.sends_nothing`); its tiles note, as the exchange's do, what
        a task of another rank reads of them (:func:`.protocol.delivery`) and their versions (a
        new one forgets what went where)."""
        runner = tiles[call.main].rank
        views = None if runner == self.me else call_views(call, tiles, regions)
        new = not sends_nothing(call, tiles, views, self.me)
        if new and runner != self.me:
            for index, tile in enumerate(tiles):
                if tile.rank == self.me and call.modes[index] != "out":
                    delivery(tile.delivered, (runner, 0), moved_part(call, tiles, views, index), tile.shape)
        for index in call.writes:
            tile = tiles[index]
            if tile.rank == self.me:
                tile.delivered.clear()
                tile.version += 1
        return new

    def release(self, tile, at=None):
        if self.guided and tile.rank == self.me:
            tile.delivered.clear()  # the run sends the tile anew to its next readers


def survey(driver, matrices: dict, params, rank: int, sequence=None, guided: bool = False) -> Survey:
    """One pass over the driver's loop nest for ``rank`` (see :class:`Survey`)."""
    found = Survey(matrices, rank, sequence, guided)
    saved = {name: (matrix.counts_foreign_writes, matrix.foreign_writes) for name, matrix in matrices.items()}
    if found.guided:  # the driver bumps the tiles other ranks' tasks write: count them, make no tile
        for matrix in matrices.values():
            matrix.counts_foreign_writes = False
    try:
        walk(driver, found, params, rank)
    finally:
        for name, matrix in matrices.items():
            found.foreign += matrix.foreign_writes - saved[name][1]
            matrix.counts_foreign_writes = saved[name][0]
            for tile in matrix.made_tiles() if found.guided else ():
                tile.delivered.clear()  # what the survey noted: the run's exchange starts anew
                tile.version = 0
    return found


def record(driver, matrices: dict, params, rank=None, keep=lambda call: True) -> Recorder:
    """Run the driver's loop nest for ``rank`` (None: every rank) and return what it submitted."""
    recorder = Recorder(matrices, Everyone() if rank is None else rank, keep)
    walk(driver, recorder, params, rank if isinstance(rank, int) else 0)
    return recorder


def walk(driver, stand_in, params, rank: int) -> None:
    """Run the driver's loop nest against ``stand_in``; its mistakes raise TaskFailure.

    A loop nest too long to walk is refused first (:func:`.iterations.check_iterations`),
    whatever walks it (a run's survey, explain, graph, simulate, tune). An exception of
    the stand-in's own (a ``keep`` that stops the walk early) is not the program's
    mistake: it goes through unchanged. A tile or sub-range outside its matrix, a
    flop count that fails, or a value argument a kernel cannot take, is the program's, wherever
    it was found (a stand-in checks sub-ranges, values and counts flops too)."""
    from .flops import FlopCountError
    from .matrix import TileIndexError

    check_iterations(driver, stand_in.matrices, params, rank)
    try:
        driver.generate(stand_in, params)
    except Exception as error:
        if _raised_by(stand_in, error) and not isinstance(error, (TileIndexError, FlopCountError,
                                                                  ValueArgumentError)):
            raise
        raise loop_nest_failure(error, rank) from None


def _raised_by(stand_in, error: BaseException) -> bool:
    """Whether ``error`` passed through a method of ``stand_in`` (its submit, its keep)."""
    traceback = error.__traceback__
    while traceback is not None:
        if traceback.tb_frame.f_locals.get("self") is stand_in:
            return True
        traceback = traceback.tb_next
    return False
