"""Every case of ``tests/runtime/check_cases.py``, right and wrong, checked on the ranks of a job.

    mpiexec -n N python check_cases_job.py

Rank 0 prints one JSON object: under "cases", case name -> {"right": residuals, "wrong":
residuals}; under "ranks", the job's size; under "agree", whether every rank got the same.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # check_cases, beside the tests

from check_cases import Harness, cases  # noqa: E402

from tiledsl.runtime.comm import Communicator  # noqa: E402


def main() -> int:
    comm = Communicator()
    comm.start()
    harness = Harness(comm)
    found = {name: {"right": harness.residuals(case), "wrong": harness.residuals(case, wrong=True)}
             for name, case in cases().items()}
    every = comm.gather(found)
    comm.stop()
    if comm.rank == 0:
        print(json.dumps({"cases": found, "ranks": comm.size, "agree": all(other == found for other in every)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
