"""Running a compiled program on this rank: the run itself, from options to outputs.

:func:`execute` is the one path every entry point takes (a driver run as a
script, ``tiledsl run``, ``tiledsl.load(...).run``): it sizes and places the
matrices (:mod:`.layout`), refuses what cannot fit (:mod:`.resources`) or keeps
GPU tiles that do not fit on the host (:mod:`.outofcore`), creates
or loads the inputs, runs the engine, verifies the result with the DPLASMA-style
backward error (DESIGN §5), writes the outputs (:mod:`.outputs`) and returns a
:class:`~.reporting.RunResult`. A driver's command line is :mod:`.entry`'s.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import threading
from pathlib import Path

import numpy as np

from ..language import SQUARE_KINDS
from . import (blas, checks, heteroprio, inputs, npyio, outofcore, priorities, progress, rates, tuning, usercheck,
               userkernels)
from .backends import backend
from .engine import Engine, TaskFailure
from .errors import KernelFailure
from .fitting import load_note, load_path, misfit_hint, missing_load, refuse_empty
from .iterations import check_iterations
from .kernels import CPU_KERNELS
from .layout import make_params, placement, ratio_of, tiling_sources
from .broadcast import broadcast_for
from .crash import run_in_progress
from .options import DEFAULT_SEED, Options, check_file_names, check_gpus
from .notes import warnings_of
from .outputs import Staging, check_output_paths, write_output, write_trace
from .dataflow import events_of, whole_walk_reason
from .recording import survey
from .reporting import (RunResult, count_nonfinite, has_standard_count, idle_gpus_warning, idle_ranks_warning,
                        idle_warning, no_gpu_task_warning, rank_columns, rank_stats)
from .gridadvice import idle_rank_advice
from .resources import check_memory, ranks_without_tiles, shortage_remedies
from .trace import Tracer
from .userkernels import kernels, program_files
from .verify import Verifier
from .watchdog import FLOOR_SECONDS, TASK_FACTOR, user_code_limit, watched
from .world import (HeldInterrupts, RankError, UsageError, await_ending, core_share, default_workers,
                    release_after_blas, share_malloc_arenas)


# ---------------------------------------------------------------- the run
def execute(driver, options: Options, arrays: dict | None = None, comm=None, when_decided=None,
            warn=None) -> RunResult:
    """Run the driver module ``driver`` on this process: alone, or as a rank of ``comm``'s job.
    ``when_decided()`` is called as the ranks come to agree on the run's outcome, before its files are
    renamed into place (or withheld): from there a stop would stop nothing (:meth:`.Staging.commit`).
    ``warn(text)`` says, on rank 0, what is to be said before the run (a loop nest that will take hours)."""
    with run_in_progress():  # the user's code calling os._exit fails the run, whatever thread calls it
        return _execute(driver, options, arrays, comm, when_decided, warn)


def _execute(driver, options: Options, arrays: dict | None, comm, when_decided, warn) -> RunResult:
    program = driver.PROGRAM
    stopwatch = progress.Stopwatch()
    ranks, rank = (comm.size, comm.rank) if comm is not None else (1, 0)
    userkernels.import_limit = user_code_limit(options.watchdog, userkernels.IMPORT_SECONDS,
                                               _watchdog_named(options))
    params = make_params(driver, options)
    devices = _devices(options)
    host_costs = heteroprio.costs_from_speeds(_host_speeds(program, options), program.source, options.gpus,
                                              options.gpu_backend, options.spelling.switched_on("host_takes")) \
        if options.host_takes else None
    grid, distribution, matrices = placement(driver, params, options.grid, ranks, rank, options.gpus,
                                             options.gpu_ratio)
    without_tiles = ranks_without_tiles(program, matrices, ranks, lambda: idle_rank_advice(
        driver, options, params, ranks, options.gpus, options.gpu_ratio))
    check_file_names([d.name for d in program.matrices], [d.name for d in program.workspaces],
                     options.inputs, options.outputs, program.params)
    check_output_paths(options, program_files(program, driver), input_files(program, options, driver))
    # the files are written after the run, where the paths given meant when it started (a kernel
    # may change the working directory)
    pinned = {name: os.path.abspath(path) for name, path in options.outputs.items()}
    options = dataclasses.replace(options, outputs=pinned, trace=options.trace and os.path.abspath(options.trace))
    held: dict = {}  # matrix name -> NaN or infinite values in the input tiles read (this rank)
    sources = {d.name: source(d, i, (matrices[d.name].m, matrices[d.name].n), options, arrays or {}, driver, held)
               for i, d in enumerate(program.matrices)}
    with stopwatch.excluded():  # SciPy's BLAS (loaded once): in the address space the memory check sees
        blas.load()
    # refuse what cannot fit even at half the local tiles before walking the loop nest
    sized_by_inputs = bool(given_inputs(program, options, arrays))
    check_memory(program, matrices, None, 0, False, 0.5, sized_by_inputs, options.spelling)
    derive = priorities.derived(program, options.priorities)
    long = check_iterations(driver, matrices, params, rank)  # a loop nest too long to walk is refused first
    for said in (long, unused_seed(program, options, arrays), *unused_settings(program, options, params, ranks)):
        if said and warn is not None and rank == 0:
            warn(said)
    sequence = priorities.TaskSequence() if derive else None
    # on several ranks, walk only this rank's share of an affine loop nest (derived priorities on up to
    # EXACT_LEVELS_RANKS ranks need it all; on more, they are the levels over the tasks it walks)
    every_task = priorities.walks_every_task(program, options.priorities, ranks)
    events = events_of(driver, matrices, params) if ranks > 1 and not every_task else None
    share = watched(lambda noting: survey(noting, matrices, params, rank, sequence, events is not None),
                    driver, options.watchdog,
                    lambda message, line: TaskFailure(f"{message} (surveying it before the run)", rank, line))
    needed = share.needed
    workers = options.workers or default_workers(ranks, options.gpus)
    window = options.window or (4096 if ranks == 1 and not options.gpus else max(64, 32 * (workers + options.gpus)))
    with stopwatch.excluded():  # loading the kernel module: the libraries it imports are no part of the run
        bodies = kernels(program, driver, devices)  # (the GPU bodies it adds: what the GPUs' caches are for)
    # GPU tiles that do not fit their GPUs stay on the host, cached on the GPUs (None: they fit)
    out_of_core = outofcore.plan(matrices, share, window, devices, options.gpu_memory, rank,
                                 options.spelling.setting("gpu_memory"))
    # host copies of tiles in transit: received from other ranks, or of GPU tiles that host tasks read
    in_transit = ranks > 1 or (options.gpus and out_of_core is None)
    # the watchdog's monitor, a check's deadline, the GPUs' managers and copy thread
    others = 1 + bool(options.check and program.check) + options.gpus + bool(options.gpus)
    # tiles in transit for at most the tasks the window holds, and never more than this rank's tasks
    share_malloc_arenas()  # before the run's threads: what they reserve is then what the estimate counts
    check_memory(program, matrices, needed, min(window, share.count) if in_transit else 0, options.check,
                 sized_by_inputs=sized_by_inputs, spelling=options.spelling, threads=(workers, others))
    _fill_inputs(program, matrices, sources, needed, share.column_panels, devices)
    bad_inputs = _over_ranks(held, [decl.name for decl in program.matrices], comm)
    broadcast = broadcast_for(options.broadcast, ranks)
    engine = _engine(driver, options, comm, devices, bodies, workers, window, broadcast, matrices, out_of_core,
                     host_costs, events, share if derive else None)
    engine.memory_remedies = shortage_remedies(bool(in_transit), options.check and program.check is not None,
                                               sized_by_inputs, options.spelling, workers)
    share.sequence = None  # the levels are all the run needs of it
    stopwatch.lap("setup")
    with _single_threaded_blas():
        try:
            engine.tracer = Tracer() if options.trace else None
            engine.kernel_clock = rates.KernelClock() if options.time_kernels else None
            with _progress(options, program.name, ranks, share.runs, engine), \
                    _naming_bad_inputs(bad_inputs, options.spelling, options.check_finite):
                seconds = _timed(engine, driver.generate, params, comm)
            await_ending()  # a thread a kernel started ends the rank (os._exit): not a result
            traced, engine.tracer = (engine.tracer.events if engine.tracer else None), None
            stats = rank_stats(engine, matrices, comm)
            _bring_home(matrices, devices)
            nonfinite, from_inputs = count_nonfinite(matrices, comm, held, given_inputs(program, options, arrays))
        finally:
            if engine.exchange is not None:
                engine.exchange.stop()
        result = RunResult(program.name, params.as_dict(), seconds, workers, sum(engine.stats.per_worker),
                           matrices=matrices, stats=stats, grid=grid, ranks=ranks, gpus=options.gpus,
                           gpu_backend=options.gpu_backend if options.gpus else None,
                           gpu_streams=options.gpu_streams if options.gpus else None, nonfinite=nonfinite,
                           input_nonfinite=from_inputs, nonfinite_allowed=options.allow_nonfinite,
                           broadcast=broadcast, host_takes=engine.host_costs is not None,
                           host_takes_out_of_core=host_costs is not None and out_of_core is not None)
        result.sources, result.gpu_ratio = tiling_sources(program, params, options), ratio_of(distribution)
        # (the reason evaluates the events again: asked only where they were not found)
        reason = None if events is not None else whole_walk_reason(driver, matrices, params, ranks, options.priorities)
        result.walk = {"rank_walks": "share" if events is not None else "whole", "whole_because": reason}
        result.seed = (DEFAULT_SEED if options.seed is None else options.seed) \
            if makes_random(program, options, arrays) else None
        result.window = window
        result.priorities = priorities.in_force(program, options.priorities, events is not None)
        if not result.host_takes:  # asked for, but out of core: the notes say it did nothing
            result.sources.pop("host_takes", None)
        result.kernel_rates = engine.kernel_clock.rates() if engine.kernel_clock is not None else {}
        result.notes = [note for note in (without_tiles, *(devices.notes if devices is not None else ())) if note]
        if devices is not None:
            result.host_only_kernels = sorted(set(program.kernels) - set(devices.kernels))
            result.gpu_kernels = sorted(set(program.kernels) & set(devices.kernels))
        # the rates use_tuned read (a tuned run's), on the workers the rank's cores run at once
        cores = core_share(ranks)
        largest = _largest_tile(params, matrices)
        # gemm's rate bounds the prelude's kernels, not the user's (a kernel of its own may be slower or faster)
        bound_rates = options.bound_rates if set(program.kernels) <= set(CPU_KERNELS) else None
        result.upper_bound = rates.upper_bound(bound_rates, largest, min(workers, cores), options.gpus, ranks,
                                               cores if options.gpu_backend == "emulated" else None)
        timed = rates.largest_timed(bound_rates, largest, options.gpus) if not result.upper_bound else None
        result.untimed_tiles = (timed, largest) if timed else None
        stopwatch.lap("run")
        if options.check and program.check is not None:
            _check(result, driver, params, engine, matrices, sources, comm, options)
            result.check_seconds = stopwatch.lap("check")
    _write_outputs(result, driver, params, matrices, traced, options, comm, when_decided)
    stopwatch.lap("outputs")
    result.phases, result.total_seconds = stopwatch.laps, stopwatch.total()
    return result


def _engine(driver, options: Options, comm, devices, bodies: dict, workers: int, window: int, broadcast: str,
            matrices: dict, out_of_core, host_costs, events, derived_from) -> Engine:
    """The rank's engine over ``matrices``: its kernels' ``bodies``, GPUs and broadcasts; out of core or with the
    host taking GPU tasks; guided by the program's ``events`` (a share walk); its priorities derived
    from the survey ``derived_from`` (None: the program's own)."""
    program = driver.PROGRAM
    engine = Engine(program, bodies, workers, window, watchdog=options.watchdog, comm=comm,
                    devices=devices, check_finite=options.check_finite, count_flops=not has_standard_count(program),
                    broadcast=broadcast, spelling=options.spelling)
    if out_of_core is not None:
        engine.exchange.go_out_of_core(out_of_core)
    else:  # in memory, CPU workers may take GPU tasks (out of core, the GPUs' caches place the tiles)
        engine.host_costs = host_costs
    engine.attach(matrices)
    if events is not None:
        engine.guide(events)
    engine.priority_of = (priorities.equal if options.priorities == "none" else
                          priorities.in_turn(priorities.bottom_levels(derived_from.sequence))
                          if derived_from is not None else None)
    return engine


def _watchdog_named(options: Options) -> str:
    """The watchdog's setting as this run was given it, for a deadline's message."""
    return "watchdog=" if options.spelling.api else "--watchdog"


def _check(result: RunResult, driver, params, engine: Engine, matrices: dict, sources: dict, comm,
           options: Options) -> None:
    """The program's check of the run's result: its residuals (a failed check's message among the
    errors), and a note for a built-in check's residual near its threshold."""
    ranks = comm.size if comm is not None else 1
    try:
        # a user check has the watchdog's limit, else TASK_FACTOR times the run on every rank
        limit = user_code_limit(options.watchdog, max(FLOOR_SECONDS, TASK_FACTOR * result.seconds * ranks),
                                _watchdog_named(options))
        result.residuals, notes = _verify(driver, params, engine, matrices, sources, comm, limit,
                                          lambda total: _progress(options, "check", ranks, total, engine))
        result.notes += notes
    except checks.CheckError as error:  # every rank has the same: the check failed, with this message
        result.residuals = dict.fromkeys(error.names, float("nan"))
        result.errors.append(str(error))
    result.residual = checks.largest(result.residuals.values())
    near = None if driver.PROGRAM.check.user else checks.near_threshold(result.residuals)
    result.notes += [near] if near else []


def _write_outputs(result: RunResult, driver, params, matrices: dict, traced, options: Options, comm,
                   when_decided) -> None:
    """The trace (of the events ``traced``, None without one) and the output files, each written whole
    or not at all (:class:`Staging`, which calls ``when_decided`` as it commits them)."""
    with Staging(comm) as staging:
        if traced is not None:
            result.trace = write_trace(driver, params, matrices, traced, result, options, comm, staging)
        for name, path in options.outputs.items():
            write_output(matrices[name], path, comm, staging)
        await_ending()
        result.errors += staging.commit(result.ok, when_decided)
        result.withheld, result.withheld_because = staging.withheld, staging.withheld_because


def _host_speeds(program, options: Options) -> dict | None:
    """The kernel rates ``--host-takes`` estimates with: the options' (on several ranks, those rank 0
    read: :func:`~.layout.use_tuned`), else this machine's tune cache's."""
    if options.host_speeds is not None:
        return options.host_speeds
    return (tuning.entry(tuning.program_key(program), options.gpus, options.gpu_backend) or {}).get("speeds")


def _largest_tile(params, matrices: dict) -> int:
    """The order of the largest tile a task works on: nb for uniform tiles; B for hybrid ones, whose
    slices, b wide, are B long (a core's gemm on them is no faster than on B×B tiles); no more than
    the matrices' sides (n = 64 under nb = 256 is one 64×64 tile)."""
    values = params.as_dict()
    nominal = values.get("nb") or values.get("B") or 1
    return max((max(min(nominal, m.m), min(nominal, m.n)) for m in matrices.values()), default=nominal)


def _devices(options: Options):
    """The GPU backend for ``--gpus``, or None without GPUs."""
    check_gpus(options.gpus, options.spelling.setting("gpus"))
    if not options.gpus:
        return None
    try:
        devices = backend(options.gpu_backend, options.gpus, options.gpu_streams)
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
        matrix.on_host = True  # and so are the tiles made from now on
        for tile in matrix.made_tiles():
            if tile.device and tile.data is not None:
                tile.data = devices.to_host(tile.data)
            tile.device = 0


def _over_ranks(held: dict, names: list, comm) -> dict:
    """The NaN and infinite values of each matrix's input tiles read on every rank (``held``:
    this rank's), where there are some."""
    counts = np.array([held.get(name, 0) for name in names], dtype=np.float64)
    counts = comm.allreduce_sum(counts) if comm is not None else counts
    return {name: int(count) for name, count in zip(names, counts) if count}


@contextlib.contextmanager
def _naming_bad_inputs(bad_inputs: dict, spelling, checking_finite: bool):
    """A kernel's failure on a NaN or an infinity says that the input tiles the run read held
    some, where they did: a potrf that met a NaN computed from an input's Inf blamed only its
    own tile. (The tiles no task reads are counted after a run, not before.) Where they held none,
    an earlier task wrote it, which ``--check-finite`` names (a user's gemm's NaN failed a potrf)."""
    try:
        yield
    except KernelFailure as failure:  # (a value argument the loop nest computed as inf is no task's)
        nonfinite_said = re.search(r"\b(nan|inf|infinite|infinity)\b", str(failure), re.I)
        if bad_inputs and nonfinite_said:
            said = ", ".join(f"{name} ({count} value{'s' * (count > 1)})" for name, count in bad_inputs.items())
            # run()'s caller has the arrays, where numpy finds the values
            finding = f"numpy.argwhere(~numpy.isfinite({next(iter(bad_inputs))})) finds them" if spelling.api \
                else "--check-finite names the first"
            # (the tiles of the whole run: tester y read A (69264) as the failed task's own)
            failure.args = (f"{failure}; the input tiles the run reads held NaN or infinite values: {said} "
                            f"({finding})",)
        elif nonfinite_said and not checking_finite:
            failure.args = (f"{failure} (no input held one: an earlier task wrote it, and "
                            f"{spelling.flag('check_finite')} names the first task that writes one)",)
        raise


def _timed(engine: Engine, generate, params, comm) -> float:
    """Seconds of the run: alone, the engine's; on several ranks, from the first rank's start, after a
    barrier, to the last one's end."""
    if comm is None:
        return engine.run(generate, params)
    engine.run(generate, params, begin=comm.barrier)
    started, ended = engine.wall_span
    # ranks leave a polled barrier milliseconds apart: from the first one's start to the last one's
    # end, on the wall clock (the slowest rank's own time fell short of the trace's span)
    first = -comm.allreduce_max(-started)
    if engine.tracer is not None:  # one clock for all, agreed once the run is over
        engine.tracer.move_origin(first)
    return comm.allreduce_max(ended) - first


def _zeros(r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
    return np.zeros((r1 - r0, c1 - c0), order="F")


def _fill_inputs(program, matrices, sources: dict, needed: set, by_columns: set, devices) -> None:
    """Each rank makes (or reads) only the tiles it owns and some task of it touches, a
    matrix in ``by_columns`` stored by tile columns; tiles placed on a GPU are copied there
    (before the timed run)."""
    fills = {decl.name: sources[decl.name] for decl in program.matrices}
    fills.update((decl.name, _zeros) for decl in program.workspaces)
    for name, fill in fills.items():
        matrices[name].allocate(fill, needed, name in by_columns)
    for matrix in matrices.values() if devices is not None else ():
        for tile in matrix.local_tiles():
            if tile.device and tile.data is not None:
                tile.data = devices.to_device(tile.data, tile.device)


def input_files(program, options: Options, driver) -> list:
    """(matrix name, a file it reads or is declared to load, how the run was told): ``--input`` and
    ``load`` (the program's own data, even where ``--input`` stands in for it this time)."""
    loads = [(d.name, load_path(d, driver), f'load "{d.load}"') for d in program.matrices if d.init == "load"]
    return loads + [(name, path, f"--input {name}={path}") for name, path in options.inputs.items()]


def given_inputs(program, options: Options, arrays: dict | None) -> set:
    """The matrices whose input is given (an array, an ``--input`` file, a ``load``), not generated."""
    return {d.name for d in program.matrices
            if d.name in (arrays or {}) or d.name in options.inputs or d.init == "load"}


def makes_random(program, options: Options, arrays: dict | None) -> bool:
    """Whether the run makes a matrix at random: one of the program's random matrices is not given (an
    input file or array)."""
    given = set(options.inputs) | set(arrays or {})
    return any(decl.init in inputs.RANDOM_KINDS and decl.name not in given for decl in program.matrices)


def unused_seed(program, options: Options, arrays: dict | None) -> str | None:
    """The warning for a seed given to a run that generates no matrix at random: each one is given
    (an input file or array), or the program has none."""
    if options.seed is None or makes_random(program, options, arrays):
        return None
    return (f"{options.spelling.valued('seed', str(options.seed))} does nothing: {program.name} generates no matrix "
            f"at random here (its random matrices are given as inputs, or it has none)")


def unused_settings(program, options: Options, params, ranks: int) -> list[str]:
    """The warnings for settings given that change nothing in this run: a broadcast on one rank
    (no tile is sent), a slice width b where each block is one slice (s = 1)."""
    said = []
    if options.broadcast != "auto" and ranks == 1:
        said.append(f"{options.spelling.valued('broadcast', options.broadcast)} does nothing on one rank: "
                    f"no tile is sent")
    # a tuned b at s = 1 is tune's (it times s = 1 with GPUs), not a setting the user gave for nothing
    given_b = "b" in options.tiles and not options.sources.get("b", "").startswith("tuned")
    if program.tiling.kind == "hybrid" and given_b and params.s == 1:
        said.append(f"{options.spelling.tile_valued('b', params.b)} does nothing with s=1: each block column is one "
                    f"slice, B={params.B} wide")
    return said


def _refusing_nonfinite(options: Options) -> str | None:
    """The setting that refuses non-finite inputs as the run was given it, or None where none does."""
    return options.spelling.flag("check_finite") if options.check_finite else None


def source(decl, index: int, shape: tuple, options: Options, arrays: dict, driver, held: dict):
    """``fill(r0, r1, c0, c1)`` for matrix ``decl`` (the program's ``index``-th) of ``shape``: an
    array given, a file, or a generator; the non-finite values of what is read from an array or
    a file are counted in ``held`` (with --check-finite: refused)."""
    if decl.name in arrays:
        array = np.asarray(arrays[decl.name], dtype=np.float64)
        if array.shape != shape:
            raise UsageError(f"{decl.name} has shape {array.shape}; the program needs {shape}")
        # a copy: a tile covering a whole Fortran-ordered array would otherwise be the array
        # itself, and the check rebuilds the original matrix from it after the run
        return inputs.finite_watched(lambda r0, r1, c0, c1: np.array(array[r0:r1, c0:c1], order="F"),
                                     decl.name, held, _refusing_nonfinite(options))
    path = options.inputs.get(decl.name)  # --input: as given, relative to the current directory
    loaded = path is None and decl.init == "load"
    if loaded:
        missing = missing_load(decl, driver)
        if missing is not None:
            raise UsageError(missing)
        path = load_path(decl, driver)
    if path is not None:
        try:
            source_file = npyio.open_input(path, shape)
        except npyio.InputShapeError as error:
            if len(error.shape) != 2:
                raise UsageError(str(error)) from None
            note = load_note(decl, driver) if loaded else ""
            refuse_empty(path, decl.name, error.shape, note)
            hint = misfit_hint(driver, options, decl.name, error.shape)
            raise UsageError(f"{error}{hint}{note}") from None
        except (npyio.InputFileError, OSError) as error:
            raise UsageError(f"{error}{load_note(decl, driver) if loaded else ''}") from None
        return inputs.finite_watched(lambda r0, r1, c0, c1: _read_input(source_file, r0, r1, c0, c1),
                                     decl.name, held, _refusing_nonfinite(options))
    if decl.init in SQUARE_KINDS and shape[0] != shape[1]:
        raise UsageError(f"matrix {decl.name} ({Path(driver.PROGRAM.source).name}:{decl.line}) is "
                         f"{shape[0]}×{shape[1]} with these sizes, but `random {decl.init}` needs a square matrix")
    seed = DEFAULT_SEED if options.seed is None else options.seed
    return lambda r0, r1, c0, c1: inputs.make_tile(decl.init, seed, index, *shape, r0, r1, c0, c1)


def _read_input(source: npyio.InputFile, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
    try:
        return source.read(r0, r1, c0, c1)
    except npyio.InputFileError as error:  # after the start: this rank's alone, the job must end
        raise RankError(str(error)) from None


def _progress(options: Options, label: str, ranks: int, tasks: int, engine):
    """A terminal progress bar of rank 0's ``tasks`` when asked for and possible, else a context
    doing nothing."""
    if not (options.progress and engine.rank == 0 and progress.wanted()):
        return contextlib.nullcontext()
    return progress.Progress(label if ranks == 1 else f"{label} (rank 0's share)", tasks,
                             lambda: progress.tasks_done(engine))


_BLAS_LOCK = threading.Lock()
_blas_runs: list = []  # the limiter of the runs going on in this process, once per run


@contextlib.contextmanager
def _single_threaded_blas():
    """Every BLAS in the process (numpy's and scipy's OpenBLAS) on one thread while a run goes
    on: the first of overlapping runs (API calls from several threads) sets the limit, the last
    to end restores what was there. OpenBLAS's thread count is the process's, and threadpoolctl
    lets only one "controlling thread" change it: control is taken for each change and given
    up after it, so that whichever run ends last can restore, and a later run from another
    thread can set it again (else its limit would be silently ignored)."""
    from threadpoolctl import OpenBLASController, threadpool_limits

    blas.load()  # threadpoolctl limits the libraries loaded; and a run's clock starts after this

    def controlled(change):
        OpenBLASController.clear_controlling_thread(force=True)
        try:
            return change()
        finally:
            OpenBLASController.clear_controlling_thread(force=True)

    # the libraries' counts change one by one: a Ctrl-C meanwhile waits (it left one library at 1
    # thread for the rest of the process), and comes once their undoing is due
    held, limited = HeldInterrupts(), False
    try:
        with _BLAS_LOCK:
            _blas_runs.append(controlled(lambda: threadpool_limits(1)) if not _blas_runs else _blas_runs[0])
            limited = True
        release_after_blas(held)
        yield
    finally:
        held.release(act=False)
        if limited:
            undoing = HeldInterrupts()
            try:
                with _BLAS_LOCK:
                    limiter = _blas_runs.pop()
                    if not _blas_runs:
                        controlled(limiter.restore_original_limits)
            finally:
                undoing.release()


def _verify(driver, params, engine: Engine, matrices: dict, sources: dict, comm, limit, progress_bar) -> tuple:
    """The program's residual check and its notes: a built-in one computed where the tiles live (see
    :mod:`.verify`; ``progress_bar(total)`` shows the progress of its tasks), or a function
    of the kernel module called on rank 0 (:mod:`.usercheck`)."""
    check = driver.PROGRAM.check
    if check.user:
        values = {name: value for name, value in params.as_dict().items() if value is not None}
        return usercheck.run(check, driver, matrices, sources, comm, values, limit), []
    first_tag = sum(m.mt * m.nt for m in matrices.values())
    verifier = Verifier(engine, matrices, sources, comm, first_tag, progress_bar)
    return verifier.check(check, driver, params), verifier.notes


def run_notes(driver, options: Options, result: RunResult, ranks: list) -> list[str]:
    """What a completed run warns of, from every rank's statistics (on rank 0): the run's own
    notes, the kernels', and ranks, workers or GPUs left with nothing to do."""
    program = driver.PROGRAM
    # GPUs that ran nothing at all: advice on dealing them tile columns is moot when no task could run on one
    no_gpu_task = no_gpu_task_warning(result, ranks, options.spelling)
    notes = (*result.notes, *warnings_of(Path(program.source).name, ranks), idle_warning(program, result.params, ranks),
             idle_ranks_warning(ranks, result.grid, lambda: idle_rank_advice(
                 driver, options, make_params(driver, options), len(ranks), result.gpus, result.gpu_ratio)),
             no_gpu_task or idle_gpus_warning(result, ranks, options.spelling,
                                              rank_columns(result.matrices, result.grid)))
    return [note for note in notes if note]
