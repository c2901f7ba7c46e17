"""The ``tiledsl`` command line (DESIGN §8): check, compile, explain, run, bench,
plot (a Gantt chart of a trace), graph (a program's task graph as DOT) and simulate
(a run predicted on N ranks of a modelled machine).

Exit status (:data:`EXIT_STATUS`, shown by every ``--help``): 0 success, 1 a program
error (diagnostics, a failed kernel, a failed check), 2 a usage error, 3 an internal
error, 128+N stopped by signal N. User mistakes never end in a Python traceback; set
``TILEDSL_DEBUG=1`` to see one for an internal error. A closed stdout (``| head``)
is a normal end: the command stops quietly.
"""
from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import threading
import traceback
from pathlib import Path

from .. import __version__
from . import PROGRAM_HELP, onerank
from ..drivercontract import RUNTIME_MODULES, hiding, required_modules
from ..driverload import program_path, shadowing
from ..packages import missing_package
from .files import replacing
from .jobs import run_job
from ..runtime.errors import TaskFailure
from ..runtime.entry import Stopped, process_status
from ..runtime.world import LineTracking
from ..runtime.outputs import check_replaceable, check_writable
from ..runtime.priorities import EXACT_LEVELS_RANKS, MODES
from .plot import DRAWN_BY
from ..runtime.reporting import failure_json, failure_line_out, json_text, stdout_closed, stdout_unwritable
from ..runtime.world import (RankError, UsageError, check_working_directory, closed_streams, environment_switch,
                             standard_streams_open, unraisable_in_one_line)

EXIT_STATUS = """exit status:
  0      success
  1      a program error: diagnostics, a failed kernel, a failed check
  2      a usage error
  3      an internal error (a bug in tiledsl: please report it)
  128+N  stopped by signal N (130: Ctrl-C; 141: stdout's reader left, as in | head)"""


def main(argv=None) -> int:
    standard_streams_open()  # `2>&-`: what would go there is dropped, the run goes on
    unraisable_in_one_line()
    if not isinstance(sys.stdout, _GuardedStdout):
        sys.stdout = _GuardedStdout(sys.stdout)
    own_process = argv is None  # the command line's own process (not a caller's): a one-rank run is watched
    argv = sys.argv[1:] if argv is None else list(argv)
    args = None
    try:
        _stop_on_signals()
        check_working_directory()
        args = _parser().parse_args(argv)
        args.argv, args.own_process = argv, own_process
        _say_which_program(args)
        return args.handler(args)
    except BrokenPipeError:  # stdout's reader has gone (| head): a normal end
        return stdout_closed()
    except UsageError as error:
        print(f"tiledsl: error: {error}", file=sys.stderr)
        # before the options were read (the current directory gone): --json's object all the same
        return _json_failure(args, str(error), argv) or 2
    except NotCompiled as error:
        return _json_failure(args, str(error)) or 1
    except (KeyboardInterrupt, Stopped) as stop:
        signum = getattr(stop, "signum", signal.SIGINT)
        print(f"tiledsl: stopped by {signal.Signals(signum).name}", file=sys.stderr)  # as a run's ranks say it
        # stopped as the options were read: --json's object all the same
        return _json_failure(args, f"stopped by {signal.Signals(signum).name}", argv) or 128 + signum
    except TaskFailure as failure:  # the program's loop nest failed (explain, graph, tune, simulate walk it)
        print(f"tiledsl: error: {_failure_text(failure, args)}", file=sys.stderr)
        return _json_failure(args, _failure_text(failure, args)) or 1
    except StdoutError as error:  # a full disk, or a device that takes nothing (`> /dev/full`)
        stdout_unwritable(error)
        return 1
    except Exception as error:  # a bug in tiledsl, not in the user's program
        from ..runtime.errors import shortage

        if shortage(error):  # memory or a thread this process could not have: not a bug either
            print(f"tiledsl: error: {shortage(error)}", file=sys.stderr)
            return _json_failure(args, shortage(error)) or 1
        if missing_package(error) is not None:  # or a package the environment lacks (an extra's, scipy's own)
            print(f"tiledsl: error: {missing_package(error)}", file=sys.stderr)
            return _json_failure(args, missing_package(error)) or 2
        if environment_switch("TILEDSL_DEBUG"):
            traceback.print_exc()
        print(f"tiledsl: internal error: {type(error).__name__}: {error}\n"
              f"  (set TILEDSL_DEBUG=1 for the traceback, and please report it)", file=sys.stderr)
        return 3


def _stop_on_signals() -> None:
    """SIGTERM (a batch scheduler's time limit) and SIGHUP end a command as Ctrl-C does: said, and
    with --json as its failure object, not a process killed without a word."""
    from ..runtime.entry import STOPPING_SIGNALS, stopped_by_signal
    from ..runtime.world import unless_ignored

    for signum in STOPPING_SIGNALS:
        unless_ignored(signum, stopped_by_signal)


def _json_failure(args, error: str, argv: list | None = None) -> int | None:
    """A command with ``--json`` (run, bench, explain, tune, simulate) that stopped before its result
    (a usage error, a program with errors, a loop nest that failed) says so on stdout too, as a run
    that failed later does: ``program`` null where it was not read yet (:func:`_load_driver`); read
    from the command line as written (``argv``) where the options were not (``args`` None). None, or
    the status of a stdout whose reader left (:func:`.reporting.failure_line_out`)."""
    if args is None:
        return _json_failure_before_options(argv, error) if argv is not None else None
    if not getattr(args, "json", False):
        return None
    # on a line of its own: a stop may have cut the result's line (explain's, 170 KB) as it was written
    apart = "\n" if getattr(sys.stdout, "line_open", False) else ""
    return failure_line_out(apart + json_text({**failure_json(getattr(args, "program", None), args.n,
                                                              _ranks_of(args)), "error": error}))


def _json_failure_before_options(argv: list, error: str) -> int | None:
    """:func:`_json_failure` of a command stopped before its options were read, from the command line
    as written (as the ``tiledsl`` program's own stop while it loads says it: ``np`` null for run)."""
    given = argv[:argv.index("--") if "--" in argv else None]
    if "--json" not in given:
        return None
    return failure_line_out(json_text({**failure_json(None, None, names_ranks=given[:1] == ["run"]), "error": error}))


def _ranks_of(args) -> int | None:
    """The ranks a --json failure object names (``np``): run's --np, simulate's --nodes when given;
    None (no ``np``) for the commands of one process (bench, explain, tune)."""
    if args.handler is _run:
        return args.np
    return args.nodes if args.handler is _simulate else None


#: the commands that walk the loop nest for every rank at once, running no rank: their failures name none
_WALKS_ONLY = ("explain", "graph", "simulate")


def _failure_text(failure: TaskFailure, args) -> str:
    """``rank R (file.tile:LINE): what failed``, or ``file.tile:LINE: what failed`` where no rank ran."""
    where = f"{Path(program_path(args.file)).name}:{failure.line}" if failure.line and hasattr(args, "file") else ""
    if getattr(args, "command", None) in _WALKS_ONLY:
        return f"{where}: {failure}" if where else str(failure)
    return f"rank {failure.rank}{f' ({where})' if where else ''}: {failure}"


class NotCompiled(Exception):
    """The program has errors (printed as diagnostics); the first one's headline."""


class StdoutError(OSError):
    """Writing to stdout failed (not a broken pipe: that is a reader that left)."""


def _write_out(text: str) -> None:
    """Write ``text`` to stdout whole, or fail: a write the reader leaves in the middle of (`| head`)
    returns part of it, after which Python's own stream drops the rest and says nothing (exit 0)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture)
        sys.stdout.write(text)
        return
    sys.stdout.flush()
    data = memoryview(text.encode(sys.stdout.encoding or "utf-8", sys.stdout.errors or "strict"))
    while data:
        data = data[_GuardedStdout._guarded(os.write, fd, data):]


class _GuardedStdout(LineTracking):
    """sys.stdout, whose write failures say that they are stdout's: an OSError from anywhere else
    is tiledsl's own (an internal error), one from here the user's disk or device.

    A kernel's print (any thread but the main one) that fails is dropped: stdout's reader leaving
    (`| head`) or a full device is the run's, which says it once as it writes its summary, with
    the status it has on several ranks (141, or the one line of a full device), and no kernel
    fails for it."""

    def write(self, text: str) -> int:
        return self._kept(super().write, text) or len(text)

    def flush(self) -> None:
        self._kept(super().flush)

    def _kept(self, action, *args):
        """``action(*args)``, whose failure off the main thread is dropped (None)."""
        try:
            return self._guarded(action, *args)
        except OSError:
            if threading.current_thread() is threading.main_thread():
                raise
            return None

    @staticmethod
    def _guarded(action, *args):
        try:
            return action(*args)
        except BrokenPipeError:
            raise
        except OSError as error:
            raise StdoutError(error.errno, error.strerror or str(error)) from None

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _say_which_program(args) -> None:
    """A shipped program's name run beside a .tile file of that name: say which one runs (once,
    from the command the user typed, not from its ranks)."""
    from ..runtime.world import JOB_DIR_VARIABLE

    doing = args.handler.__name__.lstrip("_")  # the command: run, compile, explain, ...
    note = shadowing(args.file, doing) if isinstance(getattr(args, "file", None), str) else None
    if note and not os.environ.get(JOB_DIR_VARIABLE):
        print(f"tiledsl: warning: {note}", file=sys.stderr)


def _parser() -> argparse.ArgumentParser:
    from .explain import TABLE_LIMIT
    from ..runtime.options import (SuggestingParser, add_finite_arguments, add_run_arguments, add_size_arguments,
                                   add_watchdog_argument)

    parser = SuggestingParser(prog="tiledsl", description="A language and compiler for tile algorithms.",
                              epilog=EXIT_STATUS, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"tiledsl {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=summary, description=summary, epilog=EXIT_STATUS,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)

    check = command("check", "report diagnostics for .tile files (on stdout)")
    check.add_argument("files", nargs="+", metavar="PROGRAM", help="a .tile file or a shipped program's name")
    check.set_defaults(handler=_check)

    compile_ = command("compile", "write the Python driver of a .tile program")
    compile_.add_argument("file", metavar="PROGRAM", help="a .tile file or a shipped program's name")
    compile_.add_argument("-o", "--output", type=_file_not_stdout, metavar="DRIVER.py",
                          help="where to write it (default: stdout)")
    compile_.set_defaults(handler=_compile)

    explain = command("explain", "show each task's owner and every rank's instances")
    explain.add_argument("file", metavar="PROGRAM", help=PROGRAM_HELP)
    explain.add_argument("--grid", default="1x1", metavar="PxQ", help="process grid (default 1x1)")
    explain.add_argument("--gpus", type=int, default=0, metavar="G", help="GPUs per rank (default 0)")
    explain.add_argument("--json", action="store_true", help="print the plan as JSON")
    explain.add_argument("--totals", action="store_true",
                         help="print only the totals, not the per-task table (always so past "
                              f"{TABLE_LIMIT} tasks)")
    explain.add_argument("--priorities", choices=MODES, default="program",
                         help="as for run; derived ones (auto, or a program that states none) make every rank "
                              f"of up to {EXACT_LEVELS_RANKS} walk the whole loop nest, which the plan's walk line says")
    _add_planning_arguments(explain)
    add_size_arguments(explain)
    explain.set_defaults(handler=_explain)
    explain.not_taken = {"--gpu-memory": "explain does not model GPU memory: it counts the copies of a run whose tiles "
                                         "all fit their GPUs"}

    run = command("run", "run a .tile program or a driver")
    run.add_argument("file", metavar="PROGRAM.tile|DRIVER.py", help=PROGRAM_HELP)
    run.add_argument("--np", type=int, default=1, metavar="P", help="MPI ranks to start (default 1)")
    run.add_argument("--launcher", metavar="CMD",
                     help="how to start P ranks, e.g. 'srun' or 'mpirun' (default: $TILEDSL_LAUNCHER, "
                          "else the mpiexec installed with tiledsl)")
    add_run_arguments(run)
    run.set_defaults(handler=_run)

    bench = command("bench", "tiledsl against LAPACK and dask, alternated in one run")
    bench.add_argument("file", metavar="PROGRAM", help=PROGRAM_HELP)
    bench.add_argument("--workers", type=int, help="CPU workers, and BLAS threads of the reference")
    bench.add_argument("--rounds", type=int, default=3, help="alternated rounds (default 3)")
    bench.add_argument("--seed", type=int, default=42, help="seed of the generated inputs (default 42)")
    bench.add_argument("--no-dask", action="store_true", help="leave dask out")
    bench.add_argument("--json", action="store_true", help="print the table as JSON")
    bench.add_argument("--no-tune", action="store_true",
                       help="ignore this machine's tuned tile sizes (tiledsl tune), which bench uses as run does")
    add_size_arguments(bench, "read matrix NAME from a .npy file, for tiledsl and the reference alike (as for run)")
    add_finite_arguments(bench)  # a program whose results hold NaN or infinities (shortest paths) is benched too
    add_watchdog_argument(bench)  # its runs' (a stall's report advises it)
    bench.not_taken = {option: "bench compares runs on CPU cores with LAPACK and dask; run a program on GPUs with "
                               "tiledsl run --gpus G" for option in ("--gpus", "--gpu-backend", "--gpu-memory")}
    bench.set_defaults(handler=_bench)

    tune = command("tune", "tune tile sizes (and the host/GPU ratio) for this machine")
    tune.add_argument("file", metavar="PROGRAM", help=PROGRAM_HELP)
    tune.add_argument("--gpus", type=int, default=0, metavar="G", help="GPUs per rank (default 0: CPU tiles only)")
    tune.add_argument("--gpu-backend", choices=["emulated", "cupy"], help="as for run (default emulated)")
    tune.add_argument("--workers", type=int, help="CPU workers (default: as run chooses)")
    spend = tune.add_mutually_exclusive_group()  # --quick is a budget: both would leave one unheard
    spend.add_argument("--budget", metavar="SECONDS",
                       help="time for the whole tuning (default 30), which tune fits its trial runs to; none is "
                            "cut short, since a slow kernel cannot be told from a stuck one: one whose kernel never "
                            "returns ends at the watchdog's limit (a minute at least, unless --watchdog sets it)")
    spend.add_argument("--quick", action="store_true", help="a 10-second budget (see --budget)")
    tune.add_argument("--sizes", metavar="S1,S2,...",
                      help="the tile sizes to time the kernels at and choose among: nb, or hybrid tiles' B on GPUs "
                           "and b without (multiples of 64; default 64..1024 in steps of 64; 256..4096 on CuPy GPUs)")
    tune.add_argument("--n", type=int, help="matrix order of the trial runs (default: 3·B·G or enough tiles "
                                            "for the workers, within the budget)")
    tune.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                      help="a program parameter for every trial run (repeatable); an inner block given so is "
                           "not tuned")
    tune.add_argument("--no-save", action="store_true", help="print the result without caching it")
    tune.add_argument("--json", action="store_true", help="print the result as JSON")
    add_watchdog_argument(tune)  # its trial runs'
    tune.set_defaults(handler=_tune)

    plot = command("plot", "draw a Gantt chart of a trace (tiledsl run --trace)")
    plot.add_argument("trace", metavar="TRACE.json",
                      help="a trace that tiledsl run --trace (or simulate --trace) wrote")
    plot.add_argument("-o", "--output", type=_file_name, required=True, metavar="GANTT.png",
                      help="the chart: .png, .svg or .pdf")
    plot.add_argument("--width", type=float, metavar="INCHES", help="figure width (default 12)")
    plot.set_defaults(handler=_plot)

    graph = command("graph", "write a program's task graph for a small size (Graphviz DOT)")
    graph.add_argument("file", metavar="PROGRAM", help=PROGRAM_HELP)
    graph.add_argument("--grid", default="1x1", metavar="PxQ", help="process grid (default 1x1)")
    graph.add_argument("--gpus", type=int, default=0, metavar="G", help="GPUs per rank (default 0)")
    graph.add_argument("-o", "--output", type=_file_not_stdout, metavar="DAG.dot",
                       help="where to write it: .dot, or .svg/.png/.pdf through graphviz (default: stdout)")
    _add_planning_arguments(graph)
    add_size_arguments(graph)
    graph.set_defaults(handler=_graph)

    from .simulate import add_arguments as add_simulate_arguments
    simulate = command("simulate", "predict a run on N ranks without running its kernels")
    add_simulate_arguments(simulate)
    runs_none = "simulate runs no kernel"
    simulate.not_taken = {"--gpu-memory": "simulate does not model GPU memory: a simulated GPU holds every tile",
                          "--check": f"{runs_none}: there is no result to check",
                          "--output": f"{runs_none}: there is no result to write",
                          "--input": f"{runs_none}: it reads no matrix"}
    simulate.set_defaults(handler=_simulate)
    return parser


def _add_planning_arguments(parser: argparse.ArgumentParser) -> None:
    """What explain and graph take to plan the run a run would make: whose tuned values, and
    --gpu-ratio and --no-tune as run takes them."""
    from ..runtime.options import add_tuning_arguments

    parser.add_argument("--gpu-backend", choices=["emulated", "cupy"],
                        help="whose tuned values to use, as run's option (default emulated)")
    add_tuning_arguments(parser)


# ---------------------------------------------------------------- commands
def _print_diagnostics(result, stream=None) -> None:
    """``result``'s diagnostics, on stderr unless ``stream`` is given (check's report is its output)."""
    if result.diagnostics:
        print(result.report(), file=stream or sys.stderr)


def _check(args) -> int:
    from ..compiler import Result, check_path
    from ..compiler.diagnostics import Diagnostic
    from ..compiler.source import Span

    failed = warnings = 0
    for given in args.files:
        note = shadowing(given, "check")
        if note:  # the user's own NAME.tile is not what is checked: said, as run says it
            print(f"tiledsl: warning: {note}", file=sys.stderr)
        try:
            result = check_path(program_path(given))
        except UsageError as error:  # no such file, nor a shipped program: said as run says it, as a diagnostic
            where = Span.whole(given) if given else None  # (an empty name is no place)
            result = Result(given, diagnostics=[Diagnostic(where, "E000", str(error).removeprefix(f"{given}: "))])
        _print_diagnostics(result, sys.stdout)  # the report is check's output, as a linter's (`check x.tile > log`)
        failed += not result.ok
        warnings += sum(not d.is_error for d in result.diagnostics)
    count = len(args.files)
    print(f"checked {count} file(s): " + (f"{failed} with errors" if failed else "no errors")
          + (f", {warnings} warning(s)" if warnings else ""))
    return 1 if failed else 0


def _file_name(text: str) -> str:
    """An output's name, which cannot be empty (``-o ""`` read as the current directory) or blank."""
    if not text.strip():
        raise argparse.ArgumentTypeError("no file name given")
    return text


def _file_not_stdout(text: str) -> str:
    """The name of an output that goes to stdout without ``-o``: ``-o -`` is said to be left out."""
    if text == "-":
        raise argparse.ArgumentTypeError("leave out -o to write to stdout")
    return _file_name(text)


def _compile(args) -> int:
    path = program_path(args.file)
    _not_a_driver_unnamed(path)
    if path.endswith(".py"):  # read as a program, a driver is a syntax error at its first line
        what = "a driver tiledsl compile wrote" if _opens_as_a_driver(path) else "a Python file (a compiled driver?)"
        raise UsageError(f"{path} is {what}: compile takes a .tile program; a driver runs as it is "
                         f"(python {shlex.quote(path)}, or tiledsl run {shlex.quote(path)})")
    if args.output is not None:
        _check_driver_target(args.output, path)
    else:
        _stdout_open_for("the driver")
    from ..compiler import compile_path

    result, text = compile_path(path, args.output)
    _print_diagnostics(result)
    if text is None:
        if args.output is not None and os.path.exists(args.output):  # (tester x: a stale driver run unawares)
            print(f"tiledsl: note: {args.output} was not written: the driver there is an earlier one",
                  file=sys.stderr)
        return 1
    module = result.checked.kernel_module
    if args.output is not None and module is not None and Path(module).name == Path(args.output).name:
        raise UsageError(f"-o {args.output}: the program's kernel module is named {Path(module).name} too, and the "
                         f"driver looks for it in the .tile's folder and beside itself, where it could find itself: name it "
                         f"otherwise")
    if args.output is None:
        _write_out(text)
        return 0
    try:
        with replacing(args.output) as temporary:
            temporary.write_text(text, encoding="utf-8")
    except OSError as error:
        print(f"tiledsl: error: cannot write {args.output}: {error.strerror}", file=sys.stderr)
        return 2
    return 0


def _check_driver_target(output: str, program: str) -> None:
    """A :class:`UsageError` for a driver file that would replace something not a driver (the
    program, its kernel module, data) or hide a module its run imports."""
    check_writable(output, f"-o {output}")  # a folder that is a file or is not there, as run says it
    target = Path(output)
    if target.resolve() == Path(program).resolve():
        raise UsageError(f"-o {output}: that is the program itself, which the driver would replace: "
                         f"name a .py file")
    if target.suffix != ".py":
        raise UsageError(f"-o {output}: a driver is a Python module: name a .py file")
    if target.is_file():
        from ..driverload import not_a_driver

        reason = not_a_driver(target)
        if reason is not None:
            raise UsageError(f"-o {output}: {target.name} is there and is not a driver tiledsl wrote ({reason}): "
                             f"compile replaces only its own drivers; name another file")
    # a module a run may import besides Python's, whose place a driver of its name, first on the
    # import path as a script is, would take: the driver and drivers beside it would stop (hiding)
    if target.stem in sys.stdlib_module_names or target.stem in RUNTIME_MODULES or target.stem in required_modules():
        kind = "Python's module" if target.stem in sys.stdlib_module_names else "the module"
        raise UsageError(f"-o {output}: a driver named {target.name} would hide {kind} {target.stem} from its run "
                         f"(a script's folder comes first on the import path): name it otherwise")


def _load_driver(args, warn_changed: bool = True):
    """The driver module of ``args.file``, a .tile file (compiled through the cache) or a driver file;
    its program's name is kept in ``args.program`` for a --json failure object from here on. A
    warning where the driver's ``.tile`` file has changed since it was compiled (``run`` says it
    itself, on rank 0 of its job, and in its --json notes)."""
    from ..driverload import import_driver
    from ..runtime.userkernels import changed_source

    given = program_path(args.file)
    driver = import_driver(_driver_path(given))
    args.program = driver.PROGRAM.name
    # a driver file only: one the cache gives was just compiled from the .tile as it is (no second read)
    changed = changed_source(driver.PROGRAM, driver) if warn_changed and given.endswith(".py") else None
    if changed:
        print(f"tiledsl: warning: {changed}", file=sys.stderr)
    return driver


def _opens_as_a_driver(path: str) -> bool:
    """Whether the file at ``path`` begins as the drivers tiledsl compile writes do (False where
    it cannot be read: the program's reader says why)."""
    from ..driverload import DRIVER_DOCSTRING

    try:
        with open(path, encoding="utf-8", errors="replace") as text:
            return text.read(len(DRIVER_DOCSTRING) + 3) == f'"""{DRIVER_DOCSTRING}'
    except OSError:
        return False


def _not_a_driver_unnamed(path: str) -> None:
    """A :class:`UsageError` for a driver saved under a name without .py (read as a program, it was
    a syntax error at its first line)."""
    if path.endswith((".tile", ".py")) or not Path(path).is_file():
        return
    if _opens_as_a_driver(path):
        raise UsageError(f"{path} is a driver tiledsl compile wrote, under a name without .py: rename it "
                         f"{Path(path).name}.py, and run it as python {shlex.quote(path + '.py')} or tiledsl run "
                         f"{shlex.quote(path + '.py')}")


def _driver_path(path: str):
    """The driver file for a .tile file (compiled through the cache; :class:`NotCompiled` once
    its diagnostics are printed) or a driver file, recognised before anything runs it (a
    :class:`UsageError` for any other Python file)."""
    from ..driverload import not_a_driver

    if not path.endswith(".py"):
        _not_a_driver_unnamed(path)
        return _cached_driver(path)
    if not Path(path).is_file():
        raise UsageError(f"{path}: not a file")
    reason = not_a_driver(path)
    if reason is not None:
        raise UsageError(f"{path} is not a tiledsl driver, so it was not used: {reason} "
                         f"(make a driver with tiledsl compile, or give the .tile program)")
    hidden = hiding(os.path.dirname(os.path.realpath(path)), sys.modules)  # as python puts it first: links followed
    if hidden is not None:
        raise UsageError(hidden)
    return path


def _grid_of(args) -> tuple[int, int]:
    """The ``--grid`` that explain and graph plan for, with their ``--gpus`` checked."""
    from ..runtime.distribution import parse_grid
    from ..runtime.options import check_gpus

    check_gpus(args.gpus)
    return parse_grid(args.grid)


def _planned_options(driver, args, grid: tuple[int, int]):
    """The size options of explain and graph, with the tuned values a run would use; a warning
    when ``grid`` leaves a rank without tiles, as a run gives."""
    from ..runtime.fitting import check_files, fit_files
    from ..runtime.layout import make_distribution, make_matrices, make_params, use_tuned
    from ..runtime.tuning import warn_once
    from ..runtime.gridadvice import idle_rank_advice
    from ..runtime.options import size_options, unused_backend
    from ..runtime.resources import ranks_without_tiles

    unused = unused_backend(args, "the plan has no GPU tiles")  # as run warns of it
    if unused:
        print(f"tiledsl: warning: {unused}", file=sys.stderr)
    options = size_options(args)
    options.gpus, options.gpu_backend = args.gpus, args.gpu_backend or "emulated"
    use_tuned(driver, options, not args.no_tune, warn=warn_once)  # the defaults run would use, warned as it is
    fit_files(driver, options)  # no --n: the size of the --input files and of the files the program loads
    check_files(driver, options)  # as run refuses them
    params = make_params(driver, options)
    matrices = make_matrices(driver, params, make_distribution(driver.PROGRAM, params, grid, args.gpus), 0)
    idle = ranks_without_tiles(driver.PROGRAM, matrices, grid[0] * grid[1], lambda: idle_rank_advice(
        driver, options, params, grid[0] * grid[1], args.gpus))
    if idle:
        print(f"tiledsl: warning: {idle}", file=sys.stderr)
    return options


def _explain(args) -> int:
    from .explain import as_json, explain, render
    from ..runtime.gridadvice import idle_rank_advice
    from ..runtime.launch import unused_settings
    from ..runtime.layout import make_params
    from ..runtime.reporting import idle_ranks_warning, idle_warning

    driver = _load_driver(args)
    try:
        grid = _grid_of(args)
        options = _planned_options(driver, args, grid)
        options.priorities = args.priorities  # (the plan's walk line: derived priorities walk every task)
        explained = explain(driver, options, grid, args.gpus, args.totals)
    except ValueError as error:  # a bad --grid: a usage error (with --json, its failure object)
        raise UsageError(str(error)) from None
    params, ranks = make_params(driver, options), grid[0] * grid[1]
    for said in unused_settings(driver.PROGRAM, options, params, ranks):
        print(f"tiledsl: warning: {said}", file=sys.stderr)  # as run warns of them (a --b where s = 1)
    # as a run warns after it of ranks that own tiles and run no task (tester k53: explain named only those
    # without tiles, and its table showed one more rank with nothing to do)
    idle = idle_warning(driver.PROGRAM, params.as_dict(), explained.rank_stats(), planned=True) or \
        idle_ranks_warning(explained.rank_stats(), grid, lambda: idle_rank_advice(
            driver, options, params, ranks, args.gpus, getattr(options, "gpu_ratio", None)))
    if idle:
        print(f"tiledsl: warning: {idle}", file=sys.stderr)
    print(json_text({**as_json(explained), "ok": True}) if args.json
          else render(explained, Path(program_path(args.file)).name))
    return 0


def _bench(args) -> int:
    from .bench import render, run_bench
    from ..runtime.crash import claim_process
    from ..runtime.fitting import fit_files
    from ..runtime.world import expect_json
    from ..runtime.layout import use_tuned
    from ..runtime.tuning import warn_once
    from ..runtime.options import check_seed, check_workers, set_finite_options, size_options

    driver = _load_driver(args)
    options = size_options(args)
    check_workers(args.workers)
    check_seed(args.seed)
    options.workers = args.workers or os.cpu_count() or 1
    options.seed = args.seed
    options.check, options.watchdog = True, args.watchdog
    set_finite_options(options, args)
    if args.rounds < 1:
        raise UsageError(f"--rounds must be at least 1, got {args.rounds}")
    use_tuned(driver, options, not args.no_tune, warn=warn_once)  # what run would use, warned as it is
    fit_files(driver, options)  # no --n: the size of the --input files and of the files the program loads
    claim_process()  # bench's runs are its own: a stray os._exit of a kernel's thread fails it, as a run
    expect_json(failure_json(driver.PROGRAM.name, options.n) if args.json else None, sys.stdout)
    try:
        table = run_bench(driver, options, args.rounds, not args.no_dask)
    except (TaskFailure, RankError) as failure:  # a kernel failed, or its module did not load: said as run says it
        error = _failure_text(failure, args) if isinstance(failure, TaskFailure) else f"rank 0: {failure}"
        print(f"tiledsl: error: {error}", file=sys.stderr)
        if args.json:
            failed = json_text({**failure_json(driver.PROGRAM.name, options.n), "error": error})
            return failure_line_out(failed) or 1
        return 1
    print(json_text(table) if args.json else render(table))
    for line in table["errors"]:  # why it failed, as run says it
        print(f"tiledsl: error: {line}", file=sys.stderr)
    return 0 if table["ok"] else 1


#: what a drawing tiledsl writes begins with, by its file's suffix: -o replaces only such a file
#: that holds its mark too (graph.DRAWN_BY, plot's metadata), not another tool's drawing nor a photo
DRAWING_STARTS = {".dot": (b"digraph",), ".gv": (b"digraph",), ".svg": (b"<?xml", b"<svg"), ".png": (b"\x89PNG",),
                  ".pdf": (b"%PDF",)}


def _check_drawing_target(output: str) -> None:
    """A :class:`UsageError` for ``-o`` naming a file a drawing cannot replace: one not writable, or
    one of the drawing's suffix that holds something else (notes saved as .svg, another tool's .dot)."""
    check_writable(output, f"-o {output}")
    starts = DRAWING_STARTS.get(Path(output).suffix.lower())
    if starts is not None:
        check_replaceable(output, f"-o {output}", starts, "a drawing tiledsl made (a graph, a chart)",
                          DRAWN_BY.encode())


def _plot(args) -> int:
    from .plot import MissingMatplotlib, plot

    _check_drawing_target(args.output)
    try:
        warning = plot(args.trace, args.output, args.width)
    except (MissingMatplotlib, ValueError) as error:  # a trace that is not there or not one (TraceError) too
        print(f"tiledsl: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"tiledsl: error: cannot write {args.output}: {error.strerror or error}", file=sys.stderr)
        return 2
    if warning is not None:
        print(f"tiledsl: warning: {warning}", file=sys.stderr)
    return 0


def _stdout_open_for(product: str) -> None:
    """A UsageError where the command's only product would go to a stdout the shell closed (``>&-``):
    dropped as a run's summary is, it was a success with nothing made."""
    if "stdout" in closed_streams:
        raise UsageError(f"stdout is closed (>&-), where {product} would go: give -o FILE")


def _graph(args) -> int:
    from .explain import plan
    from .graph import count_tasks, task_limit, to_dot, too_many_tasks, write

    driver = _load_driver(args)
    if args.output is not None:
        _check_drawing_target(args.output)
    else:
        _stdout_open_for("the graph")
    try:
        grid = _grid_of(args)
        options = _planned_options(driver, args, grid)
        limit, refusal = task_limit(args.output)
        if count_tasks(driver, options, grid, args.gpus, limit) > limit:
            raise too_many_tasks(driver, options, limit, refusal)
        text = to_dot(plan(driver, options, grid, args.gpus), Path(program_path(args.file)).name)
        if args.output is not None:
            write(text, args.output)
    except ValueError as error:  # graph.GraphError is one
        print(f"tiledsl: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"tiledsl: error: cannot write {args.output}: {error.strerror or error}", file=sys.stderr)
        return 2
    if args.output is None:
        _write_out(text)
    return 0


def _tune(args) -> int:
    from ..runtime import tuning
    from ..runtime.options import set_texts, unused_backend
    from .tune import BUDGET, QUICK, as_json, check_budget, render, save, tune

    driver = _load_driver(args)
    sizes = None
    if args.sizes is not None:
        try:
            sizes = [int(item) for item in args.sizes.split(",")]  # an empty item too: a typo, said
        except ValueError:
            raise UsageError(f"--sizes expects integers separated by commas, got {args.sizes!r}") from None
    budget = QUICK if args.quick else BUDGET
    if args.budget is not None:  # read here, not by argparse: a budget it refuses is said as typed (1e400)
        try:
            budget = float(args.budget)
        except ValueError:
            raise UsageError(f"--budget expects a number of seconds, got {args.budget!r}") from None
        check_budget(budget, args.budget)
    unused = unused_backend(args, "tune times the kernels on a core only")  # as run warns of it
    if unused:
        print(f"tiledsl: warning: {unused}", file=sys.stderr)
    if not args.no_save:  # said now, not after the budget is spent
        tuning.check_storable()
    log = (lambda line: None) if args.json else (lambda line: print(line, flush=True))
    result = tune(driver, args.gpus, args.gpu_backend or "emulated", args.workers, budget, sizes, args.n, log,
                  sets=set_texts(args.set), watchdog=args.watchdog)
    path = key = unsaved = None
    if not args.no_save:
        try:
            path, key = save(result)
        except UsageError as error:  # the cache cannot be read or written: what was measured is still said
            unsaved = error
    if args.json:  # ok as run --json's: false when the result could not be cached
        print(json_text({**as_json(result), "cache": str(path) if path else None, "key": key, "ok": unsaved is None,
                         **({"error": str(unsaved)} if unsaved is not None else {})}))
    else:
        print(render(result, path, key))
    if unsaved is not None:
        print(f"tiledsl: error: {unsaved}", file=sys.stderr)
        return 2
    return 0


def _simulate(args) -> int:
    from .simulate import run

    return run(args, _load_driver(args))


def _run(args) -> int:
    from ..runtime.entry import run_and_report

    if args.np < 1:
        raise UsageError(f"--np must be at least 1, got {args.np}")
    if args.np > 1 or _launcher_text(args):  # a launcher given runs even one rank under it (a batch job's node)
        return _launch(args)
    driver = _load_driver(args, warn_changed=False)
    if not (args.own_process and onerank.can_watch()):
        return run_and_report(driver, args)
    return onerank.watched(lambda: run_and_report(driver, args), driver.PROGRAM.name, args.n,
                           Path(driver.PROGRAM.source).name, args.json)


#: a rank's Python runs the driver as ``python DRIVER`` would (``sys.argv``, ``sys.path[0]``, ``__main__``), but
#: from the byte code the import above wrote: as a script, each rank compiled it again (for a program of
#: thousands of calls, seconds and hundreds of MB a rank). Only modules loaded before the driver's folder
#: comes first on the path are imported: no file of the current directory can stand in for them. A driver
#: gone before a rank read it (tiledsl's cache cleared as the job started) is one line, not a traceback.
RUN_FROM_BYTE_CODE = """\
import importlib.util, os, sys
del sys.argv[0]
sys.path[0] = os.path.dirname(os.path.realpath(sys.argv[0]))
spec = importlib.util.spec_from_file_location('__main__', os.path.abspath(sys.argv[0]))
sys.modules['__main__'] = driver = importlib.util.module_from_spec(spec)
try:
    code = spec.loader.get_code('__main__')
except FileNotFoundError:
    sys.exit(f'tiledsl: error: the driver {sys.argv[0]} is gone: it was removed as the job started (tiledsl\\'s '
             f'cache cleared?): run it again')
exec(code, vars(driver))
"""


#: ranks a core beyond which a job started here is said, before it starts, to crowd the cores
CROWDED_RANKS_PER_CORE = 4


def _crowded_cores(ranks: int) -> str | None:
    """What a job of ``ranks`` ranks that this machine's mpiexec starts (all on this node) costs, when
    they outnumber its cores more than :data:`CROWDED_RANKS_PER_CORE` times: ``--np 1000`` on 2 cores
    started for minutes without a word."""
    cores = os.cpu_count() or 1
    if ranks <= CROWDED_RANKS_PER_CORE * cores:
        return None
    return (f"--np {ranks} starts {ranks} ranks on this machine's {cores} core(s), over {CROWDED_RANKS_PER_CORE} a "
            f"core: they take long to start and share the cores (a cluster's ranks on several nodes come from its "
            f"launcher, --launcher)")


def _launch(args) -> int:
    """Start ``--np`` ranks of the program's driver under an MPI launcher and wait for them."""
    import shlex
    import shutil

    from ..driverload import import_driver
    from ..runtime.outputs import remove_abandoned

    path = _driver_path(program_path(args.file))
    # a driver compiled elsewhere: whether this runtime runs it is said once here (its guard's
    # SystemExit), not by each rank and then lost; and the program's name, for a --json failure
    driver = import_driver(path)
    try:
        launcher = shlex.split(_launcher_text(args)) or [_mpiexec()]
    except ValueError as error:  # an unbalanced quote
        given = "--launcher" if args.launcher else "TILEDSL_LAUNCHER"
        raise UsageError(f"{given} {_launcher_text(args)!r}: {error}") from None
    if shutil.which(launcher[0]) is None:
        raise UsageError(f"launcher {launcher[0]!r} not found (set --launcher or TILEDSL_LAUNCHER)")
    crowded = _crowded_cores(args.np) if not _launcher_text(args) else None
    if crowded:
        print(f"tiledsl: warning: {crowded}", file=sys.stderr)
    command = [*launcher, "-n", str(args.np), sys.executable, "-c", RUN_FROM_BYTE_CODE, str(path),
               *_forwarded(args.argv, args.file)]
    said = failure_json(driver.PROGRAM.name, args.n, args.np) if args.json else None
    try:
        return run_job(command, args.np, failure_json=said, program_file=Path(driver.PROGRAM.source).name)
    finally:  # what ranks killed while writing the outputs left beside them
        remove_abandoned(_written_files(args))


def _written_files(args) -> list:
    """The files a run writes: its ``--output`` files and its trace."""
    return [item.partition("=")[2] for item in args.output] + [args.trace] * bool(args.trace)


def _launcher_text(args) -> str:
    """The launcher's command line: --launcher, else $TILEDSL_LAUNCHER, else "" (none given)."""
    return args.launcher or os.environ.get("TILEDSL_LAUNCHER", "")


def _mpiexec() -> str:
    """The mpiexec of the MPI that mpi4py was installed with (the mpich wheel), else PATH's."""
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else "mpiexec"


def _forwarded(argv: list, program: str) -> list:
    """The run options for the driver: argv without the command, the program (and a ``--`` before it,
    which a driver refuses), --np and --launcher."""
    rest, skip = [], False
    for index, item in enumerate(argv):
        if skip:
            skip = False
        elif item in ("run", program, "--") and index <= argv.index(program):
            continue
        elif item in ("--np", "--launcher"):
            skip = True
        elif not item.startswith(("--np=", "--launcher=")):
            rest.append(item)
    return rest


def _cached_driver(path: str):
    """The cached driver of the program at ``path``, its check's diagnostics printed (every run shows them)."""
    from ..driverload import compile_cached

    compiled = compile_cached(path)
    if compiled.report:
        print(compiled.report, file=sys.stderr)
    if compiled.driver is None:
        raise NotCompiled(compiled.first_error)
    return compiled.driver


if __name__ == "__main__":
    sys.exit(process_status(main()))
