"""The verdict of a backward-error check, as the DPLASMA and Chameleon testers give it.

DESIGN §5: Cholesky ‖A − L·Lᵀ‖₁ / (‖A‖₁·n·ε); LU ‖A − L·U‖₁ / (‖A‖₁·n·ε);
QR ‖A − Q·R‖₁ / (‖A‖₁·n·ε) and ‖I − QᵀQ‖₁ / (n·ε), with ``n`` the number of
columns and ε the float64 machine epsilon. A run passes when every residual is
below :data:`THRESHOLD` (a NaN never passes). :mod:`.verify` computes the norms
on distributed tiles.
"""
from __future__ import annotations

import numpy as np

THRESHOLD = 60.0
EPS = float(np.finfo(np.float64).eps)


def passes(*residuals: float) -> bool:
    """True when every residual is below :data:`THRESHOLD` (NaN fails)."""
    return all(r < THRESHOLD for r in residuals)


def scaled(diff_norm: float, a_norm: float, n: int) -> float:
    """``diff_norm / (a_norm·n·ε)``; an exact zero difference is 0 even when A is 0."""
    if diff_norm == 0.0:
        return 0.0
    return float(diff_norm / (a_norm * n * EPS)) if a_norm > 0.0 else float("inf")
