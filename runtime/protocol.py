"""The distributed task-assignment protocol: which instances of a task a rank creates.

Every rank runs the same loop nest and decides alone, from the static
distribution, which of the eight instance types (Song & Dongarra, SPAA'12 §6;
DESIGN §4) it creates for a task. Rule 1 looks at the main output, rules 2-4 at
every input (an argument read, ``in`` or ``inout``), rules 5-8 at every minor
output (a written argument other than the main one).

The owner computes the task where its main output lives, except that a kernel
without a GPU body runs on the owner's host (:func:`runs_at`): a main output on a GPU
then moves as a minor output homed there does (an input copy, type 3, unless it is
``out``; computed into a copy, type 7, that goes home to its sink, type 6).
"""
from __future__ import annotations

from enum import IntEnum


class Instance(IntEnum):
    OWNER = 1
    NATIVE_INPUT = 2
    INTRA_NODE_ALIEN_INPUT = 3
    INTER_NODE_ALIEN_INPUT = 4
    NATIVE_MINOR_OUTPUT = 5
    SINK_MINOR_OUTPUT = 6
    INTRA_NODE_SOURCE_MINOR_OUTPUT = 7
    INTER_NODE_SOURCE_MINOR_OUTPUT = 8

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", " ").replace("intra node", "intra-node").replace(
            "inter node", "inter-node")


def runs_at(main: tuple, kernel: str, gpu_kernels) -> tuple:
    """The place ``(rank, device)`` where a task runs, given its main output's place: there,
    unless that is a GPU and ``kernel`` is not among ``gpu_kernels`` (those with a GPU body):
    then on the host of the same rank."""
    rank, device = main
    return (rank, device if kernel in gpu_kernels else 0)


def instances(call, places, rank: int, at: tuple | None = None) -> list[tuple[Instance, int]]:
    """The ``(instance type, argument index)`` pairs ``rank`` creates for one task.

    ``places[i]`` is the ``(rank, device)`` of argument ``i``; ``call.main`` indexes
    the main output, ``call.modes`` the access modes; ``at`` is where the task runs
    (:func:`runs_at`; by default the main output's place).
    """
    at = places[call.main] if at is None else at
    found = []
    if at[0] == rank:
        found.append((Instance.OWNER, call.main))
    for index, mode in enumerate(call.modes):
        place = places[index]
        if mode != "out" and place[0] == rank:
            found.append((_input_type(place, at), index))
        if mode != "in" and (index != call.main or place != at):
            found.extend((kind, index) for kind in _minor_types(place, at, rank))
    return found


def _input_type(place, main) -> Instance:
    if place == main:
        return Instance.NATIVE_INPUT
    if place[0] == main[0]:
        return Instance.INTRA_NODE_ALIEN_INPUT
    return Instance.INTER_NODE_ALIEN_INPUT


def _minor_types(place, main, rank: int) -> list[Instance]:
    if place == main:
        return [Instance.NATIVE_MINOR_OUTPUT] if rank == place[0] else []
    kinds = []
    if rank == place[0]:
        kinds.append(Instance.SINK_MINOR_OUTPUT)
    if rank == main[0]:
        kinds.append(Instance.INTRA_NODE_SOURCE_MINOR_OUTPUT if place[0] == main[0]
                     else Instance.INTER_NODE_SOURCE_MINOR_OUTPUT)
    return kinds


#: A part of a tile version moves alone while the parts of it moved to a place stay within
#: this share of the tile; past it, the whole tile moves, in one message instead of many.
PART_SHARE = 0.25


def delivery(delivered: dict, where, part, shape) -> tuple[bool, tuple | None]:
    """Whether a tile version (of ``shape``) must move to place ``where`` for a reader of ``part``
    of it (a sub-range key ``(r0, r1, c0, c1)``, None for the whole tile), and what moves:
    ``part``, or None for the whole tile. ``delivered`` (updated) maps each place to the parts
    of the version that went there, with their sizes.

    The whole version serves every part; a part moves once per version and place, alone while
    the parts moved there stay within :data:`PART_SHARE` of the tile. The sender, the receiver
    and every prediction of traffic decide by this one rule, so that messages pair up (DESIGN §4).
    """
    parts = delivered.setdefault(where, {})
    if None in parts or part in parts:
        return False, None
    if part is not None:
        size = (part[1] - part[0]) * (part[3] - part[2])
        if sum(parts.values()) + size > PART_SHARE * shape[0] * shape[1]:
            part = None
    parts[part] = 0 if part is None else size
    return True, part
