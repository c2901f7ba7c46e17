"""The most any task runtime can get from this machine's BLAS on a product, against one threaded call.

    python benchmarks/blas_ceiling.py [--n 4096] [--threads 2] [--rounds 3] [--block 1024]

``tiledsl bench gemm`` compares a tiled product run by W workers, each calling the
single-threaded BLAS, with one dgemm call that the BLAS itself spreads over W
threads. This script measures, with no runtime at all, what W threads calling the
single-threaded dgemm (GIL-free, through :mod:`tiledsl.runtime.blas`) on their own
parts of C = C + A·B achieve against that one call, in alternated rounds:

* ``halves``: thread t computes the columns of C in its share, in one call;
* ``blocks``: C is cut into ``--block``-wide column panels and the inner dimension
  into ``--block``-deep slices, dealt round-robin, one call per (panel, slice): the
  calls a tiled program with ``--nb`` = block makes.

A ratio below 1 means that independent single-threaded calls, however they are
scheduled, cannot match the threaded call: the BLAS's own threads share the
packed panels of A and B, which independent calls each pack again. Prints one
markdown table and the best seconds of each.
"""
from __future__ import annotations

import argparse
import threading
import time

import numpy as np
from threadpoolctl import threadpool_limits

from tiledsl.runtime import blas


def product_parts(n: int, threads: int, block: int | None) -> list[list[tuple]]:
    """Per thread, the (column start, column end, inner start, inner end) calls it makes."""
    if block is None:
        edges = np.linspace(0, n, threads + 1).astype(int)
        return [[(edges[t], edges[t + 1], 0, n)] for t in range(threads)]
    calls = [(j, min(j + block, n), k, min(k + block, n)) for j in range(0, n, block) for k in range(0, n, block)]
    panels = list(range(0, n, block))
    # whole column panels to one thread, in turn: the products into one panel stay in order
    return [[c for c in calls if panels.index(c[0]) % threads == t] for t in range(threads)]


def run_parts(A, B, C, parts: list[list[tuple]]) -> float:
    n = A.shape[0]

    def work(calls):
        for j0, j1, k0, k1 in calls:
            blas.dgemm("N", "N", n, j1 - j0, k1 - k0, 1.0, A[:, k0:k1], n, B[k0:k1, j0:j1], n, 1.0,
                       C[:, j0:j1], n)
    workers = [threading.Thread(target=work, args=(calls,)) for calls in parts]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--block", type=int, default=1024)
    args = parser.parse_args()
    n, rng = args.n, np.random.default_rng(0)
    A, B, C = (np.asfortranarray(rng.standard_normal((n, n))) for _ in range(3))
    best = {"threaded": float("inf"), "halves": float("inf"), "blocks": float("inf")}
    for _ in range(args.rounds):
        with threadpool_limits(args.threads):
            start = time.perf_counter()
            blas.dgemm("N", "N", n, n, n, 1.0, A, n, B, n, 1.0, C, n)
            best["threaded"] = min(best["threaded"], time.perf_counter() - start)
        with threadpool_limits(1):
            best["halves"] = min(best["halves"], run_parts(A, B, C, product_parts(n, args.threads, None)))
            best["blocks"] = min(best["blocks"], run_parts(A, B, C, product_parts(n, args.threads, args.block)))
    flops = 2.0 * n ** 3
    print(f"dgemm n = {n}, {args.threads} threads, best of {args.rounds} alternated rounds\n")
    print("| calls | seconds | GFLOP/s | against the threaded call |\n|---|---:|---:|---:|")
    names = {"threaded": f"one dgemm, {args.threads} BLAS threads", "halves": "one call per thread",
             "blocks": f"{args.block}-wide panels × {args.block}-deep slices"}
    for key, name in names.items():
        print(f"| {name} | {best[key]:.3f} | {flops / best[key] / 1e9:.1f} | {best['threaded'] / best[key]:.2f} |")


if __name__ == "__main__":
    main()
