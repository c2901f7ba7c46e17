"""Fixtures of the whole suite."""
import compileall
import os
from pathlib import Path

# Tile sizes tuned on this machine (tiledsl tune, in the user's cache) must not change what
# the tests run: runs and explain ignore them. Tests of tuning unset this themselves.
os.environ["TILEDSL_NO_TUNE"] = "1"


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pyproject's addopts): a worker per core, at most 4. Many tests start MPI jobs
    of 2-4 ranks and count on their watchdogs' seconds; more workers would only crowd them."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, 4))


def pytest_sessionstart(session):
    """Byte-compile tiledsl's sources once: the suite starts about 1,500 Python processes (ranks,
    commands), and where ``PYTHONDONTWRITEBYTECODE`` is set (as on some CI machines) none writes
    what it compiles, so each compiled every module again (a seventh of a second a process).
    Python reads the files compileall writes whatever that variable says."""
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller did it
        return
    root = Path(__file__).resolve().parents[1]
    for package in (root / "tiledsl", root / "runtime"):  # runtime/ is installed as tiledsl.runtime
        if package.is_dir() and os.access(package, os.W_OK):
            compileall.compile_dir(package, quiet=2, workers=1)
