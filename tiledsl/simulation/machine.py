"""Machine files: what ``tiledsl simulate`` knows of the machine it predicts a run on.

A machine file is a small JSON object (the shipped ones are in ``tiledsl/machines/``;
``--machine NAME`` finds them by name, ``--machine PATH`` reads any file)::

    {"name": "...", "about": "where the figures come from",
     "cores": 12, "gpus": 3,                      # per node
     "memory_gbs": 10,                            # optional: a core streaming a task's tiles
     "cpu": {"gemm": 10.7, "potrf": {"256": 5.1, "1152": 8.4}, "default": 8.0},
     "gpu": {"gemm": {"256": 120, "1088": 290}, "default": 200},
     "network": {"latency_us": 1.5, "bandwidth_gbs": 3.2},
     "pcie": {"latency_us": 10, "bandwidth_gbs": 5.5},
     "gpu_link": {"latency_us": 5, "bandwidth_gbs": 300},   # optional: GPU to GPU (NVLink)
     "runtime": {"walk_us": 0.3, "submit_us": 25, "task_us": 15, "transfer_us": 8, "notice_us": 0}}

* ``cpu`` / ``gpu``: GFLOP/s of one CPU core / one GPU per kernel, a number or a
  table over square tile sizes (interpolated linearly in the size, clamped at the
  ends); ``default`` serves kernels the file does not name, gemm included (else gemm's
  rate serves them): each table gives one of the two.
  A task of a kernel takes ``flops / rate + task_us``; its size is the order of the
  square tile with the same flops (a gemm on 512×128 slices is timed at ~203).
  ``memory_gbs`` (optional) adds, on a core, the time to bring the task's tiles
  from memory: tune times kernels on tiles still in cache, a run's tasks mostly
  find them in memory (not to the kernels tune timed in a run of the program,
  its user kernels: their rates include it).
* ``network``: each message takes ``latency + bytes / bandwidth`` and holds the
  sender's and the receiver's link (full duplex, FIFO) for ``bytes / bandwidth``.
* ``pcie``: host/GPU copies, the same way on each GPU's in- and out-stream (needed only
  with GPUs);
  ``gpu_link`` (optional, default ``pcie``): copies between two GPUs of a node.
* ``runtime``: the costs of tiledsl itself: the generation thread's walk per task
  of the loop nest met (``walk_us``: every task where a rank walks the whole nest,
  those its share walk meets where it walks only its share) and per task it
  submits (``submit_us``); a worker's cost per program task (``task_us``) and per
  transfer task (``transfer_us``, a send posted, a received tile taken); how late
  the MPI thread notices a completed message (``notice_us``); a field left out counts 0.
* ``ranks_per_node``: ranks sharing one node's cores (the ``local`` machine puts
  every rank on it, as ``tiledsl run --np`` does); their CPU workers share the cores.

Without ``--machine`` the ``local`` file (this kind of machine's runtime costs,
measured on the development machine) is used with the kernel rates ``tiledsl tune``
measured here (its cache entry for the program).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from .. import userjson
from ..runtime import tuning
from ..runtime.rates import RateError, Rates
from ..runtime.world import UsageError

RUNTIME_FIELDS = {"walk_us": 0.0, "submit_us": 0.0, "task_us": 0.0, "transfer_us": 0.0, "notice_us": 0.0}
LINK_FIELDS = ("latency_us", "bandwidth_gbs")
TOP_FIELDS = {"name", "about", "cores", "gpus", "cpu", "gpu", "network", "pcie", "gpu_link", "runtime",
              "ranks_per_node", "memory_gbs"}


class MachineError(UsageError):
    """A machine file that cannot be read or does not say what it must: a one-line message."""


@dataclass(frozen=True)
class Link:
    """A link's latency (seconds) and bandwidth (bytes per second)."""

    latency: float
    bandwidth: float

    def seconds(self, nbytes: int) -> float:
        """How long ``nbytes`` hold the link (the latency is added on arrival)."""
        return nbytes / self.bandwidth


@dataclass
class Machine:
    """A machine's node: cores, GPUs, kernel rates, links and tiledsl's own costs."""

    name: str
    cores: int
    gpus: int
    cpu: Rates
    gpu: Rates | None
    network: Link
    pcie: Link | None  # None: no GPU, no host/GPU link
    gpu_link: Link | None
    runtime: dict = field(default_factory=lambda: dict(RUNTIME_FIELDS))
    ranks_per_node: int | None = 1  # None: every rank on one node
    memory: float = 0.0  # bytes per second a core streams a task's tiles at (0: not counted)
    in_run: frozenset = frozenset()  # kernels whose CPU rates were timed in a run: memory included
    about: str = ""
    source: str = ""

    def seconds(self, kernel: str, flops: float, nbytes: int, on_gpu: bool) -> float:
        """Modelled seconds of one task of ``kernel`` doing ``flops`` on tiles of ``nbytes``, on a
        core or a GPU."""
        rates = self.gpu if on_gpu else self.cpu
        fetch = nbytes / self.memory if self.memory and not on_gpu and kernel not in self.in_run else 0.0
        return rates.seconds(kernel, flops) + fetch + self.runtime["task_us"] * 1e-6


def _link(value, where: str) -> Link:
    if not isinstance(value, dict) or set(value) != set(LINK_FIELDS):
        raise MachineError(f"{where} must give exactly {', '.join(LINK_FIELDS)}, got {json.dumps(value)}")
    latency, bandwidth = (_number(value[key], f"{where}.{key}", positive=key == "bandwidth_gbs")
                          for key in LINK_FIELDS)
    return Link(latency * 1e-6, bandwidth * 1e9)


def _optional_link(content: dict, key: str, where: str) -> Link | None:
    """Link ``key`` of the file, or None where a machine without GPUs leaves it out."""
    return _link(content[key], f"{where}: {key}") if key in content else None


MOST = 1e9  # microseconds, GB/s: a machine file's number past this is a mistake (1e300), not a machine
MOST_PER_NODE = 4096  # cores or GPUs of a node: more is a mistake (the simulation makes a worker of each)


def _number(value, where: str, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MOST \
            or positive and value == 0:
        span = f"above 0 and up to {MOST:g}" if positive else f"from 0 to {MOST:g}"
        raise MachineError(f"{where} must be a number {span}, got {json.dumps(value)}")
    return float(value)


def _count(value, where: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MOST_PER_NODE:
        raise MachineError(f"{where} must be an integer from {least} to {MOST_PER_NODE}, got {json.dumps(value)}")
    return value


def _memory(content: dict, where: str) -> float:
    """``memory_gbs`` in bytes per second; 0 where the file leaves it out (no memory cost)."""
    if "memory_gbs" not in content:
        return 0.0
    return _number(content["memory_gbs"], f"{where}: memory_gbs (leave it out for no memory time)", positive=True) \
        * 1e9


def shipped() -> list[str]:
    """The names of the machine files that ship with tiledsl."""
    return sorted(p.name[:-5] for p in resources.files("tiledsl.machines").iterdir() if p.name.endswith(".json"))


def read(spec: str) -> dict:
    """The JSON object of machine file ``spec``: a path, or the name of a shipped file."""
    path = Path(spec)
    if path.is_dir():
        raise MachineError(f"machine file {spec!r} is a directory: name a JSON file (or one of: {', '.join(shipped())})")
    if not path.is_file():
        if spec in shipped():
            return json.loads(resources.files("tiledsl.machines").joinpath(f"{spec}.json").read_text(encoding="utf-8"))
        raise MachineError(f"machine file {spec!r} not found (a path, or one of: {', '.join(shipped())})")
    try:
        content = userjson.loads(path.read_bytes())
    except (OSError, ValueError) as error:
        raise MachineError(f"cannot read machine file {spec}: {error}") from None
    if not isinstance(content, dict):
        raise MachineError(f"machine file {spec}: not a JSON object")
    return content


def machine(content: dict, where: str = "machine file") -> Machine:
    """A :class:`Machine` from a machine file's content (checked field by field)."""
    unknown = _unknown_fields(content, TOP_FIELDS)
    if unknown:
        raise MachineError(f"{where}: {unknown} (fields: {', '.join(sorted(TOP_FIELDS))})")
    for key in ("cores", "cpu", "network", *(("pcie",) if content.get("gpus") else ())):  # pcie: the GPUs' link
        if key not in content:
            why = f" (the link between a node's host and GPUs, which it has: gpus {content['gpus']})" if key == "pcie" \
                else ""
            raise MachineError(f"{where}: missing field {key!r}{why}")
    runtime = content.get("runtime", {})
    if not isinstance(runtime, dict):
        raise MachineError(f"{where}: runtime takes {', '.join(RUNTIME_FIELDS)}, got {json.dumps(runtime)}")
    unknown = _unknown_fields(runtime, RUNTIME_FIELDS, "runtime.")
    if unknown:
        raise MachineError(f"{where}: {unknown} (runtime takes {', '.join(RUNTIME_FIELDS)})")
    cores, gpus = _count(content["cores"], f"{where}: cores", 1), _count(content.get("gpus", 0), f"{where}: gpus", 0)
    if gpus and "gpu" not in content:
        raise MachineError(f"{where}: {gpus} GPU(s) per node but no 'gpu' rates")
    if "gpu" in content and "gpus" not in content:  # else its GPUs would be dropped without a word
        raise MachineError(f"{where}: 'gpu' rates but no 'gpus' (the GPUs per node; 0 for none)")
    per_node = content.get("ranks_per_node", 1)
    if per_node is not None and (isinstance(per_node, bool) or not isinstance(per_node, int) or per_node < 1):
        raise MachineError(f"{where}: ranks_per_node must be a positive integer or null (all ranks on one node), "
                           f"got {json.dumps(per_node)}")
    for key in ("name", "about"):
        if not isinstance(content.get(key, ""), str):
            raise MachineError(f"{where}: {key} must be a string, got {json.dumps(content[key])}")
    cpu = _rates(content["cpu"], f"{where}: cpu")
    gpu = _rates(content["gpu"], f"{where}: gpu") if "gpu" in content else None
    return Machine(name=content.get("name", where), cores=cores, gpus=gpus, cpu=cpu, gpu=gpu,
                   network=_link(content["network"], f"{where}: network"),
                   pcie=_optional_link(content, "pcie", where),
                   gpu_link=_optional_link(content, "gpu_link" if "gpu_link" in content else "pcie", where),
                   runtime={**RUNTIME_FIELDS, **{k: _number(v, f"{where}: runtime.{k}") for k, v in runtime.items()}},
                   ranks_per_node=per_node,
                   memory=_memory(content, where),
                   about=content.get("about", ""), source=where)


def _unknown_fields(given: dict, known, prefix: str = "") -> str | None:
    """``unknown fields 'gpuss', 'netwrok'``: every field of ``given`` not ``known`` (each named after
    ``prefix``), said at once; None where there is none."""
    unknown = sorted(set(given) - set(known))
    if not unknown:
        return None
    return f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(repr(prefix + name) for name in unknown)}"


def _rates(table, where: str) -> Rates:
    try:
        return Rates(table, where)
    except RateError as error:
        raise MachineError(str(error)) from None


def load(spec: str) -> Machine:
    """The machine of ``--machine spec``: a machine file's path, or a shipped file's name."""
    return machine(read(spec), spec)


def this_machine(program, gpus: int, backend: str, source: str | None = None, module=None) -> Machine:
    """This machine, for a simulation without ``--machine``: the ``local`` file with the kernel
    rates of this machine's ``tiledsl tune`` cache for ``program`` (``source``: its .tile file,
    which the command to tune it names; ``module(helpers)``: the digest of its kernel module and
    those helpers, which a warning compares with the one tune measured)."""
    content = {**read("local"), "cores": os.cpu_count() or 1}
    tuned = tuning.entry(tuning.program_key(program), gpus, backend) or {}
    measured = tuned.get("kernel_module")
    edited = measured and module and tuning.edited_module(
        program, measured, tuning.cache_path(), module(tuning.helpers_of(tuned.get("kernel_helpers"))))
    if edited:
        tuning.warn_once(edited)
    speeds = tuned.get("speeds") or {}
    if "core" not in speeds:
        raise MachineError(f"no kernel rates for {program.name} on this machine: run `tiledsl tune "
                           f"{source or program.name}"
                           + (f" --gpus {gpus} --gpu-backend {backend}" if gpus else "")
                           + "` first, or give --machine FILE")
    # the rates timed alone, as the cores ran them together in tune's run (memory included): each core at
    # its rate alone predicted a 2-core VM's runs twice as fast as they were
    shared, in_run = _sharing(tuned, program, source)
    content["cpu"] = {kernel: _scaled(rates, shared) if shared and kernel not in in_run else rates
                      for kernel, rates in speeds["core"].items()}
    content["name"] = "this machine, with its tuned kernel rates" + (
        f" (a core's, {shared:.2f} of its rate alone when all work)" if shared else "")
    if gpus:
        content["gpu"] = speeds.get("gpu") or content["cpu"]
        content["gpus"] = gpus
    local = machine(content, f"local + {tuning.cache_path()}")
    local.in_run = frozenset(set(speeds["core"]) if shared else in_run)
    return local


def _sharing(tuned: dict, program, source: str | None) -> tuple:
    """The tuned entry's factor of a core's rate when all cores work (None where tune measured none) and the
    kernels it timed in a run; a value that is neither (the cache edited by hand) is a MachineError."""
    shared, in_run = tuned.get("shared_cores"), tuned.get("measured_in_run") or []
    factor = shared.get("factor") if isinstance(shared, dict) else None
    wrong = None
    if shared is not None and not isinstance(shared, dict):
        wrong = f"shared_cores is {shared!r}, not an object"
    elif factor is not None and (isinstance(factor, bool) or not isinstance(factor, (int, float))
                                 or not 0 < factor < math.inf):
        wrong = f"shared_cores.factor is {factor!r}, not a number above 0"
    elif not isinstance(in_run, list) or not all(isinstance(kernel, str) for kernel in in_run):
        wrong = f"measured_in_run is {in_run!r}, not a list of kernels"
    if wrong:
        raise MachineError(f"the tuned entry of {program.name} in {tuning.cache_path()}: {wrong}: run `tiledsl "
                           f"tune {source or program.name}` again to rewrite it")
    return factor, set(in_run)


def _scaled(rates, factor: float):
    """A kernel's rates (one number, or {size: GFLOP/s}) times ``factor``."""
    if isinstance(rates, dict):
        return {size: rate * factor for size, rate in rates.items()}
    return rates * factor
