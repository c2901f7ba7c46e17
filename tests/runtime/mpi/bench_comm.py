"""Measure the communication thread's cost and latency (run by hand, not by the tests).

    mpiexec -n 2 python tests/runtime/mpi/bench_comm.py [--spin S] [--max-interval S]

Each rank runs numpy matmul of 512x512 tiles on one thread (BLAS limited to one
thread) and reports its throughput relative to rounds with no communication
thread at all, for: a Communicator with nothing in flight, one with a receive
pending (the thread polls), and, for reference, a thread blocked in MPI's own
``Waitsome``. Rounds are interleaved so that load from elsewhere hits all modes
alike; the median ratio is printed. Then one-way latencies of ping-pong through
the Communicator (warm: back to back; cold: after 20 ms of quiet with the
receives posted) and of plain blocking Send/Recv, for 0 bytes and a 256x256 tile
(rank 0 reports them).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time

import numpy as np
from threadpoolctl import threadpool_limits

from tiledsl.runtime.comm import Communicator, mpi_module

MPI = mpi_module()
WORLD = MPI.COMM_WORLD
RANK = WORLD.Get_rank()
PEER = 1 - RANK
ROUNDS = 5
CALLS = 20  # matmuls per timing: about 0.3 s
TUNING = {}  # Communicator keyword arguments from the command line


def compute_seconds(a, b, c) -> float:
    """Seconds for CALLS matmuls of 512x512."""
    start = time.perf_counter()
    for _ in range(CALLS):
        np.matmul(a, b, out=c)
    return time.perf_counter() - start


def with_communicator(pending: bool):
    """Start a Communicator (with a receive that stays pending if asked).

    Returns its stop and its thread's native id.
    """
    comm = Communicator(**TUNING)
    comm.start()
    if pending:
        comm.receive(np.empty(1), RANK, 1, lambda: None)  # never sent: cancelled at stop
    thread = next(t for t in threading.enumerate() if t.name == "mpi")
    return comm.stop, thread.native_id


def with_waitsome():
    """A thread blocked in MPI's Waitsome on a receive from itself; returns its release and id."""
    request = WORLD.Irecv(np.empty(1), RANK, 99)
    thread = threading.Thread(target=MPI.Request.Waitsome, args=([request],), daemon=True)
    thread.start()

    def release():
        WORLD.Send(np.empty(1), RANK, 99)
        thread.join()
    return release, thread.native_id


def cpu_seconds(native_id: int) -> float:
    """CPU time a thread of this process has run (from the scheduler's accounting, in ns)."""
    with open(f"/proc/self/task/{native_id}/schedstat") as stat:
        return int(stat.read().split()[0]) / 1e9


def throughput_ratios() -> dict:
    """Per mode, medians over rounds of: (time without a comm thread) / (time with one),
    and the comm thread's CPU time as a share of that time."""
    rng = np.random.default_rng(RANK)
    a, b = rng.standard_normal((2, 512, 512))
    c = np.empty_like(a)
    modes = {"idle Communicator": lambda: with_communicator(False),
             "Communicator, receive pending": lambda: with_communicator(True),
             "thread in MPI Waitsome": with_waitsome}
    samples = {name: [] for name in modes}
    compute_seconds(a, b, c)
    for _ in range(ROUNDS):
        for name, setup in modes.items():
            WORLD.Barrier()
            alone = compute_seconds(a, b, c)
            WORLD.Barrier()
            finish, thread = setup()
            time.sleep(0.01)  # let the thread settle into its idle state
            used = cpu_seconds(thread)
            together = compute_seconds(a, b, c)
            used = cpu_seconds(thread) - used
            samples[name].append((alone / together, used / together))
            finish()
    return {name: tuple(statistics.median(column) for column in zip(*values))
            for name, values in samples.items()}


def communicator_latency(nbytes: int, quiet: float, reps: int) -> float:
    """One-way µs of ping-pong through Communicator (rank 0 pings and times; rank 1 echoes).

    With ``quiet``, both ranks post their receive and then stay quiet that long
    before rank 0 sends, so both threads have backed off to their longest sleep.
    """
    comm = Communicator(**TUNING)
    comm.start()
    buffer = np.zeros(nbytes // 8)
    arrived = threading.Event()
    total = 0.0
    comm.barrier()
    for _ in range(reps):
        arrived.clear()
        comm.receive(buffer, PEER, 5, arrived.set)
        if quiet:
            comm.barrier()
            time.sleep(quiet)
        start = time.perf_counter()
        if RANK == 0:
            comm.send(buffer, PEER, 5, lambda: None)
        arrived.wait()
        if RANK == 1:
            comm.send(buffer, PEER, 5, lambda: None)
        total += time.perf_counter() - start
    comm.stop()
    return total / reps / 2 * 1e6


def blocking_latency(nbytes: int, reps: int = 200) -> float:
    """One-way µs of ping-pong with blocking Send/Recv on the main thread."""
    buffer = np.zeros(nbytes // 8)
    WORLD.Barrier()
    start = time.perf_counter()
    for _ in range(reps):
        if RANK == 0:
            WORLD.Send(buffer, PEER, 6)
            WORLD.Recv(buffer, PEER, 6)
        else:
            WORLD.Recv(buffer, PEER, 6)
            WORLD.Send(buffer, PEER, 6)
    return (time.perf_counter() - start) / reps / 2 * 1e6


def main() -> None:
    """Measure and print this rank's report."""
    with threadpool_limits(1):
        ratios = throughput_ratios()
    lines = [f"rank {RANK}: matmul throughput relative to no comm thread; comm thread's CPU "
             f"(medians of {ROUNDS})"]
    lines += [f"  {name:32s} {ratio:.3f}  {cpu:6.1%}" for name, (ratio, cpu) in ratios.items()]
    for nbytes in (0, 8 * 256 * 256):
        blocking_latency(nbytes, 20)
        warm = communicator_latency(nbytes, 0.0, 200)
        cold = communicator_latency(nbytes, 0.02, 20)
        blocking = blocking_latency(nbytes)
        if RANK == 0:  # rank 1's clock runs from post to arrival: not a round trip
            lines.append(f"  one-way {nbytes:6d} B: Communicator warm {warm:6.1f} us, "
                         f"after 20 ms quiet {cold:6.1f} us; blocking Send/Recv {blocking:6.1f} us")
    print("\n".join(lines), flush=True)
    WORLD.Barrier()


if __name__ == "__main__":
    if WORLD.Get_size() != 2:
        sys.exit("run with mpiexec -n 2")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spin", type=float, help="Communicator spin (seconds)")
    parser.add_argument("--max-interval", type=float, help="Communicator max_interval (seconds)")
    TUNING.update((k, v) for k, v in vars(parser.parse_args()).items() if v is not None)
    main()
