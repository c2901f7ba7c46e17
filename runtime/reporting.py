"""What a run reports: its statistics per rank, the GFLOP/s, and the summary of DESIGN §8
as text or one JSON object (printed by rank 0 from every rank's statistics).

The GFLOP/s count the standard flops of the factorization a program's check names
(Cholesky, LU, QR, for the shape of its matrix), else the flops of the tasks every
rank ran, from the kernels' flop counts; ``flops_source`` says which. An out-of-core
run (:mod:`.outofcore`) also reports its GPU caches' copies, evictions and peak bytes."""
from __future__ import annotations

import json
import math
import os
import signal
import sys
from dataclasses import dataclass, field

import numpy as np

from . import checks
from .options import COMMAND_LINE, Spelling, tile_values
from .resources import bytes_text
from .world import ranks_text


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
    gpu_backend: str | None = None  # with GPUs: "emulated" or "cupy"
    gpu_streams: int | None = None  # with GPUs: compute streams per GPU
    upper_bound: float | None = None  # GFLOP/s: the kernel upper bound (.rates.upper_bound), when tuned
    untimed_tiles: tuple | None = None  # (the largest tile tune timed, the run's): tuned, and no bound for that
    broadcast: str = "direct"  # how tile versions reached the ranks reading them: "direct" or "tree"
    host_takes: bool = False  # idle CPU workers took GPU tasks (--host-takes on, in memory)
    seed: int | None = None  # the seed of the matrices made at random (None: the run made none)
    walk: dict | None = None  # "rank_walks": "share" or "whole", and "whole_because" (.dataflow.whole_walk_reason)
    window: int | None = None  # the tasks a rank's window held at most (--window, or the default chosen)
    priorities: str | None = None  # "program" (its clauses), "derived" (from the task graph) or "none"
    host_takes_out_of_core: bool = False  # --host-takes on, but out of core: nothing taken
    trace: dict = field(default_factory=dict)  # bounds and utilisation of a traced run
    kernel_rates: dict = field(default_factory=dict)  # Options.time_kernels: {kernel: {size: GFLOP/s}} on a core
    sources: dict = field(default_factory=dict)  # tile setting or "gpu_ratio" -> where its value came from
    gpu_ratio: tuple | None = None  # the host/GPU column ratio used (uniform tiles with GPUs)
    check_seconds: float | None = None  # the residual check's wall seconds (None without --check)
    total_seconds: float | None = None  # execute's wall seconds: setup and inputs, run, check, outputs
    phases: dict = field(default_factory=dict)  # phase -> wall seconds, the parts of total_seconds
    nonfinite: dict = field(default_factory=dict)  # matrix name -> NaN or infinite values left in it
    input_nonfinite: dict = field(default_factory=dict)  # matrix name -> those its input (an array, a file) held
    nonfinite_allowed: bool = False  # --allow-nonfinite: those values are results
    errors: list = field(default_factory=list)  # what else failed after the run (writing its files)
    withheld: list = field(default_factory=list)  # the files a failed run did not write (rank 0)
    withheld_because: str = ""  # "the run failed" where it did (else writing a file failed)
    notes: list = field(default_factory=list)  # what ran other than asked (kernels the GPU backend lacks)
    host_only_kernels: list = field(default_factory=list)  # with GPUs: the kernels called that have no GPU body
    gpu_kernels: list = field(default_factory=list)  # with GPUs: the kernels called that have one

    @property
    def passed(self) -> bool | None:
        """The check's verdict; None when no check ran (nothing was verified)."""
        return checks.passes(*self.residuals.values()) if self.residuals else None

    @property
    def ok(self) -> bool:
        """The run succeeded: no check failed, no matrix holds a NaN or infinity, nothing else failed."""
        return self.passed is not False and (self.nonfinite_allowed or not self.nonfinite) and not self.errors


def _cholesky_flops(m: int, n: int | None = None) -> float:
    return (m if n is None else n) ** 3 / 3


def _lu_flops(m: int, n: int | None = None) -> float:
    """m·n² − n³/3 for m ≥ n (LAPACK's dgetrf count), the transposed count for m < n."""
    n = m if n is None else n
    long, short = max(m, n), min(m, n)
    return long * short ** 2 - short ** 3 / 3


def _qr_flops(m: int, n: int | None = None) -> float:
    """2mn² − 2n³/3 for m ≥ n (LAPACK's dgeqrf count), the transposed count for m < n."""
    return 2 * _lu_flops(m, n)


# The standard flop counts of the factorizations, of an m×n matrix (n defaults to m).
FLOPS = {"cholesky": _cholesky_flops, "lu": _lu_flops, "qr": _qr_flops}
_NAMES = {"cholesky": "Cholesky", "lu": "LU", "qr": "QR"}


def flop_count(program, matrices: dict, ranks: list) -> tuple[float | None, str | None]:
    """The run's flops and where they come from: ``"standard"``, the count of the factorization
    its check names (for the check's first matrix's shape), else ``"kernels"``, the flop counts
    of the tasks the ranks ran (``ranks``: every rank's statistics); (None, None) for neither."""
    check = program.check
    if not sum(r["tasks"] for r in ranks):
        return None, None  # nothing ran: a rate would be made up
    if has_standard_count(program) and check.args[0] in matrices:
        factored = matrices[check.args[0]]
        return FLOPS[check.kind](factored.m, factored.n), "standard"
    counts = [r["flops"] for r in ranks]
    if None in counts:  # a kernel without a flop count ran: the sum would understate the work
        return None, None
    total = sum(counts)
    return (total, "kernels") if 0 < total < math.inf else (None, None)


def has_standard_count(program) -> bool:
    """Whether the program's check names a factorization with a standard flop count (then the
    engine need not count its tasks' flops)."""
    check = program.check
    return check is not None and not check.user and check.kind in FLOPS


def rate_text(rate: float | None, ranks: list) -> str:
    """The summary's GFLOP/s after the time, or why there are none when a kernel without a flop
    count ran (a rate from the others would understate the work)."""
    if rate:
        return f"   {rate_number(rate)} GFLOP/s"
    reason = no_rate_reason(ranks)
    return f"   (no GFLOP/s: {reason})" if reason else ""


def rate_number(rate: float) -> str:
    """A GFLOP/s figure: two decimals; past a million (a flop count that is off, or a huge machine
    simulated) not 300 digits; below 0.01 (a cheap user kernel's count) three digits, not "0.00",
    which reads as no work."""
    return f"{rate:.2f}" if 0.01 <= rate < 1e6 else f"{rate:.{3 if rate < 1 else 4}g}"


#: what a rate above the kernel upper bound says of itself: no run passes it by doing the work counted
ABOVE_BOUND = (": above it, the count is more than the work this run did (a band, a part of the factorization), "
                "or its kernels ran faster than tune timed them (a busy machine then)")


def seconds_text(seconds: float) -> str:
    """A time in seconds: four decimals; below 0.0001 s (a reference's call on a tiny matrix) three
    digits, not "0.0000", which reads as no time; from 10⁷ s (a simulation of flop counts near the
    float range) four digits and an exponent, not hundreds of digits."""
    if seconds >= 1e7:
        return f"{seconds:.4g}"
    return f"{seconds:.4f}" if seconds >= 1e-4 or seconds == 0 else f"{seconds:.3g}"


def ratio_number(ratio: float) -> str:
    """A speed-up: two decimals; below 0.01 two digits, not "0.00", which reads as no speed."""
    return f"{ratio:.2f}" if ratio >= 0.01 else f"{ratio:.2g}"


def no_rate_reason(ranks: list) -> str | None:
    """Why a run has no GFLOP/s (no task ran, a kernel without a flop count, a count of 0), from its
    ranks' statistics; None when nothing keeps it from having one."""
    if not sum(r["tasks"] for r in ranks):
        return "no task ran"
    uncounted = next((r["uncounted"] for r in ranks if r.get("uncounted")), None)
    if uncounted:
        return f"kernel {uncounted} declares no flop count"
    total = sum(r.get("flops") or 0 for r in ranks)
    return f"the kernels' flop counts add up to {total:.3g}" if not 0 < total < math.inf else None


def idle_warning(program, params: dict, ranks: list, planned: bool = False) -> str | None:
    """The warning of a run in which no task ran (``planned``: would run, said by ``explain`` and
    ``simulate``): its loop nest called no kernel (a loop bounded by a parameter of 0, a guard never
    true), so its outputs are its inputs."""
    if sum(r["tasks"] for r in ranks):
        return None
    given = " ".join(f"{name}={params[name]}" for name in program.params if name in params)
    return (f"no task {'would run' if planned else 'ran'}: the loop nest of {program.name} calls no kernel at "
            f"n={params['n']}" + (f" with {given}" if given else "")
            + f"; its matrices {'would be' if planned else 'are'} left as they were")


def idle_ranks_warning(ranks: list, grid, advice) -> str | None:
    """The warning of a run on several ranks in which some that own tiles ran no task (a grid that
    gives them no tile any task writes: single-column matrices on a 1×P grid), with
    ``advice()`` (:func:`.gridadvice.idle_rank_advice`, called only to warn); a
    rank without tiles is not named here (:func:`.resources.ranks_without_tiles` warns of it)."""
    idle = [r for r in ranks if not r["tasks"] and r["owned_tiles"]]
    if len(ranks) < 2 or not idle or len(idle) == len(ranks) or not any(r["tasks"] for r in ranks):
        return None  # (no task at all: :func:`idle_warning` says so, and no grid helps)
    one = len(idle) == 1
    sent = f"so {'it' if one else 'they'} only sent tiles" if any(r["messages_sent"] for r in idle) else "nor reads one"
    return (f"{ranks_text([r['rank'] for r in idle])} ran no task on the {grid[0]}x{grid[1]} grid: no task "
            f"writes first a tile {'it owns' if one else 'they own'}, {sent}; {advice()}")


def rank_columns(matrices: dict, grid: tuple) -> int:
    """The most tile columns a rank holds of one matrix, its grid's columns dealing them in turn."""
    return max((-(-matrix.nt // grid[1]) for matrix in matrices.values()), default=0)


def idle_gpus_warning(result: RunResult, ranks: list, spelling: Spelling = COMMAND_LINE,
                      columns: int | None = None) -> str | None:
    """The warning of a run with GPUs where some rank's GPU holds no tile (``gpus_without_tiles``
    of its statistics), so it ran nothing: the host:GPU ratio deals each rank's tile columns in
    turn, host first, and with few columns a rank's GPUs may get none (GPUs that hold tiles but
    ran nothing, their kernels having no GPU body, are :func:`no_gpu_task_warning`'s). ``columns``: the most tile
    columns a rank holds (:func:`rank_columns`), fewer than its GPUs whatever the ratio."""
    idle = {r["rank"]: r["gpus_without_tiles"] for r in ranks if r.get("gpus_without_tiles")}
    if not result.gpus or not idle or not sum(r["tasks"] for r in ranks):
        return None
    where = "; ".join(f"rank {rank}: GPU {', '.join(map(str, gpus))}" for rank, gpus in sorted(idle.items())) \
        if len(ranks) > 1 else f"GPU {', '.join(map(str, idle[ranks[0]['rank']]))}"
    them = "them" if sum(map(len, idle.values())) > 1 else "it"
    if result.gpu_ratio is None:  # hybrid tiles: each GPU takes whole large blocks
        why = (f"the hybrid tiling gave {them} no block column that a task touches at this size (a smaller B, or a "
               f"larger n, gives more)")
    elif result.gpu_ratio[0] == 0:  # the GPUs have every column already: there are fewer columns than GPUs
        why = ("the GPUs had every tile column, and there are fewer columns than GPUs at this size (smaller tiles "
               "give more)")
    elif columns is not None and columns < result.gpus:  # no ratio gives each GPU a column
        why = f"a rank holds at most {columns} tile column(s), fewer than its {result.gpus} GPUs"
        # 0:1 deals the columns to GPU 1, 2, ... in turn: those past the columns get none whatever the ratio
        reachable = sorted({gpu for gpus in idle.values() for gpu in gpus if gpu <= columns})
        if reachable:
            never = sorted({gpu for gpus in idle.values() for gpu in gpus if gpu > columns})
            why += (f": GPU {', '.join(map(str, never))} get{'s' if len(never) == 1 else ''} none whatever the "
                    f"host:GPU ratio (smaller tiles give more); {spelling.given('gpu_ratio', '0:1')} gives GPU "
                    f"{', '.join(map(str, reachable))} {'a column' if len(reachable) == 1 else 'one each'}")
        else:
            why += ", whatever the host:GPU ratio (smaller tiles give more)"
    else:
        why = (f"the host:GPU ratio {ratio_text(result.gpu_ratio)} dealt {them} no tile column that a task touches at "
               f"this size ({spelling.given('gpu_ratio', '0:1')} gives the GPUs every column)")
    return f"{where} held no tile and ran no task: {why}"


def no_gpu_task_warning(result: RunResult, ranks: list, spelling: Spelling = COMMAND_LINE,
                        explained: bool = False, given: str | None = None) -> str | None:
    """The warning of a run with GPUs whose tasks all ran on hosts though its GPUs held tiles (the summary said
    only that it had GPUs): their kernels have no GPU body, or every task wrote a tile the host holds (a task runs
    where the tile it writes lies); none where no GPU held a tile (:func:`idle_gpus_warning`'s). ``explained``:
    said by ``tiledsl explain``, which shows where each task runs (a run's warning points to it); ``given``: how the
    GPUs were given, where not by the GPU setting (``simulate``'s machine file)."""
    ran = sum(r["tasks"] for r in ranks)
    on_gpus = sum(count for r in ranks for device, count in r.get("tasks_by_device", {}).items() if device != "host")
    held = any(len(r.get("gpus_without_tiles", ())) < result.gpus for r in ranks)
    if not result.gpus or not ran or on_gpus or not held:
        return None
    gpus = given or spelling.valued("gpus", str(result.gpus))
    pointer = None if explained else f"`tiledsl explain --gpus {result.gpus}` shows where each task runs"
    dealt = ("" if result.gpu_ratio is None or result.gpu_ratio[0] == 0 else
             f"; {spelling.given('gpu_ratio', '0:1')} gives the GPUs every tile column")
    placed = (f"wrote a tile that a host holds (a task runs where the tile it writes lies), the GPUs holding only "
              f"tiles that tasks read{dealt}")
    defining = "a kernel NAME runs on GPUs once its module defines a function NAME_gpu"
    if result.host_only_kernels and result.gpu_kernels:  # both reasons: a GPU body alone moves nothing
        return (f"{gpus}: no task ran on a GPU: kernel(s) {', '.join(result.host_only_kernels)} have no GPU body "
                f"({defining}), and every task of {', '.join(result.gpu_kernels)} {placed}"
                f"{f' ({pointer})' if pointer else ''}")
    if result.host_only_kernels:
        return (f"{gpus}: no task ran on a GPU: kernel(s) {', '.join(result.host_only_kernels)} have no GPU body, "
                f"so every task ran on a host, the GPUs holding tiles for nothing ({defining}"
                f"{f'; {pointer}' if pointer else ''})")
    return f"{gpus}: no task ran on a GPU: every task {placed}{f' ({pointer})' if pointer else ''}"


def count_text(program, matrices: dict, source: str) -> str:
    """Where the GFLOP/s's flops come from: the kernels, or the standard count the check names
    (which a program doing less, such as a banded factorization, should not take for its own)."""
    if source == "kernels":
        return " (from the kernels' flop counts)"
    factored = matrices[program.check.args[0]]
    return f" (LAPACK's leading-term count for a {factored.m}×{factored.n} {_NAMES[program.check.kind]})"


def gflops(program, matrices: dict, ranks: list, seconds: float) -> tuple[float | None, str | None]:
    """The GFLOP/s of a run of ``seconds`` and the source of its flop count (:func:`flop_count`)."""
    flops, source = flop_count(program, matrices, ranks)
    return (flops / seconds / 1e9, source) if flops is not None and seconds > 0 else (None, None)


def failure_json(program: str | None, n: int | None, ranks: int | None = None,
                 names_ranks: bool | None = None) -> dict:
    """What ``--json`` prints for a run (or, without ``ranks``, a bench) that has no summary,
    besides its ``error``: the program's name (None where it was not read), n, the ranks (``np``, said
    where ``names_ranks``, by default where they are given: a run's ``np`` is null where it is not known)."""
    said = ranks is not None if names_ranks is None else names_ranks
    return {"program": program, "n": n, **({"np": ranks} if said else {}), "ok": False, "passed": None}


def json_text(value) -> str:
    """``value`` as strict JSON, which has no NaN or infinity: a non-finite number (a check's
    NaN residual, a rate of an infinite flop count) becomes null."""
    return json.dumps(finite_or_none(value), allow_nan=False)


def finite_or_none(value):
    if isinstance(value, dict):
        return {key: finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):  # numpy's float64 is a float
        return None
    return value


#: the summary's note (text and JSON) of --host-takes on in a run out of core
HOST_TAKES_OUT_OF_CORE = "--host-takes does nothing out of core"

SUMMED = ("tasks", "messages_sent", "messages_received", "bytes_sent", "bytes_received",
          "peak_tile_bytes", "device_copies", "host_took")


def summary_json(program, result: RunResult, ranks: list, notes: list) -> dict:
    """The summary of DESIGN §8, from every rank's statistics (gathered on rank 0), with the ``notes``
    the run warned of (:func:`.launch.run_notes`)."""
    n = result.params["n"]
    totals = {key: sum(r[key] for r in ranks) for key in SUMMED}
    rate, source = gflops(program, result.matrices, ranks, result.seconds)
    return {"program": result.program, "n": n,
            "tiles": tile_values(result.params, program.tiling.kind),
            "params": {k: result.params[k] for k in program.params if k in result.params},
            "np": result.ranks, "grid": list(result.grid), "workers": result.workers, "gpus": result.gpus,
            "broadcast": result.broadcast, "host_takes": result.host_takes, "seed": result.seed,
            "window": result.window, "priorities": result.priorities, "walk": result.walk,
            "seconds": result.seconds, "gflops": rate, "flops_source": source,
            "check_seconds": result.check_seconds, "total_seconds": result.total_seconds, "phases": result.phases,
            "residual": result.residual, "residuals": result.residuals, "passed": result.passed, "ok": result.ok,
            "gpu_backend": result.gpu_backend, "gpu_streams": result.gpu_streams, "nonfinite": result.nonfinite,
            "upper_bound": result.upper_bound,
            "of_upper_bound": rate / result.upper_bound if rate and result.upper_bound else None,
            "input_nonfinite": result.input_nonfinite, "errors": failure_reasons(result),
            "notes": [*program.warnings, *notes, *([HOST_TAKES_OUT_OF_CORE] if result.host_takes_out_of_core else [])],
            "tasks": totals["tasks"], "ranks": ranks, "totals": totals,
            "gpu_ratio": ratio_text(result.gpu_ratio), "sources": result.sources,
            "out_of_core": out_of_core_totals(ranks), **result.trace}


def out_of_core_totals(ranks: list) -> dict | None:
    """The GPU caches' statistics over the out-of-core ranks (peak and bound: the largest), or None."""
    caches = [r["out_of_core"] for r in ranks if r.get("out_of_core")]
    if not caches:
        return None
    totals = {key: sum(c[key] for c in caches) for key in caches[0]}
    for key in ("peak_cache_bytes", "cache_bytes"):
        totals[key] = max(c[key] for c in caches)
    return totals


def ratio_text(ratio) -> str | None:
    return None if ratio is None else f"{ratio[0]}:{ratio[1]}"


def nonfinite_lines(nonfinite: dict, hint: str = "", from_inputs: dict | None = None, allow: str = "") -> list:
    """One line per matrix left holding NaN or infinite values (the run then fails); ``hint``
    after those whose input held none (``from_inputs``: matrix name -> how many it held), and
    ``allow`` (how to take them for results) after the last."""
    from_inputs = from_inputs or {}
    lines = [f"{name} holds {count} NaN or infinite value(s) after the run"
             + (f"; its input held {from_inputs[name]}" if name in from_inputs else hint)
             for name, count in nonfinite.items()]
    return lines[:-1] + [lines[-1] + allow] if lines else []


def check_reasons(result: RunResult) -> list:
    """Why a completed run's check failed, one line each, as the command line says them (none: it
    passed, or there was none): a check that gave no residual, the residuals not below the threshold."""
    errors = list(result.errors)
    if _input_left_no_residual(result):
        # an infinity in the input may leave a finite result (1/inf = 0): the NaN residual is the input's
        held = ", ".join(f"{name}'s input held {count}" for name, count in result.input_nonfinite.items())
        errors.insert(0, f"the check has no residual: {held} NaN or infinite value(s), which no backward error "
                         f"measures")
    return checks.failure_lines(errors, result.residuals)


def _input_left_no_residual(result: RunResult) -> bool:
    return bool(result.input_nonfinite) and any(math.isnan(value) for value in result.residuals.values())


def failure_reasons(result: RunResult) -> list:
    """Why a completed run failed, one line each, as the command line says them (none: it succeeded):
    the check's (:func:`check_reasons`), then the matrices left holding NaN or infinities."""
    problems = check_reasons(result)
    if result.nonfinite_allowed:
        return problems
    return problems + nonfinite_lines(result.nonfinite, " (--check-finite stops at the first task that writes one)",
                                      result.input_nonfinite, "; --allow-nonfinite takes them for results")


def sources_text(result: RunResult) -> str:
    """``nb=320, ib=64: tuned (/path); gpu-ratio 1:1: default``: values grouped by where they came from."""
    return settings_text(result.sources, result.params, ratio_text(result.gpu_ratio))


def settings_text(sources: dict, values: dict, ratio: str | None) -> str:
    """:func:`sources_text` of ``sources`` (setting -> where it came from), the settings' ``values``
    and the ``H:G`` ratio (a simulation's summary has no :class:`RunResult`)."""
    groups: dict = {}
    for name, source in sources.items():
        value = (f"gpu-ratio {ratio}" if name == "gpu_ratio"
                 else "host-takes on" if name == "host_takes" else f"{name}={values.get(name)}")
        groups.setdefault(source, []).append(value)
    return "; ".join(f"{', '.join(group)}: {source}" for source, group in groups.items())


def summary_text(program, result: RunResult, ranks: list) -> str:
    p = result.params
    settings = {**tile_values(p, program.tiling.kind), **{name: p[name] for name in program.params if name in p}}
    # the program's own parameters after the tiles; a char one that does not print (a newline) as Python writes it
    tiles = " ".join(f"{k}={v if not isinstance(v, str) or v.isprintable() else repr(v)}" for k, v in settings.items())
    rate, source = gflops(program, result.matrices, ranks, result.seconds)
    grid = f"{result.ranks} rank(s) on a {result.grid[0]}x{result.grid[1]} grid" if result.ranks > 1 else "1 rank"
    lines = [f"{program.name}: n={p['n']} {tiles}, {grid} × {result.workers} worker(s), "
             f"{sum(r['tasks'] for r in ranks)} tasks",
             f"  time      {seconds_text(result.seconds)} s" + rate_text(rate, ranks)
             + (count_text(program, result.matrices, source) if rate else "")]
    if rate and result.upper_bound:
        lines.append(f"  bound     {rate / result.upper_bound:.2f} of the kernel upper bound, "
                     f"{result.upper_bound:.1f} GFLOP/s (gemm's tuned rates × the cores used and GPUs)"
                     + (ABOVE_BOUND if rate > result.upper_bound else ""))
    elif rate and result.untimed_tiles:
        timed, largest = result.untimed_tiles
        lines.append(f"  bound     none: tune timed gemm on tiles up to {timed}, and this run's reach {largest} "
                     f"(tiledsl tune --sizes with larger ones times them)")
    if result.check_seconds is not None:
        lines.append(f"  check     {result.check_seconds:.4f} s")
    if result.total_seconds is not None:
        parts = ", ".join(f"{phase} {seconds:.2f}" for phase, seconds in result.phases.items())
        lines.append(f"  total     {result.total_seconds:.4f} s ({parts})")
    if result.sources:
        lines.append(f"  settings  {sources_text(result)}")
    if result.gpus:
        streams = f", {result.gpu_streams} compute streams each" if (result.gpu_streams or 1) > 1 else ""
        lines.append(f"  gpus      {result.gpus} per rank, {BACKENDS.get(result.gpu_backend, result.gpu_backend)}"
                     + streams
                     + (f"; CPU workers took {sum(r['host_took'] for r in ranks)} GPU task(s)"
                        if result.host_takes else ""))
    cache = out_of_core_totals(ranks)
    if cache is not None:
        lines.append(f"  gpu cache out of core, {_mib(cache['cache_bytes'])} per GPU (peak {_mib(cache['peak_cache_bytes'])}): "
                     f"{cache['copies_in']} copies in ({_mib(cache['bytes_in'])}), {cache['copies_out']} write-backs "
                     f"({_mib(cache['bytes_out'])}), {cache['evictions']} evictions"
                     + (f"; {HOST_TAKES_OUT_OF_CORE}" if result.host_takes_out_of_core else ""))
    if result.trace:
        t = result.trace
        lines.append(f"  bounds    critical path {seconds_text(t['critical_path'])} s, "
                     f"area {seconds_text(t['area_bound'])} s, "
                     f"efficiency {'-' if t['efficiency'] is None else format(t['efficiency'], '.2f')}, load imbalance "
                     + (f"{t['imbalance']:.2f}" if t["imbalance"] is not None else "- (no task ran)"))
    if result.ranks > 1:
        sent = sum(r["messages_sent"] for r in ranks)
        volume = sum(r["bytes_sent"] for r in ranks)
        hidden = result.trace.get("communication_hidden")
        lines.append(f"  messages  {sent} ({_mib(volume)}) between ranks"
                     + (f", at least {hidden:.0%} of their time hidden by computation" if hidden is not None else ""))
    for name, value in result.residuals.items():
        # "NAME residual VALUE" whatever the name's length (a longer name than the labels' column of 9
        # characters widens its own line only), so that one pattern finds every residual
        if math.isnan(value) and (result.errors or _input_left_no_residual(result)):  # the errors say why
            lines.append(f"  {name:<9} no residual  (FAIL: the check failed, see below)")
            continue
        verdict = "pass" if value < checks.THRESHOLD else "FAIL"
        lines.append(f"  {name:<9} residual {_residual_text(value)}  ({verdict}, threshold {checks.THRESHOLD:g})")
    for name, count in result.nonfinite.items():
        lines.append(f"  nonfinite {name}: {count} NaN or infinite value(s)")
    return "\n".join(lines)


def _residual_text(value: float) -> str:
    """``value`` to three digits, or as many more as it takes to fall on its side of the
    threshold (59.96 passes: "60" would read as a failure)."""
    for digits in range(3, 18):
        text = f"{value + 0.0:.{digits}g}"  # + 0.0: -0.0 reads 0
        if (float(text) < checks.THRESHOLD) == (value < checks.THRESHOLD):
            return text
    return repr(value)


def _mib(size: int) -> str:
    return bytes_text(size, digits=1)


BACKENDS = {"emulated": "emulated backend (numpy arrays standing in for GPUs)",
            "cupy": "CuPy backend (NVIDIA GPUs)"}


def count_nonfinite(matrices: dict, comm, held: dict, given: set) -> tuple[dict, dict]:
    """NaN and infinite values in each matrix after the run, and in its input (``held``: this
    rank's, counted as tiles are read from an array or a file), over every rank (only the
    matrices holding some): one pass over this rank's tiles, one sum over the ranks. The tiles
    no task touched are counted too where the input was ``given`` (an array or a file: they
    are the output's as they were); a generated input is finite."""
    names = list(matrices)
    after = [sum(int(np.count_nonzero(~np.isfinite(matrices[name].block(tile) if name in given else tile.data)))
                 for tile in matrices[name].local_tiles() if name in given or tile.data is not None)
             for name in names]  # before reading held: reading an untouched tile counts its input
    counts = np.array(after + [held.get(name, 0) for name in names], dtype=np.float64)
    if comm is not None:
        counts = comm.allreduce_sum(counts)
    after, before = counts[:len(names)], counts[len(names):]
    return ({name: int(count) for name, count in zip(names, after) if count},
            {name: int(count) for name, count in zip(names, before) if count})


def _gpus_without_tiles(engine, matrices: dict, gpus: int) -> list[int]:
    """This rank's GPUs (from 1) that hold none of its stored tiles (out of core: are placed none,
    though the tiles live on the host). A tile no task touches is not stored (its data None): a GPU
    dealt only such tiles (a column above a Cholesky's diagonal) ran nothing either."""
    exchange = engine.exchange
    out_of_core = exchange.out_of_core if exchange is not None else None
    device_of = out_of_core.device_of if out_of_core is not None else (lambda tile: tile.device)
    held = {device_of(tile) for matrix in matrices.values() for tile in matrix.local_tiles() if tile.data is not None}
    return [gpu for gpu in range(1, gpus + 1) if gpu not in held]


def rank_stats(engine, matrices: dict, comm) -> dict:
    """This rank's statistics for the summary (DESIGN §8), taken before any check runs."""
    traffic = comm.stats if comm is not None else None
    local = sum(m.local_bytes() for m in matrices.values())  # host and GPU memory alike
    copies = engine.exchange.peak_copy_bytes if engine.exchange is not None else 0
    per_worker, workers = engine.stats.per_worker, engine.workers
    return {"rank": engine.rank, "tasks": sum(per_worker),
            # where they ran: the CPU workers (GPU tasks they took included), then each GPU
            "tasks_by_device": {"host": sum(per_worker[:workers]),
                                **{f"gpu{g}": count for g, count in enumerate(per_worker[workers:], 1)}},
            "messages_sent": traffic.sends if traffic else 0,
            "messages_received": traffic.receives if traffic else 0,
            "bytes_sent": traffic.bytes_sent if traffic else 0,
            "bytes_received": traffic.bytes_received if traffic else 0,
            "plans_sent": traffic.plans_sent if traffic else 0,  # announcements of a tree broadcast's deliveries
            "plans_received": traffic.plans_received if traffic else 0,
            "peak_tile_bytes": local + copies,
            "owned_tiles": sum(len(m.local_tiles()) for m in matrices.values()),
            # the copy thread's, and those of the GPU tasks CPU workers took
            "device_copies": (engine.exchange.device_copies if engine.exchange is not None else 0)
            + sum(engine.stats.taken_copies),
            "host_took": engine.stats.host_took,  # GPU tasks its CPU workers took (--host-takes)
            "gpus_without_tiles": _gpus_without_tiles(engine, matrices, len(per_worker) - workers),
            "kernel_notes": engine.kernel_notes.summary(),  # what kernels said without failing (.notes)
            "out_of_core": _cache_statistics(engine),
            "instances": engine.exchange.instance_counts() if engine.exchange is not None else None,
            "peak_window": engine.stats.peak_window,
            # not counted where the check names a standard count (null, as when a kernel has none)
            "flops": engine.stats.flops if engine.flop_counts is not None else None,
            "uncounted": engine.stats.uncounted,
            # per worker: its program tasks (what the trace's lanes show), the runtime's own tasks
            "busy_seconds": [round(b, 6) for b in engine.stats.busy],
            "other_task_seconds": [round(b, 6) for b in engine.stats.other]}



def _cache_statistics(engine) -> dict | None:
    """An out-of-core rank's GPU caches: copies in and out (count, bytes), evictions, peak and bound
    of the bytes each GPU held; None for an in-memory run."""
    exchange = engine.exchange
    return exchange.out_of_core.statistics() if exchange is not None and exchange.out_of_core is not None else None


def stdout_closed() -> int:
    """Stdout's reader has gone: what is still to be written (the flush at exit too) goes
    to /dev/null, quietly; the status of a process ended by SIGPIPE, as shells show it."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 128 + signal.SIGPIPE


def failure_line_out(text: str, out=None, err=None) -> int | None:
    """``text``, a failed command's --json object, as a line on stdout (``out``): None, or where
    stdout's reader left (| head) the status of a process SIGPIPE ended. A stdout that takes nothing
    (`> /dev/full`, a full disk) is said on stderr (``err``), and the failure's own status stands."""
    try:
        print(text, file=out or sys.stdout, flush=True)
    except BrokenPipeError:
        return stdout_closed()
    except OSError as error:
        stdout_unwritable(error, err)
    return None


def stdout_unwritable(error: OSError, err=None) -> None:
    """Say on stderr (``err``) that stdout could not take the output (a full disk, `> /dev/full`);
    what Python would flush at exit then goes nowhere, rather than failing again."""
    print(f"tiledsl: error: {unwritable_text(error)}", file=err or sys.stderr, flush=True)
    stdout_closed()


def unwritable_text(error: OSError) -> str:
    return f"the output could not be written to stdout: {error.strerror or error}"
