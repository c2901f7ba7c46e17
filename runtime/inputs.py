"""Deterministic input matrices, made tile by tile on whichever rank owns the tile.

Every element is a pure function of ``(seed, matrix_index, i, j)`` (global
indices), so a matrix is the same whatever its tiling, its distribution or the
number of ranks that build it, and no rank ever needs the whole matrix.

The hash is counter based and vectorized: row ``i`` gets ``R(i)`` and column
``j`` gets ``C(j)`` (each a splitmix64 of its index in a stream keyed by seed and
matrix), and element ``(i, j)`` is the splitmix64 finalizer of ``R(i) + C(j)``
mapped to ``[-0.5, 0.5)``. The sum costs one broadcast add per element, which
keeps generation at a few passes over memory. SPD matrices use ``C = R``, which
makes them symmetric bit for bit.
"""
from __future__ import annotations

import numpy as np

from ..language import NAMED_INITS, RANDOM_KINDS
from .world import RankError

KINDS = (*RANDOM_KINDS, *NAMED_INITS)  # what make_tile makes

_MASK = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15  # splitmix64 increment (golden ratio)
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
# Elements per column slab: two uint64 buffers of this size stay in a 1 MiB L2.
_SLAB = 1 << 15


def _mix_int(x: int) -> int:
    """splitmix64 finalizer on a Python int (for the per-matrix keys)."""
    x &= _MASK
    x = ((x ^ (x >> 30)) * _MIX1) & _MASK
    x = ((x ^ (x >> 27)) * _MIX2) & _MASK
    return x ^ (x >> 31)


def _mix_inplace(z: np.ndarray, tmp: np.ndarray) -> None:
    """splitmix64 finalizer on a uint64 array, in place (``tmp`` is scratch of z's shape)."""
    for shift, mult in ((30, _MIX1), (27, _MIX2)):
        np.right_shift(z, shift, out=tmp)
        np.bitwise_xor(z, tmp, out=z)
        np.multiply(z, np.uint64(mult), out=z)
    np.right_shift(z, 31, out=tmp)
    np.bitwise_xor(z, tmp, out=z)


def _index_hashes(key: int, start: int, stop: int) -> np.ndarray:
    """splitmix64 outputs ``start .. stop-1`` of the stream ``key`` (uint64, wraps mod 2^64)."""
    z = np.arange(start, stop, dtype=np.uint64) * np.uint64(_GAMMA) + np.uint64(key)
    _mix_inplace(z, np.empty_like(z))
    return z


def _fill_uniform(out: np.ndarray, row_h: np.ndarray, col_h: np.ndarray) -> None:
    """Set ``out[a, b]`` to mix(row_h[a] + col_h[b]) mapped to [-0.5, 0.5).

    Works on column slabs of the Fortran-ordered ``out`` so the uint64 scratch
    stays in cache instead of costing extra passes over main memory.
    """
    n_rows, n_cols = out.shape
    width = max(1, _SLAB // max(n_rows, 1))
    z_buf = np.empty((n_rows, width), dtype=np.uint64, order="F")
    t_buf = np.empty_like(z_buf)
    for c in range(0, n_cols, width):
        w = min(width, n_cols - c)
        z, tmp = z_buf[:, :w], t_buf[:, :w]
        np.add(row_h[:, None], col_h[None, c:c + w], out=z)
        _mix_inplace(z, tmp)
        # The signed top 53 bits are exact in a double: [-2^52, 2^52) * 2^-53.
        shifted = tmp.view(np.int64)
        np.right_shift(z.view(np.int64), 11, out=shifted)
        np.multiply(shifted, 2.0 ** -53, out=out[:, c:c + w])


def _stream_keys(seed: int, matrix_index: int) -> tuple[int, int]:
    """Independent row and column stream keys for one (seed, matrix)."""
    stream = _mix_int(_mix_int(seed) + matrix_index)
    return _mix_int(stream + 1), _mix_int(stream + 2)


def _add_to_diagonal(out: np.ndarray, r0: int, c0: int, value: float) -> None:
    """Add ``value`` to the global diagonal elements that fall in the block at (r0, c0)."""
    n_rows, n_cols = out.shape
    k = np.arange(max(r0, c0), min(r0 + n_rows, c0 + n_cols))
    out[k - r0, k - c0] += value


def _check_block(kind: str, n_rows: int, n_cols: int,
                 r0: int, r1: int, c0: int, c1: int) -> None:
    """Reject an unknown kind, a block outside the matrix, or a non-square spd."""
    if kind not in KINDS:
        raise ValueError(f"unknown matrix kind {kind!r}; expected one of {', '.join(KINDS)}")
    if not (0 <= r0 <= r1 <= n_rows and 0 <= c0 <= c1 <= n_cols):
        raise ValueError(f"block [{r0}:{r1}, {c0}:{c1}] is outside the "
                         f"{n_rows}x{n_cols} matrix")
    if kind == "spd" and n_rows != n_cols:
        raise ValueError(f"an spd matrix must be square, got {n_rows}x{n_cols}")


def make_tile(kind: str, seed: int, matrix_index: int, n_rows: int, n_cols: int,
              r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
    """Block ``[r0:r1, c0:c1]`` of the global ``n_rows``×``n_cols`` input matrix.

    ``kind`` is one of :data:`KINDS`: ``general`` (uniform in [-0.5, 0.5)),
    ``spd`` (symmetric, ``n_rows`` added to the diagonal: SPD by Gershgorin),
    ``diagdom`` (general plus ``n_rows`` on the diagonal), ``zeros``,
    ``identity``. ``matrix_index`` separates the matrices of one program.
    Returns a new Fortran-ordered float64 array.
    """
    _check_block(kind, n_rows, n_cols, r0, r1, c0, c1)
    out = np.zeros((r1 - r0, c1 - c0), dtype=np.float64, order="F")
    if kind == "identity":
        _add_to_diagonal(out, r0, c0, 1.0)
    elif kind != "zeros" and out.size:
        row_key, col_key = _stream_keys(seed, matrix_index)
        if kind == "spd":
            col_key = row_key  # mix(R(i) + R(j)) is symmetric in i and j
        _fill_uniform(out, _index_hashes(row_key, r0, r1), _index_hashes(col_key, c0, c1))
        if kind != "general":
            _add_to_diagonal(out, r0, c0, float(n_rows))
    return out


def make_matrix(kind: str, seed: int, matrix_index: int, n_rows: int, n_cols: int) -> np.ndarray:
    """The whole ``n_rows``×``n_cols`` input matrix at once, equal to its tiles put together.

    For tests, which compute references on it: the runtime itself only ever makes tiles
    (:func:`make_tile`), on the rank that owns each.
    """
    return make_tile(kind, seed, matrix_index, n_rows, n_cols, 0, n_rows, 0, n_cols)


def finite_watched(fill, name: str, held: dict, refused_by: str | None):
    """``fill`` (tiles read from a user's array or file), counting the NaN and infinite values
    it reads in ``held[name]``; where ``refused_by`` (the setting as given: ``--check-finite``,
    ``check_finite=True``), the first one is an error rather than blamed on the task that meets it."""
    def read(r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
        tile = fill(r0, r1, c0, c1)
        bad = ~np.isfinite(tile)
        if bad.any():
            if refused_by:
                row, col = (int(x) for x in np.argwhere(bad)[0])
                raise RankError(f"input {name} holds {tile[row, col]} at ({r0 + row}, {c0 + col}) "
                                f"({refused_by} refuses non-finite inputs)")
            held[name] = held.get(name, 0) + int(np.count_nonzero(bad))
        return tile
    return read
