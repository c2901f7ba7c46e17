"""The message for a package tiledsl needs that the environment lacks (numpy, lark, mpi4py, ...).

Said as a usage error, not as a bug of tiledsl: the commands, the Python API and a driver's
ranks all meet it the same way, as the ``ModuleNotFoundError`` of an import. Nothing here
imports anything but the standard library, so it works where the missing package is numpy.
"""
from __future__ import annotations

import sys

#: module -> the distribution pip installs it from, where the names differ
DISTRIBUTIONS = {"cupy": "cupy-cuda12x", "cupyx": "cupy-cuda12x", "nvmath": "nvmath-python", "yaml": "pyyaml"}


def missing_package(error: BaseException) -> str | None:
    """What to install for ``error``, an import of a package that is not there; None for any
    other error, and for a missing module of tiledsl itself (a broken install: a bug to report)."""
    if not isinstance(error, ModuleNotFoundError) or not error.name:
        return None
    top = error.name.partition(".")[0]
    if top == "tiledsl":
        return None
    distribution = DISTRIBUTIONS.get(top, top)
    return (f"the Python package {distribution!r} is not installed in the environment of {sys.executable} "
            f"(No module named {error.name!r}): pip install {distribution}, or reinstall tiledsl there")
