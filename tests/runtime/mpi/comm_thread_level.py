"""A Communicator refuses MPI initialised below MPI_THREAD_MULTIPLE.

    python comm_thread_level.py

Prints the RuntimeError's message and exits 0 when it was raised.
"""
from __future__ import annotations

import sys

import mpi4py

mpi4py.rc.thread_level = "serialized"
from mpi4py import MPI  # noqa: E402  (must follow the rc setting)

from tiledsl.runtime.comm import Communicator  # noqa: E402

if __name__ == "__main__":
    try:
        Communicator()
    except RuntimeError as error:
        print(error, flush=True)
        sys.exit(0)
    print(f"accepted thread level {MPI.Query_thread()}", flush=True)
    sys.exit(1)
