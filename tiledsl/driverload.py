"""Turning driver text into a runnable module, and the compile cache behind ``tiledsl run``.

A ``.tile`` program is compiled once per content: the driver lands in
``$XDG_CACHE_HOME/tiledsl/drivers/<hash>.py`` (``~/.cache`` by default) and is
imported from there, so a traceback or a profiler points at a real file.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
from importlib import resources
from pathlib import Path

from . import __version__


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tiledsl" / "drivers"


def cache_key(source_text: str, path: str) -> str:
    """A hash of everything the driver depends on: tiledsl's version, grammar, prelude, source,
    and the file's absolute directory (where a relative ``load`` path is found)."""
    digest = hashlib.sha256()
    for part in (__version__, _package_text("tiledsl.grammars", "tile.lark"),
                 _package_text("tiledsl", "prelude.tile"), _package_text("tiledsl.templates", "driver.py.j2"),
                 path, os.path.dirname(os.path.abspath(path)), source_text):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:24]


def _package_text(package: str, name: str) -> str:
    return resources.files(package).joinpath(name).read_text()


def import_driver(path: str | Path, name: str = "tiledsl_driver"):
    """Import the driver module at ``path`` (without running its ``__main__`` block)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        raise ImportError(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cached_driver_path(source_text: str, path: str, generate) -> Path:
    """The cached driver for ``source_text``, written with ``generate()`` on a miss."""
    target = cache_dir() / f"{Path(path).stem}-{cache_key(source_text, path)}.py"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(generate())
        temporary.replace(target)  # atomic: concurrent ranks never read half a file
    return target
