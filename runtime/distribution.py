"""Tile distributions: which rank, and which device of that rank, owns a tile (DESIGN §4).

DESIGN §4 (Distribution) fixes a multi-level block-cyclic layout over a
``pr``×``pc`` grid of ranks with ``G`` GPUs per rank, and makes distributions
pluggable: any object with ``owner(matrix, i, j) -> (rank, device)`` will do.
Device 0 is the host (the CPU workers); device ``g >= 1`` is GPU ``g``.

* :class:`BlockCyclic` is for uniform tiles: plain 2-D block cyclic over ranks,
  then inside a rank the local tile columns are dealt to the host and the GPUs in
  a repeating cycle of ``host_columns`` host columns followed by ``gpu_columns``
  per GPU (the host/GPU column ratio ``H:G`` of ``--gpu-ratio``, tuned by
  ``tiledsl tune``).
* :class:`Hybrid` is the two-level layout of hybrid tiles (Song et al., ICS'12):
  a block column of ``s`` slices lives on one rank; its first ``s - 1`` (narrow)
  slices stay on the host and its last (wide) slice goes to a GPU.

The helpers :func:`squarest_grid` and :func:`parse_grid` turn a rank count or a
``--grid PxQ`` option into a grid; :func:`parse_ratio` reads ``--gpu-ratio H:G``.
"""
from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass

HOST = 0


def _check_grid(pr: int, pc: int, gpus: int) -> None:
    """Reject an empty grid or a negative GPU count."""
    if pr < 1 or pc < 1:
        raise ValueError(f"process grid must be at least 1x1, got {pr}x{pc}")
    if gpus < 0:
        raise ValueError(f"number of GPUs per rank must be >= 0, got {gpus}")


class Distribution(ABC):
    """Maps tile ``(i, j)`` of a matrix to ``(rank, device)`` (DESIGN §4)."""

    pr: int
    pc: int
    gpus: int

    @property
    def nranks(self) -> int:
        """Number of ranks of the grid."""
        return self.pr * self.pc

    @abstractmethod
    def rank_of(self, i: int, j: int) -> int:
        """Rank owning tile ``(i, j)``: the fast path for the generated driver."""

    @abstractmethod
    def device_of(self, i: int, j: int) -> int:
        """Device (0 host, ``g >= 1`` GPU ``g``) holding tile ``(i, j)`` on its rank."""

    def lines_of(self, rank: int, mt: int, nt: int):
        """``(rows, cols)``: the tile rows and columns of an ``mt``×``nt`` grid of tiles such that
        ``rank`` owns tile (i, j) exactly when i is among the rows and j among the columns; None
        when ownership is not a matter of rows and columns apart (then every rank walks the
        whole loop nest)."""
        return None

    def owner(self, matrix: str, i: int, j: int) -> tuple[int, int]:
        """``(rank, device)`` of tile ``(i, j)`` of ``matrix``.

        The layouts here treat every matrix alike (workspaces follow the matrix
        whose grid they share); a custom distribution may use ``matrix``.
        """
        return self.rank_of(i, j), self.device_of(i, j)


@dataclass(frozen=True)
class BlockCyclic(Distribution):
    """2-D block cyclic over ``pr``×``pc`` ranks, columns dealt to host and GPUs.

    Rank ``(i mod pr)·pc + (j mod pc)``. On that rank, local tile column
    ``c = j // pc`` sits at ``p = c mod (host_columns + gpu_columns·gpus)`` of the
    cycle: the host when ``p < host_columns``, else GPU
    ``(p - host_columns) mod gpus + 1`` (the GPUs' columns dealt round robin).
    With ``gpu_columns == 1`` this is the host's columns then one per GPU.
    """

    pr: int = 1
    pc: int = 1
    gpus: int = 0
    host_columns: int = 1
    gpu_columns: int = 1

    def __post_init__(self) -> None:
        _check_grid(self.pr, self.pc, self.gpus)
        if self.gpu_columns < 1:
            raise ValueError(f"gpu_columns must be >= 1, got {self.gpu_columns}")
        if self.host_columns < 0 or self.host_columns + self.gpus < 1:
            raise ValueError(
                f"host_columns must be >= 0 and leave some device a column, "
                f"got host_columns={self.host_columns} with {self.gpus} GPUs")

    def rank_of(self, i: int, j: int) -> int:
        return (i % self.pr) * self.pc + j % self.pc

    def lines_of(self, rank: int, mt: int, nt: int):
        p, q = divmod(rank, self.pc)
        return range(p, mt, self.pr), range(q, nt, self.pc)

    def device_of(self, i: int, j: int) -> int:
        p = (j // self.pc) % (self.host_columns + self.gpu_columns * self.gpus)
        return HOST if p < self.host_columns else (p - self.host_columns) % self.gpus + 1


@dataclass(frozen=True)
class Hybrid(Distribution):
    """Two-level block cyclic for hybrid tiles (``s`` slices per block column).

    Rank ``(I mod pr)·pc + ((J div s) mod pc)``. Device: the host when
    ``J mod s < s - 1`` or there is no GPU, else GPU
    ``((J div s) div pc) mod G + 1``; with ``s == 1`` every column goes to a GPU.
    """

    pr: int = 1
    pc: int = 1
    s: int = 1
    gpus: int = 0

    def __post_init__(self) -> None:
        _check_grid(self.pr, self.pc, self.gpus)
        if self.s < 1:
            raise ValueError(f"slices per block s must be >= 1, got {self.s}")

    def rank_of(self, i: int, j: int) -> int:
        return (i % self.pr) * self.pc + (j // self.s) % self.pc

    def lines_of(self, rank: int, mt: int, nt: int):
        p, q = divmod(rank, self.pc)
        return range(p, mt, self.pr), [j for j in range(nt) if (j // self.s) % self.pc == q]

    def device_of(self, i: int, j: int) -> int:
        if self.gpus == 0 or j % self.s < self.s - 1:
            return HOST
        return (j // self.s // self.pc) % self.gpus + 1


def squarest_grid(p: int) -> tuple[int, int]:
    """The ``(pr, pc)`` with ``pr·pc = p``, ``pr <= pc`` and ``pr`` as large as possible."""
    if p < 1:
        raise ValueError(f"number of ranks must be >= 1, got {p}")
    pr = next(d for d in range(math.isqrt(p), 0, -1) if p % d == 0)
    return pr, p // pr


_GRID = re.compile(r"\s*([0-9]+)\s*[xX]\s*([0-9]+)\s*")


_RATIO = re.compile(r"\s*([0-9]+)\s*(?::\s*([0-9]+)\s*)?")


def parse_ratio(text: str, keep_on_host: str = "leave out --gpus") -> tuple[int, int]:
    """Parse a host/GPU column ratio ``"H:G"`` (``"H"`` alone is ``H:1``): H block columns
    to the host for every G to each GPU, in each cycle of a rank's columns. ``keep_on_host``
    says how the caller keeps every tile on the host, which ``G = 0`` asks for in vain."""
    match = _RATIO.fullmatch(text)
    if match is None:
        raise ValueError(f"bad GPU ratio {text!r}: expected H:G with integers from 0, like 1:4 "
                         f"(H host columns for every G columns of each GPU)")
    host, gpu = int(match[1]), int(match[2] or 1)
    if gpu < 1:
        raise ValueError(f"bad GPU ratio {text!r}: G must be at least 1 (to keep every tile on the host, "
                         f"{keep_on_host}; kernels without a GPU body run on the host anyway)")
    return host, gpu


def parse_grid(text: str) -> tuple[int, int]:
    """Parse ``"PxQ"`` (for example ``"2x3"``) into ``(P, Q)``, both at least 1."""
    match = _GRID.fullmatch(text)
    if match is None:
        raise ValueError(f"bad grid {text!r}: expected PxQ with positive integers, like 2x3")
    pr, pc = int(match[1]), int(match[2])
    if pr < 1 or pc < 1:
        raise ValueError(f"bad grid {text!r}: both dimensions must be at least 1")
    return pr, pc
