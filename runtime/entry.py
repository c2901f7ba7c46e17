"""A rank's command line: a generated driver's :func:`main`, and :func:`run_and_report`, which
``tiledsl run`` calls too.

It reads the options, runs (:func:`.launch.execute`), prints the summary (:mod:`.reporting`) or
the failure, on one rank for the whole job, and ends every rank when one fails; SIGTERM and SIGHUP
stop a run as Ctrl-C does (:class:`Stopped`); a reader of stdout that leaves (``| head``) ends it
as SIGPIPE would.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import io
import os
import signal
import sys
import threading
import time
import traceback
import types
from pathlib import Path

from ..drivercontract import early_failure_json, forget_hiding, hiding, json_asked
from . import blas
from .engine import STOP_SECONDS, TaskFailure, kernels_left_running
from .errors import InternalFailure, SettingFailure, shortage
from .fitting import fit_files
from .leftovers import adopt_orphans, end_leftovers
from .launch import execute, run_notes
from .layout import use_tuned
from ..packages import missing_package
from .comm import Unanswered
from .crash import RunStop, claim_process
from .options import EXIT_CODES, SuggestingParser, add_run_arguments, collective_limit, options_from, run_warnings
from .notes import warnings_of
from .outputs import remove_abandoned
from .sameness import check_same_job
from .reporting import (failure_json, failure_line_out, failure_reasons, json_text, stdout_closed, stdout_unwritable,
                        summary_json, summary_text)
from .userkernels import changed_source
from .world import (STDERR_MARK, STDERR_MARK_VARIABLE, RankError, UsageError, abort_started_mpi, await_ending,
                    check_working_directory, communicator, end_open_line, environment_switch, expect_json,
                    launcher_rank, launcher_size, note_on_ending, record_completion, standard_streams_open,
                    track_stdout_lines, unless_ignored, unraisable_in_one_line)


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
    track_stdout_lines()  # the kernels' output: what the run writes on its own stream begins a line
    made = (out is None, err is None)
    out = _own_stream(sys.stdout) if out is None else out
    err = _own_stream(sys.stderr) if err is None else err
    before, adoption = set(threading.enumerate()), adopt_orphans()
    _adoptions.append(adoption)
    status = _run_and_report(driver, args, out, err)
    record_completion(status)
    _ending_processes_left(adoption, err)
    _not_waiting_for(before, status, out, err)
    for stream, ours in zip((out, err), made):
        if ours and stream not in (sys.stdout, sys.stderr):  # on a duplicate descriptor, which is closed
            with contextlib.suppress(OSError, ValueError):
                stream.close()
    return status


#: the :class:`~.leftovers.Adoption` of each run of this process (:func:`process_status` ends what is left)
_adoptions: list = []


def _ending_processes_left(adoption, err, exiting_normally: bool = True) -> None:
    """End the processes a kernel started and left running (:mod:`.leftovers`), which would keep the
    run's output open after it ended (``| tee`` waited for them), and name them."""
    left = end_leftovers(adoption, exiting_normally)
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
    counts = collections.Counter(thread.name for thread in left)
    names = ", ".join(name if count == 1 else f"{name} ×{count}" for name, count in counts.items())
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
    _stopping.clear()
    for signum in STOPPING_SIGNALS:
        unless_ignored(signum, stopped_by_signal)
    # a rank's (or a driver's) quiet end on Ctrl-C while it loads and reads its options ends here, where a
    # KeyboardInterrupt is caught: before, one came out as a traceback from inside argparse
    unless_ignored(signal.SIGINT, interrupted)
    try:
        check_working_directory()
        options = options_from(args, [d.name for d in program.matrices], [d.name for d in program.workspaces],
                               program.params)
        comm = communicator(limit=collective_limit(options.watchdog))
        if comm is not None:
            comm.on_stop_elsewhere = _stop_as_another_rank
            comm.start()
            if comm.size > 1:  # each rank its own process, which a launcher may give other files
                check_same_job(comm, driver, options)
        expect_json(*(_json_out(program, args, out, comm, options) or (None,)))  # for a thread ending the rank
        note_on_ending(_unwritten_note(options))
        if _rank(comm) == 0:  # what a run killed while it wrote these files left beside them
            remove_abandoned([*options.outputs.values(), *([options.trace] if options.trace else [])])
        said = []  # every warning, for --json's notes too
        warn = _warner(comm, err, said)
        for warning in [*run_warnings(program, args), changed_source(program, driver)]:
            if warning:
                warn(warning)
        use_tuned(driver, options, not getattr(args, "no_tune", False), comm, warn)
        fit_files(driver, options)  # after the tuned values: the inputs are fitted at the run's tiles
        result = execute(driver, options, comm=comm, when_decided=_stops_after_outcome, warn=warn)
        end_open_line()  # on every rank, before rank 0's summary: the launcher passes their output on together
        ranks = comm.gather(result.stats) if comm is not None else [result.stats]
        for note in run_notes(driver, options, result, ranks) if comm is None or comm.rank == 0 else []:
            warn(note)
    except UsageError as error:
        json_out = _json_out(program, args, out, comm, options)
        if comm is not None and comm.size > 1:  # maybe this rank's alone (its GPU tiles): it ends the job
            return _fail(comm, str(error), err, json_out, code=2)
        # every rank meets the same usage error before MPI starts: rank 0 says it
        if _rank(comm) == 0:
            print(f"tiledsl: error: {error}", file=err)
            end_open_line()
            if json_out is not None:
                return _leave(comm, failure_line_out(json_text({**json_out[0], "error": str(error)}), out, err) or 2)
        return _leave(comm, 2)
    except InternalFailure as failure:
        return _fail(comm, _internal_text(failure.rank, str(failure)), err,
                     _json_out(program, args, out, comm, options), code=3)
    except TaskFailure as failure:
        where = f" ({Path(program.source).name}:{failure.line})" if failure.line else ""
        said = warnings_of(Path(program.source).name, [{"rank": failure.rank, "kernel_notes": failure.kernel_notes}])
        return _fail(comm, f"rank {failure.rank}{where}: {failure}", err,
                     _json_out(program, args, out, comm, options), code=2 if isinstance(failure, SettingFailure) else 1,
                     warnings=said, note=_unwritten_note(options))
    except (RankError, Unanswered) as error:
        message = str(error) if isinstance(error, Unanswered) else f"rank {_rank(comm)}: {error}"
        return _fail(comm, message, err, _json_out(program, args, out, comm, options), note=_unwritten_note(options))
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
        if environment_switch("TILEDSL_DEBUG"):
            traceback.print_exc(file=err)
        return _fail(comm, _internal_text(_rank(comm), f"internal error: {type(error).__name__}: {error}"), err,
                     _json_out(program, args, out, comm, options), code=3)
    await_ending()
    if comm is None or comm.rank == 0:
        withheld = _withheld_note(result)
        try:
            print(json_text(summary_json(program, result, ranks, [*said, *filter(None, [withheld])])) if args.json
                  else summary_text(program, result, ranks), file=out, flush=True)
        except BrokenPipeError:  # the reader left (`| head -1`): a normal end
            return _leave(comm, stdout_closed())
        except OSError as error:  # a full disk or a device that takes nothing (`> /dev/full`)
            stdout_unwritable(error, err)
            return _leave(comm, 1)
        said_after = _after_summary(out, err)
        for problem in failure_reasons(result):
            said_after(f"tiledsl: error: {problem}")
        if withheld:
            said_after(f"tiledsl: note: {withheld}")
    return _leave(comm, 0 if result.ok else 1)


def _after_summary(out, err):
    """``say(line)``: a line for stderr that follows the summary. In a job whose stdout ``tiledsl run
    --np`` passes on itself, it goes to stdout behind :data:`.world.STDERR_MARK`, which the launcher
    turns back into stderr: the job's launcher passes a rank's two streams on apart, and the error a
    summary said was "below" came above it."""
    def say(line: str) -> None:
        if os.environ.get(STDERR_MARK_VARIABLE) == "1":
            with contextlib.suppress(OSError):  # a stdout gone: said on stderr
                print(STDERR_MARK + line, file=out, flush=True)
                return
        print(line, file=err, flush=True)
    return say


def _withheld_note(result) -> str | None:
    """The note of the output files a failed run did not write, None where it wrote them all."""
    if not result.withheld:
        return None
    files = ", ".join(map(os.path.relpath, result.withheld))
    because = f"{result.withheld_because}, so " if result.withheld_because else ""
    return (f"{because}{files} {'was' if len(result.withheld) == 1 else 'were'} not written (a file already there "
            f"is left as it was)")


def _unwritten_note(options) -> str | None:
    """The note of the output files a run that failed before its end does not write (as :func:`_withheld_note`
    says those of a run that ended failing); None without any."""
    files = [*filter(None, [options.trace]), *options.outputs.values()] if options is not None else []
    if not files:
        return None
    listed = ", ".join(map(os.path.relpath, files))
    return (f"the run failed, so {listed} {'was' if len(files) == 1 else 'were'} not written (a file already there "
            f"is left as it was)")


STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # Ctrl-C (SIGINT) is Python's KeyboardInterrupt
#: how long a stopped rank waits for the others to say they stopped too: a rank waiting STOP_SECONDS for a
#: kernel says so that much later, and one that came to its stop later still on a loaded machine (half a
#: second was too little in CI, on 2 cores) must not be aborted before it names that kernel
STOPPED_RANKS_SECONDS = STOP_SECONDS + 3.0


def _stopped_run(stop, program, args, out, err, comm, options) -> int:
    """A run stopped by a signal (Ctrl-C's KeyboardInterrupt, or :class:`Stopped`): said on stderr,
    and with --json as the failure object; the status 128 + N."""
    signum = stop.signum if isinstance(stop, Stopped) else signal.SIGINT
    left = "".join(f"\n{note}" for note in getattr(stop, "__notes__", ()))  # the kernels left running
    relayed = f" (as rank {_stopped_as[0]} was)" if _stopped_as else ""
    err.write(f"tiledsl: rank {_rank(comm)}: stopped by {signal.Signals(signum).name}{relayed}{left}\n")  # one write
    err.flush()
    json_out = _json_out(program, args, out, comm, options)
    # the run never reached its summary: --json says so, once: by the first rank stopped (a signal to
    # one rank, another than 0, or to the whole job)
    reports = _rank(comm) == 0 if comm is None or comm.size == 1 else comm.first_to_fail()
    if json_out is not None and reports:
        end_open_line()
        print(json_text({**json_out[0], "error": f"stopped by {signal.Signals(signum).name}"}), file=out,
              flush=True)
    if comm is not None and comm.size > 1:  # the other ranks may still wait for their kernels
        comm.wait_for_stopped_ranks(STOPPED_RANKS_SECONDS, signum)
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


def _warner(comm, err, said: list):
    """``warn(message)``: a warning printed once, by rank 0, and kept in ``said``."""
    def warn(message):
        said.append(message)
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


def _fail(comm, message: str, err, json_out=None, code: int = 1, warnings=(), note: str | None = None) -> int:
    """Report a failure of this rank and abort the job (every rank ends, exit status ``code``); with
    ``--json`` (``json_out``), also as a JSON object on stdout, for a script reading it. On several
    ranks only the first rank to fail reports (:meth:`~.comm.Communicator.first_to_fail`): ranks
    often fail together (a bad sub-range every rank's loop nest meets), and one error a job is
    what the user reads; the others wait for its abort to end them, and report only without it.
    ``warnings``: what the rank's kernels said before, said first (its cause, maybe); ``note``: said after."""
    if comm is not None and comm.size > 1 and not comm.first_to_fail():
        time.sleep(SECONDARY_SECONDS)
    record_completion(code)  # first: killed once its error is out (another rank's abort), it still reported
    try:
        # one write: the ranks share the terminal, and a message of several lines (a watchdog's)
        # written in two parts let another rank's line in before its last newline
        err.write("".join(f"tiledsl: warning: {warning}\n" for warning in warnings) + f"tiledsl: error: {message}\n"
                  + (f"tiledsl: note: {note}\n" if note else ""))
        err.flush()
        if json_out is not None:
            known, out = json_out
            end_open_line()
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


class Stopped(RunStop):
    """SIGTERM or SIGHUP arrived: unwind the run (workers finish their kernel) and leave.

    A BaseException, like KeyboardInterrupt, so that nothing that catches a
    program's errors (the loop nest's ``except Exception``) takes it for one."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def stopped_by_signal(signum, frame):
    _stopping.append(signum)
    for again in STOPPING_SIGNALS:  # the rank is stopping: a repeated signal adds nothing
        signal.signal(again, signal.SIG_IGN)
    raise Stopped(signum)


def interrupted(signum, frame):
    """Ctrl-C: Python's KeyboardInterrupt, the rank noted as stopping (its handler stays: a driver's ``main``
    called from Python leaves the caller's Ctrl-C working)."""
    _stopping.append(signum)
    raise KeyboardInterrupt


#: the signals this rank's run stopped for: another rank's stop relayed to a rank stopping already would raise a
#: second interrupt in the unwinding of the first
_stopping: list = []


def _stop_as_another_rank(signum: int, rank: int) -> None:
    """Another ``rank`` stopped for ``signum`` (a signal sent to it alone: `kill` of its process, a kernel's
    own): this one stops as for that signal, naming its kernels, rather than run on until that rank
    ends the job (it waited :data:`STOPPED_RANKS_SECONDS` for this one to say it stopped). Only where the
    rank would stop for it: before its handlers are set, or once its run's outcome is decided, not. A
    Ctrl-C too (tester u83c: one sent to one rank left the others to be aborted 5 s later, saying nothing)."""
    if not _stopping and signal.getsignal(signum) is (interrupted if signum == signal.SIGINT else stopped_by_signal):
        _stopped_as.append(rank)
        signal.pthread_kill(threading.main_thread().ident, signum)


_stopped_as: list = []  # the rank this one stopped as (:func:`_stop_as_another_rank`), once it did


def _stops_after_outcome() -> None:
    """The ranks are agreeing on the run's outcome, and its files are renamed into place (or withheld)
    next: a stop from now on stops nothing. It said "stopped by SIGTERM" (exit 143) of a run whose
    files it had replaced, or raised where nothing catches it (a traceback after the summary); now the
    run reports and ends as it went (docs/cluster.md), one whose end takes :data:`LATE_STOP_SECONDS`
    more (a rank waiting for one that never comes to the agreement) being ended then with 128 + N."""
    for signum in (signal.SIGINT, *STOPPING_SIGNALS):
        unless_ignored(signum, _stopped_after_outcome)


#: how long a rank stopped once its run's outcome was decided may take to report and end
LATE_STOP_SECONDS = 10.0
_late_stops: list = []  # the timer of the first such stop


def _stopped_after_outcome(signum, frame):
    if not _late_stops:
        _late_stops.append(threading.Timer(LATE_STOP_SECONDS, os._exit, (128 + signum,)))
        _late_stops[0].daemon = True
        _late_stops[0].start()


def _stopped_as_any_process() -> None:
    """A process a kernel forks (a multiprocessing pool's worker) is not the rank: SIGTERM ends it
    as it ends any process, not by raising the rank's :class:`Stopped` (which printed a traceback
    in each worker that ``Pool.terminate`` ended, and could leave the pool waiting). The stopping
    signals are held back across the fork (:func:`_holding_stops`), so one sent at once waits for
    this, not running the rank's handler in Python's own after-fork work ("an error was ignored in
    _after_fork: Stopped: 15")."""
    for signum in STOPPING_SIGNALS:
        if signal.getsignal(signum) in (stopped_by_signal, _stopped_after_outcome):
            signal.signal(signum, signal.SIG_DFL)
    _letting_stops_through()


def _holding_stops() -> None:
    """Block the stopping signals in the thread about to fork: the child starts with them blocked."""
    _fork_masks.before = signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING_SIGNALS)


def _letting_stops_through() -> None:
    """The forking thread's signal mask as it was before the fork (in the parent, and in the child)."""
    before = getattr(_fork_masks, "before", None)
    if before is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


_fork_masks = threading.local()  # each forking thread's mask before its fork


os.register_at_fork(before=_holding_stops, after_in_parent=_letting_stops_through,
                    after_in_child=_stopped_as_any_process)


def _leave(comm, status: int) -> int:
    if comm is not None:
        comm.stop()
    return status


def main(program, *_older_driver_arguments) -> None:
    """Entry point of a generated driver run as a script (the driver's module is ``__main__``), or called
    by a script that imported the driver (``chol.main(chol.PROGRAM)``): the run takes its options from
    ``sys.argv`` either way, and exits."""
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
            if json_asked():  # the options are not read yet: the failure object knows the program only
                print(early_failure_json(program.name, said.split(": error: ", 1)[1]), flush=True)
        record_completion(2)  # said (by rank 0): not a rank that ended without a word
        sys.exit(2)
    standard_streams_open()
    unraisable_in_one_line()
    driver = _driver_of(program)
    size = launcher_size()
    parser = SuggestingParser(prog=Path(sys.argv[0]).name, epilog=EXIT_CODES, program=program.name,
                              ranks=size[1] if size else 1,
                              description=f"Run the tile program {program.name} ({program.source}).")
    add_run_arguments(parser, program.tiling.kind)
    sys.exit(process_status(run_and_report(driver, _parsed_once(parser))))


def _driver_of(program):
    """The module of the driver whose ``PROGRAM`` is ``program``: ``__main__`` where the driver runs as a
    script, else the imported driver's."""
    modules = [sys.modules["__main__"], *list(sys.modules.values())]
    # (a module's own names only: a lazy module's __getattr__ may import, or raise, when asked)
    found = next((module for module in modules if getattr(module, "__dict__", {}).get("PROGRAM") is program), None)
    return found or _unlisted_module_of(program) or modules[0]


def _unlisted_module_of(program):
    """The module holding ``program`` as its ``PROGRAM`` that ``sys.modules`` does not list: one made by
    ``importlib.util.module_from_spec`` and executed, never imported (the documented way to load a file)."""
    for names in gc.get_referrers(program):
        if isinstance(names, dict) and names.get("PROGRAM") is program:
            return next((module for module in gc.get_referrers(names)
                         if isinstance(module, types.ModuleType) and module.__dict__ is names), None)
    return None


def process_status(status: int) -> int:
    """``status``, for the process to exit with; or the process ends now with it, its streams flushed,
    where a kernel a run left running is still in it: Python's own end would wait on what the
    kernel holds (stdin's lock, for a kernel blocked in ``input()``: "Fatal Python error", exit 134).
    A stopping signal from now on changes nothing: the status is decided, and one that came as Python
    exits (which puts back the default of a signal with a handler) killed the process with it."""
    for signum in (signal.SIGINT, *STOPPING_SIGNALS):
        with contextlib.suppress(ValueError):  # not the main thread: a test's
            unless_ignored(signum, signal.SIG_IGN)
    if kernels_left_running():
        for adoption in _adoptions:  # multiprocessing's children too: its exit handler will not run
            _ending_processes_left(adoption, sys.stderr, exiting_normally=False)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                stream.flush()
        os._exit(status)
    return status


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
