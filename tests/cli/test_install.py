"""An installed tiledsl, not only a checkout: the wheel holds everything a run reads.

``pip install .`` (or from a package index) puts no repository beside the package,
so the shipped programs, the grammar, the prelude, the driver template and the
machine files must be in the wheel; a run then finds the programs there
(:func:`tiledsl.driverload.shipped_programs`).
"""
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_the_wheel_holds_the_shipped_programs_and_every_file_a_run_reads(tmp_path):
    source = tmp_path / "source"  # a copy: building writes build/ and egg-info beside the sources
    for folder in ("tiledsl", "runtime", "grammars", "programs"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "wheel"),
                            str(source)], capture_output=True, text=True, timeout=280)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "wheel").glob("tiledsl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    programs = {f"tiledsl/programs/{path.name}" for path in (ROOT / "programs").iterdir()
                if path.suffix in (".tile", ".py")}
    assert "tiledsl/programs/cholesky.tile" in programs and "tiledsl/programs/tsqr_kernels.py" in programs
    assert programs <= names, sorted(programs - names)
    assert {"tiledsl/grammars/tile.lark", "tiledsl/compiler/prelude.tile", "tiledsl/machines/keeneland.json",
            "tiledsl/runtime/engine.py"} <= names
    assert any(name.startswith("tiledsl/compiler/templates/") and name.endswith(".j2") for name in names)


@pytest.mark.timeout(120)
def test_a_checkout_imported_as_it_is_finds_the_subpackages_its_install_maps(tmp_path):
    """``pip install .``, then Python started in the checkout: its tiledsl/ comes first on
    sys.path, without the runtime, grammar and programs the install maps from the top level
    (``python DRIVER.py`` and the tutorial's API calls ended in No module named 'tiledsl.runtime')."""
    code = ("import sys\n"
            "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]  # no install\n"
            f"sys.path.insert(0, {str(ROOT)!r})\n"
            "import tiledsl.runtime, tiledsl.grammars\n"
            "from importlib import resources\n"
            "print(tiledsl.runtime.__file__, resources.files('tiledsl.programs').joinpath('cholesky.tile').is_file())\n"
            "print(tiledsl.load('programs/cholesky.tile').run(n=64, check=True).passed)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(ROOT / "runtime" / "__init__.py"), "True", "True"]
