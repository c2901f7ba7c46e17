"""``tiledsl tune``: this machine's tile sizes, after Song, Tomov & Dongarra (ICS'12, §3.6).

1. Kernel speeds: the program's tile kernels (gemm always) are timed on one core
   (single-threaded BLAS, as a CPU worker runs them) and on one GPU, over square
   tile sizes in steps of 64 (on CuPy GPUs, :data:`CUPY_SIZES` up to 4096; ``--sizes``:
   those given, the only ones the search then chooses among), until
   the rate stops growing or the time share of this step is spent. A kernel whose
   inputs cannot be made up (a user's) is timed in the search's runs of the program,
   on their CPU workers (:func:`time_in_run`).
2. A first guess from the speeds. With GPUs, ``B`` (the tile size of uniform
   programs, the block size of hybrid ones) is the smallest size whose GPU gemm
   rate is within 95% of the best one measured (:func:`smallest_near_best`).
   Hybrid tiles cut the host's share ``B_h`` off each ``B``-wide block by the
   paper's formula (:func:`host_width`): ``B_h = B·f_core·W / (f_core·W + f_gpu·G)``
   with ``f`` the best rate of the program's dominant kernel, ``W`` CPU workers and
   ``G`` GPUs, split into ``s - 1`` host slices of width ``b`` (:func:`hybrid_split`).
   Uniform tiles deal block columns to the host and the GPUs at the ratio of their
   speeds on the program's kernel mix (:func:`~tiledsl.runtime.tuning.nearest_ratio`). Without GPUs, the
   tile size is the smallest one whose rate on the kernel mix (weighted by the
   program's task counts) is within 95% of the best.
3. A short search (:func:`hill_climb`): the program runs at a moderate size
   (``N = 3·B·G`` as in the paper, or enough tiles for the workers) with the guess
   and its neighbours, 64 columns (a GPU's uniform tiles: the next sizes timed; a
   ratio: one step) apart, moving while it gets faster; the fastest setting wins.
   Uniform tiles are searched among the sizes their kernels were timed at, and only
   those at most half of the trials' order (a run of one tile tells sizes apart by noise).
   The ratios searched are one per way of dealing the trials' tile columns to the
   host and the GPUs, none leaving a GPU without one (:func:`distinct_ratios`); the tile
   sizes are timed at the guessed ratio, or the nearest of those where it leaves one
   (:meth:`_Tuner.dealing_every_gpu`).
   A program with an inner block (:func:`inner_block_params`: QR's ``ib``, the
   height of its ``T`` workspace) has it searched at each tile setting tried,
   among the sizes of :data:`INNER_BLOCKS` that divide the tiles
   (:func:`search_inner_blocks`). With GPUs the GPU-only setting (ratio 0:1,
   or hybrid tiles with ``s = 1``) is always measured and wins when it is the
   fastest (:func:`gpu_only_unless_slower`); uniform tiles are also timed all on the
   GPUs with the host's cores taking GPU tasks as the run goes (``--host-takes on``,
   :mod:`~tiledsl.runtime.heteroprio`, estimated with the speeds of step 1), which
   the cache records (beside the best ratio without it) and ``run`` uses when it is
   the fastest.

The result goes to this machine's cache (:mod:`tiledsl.runtime.tuning`), where
``tiledsl run`` finds it. ``budget`` (seconds) bounds the whole procedure: its steps and trial
runs are fitted to it, but no run is cut short, since a slow kernel (a user's, which step 1 cannot
time) cannot be told from a stuck one; a trial run whose kernel never returns ends at the
watchdog's limit (``watchdog``, ``--watchdog``; automatic: a minute at least), as a run does.
"""
from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Callable

import numpy as np
from threadpoolctl import threadpool_limits

from ..runtime import Options, execute, tuning
from ..runtime.tuning import RATIOS, nearest_ratio
from ..runtime.backends import backend as make_backend
from ..runtime.distribution import HOST
from ..runtime.errors import TaskFailure
from ..runtime.reporting import ratio_text
from ..runtime.kernels import CPU_KERNELS
from ..runtime import blas
from ..runtime.fitting import file_shapes, fit, load_files, load_notes, refuse_missing_loads, tile_settings_sizing
from ..runtime.flops import PRELUDE_FLOPS
from ..runtime.rates import KERNEL_FLOPS, Rates, rate_kept
from ..runtime.userkernels import gpu_kernels, kernel_module_digest, loaded_helpers
from ..runtime.layout import inner_block_params, make_distribution, make_matrices, make_params
from ..runtime.options import TILE_SETTINGS, check_gpus, check_workers, tile_values
from ..runtime.reporting import FLOPS
from ..runtime.recording import record
from ..runtime.world import UsageError, default_workers
from ..language import TILING_SETTINGS, tiling_of

STEP = 64  # tile sizes are multiples of 64 (the paper's granularity in double precision)
THRESHOLD = 0.95  # B: the smallest size within 95% of the best GEMM rate
C0 = 3  # trial size N = C0·B·G (ICS'12 §3.6)
BUDGET = 30.0  # seconds, the default
QUICK = 10.0
#: tile sizes timed on CuPy GPUs: a GPU's dgemm keeps gaining up to thousands (H100: 48 TFLOP/s
#: at 1024, 53 at 2048, 55 at 4096)
CUPY_SIZES = (256, 512, 768, 1024, 1536, 2048, 2560, 3072, 4096)
#: inner block sizes searched (those dividing the tiles): QR's T factors are ib×nb, and a
#: GPU's QR kernels want wider ones than a core's (ib = 512 on an H100 at nb = 2048)
INNER_BLOCKS = (32, 48, 64, 96, 128, 192, 256, 384, 512)
INNER_TRIALS = 4  # inner block sizes timed at most per tile setting and parameter


# ---------------------------------------------------------------- the decisions (pure functions)
def smallest_near_best(rates: dict, fraction: float = THRESHOLD) -> int:
    """The smallest size whose rate reaches ``fraction`` of the best rate in ``rates`` {size: rate}."""
    if not rates:
        raise ValueError("no rates measured")
    best = max(rates.values())
    return min(size for size, rate in rates.items() if rate >= fraction * best)


def host_width(B: int, core_rate: float, cores: int, gpu_rate: float, gpus: int) -> float:
    """The paper's B_h: the columns of a B-wide block to give the host so that the host's
    share of a cycle (G blocks) takes as long as one GPU's block: host/(host + G·gpu)·B."""
    host = core_rate * cores
    total = host + gpu_rate * gpus
    return B * host / total if total > 0 else 0.0


def hybrid_split(B: int, B_h: float, s: int, step: int = STEP) -> tuple[int, int]:
    """``(b, s)`` for a host share ``B_h`` of each block: ``s - 1`` host slices of width
    ``b``, a multiple of ``step`` no wider than the share allows, leaving the GPU's slice
    at least ``step`` wide; ``s = 1`` (every column on a GPU) when the share is under a step.

    Rounded down, because the host also factors the panels, which are on the critical
    path: a slice wider than its share makes the host the bottleneck (on an H100 with 14
    cores, B = 3072 and B_h = 46, a slice of 64 ran 4.8 times slower than none).
    """
    if s < 2:
        return step, 1
    widest = (B - step) // (s - 1) // step * step
    b = min(int(B_h / (s - 1) // step) * step, widest)
    return (b, s) if b >= step else (step, 1)


def hill_climb(candidates: list, start: int, measure, max_trials: int = 6, more_time=lambda: True):
    """Walk ``candidates`` (ordered) from index ``start``: measure it and its neighbours,
    then keep stepping toward the fastest while it improves. ``(best, [(candidate, seconds)])``;
    at most ``max_trials`` measures, and none after ``more_time()`` turns false (beyond the first)."""
    seconds: dict = {}

    def visit(i: int) -> bool:
        if not 0 <= i < len(candidates) or i in seconds or len(seconds) >= max_trials:
            return False
        if seconds and not more_time():
            return False
        seconds[i] = measure(candidates[i])
        return True

    visit(start)
    visit(start - 1)
    visit(start + 1)
    while True:
        best = min(seconds, key=seconds.get)
        if best - 1 not in seconds and visit(best - 1):
            continue
        if best + 1 not in seconds and visit(best + 1):
            continue
        break
    best = min(seconds, key=seconds.get)
    return candidates[best], [(candidates[i], seconds[i]) for i in sorted(seconds)]


def gpu_only_unless_slower(history: list, gpu_only, measure):
    """``(choice, history)``: the fastest of the search's ``history`` [(setting, seconds)]
    once ``gpu_only`` (every column on the GPUs) is in it, measured here if the search
    did not reach it, whatever the time left: tune never picks a host/GPU split slower
    than the GPUs alone."""
    if all(setting != gpu_only for setting, _ in history):
        history = [*history, (gpu_only, measure(gpu_only))]
    return min(history, key=lambda item: item[1])[0], history


# ---------------------------------------------------------------- inner blocks
def inner_block_candidates(width: int, default: int) -> list[int]:
    """Inner block sizes to try on tiles ``width`` columns wide: those of :data:`INNER_BLOCKS`
    that divide ``width``, and the program's ``default`` if it is no wider."""
    return sorted({ib for ib in INNER_BLOCKS if width % ib == 0} | ({default} if default <= width else set()))


def narrowest_column(tiles: dict) -> int:
    """The narrowest tile column of these settings, the widest an inner block may be: ``nb``,
    or the narrower slice of a hybrid block (the whole block ``B`` when ``s = 1``)."""
    if "nb" in tiles:
        return tiles["nb"]
    B, b, s = tiles["B"], tiles["b"], tiles["s"]
    return B if s < 2 else min(b, B - (s - 1) * b)


def search_inner_blocks(names, start: dict, width: int, measure, more_time=lambda: True, defaults=None,
                        allowed=lambda values: True):
    """``(values, [(values, seconds)])``: each inner block of ``names`` in turn hill-climbed over
    :func:`inner_block_candidates` (with the program's ``defaults`` at these tiles, ``start`` if not
    given; those ``allowed(values)``, which the program's requirements take) from its ``start`` value
    (the nearest candidate: the best of the tiles tried before), the others held at their best so far;
    ``measure(values)`` times one setting of all of them."""
    values, history = dict(start), []
    for name in names:
        candidates = [ib for ib in inner_block_candidates(width, (defaults or start)[name])
                      if allowed({**values, name: ib})]
        if not candidates:  # none the requirements take, with the others' values: this one stays
            continue
        first = min(range(len(candidates)), key=lambda i: abs(candidates[i] - start[name]))
        best, tried = hill_climb(candidates, first, lambda ib: measure({**values, name: ib}), INNER_TRIALS,
                                 more_time)
        history += [({**values, name: ib}, seconds) for ib, seconds in tried]
        values[name] = best
    return values, history


# ---------------------------------------------------------------- kernel speeds
def _tile_inputs(kernel: str, s: int, ib: int, rng) -> list:
    """Host arguments for one call of ``kernel`` on s×s tiles (T factors ib×s)."""
    def general():
        return np.asfortranarray(rng.standard_normal((s, s)))

    def spd():
        a = general()
        return np.asfortranarray(a @ a.T + s * np.eye(s))

    ib = max(1, min(ib, s))
    if kernel in ("gemm", "gemm_nn"):
        return [general(), general(), general()]
    if kernel == "syrk":
        return [general(), general()]
    if kernel == "potrf":
        return [spd()]
    if kernel == "trsm":
        return [np.asfortranarray(np.linalg.cholesky(spd())), general()]
    if kernel in ("getrf_nopiv", "trsm_l", "trsm_u"):
        dominant = np.asfortranarray(general() + 2 * s * np.eye(s))
        return [dominant] if kernel == "getrf_nopiv" else [dominant, general()]
    if kernel == "geqrt":
        return [general(), np.zeros((ib, s), order="F")]
    if kernel == "gemqrt":
        v, t = general(), np.zeros((ib, s), order="F")
        CPU_KERNELS["geqrt"](v, t)
        return [v, t, general()]
    if kernel in ("tpqrt", "ttqrt"):
        return [np.asfortranarray(np.triu(general()) + s * np.eye(s)), general(), np.zeros((ib, s), order="F")]
    if kernel in ("tpmqrt", "ttmqrt"):
        r, v, t = np.asfortranarray(np.triu(general()) + s * np.eye(s)), general(), np.zeros((ib, s), order="F")
        CPU_KERNELS["tpqrt" if kernel == "tpmqrt" else "ttqrt"](r, v, t)
        return [v, t, general(), general()]
    raise KeyError(kernel)


def time_kernel(run, inputs: list, place, min_time: float, clock=time.perf_counter) -> float:
    """Best seconds of ``run(*args)`` on fresh copies of ``inputs`` (made outside the timing)
    at ``place`` (None: host memory; else a GPU backend, on its GPU 1); one warm-up call."""
    def fresh():
        if place is None:
            return [np.array(a, order="F", copy=True) for a in inputs]
        return [place.to_device(a, 1) for a in inputs]

    run(*fresh())
    best, spent, calls = math.inf, 0.0, 0
    while calls < 2 or (spent < min_time and calls < 20):
        args = fresh()
        start = clock()
        run(*args)
        elapsed = clock() - start
        best, spent, calls = min(best, elapsed), spent + elapsed, calls + 1
    return best


def measure_speeds(kernels: list, sizes: list, places: dict, ib: int, deadline: float, min_time: float,
                   clock=time.perf_counter, reference: str = "gemm", plateau: bool = True) -> dict:
    """``{place: {kernel: {size: GFLOP/s}}}`` for ``places`` {"core": None, "gpu": backend}.

    Sizes grow until the ``reference`` kernel's best rate has not grown by 2% over
    three sizes (where ``plateau``: not for sizes the user chose), or the deadline passes
    (after two sizes at least).
    """
    rng = np.random.default_rng(7)
    speeds = {place: {kernel: {} for kernel in kernels} for place in places}
    for place, device in places.items():
        table = CPU_KERNELS if device is None else device.kernels
        best, since = 0.0, 0
        for count, size in enumerate(sizes):
            if count >= 2 and clock() > deadline:
                break
            for kernel in kernels:
                seconds = time_kernel(table[kernel], _tile_inputs(kernel, size, ib, rng), device, min_time, clock)
                speeds[place][kernel][size] = KERNEL_FLOPS[kernel] * size ** 3 / max(seconds, 1e-9) / 1e9
            rate = speeds[place][reference][size]
            best, since = (rate, 0) if rate > 1.02 * best else (best, since + 1)
            if plateau and since >= 3:
                break
    return speeds


def mix_rates(speeds: dict, weights: dict) -> dict:
    """{size: GFLOP/s} of the program's kernel mix: its flops over its time, each kernel
    weighted by its task count (sizes where every weighted kernel was measured)."""
    kernels = [k for k in weights if k in speeds]
    sizes = set.intersection(*(set(speeds[k]) for k in kernels)) if kernels else set()
    rates = {}
    for size in sizes:
        work = sum(weights[k] * KERNEL_FLOPS[k] * size ** 3 for k in kernels)
        seconds = sum(weights[k] * KERNEL_FLOPS[k] * size ** 3 / (speeds[k][size] * 1e9) for k in kernels)
        rates[size] = work / seconds / 1e9
    return rates


#: the tile rows and columns of the census of a program's tasks (:func:`task_counts`)
CENSUS_TILES = 24


def task_counts(driver, tiles: dict | None = None, sets: dict | None = None, n: int | None = None) -> Counter:
    """How many tasks of each kernel the program has at a small size, parameters ``sets``: 24×24
    uniform tiles of 64 (else, if its requirements refuse that, of its own tile size), or four
    blocks of the program's hybrid tiling; the order ``n`` (tune's --n) with tiles of at most
    CENSUS_TILES of it. As many tiles as the trial runs' smallest tiles make, or more: a kernel that
    only larger tile counts call (hqr's tpqrt, once a column has more tile rows than domains) is timed."""
    program = driver.PROGRAM
    sets = sets or {}
    if program.tiling.kind == "uniform":
        own = int(program.tiling.defaults.get("nb") or STEP)
        sizes = [STEP, own] if n is None else [max(STEP, -(-n // CENSUS_TILES // STEP) * STEP), own]
        census = [Options(n=n or CENSUS_TILES * nb, tiles={"nb": nb}, sets=sets) for nb in sizes]
    else:
        settings = {**program.tiling.defaults, **(tiles or {})}
        census = [Options(n=n or 4 * settings.get("B", 512), tiles=tiles or {}, sets=sets)]
    params = accepted(driver, census, "counts the program's tasks")
    matrices = make_matrices(driver, params, make_distribution(program, params, (1, 1), 0), 0)
    try:
        return Counter(call.kernel for call, _, _ in record(driver, matrices, params).submitted)
    except TaskFailure as failure:  # the loop nest failed at sizes tune chose
        sizes = {name: value for name, value in params.as_dict().items()
                 if value is not None and (name in TILE_SETTINGS or name in sets)}
        raise _in_tunes("count of the program's tasks", params.n, sizes, failure) from None


def accepted(driver, candidates: list, doing: str):
    """The parameters of the first of ``candidates`` (Options) that the program's requirements accept;
    if none, the first one's refusal, saying what tune was doing at which size."""
    refusals = []
    for options in candidates:
        try:
            return make_params(driver, options)
        except UsageError as error:
            refusals.append((options, error))
    options, error = refusals[0]
    tiles = " ".join(f"{name}={value}" for name, value in options.tiles.items())
    raise UsageError(f"{error} (tune {doing} at n={options.n}{' ' + tiles if tiles else ''}: give --n, --sizes "
                     f"or --set at which the program's requirements hold)") from None


# ---------------------------------------------------------------- the procedure
def loaded_sizes(driver, log, n: int | None = None, sets: dict | None = None) -> tuple[int | None, dict]:
    """``n`` and the params (beside those of ``sets``, --set) that the files of the program's ``load``
    matrices fix, fitted together as a run fits them (tune's runs must take them); ``n`` and ``sets``
    as they are when it loads none. A usage error, said before any kernel is timed, when no sizes
    give the files their shapes, or when ``n`` (tune's --n) is given and others do."""
    sets = dict(sets or {})
    files = load_files(driver)
    if not files:
        return n, sets
    _refuse_files_sized_by_tiles(driver, files, n, sets)
    refuse_missing_loads(driver, {})
    shapes = file_shapes(files, load_notes(driver, {}))
    loaded = ", ".join(f"{name} from {path} ({'×'.join(map(str, shapes[name]))})" for name, path in files.items())
    try:
        fitted, params = _fitted(driver, shapes, n, sets)
    except UsageError as error:
        raise UsageError(f"{error} (tune runs the program at the sizes of its load files: {loaded})") from None
    if n is not None and fitted != n:
        raise UsageError(f"--n {n}: the program's load files fix n = {fitted} ({loaded}): tune runs the program at "
                         f"the n of its files (leave --n out)")
    fixed = {name: value for name, value in params.items() if name not in sets}
    said = ", ".join([f"n = {fitted}", *(f"{name} = {value}" for name, value in fixed.items())])
    log(f"{said}: the program's load files fix {'them' if fixed else 'it'} ({loaded})")
    return fitted, {**sets, **fixed}


def _refuse_files_sized_by_tiles(driver, files: dict, n: int | None, sets: dict) -> None:
    """A usage error where a ``load`` matrix's shape changes with a tile setting (``W[nb, nb]``):
    its file fixes the tile size that tune is to choose (it failed at the first other size)."""
    for name in files:
        try:
            settings = tile_settings_sizing(driver, Options(n=n or 4 * STEP, sets=sets), [name])
        except UsageError:  # sizes the program's formulas refuse here: the fit says what is wrong
            return
        for setting in settings:
            raise UsageError(f"matrix {name} is loaded from {files[name]}, and its shape follows the tile setting "
                             f"{setting}: its file fixes the {setting} that tune is to choose, so tune cannot tune "
                             f"{driver.PROGRAM.name} (run it with the {setting} of the file: tiledsl run ... "
                             f"--{setting} N)")


def _fitted(driver, shapes: dict, n: int | None, sets: dict) -> tuple[int, dict]:
    """The n and params the files' ``shapes`` fit; at ``n`` (--n) where nothing in them tells n."""
    try:
        return fit(driver, shapes, Options(n=None, sets=sets))
    except UsageError:
        if n is None:
            raise
    return fit(driver, shapes, Options(n=n, sets=sets))


def tune(driver, gpus: int = 0, backend: str = "emulated", workers: int | None = None, budget: float = BUDGET,
         sizes: list | None = None, n: int | None = None, log=lambda line: None, clock=time.perf_counter,
         sets: dict | None = None, watchdog: float | None = None) -> dict:
    """Tune ``driver``'s program for this machine, its parameters ``sets`` (--set) and ``watchdog``
    (--watchdog, :attr:`.Options.watchdog`) in every run; the cache entry (see :mod:`.runtime.tuning`)."""
    began = clock()
    _check_arguments(driver.PROGRAM, gpus, workers, budget, sizes, n, sets)
    given, given_sets, (n, sets) = n, set(sets or {}), loaded_sizes(driver, log, n, sets)
    tuner = _Tuner(driver, gpus, backend, workers, sets, n, log, clock, began, budget, watchdog)
    tuner.n_from_files = given is None and n is not None
    tuner.sets_from_files = sorted(set(sets) - given_sets)
    return tuner.run(sizes)


def _check_arguments(program, gpus: int, workers: int | None, budget: float, sizes: list | None, n: int | None,
                     sets: dict | None) -> None:
    """A usage error for an argument tune cannot work with, before anything is timed."""
    check_gpus(gpus)
    check_workers(workers)
    check_budget(budget)
    if sizes is not None and (not sizes or any(s < STEP or s % STEP for s in sizes)):
        raise UsageError(f"--sizes must be positive multiples of {STEP}, got {','.join(map(str, sizes or []))}")
    if n is not None and n < 1:
        raise UsageError(f"--n must be at least 1, got {n}")
    kind = program.tiling.kind
    for name in sets or {}:
        if name in TILE_SETTINGS and name not in program.params:  # make_params would say --nb, which tune lacks
            what = ("a tile setting, which tune chooses" if name in TILING_SETTINGS[kind] else
                    f"a setting of {tiling_of(name)} tiling, and {program.name}'s tiling is {kind}, whose tile "
                    f"sizes tune chooses")
            raise UsageError(f"--set {name}: {name} is {what}: --sizes S1,S2,... limits the tile sizes it tries")


def check_budget(budget: float, typed: str | None = None) -> None:
    """A usage error unless ``budget`` is a finite positive number of seconds; ``typed``, the text it was
    read from, is said as typed where the float reads otherwise (``1e400`` overflows to inf)."""
    if not 0 < budget < math.inf:  # nan too
        shown = f"{budget:g}"
        if typed is not None and typed.strip() != shown:
            shown = f"{typed.strip()} ({shown} as a float)"
        raise UsageError(f"--budget must be a finite positive number of seconds, got {shown}")


def _timing_device(backend: str, gpus: int):
    """The GPUs the kernels are timed on, each kernel timed to its end rather than to its launch."""
    try:
        device = make_backend(backend, gpus)
    except ValueError as error:
        raise UsageError(str(error)) from None
    device.synchronous = True
    return device


@dataclass(frozen=True)
class Guess:
    """The search's space and where it starts (step 2 of the module)."""
    candidates: list  # the settings the search may try, in order
    start: int  # the first guess's index in ``candidates``
    tile: int  # the size the trials' order is a multiple of
    label: str  # its name: B or nb
    settings: Callable  # a candidate -> its tile settings
    describe: Callable  # a candidate -> its text in the log
    formula: dict | None = None  # how the guess was reached (the cache entry's ``formula``)
    ratio: tuple | None = None  # uniform tiles on GPUs: the host:GPU columns guessed
    gpu_only: tuple | None = None  # hybrid tiles on GPUs: the candidate that leaves the host nothing


class _Tuner:
    """One run of :func:`tune`: what every step shares, and the steps of the module as methods."""

    def __init__(self, driver, gpus: int, backend: str, workers: int | None, sets: dict | None, n: int | None,
                 log, clock, began: float, budget: float, watchdog: float | None):
        self.driver, self.program, self.watchdog = driver, driver.PROGRAM, watchdog
        self.gpus, self.backend, self.n, self.log, self.clock = gpus, backend, n, log, clock
        self.n_from_files = False  # n is the one the program's load files fix, not --n
        self.sets_from_files: list = []  # the params of self.sets that the load files fix, not --set
        self.sizes_left_out: list = []  # the sizes (default or --sizes) larger than half of n (:meth:`choose_sizes`)
        self.began, self.budget = began, budget
        self.workers = workers or default_workers(1, gpus)
        self.device = _timing_device(backend, gpus) if gpus else None
        self.defaults = make_params(driver, Options(n=n or STEP, sets=dict(sets or {})),
                                    requirements=False).as_dict()
        self.sets = {name: self.defaults[name] for name in sets or {}}  # as the parameters' types read them
        self.blocks = [name for name in inner_block_params(driver) if name not in self.sets]  # --set: not tuned
        self.dealt: dict = {}  # (ratio, tiles, n) -> the ratio the tile search times them at (dealing_every_gpu)

    def remaining(self) -> float:
        """Seconds left of the budget."""
        return self.began + self.budget - self.clock()

    def run(self, sizes: list | None) -> dict:
        """The three steps; the cache entry."""
        self.plan_kernels()
        self.choose_sizes(sizes)
        self.check_hybrid_sizes()
        self.log_plan()
        speeds = self.time_kernels()
        self.core_mix = mix_rates(speeds["core"], self.weights)
        self.gpu_mix = mix_rates(speeds["gpu"], self.weights) if self.gpus else {}
        self.best = {place: max(speeds[place][self.dominant].values()) for place in speeds}
        self.log(_speed_table(speeds))
        result = {"program": self.program.name, "key": tuning.program_key(self.program), "tiling": self.program.tiling.kind, "gpus": self.gpus,
                  "sets": self.sets, "sets_from_files": self.sets_from_files, "backend": self.backend if self.gpus else None, "workers": self.workers,
                  "dominant": self.dominant,
                  "speeds": {place: {k: {str(s): rate_kept(r) for s, r in v.items()} for k, v in table.items()}
                             for place, table in speeds.items()},
                  "gpu_ratio": None}
        guess = self.first_guess(speeds)
        if guess.formula is not None:
            result["formula"] = guess.formula
        trials, guess = self.start_trials(guess, result["speeds"])
        tiles, params = self.search_tiles(trials, guess)
        if guess.ratio is not None:
            self.search_ratio(trials, tiles, params, guess.ratio, result)
        chosen = trials.key(tiles, tuple(result["gpu_ratio"]) if result["gpu_ratio"] else guess.ratio, params)
        if self.untimed:
            time_in_run(trials, chosen, self.untimed, self.gpus, result, self.log)
        shared = cores_shared(trials.kernel_rates.get(chosen, {}), self.dominant, result["speeds"]["core"])
        if shared is not None:
            result["shared_cores"] = shared
            self.log(f"in the chosen run a core ran {shared['kernel']} at {shared['in_run']:.3g} GFLOP/s, "
                     f"{shared['factor']:.2f} of its rate alone (the cores share caches and memory): simulate "
                     f"scales the rates by it")
        if self.sizes_left_out:
            result["sizes_left_out"] = {"sizes": self.sizes_left_out, "by": self._n_said().rstrip(","),
                                        "from_files": self.n_from_files}
        helpers = loaded_helpers(self.program, self.driver)  # those the trials' runs imported
        if helpers is not None:  # a run whose module or helpers are edited since is warned these measured the old
            result.update(kernel_module=kernel_module_digest(self.program, self.driver, helpers),
                          kernel_helpers=list(helpers))
        result.update({"tiles": tiles, "params": params, "trial_n": trials.options.n, "search": trials.records(),
                       "candidates": len(guess.candidates),
                       "seconds": round(self.clock() - self.began, 3),
                       "tuned_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        return result

    # ---- step 1: the kernels and their speeds
    def plan_kernels(self) -> None:
        """The kernels timed alone, the weights of their mix (the program's task counts) and the dominant one."""
        counts = task_counts(self.driver, sets=self.sets, n=self.n)
        # a user kernel's inputs cannot be made up: only the prelude's are timed alone (the others in a run)
        self.untimed = sorted(set(self.program.kernels) - set(KERNEL_FLOPS))  # at any size
        weights = {kernel: count for kernel, count in counts.items() if kernel in KERNEL_FLOPS}
        self.stand_in = not weights  # no prelude kernel tune can time: gemm's rates stand for the program's own
        self.weights = weights or {"gemm": 1}
        self.dominant = max(self.weights, key=lambda k: self.weights[k] * KERNEL_FLOPS[k])
        self.kernels = sorted(set(self.weights) | {"gemm"})

    def choose_sizes(self, sizes: list | None) -> None:
        """The tile sizes timed on a core and on a GPU, and those the search may choose: ``--sizes``, else
        steps of 64 to 1024 (CuPy GPUs: :data:`CUPY_SIZES`), those up to half of ``--n``."""
        self.sizes_given = sizes is not None
        said = []  # what is left out, said once no refusal of n comes instead
        if sizes is None:
            cpu_sizes = list(range(STEP, 1024 + 1, STEP))
            gpu_sizes = list(CUPY_SIZES) if self.backend == "cupy" else cpu_sizes
            if self.n is not None:  # runs of that size tell tiles apart up to half of it
                fit = lambda candidates: [s for s in candidates if 2 * s <= self.n] or [STEP]
                left_out = sorted((set(cpu_sizes) - set(fit(cpu_sizes)))
                                  | (set(gpu_sizes) - set(fit(gpu_sizes)) if self.gpus else set()))
                cpu_sizes, gpu_sizes = fit(cpu_sizes), fit(gpu_sizes)
                if left_out:
                    self.sizes_left_out = left_out
                    said.append(f"sizes {_span(left_out)} not tried: {self._n_said()} tells tiles apart up to half "
                                f"of it, {self.n // 2}")
        else:
            cpu_sizes = gpu_sizes = sorted(set(sizes))
            beyond = [s for s in cpu_sizes if self.n is not None and 2 * s > self.n]
            if beyond and len(beyond) < len(cpu_sizes):  # all beyond: said below, before any timing
                self.sizes_left_out = beyond
                said.append(f"--sizes: {','.join(map(str, beyond))} left out: runs of {self._n_said()} tell tiles "
                            f"apart up to half of it")
                cpu_sizes = gpu_sizes = [s for s in cpu_sizes if s not in beyond]
        self.cpu_sizes, self.gpu_sizes = cpu_sizes, gpu_sizes
        timed = cpu_sizes + (gpu_sizes if self.gpus else [])
        smallest, what = min(timed), "the smallest size tune tries"
        if self.program.tiling.kind == "hybrid" and not self.gpus:  # B is the program's: tune searches b in it
            smallest, what = int(self.defaults["B"]), "the program's B, which tune keeps without GPUs"
        if self.n is not None and self.n < 2 * smallest:  # no size tune would try fits: said before any timing
            raise self._too_small(f"{what}, {smallest}", 2 * smallest)
        for line in said:
            self.log(line)

    def _n_said(self) -> str:
        """Where the n of tune's runs came from: --n, or the program's load files."""
        return f"n = {self.n}, which the program's load files fix," if self.n_from_files else f"--n {self.n}"

    def _too_small(self, tiles: str, least: int) -> UsageError:
        """Tune's ``n`` is less than two ``tiles`` (``least``: the ``n`` they need), said as where it
        came from: --n, or the program's load files, which no --n changes."""
        if self.n_from_files:
            return UsageError(f"n = {self.n}, which the program's load files fix, is less than two tiles of {tiles}: "
                              f"runs of one tile cannot tell tile sizes apart (tune the program with files of n = "
                              f"{least} or more)")
        return UsageError(f"--n {self.n} is less than two tiles of {tiles}: runs of one tile cannot tell tile sizes "
                          f"apart (give --n {least} or more, or leave it out)")

    def check_hybrid_sizes(self) -> None:
        """Hybrid tiles: a usage error, before any timing, when no size tune may try makes a tiling
        (on GPUs, ``B`` wide enough for the program's ``s`` slices; without, a host slice ``b``)."""
        if self.program.tiling.kind != "hybrid":
            return
        s = int(self.defaults.get("s") or 2)
        if self.gpus:
            least = STEP * max(2, s)  # B holds the program's s slices of 64 or more
            if self.n is not None and self.n < 2 * least:
                raise self._too_small(f"the smallest B of {self.program.name}'s s = {s} slices, {least}", 2 * least)
            if self.sizes_given and max(self.gpu_sizes) < least:
                raise UsageError(f"--sizes {','.join(map(str, self.gpu_sizes))}: {self.program.name}'s hybrid tiles "
                                 f"of s = {s} slices need B of at least {least}: give such a size")
            return
        B = int(self.defaults["B"])
        if s < 2:
            raise UsageError(f"{self.program.name}'s hybrid tiling has s = {s} slice: it has no host slice b to tune "
                             f"without GPUs (tune it with --gpus, or give s of 2 or more)")
        if (B - 1) // (s - 1) < STEP:  # (s - 1)·b < B: the host slices are narrower than the smallest size timed
            raise UsageError(f"{self.program.name}'s hybrid tiling B={B}, s={s} leaves the host slices b at most "
                             f"{(B - 1) // (s - 1)} wide, below the {STEP} tune times kernels at (sizes are multiples "
                             f"of {STEP}): give runs b yourself (--b), or give the program a B of at least "
                             f"{STEP * (s - 1) + 1} or a smaller s")
        if not self.host_slice_sizes():
            raise UsageError(f"--sizes {','.join(map(str, self.cpu_sizes))}: {self.program.name}'s hybrid tiling "
                             f"B={B}, s={s} leaves the host slices b at most "
                             f"{(B - 1) // max(1, s - 1) // STEP * STEP} wide: give such a size")

    def host_slice_sizes(self) -> list:
        """Hybrid tiles without GPUs: the host slices ``b`` the program's ``B`` and ``s`` leave room
        for, in steps of 64 (among ``--sizes``, if given)."""
        B, s = int(self.defaults["B"]), int(self.defaults["s"])
        widest = (B - 1) // max(1, s - 1) // STEP * STEP
        return [b for b in range(STEP, widest + 1, STEP) if not self.sizes_given or b in self.cpu_sizes]

    def log_plan(self) -> None:
        gpus, sets, blocks = self.gpus, self.sets, self.blocks
        self.log(f"tune {self.program.name}: {self.workers} worker(s)"
                 + (f", {gpus} GPU(s) ({self.backend})" if gpus else "")
                 + f", budget {self.budget:g} s" + (f", {_assigned(sets)}" if sets else "")
                 + ("; kernel timed: gemm, standing in for the program's own" if self.stand_in
                    else f"; kernels timed {', '.join(self.kernels)} (dominant {self.dominant})")
                 + (f"; inner blocks {', '.join(blocks)}" if blocks else ""))
        if self.untimed:
            users = [kernel for kernel in self.untimed if kernel not in CPU_KERNELS]
            kinds = " and ".join(kind for kind, present in (("user kernels", users), (
                "prelude kernels tune has no timing for", len(users) < len(self.untimed))) if present)
            self.log(f"not timed alone: {', '.join(self.untimed)} ({kinds}; the tile sizes follow "
                     f"{self.dominant}'s rates, and the search's runs of the program time them)")

    def time_kernels(self) -> dict:
        """The kernels' speeds on one core (single-threaded BLAS) and one GPU: place -> kernel -> size -> GFLOP/s."""
        ib = self.defaults[self.blocks[0]] if self.blocks else 32  # the height of the QR kernels' T factors
        blas.load()  # SciPy's OpenBLAS, which threadpool_limits sees only once loaded
        with threadpool_limits(1):
            deadline = self.began + 0.4 * self.budget
            min_time = 0.02 if self.budget <= QUICK else 0.05
            speeds = measure_speeds(self.kernels, self.cpu_sizes, {"core": None}, ib, deadline, min_time,
                                    self.clock, plateau=not self.sizes_given)
            if self.gpus:
                speeds.update(measure_speeds(self.kernels, self.gpu_sizes, {"gpu": self.device}, ib,
                                             max(deadline, self.clock() + 0.25 * self.budget), min_time,
                                             self.clock, plateau=not self.sizes_given))
        return speeds

    # ---- step 2: the first guess
    def first_guess(self, speeds: dict) -> Guess:
        if self.program.tiling.kind != "hybrid":
            return self.uniform_guess(speeds)
        return self.hybrid_gpu_guess(speeds) if self.gpus else self.hybrid_host_guess()

    def hybrid_gpu_guess(self, speeds: dict) -> Guess:
        """``B`` from the GPU's gemm, the host's width ``B_h`` by the paper's formula, split into slices."""
        best = self.best
        fastest = smallest_near_best(speeds["gpu"]["gemm"])
        s_default = int(self.defaults.get("s") or 2)
        B = max(fastest, STEP * max(2, s_default))
        if self.sizes_given and B not in self.gpu_sizes:  # widened for the slices: the next size given
            B = min(size for size in self.gpu_sizes if size > B)  # one is (check_hybrid_sizes)
        B_h = host_width(B, best["core"], self.workers, best["gpu"], self.gpus)
        b, s = hybrid_split(B, B_h, s_default)
        self.log(f"B = {B}: " + (f"the smallest GPU gemm size within {THRESHOLD:.0%} of the best "
                                 f"({max(speeds['gpu']['gemm'].values()):.2f} GFLOP/s)" if B == fastest else
                                 f"the smallest that holds {s_default} slices of {STEP} or more (the GPU's gemm is "
                                 f"within {THRESHOLD:.0%} of its best from {fastest})"))
        self.log(f"B_h = B·f_core·W/(f_core·W + f_gpu·G) = {B}·{best['core']:.2f}·{self.workers}/"
                 f"({best['core']:.2f}·{self.workers} + {best['gpu']:.2f}·{self.gpus}) = {B_h:.0f} "
                 f"→ b = {b}, s = {s}" + (f" (no host slice: the share of each of the {s_default - 1} slices, "
                                          f"{B_h / (s_default - 1):.0f}, is under {STEP}; the search tries them)"
                                          if s < s_default else ""))
        formula = {"B": B, "B_h": round(B_h, 1), "b": b, "s": s, "f_core": round(best["core"], 3),
                   "f_gpu": round(best["gpu"], 3)}
        widest = (B - STEP) // max(1, s_default - 1) // STEP * STEP
        candidates = [(STEP, 1)] + ([(w, s_default) for w in range(STEP, widest + 1, STEP)] if s_default > 1 else [])
        start = candidates.index((b, s)) if (b, s) in candidates else 0
        return Guess(candidates, start, B, "B", lambda c: {"B": B, "b": c[0], "s": c[1]},
                     lambda c: f"b={c[0]} s={c[1]}", formula, gpu_only=(STEP, 1))

    def hybrid_host_guess(self) -> Guess:
        """The program's ``B`` and ``s``; ``b`` from the kernel mix on a core."""
        B = int(self.defaults["B"])
        slices = self.host_slice_sizes()  # some (check_hybrid_sizes)
        candidates = [b for b in slices if b in self.core_mix] or slices  # the timed ones (the smallest is)
        near_best = max(smallest_near_best(self.core_mix), STEP)
        b = min(candidates, key=lambda c: (abs(c - near_best), c))  # the nearest one there is room for (or given)
        if b == near_best:
            self.log(f"b = {b}: the smallest size within {THRESHOLD:.0%} of the best rate of the kernel mix on a core")
        else:  # the size the rates favour leaves no room for the program's s slices in B
            self.log(f"b = {b}: the size nearest to {near_best} (the smallest within {THRESHOLD:.0%} of the best rate "
                     f"of the kernel mix on a core) that B={B}, s={self.defaults['s']} leave room for ((s-1)·b < B)")
        return Guess(candidates, candidates.index(b), B, "B", lambda c: {"b": c}, lambda c: f"b={c}")

    def uniform_guess(self, speeds: dict) -> Guess:
        """``nb`` from the GPU's gemm (the kernel mix on a core without GPUs); with GPUs, the host:GPU
        columns at the ratio of their speeds."""
        gpus = self.gpus
        rates, where = (speeds["gpu"]["gemm"], "GPU gemm") if gpus else (
            self.core_mix, "gemm on a core, standing in for the program's kernels" if self.stand_in
            else "kernel mix on a core")
        nb = smallest_near_best(rates)
        # the tiles are searched among the sizes the kernels were timed at (--sizes, or a GPU's: steps of 64
        # are too fine to cross the range a GPU's best tiles span within the budget), not at those the timing
        # stopped before (its share of the budget spent, or the rates no longer growing)
        candidates = sorted(rates)
        planned = self.gpu_sizes if gpus else self.cpu_sizes
        untimed = [size for size in planned if size not in rates]  # the last sizes: the timing stopped before them
        shown = _span(untimed)
        why = "" if self.sizes_given else "the rates stopped growing, or "
        self.log(f"nb = {nb}: the smallest size within {THRESHOLD:.0%} of the best rate of the {where}"
                 + (f"; the search keeps to the sizes timed, up to {candidates[-1]} (not timed: {shown}: {why}"
                    f"the timing's share of the budget ran out)" if untimed else ""))
        formula, ratio = {"nb": nb}, None
        if gpus:
            host, gpu = _rate_at(self.core_mix, nb) * self.workers, _rate_at(self.gpu_mix, nb)
            ratio = tuple(nearest_ratio(host, gpu, gpus))
            self.log(f"host/GPU speed {host:.2f}/{gpu:.2f} GFLOP/s on the kernel mix at nb={nb} "
                     f"→ {ratio[0]}:{ratio[1]} host:GPU columns")
            formula = {"nb": nb, "host_gflops": round(host, 3), "gpu_gflops": round(gpu, 3),
                       "gpu_ratio": list(ratio)}
        return Guess(candidates, candidates.index(nb), nb, "nb", lambda c: {"nb": c}, lambda c: f"nb={c}",
                     formula, ratio)

    # ---- step 3: the search, at one moderate size
    def start_trials(self, guess: Guess, speeds: dict) -> tuple:
        """The search's runs at an order long enough to time and short enough for the budget, the first
        of them timed; the guess narrowed to the candidates the program accepts there. ``(trials, guess)``."""
        n, tile, gpus, workers = self.n, guess.tile, self.gpus, self.workers
        planned = 12 * (1 + len(self.blocks))  # trials: a dozen, and as many again per inner block
        total_rate = (self.best["core"] * workers + (self.best.get("gpu", 0.0) * gpus)) * 1e9
        flops = FLOPS.get(self.program.check.kind if self.program.check else "", lambda size: size ** 3)
        if n is not None and n < 2 * tile:
            raise self._too_small(f"the first guess, {guess.label}={tile}", 2 * tile)
        estimate = lambda size: 2 * flops(size) / total_rate + 0.02  # seconds of one run, at half the peak
        target = min(2.0, self.remaining() / (2 * planned))  # every trial twice
        multiple = max(C0 * max(1, gpus), math.isqrt(2 * workers) + 3)
        while multiple < 24 and estimate((multiple + 1) * tile) <= target:  # longer runs time better
            multiple += 1
        while multiple > 2 and estimate(multiple * tile) > target:
            multiple -= 1
        # the settings the program's requirements refuse at the trials' size are not tried, nor tiles wider
        # than half of it (a run of one tile cannot tell sizes apart); the nearest one left to the guess is the first
        at = lambda size, candidate: Options(n=size, tiles=guess.settings(candidate), sets=self.sets)
        tile_defaults = tile_values(self.defaults, self.program.tiling.kind)
        width = lambda candidate: _tile_width({**tile_defaults, **guess.settings(candidate)})
        usable = lambda size: [c for c in guess.candidates
                               if 2 * width(c) <= size and _accepts(self.driver, at(size, c))]
        nearest_to_guess = lambda choices: min(choices, key=lambda c: abs(guess.candidates.index(c) - guess.start))
        allowed = usable(n or multiple * tile)
        if not allowed:
            accepted(self.driver, [at(n or multiple * tile, guess.candidates[guess.start])], "runs its trials")
        nearest = nearest_to_guess(allowed)
        # the warm-up, timed: the smallest trial holding two of its tiles (--n: every trial's)
        probe_n = n or min(multiple * tile, 2 * max(tile, width(nearest)))
        if not _accepts(self.driver, at(probe_n, nearest)):
            probe_n = n or multiple * tile
        # the runs time the kernels: those tune cannot time alone (time_in_run), and the dominant one as the
        # cores run it together (cores_shared)
        timing = True
        probed_at, probed_ratio = nearest, guess.ratio
        probed = trial(self.driver, Options(n=probe_n, tiles=guess.settings(nearest), gpus=gpus,
                                            gpu_backend=self.backend, workers=workers, gpu_ratio=guess.ratio,
                                            sets=self.sets, time_kernels=timing, watchdog=self.watchdog))
        probe = probed.seconds
        if probe > 2 * estimate(probe_n):  # kernels slower than the rates timed (a user's): runs grow as n³
            estimate = lambda size: probe * (size / probe_n) ** 3
            while multiple > 2 and estimate(multiple * tile) > target:
                multiple -= 1
        trial_n = n or multiple * tile
        guess, nearest = self.narrowed(guess, usable(trial_n), width, nearest_to_guess, trial_n, nearest)
        repeats = 2 if 2 * planned * estimate(trial_n) < self.remaining() else 1
        trials = Trials(self.driver, Options(n=trial_n, gpus=gpus, gpu_backend=self.backend, workers=workers,
                                             host_speeds=speeds, sets=self.sets, time_kernels=timing,
                                             watchdog=self.watchdog),
                        repeats, self.remaining)
        trials.kernel_rates[None] = probed.kernel_rates
        ratio = self.dealing_every_gpu(guess.ratio, guess.settings(nearest), trial_n)
        if (trial_n, nearest, ratio) == (probe_n, probed_at, probed_ratio) and repeats == 1:  # the first trial
            first = trials.key(guess.settings(nearest), ratio, {})
            trials.measured[first], trials.kernel_rates[first] = probe, probed.kernel_rates
            trials.longest = probe
        self.log(f"search at n={trial_n} ({guess.label}-multiple {trial_n / tile:.3g}), best of {repeats} "
                 f"run(s) each:")
        return trials, guess

    def dealing_every_gpu(self, ratio: tuple | None, tiles: dict, n: int) -> tuple | None:
        """The guessed host:GPU ``ratio``, or where it leaves a GPU without a tile column in a run of order
        ``n`` with ``tiles`` (a tile candidate would be timed with GPUs idle), the nearest one that deals
        them the most columns (:func:`distinct_ratios`, as the ratio search takes its candidates)."""
        key = (ratio, tuple(sorted(tiles.items())), n)
        if ratio is None or key in self.dealt:
            return self.dealt.get(key)
        first = Fraction(*ratio)
        options = Options(n=n, tiles=tiles, gpus=self.gpus, gpu_backend=self.backend, sets=self.sets)
        ratios, _ = distinct_ratios(self.driver, options, first)
        self.dealt[key] = ratio
        if ratios and first not in ratios:
            dealing = min(ratios, key=lambda r: abs(r - first))
            self.log(f"  {first.numerator}:{first.denominator} leaves a GPU without a tile column at n={n}, "
                     f"{_assigned(tiles)}: timed at {dealing.numerator}:{dealing.denominator}")
            self.dealt[key] = dealing.numerator, dealing.denominator
        return self.dealt[key]

    def narrowed(self, guess: Guess, usable: list, width, nearest_to_guess, trial_n: int, nearest) -> tuple:
        """``(guess, nearest)``: the guess searching only ``usable``, the candidates its trials of order
        ``trial_n`` can tell apart (the budget may have shortened them since the probe), starting from the
        one nearest the first guess (``nearest`` if usable); those of tiles (``width``) over half of
        ``trial_n`` are said to be left out, and a usage error says when none is left."""
        if not usable:
            raise UsageError(f"the budget of {self.budget:g} s leaves tune's trial runs at n={trial_n}, at which "
                             f"{self.program.name}'s requirements accept none of the tile sizes it would try: "
                             f"give a larger --budget, or --n")
        wider = [c for c in guess.candidates if 2 * width(c) > trial_n]
        if wider and self.n is None:  # the budget (not --n) chose the trials' size: the search keeps below half of it
            self.log(f"{', '.join(guess.describe(c) for c in wider)} not tried: runs of n={trial_n}, the largest the "
                     f"budget of {self.budget:g} s allows, tell tiles apart only up to half of it (give a larger "
                     f"--budget or --n to try them)")
        if nearest not in usable:
            nearest = nearest_to_guess(usable)
        return replace(guess, candidates=usable, start=usable.index(nearest)), nearest

    def search_tiles(self, trials: "Trials", guess: Guess) -> tuple:
        """The fastest tile setting (with its best inner blocks at each one tried); ``(tiles, params)``."""
        tile_defaults = tile_values(self.defaults, self.program.tiling.kind)
        inner = {name: self.defaults[name] for name in self.blocks}  # the latest tile setting's best inner blocks
        best_inner: dict = {}  # tile candidate -> its best inner blocks

        def measure_tiles(candidate) -> float:
            tiles = guess.settings(candidate)
            ratio = self.dealing_every_gpu(guess.ratio, tiles, trials.options.n)
            if self.blocks:
                width = narrowest_column({**tile_defaults, **tiles})
                # the program's own inner blocks at these tiles (ib = nb // 6 is 32 at nb = 192, not 42)
                here = make_params(self.driver, trials.options_of(tiles, ratio, {}), requirements=False)
                values, tried = search_inner_blocks(self.blocks, inner, width,
                                                    lambda v: trials.seconds(tiles, ratio, v),
                                                    trials.time_for_another, here.as_dict(),
                                                    lambda v: trials.accepts(tiles, ratio, v))
                self.log(f"  {guess.describe(candidate)}: " + ", ".join(f"{_assigned(v)} {t:.4f} s"
                                                                        for v, t in tried))
                inner.update(values)
                best_inner[candidate] = values
            return trials.seconds(tiles, ratio, best_inner.get(candidate, {}))

        chosen, history = hill_climb(guess.candidates, guess.start, measure_tiles, more_time=trials.time_for_another)
        if guess.gpu_only is not None:
            chosen, history = gpu_only_unless_slower(history, guess.gpu_only, measure_tiles)
        self.log("  " + ", ".join(f"{guess.describe(c)}{_assigned(best_inner.get(c, {}), ' ')} {t:.4f} s"
                                  + ("*" if c == chosen else "") for c, t in history))
        return guess.settings(chosen), best_inner.get(chosen, {})

    def search_ratio(self, trials: "Trials", tiles: dict, params: dict, first: tuple, result: dict) -> None:
        """Uniform tiles on GPUs: the fastest host:GPU ratio, and whether the host taking GPU tasks as the
        run goes beats it (the cache entry's ``gpu_ratio`` and ``host_takes``)."""
        more_time = trials.time_for_another
        measure_ratio = lambda r: trials.seconds(tiles, (r.numerator, r.denominator), params)
        guess = Fraction(*first)
        candidates, columns = distinct_ratios(trials.driver, trials.options_of(tiles, None, params), guess)
        if columns < self.gpus:
            self.log(f"  {columns} tile column(s) for {self.gpus} GPUs: at this size some GPU holds none, whatever the "
                     f"ratio (smaller tiles, or a larger --n, give each one)")
        listed = ", ".join(f"{r.numerator}:{r.denominator}" for r in candidates)
        self.log(f"  gpu-ratio candidates, one per way of dealing the {columns} tile column(s) that gives "
                 f"{'each GPU' if columns >= self.gpus else 'the most GPUs'} some (climbed from the nearest to "
                 f"{guess.numerator}:{guess.denominator} while it gets faster): {listed}")
        start = min(range(len(candidates)), key=lambda i: abs(candidates[i] - guess))
        chosen, history = hill_climb(candidates, start, measure_ratio, more_time=more_time)
        chosen, history = gpu_only_unless_slower(history, RATIOS[0], measure_ratio)
        ratio = (chosen.numerator, chosen.denominator)
        # the host takes GPU work as it goes: tried when the budget leaves time for it
        taking = trials.seconds(tiles, (0, 1), params, host_takes=True) if more_time() else None
        result["host_takes"] = taking is not None and taking < trials.seconds(tiles, ratio, params)
        self.log("  " + ", ".join(f"gpu-ratio {r.numerator}:{r.denominator} {t:.4f} s"
                                  + ("*" if r == chosen and not result["host_takes"] else "") for r, t in history)
                 + (f", gpu-ratio 0:1 with --host-takes on {taking:.4f} s" + ("*" if result["host_takes"] else "")
                    if taking is not None else ", --host-takes on not tried (out of budget)"))
        result["gpu_ratio"] = list(ratio)  # the best without taking, which --host-takes off gets


def distinct_ratios(driver, options: Options, guess: Fraction) -> tuple[list, int]:
    """``(ratios, columns)``: :data:`RATIOS`, one for each way they deal the ``columns`` tile columns of a run
    with ``options`` (the trials': their n, tiles, parameters and GPUs) to the host and the GPUs, the one
    nearest ``guess``; none that leaves a GPU without a column (with fewer columns than GPUs, those
    giving the most GPUs one). Ratios dealing the columns alike run
    alike (at 3 columns and 2 GPUs, 3:4, 5:4 and 4:3 all keep every one on the host): timing each would
    pick one by noise, and the cache would keep a split that is no split at the runs' size."""
    program = driver.PROGRAM
    params = make_params(driver, options)
    columns = max(matrix.nt for matrix in make_matrices(driver, params, make_distribution(
        program, params, (1, 1), options.gpus), 0).values())
    dealt: dict = {}  # the device of each column -> the ratio nearest the guess that deals them so
    for ratio in sorted(RATIOS, key=lambda r: abs(r - guess)):
        distribution = make_distribution(program, params, (1, 1), options.gpus, (ratio.numerator, ratio.denominator))
        devices = tuple(distribution.device_of(0, j) for j in range(columns))
        if any(device != HOST for device in devices):
            dealt.setdefault(devices, ratio)
    # a ratio that leaves a GPU idle at this size is what the run then warns of: those using the most GPUs
    used = {devices: len(set(devices) - {HOST}) for devices in dealt}
    return sorted(ratio for devices, ratio in dealt.items() if used[devices] == max(used.values())), columns


def cores_shared(in_run: dict, kernel: str, alone: dict) -> dict | None:
    """How fast a core ran ``kernel`` in a run of the program, its workers busy together, against its rate
    timed alone (``alone``: the cache's ``speeds["core"]``) at that tile size: ``{kernel, size, in_run,
    alone, factor}``, the factor at most 1; None where the run did not time it on a core. On a 2-core VM a
    core ran gemm at 0.72 of its rate alone, and simulate, counting each core at its rate alone, predicted
    runs twice as fast as they were."""
    timed = in_run.get(kernel)
    if not timed or kernel not in alone:
        return None
    size, rate = next(iter(timed.items()))
    single = Rates(alone, "core").gflops(kernel, float(size))
    if not single > 0:
        return None
    return {"kernel": kernel, "size": int(size), "in_run": rate, "alone": rate_kept(single),
            "factor": round(min(1.0, rate / single), 3)}


def time_in_run(trials: "Trials", chosen: tuple, kernels: list, gpus: int, result: dict, log) -> None:
    """The rates on a core of ``kernels`` (those tune cannot time alone), as the search's runs
    of the program timed them on their CPU workers: the chosen setting's run, else the latest
    run that ran them on a core. They join the cache entry's ``speeds`` (for ``simulate`` and
    ``--host-takes``), and ``measured_in_run`` names them (their time includes bringing the
    tiles from memory, which ``simulate`` then does not add)."""
    measured: dict = {}
    for key in (chosen, *reversed(list(trials.kernel_rates))):
        for kernel, rates in trials.kernel_rates.get(key, {}).items():
            if kernel in kernels:
                measured.setdefault(kernel, rates)
    result["speeds"]["core"].update(measured)
    result["measured_in_run"] = sorted(measured)
    program = trials.driver.PROGRAM
    uncounted = {call.kernel for call in program.calls if call.flops is None and call.kernel not in PRELUDE_FLOPS}
    found = ", ".join(f"{kernel} {next(iter(rates.values())):.3g} GFLOP/s"
                      + (" as if a gemm on its largest tile (it declares no flop count)" if kernel in uncounted else "")
                      for kernel, rates in measured.items())
    missing = [kernel for kernel in kernels if kernel not in measured]
    on_gpus = sorted(set(measured) & gpu_kernels(program, trials.driver)) if gpus else []
    log("timed in the search's runs of the program, on a core: " + (found or "none")
        + (f"; {', '.join(missing)} not (no flops counted, or no task on a core): gemm's rate stands for "
           f"{'them' if len(missing) > 1 else 'it'}" if missing else "")
        + (f"; on a GPU {', '.join(on_gpus)} take{'s' if len(on_gpus) == 1 else ''} gemm's rate (a GPU kernel "
           f"returns at launch)" if on_gpus else ""))


def _accepts(driver, options: Options) -> bool:
    """Whether the program's requirements accept the size, tiles and parameters of ``options``."""
    try:
        make_params(driver, options)
    except UsageError:
        return False
    return True


class Trials:
    """The search's runs of the program, each setting timed once (best of ``repeats``, fewer when
    ``remaining()``, the seconds left of the budget, would not hold another)."""

    def __init__(self, driver, options: Options, repeats: int, remaining=lambda: float("inf")):
        self.driver, self.options, self.repeats, self.remaining = driver, options, repeats, remaining
        self.measured: dict = {}  # (tiles, ratio, params as sorted tuples, host takes) -> seconds
        self.kernel_rates: dict = {}  # the same keys -> the rates its last run measured (options.time_kernels)
        self.longest = 0.0  # the longest run so far (wall seconds): what the next one may take

    def seconds(self, tiles: dict, ratio, params: dict, host_takes: bool = False) -> float:
        """Seconds of the run with these tile settings, host/GPU ratio and parameters (and CPU workers
        taking GPU tasks)."""
        key = self.key(tiles, ratio, params, host_takes)
        if key not in self.measured:
            options = self.options_of(tiles, ratio, params, host_takes)
            best = float("inf")  # also for settings the program's requirements refuse (an inner block)
            for run in range(self.repeats if _accepts(self.driver, options) else 0):
                if run and self.remaining() < self.longest:
                    break
                began = time.perf_counter()
                ran = trial(self.driver, options)
                best, self.kernel_rates[key] = min(best, ran.seconds), ran.kernel_rates
                self.longest = max(self.longest, time.perf_counter() - began)
            self.measured[key] = best
        return self.measured[key]

    def accepts(self, tiles: dict, ratio, params: dict) -> bool:
        """Whether the program's requirements take the run with these settings."""
        return _accepts(self.driver, self.options_of(tiles, ratio, params))

    def options_of(self, tiles: dict, ratio, params: dict, host_takes: bool = False) -> Options:
        """The options of the run with these settings."""
        return replace(self.options, tiles=dict(tiles), gpu_ratio=ratio, sets={**self.options.sets, **params},
                       host_takes=host_takes)

    def time_for_another(self) -> bool:
        """Whether the budget holds one more setting, taking as long as the longest run so far."""
        return self.remaining() > self.longest

    @staticmethod
    def key(tiles: dict, ratio, params: dict, host_takes: bool = False) -> tuple:
        return tuple(sorted(tiles.items())), ratio, tuple(sorted(params.items())), host_takes

    def records(self) -> list:
        """Every setting timed, in order, as the cache entry's ``search``."""
        return [{"tiles": dict(tiles), "params": dict(params), "gpu_ratio": _listed(ratio),
                 **({"host_takes": True} if host_takes else {}), "seconds": round(seconds, 6)}
                for (tiles, ratio, params, host_takes), seconds in self.measured.items()]


def trial(driver, options: Options):
    """One of tune's runs; a failure says it was one, and at which sizes (tune picks them)."""
    try:
        return execute(driver, options)
    except TaskFailure as failure:
        raise _in_tunes("trial run", options.n, {**options.tiles, **options.sets}, failure) from None


def _in_tunes(what: str, n: int, settings: dict, failure: TaskFailure) -> TaskFailure:
    """``failure`` said to be met in tune's ``what`` at the sizes tune chose."""
    given = ", ".join(f"{name}={value}" for name, value in settings.items())
    return TaskFailure(f"in tune's {what} at n={n}{', ' + given if given else ''} (tune chooses the sizes; --n "
                       f"and --sizes set them): {failure}", failure.rank, failure.line)


def _assigned(values: dict, lead: str = "") -> str:
    """``ib=64`` (``lead`` before it), or nothing for no values."""
    return lead + " ".join(f"{k}={v}" for k, v in values.items()) if values else ""


def _tile_width(tiles: dict) -> int:
    """The width of a tile of these settings: ``nb``, or a hybrid tiling's block ``B``."""
    return tiles["nb"] if "nb" in tiles else tiles["B"]


def _rate_at(rates: dict, size: int) -> float:
    return rates.get(size) or rates[min(rates, key=lambda s: abs(s - size))]


def _listed(ratio):
    return None if ratio is None else list(ratio)


def _speed_table(speeds: dict) -> str:
    sizes = sorted({s for table in speeds.values() for rates in table.values() for s in rates})
    lines = ["kernel speeds, GFLOP/s (one core; one GPU):",
             f"  {'':<16}" + "".join(f"{s:>8}" for s in sizes)]
    for place, table in speeds.items():
        for kernel, rates in table.items():
            lines.append(f"  {place + ' ' + kernel:<16}"
                         + "".join(f"{rates[s]:>8.2f}" if s in rates else f"{'-':>8}" for s in sizes))
    return "\n".join(lines)


def save(result: dict) -> tuple:
    """Store ``result`` in this machine's cache; ``(path, key)``."""
    key = tuning.entry_key(result["key"], result["gpus"], result["backend"] or "emulated")
    return tuning.store(key, result), key


def render(result: dict, path=None, key=None) -> str:
    tiles = _assigned(result["tiles"]) + _assigned(result.get("params") or {}, " ")
    ratio = result.get("gpu_ratio")
    lines = [f"tuned {result['program']}: {tiles}"
             + (", gpu-ratio 0:1 with --host-takes on" if result.get("host_takes")
                else f", gpu-ratio {ratio[0]}:{ratio[1]}" if ratio else "")
             + (f", tuned with {_assigned(result['sets'])}" if result.get("sets") else "")
             + f" (in {result['seconds']:.1f} s)"]
    left_out = result.get("sizes_left_out")
    # one setting left to try (n left out the other sizes, or --sizes gave one): no budget tries another
    if len(result.get("search") or ()) == 1 and result.get("candidates") == 1:
        tried = _assigned(result["tiles"])
        why = f"it had only {tried} to try"
        if left_out:
            by, larger = left_out["by"], "a larger --n tries"
            if left_out.get("from_files"):  # n is the program's load files': no --n changes it, other files do
                by, larger = f"{by},", "load files of a larger n try"
            why = f"{by} left it one tile size to try ({tried}; {larger} {_span(left_out['sizes'])} too)"
        lines.append(f"note: tune ran one trial, so no other setting was compared with it: {why}")
    elif len(result.get("search") or ()) == 1:  # a budget that let one trial run: the first guess, untested
        lines.append("note: the budget let tune run one trial, so no other setting was compared with it "
                     "(a larger --budget compares them)")
    if path is not None:
        gpus = f" --gpus {result['gpus']} --gpu-backend {result['backend']}" if result["gpus"] else ""
        # the params the load files fix come with the files: a run given them fits the same
        sets = " ".join(f"--set {name}={value}" for name, value in (result.get("sets") or {}).items()
                        if name not in result.get("sets_from_files", ()))
        lines.append(f"saved in {path} as {key}: tiledsl run of {result['program']}{gpus} uses these values "
                     f"unless given on the command line (--no-tune ignores them)"
                     + (f"; they were tuned with {sets}: give a run that too to run it as tuned" if sets else ""))
    return "\n".join(lines)


def _span(sizes: list) -> str:
    """Tile sizes in order, as a list of up to three or as 'first to last'."""
    return ", ".join(map(str, sizes)) if len(sizes) <= 3 else f"{sizes[0]} to {sizes[-1]}"


def as_json(result: dict) -> dict:
    """A tuning ``result`` as ``tune --json`` prints it: its GPU backend and ratio named and written as
    run's summary has them (``gpu_backend``, ``"H:G"``); the cache keeps ``result`` as it is."""
    shown = {("gpu_backend" if key == "backend" else key): value for key, value in result.items()}
    shown["gpu_ratio"] = ratio_text(result["gpu_ratio"])
    return shown
