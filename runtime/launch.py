"""Running a compiled program on this rank: options, inputs, the engine, the check, outputs.

:func:`execute` is the one path every entry point takes (a driver run as a
script, ``tiledsl run``, ``tiledsl.load(...).run``): it sizes and places the
matrices, creates or loads the inputs, runs the engine, verifies the result
with the DPLASMA-style backward error (DESIGN §5) and returns a
:class:`RunResult`. :func:`main` is the command line of a generated driver.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import checks, inputs, npyio, priorities, progress, tuning
from .devices import backend
from .distribution import BlockCyclic, Hybrid, parse_ratio
from .engine import Engine, TaskFailure
from .geometry import Geometry
from .matrix import TiledMatrix
from .recording import survey
from .trace import Tracer, area_bound, chrome_trace, communication, critical_path, task_times, utilisation
from .verify import Verifier
from .world import UsageError, communicator, default_workers, grid_for

FLOPS = {"cholesky": lambda n: n ** 3 / 3, "qr": lambda n: 4 * n ** 3 / 3, "lu": lambda n: 2 * n ** 3 / 3}
TILE_SETTINGS = ("nb", "B", "b", "s")


class Params:
    """The program's integer parameters: ``n``, the tile sizes and its own ``param`` names."""

    def __init__(self, values: dict):
        self.__dict__.update(values)

    def __getitem__(self, name: str) -> int:
        return self.__dict__[name]

    def __setitem__(self, name: str, value: int) -> None:
        self.__dict__[name] = value

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Options:
    """How to run: sizes, tile settings, workers and files (the command line's content)."""

    n: int
    tiles: dict = field(default_factory=dict)  # nb or B, b, s given explicitly
    sets: dict = field(default_factory=dict)  # --set NAME=VALUE for the program's params
    workers: int | None = None
    window: int | None = None  # default: 4096 on one rank, 32 per worker (at least 64) on several
    seed: int = 42
    inputs: dict = field(default_factory=dict)  # matrix name -> .npy path
    outputs: dict = field(default_factory=dict)
    check: bool = False
    watchdog: float | None = None
    progress: bool = False
    grid: str | None = None  # "PxQ" on an MPI run
    gpus: int = 0  # GPUs per rank
    check_finite: bool = False
    trace: str | None = None  # path of the trace file to write
    gpu_backend: str = "emulated"
    gpu_memory: int | None = None  # bytes each GPU may hold (default: what it has free)
    priorities: str = "program"  # "program", "auto" (bottom levels) or "none" (see runtime.priorities)
    gpu_ratio: tuple | None = None  # (H, G): host/GPU block columns per cycle, uniform tiles (default 1:1)
    sources: dict = field(default_factory=dict)  # tile setting or "gpu_ratio" -> where its value came from


@dataclass
class RunResult:
    """What a run produced on this rank."""

    program: str
    params: dict
    seconds: float
    workers: int
    tasks: int
    residual: float | None = None
    residuals: dict = field(default_factory=dict)
    matrices: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)
    grid: tuple = (1, 1)
    ranks: int = 1
    gpus: int = 0
    trace: dict = field(default_factory=dict)  # bounds and utilisation of a traced run
    sources: dict = field(default_factory=dict)  # tile setting or "gpu_ratio" -> where its value came from
    gpu_ratio: tuple | None = None  # the host/GPU column ratio used (uniform tiles with GPUs)

    @property
    def passed(self) -> bool:
        return checks.passes(*self.residuals.values())


# ---------------------------------------------------------------- the run
def execute(driver, options: Options, arrays: dict | None = None, comm=None) -> RunResult:
    """Run the driver module ``driver`` on this process: alone, or as a rank of ``comm``'s job."""
    program = driver.PROGRAM
    ranks, rank = (comm.size, comm.rank) if comm is not None else (1, 0)
    params = make_params(driver, options)
    grid = grid_for(options.grid, ranks)
    devices = _devices(options)
    distribution = make_distribution(program, params, grid, options.gpus, options.gpu_ratio)
    matrices = make_matrices(driver, params, distribution, rank)
    _check_every_rank_has_tiles(program, matrices, ranks)
    check_file_names([d.name for d in program.matrices], [d.name for d in program.workspaces],
                     options.inputs, options.outputs)
    sources = {d.name: _source(d, i, matrices[d.name], options, arrays or {}, driver)
               for i, d in enumerate(program.matrices)}
    # refuse what cannot fit even at half the local tiles before walking the loop nest
    _check_memory(program, matrices, set(t for m in matrices.values() for t in m.local_tiles()), 0, False, 0.5)
    derive = options.priorities == "auto" or (options.priorities == "program" and program.derive_priorities)
    share = survey(driver, matrices, params, rank, priorities.TaskSequence() if derive else None)
    needed = share.needed
    workers = options.workers or default_workers(ranks, options.gpus)
    window = options.window or (4096 if ranks == 1 and not options.gpus else max(64, 32 * (workers + options.gpus)))
    _check_memory(program, matrices, needed, window if ranks > 1 or options.gpus else 0, options.check)
    _check_gpu_memory(matrices, needed, window, devices, options.gpu_memory, rank)
    _fill_inputs(program, matrices, sources, needed, devices)
    engine = Engine(program, _kernels(program, driver), workers, window, watchdog=options.watchdog, comm=comm,
                    devices=devices, check_finite=options.check_finite)
    engine.attach(matrices)
    engine.priority_of = (priorities.equal if options.priorities == "none" else
                          priorities.in_turn(priorities.bottom_levels(share.sequence)) if derive else None)
    share.sequence = None  # the levels are all the run needs of it
    with _single_threaded_blas():
        try:
            engine.tracer = Tracer() if options.trace else None
            with _progress(options, program, share.count, engine):
                seconds = _timed(engine, driver.generate, params, comm)
            events, engine.tracer = (engine.tracer.events if engine.tracer else None), None
            stats = _rank_stats(engine, matrices, comm)
            _bring_home(matrices, devices)
        finally:
            if engine.exchange is not None:
                engine.exchange.stop()
        result = RunResult(program.name, params.as_dict(), seconds, workers, sum(engine.stats.per_worker),
                           matrices=matrices, stats=stats, grid=grid, ranks=ranks, gpus=options.gpus)
        result.sources, result.gpu_ratio = tiling_sources(program, params, options), _ratio_of(distribution)
        if options.check and program.check is not None:
            result.residuals = _verify(driver, params, engine, matrices, sources, comm)
            result.residual = max(result.residuals.values())
    if events is not None:
        result.trace = _write_trace(driver, params, matrices, events, result, options, comm)
    for name, path in options.outputs.items():
        _write_output(matrices[name], path, comm)
    return result


def _devices(options: Options):
    """The GPU backend for ``--gpus``, or None without GPUs."""
    if options.gpus < 0:
        raise UsageError(f"--gpus must be at least 0, got {options.gpus}")
    if not options.gpus:
        return None
    try:
        devices = backend(options.gpu_backend, options.gpus)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if options.trace:
        devices.synchronous = True  # the trace shows kernel times, not launch times
    return devices


def _bring_home(matrices: dict, devices) -> None:
    """After the run every tile returns to the host (checks and outputs read host memory)."""
    if devices is None:
        return
    for matrix in matrices.values():
        for row in matrix.tiles:
            for tile in row:
                if tile.device and tile.data is not None:
                    tile.data = devices.to_host(tile.data)
                tile.device = 0


def _write_trace(driver, params, matrices, events, result, options: Options, comm) -> dict:
    """Merge every rank's events on rank 0, write the trace file, compute the bounds."""
    ranks = comm.gather(events) if comm is not None else [events]
    if ranks is None:  # not rank 0
        return {}
    with open(options.trace, "w") as target:
        about = {"program": driver.PROGRAM.name, **{k: v for k, v in params.as_dict().items() if v is not None},
                 "ranks": result.ranks, "workers": result.workers, "gpus": result.gpus}
        json.dump(chrome_trace(ranks, about), target)
    times = task_times(ranks)
    capacity = {"cpu": result.workers * result.ranks, "gpu": options.gpus * result.ranks}
    path = critical_path(driver, matrices, params, times)
    area = area_bound(times, capacity)
    summary = {"critical_path": path, "area_bound": area,
               "efficiency": max(path, area) / result.seconds if result.seconds > 0 else None}
    summary.update(utilisation(ranks, result.seconds))
    summary.update(communication(ranks, result.seconds))
    return summary


def _check_memory(program, matrices: dict, needed: set, window: int, check: bool, share: float = 1.0) -> None:
    """Refuse, with the numbers, a run whose tiles cannot fit in this machine's memory.

    The estimate: the tiles this rank stores (``share`` of them), two copies of a
    tile per task of the window when data moves between places, and the matrices
    a check builds (one like A for Cholesky and LU, three for QR).
    """
    tiles = sum(8 * h * w for tile in needed if tile.rank == tile.matrix.rank for h, w in [tile.shape])
    largest = max((8 * h * w for m in matrices.values() for row in m.tiles for t in row for h, w in [t.shape]),
                  default=0)
    transfers = 2 * window * largest
    first = matrices[program.matrices[0].name] if program.matrices else None
    checking = 0
    if check and program.check is not None and first is not None:
        checking = (3 if program.check.kind == "qr" else 1) * 8 * first.m * first.n // max(1, first.distribution.nranks)
    total = share * tiles + transfers + checking
    available = _available_memory()
    if available is not None and total > available:
        raise UsageError(f"the run needs about {_gib(total)} on this rank (tiles {_gib(share * tiles)}, transfer "
                         f"buffers {_gib(transfers)}, check {_gib(checking)}) but {_gib(available)} is available: "
                         f"use more ranks, a smaller --n, or a smaller --window")


def _check_gpu_memory(matrices: dict, needed: set, window: int, devices, limit: int | None, rank: int) -> None:
    """Refuse, with the numbers, a run whose tiles cannot fit in one of this rank's GPUs.

    The estimate per GPU: the tiles homed there, and the copies it may hold at once
    (alien inputs and minor outputs): two of a tile per task of the window, and
    never more than two of each tile this rank's tasks touch that lives elsewhere.
    """
    if devices is None:
        return
    largest = max((8 * h * w for m in matrices.values() for row in m.tiles for t in row for h, w in [t.shape]),
                  default=0)
    for device in range(1, devices.gpus + 1):
        tiles = sum(8 * h * w for tile in needed if tile.rank == tile.matrix.rank and tile.device == device
                    for h, w in [tile.shape])
        elsewhere = sum(8 * h * w for tile in needed if not (tile.rank == tile.matrix.rank and tile.device == device)
                        for h, w in [tile.shape])
        copies = 2 * min(window * largest, elsewhere)
        known = [size for size in (devices.free_memory(device), limit) if size is not None]
        if known and tiles + copies > min(known):
            allowed = "allowed by --gpu-memory" if min(known) == limit else "free"
            raise UsageError(f"the run needs about {_gib(tiles + copies)} on GPU {device} of rank {rank} "
                             f"(tiles {_gib(tiles)}, copies {_gib(copies)}) but {_gib(min(known))} is {allowed}: "
                             f"use more GPUs or ranks, a smaller --n, or a smaller --window")


def _gib(size: float) -> str:
    return f"{size / 2 ** 30:.2f} GiB"


def _available_memory() -> int | None:
    """Bytes of memory available now (Linux: MemAvailable), or None if unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _timed(engine: Engine, generate, params, comm) -> float:
    """Wall seconds of the run on the slowest rank, all ranks starting together."""
    if comm is None:
        return engine.run(generate, params)
    comm.barrier()
    if engine.tracer is not None:
        engine.tracer.restart()
    return comm.allreduce_max(engine.run(generate, params))


def _check_every_rank_has_tiles(program, matrices: dict, ranks: int) -> None:
    if ranks == 1 or not program.matrices:
        return
    first = matrices[program.matrices[0].name]
    owners = {tile.rank for row in first.tiles for tile in row}
    if len(owners) < ranks:
        raise UsageError(f"{ranks} ranks but {program.matrices[0].name} has {first.mt}×{first.nt} tiles, "
                         f"owned by only {len(owners)} rank(s): use smaller tiles or fewer ranks")


def _rank_stats(engine: Engine, matrices: dict, comm) -> dict:
    """This rank's statistics for the summary (DESIGN §8), taken before any check runs."""
    traffic = comm.stats if comm is not None else None
    local = sum(m.local_bytes() for m in matrices.values())  # host and GPU memory alike
    copies = engine.exchange.peak_copy_bytes if engine.exchange is not None else 0
    return {"rank": engine.rank, "tasks": sum(engine.stats.per_worker),
            "messages_sent": traffic.sends if traffic else 0,
            "messages_received": traffic.receives if traffic else 0,
            "bytes_sent": traffic.bytes_sent if traffic else 0,
            "bytes_received": traffic.bytes_received if traffic else 0,
            "peak_tile_bytes": local + copies,
            "device_copies": engine.exchange.device_copies if engine.exchange is not None else 0,
            "peak_window": engine.stats.peak_window,
            "busy_seconds": [round(b, 6) for b in engine.stats.busy]}


def make_params(driver, options: Options) -> Params:
    """The program's parameters: run options over tiling defaults, then the driver's defaults."""
    program = driver.PROGRAM
    settings = TILE_SETTINGS if program.tiling.kind == "hybrid" else ("nb",)
    extra = set(options.tiles) - set(settings)
    if extra:
        raise UsageError(f"--{sorted(extra)[0]} does not apply to {program.tiling.kind} tiling "
                         f"(it takes {', '.join('--' + s for s in settings if s != 'nb' or program.tiling.kind == 'uniform')})")
    values = {"n": options.n, "nb": None, "B": None, "b": None, "s": None}
    values.update(program.tiling.defaults)
    values.update(options.tiles)
    unknown = set(options.sets) - set(program.params)
    if unknown:
        raise UsageError(f"--set {sorted(unknown)[0]}: {program.name} has no parameter of that name"
                         + (f" (it has {', '.join(program.params)})" if program.params else ""))
    values.update({name: options.sets.get(name) for name in program.params})
    if options.n < 1:
        raise UsageError(f"--n must be at least 1, got {options.n}")
    return driver.resolve_params(Params(values))


def make_distribution(program, params: Params, grid: tuple[int, int], gpus: int, ratio: tuple | None = None):
    """The default placement: multi-level hybrid for hybrid tiles, else 2-D block cyclic
    with ``ratio = (H, G)`` host/GPU block columns per cycle (default 1:1)."""
    pr, pc = grid
    try:
        if program.tiling.kind == "hybrid":
            if ratio is not None and gpus:
                raise UsageError("--gpu-ratio applies to uniform tiling; hybrid tiles balance host and "
                                 "GPUs with b (the host slices' width), see tiledsl tune")
            return Hybrid(pr, pc, params.s, gpus)
        host, gpu = ratio if ratio is not None and gpus else (1, 1)
        return BlockCyclic(pr, pc, gpus, host, gpu)
    except ValueError as error:
        raise UsageError(str(error)) from None


def _ratio_of(distribution) -> tuple | None:
    """``(H, G)`` of a block-cyclic distribution over GPUs, else None."""
    if isinstance(distribution, BlockCyclic) and distribution.gpus:
        return distribution.host_columns, distribution.gpu_columns
    return None


# ---------------------------------------------------------------- tuned defaults
def use_tuned(program, options: Options, enabled: bool = True, comm=None, warn=None) -> None:
    """Fill what the command line left out from this machine's ``tiledsl tune`` cache.

    The tuned tile settings are used when no tile setting was given, the tuned
    host/GPU ratio when no ``--gpu-ratio`` was (uniform tiles with GPUs); explicit
    options always win. Each value taken is noted in ``options.sources``. Rank 0
    reads the cache and every rank uses what it read (``TILEDSL_NO_TUNE=1`` or
    ``enabled=False``: the cache is not read).
    """
    found = None
    if enabled and not os.environ.get("TILEDSL_NO_TUNE"):
        if comm is None or comm.rank == 0:
            found = tuning.lookup(program.name, program.tiling.kind, options.gpus, options.gpu_backend, warn)
        if comm is not None:
            found = comm.broadcast(found)
    if found is None:
        return
    tiles, ratio, path = found
    source = f"tuned ({path})"
    merged = {**program.tiling.defaults, **tiles}
    if program.tiling.kind == "hybrid" and not (merged.get("s", 1) - 1) * merged.get("b", 0) < merged.get("B", 1):
        if warn is not None:
            warn(f"ignoring the tuned tiles {tiles} of {path}: they no longer fit {program.name}'s tiling")
        tiles = {}
    if tiles and not options.tiles:
        options.tiles = dict(tiles)
        options.sources.update({name: source for name in tiles})
    if ratio is not None and options.gpu_ratio is None and options.gpus and program.tiling.kind == "uniform":
        options.gpu_ratio = tuple(ratio)
        options.sources["gpu_ratio"] = source


def tiling_sources(program, params: Params, options: Options) -> dict:
    """Where each tile setting (and the GPU ratio of uniform tiles on GPUs) came from:
    ``command line``, ``tuned (<cache file>)`` or ``program default`` (``default`` for a ratio)."""
    values = params.as_dict()
    sources = {name: options.sources.get(name, "command line" if name in options.tiles else "program default")
               for name in TILE_SETTINGS if values.get(name) is not None}
    if options.gpus and program.tiling.kind == "uniform":
        sources["gpu_ratio"] = options.sources.get("gpu_ratio",
                                                   "command line" if options.gpu_ratio is not None else "default")
    return sources


def make_matrices(driver, params: Params, distribution, rank: int) -> dict:
    """Every matrix and workspace of the program, tiled and placed, as seen by ``rank``."""
    program = driver.PROGRAM
    shapes, workspaces = driver.shapes(params)
    geometries = {}
    try:
        for name, (m, n) in shapes.items():
            geometries[name] = (Geometry.hybrid(m, n, params.B, params.b, params.s)
                                if program.tiling.kind == "hybrid" else Geometry.uniform(m, n, params.nb))
        for name, (like, rows) in workspaces.items():
            geometries[name] = Geometry.workspace(geometries[like], rows)
    except ValueError as error:
        raise UsageError(str(error)) from None
    matrices, first_tag = {}, 0
    for name, geometry in geometries.items():
        matrices[name] = TiledMatrix(name, geometry, distribution, rank, first_tag)
        first_tag += geometry.mt * geometry.nt
    return matrices


def _fill_inputs(program, matrices, sources: dict, needed: set, devices) -> None:
    """Each rank makes (or reads) only the tiles it owns and some task of it touches;
    tiles placed on a GPU are copied there (before the timed run)."""
    for decl in program.matrices:
        matrices[decl.name].allocate(sources[decl.name], needed)
    for decl in program.workspaces:
        matrices[decl.name].allocate(lambda r0, r1, c0, c1: np.zeros((r1 - r0, c1 - c0), order="F"), needed)
    for matrix in matrices.values() if devices is not None else ():
        for tile in matrix.local_tiles():
            if tile.device and tile.data is not None:
                tile.data = devices.to_device(tile.data, tile.device)


def _source(decl, index: int, matrix: TiledMatrix, options: Options, arrays: dict, driver):
    """``fill(r0, r1, c0, c1)`` for one matrix: an array given, a file, or a generator."""
    shape = (matrix.m, matrix.n)
    if decl.name in arrays:
        array = np.asarray(arrays[decl.name], dtype=np.float64)
        if array.shape != shape:
            raise UsageError(f"{decl.name} has shape {array.shape}; the program needs {shape}")
        return lambda r0, r1, c0, c1: array[r0:r1, c0:c1]
    path = options.inputs.get(decl.name)  # --input: as given, relative to the current directory
    loaded = path is None and decl.init == "load"
    if loaded:
        path = load_path(decl, driver)
    if path is not None:
        try:
            mapped = npyio.open_input(path, shape)
        except (npyio.InputFileError, OSError) as error:
            where = (f" (load {decl.load!r} of matrix {decl.name}: a relative path is relative to the "
                     f"directory of the .tile file)" if loaded and not os.path.isabs(decl.load) else "")
            raise UsageError(f"{error}{where}") from None
        return lambda r0, r1, c0, c1: npyio.read_block(mapped, r0, r1, c0, c1)
    if decl.init in inputs.SQUARE_KINDS and shape[0] != shape[1]:
        raise UsageError(f"{decl.name} is {shape[0]}×{shape[1]} but `random {decl.init}` needs a square matrix")
    return lambda r0, r1, c0, c1: inputs.make_tile(decl.init, options.seed, index, *shape, r0, r1, c0, c1)


def load_path(decl, driver) -> str:
    """The file of ``matrix NAME = load "PATH"``: PATH when absolute, else PATH relative to
    the ``.tile`` file's directory (as recorded when the driver was compiled, then as the
    program's source path names it from here), else next to the driver; the first of
    these that exists (the first if none does, for the message)."""
    if os.path.isabs(decl.load):
        return decl.load
    bases = [Path(decl.base)] if decl.base else []
    bases.append(Path(driver.PROGRAM.source).parent)
    if getattr(driver, "__file__", None):
        bases.append(Path(driver.__file__).parent)
    candidates = [str(base / decl.load) for base in bases]
    return next((c for c in candidates if os.path.isfile(c)), candidates[0])


def _kernels(program, driver) -> dict:
    from .kernels import CPU_KERNELS

    table = dict(CPU_KERNELS)
    if program.kernel_module:
        module = _load_kernel_module(program, driver)
        for call in program.calls:
            if call.kernel not in CPU_KERNELS:
                body = getattr(module, call.kernel, None)
                if not callable(body):
                    raise UsageError(f"kernel module {program.kernel_module} defines no function {call.kernel}")
                table[call.kernel] = body
    return table


def _load_kernel_module(program, driver):
    bases = [Path(program.source).parent, Path(getattr(driver, "__file__", ".")).parent, Path.cwd()]
    for base in bases:
        path = base / program.kernel_module
        if path.is_file():
            spec = importlib.util.spec_from_file_location(f"tiledsl_kernels_{path.stem}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    raise UsageError(f"kernel module {program.kernel_module} not found next to {program.source}")


def _progress(options: Options, program, tasks: int, engine):
    """A terminal progress bar (rank 0) when asked for and possible, else a context doing nothing."""
    if not (options.progress and engine.rank == 0 and progress.wanted()):
        return contextlib.nullcontext()
    return progress.Progress(program.name, tasks, lambda: engine.scheduler.completed)


class _single_threaded_blas:
    """Every BLAS in the process (numpy's and scipy's OpenBLAS) on one thread for the run."""

    def __enter__(self):
        from threadpoolctl import threadpool_limits

        self.limits = threadpool_limits(1)

    def __exit__(self, *exc):
        self.limits.restore_original_limits()


# ---------------------------------------------------------------- checks and outputs
def _verify(driver, params, engine: Engine, matrices: dict, sources: dict, comm) -> dict:
    """The program's residual check, computed where the tiles live (see :mod:`.verify`)."""
    check = driver.PROGRAM.check
    first_tag = sum(m.mt * m.nt for m in matrices.values())
    verifier = Verifier(engine, matrices, sources[check.args[0]], comm, first_tag)
    factored = matrices[check.args[0]]
    if check.kind == "cholesky":
        return verifier.cholesky(factored)
    if check.kind == "lu":
        return verifier.lu(factored)
    return verifier.qr(factored, driver, params)


def _write_output(matrix: TiledMatrix, path: str, comm) -> None:
    """Every rank writes its own tiles into one ``.npy`` file that rank 0 created."""
    try:
        target = npyio.create_output(path, (matrix.m, matrix.n)) if matrix.rank == 0 else None
    except npyio.OutputFileError as error:
        target, failure = None, error
    else:
        failure = None
    if comm is not None:
        comm.barrier()
        if target is None and failure is None:
            target = np.load(path, mmap_mode="r+")
    if failure is not None:
        raise UsageError(str(failure))
    g = matrix.geometry
    for tile in matrix.local_tiles():
        npyio.write_block(target, g.row_range(tile.i)[0], g.col_range(tile.j)[0], matrix.block(tile))
    target.flush()
    if comm is not None:
        comm.barrier()


# ---------------------------------------------------------------- reporting
def gflops(program, n: int, seconds: float) -> float | None:
    kind = program.check.kind if program.check else None
    return FLOPS[kind](n) / seconds / 1e9 if kind in FLOPS and seconds > 0 else None


SUMMED = ("tasks", "messages_sent", "messages_received", "bytes_sent", "bytes_received",
          "peak_tile_bytes", "device_copies")


def summary_json(program, result: RunResult, ranks: list) -> dict:
    """The summary of DESIGN §8, from every rank's statistics (gathered on rank 0)."""
    n = result.params["n"]
    totals = {key: sum(r[key] for r in ranks) for key in SUMMED}
    return {"program": result.program, "n": n,
            "tiles": {k: result.params[k] for k in TILE_SETTINGS if result.params.get(k) is not None},
            "np": result.ranks, "grid": list(result.grid), "workers": result.workers, "gpus": result.gpus,
            "seconds": result.seconds, "gflops": gflops(program, n, result.seconds),
            "residual": result.residual, "residuals": result.residuals, "passed": result.passed,
            "tasks": totals["tasks"], "ranks": ranks, "totals": totals,
            "gpu_ratio": _ratio_text(result.gpu_ratio), "sources": result.sources, **result.trace}


def _ratio_text(ratio) -> str | None:
    return None if ratio is None else f"{ratio[0]}:{ratio[1]}"


def _sources_text(result: RunResult) -> str:
    """``nb=320 tuned (/path); gpu-ratio 1:1 default``: values grouped by where they came from."""
    groups: dict = {}
    for name, source in result.sources.items():
        value = (f"gpu-ratio {_ratio_text(result.gpu_ratio)}" if name == "gpu_ratio"
                 else f"{name}={result.params.get(name)}")
        groups.setdefault(source, []).append(value)
    return "; ".join(f"{' '.join(values)} {source}" for source, values in groups.items())


def summary_text(program, result: RunResult, ranks: list) -> str:
    p = result.params
    tiles = " ".join(f"{k}={p[k]}" for k in TILE_SETTINGS if p.get(k) is not None)
    rate = gflops(program, p["n"], result.seconds)
    grid = f"{result.ranks} rank(s) on a {result.grid[0]}x{result.grid[1]} grid" if result.ranks > 1 else "1 rank"
    lines = [f"{program.name}: n={p['n']} {tiles}, {grid} × {result.workers} worker(s), "
             f"{sum(r['tasks'] for r in ranks)} tasks",
             f"  time      {result.seconds:.4f} s" + (f"   {rate:.2f} GFLOP/s" if rate else "")]
    if result.sources:
        lines.append(f"  tiling    {_sources_text(result)}")
    if result.trace:
        t = result.trace
        lines.append(f"  bounds    critical path {t['critical_path']:.4f} s, area {t['area_bound']:.4f} s, "
                     f"efficiency {t['efficiency']:.2f}, load imbalance {t['imbalance']}")
    if result.ranks > 1:
        sent = sum(r["messages_sent"] for r in ranks)
        volume = sum(r["bytes_sent"] for r in ranks)
        hidden = result.trace.get("communication_hidden")
        lines.append(f"  messages  {sent} ({volume / 2 ** 20:.1f} MiB) between ranks"
                     + (f", at least {hidden:.0%} of their time hidden by computation" if hidden is not None else ""))
    for name, value in result.residuals.items():
        verdict = "pass" if value < checks.THRESHOLD else "FAIL"
        lines.append(f"  {name:<9} residual {value:.3g}  ({verdict}, threshold {checks.THRESHOLD:g})")
    return "\n".join(lines)


# ---------------------------------------------------------------- command line of a driver
def add_size_arguments(parser: argparse.ArgumentParser) -> None:
    """SIZE = --n N [--nb NB | --B B --b b --s S], and --set for the program's parameters."""
    parser.add_argument("--n", type=int, required=True, help="matrix order")
    for name in TILE_SETTINGS:
        parser.add_argument(f"--{name}", type=int, help=f"tile setting {name} (default: the program's)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="set one of the program's own parameters")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The run options shared by drivers and ``tiledsl run`` (DESIGN §8)."""
    add_size_arguments(parser)
    parser.add_argument("--grid", metavar="PxQ", help="process grid of an MPI run (default: the squarest)")
    parser.add_argument("--gpus", type=int, default=0, metavar="G", help="GPUs per rank (default 0)")
    parser.add_argument("--gpu-backend", default="emulated", choices=["emulated", "cupy"],
                        help="GPU backend: 'emulated' (numpy device memory, explicit copies; CI) or "
                             "'cupy' (real NVIDIA GPUs through CuPy: pip install tiledsl[gpu])")
    parser.add_argument("--gpu-memory", metavar="SIZE", help="memory each GPU may hold, e.g. 20G or 512M "
                                                             "(default: what it has free); a run whose "
                                                             "estimate exceeds it is refused")
    add_tuning_arguments(parser)
    parser.add_argument("--workers", type=int, help="CPU worker threads per rank (default: the cores "
                                                        "a rank has, less one for MPI on several ranks)")
    parser.add_argument("--window", type=int, help="task window size (default: 4096 on one rank; on "
                                                      "several, 32 per worker and at least 64, which bounds "
                                                      "the copies of remote tiles held at once)")
    parser.add_argument("--priorities", choices=priorities.MODES, default="program",
                        help="task priorities: the program's own, derived from the task graph when it "
                             "gives none (program, the default); always derived (auto); none")
    parser.add_argument("--seed", type=int, default=42, help="seed of the generated inputs")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    parser.add_argument("--output", action="append", default=[], metavar="NAME=FILE.npy")
    parser.add_argument("--check", action="store_true", help="verify the result (backward error)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    parser.add_argument("--watchdog", type=float, help="report a run where no task completes for SECONDS")
    parser.add_argument("--trace", metavar="TRACE.json", help="write a Chrome/Perfetto trace of the run "
                                                                 "(all ranks) and report its bounds")
    parser.add_argument("--check-finite", action="store_true",
                        help="stop at the first task that writes a NaN or an infinity")


def add_tuning_arguments(parser: argparse.ArgumentParser) -> None:
    """--gpu-ratio and --no-tune (run and explain)."""
    parser.add_argument("--gpu-ratio", metavar="H:G",
                        help="uniform tiles on GPUs: H block columns to the host for every G to each GPU, "
                             "in each cycle of a rank's columns (default: tuned, else 1:1)")
    parser.add_argument("--no-tune", action="store_true",
                        help="ignore this machine's tuned tile sizes and ratio (tiledsl tune)")


def size_options(args: argparse.Namespace) -> Options:
    """Options holding only the size, tile settings and parameters of parsed arguments."""
    tiles = {k: getattr(args, k) for k in TILE_SETTINGS if getattr(args, k) is not None}
    sets = {k: _int(v, "--set") for k, v in _pairs(args.set, "--set").items()}
    options = Options(n=args.n, tiles=tiles, sets=sets)
    if getattr(args, "gpu_ratio", None) is not None:
        try:
            options.gpu_ratio = parse_ratio(args.gpu_ratio)
        except ValueError as error:
            raise UsageError(f"--gpu-ratio: {error}") from None
        if not getattr(args, "gpus", 0):
            raise UsageError("--gpu-ratio needs --gpus G (at least 1 GPU per rank)")
    return options


def options_from(args: argparse.Namespace, matrix_names, workspace_names=()) -> Options:
    """Options from parsed arguments; a :class:`UsageError` for bad NAME=VALUE pairs.

    ``--output`` may name a matrix or a workspace, ``--input`` a matrix only
    (workspaces start as zeros)."""
    options = size_options(args)
    files = {flag: _pairs(getattr(args, flag), f"--{flag}") for flag in ("input", "output")}
    check_file_names(matrix_names, workspace_names, files["input"], files["output"])
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {args.workers}")
    if args.window is not None and args.window < 1:
        raise UsageError(f"--window must be at least 1, got {args.window}")
    options.workers, options.window, options.seed = args.workers, args.window, args.seed
    options.grid, options.gpus, options.gpu_backend = args.grid, args.gpus, args.gpu_backend
    options.inputs, options.outputs = files["input"], files["output"]
    options.check, options.watchdog, options.check_finite = args.check, args.watchdog, args.check_finite
    options.trace = args.trace
    options.gpu_memory = None if args.gpu_memory is None else _size(args.gpu_memory, "--gpu-memory")
    options.priorities = args.priorities
    options.progress = not args.json
    return options


def check_file_names(matrix_names, workspace_names, inputs, outputs) -> None:
    """A :class:`UsageError` for an ``--input`` that is not a matrix or an ``--output`` that
    is neither a matrix nor a workspace."""
    matrix_names, workspace_names = list(matrix_names), list(workspace_names)
    for name in inputs:
        if name in workspace_names:
            raise UsageError(f"--input {name}=...: {name} is a workspace, which starts as zeros; "
                             f"--input is for matrices (the program's: {', '.join(matrix_names) or 'none'})")
        if name not in matrix_names:
            raise UsageError(f"--input {name}=...: no matrix named {name} "
                             f"(the program has {', '.join(matrix_names) or 'none'})")
    everything = matrix_names + workspace_names
    for name in outputs:
        if name not in everything:
            raise UsageError(f"--output {name}=...: no matrix named {name} "
                             f"(the program has {', '.join(everything) or 'none'})")


def _pairs(items, flag: str) -> dict:
    pairs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise UsageError(f"{flag} expects NAME=VALUE, got {item!r}")
        pairs[name] = value
    return pairs


def _size(text: str, flag: str) -> int:
    """Bytes from ``text``: an integer with an optional K, M, G or T suffix (powers of 1024)."""
    scale = {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}.get(text[-1:].upper(), 1)
    number = text[:-1] if scale > 1 else text
    try:
        size = float(number) * scale
    except ValueError:
        raise UsageError(f"{flag}: {text!r} is not a size (e.g. 20G, 512M, 1000000)") from None
    if not size > 0 or size == float("inf"):
        raise UsageError(f"{flag} must be positive, got {text!r}")
    return int(size)


def _int(text: str, flag: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{flag}: {text!r} is not an integer") from None


def run_and_report(driver, args: argparse.Namespace, out=sys.stdout, err=sys.stderr) -> int:
    """Run with parsed ``args`` on this process (any rank), print the summary; the exit status.

    A failure on one rank of an MPI job is reported by that rank, which then aborts
    the whole job: no rank is left waiting for a message that will not come.
    """
    program = driver.PROGRAM
    comm = None
    signal.signal(signal.SIGTERM, _stopped_by_signal)
    try:
        options = options_from(args, [d.name for d in program.matrices], [d.name for d in program.workspaces])
        comm = communicator()
        if comm is not None:
            comm.start()
        use_tuned(program, options, not getattr(args, "no_tune", False), comm,
                  lambda message: print(f"tiledsl: warning: {message}", file=err, flush=True))
        result = execute(driver, options, comm=comm)
        ranks = comm.gather(result.stats) if comm is not None else [result.stats]
    except UsageError as error:
        if comm is None or comm.rank == 0:
            print(f"tiledsl: error: {error}", file=err)
        return _leave(comm, 2)
    except TaskFailure as failure:
        where = f" ({Path(program.source).name}:{failure.line})" if failure.line else ""
        print(f"tiledsl: error: rank {failure.rank}{where}: {failure}", file=err, flush=True)
        if comm is not None:
            comm.abort(1)
        return 1
    except (KeyboardInterrupt, _Stopped) as stop:
        signum = stop.signum if isinstance(stop, _Stopped) else signal.SIGINT
        print(f"tiledsl: rank {comm.rank if comm else 0}: stopped by {signal.Signals(signum).name}",
              file=err, flush=True)
        if comm is not None:
            comm.abort(128 + signum)
        return 128 + signum
    if comm is None or comm.rank == 0:
        print(json.dumps(summary_json(program, result, ranks)) if args.json
              else summary_text(program, result, ranks), file=out, flush=True)
        if not result.passed:
            print(f"tiledsl: error: check failed: residual {result.residual:.3g} is not below "
                  f"{checks.THRESHOLD:g}", file=err)
    return _leave(comm, 0 if result.passed else 1)


class _Stopped(BaseException):
    """SIGTERM arrived: unwind the run (workers finish their kernel) and leave.

    A BaseException, like KeyboardInterrupt, so that nothing that catches a
    program's errors (the loop nest's ``except Exception``) takes it for one."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _stopped_by_signal(signum, frame):
    raise _Stopped(signum)


def _leave(comm, status: int) -> int:
    if comm is not None:
        comm.stop()
    return status


def main(program, resolve_params, shapes, generate) -> None:
    """Entry point of a generated driver run as a script."""
    driver = sys.modules["__main__"]
    parser = argparse.ArgumentParser(prog=Path(sys.argv[0]).name,
                                     description=f"Run the tile program {program.name} ({program.source}).")
    add_run_arguments(parser)
    sys.exit(run_and_report(driver, parser.parse_args()))
