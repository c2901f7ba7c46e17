"""Tile versions sent along a tree of the ranks that read them (``--broadcast tree``).

Under the direct protocol (:mod:`.exchange`) the owner of a tile sends each
version to every rank that reads it, one message after another on its own link,
so the last reader of a panel tile waits for all the sends before its own. Under
``tree`` the owner sends a version to a few of its readers, which forward it on:
a binomial tree (:func:`binomial_tree`), so that the owner's link carries
⌈log2(readers + 1)⌉ messages and a reader waits about that many message times.
This is how SPAA'12's communication analysis counts broadcasts and how PaRSEC
sends them.

Ranks agree on the tree without walking each other's tasks. The owner alone
knows every rank that reads a version (it creates a send for each), so it
announces every delivery of a tile to a rank in a *plan*: a small message on a
communicator of its own (:meth:`.comm.Communicator.send_plan`) naming the rank
the data comes from (the owner, or a reader that forwards it) and the ranks this
one forwards it to. A reader posts a receive for the plan where it would have
posted the data's receive (its copy of the version: :meth:`Exchange.copy_at
<.exchange.Exchange.copy_at>`), and plans, like tiles, are matched by source and tag
in posting order: the k-th plan of a tile from its owner is for the k-th delivery
of that tile there. Once its plan is in, the reader posts the data's receive
(from the parent it names; plans of one tile are acted on in program order, so
the receives from one parent are posted in the order it sends) and, for each
child, a forward that sends the copy once it has arrived (after the forwards of
earlier versions to the same child: the same order rule), posted by the thread that
sees it arrive rather than by a worker, which a long kernel could keep.

The owner plans a version when the first of its sends runs (the version is
ready): the sends of that version created by then and ready to go are the tree's
members, in the order they were created (program order); a send created later
(the walk had not reached its reader yet) forms a tree of its own. A sub-range
of a tile goes directly from the owner, announced by a plan too. A send whose
destination gets the data from another rank ends at once on the owner. A
forwarding rank holds its copy until its forwards are done.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from .program import Call
from .scheduler import Task

#: Float64 slots of a plan: the parent, the number of children, the children.
PLAN_SLOTS = 32
#: ``--broadcast auto`` (the default) sends along trees from this many ranks: below, a version has
#: too few readers for a tree to shorten anything (simulated on Keeneland: the same times up to 16
#: nodes, 18% faster at 32), and the direct protocol's senders are what ``explain`` predicts.
TREE_FROM_RANKS = 8
CHOICES = ("auto", "direct", "tree")
#: the call a forward stands for in the task window (and in stall reports)
FORWARD = Call("forward", ("in",), main=0, line=0, text="forward a tile version to another rank that reads it",
               role="transfer")


def broadcast_for(choice: str, ranks: int) -> str:
    """The protocol a run of ``ranks`` ranks uses for ``--broadcast choice``: direct or tree."""
    if choice == "auto":
        return "tree" if ranks >= TREE_FROM_RANKS else "direct"
    return choice


def binomial_tree(root: int, destinations: list) -> dict:
    """``{destination: (parent, children)}`` of the binomial tree over ``[root, *destinations]``:
    member ``i`` (the root is 0) gets the data from member ``i - 2^⌊log2 i⌋`` and sends it to
    members ``i + 2^j`` for every ``2^j > i``, the largest subtree (the smallest ``j``) first. The
    root sends ⌈log2(readers + 1)⌉ messages, and no reader is more than ⌊log2(readers + 1)⌋
    messages away from it."""
    members = [root, *destinations]
    size = len(members)
    tree = {}
    for i in range(1, size):
        parent = members[i - (1 << (i.bit_length() - 1))]
        children = [members[i + (1 << j)] for j in range(i.bit_length(), size.bit_length()) if i + (1 << j) < size]
        tree[members[i]] = (parent, children)
    return tree


def encode(parent: int, children: list) -> np.ndarray:
    """A plan's message: where the data comes from, and to whom it goes on."""
    if len(children) > PLAN_SLOTS - 2:
        raise ValueError(f"a plan holds {PLAN_SLOTS - 2} children at most, not {len(children)}")
    plan = np.full(PLAN_SLOTS, -1.0)
    plan[0], plan[1] = parent, len(children)
    plan[2:2 + len(children)] = children
    return plan


def decode(plan: np.ndarray) -> tuple[int, list]:
    count = int(plan[1])
    return int(plan[0]), [int(c) for c in plan[2:2 + count]]


class Broadcasts:
    """One rank's side of the tree broadcasts: the owner's plans, a reader's receives and forwards.

    Runs under the engine's lock, except where a method says otherwise."""

    def __init__(self, exchange, priority: int):
        self.exchange, self.priority = exchange, priority  # the priority of transfers
        self.engine, self.comm, self.rank = exchange.engine, exchange.comm, exchange.rank
        self.unplanned: dict = {}  # (tag, version) -> [(send task, destination)] of whole versions, in order
        self.sources: dict = {}  # send task -> the rank its destination gets the data from (planned)
        self.expected: dict = {}  # tag -> deque of [copy, plan or None] waiting for their plans, in order
        self.forwards: dict = {}  # (tag, child) -> deque of (copy, its forward task) still to post, in order

    # ---------------------------------------------------------------- the owner
    def send(self, task: Task, tile, destination: int, part, post) -> None:
        """Make ``task`` (a send of ``tile``'s version, or of ``part`` of it, to ``destination``)
        announce its delivery, and post the data with ``post(data)`` when this rank is its source."""
        key = None
        if part is None:
            key = (tile.tag, tile.version)
            self.unplanned.setdefault(key, []).append((task, destination))

        def kernel(data):  # on a worker, without the lock
            with self.engine.lock:
                source = self.sources.pop(task, None)
                if source is None:
                    source = self._plan(task, tile, destination, key)
            if source == self.rank:
                post(data)
                return
            self.exchange.posted_in_order((tile.tag, destination))  # another reader forwards it
            self.engine.complete(task)
        task.kernel = kernel

    def _plan(self, task: Task, tile, destination: int, key) -> int:
        """Plan the tree of ``task``'s version over the sends ready now (see the module); the
        rank ``destination`` gets the data from."""
        members = [(task, destination)]
        if key is not None:
            waiting = self.unplanned.pop(key)
            members = [(t, d) for t, d in waiting if t is task or t.waiting == 0]
            later = [(t, d) for t, d in waiting if t is not task and t.waiting != 0]
            if later:
                self.unplanned[key] = later
        tree = binomial_tree(self.rank, [d for _, d in members])
        for member, place in members:
            parent, children = tree[place]
            self.comm.send_plan(encode(parent, children), place, tile.tag)
            if member is not task:
                self.sources[member] = parent
        return tree[destination][0]

    # ---------------------------------------------------------------- a reader
    def expect(self, copy) -> None:
        """Receive ``copy`` (of a version homed on another rank, its buffer allocated) as its
        plan will say."""
        tile = copy.tile
        entry = [copy, None]
        self.expected.setdefault(tile.tag, deque()).append(entry)
        plan = np.empty(PLAN_SLOTS)
        self.comm.receive_plan(plan, tile.rank, tile.tag, lambda: self._planned(tile.tag, entry, plan))

    def _planned(self, tag: int, entry: list, plan: np.ndarray) -> None:
        """The MPI thread: a plan is in; act on the plans of this tile in program order."""
        with self.engine.lock:
            entry[1] = decode(plan)
            waiting = self.expected[tag]
            while waiting and waiting[0][1] is not None:
                copy, (parent, children) = waiting.popleft()
                self._receive(copy, parent, children)
            if not waiting:
                del self.expected[tag]

    def unplanned_copy(self, copy) -> bool:
        """Whether ``copy`` still waits for its plan (for stall reports)."""
        return any(entry[0] is copy and entry[1] is None for entry in self.expected.get(copy.tile.tag, ()))

    def _receive(self, copy, parent: int, children: list) -> None:
        exchange, tile = self.exchange, copy.tile
        copy.source = parent
        for child in children:
            self._forward(copy, child)
        done = exchange.traced("receive", tile, parent, copy.data.nbytes,
                               lambda: exchange.arrive(copy, copy.data))
        self.comm.receive(copy.data, parent, tile.tag, done)

    def _forward(self, copy, child: int) -> None:
        """Send ``copy`` on to ``child`` once it is here, after the earlier forwards of the tile to
        ``child``; the copy is kept until then. The send is posted by the thread that sees the
        data arrive, not by a worker, which a long kernel of this rank could hold: a forward is a
        task of the window (the run ends when it is done) that never goes to a ready queue."""
        task = Task(FORWARD, (), None, self.priority)
        self.engine.enqueue(task, 1)  # completed by _forwarded, never made ready
        copy.readers += 1
        key = (copy.tile.tag, child)
        self.forwards.setdefault(key, deque()).append((copy, task))
        if not self.exchange.wait_for(copy, lambda: self._post_forwards(key)):
            self._post_forwards(key)

    def _post_forwards(self, key) -> None:
        """Post the forwards of one tile to one child whose data is here, in order."""
        waiting = self.forwards[key]
        while waiting and waiting[0][0].arrived:
            copy, task = waiting.popleft()
            tile, child = copy.tile, key[1]
            self.comm.send(copy.data, child, tile.tag, self.exchange.traced(
                "send", tile, child, copy.data.nbytes, lambda copy=copy, task=task: self._forwarded(task, copy)))
        if not waiting:
            del self.forwards[key]

    def _forwarded(self, task: Task, copy) -> None:
        """The MPI thread: a forward is done; the copy may go."""
        with self.engine.lock:
            copy.readers -= 1
            self.exchange.maybe_free(copy)
        self.engine.complete(task)
