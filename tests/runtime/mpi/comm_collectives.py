"""allreduce_sum, allreduce_max, gather, barrier from the main thread while the comm thread works.

    mpiexec -n N python comm_collectives.py

A ring of messages keeps the communication thread busy (and a receive that never
arrives keeps it polling) while the main thread runs the collectives. Prints
"ok" from rank 0 when all results are right.
"""
from __future__ import annotations

import sys
import threading

import numpy as np

from tiledsl.runtime.comm import Communicator

ROUNDS = 20


def main() -> int:
    """Run the collectives during ring traffic; the exit status (0 when all were right)."""
    comm = Communicator()
    comm.start()
    rank, size = comm.rank, comm.size
    comm.receive(np.empty(1), (rank + 1) % size, 2, lambda: None)  # never sent
    ring_done = threading.Event()
    buffers = [np.empty((64, 64)) for _ in range(ROUNDS)]
    remaining = [ROUNDS]

    def arrived():
        remaining[0] -= 1  # callbacks all run on the one comm thread
        if remaining[0] == 0:
            ring_done.set()
    for buffer in buffers:
        comm.receive(buffer, (rank - 1) % size, 1, arrived)
    problems = []
    for round_ in range(ROUNDS):
        comm.send(np.full((64, 64), float(round_)), (rank + 1) % size, 1, lambda: None)
        local = np.arange(6.0).reshape(2, 3) * (rank + 1) + round_
        total = comm.allreduce_sum(local)
        expected = np.arange(6.0).reshape(2, 3) * size * (size + 1) / 2 + size * round_
        if not np.array_equal(total, expected) or total.shape != (2, 3):
            problems.append(f"allreduce_sum round {round_}: {total}")
        top = comm.allreduce_max(float(rank * 10 + round_))
        if top != (size - 1) * 10 + round_:
            problems.append(f"allreduce_max round {round_}: {top}")
        comm.barrier()
    gathered = comm.gather({"rank": rank})
    if gathered != ([{"rank": r} for r in range(size)] if rank == 0 else None):
        problems.append(f"gather gave {gathered}")
    if not ring_done.wait(30):
        problems.append("ring messages missing")
    elif any(buffer[0, 0] != n for n, buffer in enumerate(buffers)):
        problems.append("ring messages out of order")
    comm.stop()
    for problem in problems:
        print(f"rank {rank}: {problem}", flush=True)
    if not problems and rank == 0:
        print("ok", flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
