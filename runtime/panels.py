"""Panels as kernels receive them: a range of tiles passed as one argument.

A call's panel argument (``A[k : A.mt, j]``, ``A[i, 0 : A.nt]``) reaches its kernel as
a :class:`Panel`: the list of its tiles' arrays in order along the range, which also
says how they stack (``axis`` 0: a column of tiles, top to bottom; 1: a row of tiles,
left to right) and whether the call writes them. A user kernel takes it as the list
it is. A built-in kernel takes one matrix (:func:`taking_matrices`): a view of the
tiles where a rank stores them adjacent in one array (a column of tiles of a
column-stored matrix, :func:`stacked`), else a gathered copy, written back to the
tiles after the kernel when the call writes the panel. So every prelude kernel takes
panels, and ``gemm(A[0 : A.mt, l], B[l, j], C[0 : C.mt, j])`` is one dgemm on a
column of tiles.

:func:`array_module` gives the array library of a tile or a panel (numpy, or CuPy on
a GPU), so that code is written once for both.
"""
from __future__ import annotations

import contextlib
import functools

import numpy as np

_DOUBLE = np.dtype(np.float64).itemsize


class Panel(list):
    """The arrays of a panel's tiles in order along its range; ``axis``: 0 if they stack top to
    bottom (a column of tiles), 1 if left to right (a row); ``written``: the call writes them."""

    def __init__(self, tiles, axis: int, written: bool):
        super().__init__(tiles)
        self.axis, self.written = axis, written

    def like(self, tiles) -> "Panel":
        """Other arrays of the same tiles (read-only views, device arrays unwrapped) as this panel."""
        return Panel(tiles, self.axis, self.written)


def array_module(array):
    """The array module of ``array`` (of a panel's tiles): numpy, or cupy (imported only then),
    so that a GPU body is written once for both backends: ``xp = array_module(A)``."""
    if isinstance(array, list) and array:
        array = array[0]
    if isinstance(array, np.ndarray):
        return np
    if type(array).__module__.partition(".")[0] == "cupy":
        import cupy

        return cupy
    raise TypeError(f"array_module takes a numpy or CuPy array, not {type(array).__name__}")


def taking_matrices(kernel, lists: bool = False):
    """``kernel`` given each :class:`Panel` argument as one matrix (:func:`as_matrix`); with
    ``lists``, column panels pass as they are (the kernel works on their tiles itself)."""
    @functools.wraps(kernel)
    def run(*arguments):
        if Panel not in map(type, arguments):
            return kernel(*arguments)
        with contextlib.ExitStack() as matrices:
            return kernel(*[matrices.enter_context(as_matrix(argument, kernel.__name__))
                            if isinstance(argument, Panel) and not (lists and argument.axis == 0) else argument
                            for argument in arguments])
    return run


@contextlib.contextmanager
def as_matrix(panel: Panel, kernel: str):
    """The tiles of ``panel`` as one column-major matrix: the tile of a one-tile panel, a view of
    adjacent host tiles, or a gathered copy, written back to the tiles on leaving when the
    panel is written (not after a failure: the task fails anyway)."""
    tiles = list(panel)
    across = [tile.shape[1 - panel.axis] for tile in tiles]
    if len(set(across)) > 1:
        what = "columns" if panel.axis == 0 else "rows"
        raise ValueError(f"{kernel}: a panel's tiles have {', '.join(map(str, across))} {what}; "
                         f"they must all have the same")
    view = tiles[0] if len(tiles) == 1 else stacked(tiles) if panel.axis == 0 else None
    if view is not None:
        yield view
        return
    ends = np.cumsum([tile.shape[panel.axis] for tile in tiles]).tolist()
    parts = [(tile, slice(start, end)) for tile, start, end in zip(tiles, [0] + ends, ends)]
    shape = (ends[-1], across[0]) if panel.axis == 0 else (across[0], ends[-1])
    matrix = array_module(tiles).empty(shape, order="F")
    for tile, part in parts:
        matrix[_rows_or_columns(part, panel.axis)] = tile
    yield matrix
    if panel.written:
        for tile, part in parts:
            tile[...] = matrix[_rows_or_columns(part, panel.axis)]


def _rows_or_columns(part: slice, axis: int) -> tuple:
    return (part, slice(None)) if axis == 0 else (slice(None), part)


def stacked(tiles: list) -> np.ndarray | None:
    """A column of host tiles as one column-major matrix, a view, when each tile starts where the
    one above it ends in one array (a rank stores its tiles of a column so); else None. Tiles
    without rows are left out (numpy gives an empty slice no address of its own)."""
    if not isinstance(tiles[0], np.ndarray):
        return None
    tiles = [tile for tile in tiles if tile.shape[0]] or tiles[:1]
    first = tiles[0]
    for above, below in zip(tiles, tiles[1:]):
        if (_root(below) is not _root(first) or below.strides != first.strides
                or _address(below) != _address(above) + _DOUBLE * above.shape[0]):
            return None
    rows = sum(tile.shape[0] for tile in tiles)
    return np.lib.stride_tricks.as_strided(first, (rows, first.shape[1]), writeable=first.flags.writeable)


def _root(a: np.ndarray) -> np.ndarray:
    """The array owning ``a``'s memory (through read-only views of views too)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]
