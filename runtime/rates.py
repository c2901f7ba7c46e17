"""Kernel rates: how fast one core or one GPU runs each tile kernel, and a task's modelled time.

A rate table gives GFLOP/s per kernel, as a number or as a ``{tile size: GFLOP/s}``
table (interpolated linearly in the size, clamped at the ends); ``default`` serves
the kernels it does not name (else gemm's rate). ``tiledsl tune`` measures such
tables on this machine (its cache's ``speeds``: ``core`` and ``gpu``), machine files
give them for others (``tiledsl simulate``), and both the simulator and the
runtime's host/GPU work sharing (:mod:`.heteroprio`) time tasks with them.
A kernel that cannot be timed alone (a user's, whose inputs cannot be made up)
is timed inside a run of its program by a :class:`KernelClock`.

A task's size is the order of the square tile with the same flops
(:data:`KERNEL_FLOPS`: a gemm on 512×128 slices is timed as one on ~203×203).
"""
from __future__ import annotations

import bisect
import json

from .flops import modelled_flops
from .world import UsageError

#: floating-point operations of each prelude kernel on s×s tiles, in units of s³
KERNEL_FLOPS = {"gemm": 2, "gemm_nn": 2, "syrk": 1, "trsm": 1, "trsm_l": 1, "trsm_u": 1, "potrf": 1 / 3,
                "getrf_nopiv": 2 / 3, "geqrt": 4 / 3, "gemqrt": 2, "tpqrt": 2, "tpmqrt": 4,
                "ttqrt": 2 / 3, "ttmqrt": 2}


LEAST_RATE, MOST_RATE = 1e-6, 1e9  # GFLOP/s: what a rate past these means is a mistake (1e-300, 1e300)


def rate_kept(gflops: float) -> float:
    """A rate in GFLOP/s as it is saved: four significant digits (rounded to places, a slow user
    kernel's 6e-05 was saved as 0.0, which every later run refused)."""
    return float(f"{gflops:.4g}")


class RateError(UsageError):
    """A rate table that does not say what it must: a one-line message."""


class Rates:
    """GFLOP/s of one device kind per kernel, as functions of the tile size."""

    def __init__(self, table: dict, where: str):
        if not isinstance(table, dict) or not table:
            raise RateError(f"{where}: kernel rates are a {{kernel: GFLOP/s}} object, got {json.dumps(table)}")
        if not ({"gemm", "default"} & set(table)):
            raise RateError(f"{where}: give at least gemm's rate (or a default)")
        self.tables = {name: _table(value, f"{where}.{name}") for name, value in table.items()}

    def __contains__(self, kernel: str) -> bool:
        return kernel in self.tables or "default" in self.tables or "gemm" in self.tables

    def table(self, kernel: str) -> tuple[list, list]:
        """``(sizes, rates)`` of ``kernel``: its own, else the default's, else gemm's."""
        return self.tables.get(kernel) or self.tables.get("default") or self.tables["gemm"]

    def gflops(self, kernel: str, size: float) -> float:
        sizes, rates = self.table(kernel)
        if len(sizes) == 1 or size <= sizes[0]:
            return rates[0]
        if size >= sizes[-1]:
            return rates[-1]
        k = bisect.bisect_right(sizes, size)
        fraction = (size - sizes[k - 1]) / (sizes[k] - sizes[k - 1])
        return rates[k - 1] + fraction * (rates[k] - rates[k - 1])

    def ceiling(self, kernel: str, size: float) -> float | None:
        """A rate the kernel does not pass at ``size``: the best at any size timed up to the first at or
        above it (a rate grows with the tile, but one timing may read low, and the interpolation of it
        was passed); None past the largest size timed, where nothing bounds it. A rate given as one
        number holds at every size."""
        sizes, rates = self.table(kernel)
        if sizes == [0]:
            return rates[0]
        if size > sizes[-1]:
            return None
        return max(rates[:bisect.bisect_left(sizes, size) + 1])

    def seconds(self, kernel: str, flops: float) -> float:
        """Seconds of one task of ``kernel`` doing ``flops`` at this device's rate for its size."""
        if flops <= 0:
            return 0.0
        size = (flops / KERNEL_FLOPS.get(kernel, 2)) ** (1 / 3)
        return flops / (self.gflops(kernel, size) * 1e9)


def upper_bound(speeds: dict | None, size: int, workers: float, gpus: int, ranks: int,
                cores: float | None = None) -> float | None:
    """The kernel upper bound of a run, in GFLOP/s (DESIGN §6): gemm's rate on a core × the CPU
    workers + gemm's rate on a GPU × the GPUs, on every rank, at the run's largest tile ``size``
    (:meth:`Rates.ceiling`); None without the rates (``speeds``, as ``tiledsl tune`` caches them)
    or at a tile larger than they were timed at. Emulated GPUs run on the rank's ``cores`` (None:
    GPUs of their own), which its workers take first."""
    if not speeds or not speeds.get("core") or (gpus and not speeds.get("gpu")):
        return None
    try:
        core = Rates(speeds["core"], "core").ceiling("gemm", size)
        gpu = Rates(speeds["gpu"], "gpu").ceiling("gemm", size) if gpus else 0.0
    except RateError:  # a cache entry written by hand: no bound rather than a failed run
        return None
    if core is None or gpu is None:
        return None
    if cores is not None:
        gpus = min(gpus, max(0.0, cores - workers))
    return ranks * (workers * core + gpus * gpu)


def largest_timed(speeds: dict | None, size: int, gpus: int) -> int | None:
    """The largest tile size gemm was timed at on the devices a run uses, where the run's largest tile
    ``size`` is past it, which leaves the run no upper bound (:func:`upper_bound`); None otherwise."""
    kinds = ["core", *(["gpu"] if gpus else [])]
    if not speeds or not all(speeds.get(kind) for kind in kinds):
        return None
    try:
        largest = min(Rates(speeds[kind], kind).table("gemm")[0][-1] for kind in kinds)  # (0: one rate for all)
    except RateError:
        return None
    return largest if 0 < largest < size else None


def _table(value, where: str) -> tuple[list, list]:
    """``(sizes, rates)`` of a rate given as a number or a {size: rate} table."""
    if _is_number(value):
        pairs = [(0, float(value))]
    elif isinstance(value, dict) and value:
        try:  # JSON's keys are strings: a size is one as text; a rate, as anywhere, is a number
            pairs = sorted((int(size), _number(rate)) for size, rate in value.items())
        except (TypeError, ValueError):
            raise RateError(f"{where}: a rate table maps tile sizes to GFLOP/s, got {json.dumps(value)}") from None
    else:
        raise RateError(f"{where}: a rate is a number of GFLOP/s or a {{size: GFLOP/s}} table, got {json.dumps(value)}")
    bad = next(((size, rate) for size, rate in pairs if not LEAST_RATE <= rate <= MOST_RATE), None)  # NaN too
    if bad is not None:
        got = f"{json.dumps(bad[1])} at size {bad[0]}" if isinstance(value, dict) else json.dumps(value)
        raise RateError(f"{where}: rates are GFLOP/s from {LEAST_RATE:g} to {MOST_RATE:g}, got {got}")
    if isinstance(value, dict) and any(size < 1 for size, _ in pairs):
        raise RateError(f"{where}: the tile sizes of a rate table are positive integers, got {json.dumps(value)}")
    twice = sorted({size for (size, _), (other, _) in zip(pairs, pairs[1:]) if size == other})
    if twice:  # "64" and "064": one of the two rates would be dropped without a word
        keys = [key for key in value if int(key) in twice]
        raise RateError(f"{where}: tile size {', '.join(map(str, twice))} given more than once "
                        f"({', '.join(map(json.dumps, keys))}): give one rate per size")
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value) -> float:
    """``value`` as a float; a TypeError for what is not a number (a string, a boolean)."""
    if not _is_number(value):
        raise TypeError(value)
    return float(value)


class KernelClock:
    """Each kernel's rate as a run measures it: the seconds its program tasks took on the CPU
    workers (a GPU task a CPU worker took counts there too) against their modelled flops
    (:func:`.flops.modelled_flops`: a kernel's own count, else a gemm's on its largest
    argument, as the simulator times it). The tiles come from memory, as in any run, and
    the workers share the machine: what a task takes in a run, which tune's timing of a
    kernel alone on tiles in cache is not."""

    def __init__(self):
        self.spent: dict = {}  # kernel -> [tasks, seconds, flops]

    def measure(self, task, lane: str, shapes: list) -> tuple | None:
        """``(kernel, flops)`` of a program task that ran on ``lane`` on tiles of ``shapes`` (each
        tile's), or None where it is not counted: on a GPU, whose kernels return at launch, or
        with a flop count that fails here (a worker thread must not fail for it)."""
        if not lane.startswith("cpu"):
            return None
        try:
            flops, _ = modelled_flops(task.call, task.call.stacked(shapes), task.values)
        except ArithmeticError:
            return None
        return task.call.kernel, flops

    def add(self, measured: tuple, seconds: float) -> None:
        """Count a task :meth:`measure` measured, which took ``seconds`` (the caller serialises)."""
        kernel, flops = measured
        spent = self.spent.setdefault(kernel, [0, 0.0, 0.0])
        spent[0] += 1
        spent[1] += seconds
        spent[2] += flops
    def rates(self) -> dict:
        """``{kernel: {size: GFLOP/s}}`` of the kernels timed (with flops, in measurable time):
        one entry, at the order of the square tile with the average task's flops, as
        :meth:`Rates.seconds` sizes a task."""
        found = {}
        for kernel, (tasks, seconds, flops) in sorted(self.spent.items()):
            if flops > 0 and seconds > 0 and LEAST_RATE <= flops / seconds / 1e9 <= MOST_RATE:
                size = max(1, round((flops / tasks / KERNEL_FLOPS.get(kernel, 2)) ** (1 / 3)))
                found[kernel] = {str(size): rate_kept(flops / seconds / 1e9)}
        return found
