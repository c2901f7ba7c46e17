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
from fractions import Fraction

import numpy as np

THRESHOLD = 60.0
EPS = float(np.finfo(np.float64).eps)


class CheckError(Exception):
    """A check that gave no residual (a user check that raised, pivots naming no row): the run
    fails with this one-line message, the same on every rank; ``name`` is the residual's name,
    ``names`` all those the check gives (each then has none: a QR check's orthogonality too)."""

    def __init__(self, name: str, message: str, names: tuple = ()):
        super().__init__(message)
        self.name = name
        self.names = names or (name,)


def passes(*residuals: float) -> bool:
    """True when every residual is below :data:`THRESHOLD` (NaN fails)."""
    return all(r < THRESHOLD for r in residuals)


def failure_line(residuals: dict) -> str:
    """Why a check failed, from its residuals {name: value}: each one not below :data:`THRESHOLD`,
    said as "the NAME residual VALUE" whether it is a check's only one or one of several (an only
    residual may have no name)."""
    failing = {name: value for name, value in residuals.items() if not passes(value)} or residuals
    none = [f"the {name} check" if name else "the check" for name, value in failing.items() if math.isnan(value)]
    high = [f"{f'the {name} residual' if name else 'the residual'} {value:.3g}" for name, value in failing.items()
            if not math.isnan(value)]
    # a NaN is no residual "not below" the threshold (tester u83d: "the solve residual nan is not below 60")
    said = ([f"{' and '.join(none)} gave no residual (NaN)"] if none else []) \
        + ([f"{' and '.join(high)} {'are' if len(high) > 1 else 'is'} not below {THRESHOLD:g}"] if high else [])
    return f"check failed: {'; '.join(said)}"


def failure_lines(errors: list, residuals: dict) -> list:
    """Why a run failed, as run and bench say it: its ``errors`` first (a check that raised among
    them, whose NaN residual they explain), then the residuals not below the threshold."""
    failing = [value for value in residuals.values() if not passes(value)]
    explained = bool(errors) and all(math.isnan(value) for value in failing)
    return list(errors) + ([failure_line(residuals)] if failing and not explained else [])


#: residuals computed again exactly when :func:`near` (:func:`.verify.exact_update`): their verdict holds
EXACT_WHEN_NEAR = frozenset({"lu"})


def near(value: float) -> bool:
    """Whether a residual is within 10× of :data:`THRESHOLD`, either side (NaN is not)."""
    return THRESHOLD / 10 <= value < THRESHOLD * 10


def near_threshold(residuals: dict) -> str | None:
    """A warning for built-in residuals within 10× of :data:`THRESHOLD`, either side: computed in
    float64, as the DPLASMA testers compute them, a product of factors whose entries grew rounds
    by as much as the difference it measures, so near the threshold the verdict is not certain
    (an LU gave 58.6 where the exact value is 146: those are computed again exactly)."""
    close = [name for name, value in residuals.items() if near(value) and name not in EXACT_WHEN_NEAR]
    if not close:
        return None
    return (f"the {' and '.join(close)} residual{'s are' if len(close) > 1 else ' is'} within 10x of the threshold "
            f"{THRESHOLD:g}: computed in float64, a residual's own rounding can be as large as what it measures "
            f"where the products it forms are far larger than their result, so in exact arithmetic it may fall on "
            f"the other side")


def largest(residuals) -> float:
    """The largest residual, NaN when any is NaN (``max`` would depend on the order)."""
    values = list(residuals)
    return math.nan if any(math.isnan(v) for v in values) else max(values)


def exact(value: float) -> Fraction | float:
    """``value`` as a Fraction, if finite (products and sums of norms then neither overflow nor
    underflow); inf and NaN stay floats."""
    return Fraction(value) if math.isfinite(value) else value


class Subnormal(ValueError):
    """Norms so small that float64 formed the residual's differences on its subnormal grid, where
    they round away (an exact 245 computed as 0): no verdict can be given."""

    def __init__(self, bound):
        super().__init__(f"the norms it measures the residual against ({float(bound):.3g}) are so small that the "
                         f"differences were formed among float64's subnormal numbers, where they round away: no "
                         f"residual can be trusted (scale the matrix by a power of two, such as 2**600, and check "
                         f"it again)")


#: a bound below n·SUBNORMAL_FLOOR is :class:`Subnormal`: the grid of float64's subnormal numbers,
#: 2⁻¹⁰⁷⁴, summed over n products, is then more than a thousandth of one unit of residual (n·ε·bound)
SUBNORMAL_FLOOR = Fraction(2) ** -1013


def scaled(diff_norm, bound, n: int) -> float:
    """``diff_norm / (bound·n·ε)``, computed exactly from norms given as Fractions (floats where
    not finite) and rounded once: neither ‖A‖·‖X‖ nor ‖A‖·n·ε may overflow or underflow on the
    way. An exact zero difference is 0 even when A is 0; a bound of 0 gives inf, and an infinite
    or NaN one NaN (an input with such an entry has no backward error: never a pass); one whose
    differences float64 could not form raises :class:`Subnormal`."""
    finite = not isinstance(bound, float) or math.isfinite(bound)
    if finite and 0 < bound < n * SUBNORMAL_FLOOR:
        raise Subnormal(bound)
    if diff_norm == 0:
        return 0.0
    if isinstance(diff_norm, float) and not math.isfinite(diff_norm):
        return diff_norm  # inf: fails; NaN: fails
    if not finite:
        return math.nan
    if bound == 0:
        return math.inf
    ratio = Fraction(diff_norm) / (Fraction(bound) * n * Fraction(EPS))
    return float(ratio) if ratio < 2 ** 1000 else math.inf
