"""`tiledsl run` end to end: summaries, files, failures and usage errors."""
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tiledsl as tiledsl_api
from tiledsl.drivercontract import DRIVER_FORMAT

ROOT = Path(__file__).resolve().parents[2]


def tiledsl(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def cholesky_driver() -> str:
    """The driver of the shipped cholesky as `tiledsl compile cholesky` writes it to stdout, compiled
    once: the tests that take it run it, saved under the names they choose."""
    out = tiledsl("compile", "cholesky")
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.timeout(130)
def test_json_notes_hold_every_warning_and_note_the_run_printed(tmp_path):
    """--check of a program without a check, a withheld output and the compiler's warnings were said
    on stderr only: notes was [] for a script that reads the JSON."""
    (tmp_path / "u.tile").write_text("program u {\n  tiling uniform(nb = 50)\n  matrix A[n, n] = random spd\n"
                                     "  for k in 0 .. A.nt { potrf(A[k, k]) }\n  for k in 2 .. 1 { potrf(A[k, k]) }\n}\n")
    bad = np.eye(100)
    bad[0, 60] = np.nan  # in a tile no task touches: the run ends, and fails on the NaN it leaves
    np.save(tmp_path / "bad.npy", bad)
    out = tiledsl("run", "u.tile", "--n", 100, "--check", "--input", "A=bad.npy", "--output", "A=l.npy", "--json",
                  cwd=tmp_path)
    assert out.returncode == 1 and json.loads(out.stdout.splitlines()[-1])["notes"] == [
        "u.tile:5:3: warning[W302]: this loop never runs",
        "program u declares no check: --check has nothing to verify",
        "the run failed, so l.npy was not written (a file already there is left as it was)"], out.stderr


@pytest.mark.timeout(130)
def test_json_summary_is_the_last_line():
    out = tiledsl("run", "programs/cholesky.tile", "--n", 600, "--nb", 128, "--check", "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    for key in ("program", "n", "np", "grid", "workers", "gpus", "seconds", "gflops", "residual",
                "tasks", "ranks", "totals"):
        assert key in summary
    assert summary["program"] == "cholesky" and summary["n"] == 600 and summary["residual"] < 60
    assert summary["tasks"] == 5 + 10 + 10 + 10  # potrf, trsm, syrk, gemm on 5×5 tiles
    assert summary["ranks"][0]["tasks"] == summary["tasks"]


@pytest.mark.timeout(130)
def test_input_and_output_files(tmp_path):
    a = np.asfortranarray(np.random.default_rng(3).random((300, 300)) + 300 * np.eye(300))
    np.save(tmp_path / "a.npy", a)
    out = tiledsl("run", "programs/lu.tile", "--n", 300, "--nb", 70, "--check",
                  "--input", f"A={tmp_path / 'a.npy'}", "--output", f"A={tmp_path / 'lu.npy'}")
    assert out.returncode == 0, out.stderr
    lu = np.load(tmp_path / "lu.npy")
    l, u = np.tril(lu, -1) + np.eye(300), np.triu(lu)
    assert np.allclose(l @ u, a, rtol=1e-12, atol=1e-10)


@pytest.mark.timeout(130)
def test_a_kernel_failure_names_kernel_tiles_line_and_rank(tmp_path):
    a = np.eye(256)
    a[200, 200] = -1.0  # not positive definite: fails in tile A[1, 1] with nb = 128
    np.save(tmp_path / "bad.npy", a)
    out = tiledsl("run", "programs/cholesky.tile", "--n", 256, "--nb", 128, "--input", f"A={tmp_path / 'bad.npy'}",
                  "--json")  # which changes stdout alone: stderr says what a run without it says
    assert out.returncode == 1
    message = out.stderr
    assert "Traceback" not in message
    assert "rank 0" in message and "cholesky.tile:10" in message
    assert "kernel potrf failed on A[1, 1]" in message and "not positive definite" in message
    failed = json.loads(out.stdout.strip().splitlines()[-1])  # for a script reading stdout
    assert out.returncode == 1 and failed["ok"] is False and failed["passed"] is None
    assert (failed["program"], failed["n"], failed["np"]) == ("cholesky", 256, 1)
    assert failed["error"] in out.stderr and "kernel potrf failed on A[1, 1]" in failed["error"]
    out = tiledsl("run", "programs/cholesky.tile", "--nb", 128, "--input", f"A={tmp_path / 'bad.npy'}", "--json")
    assert json.loads(out.stdout.strip().splitlines()[-1])["n"] == 256  # from the file's shape (was null)


@pytest.mark.timeout(130)
@pytest.mark.parametrize("args, text", [
    (("--n", 0), "--n must be at least 1"),
    (("--n", 100, "--set", "ib=3"), "has no parameter"),
    (("--n", 100, "--B", 64), "does not apply to uniform tiling"),
    (("--n", 100, "--input", "Q=x.npy"), "no matrix named Q"),
    (("--n", 100, "--input", "A=missing.npy"), "missing.npy"),
    (("--n", 100, "--nb", 0), "--nb must be from 1 to 2**63 - 1, got 0"),
    (("--n", 100, "--workers", 0), "--workers must be from 1 to 1024 (this machine has "),
    (("--n", 100, "--workers", 100_000), "--workers must be from 1 to 1024 (this machine has "),
    # not abbreviated: --laun went on to the driver, which refused it and the job was said to crash
    (("--n", 100, "--np", 2, "--laun", "mpiexec"), "unrecognized arguments: --laun mpiexec (did you mean --launcher?)"),
    (("--n", 100, "--work", 2), "unrecognized arguments: --work 2 (did you mean --workers?)"),
    (("--n", 100, "--trace", ""), "--trace: no file name given"),  # ran, and wrote no trace
    (("--n", 100, "--trace", "gantt.PNG"),  # wrote JSON
     "argument --trace: a trace is written as JSON, which tiledsl plot draws: name it gantt.json, then tiledsl plot "
     "gantt.json -o gantt.PNG"),
    (("--n", 100, "--set", "nb = 3"), "--set nb: nb is not a parameter of cholesky: give it as --nb"),  # spaces
])
def test_usage_errors_exit_2_with_one_line(args, text):
    out = tiledsl("run", "programs/cholesky.tile", *args)
    assert out.returncode == 2, out.stderr
    assert text in out.stderr and "Traceback" not in out.stderr


@pytest.mark.timeout(60)
def test_a_misspelt_parameter_gets_the_closest_one():
    out = tiledsl("run", "programs/qr.tile", "--n", 100, "--set", "ibb=3")
    assert out.returncode == 2
    assert out.stderr.strip() == "tiledsl: error: --set ibb: qr has no parameter of that name (did you mean ib?)"
    out = tiledsl("run", "programs/qr.tile", "--n", 100, "--set", "IB=3")  # case alone: too short for difflib
    assert out.stderr.strip() == "tiledsl: error: --set IB: qr has no parameter of that name (did you mean ib?)"
    out = tiledsl("run", "programs/qr.tile", "--n", 100, "--set", "A=3")
    assert out.stderr.strip() == ("tiledsl: error: --set A: A is a matrix of qr, not a parameter: give its values as "
                                  "--input A=FILE.npy")
    out = tiledsl("run", "programs/qr.tile", "--n", 100, "--set", "T=3")
    assert out.stderr.strip() == "tiledsl: error: --set T: T is a workspace of qr, not a parameter (a workspace starts " \
                                 "as zeros)"


@pytest.mark.timeout(130)
def test_an_input_naming_a_workspace_is_a_usage_error(tmp_path):
    np.save(tmp_path / "t.npy", np.zeros((100, 100)))
    out = tiledsl("run", "programs/qr.tile", "--n", 100, "--input", f"T={tmp_path / 't.npy'}")
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == ("tiledsl: error: --input T=...: T is a workspace, which starts as zeros; "
                                  "--input is for matrices (the program's: A)")
    out = tiledsl("run", "programs/qr.tile", "--n", 100, "--nb", 50, "--output", f"T={tmp_path / 'out.npy'}")
    assert out.returncode == 0, out.stderr  # a workspace can be saved
    assert np.load(tmp_path / "out.npy").shape == (2 * 64, 100)  # 2 tile rows of ib = 64


LOADING = """program loading {
  tiling uniform(nb = 50)
  matrix A[n, n] = load "a.npy"
  check lu(A)
  for k in 0 .. A.mt {
    getrf_nopiv(A[k, k])
    for j in k + 1 .. A.nt { trsm_l(A[k, k], A[k, j]) }
    for i in k + 1 .. A.mt {
      trsm_u(A[k, k], A[i, k])
      for j in k + 1 .. A.nt { gemm_nn(A[i, k], A[k, j], A[i, j]) }
    }
  }
}
"""


@pytest.mark.timeout(300)
def test_a_relative_load_path_is_relative_to_the_tile_file(tmp_path):
    program, elsewhere = tmp_path / "program", tmp_path / "elsewhere"
    program.mkdir()
    elsewhere.mkdir()
    (program / "loading.tile").write_text(LOADING)
    a = np.asfortranarray(np.random.default_rng(5).random((100, 100)) + 100 * np.eye(100))
    np.save(program / "a.npy", a)
    np.save(tmp_path / "a.npy", np.zeros((7, 7)))  # a decoy where the run starts: never read
    out = tiledsl("run", "program/loading.tile", "--n", 100, "--check", "--output", "A=lu.npy", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lu = np.load(tmp_path / "lu.npy")  # --output: relative to where the run starts
    assert np.allclose((np.tril(lu, -1) + np.eye(100)) @ np.triu(lu), a)
    # a compiled driver finds the file wherever it lives and wherever it runs
    out = tiledsl("compile", "program/loading.tile", "-o", "elsewhere/driver.py", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    out = subprocess.run([sys.executable, "driver.py", "--n", "100", "--check"], cwd=elsewhere,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "pass" in out.stdout, out.stderr
    # --input stays relative to the current directory and wins over load
    np.save(elsewhere / "b.npy", a.T.copy())
    out = tiledsl("run", tmp_path / "program" / "loading.tile", "--n", 100, "--check", "--input", "A=b.npy",
                  "--output", "A=lu.npy", cwd=elsewhere)
    assert out.returncode == 0, out.stderr
    lu = np.load(elsewhere / "lu.npy")
    assert np.allclose((np.tril(lu, -1) + np.eye(100)) @ np.triu(lu), a.T)
    # a missing file names where it was looked for
    (program / "a.npy").unlink()
    out = tiledsl("run", "program/loading.tile", "--n", 100, cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert (f"the file of load 'a.npy' of matrix A (loading.tile:3) does not exist: a relative path is relative to "
            f"the directory of the .tile file; looked for in {program}\n") in out.stderr


@pytest.mark.timeout(200)
def test_a_copied_project_reads_its_own_data_beside_its_own_kernel_module(tmp_path):
    """The driver found the kernel module relative to itself but the load file at the absolute
    folder it was compiled in: a copy of the project ran the copy's kernels on the original's data."""
    project = tmp_path / "project"
    (project / "program").mkdir(parents=True)
    (project / "program" / "loading.tile").write_text(LOADING)
    a = np.random.default_rng(5).random((100, 100)) + 100 * np.eye(100)
    np.save(project / "program" / "a.npy", a)
    assert tiledsl("compile", "program/loading.tile", "-o", "driver.py", cwd=project).returncode == 0
    copy = tmp_path / "copy"
    shutil.copytree(project, copy)
    np.save(copy / "program" / "a.npy", 2 * a)
    out = subprocess.run([sys.executable, "driver.py", "--output", "A=lu.npy"], cwd=copy, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lu = np.load(copy / "lu.npy")
    assert np.allclose((np.tril(lu, -1) + np.eye(100)) @ np.triu(lu), 2 * a)
    # the driver alone elsewhere: the data is missing where the kernel module would be, and said so
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(project / "driver.py", alone)
    out = subprocess.run([sys.executable, "driver.py"], cwd=alone, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert (f"the file of load 'a.npy' of matrix A (loading.tile:3) does not exist: a "
            f"relative path is relative to the directory of the .tile file; looked for in {alone / 'program'}, "
            f"{alone}; "
            f"loading.tile is in none of them either: a driver finds its program's folder relative to itself, so "
            f"keep the two together, or compile the driver with -o where it will live\n") in out.stderr


@pytest.mark.timeout(200)
def test_a_driver_printed_to_stdout_finds_its_data_wherever_it_is_saved(tmp_path):
    """`tiledsl compile program/loading.tile > elsewhere/driver.py`: the driver read program/ as relative to
    its own folder (elsewhere/program/a.npy does not exist), where the compile ran in another."""
    (tmp_path / "program").mkdir()
    (tmp_path / "program" / "loading.tile").write_text(LOADING)
    a = np.random.default_rng(6).random((100, 100)) + 100 * np.eye(100)
    np.save(tmp_path / "program" / "a.npy", a)
    out = tiledsl("compile", "program/loading.tile", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "driver.py").write_text(out.stdout)
    run = subprocess.run([sys.executable, "driver.py", "--output", "A=lu.npy"], cwd=tmp_path / "elsewhere",
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lu = np.load(tmp_path / "elsewhere" / "lu.npy")
    assert np.allclose((np.tril(lu, -1) + np.eye(100)) @ np.triu(lu), a)


@pytest.mark.timeout(200)
def test_a_driver_needing_a_newer_runtime_or_none_here_says_so_once(tmp_path):
    """Compiled by a newer tiledsl and run by an older one: `TypeError: Program.__init__() got an
    unexpected keyword argument`, an internal error, and on two ranks two tracebacks and a rank
    'ended without a word'; run where tiledsl is not installed, a bare ModuleNotFoundError."""
    assert tiledsl("compile", ROOT / "programs/cholesky.tile", "-o", "driver.py", cwd=tmp_path).returncode == 0
    text = (tmp_path / "driver.py").read_text()
    now = DRIVER_FORMAT
    assert text.count(f"DRIVER_FORMAT >= {now} else") == 1 and text.count(f"driver format {now} or") == 1
    (tmp_path / "later.py").write_text(text.replace(f"DRIVER_FORMAT >= {now} else", "DRIVER_FORMAT >= 99 else")
                                       .replace(f"driver format {now} or", "driver format 99 or"))
    said = (f"{tmp_path / 'later.py'}: this driver needs tiledsl's runtime of driver format 99 or later, which this "
            f"Python does not have (its driver format is {now}): run it with the Python of the tiledsl that compiled "
            f"it, or compile {ROOT / 'programs/cholesky.tile'} again with this Python's\n")
    for command in ([sys.executable, "later.py"], [sys.executable, "-m", "tiledsl.commands.cli", "run",
                                                    str(tmp_path / "later.py"), "--np", "2"]):
        out = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert (out.returncode, out.stderr) == (1, said), out.stderr
    out = subprocess.run([sys.executable, "-S", "driver.py"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60, env={"PATH": os.environ["PATH"]})  # -S: no site-packages, no tiledsl
    assert out.returncode == 1 and "this Python does not have (No module named 'tiledsl')" in out.stderr, out.stderr


@pytest.mark.timeout(130)
def test_a_driver_of_format_2_still_runs(tmp_path, cholesky_driver):
    """Drivers of format 2 and before end by passing resolve_params, shapes and generate to main."""
    text = cholesky_driver
    assert text.endswith("    main(PROGRAM)\n")
    older = text.replace(f"DRIVER_FORMAT >= {DRIVER_FORMAT} else", "DRIVER_FORMAT >= 2 else")
    (tmp_path / "older.py").write_text(older.removesuffix("main(PROGRAM)\n")
                                       + "main(PROGRAM, resolve_params, shapes, generate)\n")
    out = subprocess.run([sys.executable, "older.py", "--n", "200", "--nb", "64", "--check"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "residual" in out.stdout, out.stderr


@pytest.mark.timeout(200)
def test_a_driver_says_when_its_tile_file_changed_since_it_was_compiled(tmp_path):
    """The old driver ran the old program without a word (the kernel module is read afresh, the
    .tile not): a fix made in the .tile but not compiled was silently missing."""
    (tmp_path / "loading.tile").write_text(LOADING)
    np.save(tmp_path / "a.npy", np.random.default_rng(5).random((100, 100)) + 100 * np.eye(100))
    assert tiledsl("compile", "loading.tile", "-o", "driver.py", cwd=tmp_path).returncode == 0
    run = lambda: subprocess.run([sys.executable, "driver.py"], cwd=tmp_path, capture_output=True, text=True,
                                 timeout=120)
    out = run()
    assert out.returncode == 0 and "warning" not in out.stderr, out.stderr
    # the same text with a byte-order mark and CRLF line ends (a checkout that rewrites them): not a change
    (tmp_path / "loading.tile").write_bytes(b"\xef\xbb\xbf" + LOADING.replace("\n", "\r\n").encode())
    out = run()
    assert out.returncode == 0 and "warning" not in out.stderr, out.stderr
    (tmp_path / "loading.tile").write_text(LOADING.replace("nb = 50", "nb = 25"))
    out = run()
    assert out.returncode == 0, out.stderr
    said = ("tiledsl: warning: loading.tile has changed since this driver was compiled from it: the driver "
            "holds the program as it was then (compile it again: tiledsl compile loading.tile -o driver.py)\n")
    assert out.stderr == said
    assert "nb=50" in out.stdout
    # so do the commands that plan or run the driver (explain, graph, bench, tune, simulate), once
    for command in (["run", "driver.py"], ["explain", "driver.py"]):
        out = tiledsl(*command, cwd=tmp_path)
        assert out.returncode == 0 and out.stderr == said, (command, out.stderr)


@pytest.mark.timeout(120)
def test_a_tile_file_changed_as_its_run_began_is_to_be_run_again_not_compiled(tmp_path, monkeypatch):
    """The .tile edited between run's compiling it into the cache and the run: the warning told the
    user to compile it by hand, into tiledsl's cache ('tiledsl compile ver.tile -o ~/.cache/...')."""
    from tiledsl.api import load
    from tiledsl.runtime.userkernels import changed_source

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "loading.tile").write_text(LOADING)
    driver = load(tmp_path / "loading.tile").driver
    (tmp_path / "loading.tile").write_text(LOADING.replace("nb = 50", "nb = 25"))
    assert changed_source(driver.PROGRAM, driver) == (
        f"{tmp_path / 'loading.tile'} has changed since this driver was compiled from it: the driver holds the "
        f"program as it was then (run it again)")


@pytest.mark.timeout(130)
@pytest.mark.parametrize("shape", [(10, 20), (100,), (), (10, 10, 1)])
def test_a_wrong_shape_input_is_refused(tmp_path, shape):
    np.save(tmp_path / "a.npy", np.zeros(shape))
    out = tiledsl("run", "programs/cholesky.tile", "--n", 10, "--input", f"A={tmp_path / 'a.npy'}")
    assert out.returncode == 2, out.stderr
    square = "; the input files' shapes disagree with cholesky, which makes A square; A is 10×20"  # no n fits
    assert out.stderr == f"tiledsl: error: input file '{tmp_path / 'a.npy'}' has shape {shape} but the matrix " \
                         f"needs shape (10, 10){square if shape == (10, 20) else ''}\n"


@pytest.mark.timeout(130)
@pytest.mark.parametrize("save, said", [
    (lambda path: np.save(path, np.zeros((0, 0))), "is empty (0×0): a matrix has at least one row and one column"),
    (lambda path: np.savez(path, A=np.eye(3)), "is not a .npy file (it is a zip archive, as np.savez writes: "
                                                 "save each matrix alone with np.save)")])
def test_an_input_that_cannot_give_the_size_says_why(tmp_path, save, said):
    path = tmp_path / "a.npy"
    with open(path, "wb") as file:
        save(file)
    out = tiledsl("run", "programs/cholesky.tile", "--input", f"A={path}")
    assert out.returncode == 2 and said in out.stderr and "Traceback" not in out.stderr, out.stderr


@pytest.mark.timeout(130)
def test_an_empty_input_is_said_empty_whatever_the_size_given(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((0, 200)))  # no size of 0 to suggest: none runs
    out = tiledsl("run", "programs/gemm.tile", "--n", 128, "--input", f"A={tmp_path / 'a.npy'}")
    assert (out.returncode, out.stderr) == (2, f"tiledsl: error: input file '{tmp_path / 'a.npy'}' of matrix A is "
                                               f"empty (0×200): a matrix has at least one row and one column\n")


@pytest.mark.timeout(130)
def test_a_compiled_driver_runs_on_its_own(tmp_path):
    assert tiledsl("compile", "programs/qr.tile", "-o", tmp_path / "qr.py").returncode == 0
    out = subprocess.run([sys.executable, str(tmp_path / "qr.py"), "--n", "200", "--nb", "64", "--check"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "qr        residual" in out.stdout
    # and called by a script that imports it: it read __main__'s PROGRAM, a traceback (tester u56)
    script = "import sys, qr; sys.argv = ['qr.py', '--n', '200', '--nb', '64', '--check']; qr.main(qr.PROGRAM)"
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "qr        residual" in out.stdout, out.stderr
    # loaded from its path by importlib, a module sys.modules does not list: a traceback (tester v82f)
    script = ("import importlib.util, sys\nspec = importlib.util.spec_from_file_location('d', 'qr.py')\n"
              "m = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(m)\n"
              "sys.argv = ['qr.py', '--n', '200', '--nb', '64', '--check']\nm.main(m.PROGRAM)\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "qr        residual" in out.stdout, out.stderr


# Elementwise Y = X + Y with a user kernel, beside the program in its kernel module.
WITH_MODULE = """
use "add_kernels.py"

kernel add(in X, inout Y)

program adding {
  tiling uniform(nb = 4)
  matrix X[n, n] = random general
  matrix Y[n, n] = zeros

  for i in 0 .. Y.mt { for j in 0 .. Y.nt { add(X[i, j], Y[i, j]) } }
}
"""


@pytest.mark.timeout(300)
def test_a_compiled_driver_finds_the_kernel_module_from_any_directory(tmp_path):
    source, drivers, elsewhere = tmp_path / "source", tmp_path / "drivers", tmp_path / "elsewhere"
    for folder in (source, drivers, elsewhere):
        folder.mkdir()
    (source / "adding.tile").write_text(WITH_MODULE)
    (source / "add_kernels.py").write_text("def add(X, Y):\n    Y[:] += X\n")
    out = tiledsl("compile", "adding.tile", "-o", drivers / "adding.py", cwd=source)
    assert out.returncode == 0, out.stderr
    text = (drivers / "adding.py").read_text()
    assert "source_dir='../source'," in text and str(tmp_path) not in text  # relative: no machine path
    run = [sys.executable, str(drivers / "adding.py"), "--n", "8"]
    out = subprocess.run(run, cwd=elsewhere, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # moved away from the program, the driver says where it looked
    (elsewhere / "deeper").mkdir()
    (drivers / "adding.py").rename(elsewhere / "deeper" / "adding.py")
    out = subprocess.run([sys.executable, "deeper/adding.py", "--n", "8"], cwd=elsewhere, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    # the .tile's path as given, adding.tile, reads from `elsewhere`, which is not its folder (no adding.tile there)
    assert (f"kernel module add_kernels.py not found next to adding.tile (looked in {elsewhere / 'source'}, "
            f"{elsewhere / 'deeper'}, {elsewhere}: the .tile's directory as the driver recorded it") in out.stderr


def test_a_compiled_driver_whose_places_are_one_folder_is_not_taken_for_one_of_the_cache(tmp_path):
    """Tester w81e: where every place looked in was one folder, the message was the cache driver's, without
    what a driver moved elsewhere needs."""
    (tmp_path / "adding.tile").write_text(WITH_MODULE)
    (tmp_path / "add_kernels.py").write_text("def add(X, Y):\n    Y[:] += X\n")
    assert tiledsl("compile", "adding.tile", "-o", "adding.py", cwd=tmp_path).returncode == 0
    (tmp_path / "add_kernels.py").unlink()
    out = subprocess.run([sys.executable, "adding.py", "--n", "8"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert (f"kernel module add_kernels.py not found next to adding.tile (looked in {tmp_path}: the .tile's "
            f"directory as the driver recorded it") in out.stderr and "a driver moved elsewhere needs" in out.stderr


def test_a_moved_driver_of_a_relative_tile_path_never_loads_a_file_of_the_folder_it_runs_in(tmp_path):
    """Tester w81e: a driver compiled from `t.tile` and moved alone read a `load "B0.npy"` of the folder it ran in
    (the .tile's directory as its path reads from there), as if it were the program's."""
    source, drivers, elsewhere = tmp_path / "source", tmp_path / "drivers", tmp_path / "elsewhere"
    for folder in (source, drivers, elsewhere):
        folder.mkdir()
    (source / "t.tile").write_text('program p {\n  tiling uniform(nb = 4)\n  matrix A[n, n] = load "B0.npy"\n'
                                   "  for k in 0 .. A.nt { potrf(A[k, k]) }\n}\n")
    np.save(source / "B0.npy", 4 * np.eye(8))
    np.save(elsewhere / "B0.npy", 9 * np.eye(8))
    assert tiledsl("compile", "t.tile", "-o", "d.py", cwd=source).returncode == 0
    (source / "d.py").rename(drivers / "d.py")
    run = [sys.executable, str(drivers / "d.py"), "--output", f"A={tmp_path / 'L.npy'}"]
    out = subprocess.run(run, cwd=elsewhere, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and not (tmp_path / "L.npy").exists()
    assert (f"the file of load 'B0.npy' of matrix A (t.tile:3) does not exist: a relative "
            f"path is relative to the directory of the .tile file; looked for in {drivers}; t.tile is in none of them "
            f"either") in out.stderr, out.stderr
    out = subprocess.run(run, cwd=source, capture_output=True, text=True, timeout=120)  # where the program is
    assert out.returncode == 0, out.stderr
    assert np.array_equal(np.load(tmp_path / "L.npy"), 2 * np.eye(8))


ONE_ROUND = ("one round each: a busy machine, or threads waiting for cores, would not show, and the ratios may be "
             "far off (--rounds 3 shows the spread)")


@pytest.mark.timeout(130)
def test_bench_reports_ratios_against_lapack():
    out = tiledsl("bench", "cholesky", "--n", 512, "--nb", 128, "--rounds", 1, "--no-dask", "--json")
    assert out.returncode == 0, out.stderr
    table = json.loads(out.stdout)
    names = [row["name"] for row in table["rows"]]
    assert names[0] == "tiledsl" and names[1].startswith("scipy dpotrf")
    assert table["rows"][1]["ratio"] > 0 and table["residual"] < 60 and table["ok"] is True
    assert table["notes"] == [ONE_ROUND]


@pytest.mark.timeout(130)
def test_bench_reads_inputs_for_both_sides_and_fails_on_a_failed_check(tmp_path):
    """--input feeds tiledsl and the reference alike; a matrix the program cannot factor
    accurately (LU without pivoting, a tiny first pivot) makes a failed check, which fails the bench."""
    rng = np.random.default_rng(1)
    spd = rng.standard_normal((300, 300))
    np.save(tmp_path / "spd.npy", spd @ spd.T + 300 * np.eye(300))
    out = tiledsl("bench", "cholesky", "--n", 300, "--nb", 100, "--rounds", 1, "--no-dask", "--json",
                  "--input", f"A={tmp_path / 'spd.npy'}")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["passed"] is True
    bad = rng.standard_normal((300, 300))
    bad[0, 0] = 1e-13
    np.save(tmp_path / "bad.npy", bad)
    out = tiledsl("bench", "lu", "--n", 300, "--nb", 100, "--rounds", 1, "--no-dask",
                  "--input", f"A={tmp_path / 'bad.npy'}")
    assert out.returncode == 1 and "(FAIL: the timings are of a wrong result, threshold 60)" in out.stdout
    out = tiledsl("bench", "cholesky", "--n", 200, "--rounds", 1, "--input", f"A={tmp_path / 'bad.npy'}")
    assert out.returncode == 2 and "has shape (300, 300) but the matrix needs shape (200, 200)" in out.stderr
    out = tiledsl("bench", "cholesky", "--n", 200, "--workers", 0)
    assert out.returncode == 2
    assert re.search(r"--workers must be from 1 to 1024 \(this machine has \d+ cores\), got 0", out.stderr), out.stderr


@pytest.mark.timeout(130)
def test_a_run_stopped_before_it_started_says_so_in_json_too(tmp_path):
    """A usage error (on one rank and on two) and a program with errors: the JSON failure object
    on stdout, `error` the line stderr says (stdout was empty)."""
    (tmp_path / "bad.tile").write_text("program p {\n  matrix A[n, n] = random spd\n  potrf(A[0 0])\n}\n")
    cases = [(["run", "cholesky", "--n", 200, "--set", "foo=1"], 2, ("cholesky", 200, 1)),
             (["run", "cholesky", "--n", 200, "--set", "foo=1", "--np", 2], 2, ("cholesky", 200, 2)),
             (["run", tmp_path / "bad.tile", "--n", 64], 1, (None, 64, 1)),
             (["bench", "cholesky", "--n", 200, "--rounds", 0], 2, ("cholesky", 200)),
             # caught by the option parser: the options it read (the program is not read yet; np 1 by default)
             (["run", "cholesky", "--n", "abc"], 2, (None, None, 1)),
             (["run", "cholesky", "--n", 200, "--bogus"], 2, (None, 200, 1)),
             (["bench", "cholesky", "--n", "abc"], 2, (None, None))]
    for command, code, said in cases:
        out = tiledsl(*command, "--json")
        failure = json.loads(out.stdout.strip().splitlines()[-1])
        assert out.returncode == code and failure["ok"] is False and failure["passed"] is None, out.stderr
        assert (failure["program"], failure["n"], *([failure["np"]] if "np" in failure else [])) == said
        assert failure["error"] in out.stderr
    assert failure["error"] == "argument --n: invalid int value: 'abc' (see tiledsl bench --help)"
    assert json.loads(tiledsl("run", tmp_path / "bad.tile", "--json").stdout)["error"] == \
        f"{tmp_path / 'bad.tile'}:3:13: error[E100]: unexpected '0'"


@pytest.mark.timeout(130)
def test_bench_json_says_a_failure_as_run_json_does(tmp_path):
    """A kernel that fails: the JSON failure object on stdout (it printed nothing); a failed check:
    said on stderr as well as in the JSON's "passed" (stderr said nothing)."""
    np.save(tmp_path / "indefinite.npy", -np.eye(200))
    out = tiledsl("bench", "cholesky", "--n", 200, "--nb", 100, "--rounds", 1, "--no-dask", "--json",
                  "--input", f"A={tmp_path / 'indefinite.npy'}")
    failure = json.loads(out.stdout)
    assert out.returncode == 1 and failure["ok"] is False and failure["passed"] is None
    assert failure["error"].startswith("rank 0 (cholesky.tile:") and "kernel potrf failed" in failure["error"]
    assert out.stderr == f"tiledsl: error: {failure['error']}\n"
    bad = np.random.default_rng(1).standard_normal((300, 300))
    bad[0, 0] = 1e-13
    np.save(tmp_path / "bad.npy", bad)
    out = tiledsl("bench", "lu", "--n", 300, "--nb", 100, "--rounds", 1, "--no-dask", "--json",
                  "--input", f"A={tmp_path / 'bad.npy'}")
    assert out.returncode == 1 and json.loads(out.stdout)["passed"] is False and json.loads(out.stdout)["ok"] is False
    assert re.fullmatch(r"tiledsl: error: check failed: the lu residual \S+ is not below 60\n", out.stderr), out.stderr


@pytest.mark.timeout(130)
@pytest.mark.parametrize("returns, said, json_flag", [
    ("raise RuntimeError('boom')", r"check res \(uc\.tile:6\): res raised RuntimeError at k\.py:3: boom", ()),
    ("return {'a': 1.0, 'b': float('nan'), 'c': 70.0}",
     r"check failed: the b check gave no residual \(NaN\); the c residual 70 is not below 60",
     ("--json",)),
])
def test_bench_says_why_a_user_check_failed_as_run_does(tmp_path, returns, said, json_flag):
    """bench said 'residual nan is not below 60' for a check that raised, and the largest residual for
    a check returning several. --json changes stdout alone (the object for the table; stderr's reasons
    come from one list either way): one case runs with it, the other without."""
    (tmp_path / "k.py").write_text(f"def res(before, after):\n    if True:\n        {returns}\n\n"
                                   "def scale(a):\n    a *= 0.5\n")
    (tmp_path / "uc.tile").write_text('use "k.py"\nkernel scale(inout A)\nprogram uc {\n  tiling uniform(nb = 100)\n'
                                      "  matrix A[n, n] = random general\n  check res(A)\n"
                                      "  for i in 0 .. A.mt { scale(A[i, i]) }\n}\n")
    out = tiledsl("bench", "uc.tile", "--n", 200, "--rounds", 1, "--no-dask", *json_flag, cwd=tmp_path)
    assert out.returncode == 1 and re.fullmatch(rf"tiledsl: error: {said}\n", out.stderr), out.stderr


@pytest.mark.timeout(130)
def test_bench_says_when_dask_is_left_out_for_want_of_it():
    out = tiledsl("bench", "cholesky", "--n", 1024, "--nb", 256, "--rounds", 1)  # (512 divides n: a chunk size)
    assert out.returncode == 0, out.stderr
    missing = importlib.util.find_spec("dask") is None
    assert ("note: dask is not installed (pip install 'dask[array]' to compare with it too)" in out.stdout) == missing


@pytest.mark.timeout(130)
def test_a_run_that_cannot_fit_in_memory_is_refused_with_the_numbers():
    out = tiledsl("run", "programs/qr.tile", "--n", 200000, "--nb", 1000)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "the run needs at least" in out.stderr and "GiB is available" in out.stderr
    assert "50% of the 317.10 GiB of tiles it owns, and 39.06 MiB of their records, before counting those its" \
        " tasks touch" in out.stderr


@pytest.mark.timeout(130)
def test_hybrid_settings_that_leave_no_slice_say_what_would_work_and_where():
    """--B alone left the program's b = 128 unexplained; --s 0 is said as the option given."""
    out = tiledsl("run", "hetero_cholesky", "--n", 8, "--B", 4, "--no-tune")
    assert out.returncode == 2 and out.stderr == (
        "tiledsl: error: hybrid tiling needs (s-1)*b < B, so that the last slice of a block is not empty: "
        "(2-1)*128 = 128 with B=4 (B given; b and s the program's defaults); use b at most 3 with s=2, a larger B, "
        "or s=1\n")
    out = tiledsl("run", "hetero_cholesky", "--n", 8, "--B", 200, "--b", 64, "--s", 5, "--no-tune")
    assert out.returncode == 2 and out.stderr.endswith(  # the most slices of that width, as well
        "(B, b and s given); use b at most 49 with s=5, s at most 4 with b=64, a larger B, or s=1\n"), out.stderr
    out = tiledsl("run", "hetero_cholesky", "--n", 8, "--B", 4, "--b", 1, "--s", 0, "--no-tune")
    assert out.returncode == 2 and out.stderr == "tiledsl: error: --s must be from 1 to 2**63 - 1, got 0\n"


@pytest.mark.timeout(130)
def test_a_window_larger_than_the_ranks_tasks_asks_no_memory_for_them():
    """4 tasks on 2 ranks with --window 30000 were refused for 117 GiB of transfer buffers."""
    out = tiledsl("run", "programs/cholesky.tile", "--np", 2, "--n", 1024, "--nb", 512, "--window", 30000)
    assert out.returncode == 0, out.stderr


@pytest.mark.timeout(130)
def test_a_run_that_cannot_fit_in_a_gpu_goes_out_of_core():
    """The GPU caches 8 MiB of its tiles (more is homed there), and says so (tests/runtime/test_outofcore.py)."""
    out = tiledsl("run", "programs/hetero_cholesky.tile", "--n", 2000, "--gpus", 1, "--gpu-memory", "8M", "--check")
    assert out.returncode == 0, out.stderr
    assert "gpu cache out of core, 8.0 MiB per GPU" in out.stdout and "pass" in out.stdout


@pytest.mark.timeout(130)
def test_a_run_within_its_gpu_memory_runs():
    out = tiledsl("run", "programs/hetero_cholesky.tile", "--n", 700, "--gpus", 1, "--gpu-memory", "2G",
                  "--check", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["residual"] < 60


@pytest.mark.timeout(130)
def test_a_gpu_holding_every_tile_needs_no_room_for_copies():
    """All block columns on the GPU (ratio 0:1): the estimate is the tiles alone (3 of 512 KiB)."""
    out = tiledsl("run", "programs/cholesky.tile", "--n", 512, "--nb", 256, "--gpus", 1, "--gpu-ratio", "0:1",
                  "--gpu-memory", "1600K", "--check", "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["passed"] and summary["ranks"][0]["device_copies"] == 0


BAD_RUN_OPTIONS = [
    (("--n", 100, "--watchdog", "-1"), "argument --watchdog: must be 0 (off) or a number of seconds from 0.25"),
    (("--n", 100, "--chekc"), "unrecognized arguments: --chekc (did you mean --check?)"),
    (("--n", 100, "--bogus"), "unrecognized arguments: --bogus (see "),
    (("--n", 100, "--output", "A=nodir/out.npy"), "--output A=nodir/out.npy: directory 'nodir' does not exist"),
    (("--n", 100, "--trace", "nodir/t.json"), "--trace nodir/t.json: directory 'nodir' does not exist"),
    (("--n", 100, "--output", "A=programs"), "--output A=programs: is a directory"),
    (("--n", 100, "--output", "A=/proc/a.npy"), "--output A=/proc/a.npy: cannot create a file in '/proc'"),
    (("--n", 100, "--output", "A=t", "--trace", "./t"), "--trace ./t: the same file as --output A=t"),
    (("--n", 100, "--trace", "t.npy"), "argument --trace: a trace is written as JSON, not as its .npy suffix says "
                                       "(numpy's arrays): name it t.json"),
    (("--n", 100, "--output", "A= "), "--output expects NAME=VALUE, got 'A= ': no VALUE after the '='"),
    (("--n", 100, "--trace", " "), "argument --trace: no file name given"),
    (("--n", 100, "--output", "A=x.npy", "--output", "A=y.npy"), "--output A is given twice (A=x.npy and A=y.npy)"),
    (("--n", 100, "--set", "n=1", "--set", "n=2"), "--set n is given twice (n=1 and n=2)"),
    (("--n", 100, "--gpus", "-1"), "--gpus must be from 0 to 1024, got -1"),
    (("--n", 100, "--gpus", "100000"), "--gpus must be from 0 to 1024, got 100000"),  # was "cannot start a thread"
    (("--n", 100, "--set", "nb=64"), "--set nb: nb is not a parameter of cholesky: give it as --nb"),
    (("--n", 100, "--set", "b=64"), "--set b: b is not a parameter of cholesky: b is a setting of hybrid tiling, and "
                                    "cholesky's tiling is uniform, which takes --nb"),  # --b was then refused
    (("--n", "1e3"), "tiledsl run: error: argument --n: invalid int value: '1e3' (see tiledsl run --help)"),
    ((), "tiledsl: error: give --n (the matrix order) or --input NAME=FILE.npy for one of A"),
    (("--n", 100, "--output", "A=nosuch/../o.npy"), "--output A=nosuch/../o.npy: directory 'nosuch/..' does not exist"),
    (("--n", 100, "--output", "A=/dev/null"), "--output A=/dev/null: '/dev/null' is not a regular file"),
    (("--n", 100, "--trace", "/dev/null"), "--trace /dev/null: '/dev/null' is not a regular file"),
    (("--n", 100, "--trace", "/dev/stdout"), "--trace /dev/stdout: '/dev/stdout' is not a regular file"),
    (("--n", 100, "--output", "A=README.md/o.npy"),
     "--output A=README.md/o.npy: 'README.md' is a file, not a directory"),
    (("--n", 100, "--trace", "README.md/a/t.json"),
     "--trace README.md/a/t.json: 'README.md' is a file, not a directory"),
    (("--n", 100, "--seed", -1), "--seed must be from 0 to 2^64 - 1, got -1"),
    (("--n", 100, "--seed", 2 ** 64), "--seed must be from 0 to 2^64 - 1, got 18446744073709551616"),
    (("--n", 100, "--gpu-memory", "1M"), "--gpu-memory needs --gpus G (at least 1 GPU per rank)"),
    (("--n", 100, "--host-takes", "on"), "--host-takes on needs --gpus G (at least 1 GPU per rank)"),
]
BAD_GPU_MEMORY = ["lots", "-3G", "0", "inf", "nanM"]
USAGE_ERRORS = """
import contextlib, io, json, sys
from tiledsl.commands.cli import main

said = []
for argv in json.load(sys.stdin):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as leaving:  # argparse's own errors
            code = leaving.code
    said.append((code, err.getvalue()))
print(json.dumps(said))
"""


@pytest.fixture(scope="module")
def usage_errors() -> dict:
    """What `tiledsl run cholesky` says to each of BAD_RUN_OPTIONS and BAD_GPU_MEMORY: (exit status,
    stderr), the commands run one after the other in one process (a process each took 0.5 s)."""
    argvs = [["run", "programs/cholesky.tile", *map(str, args)] for args, _ in BAD_RUN_OPTIONS]
    argvs += [["run", "programs/cholesky.tile", "--n", "100", "--gpus", "1", f"--gpu-memory={size}"]
              for size in BAD_GPU_MEMORY]
    out = subprocess.run([sys.executable, "-c", USAGE_ERRORS], cwd=ROOT, input=json.dumps(argvs),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return {tuple(argv[2:]): tuple(said) for argv, said in zip(argvs, json.loads(out.stdout))}


@pytest.mark.timeout(130)
@pytest.mark.parametrize("size", BAD_GPU_MEMORY)
def test_a_bad_gpu_memory_size_is_a_usage_error(usage_errors, size):
    code, err = usage_errors[("--n", "100", "--gpus", "1", f"--gpu-memory={size}")]
    assert code == 2 and "Traceback" not in err
    assert "--gpu-memory" in err


@pytest.mark.timeout(130)
@pytest.mark.parametrize("args, text", BAD_RUN_OPTIONS)
def test_bad_run_options_are_one_line_usage_errors(usage_errors, args, text):
    code, err = usage_errors[tuple(map(str, args))]
    assert code == 2, err
    assert text in err and "Traceback" not in err and "warning" not in err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.timeout(130)
def test_an_output_through_a_link_replaces_what_it_leads_to(tmp_path):
    """The link stays; the file it names gets the matrix (a device is refused: see above)."""
    np.save(tmp_path / "real.npy", np.eye(2))  # an earlier result
    (tmp_path / "link.npy").symlink_to("real.npy")
    out = tiledsl("run", "programs/cholesky.tile", "--n", 200, "--nb", 100, "--output", f"A={tmp_path / 'link.npy'}")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "link.npy").is_symlink() and np.load(tmp_path / "real.npy").shape == (200, 200)


@pytest.mark.timeout(130)
def test_run_and_explain_take_a_shipped_programs_name():
    assert tiledsl("run", "cholesky", "--n", 200, "--nb", 100).returncode == 0
    assert tiledsl("explain", "qr", "--n", 200, "--nb", 100, "--totals").returncode == 0
    out = tiledsl("run", "nosuch", "--n", 200)
    assert out.returncode == 2 and "nosuch: no such file, nor a shipped program of that name (shipped: cholesky, gemm," in out.stderr
    out = tiledsl("explain", "choleski", "--n", 200)
    assert out.returncode == 2 and "choleski: no such file, nor a shipped program of that name (did you mean cholesky?)" in out.stderr


@pytest.mark.timeout(130)
def test_a_shipped_programs_name_beside_a_tile_file_of_that_name_says_which_runs(tmp_path):
    """`tiledsl run cholesky` beside a cholesky.tile of the user's ran the shipped one silently."""
    (tmp_path / "cholesky.tile").write_text((ROOT / "programs/cholesky.tile").read_text().replace("nb = 256", "nb = 64"))
    out = tiledsl("run", "cholesky", "--n", 600, "--np", 2, "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stderr == (f"tiledsl: warning: cholesky is the shipped program ({ROOT / 'programs/cholesky.tile'}); "
                          "the cholesky.tile in this directory is another program: give its path, ./cholesky.tile, "
                          "to run that one\n")  # once, not once more per rank
    assert json.loads(out.stdout.splitlines()[-1])["tiles"] == {"nb": 256}
    out = tiledsl("run", "./cholesky.tile", "--n", 128, "--json", cwd=tmp_path)
    assert out.returncode == 0 and out.stderr == "" and json.loads(out.stdout.splitlines()[-1])["tiles"] == {"nb": 64}
    out = tiledsl("check", "cholesky", cwd=tmp_path)  # a broken file of the user's was said to have "no errors"
    assert out.returncode == 0 and out.stderr.startswith("tiledsl: warning: cholesky is the shipped program (") \
        and "give its path, ./cholesky.tile, to check that one\n" in out.stderr, out.stderr
    (tmp_path / "cholesky.tile").write_bytes((ROOT / "programs/cholesky.tile").read_bytes())  # a copy: no word
    out = tiledsl("run", "cholesky", "--n", 128, cwd=tmp_path)
    assert out.returncode == 0 and out.stderr == "", out.stderr


@pytest.mark.timeout(130)
def test_a_shipped_program_goes_by_its_name_from_any_directory(tmp_path):
    """From an installed package there is no programs/ folder: names work everywhere, a clone's
    path says which name to give, and a folder named like a program does not hide it."""
    (tmp_path / "qr").mkdir()
    out = tiledsl("check", "cholesky", "qr", cwd=tmp_path)
    assert out.returncode == 0 and "checked 2 file(s): no errors" in out.stdout, out.stdout
    out = tiledsl("check", "programs/cholesky.tile", cwd=tmp_path)
    assert out.returncode == 1 and "programs/cholesky.tile: error[E000]: no such file (a shipped program is " \
        "called cholesky: give its name, `cholesky`, from any directory)\n" in out.stdout, out.stdout
    out = tiledsl("check", "cholsky", cwd=tmp_path)  # as run says it: "no such file" alone, before
    assert out.returncode == 1 and out.stdout.startswith("cholsky: error[E000]: no such file, nor a shipped program "
                                                         "of that name (did you mean cholesky?)\n"), out.stdout
    out = tiledsl("run", "programs/lu.tile", "--n", 100, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.strip().endswith(
        "programs/lu.tile: no such file (a shipped program is called lu: give its name, `lu`, from any directory)")
    assert tiledsl("run", "qr", "--n", 200, "--nb", 100, "--check", cwd=tmp_path).returncode == 0
    (tmp_path / "lu").write_text("not a program\n")  # a file of that name is the user's: ./lu runs it
    assert "lu:1:1: error[E100]: unexpected 'not'" in tiledsl("run", "./lu", "--n", 100, cwd=tmp_path).stderr


@pytest.mark.timeout(130)
def test_nb_is_refused_for_hybrid_tiling():
    out = tiledsl("run", "programs/hetero_cholesky.tile", "--n", 500, "--nb", 64)
    assert out.returncode == 2 and "--nb does not apply to hybrid tiling (it takes --B, --b, --s)" in out.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize("args, message", [
    (("run", "nowhere.tile", "--n", 10), "nowhere.tile: no such file"),
    (("compile", "nowhere.tile"), "nowhere.tile: no such file"),
    (("explain", "sub/nowhere", "--n", 10), "sub/nowhere: no such file"),
    (("run", "spd.npy", "--n", 10), "spd.npy is a matrix file, not a program: give it to the run as --input NAME=spd.npy"),
])
def test_a_program_path_that_leads_nowhere_is_a_usage_error(args, message):
    out = tiledsl(*args)
    assert out.returncode == 2 and f"tiledsl: error: {message}" in out.stderr, out.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", [("run",), ("explain",), ("graph", "-o", "x.dot"),
                                     ("simulate", "--nodes", 2, "--machine", "keeneland")])
def test_a_broken_requirement_names_the_tile_file_and_line_for_a_shipped_programs_name(tmp_path, command):
    """domains = 0 gave tsqr's loop nest no domain; its `require` now says so before any task."""
    out = tiledsl(command[0], "tsqr", "--n", 300, "--nb", 64, "--set", "domains=0", *command[1:], cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert re.search(r"tiledsl: error: tsqr requires domains >= 1 .* break \(tsqr\.tile:\d+\)$", out.stderr.strip())


@pytest.mark.timeout(130)
def test_no_output_replaces_a_file_of_the_program(tmp_path):
    program, kernels = tmp_path / "adding.tile", tmp_path / "add_kernels.py"
    program.write_text(WITH_MODULE)
    kernels.write_text("def add(X, Y):\n    Y[:] += X\n")
    out = tiledsl("compile", program, "-o", program)
    assert out.returncode == 2 and "that is the program itself, which the driver would replace" in out.stderr
    for target in (program, kernels):
        out = tiledsl("run", program, "--n", 100, "--output", f"Y={target}")
        assert out.returncode == 2, out.stderr
        assert f"--output Y={target}: that is {target.name}, a file of the program itself" in out.stderr
    assert program.read_text() == WITH_MODULE and kernels.read_text() == "def add(X, Y):\n    Y[:] += X\n"


@pytest.mark.timeout(130)
def test_a_parameter_named_like_another_tilings_setting_is_no_tile_setting(tmp_path):
    """b, B and s are hybrid tiling's settings; in a uniform program they are its own parameters."""
    (tmp_path / "scaled.tile").write_text("program scaled {\n  tiling uniform(nb = 50)\n  param b = 0.25\n"
                                          "  param s = 2\n  matrix A[n, n] = random spd\n"
                                          "  for k in 0 .. A.nt { potrf(A[k, k]) }\n}\n")
    out = tiledsl("run", tmp_path / "scaled.tile", "--n", 120, "--set", "b=0.5")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("scaled: n=120 nb=50 b=0.5 s=2, ")  # its own params after the tiles
    assert "settings  nb=50: program default\n" in out.stdout
    summary = json.loads(tiledsl("run", tmp_path / "scaled.tile", "--n", 120, "--set", "b=0.5", "--json").stdout)
    assert summary["tiles"] == {"nb": 50} and summary["params"] == {"b": 0.5, "s": 2}


@pytest.mark.timeout(130)
def test_a_run_without_check_has_passed_null_and_check_without_a_program_check_warns(tmp_path):
    summary = json.loads(tiledsl("run", "programs/cholesky.tile", "--n", 200, "--nb", 100, "--json").stdout)
    assert summary["passed"] is None and summary["nonfinite"] == {} and summary["ok"] is True
    (tmp_path / "nocheck.tile").write_text("program nocheck {\n  tiling uniform(nb = 50)\n"
                                           "  matrix A[n, n] = random spd\n"
                                           "  for k in 0 .. A.nt { potrf(A[k, k]) }\n}\n")
    out = tiledsl("run", tmp_path / "nocheck.tile", "--n", 100, "--check")
    assert out.returncode == 0, out.stderr
    assert "warning: program nocheck declares no check: --check has nothing to verify" in out.stderr


@pytest.mark.timeout(60)
def test_a_gpu_backend_without_gpus_is_warned_about():
    out = tiledsl("run", "programs/cholesky.tile", "--n", 100, "--gpu-backend", "cupy")
    assert out.returncode == 0 and "warning: --gpu-backend cupy does nothing without --gpus G: the run uses no GPU" \
        in out.stderr
    out = tiledsl("run", "programs/cholesky.tile", "--n", 100, "--host-takes", "off")  # on is refused
    assert out.returncode == 0 and "warning: --host-takes off does nothing without --gpus G: the run uses no GPU" \
        in out.stderr


@pytest.mark.timeout(130)
def test_emulated_gpus_are_named_in_the_summary_and_warned_about():
    out = tiledsl("run", "programs/cholesky.tile", "--n", 256, "--nb", 128, "--gpus", 1, "--json")
    assert out.returncode == 0, out.stderr
    assert "--gpus 1 with the emulated backend (numpy arrays standing in for GPUs)" in out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["gpu_backend"] == "emulated"
    out = tiledsl("run", "programs/cholesky.tile", "--n", 256, "--nb", 128, "--gpus", 1, "--gpu-backend", "emulated")
    assert "warning" not in out.stderr and "gpus      1 per rank, emulated backend" in out.stdout


@pytest.mark.timeout(130)
def test_a_nan_left_in_the_result_fails_the_run_without_check(tmp_path):
    a = np.eye(200) * 200
    a[50, 150] = np.nan  # in the upper triangle, which Cholesky leaves as it is (on the diagonal, potrf fails)
    np.save(tmp_path / "a.npy", a)
    out = tiledsl("run", "programs/cholesky.tile", "--n", 200, "--nb", 100, "--input", f"A={tmp_path / 'a.npy'}",
                  "--json")
    assert out.returncode == 1
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert list(summary["nonfinite"]) == ["A"] and summary["nonfinite"]["A"] >= 1 and summary["passed"] is None
    assert summary["ok"] is False  # the exit status is 1: a NaN is left
    assert summary["input_nonfinite"] == {"A": 1}
    assert out.stderr.startswith("tiledsl: error: A holds ") and "; its input held 1" in out.stderr


@pytest.mark.timeout(60)
def test_allow_nonfinite_takes_what_is_left_for_results_and_writes_the_outputs(tmp_path):
    a = np.eye(200) * 200
    a[150, 150] = np.inf
    np.save(tmp_path / "a.npy", a)
    args = ("run", "programs/cholesky.tile", "--n", 200, "--nb", 100, "--input", f"A={tmp_path / 'a.npy'}",
            "--output", f"A={tmp_path / 'l.npy'}", "--json")
    failed = tiledsl(*args)
    assert failed.returncode == 1 and "; --allow-nonfinite takes them for results" in failed.stderr
    assert not (tmp_path / "l.npy").exists()
    out = tiledsl(*args, "--allow-nonfinite")
    assert out.returncode == 0 and "error" not in out.stderr, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["ok"] is True and summary["nonfinite"]["A"] >= 1
    assert np.isinf(np.load(tmp_path / "l.npy")[150, 150])
    both = tiledsl(*args, "--allow-nonfinite", "--check-finite")
    assert both.returncode == 2 and "--allow-nonfinite and --check-finite contradict each other" in both.stderr


@pytest.mark.timeout(60)
def test_the_driver_help_explains_files_and_exit_codes(tmp_path, cholesky_driver):
    (tmp_path / "c.py").write_text(cholesky_driver)
    out = subprocess.run([sys.executable, str(tmp_path / "c.py"), "--help"], capture_output=True, text=True)
    text = " ".join(out.stdout.split())
    assert "renamed into place only once the run succeeded" in text and "128+N stopped by signal N" in text
    assert "0 disables it, from 0.25 to 1000000 (default: the larger of 60 s and 20 times the longest task so far)" in text
    out = subprocess.run([sys.executable, str(tmp_path / "c.py"), "--n", "10", "--outptu", "A=x.npy"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "did you mean --output?" in out.stderr
    import os

    other_rank = dict(os.environ, PMI_RANK="1")  # under mpiexec, only rank 0 says it
    for args, code in ((["--help"], 0), (["--n", "10", "--outptu", "A=x.npy"], 2)):
        out = subprocess.run([sys.executable, str(tmp_path / "c.py"), *args], capture_output=True, text=True,
                             env=other_rank)
        assert (out.returncode, out.stdout, out.stderr) == (code, "", "")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command, hint", [
    ("explain", "(this command starts no ranks: give the process grid as --grid PxQ) (see tiledsl explain --help)"),
    ("graph", "(this command starts no ranks: give the process grid as --grid PxQ) (see tiledsl graph --help)"),
    ("simulate", "(a simulated run's ranks: --nodes N, or --grid PxQ) (see tiledsl simulate --help)"),
    ("bench", "(only tiledsl run starts ranks) (see tiledsl bench --help)"),
])
def test_a_command_given_np_says_where_its_ranks_come_from(command, hint):
    out = tiledsl(command, "programs/cholesky.tile", "--n", "100", *(("--nodes", "2") if command == "simulate" else ()),
                  "--np", "4")
    assert out.returncode == 2 and out.stderr.strip() == f"tiledsl: error: unrecognized arguments: --np 4 {hint}"


@pytest.mark.parametrize("given, why", [
    ("simulate --gpu-memory 1M", "simulate does not model GPU memory: a simulated GPU holds every tile"),
    ("simulate --check", "simulate runs no kernel: there is no result to check"),
    ("bench --gpus 1", "bench compares runs on CPU cores with LAPACK and dask; run a program on GPUs with tiledsl run "
                       "--gpus G"),
    ("explain --gpu-memory 1M", "explain does not model GPU memory: it counts the copies of a run whose tiles all fit "
                                "their GPUs"),
])
def test_an_option_of_other_commands_says_why_this_one_takes_none(capsys, given, why):
    """Refused as a misspelling was (unrecognized, no hint), as if the command had never heard of it."""
    from tiledsl.commands.cli import main

    command, *options = given.split()
    with pytest.raises(SystemExit) as ended:
        main([command, "cholesky", "--n", "100", *options])
    assert ended.value.code == 2
    assert capsys.readouterr().err == (f"tiledsl: error: unrecognized arguments: {' '.join(options)} ({why}) "
                                       f"(see tiledsl {command} --help)\n")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["explain", "graph"])
def test_a_plan_of_a_grid_that_leaves_a_rank_idle_warns_as_run_does(command):
    out = tiledsl(command, "programs/cholesky.tile", "--n", "256", "--nb", "128", "--grid", "3x3")
    assert out.returncode == 0 and out.stdout
    advice = "no grid of 9 ranks gives every rank a task: use fewer ranks, or smaller tiles (--nb 52 on --grid 3x3)"
    # explain also names rank 1, whose one tile (above the diagonal) no task touches, as the run does after it
    # (tester k53: its table showed that rank with nothing to do, and no warning named it)
    idle = [f"tiledsl: warning: rank 1 ran no task on the 3x3 grid: no task writes first a tile it owns, nor reads "
            f"one; {advice}"] if command == "explain" else []
    assert out.stderr.strip().splitlines() == [
        "tiledsl: warning: 9 ranks but only 4 of them own tiles (the largest matrix, A, has 2×2 tiles): ranks 2, 5, 6, "
        f"7 and 8 have nothing to do; {advice}", *idle]


@pytest.mark.timeout(120)
def test_a_compiled_driver_given_np_says_its_launcher_makes_the_ranks(tmp_path, cholesky_driver):
    (tmp_path / "chol.py").write_text(cholesky_driver)
    out = subprocess.run([sys.executable, str(tmp_path / "chol.py"), "--n", "100", "--np", "3"],
                         capture_output=True, text=True, timeout=100)
    assert out.returncode == 2
    assert "unrecognized arguments: --np 3 (a driver runs on the ranks its launcher starts: " \
           "mpiexec -n N python DRIVER.py)" in out.stderr


def test_bench_notes_rounds_far_apart_and_a_count_that_is_tiledsls():
    from tiledsl.commands.bench import Measure, _spread_notes

    steady, loaded = Measure("tiledsl", [0.10, 0.11]), Measure("scipy dgels (2 threads)", [0.006, 0.8])
    assert _spread_notes([steady, loaded], 2) == [
        "scipy dgels (2 threads)'s rounds took 0.0060 to 0.8000 s: the machine is busy, or its threads wait for "
        "cores; its ratio is not reliable (run again, or with --workers 1)"]


@pytest.mark.timeout(120)
def test_with_n_given_the_file_that_disagrees_with_it_is_named_not_one_read_before_it(tmp_path):
    """A (301×77) fits m and k; B (77×130) does not fit --n 131: A was named, checked at the params'
    defaults since no params fit both files at that n. The params the other files fit are taken first."""
    np.save(tmp_path / "a.npy", np.ones((301, 77)))
    np.save(tmp_path / "b.npy", np.ones((77, 130)))
    out = tiledsl("run", "programs/gemm.tile", "--n", 131, "--input", f"A={tmp_path / 'a.npy'}",
                  "--input", f"B={tmp_path / 'b.npy'}")
    assert out.returncode == 2 and out.stderr.strip().endswith(
        "b.npy' has shape (77, 130) but the matrix needs shape (77, 131) (--n 130 gives the matrix the file's "
        "shape)"), out.stderr


def test_an_input_file_of_another_shape_names_the_setting_that_would_fit(tmp_path):
    np.save(tmp_path / "wide.npy", np.ones((300, 200)))
    np.save(tmp_path / "short.npy", np.ones((50, 20)))
    out = tiledsl("run", "programs/gemm.tile", "--n", 300, "--input", f"A={tmp_path / 'wide.npy'}", "--json")
    assert out.returncode == 0, out.stderr  # the params --set leaves out come from the file, as run(A=...) infers them
    assert json.loads(out.stdout)["params"] == {"m": 300, "k": 200}
    out = tiledsl("run", "programs/gemm.tile", "--n", 300, "--set", "k=50", "--input", f"A={tmp_path / 'wide.npy'}")
    assert out.returncode == 2 and out.stderr.strip().endswith(
        "has shape (300, 200) but the matrix needs shape (300, 50) (--set k=200 gives the matrix the file's "
        "shape)")
    out = tiledsl("run", "programs/gemm.tile", "--n", 20, "--input", f"A={tmp_path / 'wide.npy'}",
                  "--input", f"B={tmp_path / 'short.npy'}")  # A and B disagree on k: no setting fits both
    assert out.returncode == 2 and out.stderr.strip().endswith(  # (k=50, which B fits at --n 20, and A not)
        "has shape (300, 200) but the matrix needs shape (20, 50); the input files' shapes disagree with gemm, which "
        "makes A's columns and B's rows the same size (here 200 and 50); A is 300×200, B is 50×20"), out.stderr
    out = tiledsl("run", "programs/cholesky.tile", "--n", 200, "--input", f"A={tmp_path / 'wide.npy'}")
    assert out.returncode == 2 and out.stderr.strip().endswith(
        "but the matrix needs shape (200, 200); the input files' shapes disagree with cholesky, which makes A square; "
        "A is 300×200"), out.stderr
    (tmp_path / "nq.tile").write_text("program nq {\n  tiling uniform(nb = 64)\n  param q = 4\n"
                                      "  matrix A[n, q] = random general\n  matrix S[1, 1] = zeros\n"
                                      "  for i in 0 .. A.mt { amax(A[i, 0], S[0, 0]) }\n}\n")
    out = tiledsl("run", tmp_path / "nq.tile", "--n", 100, "--input", f"A={tmp_path / 'short.npy'}")
    assert out.returncode == 2 and out.stderr.strip().endswith(  # no n alone, no params at this n: both
        "has shape (50, 20) but the matrix needs shape (100, 4) (--n 50 --set q=20 gives the matrix the file's "
        "shape)"), out.stderr
    (tmp_path / "nqr.tile").write_text("program nqr {\n  tiling uniform(nb = 32)\n  param q = 4\n  param r = 2\n"
                                       "  matrix A[n + q, n - r] = random general\n  matrix S[1, 1] = zeros\n"
                                       "  for i in 0 .. A.mt { amax(A[i, 0], S[0, 0]) }\n}\n")
    np.save(tmp_path / "a57.npy", np.ones((57, 48)))
    out = tiledsl("run", tmp_path / "nqr.tile", "--n", 40, "--set", "q=1", "--input", f"A={tmp_path / 'a57.npy'}")
    assert out.returncode == 2 and out.stderr.strip().endswith(  # the --set given is not said again
        "(--n 56 --set r=8 gives the matrix the file's shape)"), out.stderr


@pytest.mark.timeout(200)
def test_without_n_the_size_and_params_come_from_the_input_files(tmp_path):
    """As the Python API infers them from arrays: n and gemm's m and k from A and B, on 2 ranks too;
    a program's load file alone gives explain and simulate theirs."""
    rng = np.random.default_rng(3)
    a, b, c = rng.standard_normal((70, 40)), rng.standard_normal((40, 90)), rng.standard_normal((70, 90))
    for name, array in (("A", a), ("B", b), ("C", c)):
        np.save(tmp_path / f"{name}.npy", array)
    files = [f"--input={name}={tmp_path / name}.npy" for name in "ABC"]
    out = tiledsl("run", "gemm", *files, "--np", 2, "--nb", 32, "--json", "--output", f"C={tmp_path / 'out.npy'}")
    assert out.returncode == 0, out.stderr
    assert (json.loads(out.stdout)["n"], json.loads(out.stdout)["params"]) == (90, {"m": 70, "k": 40})
    assert np.allclose(np.load(tmp_path / "out.npy"), c + a @ b)
    out = tiledsl("run", "gemm", files[0])  # A alone tells m and k, not n
    assert out.returncode == 2 and out.stderr.strip() == (
        "tiledsl: error: the input files' shapes fit several sizes (n=40, k=40, m=70 or n=70, k=40, m=70 or ...): "
        "give --n or --set to choose"), out.stderr
    (tmp_path / "l.tile").write_text('program l {\n  matrix A[n, n] = load "A.npy"\n'
                                     "  for k in 0 .. A.nt { potrf(A[k, k]) }\n}\n")
    np.save(tmp_path / "A.npy", np.eye(50))
    for command in (("explain", "--json"), ("simulate", "--nodes", 1, "--machine", "keeneland", "--json")):
        out = tiledsl(command[0], tmp_path / "l.tile", *command[1:])
        assert out.returncode == 0 and json.loads(out.stdout.splitlines()[-1])["n"] == 50, out.stderr


@pytest.mark.timeout(120)
def test_a_param_inferred_from_the_input_files_is_in_the_summary_line(tmp_path):
    (tmp_path / "k.py").write_text("def touch(X):\n    pass\n")
    (tmp_path / "tall.tile").write_text('use "k.py"\nkernel touch(inout X) flops 0\nprogram tall {\n'
                                        "  tiling uniform(nb = 100)\n  param q = 2\n  matrix A[n * q, n] = zeros\n"
                                        "  for k in 0 .. A.nt { touch(A[k, k]) }\n}\n")
    np.save(tmp_path / "a.npy", np.zeros((900, 300)))
    out = tiledsl("run", tmp_path / "tall.tile", "--input", f"A={tmp_path / 'a.npy'}")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("tall: n=300 nb=100 q=3, 1 rank")


@pytest.mark.timeout(120)
def test_a_char_param_that_does_not_print_is_written_as_python_writes_it_in_the_summary(tmp_path):
    (tmp_path / "nl.tile").write_text('program nl {\n  param d = "\\n"\n  matrix A[n, n] = random spd\n'
                                      '  if d == "\\n" { potrf(A[0, 0]) }\n}\n')
    out = tiledsl("run", tmp_path / "nl.tile", "--n", 10)
    assert out.returncode == 0 and out.stdout.startswith("nl: n=10 nb=256 d='\\n', 1 rank"), out.stdout


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["run", "bench", "explain"])
def test_a_default_the_values_given_cannot_compute_is_a_usage_error(tmp_path, command):
    (tmp_path / "pow.tile").write_text("program pow {\n  tiling uniform(nb = 100)\n  param lev = 2\n"
                                       "  param w = 2 ** lev\n  matrix A[w * nb, w * nb] = random spd\n"
                                       "  for k in 0 .. A.nt { potrf(A[k, k]) }\n}\n")
    out = tiledsl(command, tmp_path / "pow.tile", "--n", 1000, "--set", "lev=-1")
    assert out.returncode == 2 and out.stderr.strip() == (
        "tiledsl: error: the default of param w cannot be computed with n = 1000, nb = 100, lev = -1: the exponent "
        "of '**' is negative: 2 ** -1")


@pytest.mark.timeout(130)
def test_a_kernel_module_imports_the_files_beside_it(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "scaling.py").write_text("def scale(a, f):\n    a *= f\n")
    (project / "halver_kernels.py").write_text("from scaling import scale\n\n\ndef halve(A):\n    scale(A, 0.5)\n")
    (project / "halver.tile").write_text('use "halver_kernels.py"\nkernel halve(inout A)\nprogram halver {\n'
                                         "  tiling uniform(nb = 64)\n  matrix A[n, n] = random general\n"
                                         "  for i in 0 .. A.mt { for j in 0 .. A.nt { halve(A[i, j]) } }\n}\n")
    given = np.random.default_rng(5).standard_normal((150, 150))
    np.save(tmp_path / "in.npy", given)
    out = tiledsl("run", project / "halver.tile", "--n", 150, "--np", 2, "--input", f"A={tmp_path / 'in.npy'}",
                  "--output", f"A={tmp_path / 'A.npy'}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert np.array_equal(np.load(tmp_path / "A.npy"), given * 0.5)


@pytest.mark.timeout(60)
def test_python_dash_m_tiledsl_is_the_command(tmp_path):
    out = subprocess.run([sys.executable, "-m", "tiledsl", "run", "cholesky", "--n", "100", "--nb", "50", "--json"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=50)
    assert out.returncode == 0 and json.loads(out.stdout.strip().splitlines()[-1])["program"] == "cholesky", out.stderr


CHAR_OPTIONS = """program options {
  tiling uniform(nb = 32)
  param side = "L"
  matrix A[n, n] = random spd
  matrix B[n, n] = random general
  for k in 0 .. A.nt { potrf(A[k, k]) }
  for k in 0 .. A.nt {
    if side == "L" { trsm(A[k, k], B[k, 0], side, "L", "N", "N") }
    else { trsm(A[k, k], B[0, k], side, "L", "T", "N") }
  }
}
"""


@pytest.mark.timeout(200)
def test_a_char_parameter_chooses_a_kernel_option_at_run_time(tmp_path):
    """`param side = "L"`, then --set side=R: B[k, 0] ← L⁻¹·B[k, 0], or B[0, k] ← B[0, k]·L⁻ᵀ, on 1 and
    2 ranks alike (each rank's kernels take the value given); a value no kernel takes is refused before the run."""
    (tmp_path / "o.tile").write_text(CHAR_OPTIONS)
    given = np.random.default_rng(2).standard_normal((100, 100))
    np.save(tmp_path / "given.npy", given)
    outputs = {}
    for side in "LR":
        for ranks in (1, 2):
            out = tiledsl("run", tmp_path / "o.tile", "--n", 100, "--set", f"side={side}", "--np", ranks,
                          "--input", f"B={tmp_path / 'given.npy'}",
                          "--output", f"A={tmp_path / 'a.npy'}", "--output", f"B={tmp_path / 'b.npy'}")
            assert out.returncode == 0, out.stderr
            outputs[side, ranks] = np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy")
        assert all(np.array_equal(x, y) for x, y in zip(outputs[side, 1], outputs[side, 2]))
    l00 = np.tril(outputs["L", 1][0][:32, :32])
    assert np.allclose(l00 @ outputs["L", 1][1][:32, :32], given[:32, :32])
    assert np.allclose(outputs["R", 1][1][:32, :32] @ l00.T, given[:32, :32])
    out = tiledsl("run", tmp_path / "o.tile", "--n", 100, "--set", "side=X")
    assert out.returncode == 2 and out.stderr.strip() == (
        "tiledsl: error: options requires side in \"LR\" (it is passed as trsm's side when side != \"L\"), which "
        "n = 100, nb = 32, side = \"X\" break (o.tile:9)")  # the else block's: the if's use is not reached at X


# A char parameter whose characters are digits: `--set mode=2` is the character 2, not the number.
DIGIT_MODE = """
use "scale.py"
kernel bscale(inout P, char mode in "012")
program digits {
  tiling uniform(nb = 4)
  param mode = "1"
  matrix P[n, n] = random general
  for i in 0 .. P.mt { for j in 0 .. P.nt { bscale(P[i, j], mode) } }
}
"""


@pytest.mark.timeout(120)
def test_a_char_parameter_is_set_to_a_digit_as_a_character(tmp_path):
    (tmp_path / "scale.py").write_text("def bscale(P, mode):\n    P *= int(mode)\n")
    (tmp_path / "digits.tile").write_text(DIGIT_MODE)
    given = np.arange(64.0).reshape(8, 8)
    np.save(tmp_path / "given.npy", given)
    out = tiledsl("run", tmp_path / "digits.tile", "--set", "mode=2", "--input", f"P={tmp_path / 'given.npy'}",
                  "--output", f"P={tmp_path / 'out.npy'}", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["params"] == {"mode": "2"}
    assert np.array_equal(np.load(tmp_path / "out.npy"), 2 * given)
    out = tiledsl("run", tmp_path / "digits.tile", "--n", 8, "--set", "mode=12")
    assert out.returncode == 2 and out.stderr.strip() == (
        "tiledsl: error: --set mode=12: mode is a char parameter (its default is '1'): give one character")
    out = tiledsl("run", tmp_path / "digits.tile", "--n", 8, "--set", 'mode="3"')  # quoted as the language writes it
    assert out.returncode == 2 and out.stderr.strip() == (
        "tiledsl: error: --set mode=\"3\": mode is a char parameter (its default is '1'): give the character "
        "without its quotes, 3")


@pytest.mark.timeout(120)
def test_a_requirement_the_input_files_shapes_break_is_the_error(tmp_path):
    np.save(tmp_path / "wide.npy", np.ones((20, 200)))
    out = tiledsl("run", "tsqr", "--input", f"A={tmp_path / 'wide.npy'}")
    assert out.returncode == 2 and out.stderr.strip() == (
        "tiledsl: error: tsqr requires cols <= n (A is tall: at most as many columns as rows), which n = 20, "
        "nb = 512, cols = 200, nrhs = 16, ib = 64, domains = 12 break (tsqr.tile:29)")


@pytest.mark.timeout(130)
def test_bench_fails_a_run_that_leaves_a_nan_as_run_does(tmp_path):
    """A NaN in the triangle Cholesky never reads passes its check, but is left in the matrix: run
    fails such a run (exit 1), and so does bench."""
    a = 4 * np.eye(200)
    a[0, 150] = np.nan
    np.save(tmp_path / "a.npy", a)
    out = tiledsl("bench", "cholesky", "--input", f"A={tmp_path / 'a.npy'}", "--rounds", 1, "--no-dask", "--json")
    assert out.returncode == 1, out.stderr
    table = json.loads(out.stdout)
    said = "A holds 1 NaN or infinite value(s) after the run; its input held 1; --allow-nonfinite takes them for results"
    assert (table["passed"], table["ok"], table["errors"]) == (True, False, [said])  # the check passed; the run failed
    assert f"tiledsl: error: {said}" in out.stderr
    out = tiledsl("run", "cholesky", "--input", f"A={tmp_path / 'a.npy'}", "--check", "--json")
    summary = json.loads(out.stdout.splitlines()[-1])
    assert out.returncode == 1 and (summary["passed"], summary["ok"], summary["errors"]) == (True, False, [said])


@pytest.mark.timeout(130)
def test_json_errors_say_why_a_run_failed_its_check(tmp_path):
    """ok false always comes with a reason in errors: a residual above the threshold is one."""
    a = np.random.default_rng(7).standard_normal((64, 64))
    a[0, 0] = 1e-12  # LU without pivoting on a tiny pivot: L·U far from A
    np.save(tmp_path / "a.npy", a)
    for command in (("run", "--check"), ("bench", "--rounds", 1, "--no-dask")):
        out = tiledsl(command[0], "lu", "--input", f"A={tmp_path / 'a.npy'}", "--nb", 16, "--json", *command[1:])
        summary = json.loads(out.stdout.splitlines()[-1])
        assert out.returncode == 1 and summary["ok"] is False and summary["passed"] is False, out.stderr
        assert len(summary["errors"]) == 1 and summary["errors"][0].startswith("check failed: the lu residual"), summary


@pytest.mark.timeout(150)
@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.parametrize("module, target, said", [
    ("verify", "Verifier.check", "internal error: ValueError"),  # on the main thread, in the check
    ("scheduler", "Scheduler.pop", r"internal error in CPU worker \d: ValueError"),  # in a worker thread (either)
])
def test_a_bug_of_tiledsl_in_one_rank_is_an_internal_error_and_ends_every_rank(tmp_path, ranks, module, target,
                                                                              said):
    """A rank's unexpected exception (here a function of tiledsl made to raise, as a bug would) printed
    a bare traceback: on the main thread, and on two ranks the other rank waited 60 s for an answer;
    in a worker thread, which died, and the run waited for it until the watchdog blamed a task. Now
    it is said as the command line says an internal error, exit 3, and the job ends at once."""
    owner, method = target.split(".")
    (tmp_path / "broken.py").write_text(f"from tiledsl.runtime import {module}\n\n"
                                        "def _raise(*args, **kwargs):\n"
                                        "    raise ValueError('a bug of tiledsl')\n\n"
                                        f"{module}.{owner}.{method} = _raise\n\n"
                                        "def touch(a):\n    pass\n")
    (tmp_path / "ie.tile").write_text('use "broken.py"\nkernel touch(inout A)\nprogram ie {\n'
                                      "  tiling uniform(nb = 64)\n  matrix A[n, n] = random spd\n"
                                      "  check cholesky(A)\n  for k in 0 .. A.nt { touch(A[k, k]) }\n}\n")
    began = time.monotonic()
    out = tiledsl("run", "ie.tile", "--n", 128, "--check", "--np", ranks, "--json", cwd=tmp_path)
    assert out.returncode == 3 and time.monotonic() - began < 40, out.stderr
    assert "Traceback" not in out.stderr and "did not answer" not in out.stderr, out.stderr
    assert re.match(rf"tiledsl: error: rank \d: {said}: a bug of tiledsl\n", out.stderr), out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["ok"] is False


@pytest.mark.timeout(120)
def test_a_run_removes_what_a_killed_run_left_beside_its_output(tmp_path, cholesky_driver):
    """A run killed while it wrote its output (itself, so nothing outlived it to clean up) left a
    hidden temporary file of the matrix's size; the next run writing that output removes it."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    left = tmp_path / f".A.npy.{gone.pid}-0123abcd.tiledsl-partial"
    left.write_bytes(b"\0" * 1024)
    out = tiledsl("run", "cholesky", "--n", 64, "--nb", 32, "--output", f"A={tmp_path / 'A.npy'}")
    assert out.returncode == 0, out.stderr
    assert not left.exists() and (tmp_path / "A.npy").exists()
    left.write_bytes(b"\0" * 1024)  # a compiled driver run as itself (python DRIVER.py, srun ...) too
    (tmp_path / "chol.py").write_text(cholesky_driver)
    out = subprocess.run([sys.executable, tmp_path / "chol.py", "--n", "64", "--output", f"A={tmp_path / 'A.npy'}"],
                         capture_output=True, text=True, timeout=100)
    assert out.returncode == 0 and not left.exists(), out.stderr


@pytest.mark.timeout(120)
def test_an_output_replaces_a_matrix_but_no_other_file(tmp_path):
    """--output A=analyse.py replaced the user's script with a matrix, without a word."""
    script = tmp_path / "analyse.py"
    script.write_text("print('my analysis')\n")
    out = tiledsl("run", "cholesky", "--n", 64, "--output", f"A={script}")
    assert out.returncode == 2 and out.stderr == (
        f"tiledsl: error: --output A={script}: {script} is there and is not a .npy file (a matrix, whoever saved "
        f"it): it replaces only those; name another file, or remove it first\n")
    assert script.read_text() == "print('my analysis')\n"
    earlier = tmp_path / "result"  # a name without .npy: written as given, and replaced by the next run
    for _ in range(2):
        assert tiledsl("run", "cholesky", "--n", 64, "--output", f"A={earlier}").returncode == 0
    assert np.load(earlier).shape == (64, 64)
    # a trace replaces only a trace (one an earlier run wrote: the next test)
    out = tiledsl("run", "cholesky", "--n", 64, "--trace", script)
    assert out.returncode == 2 and out.stderr == (
        f"tiledsl: error: --trace {script}: {script} is there and is not a trace an earlier run wrote: it replaces "
        f"only those; name another file, or remove it first\n")


@pytest.mark.timeout(120)
def test_a_trace_replaces_only_one_tiledsl_wrote_not_another_profilers(tmp_path):
    """A Chrome trace of another profiler opens as tiledsl's did ({"traceEvents": [...): --trace replaced it."""
    theirs = tmp_path / "chrome.json"
    theirs.write_text('{"traceEvents": [{"ph": "X", "name": "their work", "ts": 0, "dur": 1}]}')
    out = tiledsl("run", "cholesky", "--n", 64, "--trace", theirs)
    assert out.returncode == 2 and "is not a trace an earlier run wrote" in out.stderr, out.stderr
    assert "their work" in theirs.read_text()
    ours = tmp_path / "t.json"
    for _ in range(2):
        assert tiledsl("run", "cholesky", "--n", 64, "--trace", ours).returncode == 0
    assert json.loads(ours.read_text())["otherData"]["made_by"] == "tiledsl"


@pytest.mark.timeout(120)
def test_a_load_file_found_but_unfit_is_not_said_to_be_looked_for(tmp_path):
    """A complex 'data.npy' beside the program (int64, before integers were taken): the dtype error ended
    with 'a relative path is relative to the directory of the .tile file; looked for in ...', pointing at
    a search that had found the file."""
    (tmp_path / "loading.tile").write_text(LOADING)
    np.save(tmp_path / "a.npy", np.ones((100, 100), dtype=np.complex128))
    out = tiledsl("run", tmp_path / "loading.tile", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert f"input file '{tmp_path / 'a.npy'}' has dtype complex128; expected float64 (also taken: 16- and 32-bit " \
           f"floats and any integers float64 holds exactly)" in out.stderr
    assert "looked for in" not in out.stderr


@pytest.mark.timeout(120)
def test_an_input_file_is_named_as_given_whatever_the_ranks(tmp_path):
    """Tester z79b: on several ranks a bad --input file was named by its absolute path (every rank reads
    rank 0's file), on one rank as given; ranks in rank 0's directory now keep it as given."""
    np.save(tmp_path / "a.npy", np.eye(100, dtype=np.complex128))
    said = [tiledsl("run", "cholesky", "--n", 100, "--nb", 50, "--np", ranks, "--input", "A=a.npy", cwd=tmp_path)
            for ranks in (1, 2)]
    assert [out.returncode for out in said] == [2, 2] and said[0].stderr == said[1].stderr, said[1].stderr
    assert said[0].stderr.startswith("tiledsl: error: input file 'a.npy' has dtype complex128;"), said[0].stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ranks, seconds", [("1", "1e10"), ("2", "1e300")])
def test_a_watchdog_beyond_its_maximum_is_a_usage_error(ranks, seconds):
    """--watchdog 1e10 failed as an internal error (a time_t overflow), 1e300 on 3 ranks printed
    tracebacks from the heartbeat thread (which every rank of a job of several has): a limit over the
    maximum is refused before the run."""
    out = tiledsl("run", "cholesky", "--n", 300, "--nb", 64, "--np", ranks, "--watchdog", seconds)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert (f"argument --watchdog: must be 0 (off) or a number of seconds from 0.25 (how often the watchdog looks) "
            f"up to 1000000 (11.6 days), got '{seconds}'") in out.stderr, out.stderr
    largest = tiledsl("run", "cholesky", "--n", 300, "--nb", 64, "--np", ranks, "--watchdog", "1e6")
    assert largest.returncode == 0, largest.stderr
    refusal = r"watchdog must be .* up to 1000000 \(11.6 days\), got 10000000000.0"
    with pytest.raises(tiledsl_api.TiledslError, match=refusal):
        tiledsl_api.load("cholesky").run(n=64, watchdog=1e10)


@pytest.mark.timeout(200)
def test_a_file_hiding_a_module_of_pythons_is_named_by_the_drivers_beside_it(tmp_path, cholesky_driver):
    """A driver saved as copy.py (`tiledsl compile cholesky > copy.py`): Python imported it in place of
    copy, and it and every driver beside it failed with 'needs tiledsl's runtime of driver format 2',
    advising to compile again, which did not help."""
    (tmp_path / "copy.py").write_text(cholesky_driver)
    (tmp_path / "chol.py").write_text(cholesky_driver)
    said = (f"{tmp_path / 'copy.py'} hides Python's module copy, which a run may import (a script's folder "
            f"comes first on the import path): rename it, or move it out of {tmp_path}\n")
    for script in ("copy.py", "chol.py"):
        out = subprocess.run([sys.executable, script, "--n", "64"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=120)
        assert (out.returncode, out.stderr) == (2, f"{script}: error: {said}"), out.stderr
        # --json's failure object: stdout was empty where the file was a driver too
        out = subprocess.run([sys.executable, script, "--n", "64", "--json"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 2 and json.loads(out.stdout) == {
            "program": "cholesky", "n": 64, "np": 1, "ok": False, "passed": None, "error": said.strip()}
    out = tiledsl("run", tmp_path / "chol.py", "--n", 64)
    assert (out.returncode, out.stderr) == (2, f"tiledsl: error: {said}"), out.stderr


@pytest.mark.timeout(300)
@pytest.mark.parametrize("args, after", [
    (("run", "cholesky", "--n", 3000, "--nb", 32, "--json"), 3.0),
    (("run", "cholesky", "--n", 3000, "--nb", 32, "--json", "--np", 2), 3.5),
    (("bench", "cholesky", "--n", 3000, "--nb", 32, "--json", "--no-dask"), 3.0),
    (("tune", "cholesky", "--budget", 30, "--no-save", "--json"), 3.0),  # --quick may be done by then
    (("run", "cholesky", "--n", 3000, "--json"), 0),  # as soon as it handles SIGTERM: while the libraries load
])
def test_a_json_command_stopped_by_a_signal_prints_its_failure_object(args, after):
    """A batch scheduler's SIGTERM: exit 143 and nothing on stdout, where --json promises one object."""
    import signal

    command = subprocess.Popen([sys.executable, "-m", "tiledsl", *map(str, args)], cwd=ROOT, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    while not _handles(command.pid, signal.SIGTERM):  # before, Python itself is starting: SIGTERM kills it
        time.sleep(0.005)
    time.sleep(after)
    command.send_signal(signal.SIGTERM)
    out, err = command.communicate(timeout=120)
    said = json.loads(out.strip().splitlines()[-1])
    assert command.returncode == 143 and "Traceback" not in err, err
    assert (said["ok"], said["passed"], said["error"]) == (False, None, "stopped by SIGTERM"), out
    assert ("np" in said) == (args[0] == "run")


SIGNALLED_AFTER_RENAMING = """
import os, signal, sys
from tiledsl.runtime import outputs
from tiledsl.commands import main

commit, signum = outputs.Staging.commit, getattr(signal, sys.argv[1])
def renamed_then_signalled(self, succeeded, when_decided=None):
    failures = commit(self, succeeded, when_decided)
    os.kill(os.getpid(), signum)  # the old file replaced: the run is no longer stoppable
    return failures
outputs.Staging.commit = renamed_then_signalled
sys.argv = ["tiledsl", "run", "cholesky", "--n", "200", "--nb", "64", "--output", "A=out.npy", "--json"]
sys.exit(main())
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_signal_once_the_files_are_renamed_stops_nothing(tmp_path, name):
    """A SIGTERM just after the output replaced the user's old file: 'stopped by SIGTERM', exit 143 (the
    file was replaced all the same); Ctrl-C there printed a traceback after the summary."""
    np.save(tmp_path / "out.npy", np.eye(5))
    out = subprocess.run([sys.executable, "-c", SIGNALLED_AFTER_RENAMING, name], cwd=tmp_path, capture_output=True,
                         text=True, timeout=100)
    assert (out.returncode, out.stderr) == (0, ""), out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["ok"] is True
    assert np.load(tmp_path / "out.npy").shape == (200, 200)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("given, threads", [(None, 1), ("2", 2)])
def test_tiledsls_own_processes_load_openblas_on_one_thread_unless_told(given, threads):
    """A thread per core, spinning as OpenBLAS loads, in every rank, where a run uses one."""
    probe = ("import tiledsl.commands, numpy, scipy.linalg\nfrom threadpoolctl import threadpool_info\n"
             "print(sorted({pool['num_threads'] for pool in threadpool_info()}))")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=50,
                         env={**env, **({"OPENBLAS_NUM_THREADS": given} if given else {})})
    assert (out.returncode, out.stdout) == (0, f"[{threads}]\n"), out.stderr


@pytest.mark.parametrize("argv, n", [(["d.py", "--n", "7", "--json"], 7), (["d.py", "--n=8", "--json"], 8),
                                     (["d.py", "--json", "--n"], None), (["d.py", "--n", "x", "--json"], None)])
def test_the_failure_object_of_a_driver_stopped_early_is_json_whatever_its_error_holds(monkeypatch, argv, n):
    """Written by hand (json may be the module a file hides): quotes, backslashes and control characters."""
    from tiledsl.drivercontract import early_failure_json, json_asked

    monkeypatch.setattr(sys, "argv", argv)
    error = 'a "quoted" C:\\path\twith\nlines and ünïcode'
    assert json_asked() and json.loads(early_failure_json("p", error)) == {
        "program": "p", "n": n, "np": 1, "ok": False, "passed": None, "error": error}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_stop_while_a_driver_loads_is_one_line_and_its_failure_object(name):
    """python chol.py, Ctrl-C while numpy loaded: a traceback ending in KeyboardInterrupt; a SIGTERM killed
    it without a word, --json's object missing (tiledsl run: one line and the object)."""
    loading = ("import os, signal, sys, time\nsys.argv = ['chol.py', '--n', '9', '--json']\n"
               "from tiledsl.drivercontract import stop_quietly_while_loading\nstop_quietly_while_loading('cholesky')\n"
               f"os.kill(os.getpid(), signal.{name})\ntime.sleep(30)\n")
    env = {k: v for k, v in os.environ.items() if k != "TILEDSL_JOB_DIR"}
    out = subprocess.run([sys.executable, "-c", loading], capture_output=True, text=True, timeout=50, env=env)
    assert (out.returncode, out.stderr) == (128 + getattr(signal, name), f"chol.py: stopped by {name}\n")
    assert json.loads(out.stdout) == {"program": "cholesky", "n": 9, "np": 1, "ok": False, "passed": None,
                                      "error": f"stopped by {name}"}
    # rank 1 of 2 under mpiexec: said as a rank stopped later says it, its failure object rank 0's to print
    out = subprocess.run([sys.executable, "-c", loading], capture_output=True, text=True, timeout=50,
                         env={**env, "PMI_RANK": "1", "PMI_SIZE": "2"})
    assert (out.returncode, out.stdout, out.stderr) == (
        128 + getattr(signal, name), "", f"tiledsl: rank 1: stopped by {name} (while it was starting)\n")


def _handles(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler of its own for ``signum`` (its SigCgt mask)."""
    with open(f"/proc/{pid}/status") as status:
        caught = next(line for line in status if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) >> (signum - 1) & 1)


@pytest.mark.timeout(120)
def test_a_file_of_a_shipped_programs_bare_name_does_not_replace_it(tmp_path):
    """A file `cholesky` (no .tile) beside the user silently ran in place of the shipped program, where
    a `cholesky.tile` there got the shipped one and a warning, as the README says of both."""
    (tmp_path / "cholesky").write_text((ROOT / "programs/cholesky.tile").read_text().replace("nb = 256", "nb = 50"))
    out = tiledsl("run", "cholesky", "--n", 200, "--no-tune", cwd=tmp_path)
    assert out.returncode == 0 and "settings  nb=256: program default" in out.stdout, out.stderr
    assert out.stderr == (f"tiledsl: warning: cholesky is the shipped program ({ROOT / 'programs/cholesky.tile'}); "
                          f"the cholesky in this directory is another program: give its path, ./cholesky, to run "
                          f"that one\n")
    out = tiledsl("run", "./cholesky", "--n", 200, "--no-tune", cwd=tmp_path)
    assert out.returncode == 0 and "settings  nb=50: program default" in out.stdout, out.stderr


@pytest.mark.timeout(200)
def test_a_module_of_pythons_hidden_where_scipy_imports_it_is_named_too(tmp_path, cholesky_driver):
    """A user's copy.py (no deepcopy) beside a driver: the runtime imported, but SciPy, loaded by
    main, failed with a raw traceback "module 'copy' has no attribute 'deepcopy'", and on 2 ranks
    a rank was said to have ended without a word."""
    (tmp_path / "chol.py").write_text(cholesky_driver)
    (tmp_path / "copy.py").write_text("x = 1\n")
    said = (f"{tmp_path / 'copy.py'} hides Python's module copy, which a run may import (a script's folder "
            f"comes first on the import path): rename it, or move it out of {tmp_path}\n")
    out = subprocess.run([sys.executable, "chol.py", "--n", "64"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert (out.returncode, out.stderr) == (2, f"chol.py: error: {said}"), out.stderr
    out = tiledsl("run", tmp_path / "chol.py", "--n", 64, "--np", 2)
    assert out.returncode == 2 and "Traceback" not in out.stderr and said in out.stderr, out.stderr
    assert "without a word" not in out.stderr, out.stderr


@pytest.mark.timeout(200)
def test_a_drivers_help_lists_the_tile_settings_of_its_program_only(tmp_path, cholesky_driver):
    """chol.py --help listed --B, --b and --s, which its uniform tiling then refused."""
    for name, shown, hidden in (("cholesky", ["--nb"], ["--B", "--b", "--s"]),
                                ("hetero_cholesky", ["--B", "--b", "--s"], ["--nb"])):
        (tmp_path / f"{name}_driver.py").write_text(cholesky_driver if name == "cholesky"
                                                    else tiledsl("compile", name).stdout)
        out = subprocess.run([sys.executable, f"{name}_driver.py", "--help"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=120)
        listed = set(re.findall(r"^  (--\w+) ", out.stdout, re.M))
        assert set(shown) <= listed and not set(hidden) & listed, out.stdout
    out = subprocess.run([sys.executable, "cholesky_driver.py", "--n", "64", "--B", "64"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stderr) == (2, "tiledsl: error: --B does not apply to uniform tiling (it takes --nb)\n")


@pytest.mark.timeout(200)
def test_a_kernels_fork_pool_ends_without_the_ranks_signal_tracebacks(tmp_path):
    """The pool's workers inherited the rank's SIGTERM handler: Pool.terminate's SIGTERM raised the
    rank's Stopped in each, which printed a traceback (4 runs in 5, of 2 pools each), and once left the
    run waiting. A race each pool's end may lose: one run ends 6 pools, as many as 3 runs of 2 did. One worker
    forks at a time: two forking at once in a process of threads may hand a child a lock another thread held (a
    pool whose workers never start, which the watchdog then ended: fork's own hazard, not this test's)."""
    (tmp_path / "mpk.py").write_text("import multiprocessing\n\ndef pooled(A):\n"
                                     "    with multiprocessing.get_context('fork').Pool(2) as pool:\n"
                                     "        A[0, 0] += 0.0 * sum(pool.map(abs, range(10)))\n")
    (tmp_path / "mp.tile").write_text('use "mpk.py"\nkernel pooled(inout A)\nprogram mp {\n  tiling uniform(nb = 100)\n'
                                      "  matrix A[n, n] = random spd\n  for k in 0 .. A.mt { pooled(A[k, k]) }\n}\n")
    out = tiledsl("run", tmp_path / "mp.tile", "--n", 600, "--workers", 1, cwd=tmp_path)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr


@pytest.mark.timeout(130)
def test_no_output_replaces_the_input_of_another_matrix(tmp_path):
    """`--output B=data.npy` where A is `load "data.npy"` replaced A's data with B, exit 0; the next run
    failed on its shape. A matrix may still write its own input back (in place)."""
    data = np.eye(40) * 4.0
    np.save(tmp_path / "data.npy", data)
    np.save(tmp_path / "b.npy", np.ones((40, 2)))
    (tmp_path / "p.tile").write_text('program p {\n  tiling uniform(nb = 20)\n  matrix A[n, n] = load "data.npy"\n'
                                     "  matrix B[n, 2] = random general\n"
                                     "  for k in 0 .. A.nt { potrf(A[k, k]) trsm(A[k, k], B[k, 0]) }\n}\n")
    np.save(tmp_path / "other.npy", data)
    for given, reader in ((("--output", "B=data.npy"), 'A (load "data.npy")'),
                          (("--input", "B=b.npy", "--output", "A=b.npy"), "B (--input B=b.npy)"),
                          # the program's data, though --input stands in for it this time
                          (("--input", "A=other.npy", "--output", "B=data.npy"), 'A (load "data.npy")')):
        out = tiledsl("run", "p.tile", *given, cwd=tmp_path)
        assert out.returncode == 2 and f"{given[-1]}: that is the input of {reader}, which the output would " \
                                       f"replace: name another file" in out.stderr, out.stderr
    assert np.array_equal(np.load(tmp_path / "data.npy"), data) and np.load(tmp_path / "b.npy").shape == (40, 2)
    # a file that several matrices read: writing one back would replace the others' input
    out = tiledsl("run", ROOT / "programs/gemm.tile", "--nb", 20, *[f"--input={m}=other.npy" for m in "ABC"],
                  "--output", "C=other.npy", cwd=tmp_path)
    assert out.returncode == 2 and "--output C=other.npy: that is the input of A (--input A=other.npy)" \
        in out.stderr, out.stderr
    out = tiledsl("run", "p.tile", "--output", "A=data.npy", cwd=tmp_path)  # its own input, in place
    assert out.returncode == 0 and np.allclose(np.load(tmp_path / "data.npy"), np.eye(40) * 2.0), out.stderr


def _hides(tmp_path, name: str, kind: str = "the module") -> str:
    """The line a driver in ``tmp_path`` says of a file there named as module ``name``, which it hides."""
    shown = tmp_path / name if (tmp_path / name).is_dir() else tmp_path / f"{name}.py"
    return (f"{shown} hides {kind} {name}, which a run may import (a script's folder comes first on the import "
            f"path): rename it, or move it out of {tmp_path}\n")


@pytest.mark.timeout(200)
@pytest.mark.parametrize("name, kind", [("json", "Python's module"), ("numpy", "the module"),
                                        ("tiledsl", "the module"), ("threading", "Python's module")])
def test_any_module_a_run_imports_hidden_beside_a_driver_stops_it_in_one_line(tmp_path, name, kind, cholesky_driver):
    """A json.py (x = 1) beside a driver was an internal error at its first use (json.dumps, rc 3), a
    numpy.py a raw traceback (numpy.dtype), a tiledsl.py the false 'needs tiledsl's runtime of driver
    format 3', and a threading.py came with Python's "Exception ignored in: <module 'threading' ...>":
    the check knew only the modules of Python's imported so far, and needed tiledsl to import."""
    (tmp_path / "d.py").write_text(cholesky_driver)
    (tmp_path / f"{name}.py").write_text("x = 1\n")
    out = subprocess.run([sys.executable, "d.py", "--n", "10"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert (out.returncode, out.stderr) == (2, f"d.py: error: {_hides(tmp_path, name, kind)}"), out.stderr
    if name != "tiledsl":  # (this tiledsl, started beside it, would import it)
        out = tiledsl("run", tmp_path / "d.py", "--n", 10)
        assert (out.returncode, out.stderr) == (2, f"tiledsl: error: {_hides(tmp_path, name, kind)}"), out.stderr


@pytest.mark.timeout(200)
def test_a_driver_saved_as_numpy_py_says_it_hides_numpy(tmp_path, cholesky_driver):
    """`tiledsl compile cholesky > numpy.py; python numpy.py`: the runtime imported the driver as numpy,
    whose import of the runtime failed, and it said it needed a runtime of driver format 3."""
    (tmp_path / "numpy.py").write_text(cholesky_driver)
    out = subprocess.run([sys.executable, "numpy.py", "--n", "10"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert (out.returncode, out.stderr) == (2, f"numpy.py: error: {_hides(tmp_path, 'numpy')}"), out.stderr


@pytest.mark.timeout(200)
def test_an_mpi4py_py_beside_a_driver_stops_its_ranks_in_one_line(tmp_path, cholesky_driver):
    """mpi4py.py beside a driver under `mpiexec -n 2`: every rank was an internal error, "module 'mpi4py'
    has no attribute 'rc'" (rc 3); now rank 0 alone says it, and both end with status 2."""
    mpiexec = Path(sys.executable).with_name("mpiexec")  # the environment's (mpich), as test_job_faults finds it
    mpiexec = str(mpiexec) if mpiexec.exists() else "mpiexec"
    (tmp_path / "d.py").write_text(cholesky_driver)
    (tmp_path / "mpi4py.py").write_text("x = 1\n")
    out = subprocess.run([mpiexec, "-n", "2", sys.executable, "d.py", "--n", "10"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert (out.returncode, out.stderr) == (2, f"d.py: error: {_hides(tmp_path, 'mpi4py')}"), out.stderr


@pytest.mark.timeout(200)
def test_files_beside_a_driver_that_hide_nothing_a_run_imports_do_not_stop_it(tmp_path, cholesky_driver):
    """What the check must let be: a helper module of the user's, a package of the user's whose name
    no installed package that tiledsl requires has, and a plain folder named as a module (no
    __init__.py: Python imports the module, not the folder)."""
    (tmp_path / "d.py").write_text(cholesky_driver)
    (tmp_path / "helpers.py").write_text("x = 1\n")
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "__init__.py").write_text("")
    (tmp_path / "numpy").mkdir()
    out = subprocess.run([sys.executable, "d.py", "--n", "10"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stderr == "", out.stderr


@pytest.mark.timeout(200)
def test_a_kernel_module_named_as_a_module_of_pythons_no_run_imports_runs(tmp_path):
    """`use "statistics.py"` (and a code.py beside): check, run and compile passed, but the driver
    stopped ('hides Python's module statistics'), though no run imports statistics; renaming it, as
    advised, broke the program. Modules of Python's count where imported, or imported by tiledsl."""
    (tmp_path / "statistics.py").write_text("def scale(A):\n    A *= 2\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "s.tile").write_text('use "statistics.py"\nkernel scale(inout A)\nprogram s {\n'
                                     "  matrix A[n, n] = random spd\n  scale(A[0, 0])\n}\n")
    assert tiledsl("compile", "s.tile", "-o", "d.py", cwd=tmp_path).returncode == 0
    out = subprocess.run([sys.executable, "d.py", "--n", "10"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    (tmp_path / "json.py").write_text("x = 1\n")  # one that tiledsl imports (lazily) still stops it
    out = subprocess.run([sys.executable, "d.py", "--n", "10"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and "json.py hides Python's module json" in out.stderr, out.stderr


@pytest.mark.timeout(200)
def test_a_driver_compiled_through_a_link_finds_its_program_from_anywhere(tmp_path):
    """`compile -o latest.py`, a link to drivers/scale.py: the driver recorded the program's folder
    relative to the link's, and run from elsewhere looked for its data in drivers/prog."""
    (tmp_path / "prog").mkdir()
    (tmp_path / "drivers").mkdir()
    np.save(tmp_path / "prog" / "data.npy", np.eye(8) * 4.0)
    (tmp_path / "prog" / "scale.tile").write_text('program scale {\n  tiling uniform(nb = 4)\n'
                                                  '  matrix A[n, n] = load "data.npy"\n'
                                                  "  for k in 0 .. A.nt { potrf(A[k, k]) }\n}\n")
    (tmp_path / "latest.py").symlink_to(tmp_path / "drivers" / "scale.py")
    assert tiledsl("compile", "prog/scale.tile", "-o", "latest.py", cwd=tmp_path).returncode == 0
    for driver in ("drivers/scale.py", "latest.py"):
        out = subprocess.run([sys.executable, str(tmp_path / driver)], cwd="/", capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, (driver, out.stderr)


@pytest.mark.timeout(200)
def test_a_sourceless_pyc_beside_a_driver_stops_it_as_its_py_would(tmp_path, cholesky_driver):
    """json.pyc (as `compileall -b` leaves) was imported in json's place: 'internal error: ... no
    attribute dumps', exit 3."""
    import py_compile

    (tmp_path / "d.py").write_text(cholesky_driver)
    (tmp_path / "json_source.py").write_text("x = 1\n")
    py_compile.compile(str(tmp_path / "json_source.py"), cfile=str(tmp_path / "json.pyc"))
    (tmp_path / "json_source.py").unlink()
    out = subprocess.run([sys.executable, "d.py", "--n", "10"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and f"{tmp_path / 'json.pyc'} hides Python's module json" in out.stderr, out.stderr


@pytest.mark.timeout(200)
def test_tiledsl_run_judges_a_linked_drivers_folder_as_python_does(tmp_path, cholesky_driver):
    """links/chol.py -> ../real/chol.py with json.py in links/: python ran it (its import path starts
    at the target's folder), `tiledsl run links/chol.py` stopped, naming a file no run imports."""
    (tmp_path / "real").mkdir()
    (tmp_path / "links").mkdir()
    (tmp_path / "real" / "chol.py").write_text(cholesky_driver)
    (tmp_path / "links" / "chol.py").symlink_to("../real/chol.py")
    (tmp_path / "links" / "json.py").write_text("x = 1\n")
    out = tiledsl("run", "links/chol.py", "--n", 10, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    (tmp_path / "real" / "json.py").write_text("x = 1\n")
    out = tiledsl("run", "links/chol.py", "--n", 10, cwd=tmp_path)
    assert out.returncode == 2 and f"{tmp_path / 'real' / 'json.py'} hides Python's module json" in out.stderr


@pytest.mark.timeout(120)
def test_a_file_of_a_shipped_programs_bare_name_that_is_no_program_is_not_called_one(tmp_path):
    """`cholesky` holding a shopping list was 'another program' in the warning, whose advice (give its path,
    ./cholesky) ran into a syntax error at its first line."""
    (tmp_path / "cholesky").write_text("shopping list: eggs\n")
    out = tiledsl("run", "cholesky", "--n", 200, "--no-tune", cwd=tmp_path)
    assert out.returncode == 0 and out.stderr == "" and "settings  nb=256: program default" in out.stdout, out.stderr


@pytest.mark.timeout(120)
def test_a_watchdog_shorter_than_its_look_is_a_usage_error():
    """The watchdog looks 4 times a second: --watchdog 0.001 never fired, 0.01 fired at random ('no task
    completed for 0.0 s')."""
    out = tiledsl("run", "cholesky", "--n", 300, "--nb", 64, "--watchdog", "0.01")
    assert out.returncode == 2 and "must be 0 (off) or a number of seconds from 0.25 " in out.stderr, out.stderr


@pytest.mark.parametrize("command, ranks", [("run", {"np": None}), ("explain", {})])
def test_a_stop_while_the_options_are_read_still_prints_the_failure_object(monkeypatch, capsys, command, ranks):
    """SIGTERM as the option parser was built (args not yet read): 'stopped by SIGTERM', stdout empty."""
    from tiledsl.commands import cli
    from tiledsl.runtime.entry import Stopped

    def stopped():
        raise Stopped(signal.SIGTERM)
    monkeypatch.setattr(cli, "_parser", stopped)
    monkeypatch.setattr(cli, "_stop_on_signals", lambda: None)  # this test's process keeps its own
    assert cli.main([command, "cholesky", "--n", "64", "--json"]) == 143
    out = capsys.readouterr()
    assert out.err == "tiledsl: stopped by SIGTERM\n"
    assert json.loads(out.out) == {"program": None, "n": None, "ok": False, "passed": None, **ranks,
                                   "error": "stopped by SIGTERM"}


def test_a_failure_object_after_a_result_cut_mid_line_is_on_a_line_of_its_own(monkeypatch, capsys):
    """explain --json stopped while it wrote its 170 KB line: '...{"index": 510, "ker{"program": ...'."""
    from tiledsl.commands import cli

    def cut(args):
        sys.stdout.write('{"program": "cholesky", "tasks": [{"index": 510, "ker')  # print's text, its end not yet
        raise cli.Stopped(signal.SIGTERM)
    monkeypatch.setattr(cli, "_stop_on_signals", lambda: None)  # this test's process keeps its own
    monkeypatch.setattr(cli, "_explain", cut)
    assert cli.main(["explain", "cholesky", "--n", "64", "--json"]) == 143
    last = capsys.readouterr().out.splitlines()[-1]
    assert json.loads(last)["error"] == "stopped by SIGTERM"


PARTIAL_LINE_KERNELS = '''import sys
def scale(a):
    sys.stdout.write("partial")
    a *= 2.0
def fail(a):
    sys.stdout.write("partial")
    raise ValueError("no")
'''


@pytest.mark.timeout(200)
@pytest.mark.parametrize("kernel, how", [("scale", ()), ("fail", ()), ("fail", ("--np", "2")), ("scale", "driver")])
def test_a_kernels_unfinished_line_leaves_the_json_object_a_line_of_its_own(tmp_path, kernel, how):
    """A kernel's print without a newline: the --json object (stdout's last line) began on its line, and
    a script reading it found no JSON; as the summary began there too. Rank 0 runs every task here.
    The summary and the failure object on one rank; a job's launcher passes rank 0's object on last
    whichever it is (commands/joboutput.py), and a driver run alone prints either as a rank does: one
    object each."""
    (tmp_path / "k.py").write_text(PARTIAL_LINE_KERNELS)
    (tmp_path / "p.tile").write_text(f'use "k.py"\nkernel {kernel}(inout a)\nprogram p {{\n  tiling uniform(nb = 100)\n'
                                     f'  matrix A[n, n] = random general\n'
                                     f'  for i in 0 .. A.mt {{ {kernel}(A[i, 0]) }}\n}}\n')
    if how == "driver":
        assert tiledsl("compile", tmp_path / "p.tile", "-o", tmp_path / "p.py").returncode == 0
        out = subprocess.run([sys.executable, tmp_path / "p.py", "--n", "200", "--json"], capture_output=True,
                             text=True, timeout=120)
    else:
        out = tiledsl("run", tmp_path / "p.tile", "--n", "200", "--json", *how)
    assert out.returncode == (0 if kernel == "scale" else 1), out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("partial") and json.loads(lines[-1])["ok"] == (kernel == "scale"), out.stdout


@pytest.mark.timeout(60)
def test_a_long_check_name_keeps_the_summarys_residual_pattern():
    """A name longer than the labels' column turned its line into 'residual  NAME VALUE': text searched
    for 'NAME residual' missed it. The line grows instead."""
    out = tiledsl("run", "tsqr", "--n", 100, "--nb", 50, "--set", "cols=20", "--check")
    assert out.returncode == 0, out.stderr
    assert re.search(r"\n  least_squares residual \S+  \(pass, threshold 60\)\n", out.stdout), out.stdout


@pytest.mark.timeout(60)
def test_a_seed_given_to_a_run_that_generates_nothing_is_warned_of(tmp_path):
    """--seed with every random matrix given as an input file did nothing, without a word (the GPU
    settings that do nothing are warned of)."""
    np.save(tmp_path / "a.npy", np.eye(100) * 4)
    out = tiledsl("run", "programs/cholesky.tile", "--input", f"A={tmp_path / 'a.npy'}", "--nb", 64, "--seed", 7)
    assert out.returncode == 0 and out.stderr == (
        "tiledsl: warning: --seed 7 does nothing: cholesky generates no matrix at random here (its random matrices "
        "are given as inputs, or it has none)\n"), out.stderr
    out = tiledsl("run", "programs/cholesky.tile", "--n", 100, "--nb", 64, "--seed", 7)  # its A generated
    assert out.returncode == 0 and out.stderr == "", out.stderr


@pytest.mark.timeout(60)
def test_the_json_summary_names_the_seed_the_window_and_the_priorities_in_force(tmp_path):
    """Two summaries that differ tell whether their inputs did (tester m64: the seed was in none)."""
    np.save(tmp_path / "a.npy", np.eye(100) * 4)
    runs = [("--n", 100), ("--n", 100, "--seed", 7, "--window", 9, "--priorities", "auto"),
            ("--input", f"A={tmp_path / 'a.npy'}", "--priorities", "none")]
    said = [json.loads(tiledsl("run", "cholesky", "--nb", 64, "--json", *args).stdout.splitlines()[-1]) for args in runs]
    assert [(s["seed"], s["window"], s["priorities"]) for s in said] == [
        (42, 4096, "program"), (7, 9, "derived"), (None, 4096, "none")]


@pytest.mark.timeout(60)
def test_a_broadcast_on_one_rank_and_a_slice_width_of_one_slice_are_warned_of():
    """--broadcast tree on one rank and --b where s = 1 changed nothing, without a word."""
    out = tiledsl("run", "hetero_cholesky", "--n", 300, "--B", 100, "--b", 40, "--s", 1, "--broadcast", "tree")
    assert out.returncode == 0 and out.stderr == (
        "tiledsl: warning: --broadcast tree does nothing on one rank: no tile is sent\n"
        "tiledsl: warning: --b 40 does nothing with s=1: each block column is one slice, B=100 wide\n"), out.stderr


@pytest.mark.timeout(60)
def test_a_parameter_given_a_file_is_told_how_parameters_are_given():
    """--input m=A.npy said "no matrix named m" where --set A=3 and run(m=5) point to the right place."""
    out = tiledsl("run", "gemm", "--n", 10, "--input", "m=A.npy")
    assert (out.returncode, out.stderr) == (2, "tiledsl: error: --input m=...: m is a parameter, not a matrix: give "
                                               "--set m=VALUE\n")
    out = tiledsl("run", "gemm", "--n", 10, "--output", "k=k.npy")
    assert (out.returncode, out.stderr) == (2, "tiledsl: error: --output k=...: k is a parameter, not a matrix: its "
                                               "value is in --json\n")


def test_ranks_crowding_this_machines_cores_are_said_before_they_start(monkeypatch):
    """--np 1000 on 2 cores ran for minutes without a word (its ranks still starting)."""
    from tiledsl.commands import cli

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert cli._crowded_cores(8) is None  # four a core: as the suite's --np 4 on 2 cores, nothing said
    assert cli._crowded_cores(1000) == (
        "--np 1000 starts 1000 ranks on this machine's 2 core(s), over 4 a core: they take long to start and share "
        "the cores (a cluster's ranks on several nodes come from its launcher, --launcher)")


@pytest.mark.parametrize("args, fields", [
    (("simulate", "cholesky", "--n", 400, "--nodes", 4, "--machine", "keeneland", "--bogus"), {"n": 400, "np": 4}),
    (("simulate", "cholesky", "--n", 400, "--bogus"), {"n": 400}),  # np only with --nodes
    (("run", "cholesky", "--n", 400, "--np", 2, "--bogus"), {"n": 400, "np": 2}),
    (("run", "cholesky", "--bogus"), {"n": None, "np": 1}),  # run's default
    (("run", "cholesky", "--n", 400, "--np", "x"), {"n": 400, "np": None}),  # given, and not a number
    (("bench", "cholesky", "--n", 400, "--bogus"), {"n": 400}),
])
def test_a_usage_error_of_the_option_parser_names_the_options_read(args, fields):
    """Tester a61: the parser's failure object had n null and np null (run) or missing (simulate, whose
    --nodes was given), where a usage error found after the options were read names both."""
    out = tiledsl(*args, "--json")
    said = json.loads(out.stdout)
    assert out.returncode == 2 and list(said) == ["program", "n", *(["np"] if "np" in fields else []), "ok",
                                                  "passed", "error"], out.stdout
    assert {key: said[key] for key in fields} == fields and said["program"] is None


@pytest.mark.timeout(120)
def test_a_program_named_through_a_symlinked_folder_and_dots_uses_the_files_beside_the_file_read(tmp_path):
    """Tester h63: `L/../proj/p.tile`, L a link to a/b/c, read a/b/proj/p.tile (as the system does) but took
    proj/'s kernel module and data (the path normalised by its words): another program's, exit 0."""
    (tmp_path / "a/b/c").mkdir(parents=True)
    (tmp_path / "L").symlink_to(tmp_path / "a/b/c")
    for folder, factor, n in ((tmp_path / "proj", 2.0, 16), (tmp_path / "a/b/proj", 10.0, 8)):
        folder.mkdir()
        (folder / "k.py").write_text(f"def scale(A):\n    A *= {factor}\n")
        np.save(folder / "y.npy", np.ones((n, n)))
        (folder / "p.tile").write_text('use "k.py"\nkernel scale(inout A)\nprogram p {\n  tiling uniform(nb = 8)\n'
                                       '  matrix Y[n, n] = load "y.npy"\n  scale(Y[0, 0])\n}\n')
    out = tiledsl("run", "L/../proj/p.tile", "--output", "Y=out.npy", cwd=tmp_path)
    assert out.returncode == 0 and "changed" not in out.stderr, out.stderr
    assert np.array_equal(np.load(tmp_path / "out.npy"), np.full((8, 8), 10.0))
    out = tiledsl("compile", "L/../proj/p.tile", "-o", "d.py", cwd=tmp_path)
    ran = subprocess.run([sys.executable, tmp_path / "d.py", "--output", f"Y={tmp_path / 'out2.npy'}"],
                         cwd="/", capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0 and "changed" not in ran.stderr, ran.stderr
    assert np.array_equal(np.load(tmp_path / "out2.npy"), np.full((8, 8), 10.0))


@pytest.mark.timeout(120)
def test_a_value_argument_a_run_refuses_is_refused_by_explain_graph_and_simulate_too(tmp_path):
    """explain listed x = nan, graph drew it and simulate timed it, where run stops at the call (tester r66)."""
    (tmp_path / "k.py").write_text("def logv(A, i, x):\n    pass\n")
    (tmp_path / "ov.tile").write_text('use "k.py"\nkernel logv(inout A, int i, float x) flops 0\nprogram ov {\n'
                                      "  tiling uniform(nb = 50)\n  param f = 0.5\n  matrix A[n, n] = random general\n"
                                      "  for k in 0 .. A.mt { logv(A[k, k], k, f * 1.0e308 * 10.0 * k) }\n}\n")
    said = ("kernel logv's float argument x = nan is not a finite number (float64 reaches about ±1.8e308): "
            "check its formula (in `logv(A[k, k], k, f * 1e+308 * 10.0 * k)`, with f = 0.5, k = 0)")
    for command in (("explain",), ("graph", "-o", tmp_path / "g.dot"), ("simulate", "--nodes", 2, "--machine",
                                                                         "keeneland"), ("run",)):
        out = tiledsl(*command[:1], "ov.tile", "--n", 100, *command[1:], cwd=tmp_path)
        place = "rank 0 (ov.tile:7): " if command == ("run",) else "ov.tile:7: "  # (run says the rank)
        assert out.returncode == 1 and out.stderr == f"tiledsl: error: {place}{said}\n", (command, out.stderr)
    assert not (tmp_path / "g.dot").exists()
