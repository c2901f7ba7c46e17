"""The kernels release the GIL: two threads running gemm overlap on two cores.

This is the property the CPU workers of the runtime depend on (DESIGN §4 item 4);
``scipy.linalg.blas`` would give a speedup of 1.0 here.
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from tiledsl.runtime.kernels import gemm

TILE = 512
CALLS = 8  # per thread: long enough (about 0.1 s) to swamp thread start-up noise


def tiles(seed: int):
    rng = np.random.default_rng(seed)
    return [np.asfortranarray(rng.standard_normal((TILE, TILE))) for _ in range(3)]


def run_gemms(a, b, c) -> None:
    for _ in range(CALLS):
        gemm(a, b, c)


def elapsed(work) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def in_two_threads(first, second) -> None:
    threads = [threading.Thread(target=run_gemms, args=args) for args in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@pytest.mark.timeout(120)
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs at least two cores")
def test_two_threads_run_gemm_in_parallel():
    first, second = tiles(1), tiles(2)
    with threadpool_limits(1):  # BLAS single-threaded, so only our threads add cores
        run_gemms(*first)  # warm up: page in the tiles, start BLAS
        # Best of three rounds, so that one noisy round on a shared machine does not fail.
        sequential = min(elapsed(lambda: (run_gemms(*first), run_gemms(*second)))
                         for _ in range(3))
        parallel = min(elapsed(lambda: in_two_threads(first, second)) for _ in range(3))
    speedup = sequential / parallel
    assert speedup > 1.4, f"2 threads: {speedup:.2f}x (sequential {sequential:.3f}s, " \
                          f"parallel {parallel:.3f}s); is the GIL released?"
