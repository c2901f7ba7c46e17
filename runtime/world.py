"""The job this process belongs to: one rank alone, or one rank of an MPI job.

MPI is initialised only when a launcher started the process (mpiexec, srun,
mpirun set these variables), so a plain ``python driver.py`` never pays for it.
The grid defaults to the squarest one for the number of ranks; workers per rank
default to the cores of the node shared by its ranks, less one for the
communication thread when there are several ranks (DESIGN §4: cores = total −
GPUs − communication threads in use).
"""
from __future__ import annotations

import os

from .distribution import parse_grid, squarest_grid

LAUNCHER_VARIABLES = ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "SLURM_STEP_NUM_TASKS")
LOCAL_SIZE_VARIABLES = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE")


class UsageError(Exception):
    """A bad option or size: reported in one line, exit status 2."""


def launched_by_mpi() -> bool:
    return any(name in os.environ for name in LAUNCHER_VARIABLES)


def communicator(on_error=None):
    """This rank's :class:`~tiledsl.runtime.comm.Communicator`, or None outside an MPI job of 2+ ranks."""
    if not launched_by_mpi():
        return None
    from .comm import Communicator

    comm = Communicator(on_error=on_error)
    if comm.size == 1:
        comm.stop()
        return None
    return comm


def grid_for(text: str | None, ranks: int) -> tuple[int, int]:
    """The process grid: ``--grid PxQ`` if given (it must use every rank), else the squarest."""
    if text is None:
        return squarest_grid(ranks)
    try:
        pr, pc = parse_grid(text)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if pr * pc != ranks:
        raise UsageError(f"--grid {pr}x{pc} has {pr * pc} rank(s) but the job has {ranks}")
    return pr, pc


def default_workers(ranks: int, gpus: int = 0) -> int:
    """CPU worker threads per rank when ``--workers`` is not given: the rank's cores less one
    per GPU (its management thread), one for the copy thread and one for MPI, as in use."""
    cores = os.cpu_count() or 1
    local = next((int(os.environ[v]) for v in LOCAL_SIZE_VARIABLES if os.environ.get(v, "").isdigit()), ranks)
    per_rank = max(1, cores // max(1, min(local, ranks)))
    return max(1, per_rank - gpus - (gpus > 0) - (ranks > 1))
