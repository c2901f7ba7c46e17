"""Golden drivers: the generated text of every shipped program is pinned in tests/golden/.

A deliberate change to code generation (or to a program) shows up here as a diff;
regenerate with ``python scripts/refresh_golden.py`` and review the diff.
"""
import difflib
import subprocess
import sys
from pathlib import Path

import pytest

from tiledsl.compiler import compile_path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
NAMES = sorted(p.stem for p in (ROOT / "programs").glob("*.tile"))
REFRESH = "run python scripts/refresh_golden.py (from the repository root) and review the diff"


@pytest.fixture
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_golden_set_matches_programs():
    assert NAMES, "no programs found"
    assert sorted(p.stem for p in GOLDEN.glob("*.py")) == NAMES, REFRESH


@pytest.mark.parametrize("name", NAMES)
def test_golden_driver(at_root, name):
    result, text = compile_path(f"programs/{name}.tile", f"tests/golden/{name}.py")
    assert text is not None, result.report()
    golden = GOLDEN / f"{name}.py"
    assert golden.is_file(), f"{golden} is missing: {REFRESH}"
    expected = golden.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                            f"tests/golden/{name}.py", "generated", n=2))
        pytest.fail(f"the driver of programs/{name}.tile differs from tests/golden/{name}.py; "
                    f"{REFRESH}\n{diff[:4000]}")


@pytest.mark.parametrize("name", NAMES)
def test_golden_driver_is_valid_python(name):
    text = (GOLDEN / f"{name}.py").read_text()
    compile(text, f"{name}.py", "exec")
    assert f"source='programs/{name}.tile'" in text


def test_generation_is_deterministic(at_root):
    first = [compile_path(f"programs/{name}.tile", f"tests/golden/{name}.py")[1] for name in NAMES]
    second = [compile_path(f"programs/{name}.tile", f"tests/golden/{name}.py")[1] for name in NAMES]
    assert first == second


@pytest.mark.timeout(60)
def test_cli_compile_prints_the_golden_text_with_the_folder_absolute():
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "compile", "programs/cholesky.tile"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # as written there, but for the .tile's folder, absolute: the driver's place is unknown
    placed = (GOLDEN / "cholesky.py").read_text()
    assert out.stdout == placed.replace(" in its folder with `tiledsl compile ../../programs/cholesky.tile -o "
                                        "cholesky.py`", f" with `tiledsl compile {ROOT / 'programs/cholesky.tile'} -o "
                                        "DRIVER.py`").replace("python cholesky.py", "python DRIVER.py").replace(
        "source_dir='../../programs',  # programs/cholesky.tile's directory, relative to this file's",
        f"source_dir={str(ROOT / 'programs')!r},  # programs/cholesky.tile's directory"), REFRESH


@pytest.mark.timeout(60)
def test_refresh_script_check_mode_agrees():
    out = subprocess.run([sys.executable, "scripts/refresh_golden.py", "--check"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


ISOLATION = r"""
import importlib.util, sys
for path in sys.argv[1:]:
    spec = importlib.util.spec_from_file_location("driver_" + path.rsplit("/", 1)[-1][:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert callable(module.generate) and module.PROGRAM.calls
heavy = [m for m in ("lark", "jinja2", "tiledsl.compiler", "tiledsl.compiler.parser", "tiledsl.compiler.analysis",
                     "tiledsl.compiler.codegen") if m in sys.modules]
assert 'lark' not in sys.modules and 'jinja2' not in sys.modules, heavy
assert 'tiledsl.compiler' not in sys.modules and 'tiledsl.compiler.parser' not in sys.modules, heavy
assert not heavy, heavy
print("isolated", len(sys.argv) - 1)
"""


@pytest.mark.timeout(60)
def test_driver_imports_only_the_runtime(tmp_path):
    paths = [str(GOLDEN / f"{name}.py") for name in NAMES]
    out = subprocess.run([sys.executable, "-c", ISOLATION, *paths], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == f"isolated {len(NAMES)}"
