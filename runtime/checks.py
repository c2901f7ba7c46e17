"""The verdict of a backward-error check, as the DPLASMA and Chameleon testers give it.

DESIGN §5: Cholesky ‖A − L·Lᵀ‖₁ / (‖A‖₁·n·ε); LU ‖A − L·U‖₁ / (‖A‖₁·n·ε) (with
pivoting ‖P·A − L·U‖₁ / (‖A‖₁·n·ε)); QR ‖A − Q·R‖₁ / (‖A‖₁·n·ε) and
‖I − QᵀQ‖₁ / (n·ε), with ``n`` the number of columns. DPLASMA's testers give the
others: a solve ‖B − op(A)·X‖∞ / ((‖op(A)‖∞·‖X‖∞ + ‖B‖∞)·n·ε), ``n`` the order of
A; an inverse ‖I − op(A)·op(X)‖₁ / (‖op(A)‖₁·‖op(X)‖₁·n·ε); a product
‖C − (α·op(A)·op(B) + β·C₀)‖∞ / ((|α|·‖op(A)‖∞·‖op(B)‖∞ + |β|·‖C₀‖∞)·k·ε), ``k``
the inner dimension. A, B and C₀ are the original values, X and C the final
ones; ε is the float64 machine epsilon. A run passes when every residual is
below :data:`THRESHOLD` (a NaN never passes). :mod:`.verify` computes the norms
on distributed tiles.
"""
from __future__ import annotations

import math

import numpy as np

THRESHOLD = 60.0
EPS = float(np.finfo(np.float64).eps)


class CheckError(Exception):
    """A check that gave no residual (a user check that raised, pivots naming no row): the run
    fails with this one-line message, the same on every rank; ``name`` is the residual's name."""

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.name = name


def passes(*residuals: float) -> bool:
    """True when every residual is below :data:`THRESHOLD` (NaN fails)."""
    return all(r < THRESHOLD for r in residuals)


def largest(residuals) -> float:
    """The largest residual, NaN when any is NaN (``max`` would depend on the order)."""
    values = list(residuals)
    return math.nan if any(math.isnan(v) for v in values) else max(values)


def scaled(diff_norm: float, a_norm: float, n: int) -> float:
    """``diff_norm / (a_norm·n·ε)``; an exact zero difference is 0 even when A is 0."""
    if diff_norm == 0.0:
        return 0.0
    return float(diff_norm / (a_norm * n * EPS)) if a_norm > 0.0 else float("inf")
