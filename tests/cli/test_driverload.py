"""The record of a passed check beside each cached driver (tiledsl/driverload.py): a later run of
the same program, its kernel module unchanged, prints the same warnings without the compiler."""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: a run from the command line, in a fresh process, saying afterwards whether it loaded the compiler
RUN = ("import sys\nfrom tiledsl.commands.cli import main\nstatus = main(['run', 'p.tile', '--n', '64'])\n"
       "print('compiler loaded:', 'tiledsl.compiler' in sys.modules or 'lark' in sys.modules)\nsys.exit(status)\n")

PROGRAM = """use "k.py"
kernel scale(inout A)
program p {
  tiling uniform(nb = 32)
  matrix A[n, n] = random general
  for i in 0 .. A.mt { scale(A[i, i]) }
  for j in 2 .. 1 { scale(A[j, j]) }
}
"""


def run(folder: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, XDG_CACHE_HOME=str(folder / "cache"))
    return subprocess.run([sys.executable, "-c", RUN], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=100)


def records(folder: Path) -> list:
    return sorted((folder / "cache" / "tiledsl" / "drivers").glob("p-*.checked"))


@pytest.fixture
def program(tmp_path) -> Path:
    (tmp_path / "k.py").write_text("def scale(a):\n    a *= 0.5\n")
    (tmp_path / "p.tile").write_text(PROGRAM)
    return tmp_path


@pytest.mark.timeout(300)
def test_a_program_run_again_unchanged_skips_the_compiler_and_prints_the_same_warnings(program):
    first, again = run(program), run(program)
    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    assert "warning[W302]: this loop never runs" in first.stderr
    assert again.stderr == first.stderr  # the warning, with its source line and caret, as the check printed it
    assert "compiler loaded: True" in first.stdout and "compiler loaded: False" in again.stdout
    [record] = records(program)
    digest = hashlib.sha256((program / "k.py").read_bytes()).hexdigest()
    assert json.loads(record.read_text())["modules"] == [["k.py", digest]]  # as the run names it, from its folder


@pytest.mark.timeout(300)
def test_an_edited_kernel_module_or_program_is_checked_again(program):
    assert run(program).returncode == 0
    (program / "k.py").write_text("def scale(a, b):\n    a *= b\n")  # one parameter too many for the call
    broken = run(program)
    assert broken.returncode == 1 and "compiler loaded: True" in broken.stdout
    assert "p.tile:2:8: error[E213]: function 'scale' of 'k.py' cannot take the 1 argument(s) of kernel 'scale'" \
        in broken.stderr, broken.stderr
    (program / "k.py").write_text("def scale(a):\n    a *= 0.5\n")
    (program / "p.tile").write_text(PROGRAM.replace("  for j in 2 .. 1 { scale(A[j, j]) }\n", ""))
    fixed = run(program)
    assert fixed.returncode == 0 and "compiler loaded: True" in fixed.stdout
    assert "warning" not in fixed.stderr, fixed.stderr
    again = run(program)
    assert "compiler loaded: False" in again.stdout and "warning" not in again.stderr


@pytest.mark.timeout(300)
def test_a_damaged_record_is_a_check_again(program):
    """Emptied, cut short, naming a driver outside the cache, of the wrong types: each a miss."""
    assert run(program).returncode == 0
    [record] = records(program)
    whole = record.read_text()
    for damage in ["", "{", '{"driver": "../../x.py", "modules": [], "report": ""}',
                   '{"driver": 3, "modules": [1], "report": null}']:
        record.write_text(damage)
        out = run(program)
        assert out.returncode == 0 and "compiler loaded: True" in out.stdout, (damage, out.stderr)
        assert "warning[W302]" in out.stderr and record.read_text() == whole
    record.unlink()
    os.mkfifo(record)  # blocked the run for ever
    out = run(program)
    assert out.returncode == 0 and "compiler loaded: True" in out.stdout, out.stderr


@pytest.fixture
def cached(program, monkeypatch):
    """:mod:`tiledsl.driverload`, its cache in ``program``'s folder, run from there."""
    import tiledsl.driverload as driverload

    monkeypatch.setenv("XDG_CACHE_HOME", str(program / "cache"))
    monkeypatch.chdir(program)
    return driverload


def test_a_kernel_module_saved_while_the_check_runs_is_checked_again(program, cached, monkeypatch):
    """The record names the kernel module by the bytes the check read: one saved between the check and
    the record (an editor's save as a run starts) is a miss at the next run, not a passed check of a
    module never checked."""
    write_driver = cached.cached_driver_path

    def saved_meanwhile(*args):
        (program / "k.py").write_text("def scale(a, b):\n    a *= b\n")  # one parameter too many for the call
        return write_driver(*args)
    monkeypatch.setattr(cached, "cached_driver_path", saved_meanwhile)
    assert cached.compile_cached("p.tile").driver is not None  # the check read the module of one parameter
    monkeypatch.setattr(cached, "cached_driver_path", write_driver)
    again = cached.compile_cached("p.tile")
    assert again.driver is None and again.first_error.startswith("p.tile:2:8: error[E213]"), again.report


def test_a_cache_removed_as_its_driver_is_written_is_made_again(program, cached, monkeypatch):
    """Another process clearing the cache between the folder's making and the driver's writing: 'cannot
    write tiledsl's driver cache ... (set XDG_CACHE_HOME to a writable directory)', which it was."""
    import shutil

    real_write = Path.write_bytes
    removed = []

    def removed_first(path, data):
        if not removed and path.parent.name == "drivers":  # not the grammar's tables, a process's first parse
            removed.append(path.parent)
            shutil.rmtree(path.parent)
        return real_write(path, data)
    monkeypatch.setattr(Path, "write_bytes", removed_first)
    driver = cached.compile_cached("p.tile").driver
    assert removed and driver.is_file() and driver.parent == removed[0]


def test_another_programs_record_copied_in_its_place_is_a_miss(program, cached):
    (program / "q.tile").write_text(PROGRAM.replace("program p", "program q").replace("A.mt", "A.mt - 1"))
    assert cached.compile_cached("q.tile").driver.name.startswith("q-")
    assert cached.compile_cached("p.tile").driver.name.startswith("p-")
    [p_record] = records(program)
    [q_record] = p_record.parent.glob("q-*.checked")
    p_record.write_bytes(q_record.read_bytes())
    assert cached.compile_cached("p.tile").driver.name.startswith("p-")
    assert json.loads(p_record.read_text())["driver"].startswith("p-")  # written again, for p
