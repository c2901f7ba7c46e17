"""Running a compiled program on this rank: the run itself, from options to outputs.

:func:`execute` is the one path every entry point takes (a driver run as a
script, ``tiledsl run``, ``tiledsl.load(...).run``): it sizes and places the
matrices (:mod:`.layout`), refuses what cannot fit (:mod:`.resources`) or keeps
GPU tiles that do not fit on the host (:mod:`.outofcore`), creates
or loads the inputs, runs the engine, verifies the result with the DPLASMA-style
backward error (DESIGN §5), writes the outputs (:mod:`.outputs`) and returns a
:class:`~.reporting.RunResult`. :func:`main` is the command line of a generated
driver; :func:`run_and_report` runs parsed options and prints the summary
(:mod:`.reporting`).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import os
import re
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy as np

from ..drivercontract import forget_hiding, hiding
from ..language import SQUARE_KINDS
from . import blas, checks, heteroprio, inputs, npyio, outofcore, priorities, progress, rates, tuning, usercheck, userkernels
from .backends import backend
from .engine import STOP_SECONDS, Engine, TaskFailure
from .errors import InternalFailure, shortage
from .fitting import fit_files, load_note, load_path, settings_hints
from .iterations import check_iterations
from .leftovers import adopt_orphans, end_leftovers
from .layout import make_params, placement, ratio_of, tiling_sources, use_tuned
from .broadcast import broadcast_for
from ..packages import missing_package
from .comm import Unanswered
from .crash import claim_process, run_in_progress
from .options import (EXIT_CODES, Options, SuggestingParser, add_run_arguments, check_file_names,
                      collective_limit, options_from, run_warnings)
from .notes import warnings_of
from .outputs import Staging, check_output_paths, remove_abandoned, write_output, write_trace
from .dataflow import events_of
from .recording import survey
from .reporting import (RunResult, count_nonfinite, failure_json, failure_reasons, has_standard_count, idle_gpus_warning,
                        idle_ranks_warning, idle_warning, json_text, rank_stats, summary_json, summary_text)
from .gridadvice import grids_where_every_rank_computes
from .resources import check_memory, ranks_without_tiles
from .trace import Tracer
from .userkernels import changed_source, kernels, program_files
from .verify import Verifier
from .watchdog import FLOOR_SECONDS, TASK_FACTOR, user_code_limit, watched
from .world import (RankError, UsageError, abort_started_mpi, await_ending, check_working_directory, communicator,
                    core_share, default_workers, expect_json, launcher_rank, launcher_size, record_completion,
                    standard_streams_open, unless_ignored, unraisable_in_one_line)


# ---------------------------------------------------------------- the run
def execute(driver, options: Options, arrays: dict | None = None, comm=None) -> RunResult:
    """Run the driver module ``driver`` on this process: alone, or as a rank of ``comm``'s job."""
    with run_in_progress():  # the user's code calling os._exit fails the run, whatever thread calls it
        return _execute(driver, options, arrays, comm)


def _execute(driver, options: Options, arrays: dict | None, comm) -> RunResult:
    program = driver.PROGRAM
    stopwatch = progress.Stopwatch()
    ranks, rank = (comm.size, comm.rank) if comm is not None else (1, 0)
    userkernels.import_limit = user_code_limit(options.watchdog, userkernels.IMPORT_SECONDS)
    params = make_params(driver, options)
    devices = _devices(options)
    host_costs = heteroprio.costs_from_speeds(_host_speeds(program, options), program.source, options.gpus,
                                              options.gpu_backend, options.spelling.switched_on("host_takes")) \
        if options.host_takes else None
    grid, distribution, matrices = placement(driver, params, options.grid, ranks, rank, options.gpus,
                                             options.gpu_ratio)
    without_tiles = ranks_without_tiles(program, matrices, ranks, lambda: grids_where_every_rank_computes(
        driver, params, ranks, options.gpus, options.gpu_ratio))
    check_file_names([d.name for d in program.matrices], [d.name for d in program.workspaces],
                     options.inputs, options.outputs)
    check_output_paths(options, program_files(program, driver), input_files(program, options, driver))
    # the files are written after the run, where the paths given meant when it started (a kernel
    # may change the working directory)
    pinned = {name: os.path.abspath(path) for name, path in options.outputs.items()}
    options = dataclasses.replace(options, outputs=pinned, trace=options.trace and os.path.abspath(options.trace))
    held: dict = {}  # matrix name -> NaN or infinite values in the input tiles read (this rank)
    sources = {d.name: source(d, i, (matrices[d.name].m, matrices[d.name].n), options, arrays or {}, driver, held)
               for i, d in enumerate(program.matrices)}
    # refuse what cannot fit even at half the local tiles before walking the loop nest
    sized_by_inputs = bool(given_inputs(program, options, arrays))
    check_memory(program, matrices, set(t for m in matrices.values() for t in m.local_tiles()), 0, False, 0.5,
                 sized_by_inputs)
    derive = priorities.derived(program, options.priorities)
    check_iterations(driver, matrices, params, rank)  # a loop nest too long to walk is refused first
    sequence = priorities.TaskSequence() if derive else None
    # on several ranks, walk only this rank's share of an affine loop nest (derived priorities need it all)
    events = events_of(driver, matrices, params) if ranks > 1 and not derive else None
    share = watched(lambda noting: survey(noting, matrices, params, rank, sequence, events is not None),
                    driver, options.watchdog,
                    lambda message, line: TaskFailure(f"{message} (surveying it before the run)", rank, line))
    needed = share.needed
    workers = options.workers or default_workers(ranks, options.gpus)
    window = options.window or (4096 if ranks == 1 and not options.gpus else max(64, 32 * (workers + options.gpus)))
    # GPU tiles that do not fit their GPUs stay on the host, cached on the GPUs (None: they fit)
    out_of_core = outofcore.plan(matrices, needed, share.run_on, window, devices, options.gpu_memory, rank,
                                 options.spelling.setting("gpu_memory"))
    # host copies of tiles in transit: received from other ranks, or of GPU tiles that host tasks read
    in_transit = ranks > 1 or (options.gpus and out_of_core is None)
    # tiles in transit for at most the tasks the window holds, and never more than this rank's tasks
    check_memory(program, matrices, needed, min(window, share.count) if in_transit else 0, options.check,
                 sized_by_inputs=sized_by_inputs)
    _fill_inputs(program, matrices, sources, needed, share.column_panels, devices)
    bad_inputs = _over_ranks(held, [decl.name for decl in program.matrices], comm)
    broadcast = broadcast_for(options.broadcast, ranks)
    engine = _engine(driver, options, comm, devices, workers, window, broadcast, matrices, out_of_core, host_costs,
                     events, share if derive else None)
    share.sequence = None  # the levels are all the run needs of it
    stopwatch.lap("setup")
    with _single_threaded_blas():
        try:
            engine.tracer = Tracer() if options.trace else None
            engine.kernel_clock = rates.KernelClock() if options.time_kernels else None
            with _progress(options, program.name, ranks, share.runs, engine), \
                    _naming_bad_inputs(bad_inputs, options.spelling):
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
        if not result.host_takes:  # asked for, but out of core: the notes say it did nothing
            result.sources.pop("host_takes", None)
        result.kernel_rates = engine.kernel_clock.rates() if engine.kernel_clock is not None else {}
        result.notes = [note for note in (without_tiles, *(devices.notes if devices is not None else ())) if note]
        # the rates use_tuned read (a tuned run's), on the workers the rank's cores run at once
        result.upper_bound = rates.upper_bound(options.host_speeds, _tile_sizes(params),
                                               min(workers, core_share(ranks)), options.gpus, ranks)
        stopwatch.lap("run")
        if options.check and program.check is not None:
            _check(result, driver, params, engine, matrices, sources, comm, options)
            result.check_seconds = stopwatch.lap("check")
    _write_outputs(result, driver, params, matrices, traced, options, comm)
    stopwatch.lap("outputs")
    result.phases, result.total_seconds = stopwatch.laps, stopwatch.total()
    return result


def _engine(driver, options: Options, comm, devices, workers: int, window: int, broadcast: str, matrices: dict,
            out_of_core, host_costs, events, derived_from) -> Engine:
    """The rank's engine over ``matrices``: its kernels, GPUs and broadcasts; out of core or with the
    host taking GPU tasks; guided by the program's ``events`` (a share walk); its priorities derived
    from the survey ``derived_from`` (None: the program's own)."""
    program = driver.PROGRAM
    engine = Engine(program, kernels(program, driver, devices), workers, window, watchdog=options.watchdog, comm=comm,
                    devices=devices, check_finite=options.check_finite, count_flops=not has_standard_count(program),
                    broadcast=broadcast)
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


def _check(result: RunResult, driver, params, engine: Engine, matrices: dict, sources: dict, comm,
           options: Options) -> None:
    """The program's check of the run's result: its residuals (a failed check's message among the
    errors), and a note for a built-in check's residual near its threshold."""
    ranks = comm.size if comm is not None else 1
    try:
        # a user check has the watchdog's limit, else TASK_FACTOR times the run on every rank
        limit = user_code_limit(options.watchdog, max(FLOOR_SECONDS, TASK_FACTOR * result.seconds * ranks))
        result.residuals = _verify(driver, params, engine, matrices, sources, comm, limit,
                                   lambda total: _progress(options, "check", ranks, total, engine))
    except checks.CheckError as error:  # every rank has the same: the check failed, with this message
        result.residuals = {error.name: float("nan")}
        result.errors.append(str(error))
    result.residual = checks.largest(result.residuals.values())
    near = None if driver.PROGRAM.check.user else checks.near_threshold(result.residuals)
    result.notes += [near] if near else []


def _write_outputs(result: RunResult, driver, params, matrices: dict, traced, options: Options, comm) -> None:
    """The trace (of the events ``traced``, None without one) and the output files, each written whole
    or not at all (:class:`Staging`)."""
    with Staging(comm) as staging:
        if traced is not None:
            result.trace = write_trace(driver, params, matrices, traced, result, options, comm, staging)
        for name, path in options.outputs.items():
            write_output(matrices[name], path, comm, staging)
        await_ending()
        result.errors += staging.commit(result.ok)
        result.withheld = staging.withheld


def _host_speeds(program, options: Options) -> dict | None:
    """The kernel rates ``--host-takes`` estimates with: the options' (on several ranks, those rank 0
    read: :func:`~.layout.use_tuned`), else this machine's tune cache's."""
    if options.host_speeds is not None:
        return options.host_speeds
    return (tuning.entry(program.name, options.gpus, options.gpu_backend) or {}).get("speeds")


def _tile_sizes(params) -> tuple:
    """(a core's tile size, a GPU's): nb for uniform tiles; b and B for hybrid ones."""
    values = params.as_dict()
    if values.get("nb") is not None:
        return values["nb"], values["nb"]
    return values.get("b") or 1, values.get("B") or 1


def _devices(options: Options):
    """The GPU backend for ``--gpus``, or None without GPUs."""
    if options.gpus < 0:
        raise UsageError(f"--gpus must be at least 0, got {options.gpus}")
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
def _naming_bad_inputs(bad_inputs: dict, spelling):
    """A kernel's failure on a NaN or an infinity says that the input tiles the run read held
    some, where they did: a potrf that met a NaN computed from an input's Inf blamed only its
    own tile. (The tiles no task reads are counted after a run, not before.)"""
    try:
        yield
    except TaskFailure as failure:
        if bad_inputs and str(failure).startswith("kernel ") and re.search(r"\b(nan|inf|infinite|infinity)\b", str(failure), re.I):
            said = ", ".join(f"{name} ({count})" for name, count in bad_inputs.items())
            command = "tiledsl run " if spelling.api else ""  # run() has no check_finite
            failure.args = (f"{failure}; the input tiles read held NaN or infinite values: {said} ({command}"
                            f"--check-finite names the first)",)
        raise


def _timed(engine: Engine, generate, params, comm) -> float:
    """Wall seconds of the run: from the first rank's start, after a barrier, to the last one's end."""
    if comm is None:
        return engine.run(generate, params)
    comm.barrier()
    started = time.time()
    if engine.tracer is not None:
        engine.tracer.restart(started)
    engine.run(generate, params)
    ended = time.time()
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
                                     decl.name, held, options.check_finite)
    path = options.inputs.get(decl.name)  # --input: as given, relative to the current directory
    loaded = path is None and decl.init == "load"
    if loaded:
        path = load_path(decl, driver)
    if path is not None:
        try:
            source_file = npyio.open_input(path, shape)
        except npyio.InputShapeError as error:
            hints = settings_hints(driver, options, decl.name, error.shape) if len(error.shape) == 2 else []
            hint = f" ({' or '.join(hints[:3])} gives the matrix the file's shape)" if hints else ""
            raise UsageError(f"{error}{hint}") from None
        except (npyio.InputFileError, OSError) as error:
            raise UsageError(f"{error}{load_note(decl, driver) if loaded else ''}") from None
        return inputs.finite_watched(lambda r0, r1, c0, c1: _read_input(source_file, r0, r1, c0, c1),
                                     decl.name, held, options.check_finite)
    if decl.init in SQUARE_KINDS and shape[0] != shape[1]:
        raise UsageError(f"matrix {decl.name} (line {decl.line}) is {shape[0]}×{shape[1]} with these sizes, but "
                         f"`random {decl.init}` needs a square matrix")
    return lambda r0, r1, c0, c1: inputs.make_tile(decl.init, options.seed, index, *shape, r0, r1, c0, c1)


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

    with _BLAS_LOCK:
        _blas_runs.append(controlled(lambda: threadpool_limits(1)) if not _blas_runs else _blas_runs[0])
    try:
        yield
    finally:
        with _BLAS_LOCK:
            limiter = _blas_runs.pop()
            if not _blas_runs:
                controlled(limiter.restore_original_limits)


def _verify(driver, params, engine: Engine, matrices: dict, sources: dict, comm, limit, progress_bar) -> dict:
    """The program's residual check: a built-in one computed where the tiles live (see
    :mod:`.verify`; ``progress_bar(total)`` shows the progress of its tasks), or a function
    of the kernel module called on rank 0 (:mod:`.usercheck`)."""
    check = driver.PROGRAM.check
    if check.user:
        values = {name: value for name, value in params.as_dict().items() if value is not None}
        return usercheck.run(check, driver, matrices, sources, comm, values, limit)
    first_tag = sum(m.mt * m.nt for m in matrices.values())
    return Verifier(engine, matrices, sources, comm, first_tag, progress_bar).check(check, driver, params)


def run_and_report(driver, args: argparse.Namespace, out=None, err=None) -> int:
    """Run with parsed ``args`` on this process (any rank), print the summary; the exit status.

    A failure on one rank of an MPI job is reported by that rank, which then aborts
    the whole job: no rank is left waiting for a message that will not come. A rank
    that returns from here records its completion (:func:`~.world.record_completion`):
    one that ends any other way (``os._exit``) did not finish the run. Threads the run
    started (a kernel's) and left running do not keep the process alive (:func:`_not_waiting_for`).
    The summary and errors go to ``out`` and ``err``, by default streams of the run's own on
    stdout's and stderr's descriptors (:func:`_own_stream`).
    """
    claim_process()
    out = _own_stream(sys.stdout) if out is None else out
    err = _own_stream(sys.stderr) if err is None else err
    before, adoption = set(threading.enumerate()), adopt_orphans()
    status = _run_and_report(driver, args, out, err)
    record_completion(status)
    _ending_processes_left(adoption, err)
    _not_waiting_for(before, status, out, err)
    return status


def _ending_processes_left(adoption, err) -> None:
    """End the processes a kernel started and left running (:mod:`.leftovers`), which would keep the
    run's output open after it ended (``| tee`` waited for them), and name them."""
    left = end_leftovers(adoption)
    if left:
        with contextlib.suppress(OSError, ValueError):
            print(f"tiledsl: warning: rank {launcher_rank()}: {', '.join(left)}, which a kernel started, still ran "
                  f"when the run ended: ended (a kernel must not leave processes behind)", file=err, flush=True)


def _own_stream(stream):
    """A stream of the run's own on a duplicate of ``stream``'s descriptor: a kernel that closes
    ``sys.stdout`` or ``sys.stderr``, or their descriptors (as a library might), does not take the
    run's summary and errors with it. ``stream`` itself where it has no descriptor."""
    try:
        descriptor = os.dup(stream.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return stream
    return open(descriptor, "w", buffering=1, encoding=stream.encoding, errors="backslashreplace")


def _not_waiting_for(before: set, status: int, out, err) -> None:
    """End the process with ``status`` now, saying so, when threads started since ``before`` (by a
    kernel: the runtime's own have ended) still run and would keep it alive after its summary,
    for ever if they never end; return if there are none."""
    left = [thread for thread in threading.enumerate()
            if thread not in before and thread.is_alive() and not thread.daemon]
    if not left:
        return
    names = ", ".join(thread.name for thread in left)
    with contextlib.suppress(OSError, ValueError):
        out.flush()
        print(f"tiledsl: note: rank {launcher_rank()}: {len(left)} thread(s) started during the run still running "
              f"({names}): the process ends without waiting for them", file=err, flush=True)
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()  # what exiting would have done
    os._exit(status)


def _run_and_report(driver, args: argparse.Namespace, out, err) -> int:
    program = driver.PROGRAM
    comm = options = None
    # SciPy loads before the stopping signals' handlers, as it did when the runtime imported it: a
    # handler raising inside the import machinery is "Exception ignored", with a traceback
    blas.load()
    for signum in STOPPING_SIGNALS:
        unless_ignored(signum, stopped_by_signal)
    try:
        check_working_directory()
        options = options_from(args, [d.name for d in program.matrices], [d.name for d in program.workspaces])
        comm = communicator(limit=collective_limit(options.watchdog))
        if comm is not None:
            comm.start()
        expect_json(*(_json_out(program, args, out, comm, options) or (None,)))  # for a thread ending the rank
        if _rank(comm) == 0:  # what a run killed while it wrote these files left beside them
            remove_abandoned([*options.outputs.values(), *([options.trace] if options.trace else [])])
        warn = _warner(comm, err)
        for warning in [*run_warnings(program, args), changed_source(program, driver)]:
            if warning:
                warn(warning)
        use_tuned(driver, options, not getattr(args, "no_tune", False), comm, warn)
        fit_files(driver, options)  # after the tuned values: the inputs are fitted at the run's tiles
        result = execute(driver, options, comm=comm)
        ranks = comm.gather(result.stats) if comm is not None else [result.stats]
        notes = run_notes(driver, options, result, ranks) if comm is None or comm.rank == 0 else []
        for note in notes:
            warn(note)
    except UsageError as error:
        json_out = _json_out(program, args, out, comm, options)
        if comm is not None and comm.size > 1:  # maybe this rank's alone (its GPU tiles): it ends the job
            return _fail(comm, str(error), err, json_out, code=2)
        # every rank meets the same usage error before MPI starts: rank 0 says it
        if _rank(comm) == 0:
            print(f"tiledsl: error: {error}", file=err)
            if json_out is not None:
                print(json_text({**json_out[0], "error": str(error)}), file=out, flush=True)
        return _leave(comm, 2)
    except InternalFailure as failure:
        return _fail(comm, _internal_text(failure.rank, str(failure)), err,
                     _json_out(program, args, out, comm, options), code=3)
    except TaskFailure as failure:
        where = f" ({Path(program.source).name}:{failure.line})" if failure.line else ""
        said = warnings_of(Path(program.source).name, [{"rank": failure.rank, "kernel_notes": failure.kernel_notes}])
        return _fail(comm, f"rank {failure.rank}{where}: {failure}", err,
                     _json_out(program, args, out, comm, options), warnings=said)
    except (RankError, Unanswered) as error:
        message = str(error) if isinstance(error, Unanswered) else f"rank {_rank(comm)}: {error}"
        return _fail(comm, message, err, _json_out(program, args, out, comm, options))
    except SystemExit as exit_:
        return _fail(comm, f"rank {_rank(comm)}: the program called sys.exit({exit_.code!r}) during the run", err,
                     _json_out(program, args, out, comm, options))
    except (KeyboardInterrupt, Stopped) as stop:
        return _stopped_run(stop, program, args, out, err, comm, options)
    except Exception as error:  # a bug in tiledsl: said as the command line says it, and every rank ends now
        if shortage(error):  # past the estimate checked before the run (or memory others took since), a thread
            return _fail(comm, f"rank {_rank(comm)}: {shortage(error)}", err,
                         _json_out(program, args, out, comm, options))
        stop = _interruption(error)
        if stop is not None:  # a signal raised inside a library's import, which wrapped it (__set_name__)
            return _stopped_run(stop, program, args, out, err, comm, options)
        if missing_package(error) is not None:  # or a package this rank's environment lacks (mpi4py)
            if comm is None and _rank(comm) != 0:  # before MPI: every rank lacks it alike, and rank 0 says it
                record_completion(2)
                return 2
            return _fail(comm, f"rank {_rank(comm)}: {missing_package(error)}", err,
                         _json_out(program, args, out, comm, options), code=2)
        if os.environ.get("TILEDSL_DEBUG"):
            traceback.print_exc(file=err)
        return _fail(comm, _internal_text(_rank(comm), f"internal error: {type(error).__name__}: {error}"), err,
                     _json_out(program, args, out, comm, options), code=3)
    await_ending()
    if comm is None or comm.rank == 0:
        try:
            print(json_text(summary_json(program, result, ranks, notes)) if args.json
                  else summary_text(program, result, ranks), file=out, flush=True)
        except BrokenPipeError:  # the reader left (`| head -1`): a normal end
            return _leave(comm, stdout_closed())
        except OSError as error:  # a full disk or a device that takes nothing (`> /dev/full`)
            print(f"tiledsl: error: the summary could not be written to stdout: {error.strerror or error}",
                  file=err, flush=True)
            stdout_closed()  # what Python would flush at exit goes nowhere, rather than failing again
            return _leave(comm, 1)
        for problem in failure_reasons(result):
            print(f"tiledsl: error: {problem}", file=err, flush=True)
        if result.withheld:
            files = ", ".join(map(os.path.relpath, result.withheld))
            print(f"tiledsl: note: the run failed, so {files} {'was' if len(result.withheld) == 1 else 'were'} "
                  f"not written (a file already there is left as it was)", file=err, flush=True)
    return _leave(comm, 0 if result.ok else 1)


STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # Ctrl-C (SIGINT) is Python's KeyboardInterrupt


def _stopped_run(stop, program, args, out, err, comm, options) -> int:
    """A run stopped by a signal (Ctrl-C's KeyboardInterrupt, or :class:`Stopped`): said on stderr,
    and with --json as the failure object; the status 128 + N."""
    signum = stop.signum if isinstance(stop, Stopped) else signal.SIGINT
    left = "".join(f"\n{note}" for note in getattr(stop, "__notes__", ()))  # the kernels left running
    err.write(f"tiledsl: rank {_rank(comm)}: stopped by {signal.Signals(signum).name}{left}\n")  # one write
    err.flush()
    json_out = _json_out(program, args, out, comm, options)
    if json_out is not None and _rank(comm) == 0:  # the run never reached its summary: --json says so
        print(json_text({**json_out[0], "error": f"stopped by {signal.Signals(signum).name}"}), file=out,
              flush=True)
    if comm is not None and comm.size > 1:  # the other ranks may still wait for their kernels
        comm.wait_for_stopped_ranks(STOP_SECONDS + 0.5)
    _abort(comm, 128 + signum)
    return 128 + signum


def _interruption(error: BaseException) -> BaseException | None:
    """The KeyboardInterrupt or :class:`Stopped` behind ``error``, if a library wrapped one (Python
    3.11 wraps what a class's ``__set_name__`` raises in a RuntimeError: Ctrl-C while threadpoolctl
    loads became an internal error)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, (KeyboardInterrupt, Stopped)):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _internal_text(rank: int, message: str) -> str:
    """A bug of tiledsl on ``rank``, said as the command line says one (``message``: 'internal error...')."""
    return f"rank {rank}: {message}\n  (set TILEDSL_DEBUG=1 for the traceback, and please report it)"


def _warner(comm, err):
    """``warn(message)``: a warning printed once, by rank 0."""
    def warn(message):
        if comm is None or comm.rank == 0:
            print(f"tiledsl: warning: {message}", file=err, flush=True)
    return warn


def _rank(comm) -> int:
    return comm.rank if comm is not None else launcher_rank()


def _json_out(program, args, out, comm=None, options=None):
    """``(what the failure's JSON says besides the error, out)`` where ``--json`` asks for the outcome
    on stdout, else None (``options``: the run's, whose n the input files may have given)."""
    if not getattr(args, "json", False):
        return None
    n = options.n if options is not None and options.n is not None else getattr(args, "n", None)
    size = launcher_size()  # before MPI starts (a usage error): the ranks the launcher started
    return failure_json(program.name, n, comm.size if comm is not None else size[1] if size else 1), out


def _fail(comm, message: str, err, json_out=None, code: int = 1, warnings=()) -> int:
    """Report a failure of this rank and abort the job (every rank ends, exit status ``code``); with
    ``--json`` (``json_out``), also as a JSON object on stdout, for a script reading it. On several
    ranks only the first rank to fail reports (:meth:`~.comm.Communicator.first_to_fail`): ranks
    often fail together (a bad sub-range every rank's loop nest meets), and one error a job is
    what the user reads; the others wait for its abort to end them, and report only without it.
    ``warnings``: what the rank's kernels said before, said first (its cause, maybe)."""
    if comm is not None and comm.size > 1 and not comm.first_to_fail():
        time.sleep(SECONDARY_SECONDS)
    record_completion(code)  # first: killed once its error is out (another rank's abort), it still reported
    try:
        # one write: the ranks share the terminal, and a message of several lines (a watchdog's)
        # written in two parts let another rank's line in before its last newline
        err.write("".join(f"tiledsl: warning: {warning}\n" for warning in warnings) + f"tiledsl: error: {message}\n")
        err.flush()
        if json_out is not None:
            known, out = json_out
            print(json_text({**known, "error": message}), file=out, flush=True)
    except (OSError, ValueError):  # stderr or stdout closed (by a kernel): the job must end all the same
        pass
    _abort(comm, code)
    return code


def _abort(comm, code: int) -> None:
    """End every rank of the job, this one with ``code`` (nothing to do alone); the record of
    its status tells ``tiledsl run --np`` that this rank ended the job and said why."""
    record_completion(code)
    if comm is not None:
        comm.abort(code)
    else:
        abort_started_mpi(code)


#: seconds a rank that failed after another one waits for that rank's abort before it reports too
SECONDARY_SECONDS = 10.0


class Stopped(BaseException):
    """SIGTERM or SIGHUP arrived: unwind the run (workers finish their kernel) and leave.

    A BaseException, like KeyboardInterrupt, so that nothing that catches a
    program's errors (the loop nest's ``except Exception``) takes it for one."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def stopped_by_signal(signum, frame):
    for again in STOPPING_SIGNALS:  # the rank is stopping: a repeated signal adds nothing
        signal.signal(again, signal.SIG_IGN)
    raise Stopped(signum)


def _stopped_as_any_process() -> None:
    """A process a kernel forks (a multiprocessing pool's worker) is not the rank: SIGTERM ends it
    as it ends any process, not by raising the rank's :class:`Stopped` (which printed a traceback
    in each worker that ``Pool.terminate`` ended, and could leave the pool waiting)."""
    for signum in STOPPING_SIGNALS:
        if signal.getsignal(signum) is stopped_by_signal:
            signal.signal(signum, signal.SIG_DFL)


os.register_at_fork(after_in_child=_stopped_as_any_process)


def stdout_closed() -> int:
    """Stdout's reader has gone: what is still to be written (the flush at exit too) goes
    to /dev/null, quietly; the status of a process ended by SIGPIPE, as shells show it."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 128 + signal.SIGPIPE


def _leave(comm, status: int) -> int:
    if comm is not None:
        comm.stop()
    return status


def main(program, *_older_driver_arguments) -> None:
    """Entry point of a generated driver run as a script (the driver's module is ``__main__``)."""
    # Drivers of format 2 and before pass resolve_params, shapes and generate too; the run finds
    # them on the driver's module, so they are taken and not used: such drivers still run.
    # a file beside the script in place of a module the run imports later (json.py, mpi4py.py), which
    # would fail only when used, in the middle of the run, or one imported already and not yet used
    hidden = hiding(sys.path[0], list(sys.modules))
    said = None if hidden is None else f"{sys.argv[0]}: error: {hidden}"
    if said is None:
        try:
            blas.load()  # SciPy: part of the loading, which a rank of `tiledsl run --np` ends quietly on Ctrl-C
        except Exception as error:
            said = _loading_failure(error)
            if said is None:
                raise
    if said is not None:  # every rank meets it alike: the launcher's rank 0 says so
        forget_hiding(sys.path[0])
        if launcher_rank() == 0:
            print(said, file=sys.stderr)
            given = sys.argv[1:sys.argv.index("--") if "--" in sys.argv else None]
            if "--json" in given:  # the options are not read yet: the failure object knows the program only
                size = launcher_size()
                print(json_text({**failure_json(program.name, None, size[1] if size else 1),
                                 "error": said.split(": error: ", 1)[1]}), flush=True)
        record_completion(2)  # said (by rank 0): not a rank that ended without a word
        sys.exit(2)
    unless_ignored(signal.SIGINT, signal.default_int_handler)  # a rank's quiet exit while loading ends (runtime/__init__)
    standard_streams_open()
    unraisable_in_one_line()
    driver = sys.modules["__main__"]
    size = launcher_size()
    parser = SuggestingParser(prog=Path(sys.argv[0]).name, epilog=EXIT_CODES, program=program.name,
                              ranks=size[1] if size else 1,
                              description=f"Run the tile program {program.name} ({program.source}).")
    add_run_arguments(parser, program.tiling.kind)
    sys.exit(run_and_report(driver, _parsed_once(parser)))


def run_notes(driver, options: Options, result: RunResult, ranks: list) -> list[str]:
    """What a completed run warns of, from every rank's statistics (on rank 0): the run's own
    notes, the kernels', and ranks, workers or GPUs left with nothing to do."""
    program = driver.PROGRAM
    notes = (*result.notes, *warnings_of(Path(program.source).name, ranks), idle_warning(program, result.params, ranks),
             idle_ranks_warning(ranks, result.grid, lambda: grids_where_every_rank_computes(
                 driver, make_params(driver, options), len(ranks), result.gpus, result.gpu_ratio)),
             idle_gpus_warning(result, ranks, options.spelling))
    return [note for note in notes if note]


def _loading_failure(error: Exception) -> str | None:
    """The message of a failure to load SciPy that is the user's to mend, a package not installed;
    None for any other. (A file beside the script that SciPy would import in a module's place,
    copy.py, is said before: :func:`main`.)"""
    missing = missing_package(error) if isinstance(error, ModuleNotFoundError) else None
    return None if missing is None else f"tiledsl: error: {missing}"


def _parsed_once(parser) -> argparse.Namespace:
    """The driver's options; ``--help`` and a bad option are printed by the launcher's rank 0
    only (every rank parses the same command line, and would say the same)."""
    if launcher_rank() == 0:
        try:
            return parser.parse_args()
        except BrokenPipeError:  # --help to a reader that left (| head)
            sys.exit(stdout_closed())
    with open(os.devnull, "w") as nowhere, contextlib.redirect_stdout(nowhere), contextlib.redirect_stderr(nowhere):
        return parser.parse_args()

