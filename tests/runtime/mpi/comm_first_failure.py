"""Communicator.first_to_fail on N ranks: exactly one rank reports a failure of the job.

    mpiexec -n N python comm_first_failure.py [FIRST]

Every rank fails at once, or rank FIRST fails 0.5 s before the others (then it is the one
that reports). Rank 0 prints "ok" when exactly the expected rank reported, and the answer
did not change when asked again.
"""
from __future__ import annotations

import sys
import time

from tiledsl.runtime.comm import Communicator, mpi_module


def main() -> int:
    first = int(sys.argv[1]) if len(sys.argv) > 1 else None
    comm = Communicator()
    comm.start()
    comm.barrier()
    if first is not None and comm.rank != first:
        time.sleep(0.5)
    reports = comm.first_to_fail()
    again = comm.first_to_fail()
    world = mpi_module().COMM_WORLD
    answers = world.allgather((reports, again))
    comm.stop()
    reporters = [rank for rank, (answer, _) in enumerate(answers) if answer]
    if comm.rank != 0:
        return 0
    problems = []
    if len(reporters) != 1 or (first is not None and reporters != [first]):
        problems.append(f"ranks {reporters} reported (expected {'one' if first is None else [first]})")
    if any(answer != repeated for answer, repeated in answers):
        problems.append(f"a second call changed the answer: {answers}")
    print("\n".join(problems) or "ok", flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
