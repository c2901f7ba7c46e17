"""What a driver submits on a rank, for tests that compare drivers' loop nests (not a command's)."""
from tiledsl.runtime.layout import make_distribution, make_matrices, make_params
from tiledsl.runtime.recording import record


def submitted_tasks(driver, options, grid, gpus, rank) -> list:
    """(call, tile positions) of the tasks the driver submits on ``rank`` (None: every task)."""
    params = make_params(driver, options)
    distribution = make_distribution(driver.PROGRAM, params, grid, gpus, getattr(options, "gpu_ratio", None))
    matrices = make_matrices(driver, params, distribution, 0 if rank is None else rank)
    recorder = record(driver, matrices, params, rank)
    return [(call, tuple((t.matrix.name, t.i, t.j) for t in tiles)) for call, tiles, _ in recorder.submitted]
