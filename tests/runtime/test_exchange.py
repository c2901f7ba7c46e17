"""The copy thread (runtime/exchange.py's Mover): copies overlap, and what arrives first goes on first.

The transfers here are gates that the test opens, so each test decides when a
copy arrives; the protocol's use of the Mover is covered by every GPU run
(tests/runtime/test_gpus.py).
"""
from __future__ import annotations

import queue
import threading
import time

import pytest

from tiledsl.runtime.exchange import IN_FLIGHT, Mover

pytestmark = pytest.mark.timeout(30)

A_COPY = ("A[0, 0]", None, 0, 1)  # what a copy moves (Mover.move's ``copied``): tile A[0, 0], host to GPU 1


class Gate:
    """A copy under way that arrives when the test opens it."""

    def __init__(self, value):
        self.value = value
        self.open = threading.Event()

    def ready(self) -> bool:
        return self.open.is_set()

    def result(self):
        self.open.wait()
        return self.value


@pytest.fixture
def mover():
    errors = []
    mover = Mover(errors.append, lambda: None)
    mover.errors = errors
    yield mover
    mover.stop()


def eventually(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def test_a_copy_that_arrives_first_goes_on_first(mover):
    arrived = queue.SimpleQueue()
    slow, fast = Gate("slow"), Gate("fast")
    mover.move(lambda: slow, arrived.put, A_COPY)
    mover.move(lambda: fast, arrived.put, A_COPY)
    fast.open.set()
    assert arrived.get(timeout=5) == "fast"  # not held up by the copy started before it
    slow.open.set()
    assert arrived.get(timeout=5) == "slow"
    assert mover.copies == 2 and mover.errors == []


def test_copies_that_have_arrived_go_on_in_the_order_they_started(mover):
    arrived = queue.SimpleQueue()
    gates = [Gate(i) for i in range(5)]
    blocker = Gate("blocker")  # keeps the thread polling until every gate is open
    mover.move(lambda: blocker, arrived.put, A_COPY)
    for gate in gates:
        mover.move(lambda gate=gate: gate, arrived.put, A_COPY)
    for gate in reversed(gates):
        gate.open.set()
    assert [arrived.get(timeout=5) for _ in gates] == list(range(5))
    blocker.open.set()
    assert arrived.get(timeout=5) == "blocker"


def test_at_most_in_flight_copies_are_under_way(mover):
    started, arrived = [], queue.SimpleQueue()
    gates = [Gate(i) for i in range(IN_FLIGHT + 2)]

    def start(gate):
        started.append(gate.value)
        return gate
    for gate in gates:
        mover.move(lambda gate=gate: start(gate), arrived.put, A_COPY)
    assert eventually(lambda: len(started) == IN_FLIGHT)
    time.sleep(0.05)
    assert len(started) == IN_FLIGHT  # the rest wait for a copy to arrive
    gates[3].open.set()
    assert arrived.get(timeout=5) == 3
    assert eventually(lambda: len(started) == IN_FLIGHT + 1)
    for gate in gates:
        gate.open.set()
    assert sorted(arrived.get(timeout=5) for _ in range(IN_FLIGHT + 1)) == [i for i in range(IN_FLIGHT + 2) if i != 3]


def test_a_failing_copy_is_reported_and_the_others_go_on(mover):
    arrived = queue.SimpleQueue()

    def broken():
        raise MemoryError("out of device memory")
    done = Gate("done")
    done.open.set()
    mover.move(broken, arrived.put, A_COPY)
    mover.move(lambda: done, arrived.put, A_COPY)
    assert arrived.get(timeout=5) == "done"
    assert [str(error) for error in mover.errors] == ["out of device memory"]
    assert mover.copies == 1


def test_a_failure_of_the_thread_itself_is_reported_at_once(mover):
    class Broken(Gate):
        def ready(self) -> bool:
            raise AttributeError("broken")

    mover.move(lambda: Broken("x"), lambda result: None, A_COPY)
    assert eventually(lambda: mover.errors) and str(mover.errors[0]) == "broken"


def test_the_copy_thread_starts_with_the_first_copy():
    """Started with the engine, an interrupt before the run (Ctrl-C while it was set up) left it
    waiting for ever: 11 of them after 200 interrupted API runs with GPUs."""
    mover = Mover(lambda error: None, lambda: None)
    assert mover.thread.ident is None
    mover.stop()  # never started: nothing to wait for
    assert mover.thread.ident is None
    arrived = threading.Event()
    mover = Mover(lambda error: None, lambda: None)
    mover.move(lambda: type("Done", (), {"ready": lambda self: True, "result": lambda self: 1})(),
               lambda result: arrived.set(), A_COPY)
    assert arrived.wait(5)
    mover.stop()
    assert not mover.thread.is_alive()
