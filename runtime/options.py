"""A run's options: the :class:`Options` record and the command line that fills it.

The same options serve a driver run as a script, ``tiledsl run`` and ``explain``
(sizes and tuning only); they are checked here once, so that a bad value is a
one-line :class:`UsageError` before anything is sized or started.
"""
from __future__ import annotations

import argparse
import decimal
import difflib
import math
import os
import pathlib
import re
import shlex
import sys
from dataclasses import dataclass, field

from ..language import TILING_SETTINGS
from . import priorities
from .broadcast import CHOICES, TREE_FROM_RANKS
from .distribution import parse_ratio
from .watchdog import FLOOR_SECONDS, TASK_FACTOR, TICK_SECONDS
from .world import UsageError

#: the tile settings of each kind of tiling (a program's own parameter may take another kind's name)
TILE_SETTINGS = ("nb", "B", "b", "s")  # every kind's: --nb, --B, --b, --s


def tile_values(params: dict, tiling: str) -> dict:
    """The settings of a ``tiling`` kind of tiling that ``params`` gives values."""
    return {name: params[name] for name in TILING_SETTINGS[tiling] if params.get(name) is not None}
EXIT_CODES = ("exit status: 0 success; 1 a program error (a failed kernel, a failed check, non-finite "
              "values in a matrix, a rank lost); 2 a usage error; 3 an internal error of tiledsl; "
              "128+N stopped by signal N")


#: the commands whose --json line a usage error is said in too
JSON_COMMANDS = ("run", "bench", "explain", "simulate", "tune")


class SuggestingParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line, and whose error for a misspelled option
    suggests the closest one (``--chekc``: did you mean --check?), looking in the subcommand's
    options too. Options are not abbreviated: ``tiledsl run`` passes its options on to the driver
    by name, and an abbreviation means another option once one with that prefix is added."""

    def __init__(self, *args, program: str | None = None, ranks: int | None = None, **kwargs):
        """``program`` and ``ranks``: what a driver's parser knows before it reads its options, for
        the failure object of a usage error with ``--json``."""
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.program, self.ranks = program, ranks
        self.not_taken: dict = {}  # an option of other commands that this one refuses -> why (said with its error)
        self.register("action", None, StoreOnce)  # every option of one value, of every command and driver
        self.register("action", "store", StoreOnce)

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)
        self.stored = {}  # dest -> value of the options given so far (StoreOnce)
        return super().parse_known_args(args, namespace)

    def _print_message(self, message, file=None):
        # argparse drops a write that fails: --help to a reader that left (| head) would end 0
        if message:
            (file or sys.stderr).write(message)

    def error(self, message: str):
        unknown = [word.partition("=")[0] for word in message.split() if word.startswith("-")]
        known = self._known_options()
        given = getattr(self, "_given", [])
        after_dashes = given[given.index("--") + 1:] if "--" in given else []
        if "unrecognized arguments" in message and any(word in after_dashes for word in unknown):
            unknown = []  # the options are right; where they stand is not
            message += " (after '--' every word is a file name: give the options before '--')"
        for word in unknown if "unrecognized arguments" in message else ():
            if word == "--np" and "--np" not in known:
                message += self._np_hint(known)
                break
            why = self._not_taken(word)
            if why:
                message += f" ({why})"
                break
            # compared without their dashes, which every option shares (--bogus is not --gpus)
            names = {option.lstrip("-"): option for option in known}
            extended = [name for name in names if name.startswith(word.lstrip("-"))]  # an abbreviation
            close = extended if len(extended) == 1 else difflib.get_close_matches(word.lstrip("-"), list(names), n=1,
                                                                                   cutoff=0.7)
            if close:
                message += f" (did you mean {names[close[0]]}?)"
                break
        message += self._dash_value_hint(message) + self._dash_name_hint(message, known)
        message = self._misplaced_options() or message
        command = self._subcommand()
        helped = self.prog if command is None else f"{self.prog} {command[0]}"
        said = f"{message} (see {helped} --help)"
        json_command = self._json_failure_of()
        piped = None
        if json_command is not None:  # a script reading --json's line hears of a usage error too
            from .reporting import failure_line_out, json_text

            piped = failure_line_out(json_text({**self._failure_fields(json_command), "error": said}))
        self.exit(piped or 2, f"{self.prog}: error: {said}\n")

    def _failure_fields(self, command: str) -> dict:
        """The failure object's fields for ``command``, from the options read before the error, as a
        failure after them gives them: run's ``np`` (1 by default, null where it is not a number),
        simulate's ``--nodes`` where given."""
        from .reporting import failure_json

        subcommand = self._subcommand()
        stored = {**getattr(self, "stored", {}), **(getattr(subcommand[1], "stored", {}) if subcommand else {})}
        if command == "run":
            np_given = any(word == "--np" or word.startswith("--np=") for word in getattr(self, "_given", []))
            return failure_json(self.program, stored.get("n"), stored.get("np", None if np_given else self.ranks or 1),
                                names_ranks=True)
        return failure_json(self.program, stored.get("n"), stored.get("nodes") if command == "simulate" else None)

    def _json_failure_of(self) -> str | None:
        """The command (``run`` for a driver's) when the command line is one of :data:`JSON_COMMANDS`
        with ``--json`` before any ``--``: its failure object is due on stdout."""
        given = getattr(self, "_given", [])
        given = given[:given.index("--")] if "--" in given else given
        if "--json" not in given:
            return None
        command = self._subcommand()
        name = command[0] if command is not None else self.prog.rpartition(" ")[2]
        if name in JSON_COMMANDS:
            return name
        return "run" if self._subparsers is None and " " not in self.prog else None  # a driver's

    def _misplaced_options(self) -> str | None:
        """Options given before the command (``tiledsl --json run ...``), which takes them: the command
        line with them after it; None when none are."""
        command = self._subcommand()
        given = getattr(self, "_given", [])
        if command is None:
            return None
        at = given.index(command[0])
        before, after = given[:at], given[at + 1:]
        if not any(word.startswith("-") and word not in self._option_string_actions for word in before):
            return None
        end = after.index("--") if "--" in after else len(after)  # after '--', options would be file names
        return "options go after the command: " + shlex.join([self.prog, command[0], *after[:end], *before,
                                                               *after[end:]])

    def _dash_value_hint(self, message: str) -> str:
        """argparse takes a value starting with '-' (``--gpu-memory -5M``) for an option: say how
        to give it."""
        option = re.match(r"argument ((?:-\w|--[\w-]+)(?:/--[\w-]+)?): expected one argument", message)
        given = getattr(self, "_given", [])
        spelling = next((word for word in option[1].split("/") if word in given), None) if option else None
        if spelling is None:
            return ""
        after = given[given.index(spelling) + 1:given.index(spelling) + 2]
        if not after or not after[0].startswith("-"):
            return ""
        return f" (a value starting with '-' is given as {spelling}={after[0]})"

    def _dash_name_hint(self, message: str, known: list) -> str:
        """A file named with a leading '-' (``-p.tile``) is taken for an option: say how to name it."""
        if "arguments are required" not in message:
            return ""
        named = [word for word in getattr(self, "_given", []) if word.startswith("-") and word != "--"
                 and word.partition("=")[0] not in known and word.lower().endswith((".tile", ".py"))]
        if not named:
            return ""
        return f" (a file whose name starts with '-' is given as ./{named[0]}, or after '--')"

    def _np_hint(self, known: list) -> str:
        """Where the ranks of a command that takes no ``--np`` come from."""
        if self._subparsers is None:  # a compiled driver
            return " (a driver runs on the ranks its launcher starts: mpiexec -n N python DRIVER.py)"
        if "--nodes" in known:
            return " (a simulated run's ranks: --nodes N, or --grid PxQ)"
        if "--grid" in known:
            return " (this command starts no ranks: give the process grid as --grid PxQ)"
        return " (only tiledsl run starts ranks)"

    def _not_taken(self, option: str) -> str | None:
        """Why the command given does not take ``option``, which others do (:attr:`not_taken`)."""
        command = self._subcommand()
        return (command[1] if command is not None else self).not_taken.get(option)

    def _known_options(self) -> list:
        options = list(self._option_string_actions)
        command = self._subcommand()
        if command is not None:
            options += list(command[1]._option_string_actions)
        return [option for option in options if option.startswith("--")]

    def _subcommand(self) -> tuple | None:
        """``(name, parser)`` of the subcommand given on the command line, if any."""
        given = getattr(self, "_given", [])
        for action in self._subparsers._group_actions if self._subparsers is not None else ():
            for name, parser in getattr(action, "choices", {}).items():
                if name in given:
                    return name, parser
        return None


class StoreOnce(argparse._StoreAction):
    """argparse's ``store`` for an option that takes one value: given twice with two values, which
    one was meant cannot be told (``--n 1000 ... --n 200`` ran 200), so it is a usage error."""

    def __call__(self, parser, namespace, values, option_string=None):
        stored = getattr(parser, "stored", {})
        if option_string is not None and self.dest in stored and stored[self.dest] != values:
            parser.error(f"{option_string} is given twice ({stored[self.dest]}, then {values}): give it once")
        stored[self.dest] = values
        super().__call__(parser, namespace, values, option_string)


class Params:
    """The program's integer parameters: ``n``, the tile sizes and its own ``param`` names."""

    def __init__(self, values: dict):
        # a dict of their own: no program name (as_dict, __class__) can replace an attribute
        self._values = dict(values)

    def __getattr__(self, name: str) -> int:
        """``p.n``, ``p.nb``... for the runtime; drivers index ``p["name"]``."""
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, name: str) -> int:
        return self._values[name]

    def __setitem__(self, name: str, value: int) -> None:
        self._values[name] = value

    def as_dict(self) -> dict:
        return dict(self._values)


@dataclass(frozen=True)
class Spelling:
    """How an interface names its settings, for the messages: the command line's options
    (``--n``, ``--set NAME=VALUE``, ``--input`` files) or the Python API's arguments (``n=``,
    ``params={...}``, arrays)."""

    api: bool
    n: str  # "n=" or "--n"
    params: str  # "params=" or "--set"
    inputs: str  # "the inputs" (arrays, files the program loads) or "the input files"
    one_input: str  # "input" or "input file"
    param_form: str  # how one parameter is given, with {name} and {value}
    input_form: str  # how the input matrices are given, with {names}
    tile_form: str  # how one tile setting is given, with {name}
    untuned: str  # how the tuned values are ignored: "--no-tune" or "tuned=False"

    def param(self, name: str, value=None) -> str:
        """``--set NAME=VALUE`` or ``params={'NAME': VALUE}`` (``...`` for the value when None): the
        command line's text as typed, the API's value as Python writes it."""
        shown = "..." if value is None else repr(value) if self.api and isinstance(value, str) else long_number(value)
        return self.param_form.format(name=name, value=shown)

    def tile(self, name: str) -> str:
        """``--nb`` or ``tiles={'nb': ...}``: how a tile setting is given."""
        return self.tile_form.format(name=name)

    def tile_valued(self, name: str, value: int) -> str:
        """A tile setting given ``value``: ``--b 100``, or ``tiles={'b': 100}``."""
        return self.tile(name).replace("...", str(value)) if self.api else f"{self.tile(name)} {value}"

    def setting(self, name: str) -> str:
        """A setting by its name in run(): ``gpu_memory``, or the option ``--gpu-memory``."""
        return name if self.api else "--" + name.replace("_", "-")

    def given(self, name: str, text: str) -> str:
        """A setting given a value written as ``text``: ``--gpu-ratio 0:1``, or ``gpu_ratio="0:1"``."""
        return self.valued(name, f'"{text}"' if self.api else text)

    def valued(self, name: str, value: str) -> str:
        """A setting given ``value`` as the interface writes it: ``--watchdog 0``, or ``watchdog=0``."""
        return f"{name}={value}" if self.api else f"{self.setting(name)} {value}"

    def flag(self, name: str) -> str:
        """A flag given: ``check_finite=True``, or ``--check-finite``."""
        return f"{name}=True" if self.api else self.setting(name)

    def switched_on(self, name: str) -> str:
        """An on/off setting turned on: ``host_takes=True``, or ``--host-takes on``."""
        return f"{name}=True" if self.api else f"{self.setting(name)} on"


API = Spelling(True, "n=", "params=", "the inputs", "input", "params={{{name!r}: {value}}}",
               "an input array ({names})", "tiles={{{name!r}: ...}}", "tuned=False")
COMMAND_LINE = Spelling(False, "--n", "--set", "the input files", "input file", "--set {name}={value}",
                        "--input NAME=FILE.npy for one of {names}", "--{name}", "--no-tune")


@dataclass
class Options:
    """How to run: sizes, tile settings, workers and files (the command line's content)."""

    n: int | None  # None until the inputs' shapes give it (:mod:`.fitting`)
    tiles: dict = field(default_factory=dict)  # nb or B, b, s given explicitly
    sets: dict = field(default_factory=dict)  # --set NAME=VALUE for the program's params
    workers: int | None = None
    window: int | None = None  # default: 4096 on one rank, 32 per worker (at least 64) on several
    seed: int | None = None  # the generated inputs' seed; None: not given, DEFAULT_SEED
    inputs: dict = field(default_factory=dict)  # matrix name -> .npy path
    outputs: dict = field(default_factory=dict)
    check: bool = False
    watchdog: float | None = None
    progress: bool = False
    grid: str | None = None  # "PxQ" on an MPI run
    gpus: int = 0  # GPUs per rank
    check_finite: bool = False
    allow_nonfinite: bool = False  # NaN or infinite values left in a matrix are results, not a failure
    trace: str | None = None  # path of the trace file to write
    gpu_backend: str = "emulated"
    gpu_memory: int | None = None  # bytes each GPU may hold (default: what it has free); beyond: out of core
    gpu_streams: int = 1  # compute streams per GPU (.streams)
    broadcast: str = "auto"  # how a tile version reaches the ranks that read it (.broadcast.broadcast_for)
    host_takes: bool | None = None  # idle CPU workers take GPU tasks (.heteroprio); None: as tuned, else off
    host_speeds: dict | None = None  # the kernel rates it estimates with (default: this machine's tune cache)
    bound_rates: dict | None = None  # a tuned run's kernel rates, for its summary's kernel upper bound
    time_kernels: bool = False  # measure each kernel's rate in the run (RunResult.kernel_rates: tune)
    priorities: str = "program"  # "program", "auto" (bottom levels) or "none" (see runtime.priorities)
    gpu_ratio: tuple | None = None  # (H, G): host/GPU block columns per cycle, uniform tiles (default 1:1)
    sources: dict = field(default_factory=dict)  # tile setting or "gpu_ratio" -> where its value came from
    spelling: Spelling = COMMAND_LINE  # how the messages name the settings


SHAPE_INPUT_HELP = ("matrix NAME's .npy file: without --n, its shape gives the size and the parameters "
                    "(only the shape is read); repeat for several matrices")


TUNED_DEFAULT = "this machine's tuned one, see tiledsl tune; else the program's"


def add_size_arguments(parser: argparse.ArgumentParser, input_help: str = SHAPE_INPUT_HELP,
                       tile_default: str = TUNED_DEFAULT, tiling: str | None = None) -> None:
    """SIZE = --n N [--nb NB | --B B --b b --s S], --set for the program's parameters, and
    --input, whose files' shapes give the size without --n (``input_help`` says what else the
    command does with them, ``tile_default`` where a tile setting not given comes from). With
    the program's ``tiling`` known (a driver's), the help lists its settings only; the others are
    still read, for the run to say they do not apply."""
    parser.add_argument("--n", type=int, help="matrix order (default: from the shapes of the --input files "
                                               "and of the files the program loads)")
    for name in TILE_SETTINGS:
        shown = tiling is None or name in TILING_SETTINGS[tiling]
        parser.add_argument(f"--{name}", type=int, metavar=name,
                            help=f"tile setting {name} (default: {tile_default})" if shown else argparse.SUPPRESS)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="set one of the program's own parameters")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help=input_help)


def add_run_arguments(parser: argparse.ArgumentParser, tiling: str | None = None) -> None:
    """The run options shared by drivers (``tiling``: their program's) and ``tiledsl run`` (DESIGN §8)."""
    add_size_arguments(parser, "read matrix NAME from a .npy file (64-, 32- or 16-bit floats, or integers up "
                               "to 2**53; any order) instead of generating it; repeat for several matrices",
                       tiling=tiling)
    parser.add_argument("--grid", metavar="PxQ", help="process grid of an MPI run (default: the squarest; "
                        "one process row for a program writing columns of tiles)")
    parser.add_argument("--gpus", type=int, default=0, metavar="G", help="GPUs per rank (default 0)")
    parser.add_argument("--gpu-backend", choices=["emulated", "cupy"],
                        help="GPU backend: 'emulated' (numpy device memory, explicit copies; CI) or "
                             "'cupy' (real NVIDIA GPUs through CuPy: pip install -e '.[gpu]'); default emulated, "
                             "which the summary says")
    parser.add_argument("--gpu-memory", metavar="SIZE", help="memory each GPU may hold, e.g. 20G, 512M or 1.5GiB "
                                                             "(default: what it has free); a run whose GPU "
                                                             "tiles exceed it goes out of core: they stay on "
                                                             "the host and each GPU caches this much of them")
    parser.add_argument("--gpu-streams", type=int, metavar="S", help="compute streams per GPU (default 1): "
                        "with several, kernels of independent tasks may run at once on a GPU, each waiting "
                        "only for the kernels it depends on (CUDA events)")
    add_tuning_arguments(parser)
    parser.add_argument("--workers", type=int, help="CPU worker threads per rank (default: the cores "
                                                        "a rank has, less one for MPI on several ranks)")
    parser.add_argument("--window", type=int, help="task window size (default: 4096 on one rank without "
                                                      "GPUs; otherwise 32 per worker and GPU and at least 64, "
                                                      "which bounds the copies of tiles held at once)")
    parser.add_argument("--priorities", choices=priorities.MODES, default="program",
                        help="task priorities: the program's own, derived from the task graph when it "
                             "gives none (program, the default); always derived (auto); none")
    parser.add_argument("--broadcast", choices=CHOICES, default="auto",
                        help="how a tile version reaches the ranks that read it: each from its owner "
                             "(direct), or along a binomial tree of them, each forwarding it on (tree: the "
                             f"owner sends log2 of the readers' messages); auto, the default: tree from "
                             f"{TREE_FROM_RANKS} ranks")
    parser.add_argument("--host-takes", choices=["on", "off"],
                        help="with GPUs: a CPU worker with nothing to do takes a ready GPU task it would "
                             "finish no later than the GPU (its tiles copied to the host and back), those the "
                             "GPU accelerates least first, as HeteroPrio does; times are estimated from the "
                             "kernel rates `tiledsl tune` measured (read even with --no-tune); not out of "
                             "core (default: on, at gpu-ratio 0:1, where tune found it fastest; else off)")
    parser.add_argument("--seed", type=int, help=f"seed of the generated inputs (default {DEFAULT_SEED})")
    parser.add_argument("--output", action="append", default=[], metavar="NAME=FILE.npy",
                        help="write matrix (or workspace) NAME to a .npy file after the run; the file is "
                             "written beside its target and renamed into place only once the run succeeded "
                             "on every rank, so a failed or interrupted run leaves an existing file as it was")
    parser.add_argument("--check", action="store_true", help="verify the result (backward error)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    add_watchdog_argument(parser)
    parser.add_argument("--trace", type=trace_file, metavar="TRACE.json",
                        help="write a Chrome/Perfetto trace of the run "
                                                                 "(all ranks) and report its bounds")
    add_finite_arguments(parser)


def add_watchdog_argument(parser: argparse.ArgumentParser) -> None:
    """--watchdog (run, and bench and tune, whose runs have the same watchdog)."""
    parser.add_argument("--watchdog", type=watchdog_seconds, metavar="SECONDS",
                        help="report a run where no task completes for SECONDS, or a rank that waits that "
                             f"long (at least {LEAST_COLLECTIVE_SECONDS:g} s) for the others at start-up, 2.5 times "
                             "SECONDS and 15 s once the run began; "
                             f"0 disables it, from {TICK_SECONDS:g} to {MOST_WATCHDOG_SECONDS:.0f} (default: the "
                             f"larger of {FLOOR_SECONDS:g} s and {TASK_FACTOR:g} times the longest task so far)")


def add_finite_arguments(parser: argparse.ArgumentParser) -> None:
    """--check-finite and --allow-nonfinite: what NaN or infinite values do to a run (run and bench)."""
    parser.add_argument("--check-finite", action="store_true",
                        help="stop at the first task that writes a NaN or an infinity, or at an input "
                             "(--input, an array) holding one (without it, the summary counts the non-finite "
                             "values left in each matrix, and the run fails)")
    parser.add_argument("--allow-nonfinite", action="store_true",
                        help="NaN or infinite values left in a matrix are results (a shortest path's "
                             "'unreachable'): the summary still counts them, but the run does not fail for them")


def set_finite_options(options: Options, args: argparse.Namespace) -> None:
    """``options``' check_finite and allow_nonfinite from the arguments of :func:`add_finite_arguments`;
    a usage error when both are given."""
    options.check_finite, options.allow_nonfinite = args.check_finite, args.allow_nonfinite
    if options.allow_nonfinite and options.check_finite:
        raise UsageError("--allow-nonfinite and --check-finite contradict each other: give one")


def trace_file(text: str) -> str:
    """``--trace``'s file: not ``-``, which stdout (the summary's) cannot stand for, nor a chart's name (the trace
    is JSON, which ``tiledsl plot`` draws)."""
    if not text.strip():  # (tester u83f: --trace " " wrote a file named " ")
        raise argparse.ArgumentTypeError("no file name given")
    if text == "-":
        raise argparse.ArgumentTypeError("a trace is written to a file, not to stdout: name one, e.g. --trace "
                                         "trace.json")
    path = pathlib.PurePath(text)
    if path.suffix.lower() in _CHART_SUFFIXES:
        json_name = path.with_suffix(".json")
        raise argparse.ArgumentTypeError(f"a trace is written as JSON, which tiledsl plot draws: name it {json_name}, "
                                         f"then tiledsl plot {json_name} -o {text}")
    if path.suffix.lower() in _ARRAY_SUFFIXES:  # (testers u83f, u83i: written, it was JSON that numpy.load refused)
        raise argparse.ArgumentTypeError(f"a trace is written as JSON, not as its {path.suffix} suffix says (numpy's "
                                         f"arrays): name it {path.with_suffix('.json')}")
    return text


_CHART_SUFFIXES = {".png", ".svg", ".pdf", ".jpg", ".jpeg", ".gif", ".html"}  # what a trace is drawn as
_ARRAY_SUFFIXES = {".npy", ".npz"}  # what --output writes, and numpy reads


#: The largest --watchdog: the limits derived from it (three times it, deadlines on the clock) stay
#: within what the clock and the waits take; longer than any run that makes progress
MOST_WATCHDOG_SECONDS = 1e6
#: What --watchdog (and the API's watchdog=) takes, as a refusal says it
WATCHDOG_RANGE = (f"must be 0 (off) or a number of seconds from {TICK_SECONDS:g} (how often the watchdog looks) "
                  f"up to {MOST_WATCHDOG_SECONDS:.0f} (11.6 days)")


def watchdog_seconds(text: str) -> float:
    """``--watchdog``'s value: seconds, 0 (no watchdog) to :data:`MOST_WATCHDOG_SECONDS`."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    # 1e-400 reads as 0.0: it is no request to turn the watchdog off
    if not valid_watchdog(seconds) or seconds == 0 and decimal.Decimal(text.strip()) != 0:
        raise argparse.ArgumentTypeError(f"{WATCHDOG_RANGE}, got {text!r}")
    return seconds


def valid_watchdog(seconds: float) -> bool:
    """Whether ``seconds`` is a watchdog limit a run takes (NaN is not)."""
    return seconds == 0 or TICK_SECONDS <= seconds <= MOST_WATCHDOG_SECONDS  # below a tick, one fired at random


#: The least a rank waits for the others at start-up and at a collective, whatever --watchdog
#: says: ranks start unevenly (imports, a loaded node), and heartbeats come every 0.5 s at least
LEAST_COLLECTIVE_SECONDS = 5.0


def collective_limit(watchdog: float | None) -> float | None:
    """How long a rank waits for the others at start-up and at a collective: the watchdog's
    limit, at least :data:`LEAST_COLLECTIVE_SECONDS` (the automatic limit's floor,
    :data:`~.watchdog.FLOOR_SECONDS`, when not given), None (for ever) when it is 0."""
    if watchdog is None:
        return FLOOR_SECONDS
    return max(watchdog, LEAST_COLLECTIVE_SECONDS) if watchdog else None


def add_tuning_arguments(parser: argparse.ArgumentParser) -> None:
    """--gpu-ratio and --no-tune (run and explain)."""
    parser.add_argument("--gpu-ratio", metavar="H:G",
                        help="uniform tiles on GPUs: H block columns to the host for every G to each GPU, "
                             "in each cycle of a rank's columns; H alone is H:1 (default: tuned, else 1:1)")
    parser.add_argument("--no-tune", action="store_true",
                        help="ignore this machine's tuned tile sizes and ratio (tiledsl tune)")


def size_options(args: argparse.Namespace, keep_on_host: str = "leave out --gpus") -> Options:
    """Options holding only the size, tile settings, parameters and ``--input`` files of parsed
    arguments (the files' matrix names are checked with the program's, :func:`.fitting.fit_files`).
    ``keep_on_host`` is the command's way to keep every tile on the host, advised for ``--gpu-ratio H:0``."""
    tiles = {k: getattr(args, k) for k in TILE_SETTINGS if getattr(args, k) is not None}
    options = Options(n=args.n, tiles=tiles, sets=set_texts(args.set), inputs=_paths(args.input, "--input"))
    if getattr(args, "gpu_ratio", None) is not None:
        try:
            options.gpu_ratio = parse_ratio(args.gpu_ratio, keep_on_host)
        except ValueError as error:
            raise UsageError(f"--gpu-ratio: {error}") from None
        if getattr(args, "gpus", 0) == 0:  # None: the command knows its GPUs later (simulate: a machine file's)
            raise UsageError("--gpu-ratio needs --gpus G (at least 1 GPU per rank)")
    return options


def options_from(args: argparse.Namespace, matrix_names, workspace_names=(), params=()) -> Options:
    """Options from parsed arguments; a :class:`UsageError` for bad NAME=VALUE pairs.

    ``--output`` may name a matrix or a workspace, ``--input`` a matrix only
    (workspaces start as zeros); ``params``, the program's, are named where a file is given one."""
    options = size_options(args)
    options.outputs = _paths(args.output, "--output")
    check_file_names(matrix_names, workspace_names, options.inputs, options.outputs, params)
    check_workers(args.workers)
    check_gpus(args.gpus)
    if args.window is not None and args.window < 1:
        raise UsageError(f"--window must be at least 1, got {args.window}")
    if args.gpu_streams is not None and args.gpu_streams < 1:
        raise UsageError(f"--gpu-streams must be at least 1, got {args.gpu_streams}")
    for flag, given in (("--gpu-memory", args.gpu_memory is not None), ("--host-takes on", args.host_takes == "on"),
                        ("--gpu-streams", args.gpu_streams is not None)):
        if given and not args.gpus:
            raise UsageError(f"{flag} needs --gpus G (at least 1 GPU per rank)")
    if args.seed is not None:
        check_seed(args.seed)
    options.workers, options.window, options.seed = args.workers, args.window, args.seed
    options.grid, options.gpus, options.gpu_backend = args.grid, args.gpus, args.gpu_backend or "emulated"
    options.check, options.watchdog = args.check, args.watchdog
    set_finite_options(options, args)
    options.trace = args.trace
    options.gpu_memory = None if args.gpu_memory is None else byte_size(args.gpu_memory, "--gpu-memory")
    options.gpu_streams = args.gpu_streams or 1
    options.priorities, options.broadcast = args.priorities, args.broadcast
    options.host_takes = None if args.host_takes is None else args.host_takes == "on"
    options.progress = not args.json
    return options


def run_warnings(program, args: argparse.Namespace) -> list:
    """What a run with these arguments should be told before it starts: options that
    will do nothing, or something other than the user may think."""
    warnings = []
    if args.check and program.check is None:
        warnings.append(f"program {program.name} declares no check: --check has nothing to verify")
    if 0 < args.gpus <= MAX_GPUS and args.gpu_backend is None:  # a count out of range is a usage error, said alone
        warnings.append(f"--gpus {args.gpus} with the emulated backend (numpy arrays standing in for GPUs); "
                        f"use --gpu-backend cupy for NVIDIA GPUs")
    warnings.append(unused_backend(args))
    return [warning for warning in warnings if warning]


def unused_backend(args: argparse.Namespace, without: str = "the run uses no GPU") -> str | None:
    """The warning for ``--gpu-backend`` (or ``--host-takes off``) given without ``--gpus`` (not an error:
    kept for scripts that vary --gpus alone), ``without`` saying what the command then does; None when
    neither is so given."""
    given = [f"--gpu-backend {args.gpu_backend}"] if args.gpu_backend is not None else []
    given += ["--host-takes off"] if getattr(args, "host_takes", None) == "off" else []
    if args.gpus == 0 and given:
        return f"{' and '.join(given)} {'does' if len(given) == 1 else 'do'} nothing without --gpus G: {without}"
    return None


def check_file_names(matrix_names, workspace_names, inputs, outputs, params=()) -> None:
    """A :class:`UsageError` for an ``--input`` that is not a matrix or an ``--output`` that
    is neither a matrix nor a workspace (one of the program's ``params`` said to be one)."""
    matrix_names, workspace_names = list(matrix_names), list(workspace_names)
    for name in inputs:
        if name in workspace_names:
            raise UsageError(f"--input {name}=...: {name} is a workspace, which starts as zeros; "
                             f"--input is for matrices (the program's: {', '.join(matrix_names) or 'none'})")
        if name not in matrix_names:
            said = _not_a_matrix(name, matrix_names, params, f"give --set {name}=VALUE")
            raise UsageError(f"--input {name}=...: {said}")
    everything = matrix_names + workspace_names
    for name in outputs:
        if name not in everything:
            said = _not_a_matrix(name, everything, params, "its value is in --json")
            raise UsageError(f"--output {name}=...: {said}")


def _not_a_matrix(name: str, matrices: list, params, instead: str) -> str:
    """Why a file's ``name`` is none of the program's ``matrices``; ``instead``: what to do of a
    parameter (give it with ``--set``, read it from ``--json``)."""
    if name in params:
        return f"{name} is a parameter, not a matrix: {instead}"
    return f"no matrix named {name} (the program has {', '.join(matrices) or 'none'})"


#: Seeds are 64-bit: a larger or negative one would stand for another silently.
SEEDS = 2 ** 64
DEFAULT_SEED = 42  # the seed of the generated inputs where none is given


#: the most CPU worker threads a rank may have: a thread each, started with every run
MAX_WORKERS = 1024


def check_workers(workers: int | None) -> None:
    """A usage error for a count of CPU workers below 1 or above :data:`MAX_WORKERS` (100,000
    threads took minutes to start for a run of ten tasks)."""
    if workers is not None and not 1 <= workers <= MAX_WORKERS:
        raise UsageError(f"--workers must be from 1 to {MAX_WORKERS} (this machine has {os.cpu_count() or 1} cores), "
                         f"got {workers}")


#: the most GPUs a run, a plan or a simulated node may have: an emulated GPU is a thread, and
#: 100,000 of them ended a run as "cannot start a thread" (a real node has a few)
MAX_GPUS = 1024


def check_gpus(gpus: int, name: str = "--gpus") -> None:
    """A usage error for a count of GPUs below 0 or above :data:`MAX_GPUS` (``name``: as the
    interface spells the setting)."""
    if not 0 <= gpus <= MAX_GPUS:
        raise UsageError(f"{name} must be from 0 to {MAX_GPUS}, got {gpus}")


def check_seed(seed: int) -> None:
    if not 0 <= seed < SEEDS:
        raise UsageError(f"--seed must be from 0 to 2^64 - 1, got {seed}")


def _pairs(items, flag: str) -> dict:
    """NAME -> VALUE of repeated ``flag NAME=VALUE`` options; a NAME given twice is a usage
    error (which one was meant cannot be told)."""
    pairs = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()  # "ib = 20": names have no spaces
        if not sep or not name or not value.strip():  # (tester u83f: "A= " came to the runtime as no file at all)
            raise UsageError(f"{flag} expects NAME=VALUE, got {item!r}{_missing_part(sep, name, value)}")
        if name in pairs and pairs[name] != value:
            raise UsageError(f"{flag} {name} is given twice ({name}={pairs[name]} and {name}={value})")
        pairs[name] = value
    return pairs


def _missing_part(sep: str, name: str, value: str) -> str:
    """What a NAME=VALUE pair lacks first, said after it (": no VALUE after the '='")."""
    if not sep:
        return ": no '='"
    if not name:
        return ": no NAME before the '='"
    return ": no VALUE after the '='"


def _paths(items, flag: str) -> dict:
    """NAME -> FILE of repeated ``flag NAME=FILE`` options, as they are written around an ``=`` that
    has spaces ("A = a.npy": the file a.npy, not " a.npy")."""
    return {name: path.strip() for name, path in _pairs(items, flag).items()}


def byte_size(text: str, flag: str) -> int:
    """Bytes from ``text``: a number with an optional K, M, G or T suffix (powers of 1024), also written as
    the messages write sizes, KiB, MiB, GiB or TiB (``3.62 KiB``)."""
    unit = text.rstrip()
    unit = unit[:-2] if unit[-2:].lower() == "ib" else unit
    scale = {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}.get(unit[-1:].upper(), 1)
    number = unit[:-1] if scale > 1 else text
    try:
        size = float(number) * scale
    except ValueError:
        raise UsageError(f"{flag}: {text!r} is not a size (bytes, or with a suffix K, M, G or T for powers "
                         f"of 1024, or KiB, MiB, GiB, TiB: e.g. 20G, 512M, 3.5GiB, 1000000)") from None
    if not math.isfinite(size):
        raise UsageError(f"{flag}: {text!r} is not a finite size")
    if not size >= 1:  # 0.5 would be 0 bytes
        raise UsageError(f"{flag} must be at least 1 byte, got {text!r}")
    return int(size)


def set_texts(items) -> dict:
    """NAME -> :class:`SetText` of repeated ``--set NAME=VALUE`` options."""
    return {name: SetText(value) for name, value in _pairs(items, "--set").items()}


class SetText(str):
    """The text of ``--set NAME=TEXT``, read only once its parameter's type is known
    (:func:`read_setting`)."""


def read_setting(text: SetText, default) -> int | float | str:
    """``--set``'s ``text`` read as the type of the parameter's ``default``: a char parameter's
    character as it is (``--set mode=2`` is the character 2), else a number, or the text itself
    where it is none (for :func:`.layout.make_params` to refuse)."""
    if isinstance(default, str):
        return str(text)
    number = read_number(text)
    return str(text) if number is None or isinstance(number, float) and not math.isfinite(number) else number


def long_number(value) -> str:
    """A number as a message shows it: a long one by its first and last digits and its length."""
    try:
        text = str(value)
    except ValueError:  # an integer past the 4,300 digits Python writes
        return f"an integer of some {int(abs(value).bit_length() * math.log10(2)) + 1} digits"
    return text if len(text) <= 24 else f"{text[:10]}...{text[-4:]} ({len(text.lstrip('-'))} digits)"


_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")
_DECIMAL = re.compile(r"\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*|\s*[+-]?(inf|infinity|nan)\s*",
                      re.IGNORECASE)


def read_number(text: str) -> int | float | None:
    """An integer, or a number with a fraction (inf, nan and 1e999 among them), written as a .tile
    program writes one; None for other text (Python's own readers also take ``1_0``, 10, and digits
    of other scripts)."""
    if _INTEGER.fullmatch(text):
        try:
            return int(text)
        except ValueError:  # past Python's 4,300 digits: as far past any range, without reading them
            digits = text.strip().lstrip("+-")
            return (-1 if text.strip().startswith("-") else 1) * 10 ** (len(digits) - 1)
    return float(text) if _DECIMAL.fullmatch(text) else None


