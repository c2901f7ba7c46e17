"""A collective waits for a rank that is late but alive, and ends on one that stopped.

    mpiexec -n 2 python comm_deadline.py late|stopped

Rank 0 waits at a barrier with a 1 s limit. ``late``: rank 1 sleeps 3 s first (its
heartbeats go on), and the barrier must simply return. ``stopped``: rank 1 stops itself
with SIGSTOP (a child sends SIGCONT 4 s later), and rank 0 must be told in time that rank 1
did not answer. Rank 0 prints "ok" when it saw what it should.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tiledsl.runtime.comm import Communicator, Unanswered


def main(mode: str) -> int:
    comm = Communicator(limit=1.0)
    comm.start()
    comm.barrier()  # both arrive: no error
    if comm.rank == 1:
        if mode == "late":
            time.sleep(3)
        else:
            subprocess.Popen(["sh", "-c", f"sleep 4; kill -CONT {os.getpid()}"])
            os.kill(os.getpid(), signal.SIGSTOP)
            comm.barrier()  # the one rank 0 gave up on
        comm.barrier()
        comm.stop()
        return 0
    began = time.monotonic()
    try:
        comm.barrier()
    except Unanswered as error:
        waited = time.monotonic() - began
        expected = "rank 0: rank 1 did not answer within 1 s (stopped or lost?)"
        good = mode == "stopped" and str(error) == expected and error.missing == [1] and waited < 3.5
        print("ok" if good else f"wrong: {error} after {waited:.1f} s", flush=True)
        time.sleep(5)  # rank 1 is back, beating
        comm.barrier()  # rank 1 comes back: both meet again and finalize
        comm.stop()
        return 0
    waited = time.monotonic() - began
    print("ok" if mode == "late" and waited > 2 else f"wrong: the barrier returned after {waited:.1f} s",
          flush=True)
    comm.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
