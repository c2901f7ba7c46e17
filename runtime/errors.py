"""Exceptions of a run: a kernel's numerical failure, and a task or loop nest that failed.

A kernel only knows its own tiles, so it reports *what* went wrong numerically in a
short human message (:class:`KernelError`); the runtime wraps it with the kernel
name, the tiles, the ``.tile`` line and the rank (:class:`TaskFailure`). An error in
the program's own loop nest (a tile that does not exist, a division by zero) becomes
a :class:`TaskFailure` too, wherever the loop nest is walked (:func:`loop_nest_failure`).
"""
from __future__ import annotations

import linecache
import re

_TILE_LINE = re.compile(r"# \S+\.tile:(\d+)")


class KernelError(Exception):
    """A kernel could not complete on its input (e.g. a matrix that is not SPD)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class TaskFailure(Exception):
    """A task (or the program's loop nest) failed on this rank."""

    def __init__(self, message: str, rank: int, line: int | None = None):
        super().__init__(message)
        self.rank = rank
        self.line = line


def loop_nest_failure(error: Exception, rank: int) -> TaskFailure:
    """The failure of the driver's loop nest that raised ``error``, at its ``.tile`` line."""
    from .matrix import TileIndexError

    if isinstance(error, TaskFailure):
        return error
    if isinstance(error, TileIndexError):
        return TaskFailure(f"{error}", rank, error.line or driver_line(error))
    # a mistake in the program's arithmetic, e.g. a division by zero
    return TaskFailure(f"the loop nest failed: {type(error).__name__}: {error}", rank, driver_line(error))


def driver_line(error: BaseException) -> int | None:
    """The ``.tile`` line of the driver statement that raised ``error``, from its comments."""
    line = None
    traceback = error.__traceback__
    while traceback is not None:
        frame = traceback.tb_frame
        if frame.f_code.co_name == "generate":
            line = tile_line(frame.f_code.co_filename, traceback.tb_lineno) or line
        traceback = traceback.tb_next
    return line


def tile_line(filename: str, number: int) -> int | None:
    """The ``.tile`` line of a generated driver's statement, from the ``# FILE.tile:N`` comments above it."""
    for candidate in range(number, 0, -1):
        found = _TILE_LINE.search(linecache.getline(filename, candidate))
        if found:
            return int(found.group(1))
    return None
