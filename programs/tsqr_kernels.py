"""The check of programs/tsqr.tile: LAPACK's test ratio of a least-squares solution
(dqrt17, on the normal equations) with the solution's own scale, computed on rank 0
from the gathered matrices.

The program's kernels are all the prelude's (its tree merges two R factors with
ttqrt and ttmqrt); this module gives it its check.
"""
import numpy as np

from tiledsl.runtime.checks import EPS


def least_squares(before, after):
    """‖(B − A·X)ᵀ·A‖₁ / (‖A‖₁·(‖A‖₁·‖X‖₁ + ‖B‖₁)·max(m, n, nrhs)·ε), X the first n rows of
    B's final value: LAPACK's ratio (dqrt17) scaled by ‖A‖·‖B‖ alone failed a backward-stable
    solution of an ill-conditioned A (LAPACK's dgels's own scored 123 on a 40×12 Vandermonde
    matrix): the normal equations' residual of an X exact for A + δA holds Aᵀ·δA·X, of order
    ε·‖A‖²·‖X‖, which is far above ε·‖A‖·‖B‖ where ‖X‖ ≫ ‖B‖ / ‖A‖."""
    a, b = before["A"], before["B"]
    (m, n), nrhs = a.shape, b.shape[1]
    x = after["B"][:n]
    residual = b - a @ x
    scale = np.abs(residual).max()
    if scale == 0.0:
        return 0.0
    error = np.abs((residual / scale).T @ a).sum(axis=0).max() * scale  # the 1-norm: its largest column sum
    norm_a, norm_b, norm_x = (np.abs(v).sum(axis=0).max() for v in (a, b, x))
    size = norm_a * (norm_a * norm_x + norm_b)
    return float(error / (size * max(m, n, nrhs) * EPS)) if size else float("inf")
