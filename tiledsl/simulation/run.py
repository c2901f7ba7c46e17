"""One simulated run: the driver's loop nest walked once, every rank replayed, the summary.

:func:`simulate` sizes and places the matrices exactly as ``tiledsl run`` does
(:mod:`tiledsl.runtime.layout`), walks the program's loop nest once for all ranks
(:mod:`.walk`) while the event loop (:mod:`.engine`) advances, and returns a summary
shaped like ``run --json``'s (DESIGN §8): predicted seconds and GFLOP/s, per-rank
tasks, messages, bytes and instance counts, plus the walk's cost, the bounds
(:mod:`.bounds`) and the machine used. With ``trace`` it also returns the events of
every rank, in the trace format of ``run --trace`` (:mod:`tiledsl.runtime.trace`).
"""
from __future__ import annotations

import shlex
import time
from collections import Counter
from types import SimpleNamespace

from ..runtime import priorities
from ..runtime.broadcast import broadcast_for
from ..runtime.flops import modelled_flops
from ..runtime.heteroprio import round_trip_bytes
from ..runtime.kernels import CPU_KERNELS
from ..runtime.layout import make_distribution, make_matrices, make_params, ratio_of, tiling_sources
from ..runtime.options import tile_values
from ..runtime.matrix import region_view
from ..runtime.program import flatten
from ..runtime.dataflow import events_of, whole_walk_reason
from ..runtime.recording import LoopNestTarget, survey, walk
from ..runtime.reporting import (SUMMED, count_text, gflops, has_standard_count, idle_gpus_warning,
                                 idle_ranks_warning, idle_warning, no_gpu_task_warning, rank_columns)
from ..runtime.gridadvice import idle_rank_advice
from ..runtime.resources import ranks_without_tiles
from ..runtime.trace import CriticalPath, copy_args, task_args
from ..runtime.tuning import nearest_ratio
from ..runtime.userkernels import gpu_kernels
from ..runtime.world import UsageError
from .bounds import Area
from .engine import Simulator
from .walk import Walk

def rank_layout(machine, nranks: int, gpus: int, workers: int | None):
    """``(workers per rank, ranks per node, CPU slowdown)``: as ``run`` chooses workers on a node
    of the machine's cores (:func:`tiledsl.runtime.world.default_workers`), the slowdown
    being the workers' share of the cores when ranks on one node have more than it."""
    per_node = nranks if machine.ranks_per_node is None else min(machine.ranks_per_node, nranks)
    per_rank = max(1, machine.cores // per_node)
    workers = workers or max(1, per_rank - gpus - (gpus > 0) - (nranks > 1))
    return workers, per_node, max(1.0, per_node * workers / machine.cores)


class Timing:
    """``(seconds, flops)`` of a task on the device it runs on, memoised by its shapes; the work
    of every call site on each kind of worker, and the critical path, for the bounds."""

    def __init__(self, machine, cpu_share: float, gpu_kernels: frozenset):
        self.machine = machine
        self.cpu_share = cpu_share
        self.gpu_kernels = gpu_kernels
        self.known: dict = {}  # shapes key -> [flops, seconds on a core, on a GPU, tasks]
        self.shapes: dict = {}  # tile -> its shape
        self.path = CriticalPath()
        self.uncounted: list = []  # the kernels modelled without a flop count, first met first
        self.kernels: set = set()  # the kernels of the tasks timed
        self.working: set = set()  # those of them with a task of nonzero flops (a rate matters to them)

    def __call__(self, call, tiles, regions, values, device):
        shapes = self.shapes
        key = (id(call), regions, values, tuple([shapes.get(t) or self._shape(t) for t in tiles]))
        found = self.known.get(key)
        if found is None:
            found = self.known[key] = self._model(call, tiles, regions, values)
        found[4] += 1
        seconds = found[2] if device else found[1]
        self.path.add(call.modes, tiles, seconds)
        return seconds, found[0], found[5] if device else None

    def _shape(self, tile) -> tuple:
        shape = self.shapes[tile] = tile.shape
        return shape

    def _model(self, call, tiles, regions, values) -> list:
        views = None if regions is None else [None if r is None else region_view(t, r) for t, r in zip(tiles, regions)]
        shapes = call.shapes(tiles, views)
        flops, counted = modelled_flops(call, shapes, values)
        self.kernels.add(call.kernel)
        if flops:
            self.working.add(call.kernel)
        if not counted:  # a user kernel without a flop count: timed as a gemm on its largest argument
            if call.kernel not in self.uncounted:
                self.uncounted.append(call.kernel)
        nbytes = 8 * sum(rows * cols for rows, cols in shapes)
        on_gpu = self.machine.gpu is not None and call.kernel in self.gpu_kernels
        gpu = self.machine.seconds(call.kernel, flops, nbytes, True) if on_gpu else None
        cpu = self.machine.seconds(call.kernel, flops, nbytes, False) * self.cpu_share
        return [flops, cpu, gpu, call.line, 0, cpu + self._round_trip(call, tiles, views) if on_gpu else None]

    def _round_trip(self, call, tiles, views) -> float:
        """A GPU task's tiles copied to the host and back, for a CPU worker taking it (only a machine
        with GPUs has their link)."""
        pcie = self.machine.pcie
        return pcie.seconds(round_trip_bytes(call, call.tile_shapes(tiles, views))) + 2 * pcie.latency

    def area(self) -> Area:
        """The work of every call site on each kind of worker, all tasks counted."""
        area = Area()
        for flops, on_cpu, on_gpu, line, tasks, _ in self.known.values():
            area.add(line, "cpu", on_cpu * tasks)
            if on_gpu is not None:
                area.add(line, "gpu", on_gpu * tasks)
        return area


def simulate(driver, options, nranks: int, grid: tuple, machine, trace: bool = False, progress=None,
             ratio_from_rates: bool = False, source: str | None = None) -> dict:
    """Predict ``driver``'s run for ``options`` on ``nranks`` ranks of ``machine`` (see the module);
    ``ratio_from_rates``: uniform tiles on GPUs without a ratio get the one the machine's rates give;
    ``source``: the program as the command named it (a message's command to tune it names it so)."""
    program = driver.PROGRAM
    gpus = options.gpus
    if gpus > machine.gpus:
        raise UsageError(_too_many_gpus(gpus, machine, source or program.source or program.name))
    params = make_params(driver, options)
    if ratio_from_rates and gpus and program.tiling.kind == "uniform" and options.gpu_ratio is None:
        workers = rank_layout(machine, nranks, gpus, options.workers)[0]
        options.gpu_ratio = nearest_ratio(machine.cpu.gflops("gemm", params.nb) * workers,
                                          machine.gpu.gflops("gemm", params.nb), gpus)
        options.sources["gpu_ratio"] = f"{machine.source}'s gemm rates"
    distribution = make_distribution(program, params, grid, gpus, options.gpu_ratio)
    matrices = make_matrices(driver, params, distribution, 0)
    without_tiles = ranks_without_tiles(program, matrices, nranks, lambda: idle_rank_advice(
        driver, options, params, nranks, gpus, options.gpu_ratio))
    workers, per_node, cpu_share = rank_layout(machine, nranks, gpus, options.workers)
    window = options.window or (4096 if nranks == 1 and not gpus else max(64, 32 * (workers + gpus)))
    tracer = Tracer(nranks) if trace else None
    began = time.perf_counter()
    walked, levels = _share_walks(driver, params, distribution, nranks, options)
    broadcast = broadcast_for(options.broadcast, nranks)
    simulator = Simulator(machine, nranks, workers, gpus, window, tracer, walked, broadcast,
                          bool(options.host_takes) and gpus > 0)
    kernels_on_gpu = gpu_kernels(program, driver) if gpus else frozenset()
    timing = Timing(machine, cpu_share, kernels_on_gpu)
    walker = Walk(matrices, nranks, kernels_on_gpu, _feeder(simulator, progress), timing,
                  _priority_of(driver, matrices, params, options, levels))
    simulator.traffic = walker.traffic
    walk(driver, walker, params, 0)
    seconds = simulator.finish(walker.count)
    summary = {"program": program.name, "n": params.n, "tiles": tile_values(params.as_dict(), program.tiling.kind),
               "params": {name: params[name] for name in program.params},  # the program's own, as run --json's
               "np": nranks, "grid": list(grid), "workers": workers, "gpus": gpus, "gpu_ratio": _ratio(distribution),
               "window": window, "priorities": priorities.in_force(program, options.priorities, levels is not None),
               "ranks_per_node": per_node, "machine": machine.name, "broadcast": broadcast,
               "host_takes": simulator.host_takes, "sources": tiling_sources(program, params, options),
               # as a run's in memory: a simulated GPU holds every tile it is given
               "gpu_backend": options.gpu_backend if gpus else None, "out_of_core": None}
    summary.update(_outcome(program, matrices, machine, simulator, walker, timing, seconds, walked))
    if not walked:
        summary["walk"]["whole_because"] = whole_walk_reason(
            driver, make_matrices(driver, params, distribution, 0), params, nranks, options.priorities)
    stored = {(tile.matrix.name, tile.i, tile.j) for tile in walker.touched}
    idle_gpus, owned = _tile_owners(matrices, distribution, nranks, gpus, stored)
    for stats, idle, tiles in zip(summary["ranks"], idle_gpus, owned):
        stats["gpus_without_tiles"], stats["owned_tiles"] = idle, tiles  # as a run's statistics say them
    idle_ranks = idle_ranks_warning(summary["ranks"], grid, lambda: idle_rank_advice(
        driver, options, params, nranks, gpus, options.gpu_ratio))
    idle = idle_warning(program, params.as_dict(), summary["ranks"], planned=True)
    summary["notes"][:0] = [note for note in (without_tiles, idle, idle_ranks) if note]
    # the dealing of tile columns far from the ratio, GPUs left without any included; else, as a run
    # warns, GPUs holding no tile a task touches (hybrid tiles, or columns no task touches)
    dealt = _dealing_note(distribution, matrices, gpus) or idle_gpus_warning(
        SimpleNamespace(gpus=gpus, gpu_ratio=ratio_of(distribution)), summary["ranks"], options.spelling,
        rank_columns(matrices, grid))
    # as a run warns: GPUs holding tiles and running nothing, their kernels without a GPU body (which makes
    # the dealing moot)
    idle = no_gpu_task_warning(SimpleNamespace(gpus=gpus, gpu_ratio=ratio_of(distribution), host_only_kernels=sorted(
        set(program.kernels) - kernels_on_gpu), gpu_kernels=sorted(set(program.kernels) & kernels_on_gpu)),
        summary["ranks"], options.spelling,
        given=f"{machine.name}'s {gpus} GPU(s)" if "gpus" in options.sources else None)  # not --gpus: the file's
    summary["notes"] += [idle or dealt] if idle or dealt else []
    summary["simulation_seconds"] = time.perf_counter() - began
    summary["events"] = tracer.ranks if tracer is not None else None
    return summary


def _too_many_gpus(gpus: int, machine, source: str) -> str:
    """Why ``--gpus`` asks more of the machine file than it has, and what to do (the command to tune the
    program, ``source``, with, as :func:`.machine.this_machine` names it)."""
    if machine.gpus:
        return (f"--gpus {gpus}: machine file {machine.source} ({machine.name}) has {machine.gpus} GPU(s) per node: "
                f"give --gpus {machine.gpus} or fewer")
    return (f"--gpus {gpus}: machine file {machine.source} has no GPUs: give one with \"gpus\" and GPU rates "
            f"(keeneland, h100), or leave out --machine to simulate this machine with the rates `tiledsl tune "
            f"{shlex.quote(source)} --gpus {gpus}` measured")


def _share_walks(driver, params, distribution, nranks: int, options) -> tuple[list | None, list | None]:
    """Per rank, the fraction of the program's tasks its walk meets, where a run would walk only
    each rank's share of the loop nest (as ``run`` decides: several ranks, an affine program, a
    distribution by rows and columns, priorities not derived from every task); None where every rank
    walks it all. Each rank's share walk is made here, as the run makes it (no kernels, no messages).
    With derived priorities, also per rank the levels of the tasks it runs, in program order, over the
    tasks it walks (as a run's)."""
    if nranks == 1 or priorities.walks_every_task(driver.PROGRAM, options.priorities, nranks):
        return None, None
    matrices = make_matrices(driver, params, distribution, 0)
    if events_of(driver, matrices, params) is None:
        return None, None
    whole = survey(driver, matrices, params, 0)
    total = max(1, whole.count + whole.foreign_tasks)
    # a share walk meets another rank's task as the tiles it writes (a bump each): in tasks, at the
    # program's tiles written per such task (QR's updates write two)
    written = whole.foreign / whole.foreign_tasks if whole.foreign_tasks else 1.0
    derive = priorities.derived(driver.PROGRAM, options.priorities)
    walked, levels = [], [] if derive else None
    for rank in range(nranks):
        sequence = priorities.TaskSequence() if derive else None
        share = survey(driver, make_matrices(driver, params, distribution, rank), params, rank, sequence, guided=True)
        # (tiles written per task vary, by a panel's edge: the estimate is held to the whole walk)
        walked.append(min(1.0, max(1.0, share.count + share.foreign / written) / total))
        if derive:
            levels.append(priorities.bottom_levels(sequence, sequence.runs))
    return walked, levels


def _outcome(program, matrices, machine, simulator: Simulator, walker: Walk, timing: Timing, seconds: float,
             walked: list | None) -> dict:
    """The predicted time and rate, every rank's statistics, the walk's cost and the bounds."""
    counted = not has_standard_count(program)  # a run counts no task's flops where the check's formula counts
    exchanges = len(simulator.ranks) > 1 or any(len(rank.by_device) > 1 for rank in simulator.ranks)
    ranks = [_rank_stats(rank, walker, number, counted, exchanges) for number, rank in enumerate(simulator.ranks)]
    rate, source = gflops(program, matrices, ranks, seconds)
    runtime = machine.runtime
    generation = max(walker.count * rank.walk_s + rank.submitted * runtime["submit_us"] * 1e-6
                     for rank in simulator.ranks)
    capacity = {"cpu": simulator.workers * len(ranks), "gpu": simulator.gpus * len(ranks)}
    critical, bound = timing.path.longest, timing.area().bound(capacity)
    return {"seconds": seconds, "gflops": rate, "flops_source": source,
            "flops_basis": count_text(program, matrices, source).strip(" ()") if rate else None,
            "tasks": walker.count, "ranks": ranks,
            "totals": {key: None if any(r[key] is None for r in ranks) else sum(r[key] for r in ranks)
                       for key in SUMMED},
            "walk": {"per_task_us": runtime["walk_us"], "per_submit_us": runtime["submit_us"],
                     "seconds": generation, "share": generation / seconds if seconds else None,
                     "rank_walks": "share" if walked else "whole", "whole_because": None,
                     "tasks_met": round(walker.count * max(walked)) if walked else walker.count},
            "critical_path": critical, "area_bound": bound, "notes": _model_notes(machine, timing, program),
            "efficiency": max(critical, bound) / seconds if seconds > 0 else None,
            "busiest": {"link_seconds": max(max(r.link_busy, r.link_busy_in) for r in simulator.ranks),
                        "gpu_stream_seconds": max((b for r in simulator.ranks for b in r.stream_busy.values()),
                                                  default=0.0)}}


def _feeder(simulator: Simulator, progress):
    """The walk's ``dispatch``: hand the share to its rank, and let the clock catch up."""
    handed = simulator.dispatch
    calls = 0

    def dispatch(rank, index, kind, payload):
        nonlocal calls
        handed(rank, index, kind, payload)
        calls += 1
        if not calls & 63:
            simulator.advance(index)
            if progress is not None and not calls & 0x3FFFF:
                progress(index)
    return dispatch


def _priority_of(driver, matrices, params, options, levels: list | None):
    """The priorities a run would use (``--priorities``): the program's, derived, or none.
    ``levels``: per rank, the derived levels of the tasks it runs (ranks walking their shares)."""
    program = driver.PROGRAM
    if options.priorities == "none":
        return priorities.equal
    if levels is not None:
        handed = [priorities.in_turn(rank_levels) for rank_levels in levels]  # each rank's, to the tasks it runs
        return lambda call, tiles, given: handed[tiles[call.main].rank](call, tiles, given)
    if priorities.derived(program, options.priorities):
        sequence = priorities.TaskSequence()
        walk(driver, _Sequencer(matrices, sequence), params, 0)
        return priorities.in_turn(priorities.bottom_levels(sequence))
    return None


class _Sequencer(LoopNestTarget):
    """Records every task for derived priorities (each is on some rank: all count)."""

    def __init__(self, matrices, sequence):
        super().__init__(matrices)
        self.sequence = sequence

    def submit(self, call, tiles, regions, priority, values=(), at=None):
        call, tiles, _ = flatten(call, tiles, regions)
        self.sequence.add(call, tiles, True)


def _ratio(distribution) -> str | None:
    ratio = ratio_of(distribution)
    return None if ratio is None else f"{ratio[0]}:{ratio[1]}"


def _dealing_note(distribution, matrices: dict, gpus: int) -> str | None:
    """Where the tile columns went, when far from the ``H:G`` ratio they were dealt at: a GPU given
    none, or the host over twice its share. Each rank deals its own columns, the host's first in
    each cycle of H + G·GPUs (:class:`~tiledsl.runtime.distribution.BlockCyclic`), so ranks holding
    fewer columns than a cycle (many nodes) give the host more and the last GPUs none."""
    ratio = ratio_of(distribution)
    columns = max((matrix.geometry.nt for matrix in matrices.values()), default=0)
    if ratio is None or not columns:
        return None
    held = Counter(distribution.device_of(0, j) for j in range(columns))  # a column's device is its tiles'
    host, gpu = ratio
    share, cycle = host / (host + gpu * gpus), host + gpu * gpus
    idle = [f"gpu{g}" for g in range(1, gpus + 1) if not held[g]]
    found = [f"{', '.join(idle)} {'holds' if len(idle) == 1 else 'hold'} none"] if idle else []
    if held[0] > 2 * share * columns:
        found.insert(0, f"the host holds {held[0]} of the {columns} tile columns (host:GPUs {host}:{gpu} deals it "
                        f"{share:.0%})")
    if not found:
        return None
    return (f"{', '.join(found)}: each rank deals its own tile columns in cycles of {cycle} ({host} to the host "
            f"first), so a rank holding fewer than {cycle} leaves GPUs short"
            + ("; compare with --gpu-ratio 0:1" if host else ""))


def _model_notes(machine, timing: Timing, program) -> list[str]:
    """What the prediction made up: kernels without a flop count, and kernels given neither a
    rate nor a default by the machine (the tune cache's rates: user kernels), timed at gemm's (but
    those whose every task does no flop, laswp: gemm's rate times nothing, only their tiles' traffic);
    and the machine's rates for no kernel of the prelude or of the program (a misspelled name)."""
    known = set(CPU_KERNELS) | set(program.kernels) | {"default"}
    notes = [f"{machine.source}: the {place} rates name {', '.join(strays)}, no kernel of the prelude or of "
             f"{program.name} (misspelled?): unused"
             for place, rates in (("cpu", machine.cpu), ("gpu", machine.gpu)) if rates is not None
             for strays in [sorted(set(rates.tables) - known)] if strays]
    if timing.uncounted:
        several = len(timing.uncounted) > 1
        measured = [kernel for kernel in timing.uncounted if kernel in machine.in_run]
        notes.append(f"kernel{'s' if several else ''} {', '.join(timing.uncounted)} declare{'' if several else 's'} "
                     f"no flop count: {'their' if several else 'its'} tasks are timed as a gemm on their largest "
                     f"argument" + (f" (at the rate tune measured in a run of the program: {', '.join(measured)})"
                                    if measured else ""))
    for place, rates in (("cpu", machine.cpu), ("gpu", machine.gpu if timing.gpu_kernels else None)):
        unrated = sorted(timing.working - set(rates.tables)) if rates is not None and "default" not in rates.tables \
            else []
        if unrated:
            notes.append(f"no {place} rate for {', '.join(unrated)} ({machine.source}): timed at gemm's")
    return notes


def _tile_owners(matrices: dict, distribution, nranks: int, gpus: int,
                 stored: set) -> tuple[list[list[int]], list[int]]:
    """Per rank, its GPUs (from 1) that hold none of its ``stored`` tiles ((matrix, i, j) of those some
    task touches, as a run stores them), and the number of tiles it owns."""
    held, owned = [set() for _ in range(nranks)], [0] * nranks
    for matrix in matrices.values():
        for i in range(matrix.mt):
            for j in range(matrix.nt):
                rank, device = distribution.owner(matrix.name, i, j)
                if (matrix.name, i, j) in stored:
                    held[rank].add(device)
                owned[rank] += 1
    return [[gpu for gpu in range(1, gpus + 1) if gpu not in devices] for devices in held], owned


def _rank_stats(rank, walker: Walk, number: int, counted: bool, exchanges: bool) -> dict:
    """One simulated rank's statistics, as a run reports them: no flops when a kernel without a
    count ran (its modelled flops time it, they do not count) or, as ``counted`` False says, where
    the check's standard count gives the run's flops."""
    sent, received, bytes_sent, bytes_received = walker.traffic[number]
    uncounted = walker.uncounted[number]  # as a run's: the first kernel without a count this rank ran
    return {"rank": number, "tasks": rank.tasks,
            "tasks_by_device": {"host": rank.by_device[0],
                                **{f"gpu{g}": count for g, count in enumerate(rank.by_device[1:], 1)}},
            "messages_sent": sent, "messages_received": received,
            "bytes_sent": bytes_sent, "bytes_received": bytes_received,
            "plans_sent": rank.plans[0], "plans_received": rank.plans[1], "peak_tile_bytes": None,  # not modelled
            "device_copies": rank.device_copies, "host_took": rank.host_took,
            "out_of_core": None,  # the simulated GPUs hold every tile they are given
            "kernel_notes": [],  # no kernel runs
            # as a run's: null where nothing is exchanged (one rank without GPUs)
            "instances": walker.instances[number] if exchanges else None,
            "peak_window": rank.peak_window, "flops": walker.flops[number] if counted and not uncounted else None,
            "uncounted": uncounted if counted else None,
            "busy_seconds": [round(b, 6) for b in rank.busy],
            "other_task_seconds": [round(b, 6) for b in rank.other]}


class Tracer:
    """Every simulated rank's events, as ``run --trace`` records them (lane, start, end, name, args)."""

    def __init__(self, nranks: int):
        self.ranks = [[] for _ in range(nranks)]
        self.occurrences: Counter = Counter()
        self.numbers: Counter = Counter()

    def task(self, rank: int, lane: int, device: int, task) -> None:
        owned = task.owned
        args = task_args(self.occurrences, owned.call, owned.tiles, task.priority, owned.values, owned.views)
        if task.taken_from:
            args["taken from"] = f"gpu-{task.taken_from}"
        name = f"gpu-{device}" if device else f"cpu-{lane}"
        self.ranks[rank].append((name, task.started, task.started + task.seconds, owned.call.kernel, args))

    def copy(self, rank: int, began: float, ended: float, moved, source: int, target: int) -> None:
        """A host/GPU copy of ``moved`` (a walk.Copy or Message) from device ``source`` to ``target``."""
        args = copy_args(moved.tile, moved.part, source, target, moved.nbytes)
        self.ranks[rank].append(("copy", began, ended, "copy", args))

    def message(self, message, began: float, sent: float, arrived: float) -> None:
        tile = message.tile
        key = (tile, message.source, message.target)
        self.numbers[key] += 1
        common = {"tile": str(tile), "tag": tile.tag, "message": self.numbers[key], "bytes": message.nbytes}
        self.ranks[message.source].append(("mpi", message.sent_at, sent, "send", {**common, "to": message.target}))
        self.ranks[message.target].append(("mpi", message.posted_at, arrived, "receive",
                                           {**common, "from": message.source}))
