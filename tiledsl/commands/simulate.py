"""``tiledsl simulate``: predict a run on N ranks without running its kernels (issue 15).

    tiledsl simulate PROGRAM --n N [--nb NB | --B B --b b --s S] --nodes P [--gpus G]
                     [--machine FILE|NAME] [--grid PxQ] [--json] [--trace TRACE.json]

Without ``--n``, the size and the parameters come from the shapes of the ``--input
NAME=FILE.npy`` files (their headers only: no matrix is read) and of the files the
program loads, as ``run`` takes them.

The simulation itself is :mod:`tiledsl.simulation`; this module reads the command
line, picks the machine (``--machine``, else this machine: the ``local`` machine file
with ``tiledsl tune``'s rates, and tuned tile sizes as ``run`` uses them), and prints
the summary: as text, or as one JSON line shaped like ``run --json``'s. ``--trace``
writes the simulated run in ``run --trace``'s format, which ``tiledsl plot`` draws.
"""
from __future__ import annotations

import json
import sys
from dataclasses import replace

from . import PROGRAM_HELP
from .files import replacing
from ..runtime.broadcast import CHOICES
from ..runtime.distribution import parse_grid
from ..runtime.iterations import SECONDS_PER_TASK, count_text, duration_text, iteration_bound
from ..runtime.layout import make_params, placement, use_tuned
from ..runtime.tuning import warn_once
from ..runtime.fitting import check_files, fit_files
from ..runtime.options import add_size_arguments, add_tuning_arguments, check_gpus, size_options, trace_file
from ..runtime.outputs import check_output_paths
from ..runtime.priorities import MODES
from ..runtime.reporting import json_text, rate_text, seconds_text, settings_text
from ..runtime.resources import bytes_text
from ..runtime.trace import chrome_trace, compute_lanes
from ..runtime.userkernels import kernel_module_digest, program_files
from ..runtime.world import UsageError


def add_arguments(parser) -> None:
    from ..simulation.machine import shipped

    parser.add_argument("file", metavar="PROGRAM", help=PROGRAM_HELP)
    parser.add_argument("--nodes", type=int, metavar="P", help="ranks (one per node on a cluster's machine file; "
                                                                "default: those of --grid, else 1)")
    parser.add_argument("--grid", metavar="PxQ", help="process grid (default: run's, the squarest, one process "
                                                       "row for a program writing columns of tiles, one column "
                                                       "for rows, else the next that gives every rank tiles); "
                                                       "alone, it gives the ranks")
    parser.add_argument("--gpus", type=int, metavar="G", help="GPUs per rank (default: the machine file's; "
                                                              "0 for this machine); with a machine file, "
                                                              "uniform tiles are dealt to host and GPUs at the "
                                                              "ratio of their gemm rates unless --gpu-ratio is given")
    parser.add_argument("--gpu-backend", default="emulated", choices=["emulated", "cupy"],
                        help="whose tuned rates to use on this machine (default emulated)")
    parser.add_argument("--machine", metavar="FILE|NAME",
                        help=f"a machine file, or a shipped one ({', '.join(shipped())}); default: this "
                             "machine, with the kernel rates tiledsl tune measured")
    parser.add_argument("--workers", type=int, help="CPU workers per rank (default: as run chooses on the "
                                                     "machine's cores)")
    parser.add_argument("--window", type=int, help="task window per rank (default: as run)")
    parser.add_argument("--priorities", choices=MODES, default="program", help="as for run")
    parser.add_argument("--broadcast", choices=CHOICES, default="auto", help="as for run")
    parser.add_argument("--host-takes", choices=["on", "off"],
                        help="as for run, the machine's kernel rates and PCIe link estimating the times "
                             "(default: as run would, on this machine; else off)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    parser.add_argument("--trace", type=trace_file, metavar="TRACE.json",
                        help="write the simulated run's trace (tiledsl plot draws it)")
    add_tuning_arguments(parser)
    add_size_arguments(parser, tile_default="without --machine, this machine's tuned one, see tiledsl tune; "
                                            "else the program's")


def run(args, driver) -> int:
    from ..simulation import load, simulate, this_machine

    nodes = _nodes(args)
    if args.gpus is not None:
        check_gpus(args.gpus)
    for name in ("workers", "window"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UsageError(f"--{name} must be at least 1, got {getattr(args, name)}")
    program = driver.PROGRAM
    machine = None if args.machine is None else load(args.machine)
    options = size_options(args, keep_on_host="give --gpus 0")  # without --gpus, a machine file's GPUs are simulated
    options.gpus = args.gpus if args.gpus is not None else machine.gpus if machine else 0
    if args.gpus is None and options.gpus:
        options.sources["gpus"] = f"machine file {machine.source}"
    # a machine file's GPUs are its own, not this machine's backend
    options.gpu_backend = args.gpu_backend if args.machine is None else None
    options.workers, options.window = args.workers, args.window
    options.priorities, options.broadcast = args.priorities, args.broadcast
    options.host_takes = None if args.host_takes is None else args.host_takes == "on"
    for flag, given in (("--gpu-ratio", options.gpu_ratio is not None), ("--host-takes on", options.host_takes)):
        if given and not options.gpus:
            raise UsageError(f"{flag} needs GPUs (--gpus G, or a machine file that has them)")
    if machine is None:  # this machine: the tile sizes run would take from the tune cache
        use_tuned(driver, options, not args.no_tune, warn=warn_once)
    fit_files(driver, options)  # no --n: the size of the --input files and of the files the program loads
    check_files(driver, options)  # as run refuses them
    params = make_params(driver, options)  # a broken requirement is said before the machine's rates are looked for
    # the tiles made as run makes them: a bad tile size is said before this machine's rates are looked for too
    grid, _, matrices = placement(driver, params, args.grid, nodes, 0, options.gpus, options.gpu_ratio)
    _warn_of_a_long_simulation(driver, matrices, params)
    if machine is None:
        machine = this_machine(program, options.gpus, args.gpu_backend, args.file,
                               lambda helpers: kernel_module_digest(program, driver, helpers))
    if args.trace is not None:  # before the simulation, which may take minutes; as run refuses it
        check_output_paths(replace(options, outputs={}, trace=args.trace), program_files(program, driver))
    progress = _Progress() if not args.json and sys.stderr.isatty() else None
    try:
        result = simulate(driver, options, nodes, grid, machine, trace=args.trace is not None, progress=progress,
                          ratio_from_rates=args.machine is not None, source=args.file)
    finally:
        if progress is not None:
            progress.clear()
    events = result.pop("events")
    if args.machine is None and options.gpus and args.gpu_backend == "emulated":
        result["notes"].append("the GPUs are emulated here: threads that share this machine's cores with the CPU "
                               "workers, which the simulation models as devices of their own (at the emulated GPUs' "
                               "tuned rates), so its prediction is above what this machine gives")
    if args.trace is not None:
        about = {"program": program.name, "kernels": program.kernels, "n": result["n"], **result["tiles"],
                 **result["params"], "ranks": nodes,
                 "workers": result["workers"], "gpus": result["gpus"], "seconds": result["seconds"],
                 "simulated": machine.name}
        try:
            with replacing(args.trace) as temporary, open(temporary, "w") as target:
                json.dump(chrome_trace(events, about, compute_lanes(result["workers"], result["gpus"])), target)
        except OSError as error:
            raise UsageError(f"cannot write {args.trace}: {error.strerror or error}") from None
    # shaped like run --json's verdict: a simulation checks nothing and runs no kernel that could fail
    print(json_text({**result, "ok": True, "passed": None, "errors": []}) if args.json else render(result))
    return 0


def _nodes(args) -> int:
    """The simulated ranks: ``--nodes``, else those of ``--grid`` (as explain takes them), else 1."""
    if args.nodes is not None and args.nodes < 1:
        raise UsageError(f"--nodes must be at least 1, got {args.nodes}")
    if args.grid is None:
        return args.nodes or 1
    try:
        rows, cols = parse_grid(args.grid)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if args.nodes is not None and rows * cols != args.nodes:  # the run's message would say how to start ranks
        raise UsageError(f"--grid {rows}x{cols} has {rows * cols} rank(s) but --nodes is {args.nodes}: "
                         f"give --nodes {rows * cols}, or leave --nodes out")
    return rows * cols


#: loop iterations past which simulate says, before it starts, how long it may take
LONG_SIMULATION = 10 ** 7


def _warn_of_a_long_simulation(driver, matrices: dict, params) -> None:
    """A note, before a simulation whose loop nest runs up to :data:`LONG_SIMULATION` iterations or
    more, of the time it may take (a Cholesky of 10**8 tasks took hours, without a word)."""
    found = iteration_bound(driver, matrices, params)
    if found is None or found.total < LONG_SIMULATION:
        return
    print(f"tiledsl: note: the loop nest runs up to {count_text(found.total)} iterations: at some "
          f"{SECONDS_PER_TASK * 1e6:.0f} µs a task, the simulation may take up to {duration_text(found.total)} (a "
          f"smaller --n or larger tiles simulate faster; Ctrl-C stops it)", file=sys.stderr, flush=True)


class _Progress:
    """The tasks walked so far, on one line of a terminal that :meth:`clear` blanks (the summary was
    printed onto it)."""

    def __init__(self):
        self.width = 0

    def __call__(self, index: int) -> None:
        text = f"  walked {index} tasks"
        self.width = len(text)
        print(f"\r{text}", end="", file=sys.stderr, flush=True)

    def clear(self) -> None:
        if self.width:
            print("\r" + " " * self.width + "\r", end="", file=sys.stderr, flush=True)


def _or_dash(value, spec: str) -> str:
    """``value`` formatted, or a dash for none (a run of no task has no efficiency, no walk share)."""
    return "-" if value is None else format(value, spec)


def render(result: dict) -> str:
    """The summary as text: time and rate, bounds, walk, traffic, and a table of ranks."""
    tiles = " ".join(f"{k}={v}" for k, v in {**result["tiles"], **result["params"]}.items())
    gpus = f" + {result['gpus']} GPU(s)" if result["gpus"] else ""
    grid = "x".join(map(str, result["grid"]))
    rate = result["gflops"]
    walk = result["walk"]
    lines = [f"{result['program']}: n={result['n']} {tiles}, simulated on {result['np']} rank(s) ({grid} grid) of "
             f"{result['machine']}, {result['workers']} worker(s){gpus} each, {result['tasks']} tasks",
             f"  time      {seconds_text(result['seconds'])} s" + rate_text(rate, result["ranks"])
             + (f" ({result['flops_basis']})" if result.get("flops_basis") else ""),
             f"  bounds    critical path {seconds_text(result['critical_path'])} s, "
             f"area {seconds_text(result['area_bound'])} s, "
             f"efficiency {_or_dash(result['efficiency'], '.2f')}",
             f"  walk      {walk['per_task_us']:g} µs per task walked + {walk['per_submit_us']:g} µs per share "
             f"submitted: {seconds_text(walk['seconds'])} s on the busiest rank ({_or_dash(walk['share'], '.0%')} of the time)",
             f"            {_walked(walk, result['priorities'])}"]
    totals = result["totals"]
    settings = settings_text(result["sources"], {**result["tiles"], **result["params"]}, result["gpu_ratio"])
    lines.append(f"  settings  {settings}")
    if result["gpus"] and result.get("gpu_ratio"):
        lines.append(f"  gpus      tile columns dealt host:GPUs {result['gpu_ratio']} (--gpu-ratio to choose; "
                     f"0:1 gives the GPUs every tile)")
    if result["host_takes"]:
        lines.append(f"  gpus      CPU workers took {totals['host_took']} GPU task(s) (--host-takes)")
    if result["np"] > 1:
        lines.append(f"  messages  {totals['messages_sent']} ({bytes_text(totals['bytes_sent'], 1)}) between ranks")
    lines.append(f"  simulated in {result['simulation_seconds']:.1f} s")
    lines += [f"  note      {note}" for note in result["notes"]]
    ranks = result["ranks"]
    shown = ranks if len(ranks) <= 16 else sorted(ranks, key=lambda r: -r["messages_sent"])[:8]
    if result["np"] > 1:
        lines.append(f"  {'rank':>6} {'tasks':>9} {'sent':>8} {'MiB sent':>10} {'received':>9} {'MiB recv':>10}"
                     + ("   (the 8 ranks sending most)" if shown is not ranks else ""))
        for r in shown:
            lines.append(f"  {r['rank']:>6} {r['tasks']:>9} {r['messages_sent']:>8} {r['bytes_sent'] / 2 ** 20:>10.1f} "
                         f"{r['messages_received']:>9} {r['bytes_received'] / 2 ** 20:>10.1f}")
    return "\n".join(lines)


def _walked(walk: dict, priorities: str) -> str:
    if walk["rank_walks"] == "share":
        levels = "; derived priorities over each rank's share" if priorities == "derived-share" else ""
        return f"each rank walks its share of the loop nest (at most {walk['tasks_met']:,} tasks met){levels}"
    because = f": {walk['whole_because']}" if walk.get("whole_because") else ""
    return f"each rank walks the whole loop nest ({walk['tasks_met']:,} tasks){because}"
