"""The files a run writes: output matrices (each rank its own tiles into one ``.npy``) and the
trace (every rank's events merged on rank 0, with the bounds computed from them)."""
from __future__ import annotations

import json

import numpy as np

from . import npyio
from .matrix import TiledMatrix
from .options import Options
from .trace import area_bound, chrome_trace, communication, critical_path, task_times, utilisation
from .world import UsageError

def write_trace(driver, params, matrices, events, result, options: Options, comm) -> dict:
    """Merge every rank's events on rank 0, write the trace file, compute the bounds."""
    ranks = comm.gather(events) if comm is not None else [events]
    if ranks is None:  # not rank 0
        return {}
    with open(options.trace, "w") as target:
        about = {"program": driver.PROGRAM.name, **{k: v for k, v in params.as_dict().items() if v is not None},
                 "ranks": result.ranks, "workers": result.workers, "gpus": result.gpus}
        json.dump(chrome_trace(ranks, about), target)
    times = task_times(ranks)
    capacity = {"cpu": result.workers * result.ranks, "gpu": options.gpus * result.ranks}
    path = critical_path(driver, matrices, params, times)
    area = area_bound(times, capacity)
    summary = {"critical_path": path, "area_bound": area,
               "efficiency": max(path, area) / result.seconds if result.seconds > 0 else None}
    summary.update(utilisation(ranks, result.seconds))
    summary.update(communication(ranks, result.seconds))
    return summary


def write_output(matrix: TiledMatrix, path: str, comm) -> None:
    """Every rank writes its own tiles into one ``.npy`` file that rank 0 created."""
    try:
        target = npyio.create_output(path, (matrix.m, matrix.n)) if matrix.rank == 0 else None
    except npyio.OutputFileError as error:
        target, failure = None, error
    else:
        failure = None
    if comm is not None:
        comm.barrier()
        if target is None and failure is None:
            target = np.load(path, mmap_mode="r+")
    if failure is not None:
        raise UsageError(str(failure))
    g = matrix.geometry
    for tile in matrix.local_tiles():
        npyio.write_block(target, g.row_range(tile.i)[0], g.col_range(tile.j)[0], matrix.block(tile))
    target.flush()
    if comm is not None:
        comm.barrier()

