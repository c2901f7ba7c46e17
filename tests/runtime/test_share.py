"""A rank's share of the loop nest (runtime/share.py, runtime/dataflow.py, compiler/dataflow.py).

On several ranks a rank walks only the loop values that can lead to its tasks and
learns from the program's affine description when the tiles it reads but does not
own are written or released elsewhere. Checked here against the whole walk, for
every shipped program with such a description, on several grids: the same tasks in
the same order, the same tiles, and the same moments where a tile it does not own
changed version or was released (what its copies and messages follow), while the
tasks of other ranks it meets fall with the grid. Real multi-rank runs (test_mpi,
test_subranges) run guided and check messages and results against explain.
"""
from pathlib import Path
from types import SimpleNamespace

import pytest

from tiledsl.compiler import compile_path
from tiledsl.compiler.dataflow import plan, planned
from tiledsl.compiler.expressions import unparse
from tiledsl.compiler.pipeline import check_path
from tiledsl.driverload import import_driver
from tiledsl.runtime.dataflow import Tracker, events_of, events_on, next_event
from tiledsl.runtime.layout import make_distribution, make_matrices, make_params
from tiledsl.runtime.matrix import call_views, moved_part
from tiledsl.runtime.options import Options
from tiledsl.runtime.program import flatten
from tiledsl.runtime.priorities import TaskSequence, bottom_levels, in_turn
from tiledsl.runtime.protocol import delivery
from tiledsl.runtime.recording import Everyone, record, survey
from tiledsl.runtime.share import ANY, AT, DIV, MINUS, MOD, PLUS, among, every_value

from differential_programs import KERNEL_MODULE, KERNEL_MODULE_SOURCE, generate

ROOT = Path(__file__).resolve().parents[2]
AFFINE = ["cholesky", "gemm", "gesv", "getrf", "hetero_cholesky", "hetero_qr", "hqr", "lu", "posv", "potri", "qr",
          "syrk", "trmm", "trtri", "tsqr"]
GRIDS = [(2, 2), (2, 3), (3, 1), (1, 4)]


@pytest.fixture(scope="module")
def drivers(tmp_path_factory):
    folder = tmp_path_factory.mktemp("share")
    found = {}
    for name in AFFINE:
        _, text = compile_path(ROOT / "programs" / f"{name}.tile")
        (folder / f"share_{name}.py").write_text(text)
        found[name] = import_driver(folder / f"share_{name}.py", f"share_{name}")
    return found


def setup(driver, name: str, grid, rank: int, options: Options | None = None):
    """The parameters and ``rank``'s matrices of a run on ``grid``, at ``options`` (else n = 430)."""
    tiles = {"B": 96, "b": 32, "s": 2} if name.startswith("hetero") else {"nb": 48}
    params = make_params(driver, options or Options(n=430, tiles=tiles))
    return params, make_matrices(driver, params, make_distribution(driver.PROGRAM, params, grid, 0), rank)


class Touches:
    """A stand-in that notes, for each task of ``me`` and each tile of it ``me`` does not own,
    whether that tile was written or released since ``me`` last touched it."""

    def __init__(self, matrices, me: int, guided_by=None):
        self.matrices, self.me = matrices, me
        self.version: dict = {}  # tile -> writes (whole walk) or new versions seen (guided)
        self.released: set = set()
        self.last: dict = {}  # tile -> version at my last touch
        self.seen: list = []
        self.tasks = 0
        if guided_by is None:
            self.rank, self.among, self.tracker = Everyone(), every_value, None
        else:
            self.rank, self.among = me, among
            self.tracker = Tracker(guided_by, me, self._advance, self.released.add)

    def _advance(self, tile):
        self.version[tile] = self.version.get(tile, 0) + 1

    def matrix(self, name):
        return self.matrices[name]

    def submit(self, call, tiles, regions, priority, values=(), at=None):
        call, tiles, _ = flatten(call, tiles, regions)
        if self.tracker is not None:
            self.tracker.reach(at)
        if any(t.rank == self.me for t in tiles):
            self.tasks += 1
            for tile in tiles:
                if tile.rank != self.me:
                    version = self.version.get(tile, 0)
                    # what its copies follow: whether anything happened to the tile since (the first
                    # event closes the copies of the old version; later ones have nothing left to close;
                    # before its first touch it holds none, which a release closes)
                    self.seen.append((self.tasks, str(tile), tile in self.last and (self.last[tile] != version
                                                                                     or tile in self.released)))
                    self.last[tile] = version
                    self.released.discard(tile)
            for index in call.writes:
                self._advance(tiles[index])
        elif self.tracker is None:
            for index in call.writes:
                self._advance(tiles[index])
        if self.tracker is not None:
            self.tracker.touched(at, tiles)

    def release(self, tile, at=None):  # as the engine's: a release is no touch
        if self.tracker is not None:
            self.tracker.reach(at)
        self.released.add(tile)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", AFFINE)
def test_a_guided_rank_submits_what_the_whole_walk_does(drivers, name):
    assert_guided_is_the_whole_walk(drivers[name], name)


GUARDED = """\
program guarded {
  tiling uniform(nb = 48)
  matrix A[n, n] = random spd
  matrix B[n, n] = random general
  for k in 0 .. A.nt {
    for m in 0 .. A.mt {
      if m > k and not (m > k + 3 or k < 1) { potrf(A[m, 0]) }
      if m < k + 2 { trsm(A[m, 2], A[m, 3]) } else { trsm(A[m, 2], A[m, 3], "R", "L", "T", "N", 2.0) }
    }
    for m in 0 .. A.mt {
      trsm(A[m, 0], A[m, 1])
      if m == k { trsm(A[m, 1], A[m, 2]) }
    }
    if k + 1 < A.mt { gemm(A[k + 1 : A.mt, 0], A[k, 1], A[k + 1 : A.mt, 4]) }
  }
  for t in A.nt - 1 .. -1 step -1 {
    trsm(A[0, 5], A[t, 6])
    if t >= 2 and 2 * t < A.nt + t - 1 { potrf(A[0, 5]) }
  }
  for k in 0 .. A.nt step 2 {
    trsm(A[1, 7], A[k, 6])
    if k < 5 { potrf(A[1, 7]) }
  }
  for k in 0 .. A.nt {
    for m in max(k - 1, 1) .. min(k + 3, A.mt) { trsm(A[k, 8], B[m, 0]) }
    let top = min(k + 2, min(A.mt - 1, 6))
    for m in top .. max(k - 2, -1, 1) step -1 { trsm(B[m, 0], B[k, 1]) }
    for m in 1 .. min(k, 5) step 2 { trsm(B[m, 1], B[k, 2]) }
    for m in 0 .. A.mt {
      if m < min(k + 2, 7) and max(k - 1, 2) <= m and not (m >= min(A.mt - 2, k + 1)) { trsm(B[k, 2], B[m, 3]) }
    }
  }
}
"""


UNIONS = """\
program unions {
  tiling uniform(nb = 48)
  param p = 2
  param s = 2
  param shift = 0.5
  param mode = "B"
  matrix B[n, n] = random general
  matrix C[n, n] = random general
  for k in 0 .. B.nt {
    for m in 0 .. B.mt {
      if m < k - 2 or m > k + 3 { trsm(B[k, m], C[m, k]) }
      if m != k { trsm(C[m, k], B[m, 4]) }
      if not (m >= 2 and k <= 5) { trsm(B[m, 1], C[k, m]) } else { trsm(C[2, m], B[m, k]) }
      if m == max(k - 1, 2) { trsm(B[m, 3], C[k, 0]) }
      if 2 * m < B.mt and 3 * k >= B.nt - 1 { trsm(C[k, 4], B[m, 1]) }
      if k < 2 * m and k + m * p < B.mt + 4 { trsm(B[m, 0], C[m, 3]) }
      if m % 2 == 0 or (m + k) % 3 != 1 { trsm(B[m, 7], C[k, m]) }
      if m > min(k, 4) + 1 and 2 * max(k - 5, 1) - min(m, 3) <= m { trsm(C[m, 0], B[k, 6]) }
      if (m + k) % (s + 1) == s - 1 and k % s == 0 { trsm(B[m, 3], C[m, 7]) }
      if 1 == (2 * m - k) % 4 and m % 3 == s - 1 { trsm(C[m, 8], B[k, m]) }
      if m > min(k, 4) { trsm(B[m, 5], C[2, m]) }
      if m < max(k - 3, 2) and not (m == 1) { trsm(C[k, 6], B[m, 6]) }
      if shift < 1.0 and m > k { trsm(B[k, m], C[m, 6]) }
      if mode == "B" and not (shift > 2 * shift) { trsm(C[k, 1], B[m, 2]) } else { trsm(B[m, 2], C[k, 1]) }
      if k % s == 0 { trsm(B[m, 6], C[m, 2]) } else { trsm(C[m, 2], B[m, 6]) }
      if m % s != 1 and k % 100 != 3 and (m + k) % (s + 1) != s - 3 { trsm(B[k, 0], C[m, 7]) }
      if (m + k) % 3 < 2 { trsm(C[m, 6], B[k, 5]) } else { trsm(B[k, 5], C[m, 6]) }
      if 1 >= (2 * m - k) % -4 and not (k % 5 > s) { trsm(B[m, 8], C[k, 2]) }
      if m % 4 >= 3 or k % 100 < 98 { trsm(C[k, 3], B[m, 4]) }
      if s % (p + 1) < 1 or not (B.nt % s >= 1) { trsm(B[m, 5], C[k, 8]) }
      trsm(C[m, 3], B[min(k + 1, B.mt - 1), m])
      if m > 0 { trsm(B[m, 1], C[max(min(k - 1, m), 2), min(m, 4)]) }
      if k < B.mt - 1 { trsm(C[m, 4], B[k : min(k + 2, B.mt), 8]) }
      trsm(B[m, 3], C[(m + k + 1) % C.mt, (2 * k) % s])
      trsm(B[k, 4], C[7, m - m % 3])
      trsm(C[m, 8], B[(m + k) // 2, 7])
      if m > 1 { trsm(B[5, 2], C[B.mt - 1 - (m - 1) // s, 3 + k // -4]) }
      if k > 0 { trsm(C[k, 5], B[(B.mt - 1 - m) % (s + 1), (k - m) % -3 + 5]) }
    }
    for m in min(k + 1, 3) .. B.mt { trsm(B[m, 6], C[k, 3]) }
    for m in 0 .. max(k - 2, 3) { trsm(C[k, 7], B[m, 7]) }
    for m in max(k, 4) .. -1 step -1 { trsm(B[m, 7], C[k, 5]) }
    for m in B.mt - 1 .. min(k, 5) step -1 { trsm(C[k, 8], B[m, 8]) }
    for m in 0 .. max(k, 3) step 2 { trsm(B[m, 8], C[k, 2]) }
    for m in min(k, 4, B.mt - 3) .. B.mt step 2 { trsm(C[m, 5], B[k, 3]) }
    for m in max(k, 2, B.mt - 4) .. -1 step -2 { trsm(B[m, 2], C[k, 7]) }
    for m in 0 .. B.mt step 3 { if m > k - 2 or m == 0 { trsm(C[m, 1], B[k, 2]) } }
    for m in B.mt - 1 .. -1 step -2 { if m < k + 1 { trsm(B[m, 4], C[k, 8]) } }
    for m in B.mt - 1 .. -1 step -1 { if m % 3 == 1 and B.nt % 2 == 1 { trsm(C[k, 5], B[m, 5]) } }
    if B.nt > 3 { trsm(C[k, 0], B[8, k]) }
    if B.nt > 100 or k == 2 { trsm(B[8, k], C[k, 1]) }
    if B.nt - 100 > 0 { trsm(C[8, k], B[k, 1]) }
    let top = min(k + 2, B.mt - 1)
    let low = max(top - 4, k - 1, 0)
    for j in low .. min(low + 3, top) { trsm(B[j, 1], C[k, 4]) }
    for m in 0 .. B.mt {
      if m >= top or m == 0 { trsm(C[m, 2], B[m, 0]) }
    }
  }
}
"""


@pytest.mark.timeout(300)
def test_terms_that_cannot_be_computed_walk_every_value_and_a_tuple_still_serves():
    """A driver of format 2 passes its terms as a function: a division by zero in one gives every
    value (the walk meets the call, which fails at its own line); format 1 passed a tuple."""
    assert among(0, 5, 1, lambda: 1 // 0) == range(0, 5)

    class Lines:
        edges, rows, row_set, cols, col_set = False, [1, 3], {1, 3}, [0, 1, 2, 3, 4], set(range(5))

    matrix = type("M", (), {"lines": Lines, "mt": 5, "nt": 5})
    terms = ((matrix, PLUS, 0, ANY, 0),)
    assert list(among(0, 5, 1, terms)) == list(among(0, 5, 1, lambda: terms)) == [1, 3]


def test_calls_under_affine_ifs_walk_their_share(tmp_path):
    """if and else, and, not over or, ==, a loop counting down, a loop of step 2 bounded above, loop
    bounds and if conditions taking the min or max of forms (directly, nested, through a let; up and down):
    the guided walk follows the whole one (tiles written only under an if and read on
    other ranks: an event at an iteration the if leaves out would show as a version)."""
    driver = _driver_of(tmp_path, "guarded")
    assert hasattr(driver, "dataflow")
    assert_guided_is_the_whole_walk(driver, "guarded")


def test_calls_under_unions_walk_their_share(tmp_path):
    """A condition that is an or (directly, as !=, as a negated and, as a comparison a min or max makes
    one, through a let), a min start or max end counting up (max start or min end counting down, of
    step 2 too), an if bounding a stepped loop from below, a comparison with a coefficient other than
    ±1 (a number or a parameter, the rest varying too), one of sizes alone (true, false, in an or), and
    a loop variable modulo a number or a parameter (==, !=, up and down, the residue a parameter), sums
    and multiples of mins and maxes (directly and through lets), comparisons of float and char parameters
    (decided as written: a float's difference is no integer form), residues excluded (``!=`` and ``else``, modulo
    a parameter or a number, a residue that is no value of the modulo), orders of a modulo by a number (the
    residues kept, or those left out, against a number or a parameter; of sizes and parameters alone, decided as
    written), written indices and range bounds that
    are mins and maxes (nested too), written indices modulo a size, a parameter or a number (negative too):
    each statement's events are the union of its alternatives'."""
    driver = _driver_of(tmp_path, "unions")
    text = Path(driver.__file__).read_text()
    assert "when=B.nt - 100 > 0" in text and "when=shift < 1.0" in text and "when=not (mode == 'B'" in text
    assert "when=s % (p_ + 1) < 1" in text and "when=B.nt % s < 1" in text  # (negated as the if is)
    assert_guided_is_the_whole_walk(driver, "unions")


def _driver_of(folder, name: str):
    """The driver of the test program ``name`` (GUARDED or UNIONS), compiled into ``folder``."""
    (folder / f"{name}.tile").write_text(globals()[name.upper()])
    _, text = compile_path(folder / f"{name}.tile")
    (folder / f"share_{name}.py").write_text(text)
    return import_driver(folder / f"share_{name}.py", f"share_{name}")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["cholesky", "qr", "getrf", "hetero_cholesky", "hqr", "guarded", "unions"])
def test_the_next_event_on_a_tile_is_the_least_instance_after_the_key(drivers, tmp_path, name):
    """The search (its bound by the best event so far included) against every instance of every
    event enumerated, for every tile and a sample of schedule keys; and asked at growing keys with
    a memo, as a rank's tracker asks."""
    import random

    driver = _driver_of(tmp_path, name) if name in ("guarded", "unions") else drivers[name]
    params, matrices = setup(driver, name, (2, 2), 0)
    chosen = random.Random(7)
    for matrix, events in events_of(driver, matrices, params).items():
        instances = [(key, tile, event) for event in events for key, tile in enumerated(event)]
        # keys of calls: the instances', and a statement before and after each in its block
        keys = sorted({key[:-1] + (key[-1] + shift,) for key, _, _ in instances for shift in (-1, 0, 1)} | {(-1,)})
        for tile in {tile for _, tile, _ in instances}:
            on = events_on(events, *tile)
            memo = [None] * len(on)
            for after in chosen.sample(keys, min(40, len(keys))):
                later = [(key, event) for key, at, event in instances if at == tile and key > after]
                expected = min(later, key=lambda found: found[0]) if later else None
                found = next_event(on, *tile, after)
                assert (found and found[0]) == (expected and expected[0]), (matrix, tile, after)
                before = chosen.choice(keys)  # and one event's search bounded above
                event = chosen.choice(on) if on else None
                if event is not None:
                    between = [key for key, its in later if its is event and key < before]
                    assert event.system().first_after(*tile, after, before) == min(between, default=None), \
                        (matrix, tile, after, before)
            for after in sorted(chosen.sample(keys, min(40, len(keys)))):
                later = [key for key, at, _ in instances if at == tile and key > after]
                found = next_event(on, *tile, after, memo)
                assert (found and found[0]) == min(later, default=None), (matrix, tile, after, "memo")


def enumerated(event):
    """Every (schedule key, tile) of ``event``, its loops run as written."""
    def form(f, values):
        return f[0] + sum(a * u for a, u in zip(f[1:], values))

    def walk(values):
        level = len(values)
        if level == len(event.loops):
            if any(form(f, values) < 0 for f in event.constraints) or \
                    any(form(f, values) % d for f, d in event.moduli) or \
                    any(form(f, values) % d == 0 for f, d in event.off_moduli):
                return
            key = (event.positions[0],) + tuple(x for u, p in zip(values, event.positions[1:]) for x in (u, p))
            for i in range(form(event.rows[0], values), form(event.rows[1], values)):
                for j in range(form(event.cols[0], values), form(event.cols[1], values)):
                    if not any((form(f, values) - (j if axis else i)) % d for f, d, axis in event.index_moduli) and \
                            all(form(f, values) + a * (j if axis else i) >= 0 for f, a, axis in event.index_bounds):
                        yield key, (i, j)
            return
        loop = event.loops[level]
        lowest, stop = max(form(f, values) for f in loop.lower), min(form(f, values) for f in loop.upper)
        for u in range(form(loop.lower[0], values), stop, loop.step):  # the steps count from the start
            if u >= lowest:
                yield from walk(values + [u])
    yield from walk([])


def sending_nothing_new(driver, matrices, params, me: int) -> tuple[int, set]:
    """The tasks ``me`` takes part in but those of another rank that read only versions of ``me``'s
    tiles already sent there (:func:`.protocol.delivery`; a workspace tile no task wrote yet is
    said to be read each time by its owner), their tiles, and the tiles those others write: what
    a share walk can least take part in, from a record of the whole walk."""
    sent: dict = {}  # tile of me -> {place: parts} of its current version
    written: set = set()
    count, tiles_met, passed = 0, set(), 0
    for kind, event in record(driver, matrices, params, me).events:
        if kind == "release":
            sent.pop(event, None)
            continue
        call, tiles, regions = event
        runner, views = tiles[call.main].rank, call_views(call, tiles, regions)
        new = runner == me or any(tiles[index].rank == me for index in call.writes)
        for index, tile in enumerate(tiles):
            if tile.rank == me != runner and call.modes[index] != "out":
                new |= delivery(sent.setdefault(tile, {}), (runner, 0), moved_part(call, tiles, views, index),
                                tile.shape)[0] or tile.matrix.workspace and tile not in written
        for index in call.writes:
            sent.pop(tiles[index], None)
            written.add(tiles[index])
        if new:
            count += 1
            tiles_met.update(tiles)
        else:
            passed += len(call.writes)
    return count, tiles_met, passed


def assert_guided_is_the_whole_walk(driver, name: str, options: Options | None = None) -> None:
    """The guided survey takes part in no task that sends nothing new, as the run's walk."""
    for grid in GRIDS:
        for rank in range(grid[0] * grid[1]):
            params, matrices = setup(driver, name, grid, rank, options)
            events = events_of(driver, matrices, params)
            assert events is not None
            whole, guided = survey(driver, matrices, params, rank), survey(driver, matrices, params, rank, guided=True)
            least, least_tiles, passed = sending_nothing_new(driver, matrices, params, rank)
            assert (guided.count, guided.needed) == (least, least_tiles), (grid, rank)
            assert least <= whole.count and least_tiles <= whole.needed, (grid, rank)
            # tasks of other ranks met (what they write): those passed over, and at most the whole walk's others
            assert guided.foreign <= whole.foreign + passed, (grid, rank)  # equal where every panel spans the ranks
            full, share = Touches(matrices, rank), Touches(matrices, rank, events)
            driver.generate(full, params)
            for matrix in matrices.values():
                matrix.counts_foreign_writes = False  # a guided rank ignores other ranks' writes as it walks
            driver.generate(share, params)
            share.tracker.finish()
            assert share.seen == full.seen, (grid, rank)
            # one question per tile and per version or release it goes through, not per touch
            moments = len({t for _, t, _ in share.seen}) + sum(happened for _, _, happened in share.seen)
            assert share.tracker.queries <= 2 * moments + 10, (grid, rank)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", range(60))
def test_a_random_affine_program_is_in_the_class_and_each_rank_walks_what_the_whole_walk_does(tmp_path, seed):
    """Programs drawn at random (:mod:`differential_programs`, affine: indices kept in range by the ifs
    around them; loops up, down and by steps, bounds of outer variables, mins and maxes; ifs of every
    kind of comparison the class takes, residues, floats and chars; lets, panels, sub-ranges,
    releases, workspaces), on every grid and rank."""
    program = generate(seed, affine=True)
    (tmp_path / KERNEL_MODULE).write_text(KERNEL_MODULE_SOURCE)
    (tmp_path / f"random{seed}.tile").write_text(program.text)
    _, text = compile_path(tmp_path / f"random{seed}.tile")
    (tmp_path / f"share_random{seed}.py").write_text(text)
    driver = import_driver(tmp_path / f"share_random{seed}.py", f"share_random{seed}")
    assert hasattr(driver, "dataflow"), f"{getattr(driver, 'NOT_AFFINE', None)}\n{program.text}"
    options = Options(n=program.n, tiles={"nb": program.nb}, sets=dict(program.params))
    try:
        assert_guided_is_the_whole_walk(driver, f"random{seed}", options)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{program.text}") from None


@pytest.mark.timeout(300)
def test_other_ranks_tasks_met_and_tiles_made_fall_with_the_grid(drivers):
    driver = drivers["cholesky"]
    met, made = [], []
    params = make_params(driver, Options(n=1440, tiles={"nb": 48}))
    for grid in [(2, 2), (4, 4), (8, 8)]:
        matrices = make_matrices(driver, params, make_distribution(driver.PROGRAM, params, grid, 0), 0)
        guided = survey(driver, matrices, params, 0, guided=True)
        # tile objects: only those of its own tasks (a whole walk makes one for every tile it meets)
        made.append(len(matrices["A"].made_tiles()))
        assert set(matrices["A"].made_tiles()) == guided.needed
        whole = survey(driver, matrices, params, 0)
        met.append((guided.foreign, whole.foreign, guided.count))
    # the whole walk meets nearly every task of the program; the guided one a few per own task
    for foreign, whole_foreign, own in met:
        assert foreign < whole_foreign / 3 and foreign <= 2 * own + 100
    assert met[2][0] < met[0][0]
    # the tiles a rank takes part in: its own and those its tasks read (about n²/P + n²·(1/P + 1/Q)/2)
    assert made[0] > made[1] > made[2] and made[2] < 465 / 4, made  # 465 tiles in the lower triangle


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["cholesky", "qr", "hetero_cholesky"])
def test_a_rank_generating_its_share_keeps_the_tasks_its_survey_counts_and_asks_only_of_tiles_it_holds(drivers,
                                                                                                      name,
                                                                                                      monkeypatch):
    """The engine drops a task that sends nothing new (:func:`.matrix.sends_nothing`) and ``among``
    passes over most: the tasks it keeps are those the survey counts, and its sends of inputs (type
    4) are explain's; it asks for the next event of a tile of another rank only where it holds a copy
    or a record of it (a task of another rank it walks to send an input leaves it none). Derived priorities
    past EXACT_LEVELS_RANKS are the levels over the survey's tasks: the engine asks for one per task it
    keeps, the survey's kept tasks in turn."""
    from tiledsl.commands.explain import plan
    from tiledsl.runtime import engine as engine_module
    from tiledsl.runtime.engine import Engine
    from tiledsl.runtime.matrix import sends_nothing
    from tiledsl.runtime.protocol import Instance
    from tiledsl.runtime.userkernels import kernels

    driver = drivers[name]
    tiles = {"B": 96, "b": 32, "s": 2} if name.startswith("hetero") else {"nb": 48}
    options = Options(n=430, tiles=tiles)
    explained = plan(driver, options, (2, 2))
    for rank in range(4):
        params, matrices = setup(driver, name, (2, 2), rank, options)
        sequence = TaskSequence()
        surveyed = survey(driver, matrices, params, rank, sequence, guided=True)
        quiet = SimpleNamespace(rank=rank, size=4, on_error=None, send=lambda *_: None, receive=lambda *_: None)
        engine = Engine(driver.PROGRAM, kernels(driver.PROGRAM, driver), 1, window=1 << 30, comm=quiet,
                        count_flops=False)  # (nothing runs: no message is posted)
        engine.attach(matrices)
        engine.guide(events_of(driver, matrices, params))
        asked, levels = [], in_turn(bottom_levels(sequence))
        engine.priority_of = lambda call, tiles, given: asked.append(call.kernel) or levels(call, tiles, given)
        kept = []
        monkeypatch.setattr(engine_module, "sends_nothing",
                            lambda *task: sends_nothing(*task) or kept.append(task) and False)
        copies, new_copy = [], engine.exchange._new_copy
        engine.exchange._new_copy = lambda tile, *rest: copies.append(tile.rank != rank) or new_copy(tile, *rest)
        driver.generate(engine, params)
        assert len(kept) == surveyed.count, rank
        assert asked == [sequence.calls[code].kernel for code, mine in zip(sequence.code, sequence.mine) if mine]
        counts = engine.exchange.instance_counts()
        assert counts[Instance.INTER_NODE_ALIEN_INPUT - 1] == explained.totals()[rank][Instance.INTER_NODE_ALIEN_INPUT]
        # a question per time it comes to hold a tile of another rank (a copy of a version, received or kept)
        assert 0 < engine.tracker.queries <= sum(copies), rank


def test_a_loop_nest_with_a_call_under_a_non_affine_if_has_no_plan(drivers, tmp_path):
    (tmp_path / "p.tile").write_text("program p {\n  tiling uniform(nb = 32)\n  matrix A[n, n] = random spd\n"
                                     "  for k in 0 .. A.nt { if k * k < A.mt { potrf(A[k, k]) } }\n}\n")
    assert "def dataflow" not in compile_path(tmp_path / "p.tile")[1]  # a product of variables
    assert hasattr(drivers["cholesky"], "dataflow") and hasattr(drivers["getrf"], "dataflow")  # if k + 1 < A.mt


def test_the_plan_reads_lets_and_loops_counting_down(tmp_path):
    source = tmp_path / "p.tile"
    source.write_text("""\
program p {
  tiling uniform(nb = 32)
  matrix A[n, n] = random spd
  for t in A.nt - 1 .. -1 step -1 {
    let k = t + 1
    for j in 0 .. t { gemm(A[t, j], A[j, k - 1], A[t, t]) }
  }
}
""")
    found = plan(check_path(source).checked)
    gemm = found.events[0]
    assert gemm.positions == (0, 1, 0) and len(found.events) == 1
    assert list(found.keys.values()) == [[0, ("t", -1), 1, ("j", 1), 0]]  # u = -t: program order
    (lower_t, upper_t, step_t), (lower_j, upper_j, step_j) = gemm.loops
    assert (upper_t, step_t, lower_j, step_j) == (((1, 0, 0),), 1, ((0, 0, 0),), 1)  # -t < 1; j >= 0
    assert upper_j == ((0, -1, 0),)  # j < t = -u
    assert gemm.rows == ((0, -1, 0), (1, -1, 0)) and gemm.cols == ((0, -1, 0), (1, -1, 0))  # A[t, t]
    terms = next(loop.terms for loop in found.loops.values() if loop.var == "j")
    # at loop j: A[t, j] is (row known, column j), A[j, k - 1] (row j, column t through the let); each
    # only read, with the main tile A[t, t] (known at loop j: the rank that reads them)
    main = ("A", "AT", {"t": 1}, "AT", {"t": 1})
    assert ("A", "AT", {"t": 1}, "PLUS", {}, main) in terms
    assert ("A", "PLUS", {}, "AT", {"t": 1, "": 0}, main) in terms
    assert main in terms  # written: a term of its own, without a reader


def _plan_of(tmp_path, body: str):
    (tmp_path / "p.tile").write_text("program p {\n  tiling uniform(nb = 32)\n  matrix A[n, n] = random spd\n"
                                     + body + "\n}\n")
    return plan(check_path(tmp_path / "p.tile").checked)


def test_an_if_bounds_the_innermost_loop_its_comparison_names(tmp_path):
    found = _plan_of(tmp_path, "for k in 0 .. A.nt { for m in 0 .. A.mt {\n"
                               "  if k + 1 < A.mt and m >= k { potrf(A[m, k]) } } }")
    (k_lower, k_upper, _), (m_lower, m_upper, _) = found.events[0].loops
    assert len(k_lower) == 1 and len(k_upper) == 2  # k < A.nt and k < A.mt - 1
    assert m_lower == ((0, 0, 0), (0, 1, 0)) and len(m_upper) == 1  # m >= 0 and m >= k
    found = _plan_of(tmp_path, "for k in 0 .. A.nt { for m in 0 .. A.mt {\n"
                               "  if m >= k { potrf(A[m, k]) } else { potrf(A[k, k]) } } }")
    then, orelse = found.events
    assert then.loops[1][0] == ((0, 0, 0), (0, 1, 0)) and orelse.loops[1][1][1:] == ((0, 1, 0),)  # else: m < k
    assert (then.positions, orelse.positions) == ((0, 0, 0), (0, 0, 1))  # numbered in program order


def test_a_loop_bound_or_if_taking_a_min_or_max_is_one_bound_per_argument(tmp_path):
    band = _plan_of(tmp_path, "param kd = 2\nfor k in 0 .. A.nt { for m in k + 1 .. min(k + kd + 1, A.mt) {\n"
                              "  trsm(A[k, k], A[m, k]) } }")
    (_, m_upper, _) = band.events[0].loops[1]
    assert m_upper[0][1:] == (1, 0) and len(m_upper) == 2 and m_upper[1][1:] == (0, 0)  # m < k + kd + 1, m < A.mt
    guarded = _plan_of(tmp_path, "for k in 0 .. A.nt { for m in 0 .. A.mt {\n"
                                 "  if max(k, 1) <= m and m < min(k + 3, A.mt - 1) { trsm(A[k, k], A[m, k]) } } }")
    m_lower, m_upper, _ = guarded.events[0].loops[1]
    assert m_lower == ((0, 0, 0), (0, 1, 0), (1, 0, 0)) and m_upper[1] == (3, 1, 0)


@pytest.mark.timeout(30)
def test_an_order_of_a_modulo_by_a_large_number_is_its_few_residues_or_leaves_the_class_at_once(tmp_path):
    """The residues an order admits are ranges: a divisor of 10⁹ is neither walked nor listed."""
    few = _plan_of(tmp_path, "for k in 0 .. A.nt {\n  if k % 1000000000 < 3 or k % 1000000000 >= 2 "
                             "{ potrf(A[k, k]) } }")
    assert len(few.events) == 4 and sum(len(e.off_moduli) for e in few.events) == 2
    assert _plan_of(tmp_path, "for k in 0 .. A.nt {\n  if k % 1000000000 < 500000 { potrf(A[k, k]) } }") is None


@pytest.mark.parametrize("condition", ["k * k < 4", "k % A.nt < 1", "k % (k + 1) == 0", "A.nt % (k + 1) > 0",
                                       "min(k, 3) * A.nt < 5", " and ".join(f"k != {i}" for i in range(7))])  # 2⁷ alternatives
def test_an_if_that_is_not_affine_comparisons_leaves_no_plan(tmp_path, condition):
    assert _plan_of(tmp_path, f"for k in 0 .. A.nt {{ if {condition} {{ potrf(A[k, k]) }} }}") is None


@pytest.mark.parametrize("body, reason", [
    ("for k in 0 .. A.nt {\n  if k % A.nt < 1 { potrf(A[k, k]) } }",
     "line 5: k % A.nt < 1: an order of a modulo by A.nt, which is not a number"),
    ("for k in 0 .. A.nt {\n  if not (k % A.nt >= 1) { potrf(A[k, k]) } }",  # (tester z79d: quoted as written)
     "line 5: k % A.nt >= 1: an order of a modulo by A.nt, which is not a number"),
    ("for k in 0 .. A.nt {\n  if k % 2 < k { potrf(A[k, k]) } }", "line 5: k % 2 < k: k varies with the loops"),
    ("for k in 0 .. A.nt {\n  if k < 3 { potrf(A[k * k, k]) } }",
     "line 5: k * k multiplies loop variables, in A[k * k, k], which it writes"),
    ("for k in 0 .. A.nt {\n  potrf(A[k % 2 + k // 2, k]) }",
     "line 5: k // 2 is not affine in the loop variables, in A[k % 2 + k // 2, k], which it writes"),
    ("for k in 0 .. A.nt {\n  release A[k, k * k] }",
     "line 5: k * k multiplies loop variables, in A[k, k * k], which it releases"),
    ("for k in 0 .. A.nt {\n  for j in 0 .. A.nt step 2 ** k { potrf(A[k, j]) } }",
     "line 5: the step 2 ** k is not a constant (a number, or arithmetic of numbers)"),
    ("for k in 0 .. A.nt {\n  if " + " or ".join(f"k == {i}" for i in range(65)) + " { potrf(A[k, k]) } }",
     "line 5: a condition of more than 64 alternatives")])
def test_the_driver_of_a_program_outside_the_class_says_where(tmp_path, body, reason):
    """The innermost statement that leaves the class, and why (a driver's NOT_AFFINE; simulate says it)."""
    (tmp_path / "p.tile").write_text("program p {\n  tiling uniform(nb = 32)\n  matrix A[n, n] = random spd\n"
                                     + body + "\n}\n")
    assert planned(check_path(tmp_path / "p.tile").checked) == (None, reason)
    assert f"NOT_AFFINE = {reason!r}" in compile_path(tmp_path / "p.tile")[1]


@pytest.mark.parametrize("condition, pieces", [("k != 1", 2), ("k > 4 or k < 3", 2), ("not (k > 0 and k < 3)", 2),
                                               ("k < max(2, 2 * k - 5)", 2), ("min(k, 3) < 2", 1),
                                               ("k == min(1, k + A.nt)", 2), ("2 * k < A.nt", 1), ("A.nt > 3", 1),
                                               ("A.nt > 3 or k == 1", 2),
                                               (" and ".join(f"k != {i}" for i in range(6)), 64)])
def test_an_if_of_ors_is_a_union_of_alternatives(tmp_path, condition, pieces):
    """Each alternative is an event of the call (min(k, 3) < 2 is k < 2 or 3 < 2: one, 3 < 2 never holds)."""
    assert len(_plan_of(tmp_path, f"for k in 0 .. A.nt {{ if {condition} {{ potrf(A[k, k]) }} }}").events) == pieces


def test_comparisons_that_bound_no_loop_alone_are_constraints_whens_or_moduli(tmp_path):
    found = _plan_of(tmp_path, "for k in 0 .. A.nt { if A.nt > 3 and 3 * k >= A.nt - 1 { potrf(A[k, k]) } }")
    (event,) = found.events
    (test,) = event.when  # as written, whatever the values' types: the run decides it before it starts
    assert (unparse(test.left), test.op, test.right, test.negated) == ("A.nt", ">", 3, False)
    (constraint,) = event.constraints  # 3·k - A.nt + 1 >= 0
    assert constraint[1:] == (3,) and unparse(constraint[0]) == "-A.nt + 1"
    assert not _plan_of(tmp_path, "for k in 0 .. A.nt { if 3 > 4 { potrf(A[k, k]) } }").events  # never
    assert not _plan_of(tmp_path, "for k in 0 .. A.nt { if k % 3 == 3 { potrf(A[k, k]) } }").events  # never
    assert not _plan_of(tmp_path, "for k in 0 .. A.nt { if k % 1 != 0 { potrf(A[k, k]) } }").events  # no residue
    (event,) = _plan_of(tmp_path, "for k in 0 .. A.nt { if A.nt % 2 == 1 and 2 == (k + 1) % 3 {\n"
                                  "  potrf(A[k, k]) } }").events
    assert [(unparse(value), divisor) for value, divisor in event.when] == [("A.nt - 1", 2)]
    assert event.moduli == (((-1, 1), 3),)  # k + 1 - 2 ≡ 0 (mod 3)
    # modulo a parameter: y = 0 a value of x % d where d > 0 (0 <= y <= d - 1) or d < 0 (d + 1 <= y <= 0)
    above, below = _plan_of(tmp_path, "param d = 2\nfor k in 0 .. A.nt { if k % d == 0 { potrf(A[k, k]) } }").events
    assert [(unparse(value), divisor) for value, divisor in above.when] == [("d - 1", None)]
    assert [(unparse(value), divisor) for value, divisor in below.when] == [("-d - 1", None)]
    assert [(form, unparse(divisor)) for form, divisor in above.moduli] == [((0, 1), "d")]


def test_a_stepped_loop_counts_its_steps_from_its_start(tmp_path):
    """Its start comes first among its bounds from below (the runtime counts the steps from it); a
    min start is an alternative per form, where that form is the least (earlier forms strictly)."""
    (event,) = _plan_of(tmp_path, "for k in 1 .. A.nt step 2 { if k > 4 { potrf(A[k, k]) } }").events
    assert event.loops[0][0] == ((1, 0), (5, 0))
    found = _plan_of(tmp_path, "for j in 0 .. 3 { for k in min(j + 1, 2) .. A.nt step 2 { potrf(A[k, k]) } }")
    first, second = found.events  # j + 1 <= 2, k from j + 1; 2 < j + 1, k from 2
    assert first.loops[0][1][1:] == ((2, 0, 0),) and first.loops[1][0][0] == (1, 1, 0)
    assert second.loops[0][0][1:] == ((2, 0, 0),) and second.loops[1][0][0] == (2, 0, 0)
    assert _plan_of(tmp_path, "for j in 0 .. 2 { for k in min(max(j, 1), 2) .. A.nt step 2 { potrf(A[k, k]) } }") \
        is None  # a min of maxes
    (event,) = _plan_of(tmp_path, "for k in 0 .. A.nt step 4 - 2 { potrf(A[k, k]) }").events  # a step of numbers
    assert event.loops[0][2] == 2


def test_among_takes_the_union_of_the_terms_in_loop_order():
    class Lines:
        rows, row_set = [1, 3, 5, 7], {1, 3, 5, 7}
        cols, col_set = [0, 2, 4, 6], {0, 2, 4, 6}
        edges = False

    class M:
        lines = Lines()

    assert list(among(0, 8, 1, ((M, PLUS, 0, ANY, 0),))) == [1, 3, 5, 7]
    assert list(among(0, 8, 1, ((M, PLUS, 1, ANY, 0),))) == [0, 2, 4, 6]  # v + 1 among the rows
    assert list(among(7, -1, -1, ((M, ANY, 0, MINUS, 6),))) == [6, 4, 2, 0]  # 6 - v among the columns
    assert list(among(0, 8, 1, ((M, AT, 2, ANY, 0),))) == []
    assert list(among(0, 8, 2, ((M, AT, 3, ANY, 0),))) == [0, 2, 4, 6]  # a known row it owns: every value
    assert list(among(0, 8, 1, ((M, PLUS, 0, PLUS, 0), (M, ANY, 0, PLUS, 1)))) == [1, 3, 5]
    # (v + 1) // 3 among the rows 1, 3, 5, 7: v + 1 in 3..5 or 9..11 (v < 12)
    assert list(among(0, 12, 1, ((M, DIV, (1, 3), ANY, 0),))) == [2, 3, 4, 8, 9, 10]
    assert list(among(3, 12, 1, ((M, DIV, (0, 2), AT, 2),))) == [3, 6, 7, 10, 11]
    assert list(among(0, 4, 1, ((M, DIV, (0, 0), AT, 2),))) == [0, 1, 2, 3]  # no sense: every value
    # (v + 2) % 6 among the rows 1, 3, 5, 7 (7 is no residue): v in 0..11 with v + 2 ≡ 1, 3, 5 (mod 6)
    assert list(among(0, 12, 1, ((M, MOD, (2, 6), ANY, 0),))) == [1, 3, 5, 7, 9, 11]
    assert list(among(11, -1, -2, ((M, MOD, (0, 4), ANY, 0),))) == [11, 9, 7, 5, 3, 1]  # 1, 3 (mod 4), down
    assert list(among(0, 6, 1, ((M, ANY, 0, MOD, (1, -3)),))) == [2, 5]  # residues 0, -1, -2: only 0 owned
    assert list(among(0, 4, 1, ((M, MOD, (0, 0), AT, 2),))) == [0, 1, 2, 3]


def test_a_value_where_the_rank_would_only_send_a_version_already_sent_is_passed_over(drivers):
    """A term of a tile only read carries its call's main tile (the reader): a value where this rank
    takes part only through such tiles, each already sent whole to its reader, is passed over, as the
    loop reaches it (this rank's earlier tasks send and write meanwhile); not a workspace tile no
    task wrote yet, whose owner says each read of its zeros."""
    params, matrices = setup(drivers["cholesky"], "cholesky", (1, 2), 0)  # rank 0 of 1x2: the even columns
    A = matrices["A"]
    read = (A, AT, 2, AT, 0, (A, AT, 2, PLUS, 0))  # A[2, 0], read by the call whose main tile is A[2, v]
    assert list(among(1, 9, 1, (read,))) == list(range(1, 9))  # nothing sent yet: every value
    A.tile(2, 0).delivered[(1, 0)] = {(0, 4, 0, 48): 16}  # a part went to rank 1: the whole tile still moves
    assert list(among(1, 9, 1, (read,))) == list(range(1, 9))
    A.tile(2, 0).delivered[(1, 0)] = {None: 0}  # ... the whole version: rank 1's readers are passed over
    assert list(among(1, 9, 1, (read,))) == [2, 4, 6, 8]  # rank 0 runs these (its columns)
    assert list(among(1, 9, 1, (read, (A, AT, 2, AT, 0)))) == list(range(1, 9))  # written below too: every value
    A.tile(2, 0).delivered.clear()  # a new version
    values = among(1, 9, 1, (read,))
    seen = [next(values), next(values)]
    A.tile(2, 0).delivered[(1, 0)] = {None: 0}  # sent as the loop goes: decided where the loop gets
    assert seen + list(values) == [1, 2, 4, 6, 8]
    A.workspace = True
    assert list(among(1, 9, 1, (read,))) == list(range(1, 9))  # version 0 of a workspace: every reader
    A.tile(2, 0).version = 1
    assert list(among(1, 9, 1, (read,))) == [2, 4, 6, 8]


def test_rank_0_also_walks_the_values_that_lead_outside_the_matrix():
    """No rank owns a tile outside the matrix: without rank 0 walking there, a call on such a
    tile met no rank's walk, and a run of several ranks skipped it where one rank fails."""
    from tiledsl.runtime.share import Lines

    class M:
        mt, nt = 4, 8
        lines = Lines([1, 3], [0, 2, 4, 6], edges=True)

    assert list(among(0, 6, 1, ((M, PLUS, 0, PLUS, 0),))) == [4, 5]  # rows 4, 5 do not exist
    assert list(among(-2, 6, 1, ((M, PLUS, 1, ANY, 0),))) == [-2, 0, 2, 3, 4, 5]  # v + 1 < 0, owned or >= 4
    assert list(among(9, -1, -1, ((M, ANY, 0, MINUS, 7),))) == [9, 8, 7, 5, 3, 1]  # 7 - v < 0, or owned
    assert list(among(0, 3, 1, ((M, AT, 4, ANY, 0),))) == [0, 1, 2]  # a known row past the matrix: every value
    # v // 4 in rows 1, 3, or >= 4 (past the matrix)
    assert list(among(0, 20, 1, ((M, DIV, (0, 4), AT, 2),))) == [4, 5, 6, 7, 12, 13, 14, 15, 16, 17, 18, 19]
    # v % 6 in rows 1, 3, or 4, 5 (past the matrix); v % 4 is always a row
    assert list(among(0, 8, 1, ((M, MOD, (0, 6), AT, 2),))) == [1, 3, 4, 5, 7]
    assert list(among(0, 8, 1, ((M, MOD, (0, 4), AT, 2),))) == [1, 3, 5, 7]
    M.lines = Lines([1, 3], [0, 2, 4, 6])  # another rank: only its own
    assert list(among(0, 6, 1, ((M, PLUS, 0, PLUS, 0),))) == []
