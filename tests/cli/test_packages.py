"""A package the environment lacks (tiledsl.packages): said as what to install, exit 2, by the
command line (lark missing: the import of the commands) and by a driver's rank (mpi4py missing
under a launcher), never as an internal error or a traceback; a missing module of tiledsl
itself stays a bug to report."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tiledsl.packages import missing_package

ROOT = Path(__file__).resolve().parents[2]


def test_a_missing_package_is_named_with_what_pip_installs():
    said = missing_package(ModuleNotFoundError("No module named 'cupy'", name="cupy"))
    assert said.startswith("the Python package 'cupy-cuda12x' is not installed in the environment of ")
    assert said.endswith("(No module named 'cupy'): pip install cupy-cuda12x, or reinstall tiledsl there")
    assert missing_package(ModuleNotFoundError("x", name="tiledsl.runtime.gone")) is None
    assert missing_package(ImportError("cannot import name 'x'")) is None


def python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


@pytest.mark.timeout(120)
def test_the_command_line_without_lark_says_to_install_it():
    """Where the compiler is wanted: --help, and a run whose check is recorded, do without it."""
    out = python("import sys; sys.modules['lark'] = None; sys.argv = ['tiledsl', 'check', 'cholesky']\n"
                 "from tiledsl.commands import main; sys.exit(main())")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith("tiledsl: error: the Python package 'lark' is not installed")
    assert "pip install lark" in out.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("package, said", [("mpi4py", "rank 0: the Python package 'mpi4py'"),
                                           ("scipy", "the Python package 'scipy'")])  # before any rank runs
def test_a_rank_without_a_package_says_to_install_it(tmp_path, package, said):
    driver = tmp_path / "chol.py"
    assert subprocess.run([sys.executable, "-m", "tiledsl", "compile", "cholesky", "-o", driver],
                          cwd=ROOT, capture_output=True, timeout=120).returncode == 0
    out = python(f"import runpy, sys; sys.modules[{package!r}] = None\n"
                 f"sys.argv = [{str(driver)!r}, '--n', '100', '--json']\n"
                 f"runpy.run_path({str(driver)!r}, run_name='__main__')", PMI_SIZE="1", PMI_RANK="0")
    assert out.returncode == 2 and "internal error" not in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith(f"tiledsl: error: {said} is not installed")
    failure = json.loads(out.stdout.splitlines()[-1])  # --json's failure object too
    assert (failure["program"], failure["ok"]) == ("cholesky", False) and said in failure["error"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["run", "bench"])
def test_the_command_line_without_scipy_says_so_in_json_too(tmp_path, command):
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['scipy'] = None\n")
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", command, "cholesky", "--n", "100", "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=100,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert out.returncode == 2 and out.stderr.startswith("tiledsl: error: the Python package 'scipy'"), out.stderr
    failure = json.loads(out.stdout.splitlines()[-1])
    assert failure["ok"] is False and failure["error"].startswith("the Python package 'scipy' is not installed")
