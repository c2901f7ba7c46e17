"""What a kernel says without failing its task: LAPACK's ``info > 0`` where the result
stands, such as an exactly singular U from getrf with partial pivoting (the factorization
is complete, and a solve with it would divide by zero; scipy warns so too).

A kernel calls :func:`note` while its task runs. The engine keeps, per call site, the
first note (on one line, cut as a failure's message is) and how many tasks there left one
(:class:`KernelNotes`), and its rank's statistics carry them; once the run is over they are said as warnings, every rank's by
rank 0 (:func:`warnings_of`), naming the rank, the ``.tile`` line, the kernel and its
tiles as a failure does. Outside a run's task (a kernel called directly), a note is
dropped.
"""
from __future__ import annotations

import json
import threading

import numpy as np

from .crash import in_kernel
from .errors import one_line
from .program import argument_texts


class KernelNotes:
    """The notes of one engine's tasks: per call site, the first in the program's order (not
    the first to arrive: workers finish tasks in any order), and a count."""

    def __init__(self):
        self._lock = threading.Lock()
        self._first: dict = {}  # (.tile line, what) -> (the task's place in the order, its note)
        self._tasks: dict = {}  # (.tile line, what) -> the places of the tasks that left one

    def add(self, task, text: str, device: int = 0) -> None:
        """``task``'s note ``text``, the task run by a worker of ``device`` (0: a CPU worker)."""
        call = task.call
        self._keep((call.line, "kernel"), task.seq, f"kernel {call.kernel} on {arguments_text(task)}"
                                                    f"{where_ran(task, device)} ({call.text}{values_text(task)}): "
                                                    f"{one_line(str(text))}")

    def add_read_of_zeros(self, call, tiles, views, tile, order: int, runner: int | None = None) -> None:
        """A task (``order``: its place in this rank's order; run by rank ``runner``, None: this one) reads
        ``tile`` of a workspace with mode ``in`` before any task wrote it: what it reads is the zeros a
        workspace starts as, most often a call before the one writing it, or a write the program lacks
        (it ran without a word)."""
        arguments = ", ".join(argument_texts(call, tiles, views)) + ("" if runner is None else f" on rank {runner}")
        self._keep((call.line, "zeros"), order, f"kernel {call.kernel} on {arguments} ({call.text}): reads {tile}, "
                                                f"which no task wrote before it (a workspace holds zeros until one "
                                                f"does)")

    def _keep(self, key: tuple, order: int, text: str) -> None:
        with self._lock:
            self._first[key] = min(self._first.get(key, (order, text)), (order, text))
            self._tasks.setdefault(key, set()).add(order)  # a task that says several things counts once

    def summary(self) -> list[dict]:
        """Per call site, in line order: ``{"line", "text", "tasks"}`` (JSON, for the rank's statistics)."""
        with self._lock:
            return [{"line": key[0], "text": self._first[key][1], "tasks": len(self._tasks[key])}
                    for key in sorted(self._first)]


def arguments_text(task) -> str:
    """``task``'s tile arguments as its labels name them (:func:`.program.argument_texts`)."""
    # named_regions (slices), not task.regions, which may read a received part whole
    return ", ".join(argument_texts(task.call, task.tiles, task.named_regions))


def values_text(task) -> str:
    """The value arguments that tell ``task`` from the others of its call, as said after the call's text:
    "; arguments i = 0, j = 3". Integer arguments tell one task of a loop from another (the same tiles may
    recur), and a float or char one the call computes is not in its text; said as the kernel's arguments:
    "with k = 7" (and then "; k=7") read as the loop's k, which was another. A failure and a note say them
    alike (tester u83g: a note left them out)."""
    call = task.call
    said = [f"{name} = {_value_text(value)}" for name, value in zip(call.values, task.values or ())
            if isinstance(value, (int, np.integer)) and not isinstance(value, bool) or name in call.computed]
    return f"; argument{'s' if len(said) > 1 else ''} {', '.join(said)}" if said else ""


def _value_text(value) -> str:
    """A value argument as the language writes it: 7 (not numpy's np.int64(7)), 0.5, "T"."""
    value = value.item() if isinstance(value, np.generic) else value
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else repr(value)  # "\n" escaped


def where_ran(task, device: int) -> str:
    """Where ``task`` ran, for what is said of it, run by a worker of ``device`` (0: a CPU worker,
    which may have taken a GPU task): "" on the host, " on GPU 1", ..."""
    return (f" on GPU {device}" if device else
            f" on a CPU worker, taken from GPU {task.device} (--host-takes)" if task.device else "")


def on_whole_tiles() -> bool:
    """Whether the task the calling thread runs names no sub-range of its tiles (True outside a task)."""
    regions = getattr(getattr(in_kernel, "task", None), "named_regions", None)
    return regions is None or all(region is None for region in regions)


def note(text: str) -> None:
    """Leave ``text`` as a note of the task the calling thread runs (see the module)."""
    notes, task = getattr(in_kernel, "notes", None), getattr(in_kernel, "task", None)
    if notes is not None and task is not None:
        notes.add(task, text, getattr(in_kernel, "device", 0))


def warnings_of(source: str, ranks: list) -> list[str]:
    """The warnings of every rank's notes (``ranks``: their statistics), one per call site: the
    first rank's note, with how many tasks left one at that line on every rank."""
    first: dict = {}
    tasks: dict = {}
    for stats in ranks:
        for entry in stats.get("kernel_notes", ()):
            first.setdefault(entry["line"], (stats["rank"], entry["text"]))
            tasks[entry["line"]] = tasks.get(entry["line"], 0) + entry["tasks"]
    lines = []
    for line in sorted(first):
        rank, text = first[line]
        more = tasks[line] - 1
        lines.append(f"rank {rank} ({source}:{line}): {text}"
                     + (f" (and {more} more task(s) at this line)" if more else ""))
    return lines
