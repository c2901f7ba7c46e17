"""The distributed task-assignment protocol: which instances of a task a rank creates.

Every rank runs the same loop nest and decides alone, from the static
distribution, which of the eight instance types (Song & Dongarra, SPAA'12 §6;
DESIGN §4) it creates for a task. Rule 1 looks at the main output, rules 2-4 at
every input (an argument read, ``in`` or ``inout``), rules 5-8 at every minor
output (a written argument other than the main one).
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


def instances(call, places, rank: int) -> list[tuple[Instance, int]]:
    """The ``(instance type, argument index)`` pairs ``rank`` creates for one task.

    ``places[i]`` is the ``(rank, device)`` of argument ``i``; ``call.main`` indexes
    the main output, ``call.modes`` the access modes.
    """
    main = places[call.main]
    found = []
    if main[0] == rank:
        found.append((Instance.OWNER, call.main))
    for index, mode in enumerate(call.modes):
        place = places[index]
        if mode != "out" and place[0] == rank:
            found.append((_input_type(place, main), index))
        if mode != "in" and index != call.main:
            found.extend((kind, index) for kind in _minor_types(place, main, rank))
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
