"""Fixtures for runtime tests: drivers compiled once per session."""
from pathlib import Path

import pytest

from tiledsl.compiler import compile_path
from tiledsl.driverload import import_driver

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def compiled(tmp_path_factory):
    """compiled(path) -> driver module of a .tile file (relative to the repository root)."""
    cache = {}
    folder = tmp_path_factory.mktemp("drivers")

    def load(relative: str):
        if relative not in cache:
            result, text = compile_path(ROOT / relative)
            assert text is not None, result.report()
            target = folder / (Path(relative).stem + ".py")
            target.write_text(text)
            cache[relative] = import_driver(target, f"driver_{Path(relative).stem}")
        return cache[relative]
    return load
