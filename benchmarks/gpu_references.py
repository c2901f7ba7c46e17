"""The library routines that tiledsl's programs are measured against on one GPU, timed alike.

On the ``cupy`` backend they are cuSOLVER and cuBLAS through CuPy (``cupy.linalg.cholesky``,
``cupy.linalg.qr(mode="r")``, ``cupyx.scipy.linalg.lu_factor``, ``cupy.matmul``) on GPU 0; for
the ``emulated`` backend, LAPACK and BLAS through numpy and scipy on the host (the plumbing of
a benchmark, not a speed). A routine's input is made once per order, in place (on the GPU),
and copied before each timed call, so that a call times the routine alone. Shared by
``scripts/gpu_check.py`` and ``benchmarks/gpu_streams.py``.
"""
from __future__ import annotations

import time

import numpy as np
import scipy.linalg

#: The standard flop count of each kind of program, by the order n
FLOPS = {"cholesky": lambda n: n ** 3 / 3, "qr": lambda n: 4 * n ** 3 / 3, "lu": lambda n: 2 * n ** 3 / 3,
         "gemm": lambda n: 2 * n ** 3}
#: The kind of each program measured (lu.tile, without pivoting, against the pivoted LU all the same)
KIND = {"cholesky": "cholesky", "hetero_cholesky": "cholesky", "qr": "qr", "hetero_qr": "qr", "hqr": "qr",
        "lu": "lu", "getrf": "lu", "gemm": "gemm"}
_ROUTINE_NAMES = {"cholesky": "potrf", "qr": "geqrf", "lu": "getrf", "gemm": "dgemm"}


class Reference:
    """The library routine of one kind of program on one backend, with its inputs per order."""

    def __init__(self, kind: str, backend: str):
        self.kind, self.backend = kind, backend
        self._inputs: dict = {}
        if backend == "cupy":
            import cupy
            import cupyx.scipy.linalg

            self.xp, self._wait = cupy, cupy.cuda.Device().synchronize
            self.name = f"{'cuBLAS' if kind == 'gemm' else 'cuSOLVER'} {_ROUTINE_NAMES[kind]}"
            lu = lambda a: cupyx.scipy.linalg.lu_factor(a, overwrite_a=True, check_finite=False)
            self._routine = {"cholesky": cupy.linalg.cholesky, "qr": lambda a: cupy.linalg.qr(a, mode="r"),
                             "lu": lu, "gemm": cupy.matmul}[kind]
        else:
            self.xp, self._wait = np, lambda: None
            self.name = f"LAPACK {_ROUTINE_NAMES[kind]} (host)"
            lu = lambda a: scipy.linalg.lu_factor(a, overwrite_a=True, check_finite=False)
            self._routine = {"cholesky": np.linalg.cholesky, "qr": lambda a: np.linalg.qr(a, mode="r"),
                             "lu": lu, "gemm": np.matmul}[kind]

    def seconds(self, n: int) -> float:
        """Seconds of one call of the routine at order ``n`` on a copy of its input."""
        arguments = [self.xp.array(a, order="F", copy=True) for a in self._input(n)]
        self._wait()
        began = time.perf_counter()
        self._routine(*arguments)
        self._wait()
        return time.perf_counter() - began

    def release(self) -> None:
        """Forget the inputs made (and, on a GPU, give their memory back to the device)."""
        self._inputs.clear()
        if self.backend == "cupy":
            self.xp.get_default_memory_pool().free_all_blocks()

    def _input(self, n: int) -> list:
        if n not in self._inputs:
            self.release()  # one order's inputs at a time: the next runs need the memory
            rng = self.xp.random.default_rng(42)
            if self.kind == "cholesky":  # symmetric, diagonally dominant: positive definite
                a = rng.random((n, n))
                a = a + a.T  # not in place: CuPy does not guard against an operand overlapping the output
                a[self.xp.diag_indices(n)] += 2 * n
                self._inputs[n] = [a]
            else:
                self._inputs[n] = [rng.standard_normal((n, n)) for _ in range(2 if self.kind == "gemm" else 1)]
        return self._inputs[n]
