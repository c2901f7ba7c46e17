"""stop(), callback errors and argument checks of one Communicator (2 ranks).

    mpiexec -n 2 python comm_stop.py

Prints one line per finding and "ok" from rank 0 when all held.
"""
from __future__ import annotations

import sys
import threading
import time

import numpy as np

from tiledsl.runtime.comm import Communicator, mpi_module

BIG = 1 << 17  # float64s, 1 MiB: past MPICH's eager limit, so a send completes once matched


def expect(condition: bool, what: str, problems: list) -> None:
    """Note ``what`` as a problem unless ``condition`` holds."""
    if not condition:
        problems.append(what)


def idle_stop(problems: list) -> None:
    """With nothing in flight, stop() returns at once, and a second stop() is harmless."""
    comm = Communicator()
    comm.start()
    time.sleep(0.05)
    start = time.perf_counter()
    comm.stop()
    comm.stop()
    elapsed = time.perf_counter() - start
    expect(elapsed < 0.5, f"idle stop took {elapsed:.3f} s", problems)


def cancelled_receive(problems: list) -> None:
    """A receive that never arrives is cancelled at stop(); its callback never runs."""
    comm = Communicator()
    comm.start()
    called = []
    comm.receive(np.empty(4), 1 - comm.rank, 7, lambda: called.append(1))
    start = time.perf_counter()
    comm.stop()
    elapsed = time.perf_counter() - start
    expect(elapsed < 1.0, f"stop with a pending receive took {elapsed:.3f} s", problems)
    expect(not called and comm.stats.receives == 0, "the cancelled receive completed", problems)
    try:
        comm.receive(np.empty(4), 0, 7, lambda: None)
        problems.append("receive after stop() was accepted")
    except RuntimeError:
        pass


def send_waited_for(problems: list) -> None:
    """stop() waits for a send in flight: rank 1 posts the matching receive 0.5 s later. Until then the
    send is unfinished, by its destination (what a stall report says of a rank that stopped)."""
    comm = Communicator()
    comm.start()
    done = []
    if comm.rank == 0:
        data = np.arange(float(BIG))
        comm.send(data, 1, 8, lambda: done.append(1))
        time.sleep(0.1)
        expect(comm.unfinished_sends() == {1: 1}, f"unfinished sends {comm.unfinished_sends()}", problems)
        start = time.perf_counter()
        comm.stop()
        elapsed = time.perf_counter() - start
        expect(done == [1], "stop() returned before the send's callback", problems)
        expect(elapsed > 0.15, f"stop() returned after {elapsed:.3f} s, before the match", problems)
        expect(comm.unfinished_sends() == {}, f"unfinished sends after stop {comm.unfinished_sends()}", problems)
    else:
        time.sleep(0.5)
        buffer = np.empty(BIG)
        arrived = threading.Event()
        comm.receive(buffer, 0, 8, arrived.set)
        expect(arrived.wait(10), "the late receive never arrived", problems)
        expect(np.array_equal(buffer, np.arange(float(BIG))), "the late receive's data", problems)
        comm.stop()


def callback_errors(problems: list) -> None:
    """A raising callback is recorded (first one kept), reported, and the thread goes on."""
    reported = []
    comm = Communicator(on_error=reported.append)
    comm.start()
    peer = 1 - comm.rank
    arrived = threading.Event()

    def boom(n):
        def raise_():
            raise ZeroDivisionError(f"boom {n}")
        return raise_
    buffers = [np.empty(3) for _ in range(3)]
    comm.receive(buffers[0], peer, 9, boom(1))
    comm.receive(buffers[1], peer, 9, boom(2))
    comm.receive(buffers[2], peer, 9, arrived.set)
    for n in range(3):
        comm.send(np.full(3, float(n)), peer, 9, lambda: None)
    expect(arrived.wait(10), "a receive after failing callbacks never completed", problems)
    comm.barrier()
    comm.stop()
    expect(str(comm.error) == "boom 1", f"error kept: {comm.error!r}", problems)
    expect([str(e) for e in reported] == ["boom 1", "boom 2"], f"on_error got {reported}", problems)
    expect(buffers[2][0] == 2.0, "third message's data", problems)


def wrong_size(problems: list) -> None:
    """A message shorter than its receive buffer is reported, not silently accepted."""
    reported = []
    comm = Communicator(on_error=reported.append)
    comm.start()
    if comm.rank == 0:
        comm.send(np.ones(2), 1, 10, lambda: None)
    else:
        comm.receive(np.empty(5), 0, 10, lambda: None)
    comm.barrier()
    comm.stop()
    if comm.rank == 1:
        expect(isinstance(comm.error, ValueError) and "16 bytes" in str(comm.error),
               f"short message gave {comm.error!r}", problems)


def bad_arguments(problems: list) -> None:
    """Tags outside 0..max_tag, other dtypes and strided buffers are refused."""
    comm = Communicator()
    cases = [(np.empty(2), comm.max_tag + 1, ValueError), (np.empty(2), -1, ValueError),
             (np.empty(2, dtype=np.float32), 1, TypeError), (np.empty((4, 4))[:, 1], 1, ValueError)]
    for array, tag, error in cases:
        for post in (comm.send, comm.receive):
            try:
                post(array, 1 - comm.rank, tag, lambda: None)
                problems.append(f"{post.__name__}(tag={tag}, {array.dtype}, "
                                f"strides {array.strides}) accepted")
            except error:
                pass
    readonly = np.empty(2)
    readonly.flags.writeable = False
    try:
        comm.receive(readonly, 1 - comm.rank, 1, lambda: None)
        problems.append("receive into a read-only buffer accepted")
    except ValueError:
        pass
    comm.stop()


def main() -> int:
    """Run every check in turn; the exit status (0 when all held)."""
    problems: list[str] = []
    for check in (idle_stop, cancelled_receive, send_waited_for, callback_errors, wrong_size,
                  bad_arguments):
        check(problems)
    world = mpi_module().COMM_WORLD
    world.Barrier()
    rank = world.Get_rank()
    for problem in problems:
        print(f"rank {rank}: {problem}", flush=True)
    if not problems and rank == 0:
        print("ok", flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
