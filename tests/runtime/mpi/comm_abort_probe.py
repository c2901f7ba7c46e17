"""One rank calls Communicator.abort(3) while the others wait for a message forever.

    mpiexec -n N python comm_abort_probe.py

The test expects the whole job to end promptly with a non-zero status and no
process of this script left behind.
"""
from __future__ import annotations

import time

import numpy as np

from tiledsl.runtime.comm import Communicator

if __name__ == "__main__":
    comm = Communicator()
    comm.start()
    comm.receive(np.empty(1), (comm.rank + 1) % comm.size, 1, lambda: None)  # never sent
    comm.barrier()
    if comm.rank == comm.size - 1:
        print(f"rank {comm.rank} aborting", flush=True)
        comm.abort(3)
    time.sleep(120)  # the others idle until the abort takes them down
