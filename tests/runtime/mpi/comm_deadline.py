"""A collective that one rank never reaches ends with :class:`Unanswered` on rank 0, naming it.

    mpiexec -n 2 python comm_deadline.py

Rank 1 sleeps instead of entering the barrier (it enters 4 s late); rank 0 waits with a
1 s limit and prints "ok" when it was told, in time, that rank 1 did not answer.
"""
from __future__ import annotations

import sys
import time

from tiledsl.runtime.comm import Communicator, Unanswered


def main() -> int:
    comm = Communicator(limit=1.0)
    comm.start()
    comm.barrier()  # both arrive: no error
    if comm.rank == 1:
        time.sleep(4)  # stopped, as far as rank 0 can tell; then late, so that both can finalize
        comm.barrier()
        comm.stop()
        return 0
    began = time.monotonic()
    try:
        comm.barrier()
    except Unanswered as error:
        waited = time.monotonic() - began
        expected = "rank 0: rank(s) 1 did not answer within 1 s (stopped or lost?)"
        print("ok" if str(error) == expected and error.missing == [1] and 1.0 <= waited < 3.5 else
              f"wrong: {error} after {waited:.1f} s", flush=True)
        comm.stop()
        return 0
    print("the barrier returned without rank 1", flush=True)
    return 1

if __name__ == "__main__":
    sys.exit(main())
