"""Tile kernels of the LDLᵀ factorization without pivoting (docs/tutorial.md).

A user kernel module for ``docs/examples/ldlt.tile``. tiledsl calls each function
with one numpy array per tile argument, in the order of the ``kernel``
declaration: float64, column-major (Fortran order), possibly a view into a larger
array. A kernel writes its ``out``/``inout`` arguments in place and returns
nothing; an exception fails the run and is reported with the kernel, its tiles,
the .tile line and the rank.

Storage, as LAPACK's dsytrf: after the factorization a diagonal tile holds D on
its diagonal and the strictly lower part of the unit lower triangular L below
it; the tiles below the diagonal hold L. Only lower triangles are read.

Threads: the runtime runs kernels on several worker threads at once, so the bulk
of the work is in ``np.matmul``, which releases the GIL. ``scipy.linalg``'s
wrappers hold it (the triangular solve here runs one thread at a time).
"""
import numpy as np
from scipy.linalg import solve_triangular


def ldlt_factor(A):
    """A (n×n) <- L\\D with A = L·D·Lᵀ, no pivoting; reads and writes the lower triangle only."""
    n = A.shape[0]
    W = np.tril(A) + np.tril(A, -1).T  # the symmetric tile, from its lower triangle
    for j in range(n):
        d = W[j, j]
        if d == 0.0:
            raise ZeroDivisionError(f"zero pivot D[{j}] in LDLᵀ without pivoting")
        W[j + 1:, j] /= d  # column j of L
        # Schur complement: W[j, j+1:] still holds d·L[j+1:, j]ᵀ
        W[j + 1:, j + 1:] -= np.outer(W[j + 1:, j], W[j, j + 1:])
    lower = np.tril_indices(n)
    A[lower] = W[lower]


def ldlt_solve(LD, B):
    """B (m×n) <- B·L⁻ᵀ·D⁻¹, with L (unit lower) and D from a tile ldlt_factor wrote."""
    X = solve_triangular(LD, B.T, lower=True, unit_diagonal=True).T
    B[:] = X / np.diagonal(LD)


def ldlt_update(LD, L1, L2, C):
    """C <- C − L1·D·L2ᵀ, with D the diagonal of LD (L1 is m×k, L2 is n×k, C is m×n)."""
    C -= np.matmul(L1 * np.diagonal(LD), L2.T)
