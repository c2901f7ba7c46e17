"""Dense reference residuals, on whole matrices, for testing :mod:`tiledsl.runtime.verify`.

The same formulas as the runtime's distributed checks (DESIGN §5), written the
plain way: form the products with numpy, or replay the QR reflectors with
LAPACK's ``dgemqrt`` / ``dtpmqrt`` on whole row slabs. Tile QR leaves one set of
Householder vectors per kernel call (GEQRT on a diagonal region, TPQRT on a tile
below it), each with its own T factor: a :class:`Reflector`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import lapack

from tiledsl.runtime.checks import scaled as _scaled


def _backward_error(a: np.ndarray, left: np.ndarray, right: np.ndarray) -> float:
    """‖A − left·right‖₁ / (‖A‖₁·n·ε)."""
    diff = left @ right
    diff -= a
    return _scaled(np.linalg.norm(diff, 1), np.linalg.norm(a, 1), a.shape[1])


def cholesky_residual(a: np.ndarray, l: np.ndarray) -> float:
    """‖A − L·Lᵀ‖₁ / (‖A‖₁·n·ε) with ``L = tril(l)`` (above the diagonal is ignored)."""
    low = np.tril(l)
    return _backward_error(a, low, low.T)


def lu_residual(a: np.ndarray, lu: np.ndarray) -> float:
    """‖A − L·U‖₁ / (‖A‖₁·n·ε) for an LU without pivoting stored in ``lu``.

    L is unit lower triangular (its diagonal is implied), U upper triangular;
    ``lu`` may be rectangular (L is m×k and U is k×n, k = min(m, n)).
    """
    m, n = lu.shape
    k = min(m, n)
    low = np.tril(lu[:, :k], -1) + np.eye(m, k)
    return _backward_error(a, low, np.triu(lu[:k, :]))


@dataclass(frozen=True, eq=False)
class Reflector:
    """The block reflector left by one QR kernel call (global row/column ranges).

    ``kind`` is ``'geqrt'`` or ``'tpqrt'``. For GEQRT, V is the unit lower part of
    ``factored[v_rows, cols]`` and ``top_rows == v_rows``. For TPQRT (``l = 0``), V is
    the whole block ``factored[v_rows, cols]`` and ``top_rows`` are the ``k`` rows of
    the triangle it was eliminated against (``k`` = number of columns). ``t`` is the
    T tile, ``(ib, c1 - c0)``; its first ``min(ib, k)`` rows are meaningful, with
    ``k = min(rows, cols)`` for GEQRT and ``k = cols`` for TPQRT.
    """

    kind: str
    top_rows: tuple[int, int]
    v_rows: tuple[int, int]
    cols: tuple[int, int]
    t: np.ndarray

    def __post_init__(self) -> None:
        if self.kind not in ("geqrt", "tpqrt"):
            raise ValueError(f"reflector kind must be 'geqrt' or 'tpqrt', got {self.kind!r}")
        if self.t.ndim != 2 or self.t.shape[1] != self.cols[1] - self.cols[0]:
            raise ValueError(f"T of shape {self.t.shape} does not match columns {self.cols}")

    @property
    def k(self) -> int:
        """Number of elementary reflectors."""
        width = self.cols[1] - self.cols[0]
        if self.kind == "tpqrt":
            return width
        return min(self.v_rows[1] - self.v_rows[0], width)

    def blocks(self, factored: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(V, T)`` as LAPACK wants them, V read from the factored matrix."""
        (r0, r1), (c0, _) = self.v_rows, self.cols
        k = self.k
        return factored[r0:r1, c0:c0 + k], self.t[:min(self.t.shape[0], k), :k]


def _lapack_ok(name: str, info: int) -> None:
    """Turn a nonzero LAPACK ``info`` into an exception."""
    if info != 0:
        raise RuntimeError(f"{name} failed with info={info}")


def _apply_one(x: np.ndarray, factored: np.ndarray, ref: Reflector, trans: str) -> None:
    """Apply the block reflector (or its transpose) to the rows it touches in ``x``."""
    if ref.k == 0:  # an empty slice of a ragged hybrid block
        return
    v, t = ref.blocks(factored)
    (v0, v1), (t0, _) = ref.v_rows, ref.top_rows
    if ref.kind == "geqrt":
        x[v0:v1], info = lapack.dgemqrt(v, t, x[v0:v1], side="L", trans=trans)
        _lapack_ok("dgemqrt", info)
    else:
        top = slice(t0, t0 + ref.k)
        x[top], x[v0:v1], info = lapack.dtpmqrt(0, v, t, x[top], x[v0:v1],
                                                side="L", trans=trans)
        _lapack_ok("dtpmqrt", info)


def apply_q(x: np.ndarray, factored: np.ndarray, reflectors, trans: str) -> None:
    """Overwrite ``x`` with ``Q·x`` (``trans='N'``) or ``Qᵀ·x`` (``trans='T'``).

    ``Q = H₁·H₂···H_p`` in the order of ``reflectors`` (the order the kernels ran),
    so Q applies them last to first and Qᵀ first to last. Each update covers all
    columns of ``x`` at once.
    """
    if trans not in ("N", "T"):
        raise ValueError(f"trans must be 'N' or 'T', got {trans!r}")
    ordered = reversed(list(reflectors)) if trans == "N" else reflectors
    for ref in ordered:
        _apply_one(x, factored, ref, trans)


def qr_residuals(a: np.ndarray, factored: np.ndarray, reflectors) -> tuple[float, float]:
    """``(‖A − Q·R‖₁/(‖A‖₁·n·ε), ‖I − QᵀQ‖₁/(n·ε))`` of a tile QR.

    ``R = triu(factored)`` restricted to its first ``k = min(m, n)`` rows and Q to
    its first ``k`` columns (formed by :func:`apply_q` on the identity).
    """
    m, n = factored.shape
    k = min(m, n)
    q = np.eye(m, k, order="F")
    apply_q(q, factored, reflectors, "N")
    resid_qr = _backward_error(a, q, np.triu(factored[:k, :]))
    gram = q.T @ q
    gram -= np.eye(k)
    return resid_qr, _scaled(np.linalg.norm(gram, 1), 1.0, n)
