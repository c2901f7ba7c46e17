"""The check of programs/tsqr.tile: LAPACK's test ratio of a least-squares solution
(dqrt17, on the normal equations), computed on rank 0 from the gathered matrices.

The program's kernels are all the prelude's (its tree merges two R factors with
ttqrt and ttmqrt); this module gives it its check.
"""
import numpy as np

from tiledsl.runtime.checks import EPS


def least_squares(before, after):
    """‖(B − A·X)ᵀ·A‖₁ / (‖A‖₁·‖B‖₁·max(m, n, nrhs)·ε), X the first n rows of B's final
    value: LAPACK's test ratio of a least-squares solution (dqrt17, normal equations)."""
    a, b = before["A"], before["B"]
    (m, n), nrhs = a.shape, b.shape[1]
    x = after["B"][:n]
    residual = b - a @ x
    scale = np.abs(residual).max()
    if scale == 0.0:
        return 0.0
    error = np.abs((residual / scale).T @ a).sum(axis=0).max() * scale  # the 1-norm: its largest column sum
    one_norm = np.abs(a).sum(axis=0).max() * np.abs(b).sum(axis=0).max()
    return float(error / (one_norm * max(m, n, nrhs) * EPS)) if one_norm else float("inf")
