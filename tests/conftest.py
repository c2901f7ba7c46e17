"""Fixtures of the whole suite."""
import atexit
import compileall
import os
import shutil
import tempfile
from pathlib import Path

# Tile sizes tuned on this machine (tiledsl tune, in the user's cache) must not change what
# the tests run: runs and explain ignore them. Tests of tuning unset this themselves.
os.environ["TILEDSL_NO_TUNE"] = "1"

# OpenBLAS on one thread as it loads, as in tiledsl's own processes (drivercontract's
# blas_on_one_thread_unless_set), in the suite's other processes too (its MPI scripts, the workers):
# a thread per core spinning as it loads cost 0.2 s of CPU in each of the ~1,500 processes the suite
# starts. A test of the BLAS limits sets the threads it needs itself.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# The suite's cache (drivers compiled from its temporary programs, the grammar's tables) is its
# own, and goes with it: in the user's ~/.cache it grew by thousands of drivers no run would use
# again (their programs' folders were gone). Each process of the suite (the controller, each
# xdist worker) makes its own; tests of the cache set XDG_CACHE_HOME themselves.
_CACHE = tempfile.mkdtemp(prefix="tiledsl-test-cache-")
os.environ["XDG_CACHE_HOME"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)


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
