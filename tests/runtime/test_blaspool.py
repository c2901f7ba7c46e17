"""OpenBLAS's thread pool is whole again after the runtime's fork (runtime/blaspool.py). Each case runs in a
process of its own: threads that other tests leave ending would change the counts."""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts threads in /proc")

_COUNTING = """
import os
from tiledsl.runtime import blas, world
from tiledsl.runtime.blaspool import restart_after_fork

def threads():
    return len(os.listdir("/proc/self/task"))

def fork_a_child_that_exits():
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)

blas.load()  # numpy's and SciPy's OpenBLAS, each with its pool
"""


def _counts(case: str) -> list:
    # OpenBLAS with its pool, a thread per core, as a user's process loads it (the suite loads it on one)
    env = {name: value for name, value in os.environ.items() if name != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", _COUNTING + case], capture_output=True, text=True, timeout=50,
                         env=env)
    assert out.returncode == 0, out.stderr
    return [int(word) for word in out.stdout.split()]


@pytest.mark.timeout(60)
def test_a_fork_stops_openblas_threads_and_the_restart_brings_them_back():
    before, stopped, restarted = _counts("before = threads()\nfork_a_child_that_exits()\nstopped = threads()\n"
                                         "restart_after_fork()\nprint(before, stopped, threads())\n")
    if stopped == before:
        pytest.skip("OpenBLAS runs on one thread here: it has no pool to stop")
    assert stopped < before == restarted


@pytest.mark.timeout(60)
def test_the_start_up_watchers_fork_leaves_the_pool_whole():
    """The stale handles of a pool left stopped hung the process at exit where its restart failed
    later (under ulimit -v): the watcher's fork restarts it at once."""
    before, inside = _counts("before = threads()\nwith world._start_up_watch(60.0):\n"
                             "    print(before, threads())\n")
    assert inside == before
