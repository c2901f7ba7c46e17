"""The Python API: ``tiledsl.load("programs/cholesky.tile").run(A=array)``.

Usable from a notebook: compile once, run many times on numpy arrays, get numpy
arrays back. Problems surface as :class:`TiledslError` with the same messages
the command line prints.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .compiler import compile_path
from .driverload import cached_driver_path, import_driver


class TiledslError(Exception):
    """A program that does not compile, a bad option, or a failed run."""


@dataclass
class Output:
    """The matrices a run produced (by name), with its timing and check."""

    matrices: dict
    seconds: float
    residual: float | None
    tasks: int

    def __getitem__(self, name: str) -> np.ndarray:
        return self.matrices[name]


class Loaded:
    """A compiled ``.tile`` program, ready to run on arrays."""

    def __init__(self, path: str, driver):
        self.path = path
        self.driver = driver
        self.program = driver.PROGRAM

    @property
    def matrices(self) -> list[str]:
        return [d.name for d in self.program.matrices]

    def run(self, n: int | None = None, *, check: bool = False, workers: int | None = None,
            seed: int = 42, params: dict | None = None, **arrays_and_tiles) -> Output:
        """Run the program; matrices given as arrays are copied in, every matrix comes back.

        Keyword arguments named like a matrix are its input array; ``nb``, ``B``, ``b``
        and ``s`` set the tiling; ``n`` defaults to the first array's order.
        """
        from .runtime import Options, UsageError, execute
        from .runtime.engine import TaskFailure
        from .runtime.options import TILE_SETTINGS

        tiles = {k: arrays_and_tiles.pop(k) for k in TILE_SETTINGS if k in arrays_and_tiles}
        unknown = set(arrays_and_tiles) - set(self.matrices)
        if unknown:
            raise TiledslError(f"{self.program.name} has no matrix {sorted(unknown)[0]} "
                               f"(it has {', '.join(self.matrices)})")
        if n is None:
            if not arrays_and_tiles:
                raise TiledslError("give n= or an input array")
            n = int(np.shape(next(iter(arrays_and_tiles.values())))[-1])
        options = Options(n=n, tiles=tiles, sets=dict(params or {}), workers=workers, seed=seed, check=check)
        try:
            result = execute(self.driver, options, arrays_and_tiles)
        except (UsageError, TaskFailure) as error:
            raise TiledslError(str(error)) from None
        matrices = {name: m.assemble() for name, m in result.matrices.items()}
        return Output(matrices, result.seconds, result.residual, result.tasks)


def load(path) -> Loaded:
    """Compile the ``.tile`` program at ``path`` (cached by content) and load its driver."""
    result, text = compile_path(path)
    if text is None:
        raise TiledslError(result.report())
    driver_path = cached_driver_path(result.source.text, str(path), lambda: text)
    return Loaded(str(path), import_driver(driver_path, f"tiledsl_driver_{Path(path).stem}"))
