"""Matrices in ``.npy`` files (``run --input NAME=FILE.npy`` / ``--output NAME=FILE.npy``).

Files are memory-mapped and read or written one tile at a time, so a matrix is
never held in memory twice: a rank touches only the tiles it owns. Inputs may
be float64 or float32 (converted per tile), in C or Fortran order; outputs are
float64 in Fortran order, matching the column-major tiles of the kernels.
"""
from __future__ import annotations

import os

import numpy as np

# Real floating point of either precision, any byte order.
_ACCEPTED_ITEMSIZES = (4, 8)


class InputFileError(ValueError):
    """An input ``.npy`` file is missing, unreadable, or of the wrong dtype or shape."""


class OutputFileError(ValueError):
    """An output ``.npy`` file cannot be created."""


def _read_header(path: str) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype from the header of the ``.npy`` file at ``path``."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                    else np.lib.format.read_array_header_2_0)
            shape, _fortran, dtype = read(f)
    except FileNotFoundError:
        raise InputFileError(f"input file {path!r} does not exist") from None
    except OSError as exc:
        raise InputFileError(f"cannot read input file {path!r}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InputFileError(f"input file {path!r} is not a .npy file ({exc})") from None
    return shape, dtype


def open_input(path: str | os.PathLike, expected_shape: tuple[int, int]) -> np.memmap:
    """Map the ``.npy`` file at ``path`` read-only after checking dtype and shape.

    Raises :class:`InputFileError` naming the file and what is wrong with it.
    """
    path = os.fspath(path)
    shape, dtype = _read_header(path)
    if dtype.kind != "f" or dtype.itemsize not in _ACCEPTED_ITEMSIZES:
        raise InputFileError(f"input file {path!r} has dtype {dtype}; "
                             f"expected float64 (or float32)")
    expected = tuple(int(x) for x in expected_shape)
    if tuple(shape) != expected:
        raise InputFileError(f"input file {path!r} has shape {tuple(shape)} "
                             f"but the matrix needs shape {expected}")
    try:
        return np.load(path, mmap_mode="r")
    except (OSError, ValueError) as exc:  # for example a file cut short after its header
        raise InputFileError(f"cannot map input file {path!r}: {exc}") from None


def create_output(path: str | os.PathLike, shape: tuple[int, int]) -> np.memmap:
    """Create (or overwrite) a float64 Fortran-ordered ``.npy`` file and map it writable."""
    path = os.fspath(path)
    try:
        return np.lib.format.open_memmap(path, mode="w+", dtype=np.float64,
                                         shape=tuple(shape), fortran_order=True)
    except OSError as exc:
        reason = exc.strerror or exc
        raise OutputFileError(f"cannot create output file {path!r}: {reason}") from None


def read_block(source: np.ndarray, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
    """A new Fortran float64 copy of ``source[r0:r1, c0:c1]`` (a tile of a mapped input)."""
    return np.array(source[r0:r1, c0:c1], dtype=np.float64, order="F", copy=True)


def write_block(target: np.ndarray, r0: int, c0: int, tile: np.ndarray) -> None:
    """Store ``tile`` at rows ``r0..`` and columns ``c0..`` of a mapped output."""
    target[r0:r0 + tile.shape[0], c0:c0 + tile.shape[1]] = tile
