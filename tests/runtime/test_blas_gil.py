"""The kernels release the GIL while BLAS computes: a Python thread keeps running during a call.

This is the property the CPU workers of the runtime depend on (DESIGN §4 item 4).

The test does not time a speedup (that needs two idle cores, which a shared machine does not
always have): a second thread notes the time at every step of a pure-Python loop, and the
longest pause in its notes while a kernel runs is compared with the kernel's duration. Holding
the GIL pauses that thread for the whole call, however busy the machine; releasing it lets the
thread go on, unless the OS takes its core away too, which no call of several is likely to see.
"""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from tiledsl.runtime.kernels import gemm, symm

TILE = 768  # one call: about 20-60 ms single-threaded, well above the 5 ms switch interval
CALLS = 8


def tiles():
    rng = np.random.default_rng(1)
    return [np.asfortranarray(rng.standard_normal((TILE, TILE))) for _ in range(3)]


def sorting(values: list):
    """The control, a C function that holds the GIL throughout: ``sorted(values)`` (about 100-200 ms
    for a million floats, so that the few ms the caller waits for the GIL after it are a small part)."""
    def sort_values(a, b, c) -> None:
        sorted(values)
    return sort_values


class Ticker(threading.Thread):
    """Notes perf_counter() at every step until stopped (the GIL is needed for each step)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.ticks: list[float] = []
        self.stopping = False

    def run(self) -> None:
        while not self.stopping:
            self.ticks.append(time.perf_counter())


def longest_pauses(kernel, args) -> list[float]:
    """For each of CALLS calls of ``kernel``: the longest pause of a ticking thread during it, as a
    fraction of the call's duration (1.0: the thread did not move at all)."""
    kernel(*args)  # warm up: page in the tiles, start BLAS
    ticker = Ticker()
    ticker.start()
    calls = []
    for _ in range(CALLS):
        time.sleep(0.005)
        start = time.perf_counter()
        kernel(*args)
        calls.append((start, time.perf_counter()))
    ticker.stopping = True
    ticker.join()
    ticks = np.asarray(ticker.ticks)
    fractions = []
    for start, end in calls:
        inside = ticks[(ticks > start) & (ticks < end)]
        marks = np.concatenate(([start], inside, [end]))
        fractions.append(float(np.max(np.diff(marks))) / (end - start))
    return fractions


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kernel", [gemm, symm], ids=["gemm", "symm"])
def test_kernel_lets_python_threads_run(kernel):
    with threadpool_limits(1):
        fractions = longest_pauses(kernel, tiles())
    assert min(fractions) < 0.5, (f"{kernel.__name__}: a Python thread was paused for "
                                  f"{', '.join(f'{f:.0%}' for f in fractions)} of each call; is the GIL released?")


@pytest.mark.timeout(120)
def test_a_call_holding_the_gil_pauses_the_thread():
    """The measure tells the two apart. (The thread runs in the last few ms of such a call: once it
    returns, the caller waits up to the 5 ms switch interval for the GIL before noting the end, longer
    where the OS takes the ticking thread's core as it holds the GIL: the median call, not every call.)"""
    fractions = longest_pauses(sorting(np.random.default_rng(2).random(1_000_000).tolist()), tiles())
    assert float(np.median(fractions)) > 0.75, fractions
