"""Fixtures of the whole suite."""
import os

# Tile sizes tuned on this machine (tiledsl tune, in the user's cache) must not change what
# the tests run: runs and explain ignore them. Tests of tuning unset this themselves.
os.environ["TILEDSL_NO_TUNE"] = "1"


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pyproject's addopts): a worker per core, at most 4. Many tests start MPI jobs
    of 2-4 ranks and count on their watchdogs' seconds; more workers would only crowd them."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, 4))
