"""Host cores taking GPU work as a run goes (``--host-takes``), after HeteroPrio (RR-8513 §3.2).

Tasks are placed statically: a task runs where its main output lives
(:func:`.protocol.runs_at`), so with uniform tiles on the GPUs the host's cores
have only their own block columns, if any. With ``--host-takes on`` a CPU worker
that finds the host's ready queue empty looks at the GPUs' queues and takes one
task there, as HeteroPrio's CPU workers do: among the tasks it would finish no
later than the GPU would (its estimated time on a core, copies of its tiles to
the host and back included, is at most the GPU time of the tasks queued ahead of
it on that GPU, itself included, and what the GPU still has to run of the tasks
it has started), the one with the lowest acceleration factor
(GPU speed over a core's), the highest priority first on ties. The condition
replaces HeteroPrio's spoliation: a task taken is never one the GPU would have
finished sooner, as far as the estimates go.

The estimates come from kernel rates (:mod:`.rates`): ``tiledsl tune``'s
measurements for a run, the machine file's for ``tiledsl simulate``, which applies
the same choice (:func:`choose`) to its simulated queues. A taken task runs on
the worker as its CPU body on host copies of its tiles, the written ones copied
back before it completes (:func:`~.engine.Engine`), so the task graph, the
messages and the results do not change.

No threads here: :func:`choose` reads the scheduler's queues under the engine's lock.
"""
from __future__ import annotations

import heapq

from .flops import modelled_flops
from .rates import Rates
from .world import UsageError

#: Host/GPU copy rate assumed for a taken task's tiles, bytes per second (PCIe 3 x16, in practice)
COPY_RATE = 10e9


class Costs:
    """``(seconds on a core, seconds on a GPU)`` of a task, memoised by call site, shapes and values."""

    def __init__(self, core: Rates, gpu: Rates, copy_rate: float = COPY_RATE):
        self.core, self.gpu, self.copy_rate = core, gpu, copy_rate
        self.known: dict = {}

    def __call__(self, task) -> tuple[float, float]:
        call, named = task.call, task.named_regions  # not .regions, which read a copy of a sub-range whole
        shapes = tuple(call.tile_shapes(task.tiles, named))
        key = (id(call), shapes, task.values)
        found = self.known.get(key)
        if found is None:
            found = self.known[key] = self._model(call, task.tiles, named, task.values, shapes)
        return found

    def _model(self, call, tiles, regions, values, shapes) -> tuple[float, float]:
        flops, _ = modelled_flops(call, call.shapes(tiles, regions), values)
        host = self.core.seconds(call.kernel, flops) + round_trip_bytes(call, shapes) / self.copy_rate
        return host, self.gpu.seconds(call.kernel, flops)


def round_trip_bytes(call, shapes) -> int:
    """Bytes a GPU task run on the host moves: each tile (``shapes``, per tile) down, the written ones
    back up."""
    written = set(call.writes)
    return 8 * sum(r * c * (1 + (index in written)) for index, (r, c) in enumerate(shapes))


def choose(queues: list, costs, busy=None) -> tuple[int, object] | None:
    """``(gpu, task)``: the GPU task an idle CPU worker takes (see the module), or None.

    ``queues[g]`` is GPU ``g``'s ready queue, a heap of ``(-priority, seq, task)``
    (``queues[0]``, the host's, is not looked at); ``costs(task)`` gives ``(host
    seconds, GPU seconds)``; a task whose ``host_kernel`` is None cannot run on the host;
    ``busy[g]``: the seconds GPU ``g`` still needs for the tasks it has started (default none).
    """
    best = None
    for device in range(1, len(queues)):
        ahead = busy[device] if busy is not None else 0.0
        for _, seq, task in sorted(queues[device]):
            host, gpu = costs(task)
            ahead += gpu
            if task.host_kernel is None or host > ahead:
                continue
            key = (host / gpu if gpu > 0 else float("inf"), -task.priority, seq)
            if best is None or key < best[0]:
                best = (key, device, task)
    return None if best is None else (best[1], best[2])


def take(scheduler, costs, busy=None):
    """The task :func:`choose` picks, removed from its GPU's queue; None if there is none."""
    chosen = choose(scheduler.ready, costs, busy)
    if chosen is None:
        return None
    device, task = chosen
    queue = scheduler.ready[device]
    queue[:] = [entry for entry in queue if entry[2] is not task]
    heapq.heapify(queue)
    return task


def costs_from_speeds(speeds: dict | None, program: str, gpus: int, backend: str,
                      asked: str = "--host-takes on") -> Costs:
    """The :class:`Costs` of kernel rates as ``tiledsl tune`` measures them (``speeds``: ``core`` and
    ``gpu`` tables); a usage error when there are none for a GPU (``program``: its .tile, for the
    command to run; ``asked``: how the interface asked for them, ``host_takes=True`` from the API)."""
    speeds = speeds or {}
    if "core" not in speeds or "gpu" not in speeds:
        raise UsageError(f"{asked} needs this machine's kernel rates on a core and a GPU: run "
                         f"`tiledsl tune {program} --gpus {gpus} --gpu-backend {backend}` first")
    return Costs(Rates(speeds["core"], "core"), Rates(speeds["gpu"], "gpu"))
