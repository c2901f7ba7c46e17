"""Exceptions raised by the kernel library.

A kernel only knows its own tiles, so it reports *what* went wrong numerically in a
short human message; the runtime wraps it with the kernel name, the tiles, the
``.tile`` line and the rank.
"""
from __future__ import annotations


class KernelError(Exception):
    """A kernel could not complete on its input (e.g. a matrix that is not SPD)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message
