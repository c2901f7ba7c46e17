"""tiledsl bench's references (tiledsl.commands.bench): the chunk sizes dask is compared at, the note
where it has none, and a kernel module that fails to import said as run says it."""
import importlib.util
import json
import re
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tiledsl.commands.bench import dask_chunks, render, run_bench
from tiledsl.compiler import compile_path
from tiledsl.driverload import import_driver
from tiledsl.runtime import Options

ROOT = Path(__file__).resolve().parents[2]


def tiledsl(*args, cwd):
    env = {k: v for k, v in os.environ.items() if k != "TILEDSL_DEBUG"}
    return subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=100)


def test_dask_is_timed_at_square_chunks_that_divide_n():
    """dask's Cholesky and LU refuse a ragged last chunk: at n = 1000, chunks of 512 were an
    internal error of bench wherever dask is installed."""
    assert dask_chunks(1000) == [500]
    assert dask_chunks(1536) == [512, 768]
    assert dask_chunks(4096) == [512, 1024, 2048]
    assert dask_chunks(997) == [] and dask_chunks(256) == []  # a prime order; an order below every chunk
    assert all(n % chunk == 0 and chunk < n for n in range(64, 3000, 37) for chunk in dask_chunks(n))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n, note", [
    (601, "dask is not timed: no chunk size from 64 to 600 divides n = 601 (dask's Cholesky and LU take square "
          "chunks only: give sizes with such a divisor to compare with it)"),
    (200, "dask is not timed: its chunks are about 512, 1024, 2048 and n = 200 is not above the smallest (a single "
          "chunk is no blocked factorization to compare with)"),
])
def test_bench_says_why_dask_is_not_timed_at_an_n_it_has_no_chunks_for(tmp_path, n, note):
    """With dask installed, a prime n had no dask row and no note (a missing dask had one); without
    dask the note says it is missing too (it read as if a larger n would time it)."""
    _, text = compile_path(ROOT / "programs/cholesky.tile")
    (tmp_path / "driver.py").write_text(text)
    driver = import_driver(tmp_path / "driver.py", f"bench_no_chunks_{n}")
    table = run_bench(driver, Options(n=n, tiles={"nb": 128}, workers=1), rounds=1)
    assert [row["name"] for row in table["rows"]] == ["tiledsl", "scipy dpotrf (1 thread)"]
    missing = "" if importlib.util.find_spec("dask") else " (it is not installed either)"
    assert table["notes"][:1] == [note + missing] and table["best_dask"] is None


@pytest.mark.timeout(120)
def test_bench_says_a_kernel_module_that_fails_to_import_as_run_does(tmp_path):
    """bench called it an internal error (exit 3, 'please report it') and printed no --json object."""
    (tmp_path / "k.py").write_text("import numpy as np\nimport my_helperz\n\ndef scal(A, alpha):\n    A *= alpha\n")
    (tmp_path / "uk.tile").write_text('use "k.py"\nkernel scal(inout A, float alpha = 2.0) flops A.m * A.n\n'
                                      "program uk {\n  tiling uniform(nb = 64)\n  matrix A[n, n] = random general\n"
                                      "  for i in 0 .. A.mt { for j in 0 .. A.nt { scal(A[i, j]) } }\n}\n")
    said = "rank 0: kernel module k.py:2: ModuleNotFoundError: No module named 'my_helperz'"
    run = tiledsl("run", "uk.tile", "--n", 100, cwd=tmp_path)
    assert run.returncode == 1 and run.stderr == f"tiledsl: error: {said}\n", run.stderr
    bench = tiledsl("bench", "uk.tile", "--n", 100, cwd=tmp_path)
    assert (bench.returncode, bench.stderr, bench.stdout) == (1, run.stderr, "")
    bench = tiledsl("bench", "uk.tile", "--n", 100, "--json", cwd=tmp_path)
    assert bench.returncode == 1 and bench.stderr == run.stderr
    assert json.loads(bench.stdout) == {"program": "uk", "n": 100, "ok": False, "passed": None, "error": said}


@pytest.mark.timeout(120)
def test_bench_fails_when_a_kernels_thread_ends_the_process(tmp_path):
    """A stray os._exit(0) ended bench with status 0 and nothing printed: a false success."""
    (tmp_path / "bk.py").write_text("import os, threading\n\ndef touch(A):\n"
                                    "    threading.Thread(target=lambda: os._exit(0)).start()\n    A += 0.0\n")
    (tmp_path / "b.tile").write_text('use "bk.py"\nkernel touch(inout A)\nprogram b {\n  tiling uniform(nb = 100)\n'
                                     "  matrix A[n, n] = random general\n  touch(A[0, 0])\n}\n")
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "bench", "b.tile", "--n", "200", "--rounds",
                          "1", "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=100)
    said = ("rank 0: os._exit(0) called at bk.py:4, outside any task of the run (in Thread-1 (<lambda>)): the run did "
            "not finish")
    assert out.returncode == 1 and f"tiledsl: error: {said}" in out.stderr, out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["error"] == said


@pytest.mark.timeout(60)
def test_bench_takes_run_s_watchdog_for_its_runs():
    """bench refused --watchdog (unrecognized arguments), which a stall's report advised: a kernel that
    never returns held it for the automatic limit, a minute at least."""
    began = time.monotonic()
    out = tiledsl("bench", "tests/runtime/programs/faults.tile", "--n", 256, "--set", "fault=2", "--watchdog", 1,
                  cwd=ROOT)
    assert out.returncode == 1 and time.monotonic() - began < 30, out.stderr
    assert re.match(r"tiledsl: error: rank 0 \(faults.tile:20\): watchdog: no task completed for 1\.\d s; ",
                    out.stderr), out.stderr
    refused = tiledsl("bench", "tests/runtime/programs/faults.tile", "--watchdog", -1, cwd=ROOT)
    assert refused.returncode == 2 and "argument --watchdog: must be 0 (off) or a number of seconds" in refused.stderr


@pytest.mark.timeout(120)
def test_bench_takes_run_s_options_for_nonfinite_results(tmp_path):
    """Its error about an infinity left in a matrix advised --allow-nonfinite, which bench refused
    ('unrecognized arguments'): a program whose results hold infinities (shortest paths) could not be benched."""
    _scaling_with_infinities(tmp_path, [(3, 4)])
    args = ("bench", "uk.tile", "--input", "A=a.npy", "--rounds", 1, "--json")
    failed = tiledsl(*args, cwd=tmp_path)
    assert failed.returncode == 1 and "; --allow-nonfinite takes them for results" in failed.stderr, failed.stderr
    allowed = tiledsl(*args, "--allow-nonfinite", cwd=tmp_path)
    assert allowed.returncode == 0 and allowed.stderr == "", allowed.stderr
    assert json.loads(allowed.stdout)["ok"] is True
    checked = tiledsl(*args, "--check-finite", cwd=tmp_path)
    assert checked.returncode == 1 and "(--check-finite refuses non-finite inputs)" in checked.stderr, checked.stderr
    both = tiledsl(*args, "--check-finite", "--allow-nonfinite", cwd=tmp_path)
    assert both.returncode == 2 and "--allow-nonfinite and --check-finite contradict each other" in both.stderr


@pytest.mark.timeout(120)
def test_dask_is_judged_by_the_order_of_the_matrix_the_check_names_not_by_n(tmp_path, monkeypatch):
    """A[half, half] with half = n // 2: bench timed dask at chunks of 500 on a 500×500 matrix (one chunk, no
    blocked factorization), where a shipped program of that order says why dask is not timed."""
    import tiledsl.commands.bench as bench

    program = ROOT / "programs/cholesky.tile"
    text = program.read_text().replace("program cholesky {", "program half {\n  param half = n // 2")
    (tmp_path / "half.tile").write_text(text.replace("matrix A[n, n]", "matrix A[half, half]"))
    _, text = compile_path(tmp_path / "half.tile")
    (tmp_path / "half.py").write_text(text)
    driver = import_driver(tmp_path / "half.py", "bench_half")
    chunked = []
    monkeypatch.setattr(bench, "_dask", lambda reference, chunk, workers: chunked.append(chunk))
    table = run_bench(driver, Options(n=1000, tiles={"nb": 100}, workers=1), rounds=1)
    assert chunked == [] and table["rows"][1]["name"] == "scipy dpotrf (1 thread)"
    assert any(note.startswith("dask is not timed: its chunks are about 512, 1024, 2048 and the order of A = 500 "
                               "is not above the smallest (a single chunk is no blocked factorization to compare "
                               "with)") for note in table["notes"])


def test_a_spread_of_rounds_advises_one_worker_only_where_there_were_more():
    from tiledsl.commands.bench import Measure, _spread_notes

    measure = Measure("tiledsl")
    measure.times = [0.001, 0.01]
    assert _spread_notes([measure], 2)[0].endswith("its ratio is not reliable (run again, or with --workers 1)")
    assert _spread_notes([measure], 1)[0].endswith("its ratio is not reliable (run again on a quieter machine)")


def test_one_round_each_is_said_to_show_no_spread():
    """--rounds 1 on a busy machine printed 'scipy dgels 80.42x' with no note: one round has no spread to judge."""
    from tiledsl.commands.bench import Measure, _spread_notes

    ours, theirs = Measure("tiledsl"), Measure("scipy dgels")
    ours.times, theirs.times = [0.0152], [1.2237]
    assert _spread_notes([ours, theirs], 2) == ["one round each: a busy machine, or threads waiting for cores, would "
                                                "not show, and the ratios may be far off (--rounds 3 shows the spread)"]
    assert _spread_notes([ours], 2) == []  # no reference: no ratio


@pytest.mark.timeout(120)
def test_more_workers_than_cores_and_one_round_are_said(monkeypatch):
    """Tester y: `--workers 64` on 2 cores gave LAPACK 64 BLAS threads and tiledsl 31x its speed, without a word;
    one round was 'best of 1 alternated rounds'."""
    from tiledsl.api import load
    from tiledsl.commands import bench

    monkeypatch.setattr(bench.os, "cpu_count", lambda: 1)
    table = run_bench(load("cholesky").driver, Options(n=200, tiles={"nb": 100}, workers=2), rounds=1,
                      with_dask=False)
    assert "--workers 2 is more than this machine's 1 cores: tiledsl's workers and the references' 2 BLAS threads " \
           "take turns on them, so the ratios say little of either (--workers 1 compares them on the cores)" \
           in table["notes"]
    assert ", 2 worker(s), one round\n" in render(table)


def test_a_reference_is_timed_with_its_blas_threads_awake(monkeypatch):
    """Tester y: a reference timed right after tiledsl's round (BLAS on one thread) paid the start of its BLAS
    threads: dpotrf at n = 600 took 0.04 to 0.1 s, 0.003 s warm, and --rounds 1 said tiledsl 12x faster."""
    from tiledsl.commands import bench

    woken = []
    monkeypatch.setattr(bench, "_wake_blas", lambda: woken.append(True))
    seconds, info = bench._timed(lambda a: 0, [np.eye(4)], 2, {})
    assert woken == [True] and info == 0 and seconds >= 0


@pytest.mark.timeout(120)
def test_bench_says_the_values_allowed_to_be_nonfinite_as_run_does(tmp_path):
    """With --allow-nonfinite, run counts the infinities its results hold; bench said nothing of them."""
    _scaling_with_infinities(tmp_path, [(3, 4), (5, 6)])
    args = ("bench", "uk.tile", "--input", "A=a.npy", "--rounds", 1, "--allow-nonfinite")
    assert json.loads(tiledsl(*args, "--json", cwd=tmp_path).stdout)["nonfinite"] == {"A": 2}
    assert "nonfinite A: 2 NaN or infinite value(s)" in tiledsl(*args, cwd=tmp_path).stdout


def _scaling_with_infinities(folder, where: list) -> None:
    """uk.tile, a user kernel scaling every tile of A, and a.npy: its 128×128 input of ones with an
    infinity at each of ``where`` (which the scaling leaves infinite)."""
    import numpy as np

    (folder / "k.py").write_text("def scal(A, alpha):\n    A *= alpha\n")
    (folder / "uk.tile").write_text('use "k.py"\nkernel scal(inout A, float alpha = 2.0) flops A.m * A.n\n'
                                    "program uk {\n  tiling uniform(nb = 64)\n  matrix A[n, n] = random general\n"
                                    "  for i in 0 .. A.mt { for j in 0 .. A.nt { scal(A[i, j]) } }\n}\n")
    a = np.ones((128, 128))
    for i, j in where:
        a[i, j] = np.inf
    np.save(folder / "a.npy", a)


_UNCOUNTED = """use "k.py"
kernel add(in X, inout Y)
kernel tiny(inout Y) flops 1.0
program t {
  tiling uniform(nb = 50)
  in matrix X[n, n] = random general
  matrix Y[n, n] = random general
  check chk(X, Y)
  for i in 0 .. Y.mt { for j in 0 .. Y.nt { KERNEL } }
}
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kernel, rate, note", [
    ("add(X[i, j], Y[i, j])", r"-", "no GFLOP/s: kernel add declares no flop count"),
    ("tiny(Y[i, j])", r"[0-9.]+e-0[0-9]", None),
])
def test_bench_says_a_failed_check_and_a_missing_or_tiny_rate_as_run_does(tmp_path, kernel, rate, note):
    """A check that raised was 'residual nan (FAIL: the timings are of a wrong result)'; a rate of
    4e-06 GFLOP/s was '0.00', and none a bare '-' without run's reason."""
    (tmp_path / "k.py").write_text("def add(X, Y):\n    Y += X\n\ndef tiny(Y):\n    pass\n\n"
                                   "def chk(before, after):\n    raise RuntimeError('boom')\n")
    (tmp_path / "t.tile").write_text(_UNCOUNTED.replace("KERNEL", kernel))
    _, text = compile_path(tmp_path / "t.tile")
    (tmp_path / "driver.py").write_text(text)
    table = run_bench(import_driver(tmp_path / "driver.py", f"bench_rate_{kernel[:3]}"),
                      Options(n=100, workers=1, check=True), rounds=1, with_dask=False)
    shown = render(table)
    assert re.search(rf"^tiledsl +[0-9.]+ +{rate} +1.00x$", shown, re.MULTILINE), shown
    assert "\ntiledsl no residual (FAIL: the check failed, see below)\n" in shown and "residual nan" not in shown
    assert (f"note: {note}" in shown) if note else "no GFLOP/s" not in shown, shown
    # the count behind the rate is said (tester z80f: only the standard counts were)
    basis = None if note else "from the kernels' flop counts"
    assert table["flops_basis"] == basis and (f"\nGFLOP/s: {basis}, over each time\n" in shown) == bool(basis), shown


@pytest.mark.timeout(60)
def test_a_singular_input_is_timed_by_lapack_and_warned_of_as_run_does(tmp_path):
    """A zero column: dgetrf's info > 0 (an exactly zero U(i, i), the factorization complete) made its row
    'failed', and tiledsl's warning that the matrix is singular, which run gives, was left out."""
    import numpy as np

    a = np.random.default_rng(5).standard_normal((200, 200))
    a[:, -1] = 0.0
    np.save(tmp_path / "a.npy", a)
    _, text = compile_path(ROOT / "programs/getrf.tile")
    (tmp_path / "driver.py").write_text(text)
    table = run_bench(import_driver(tmp_path / "driver.py", "bench_singular"),
                      Options(n=200, tiles={"nb": 64}, workers=1, inputs={"A": str(tmp_path / "a.npy")}),
                      rounds=1, with_dask=False)
    assert [row.get("failed") for row in table["rows"]] == [None, None] and table["rows"][1]["seconds"] > 0
    assert any(note.endswith("U(7, 7) of the matrix it was given is exactly zero: the matrix is singular")
               for note in table["notes"]), table["notes"]


@pytest.mark.timeout(60)
def test_dask_is_left_out_of_a_rectangular_factorization_saying_why(tmp_path):
    """An LU of a 1300×500 matrix: dask.array.linalg.lu raised 'Input must be a square matrix', an internal
    error of bench wherever dask is installed."""
    text = (ROOT / "programs/lu.tile").read_text().replace("matrix A[n, n]", "param m = 300\n  matrix A[m, n]")
    (tmp_path / "lur.tile").write_text(text)
    _, driver_text = compile_path(tmp_path / "lur.tile")
    (tmp_path / "driver.py").write_text(driver_text)
    table = run_bench(import_driver(tmp_path / "driver.py", "bench_rectangular"),
                      Options(n=200, tiles={"nb": 100}, sets={"m": 1100}, workers=1), rounds=1)
    assert [row["name"] for row in table["rows"]] == ["tiledsl", "scipy dgetrf (1 thread)"]
    assert any(note.startswith("dask is not timed: its factorizations take square matrices, and A is 1100×200")
               for note in table["notes"])


@pytest.mark.timeout(60)
def test_a_tiny_time_or_speed_up_is_said_in_digits_not_as_zero(tmp_path):
    """A reference's 2.7e-05 s at n = 7 was '0.0000' s, its ratio 0.004 '0.00x': no time, no speed."""
    _, text = compile_path(ROOT / "programs/cholesky.tile")
    (tmp_path / "driver.py").write_text(text)
    table = run_bench(import_driver(tmp_path / "driver.py", "bench_tiny"), Options(n=7, tiles={"nb": 3}, workers=1),
                      rounds=1, with_dask=False)
    table["rows"][1].update(seconds=2.7e-05, ratio=0.004)
    row = next(line for line in render(table).splitlines() if line.startswith("scipy dpotrf"))
    assert " 2.7e-05 " in row and row.endswith(" 0.004x") and "0.0000" not in row, row


# the part of its result that a program's reference leaves, in place, in its matrix of that index
RESULTS = {"gemm": (0, np.asarray), "syrk": (0, np.tril), "trmm": (0, np.asarray), "trtri": (0, np.tril),
           "potri": (0, np.tril), "posv": (1, np.asarray), "gesv": (1, np.asarray)}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("program", list(RESULTS))
def test_dask_computes_what_the_lapack_reference_computes(tmp_path, program):
    """Products, solves and inverses have a dask row (only factorizations had one): dask's result
    is the one scipy's routine leaves in place, on the same inputs and options."""
    da = pytest.importorskip("dask.array")
    from tiledsl.commands.bench import inputs_of, reference_of
    from tiledsl.runtime.layout import make_params

    _, text = compile_path(ROOT / f"programs/{program}.tile")
    (tmp_path / "driver.py").write_text(text)
    driver = import_driver(tmp_path / "driver.py", f"bench_dask_{program}")
    options = Options(n=300, tiles={"nb": 64}, sets={"nrhs": 70} if program in ("posv", "gesv") else {}, workers=1)
    reference, names, check_options = reference_of(driver.PROGRAM, make_params(driver, options))
    matrices = [np.array(a, order="F") for a in (inputs_of(driver, options)[name] for name in names)]
    made = reference.dask[1](da, *(da.from_array(m, chunks=100) for m in matrices), **check_options).compute()
    reference.run(*matrices, **check_options)
    index, part = RESULTS[program]
    assert np.allclose(part(made), part(matrices[index]), rtol=1e-9, atol=1e-9 * np.abs(matrices[index]).max())


@pytest.mark.parametrize("words", [(), ("transposed",), ("lower",), ("upper", "transposed"), ("lower", "unit"),
                                   ("upper", "unit", "transposed"), ("symmetric",), ("symmetric", "upper")])
def test_a_dask_operand_is_the_matrix_the_qualifiers_name(words):
    da = pytest.importorskip("dask.array")
    from tiledsl.commands.bench import Operand

    m = np.arange(1.0, 50.0).reshape(7, 7)
    expected = {(): m, ("transposed",): m.T, ("lower",): np.tril(m), ("upper", "transposed"): np.triu(m).T,
                ("lower", "unit"): np.tril(m, -1) + np.eye(7), ("upper", "unit", "transposed"): (np.triu(m, 1)
                                                                                                + np.eye(7)).T,
                ("symmetric",): np.tril(m) + np.tril(m, -1).T, ("symmetric", "upper"): np.triu(m) + np.triu(m, 1).T}
    assert np.array_equal(Operand.of(words).of_dask(da, da.from_array(m, chunks=3)).compute(), expected[words])


def test_bench_names_each_residual_of_a_check_that_gives_several():
    """bench printed the largest of a check's residuals without its name (tester a58: qr's or a user check's)."""
    table = {"program": "p", "n": 10, "tiles": {"nb": 5}, "params": {}, "sources": {"nb": "command line"},
             "workers": 1, "rounds": 1, "residual": 0.4,
             "rows": [{"name": "tiledsl", "seconds": 0.5, "gflops": 1.0, "ratio": 1.0}], "passed": True, "errors": [], "nonfinite": {},
             "notes": [], "residuals": {"qr": 0.03, "orthogonality": 0.4}}
    lines = [line for line in render(table).splitlines() if "residual" in line]
    assert lines == ["tiledsl qr residual 0.03 (pass, threshold 60)",
                     "tiledsl orthogonality residual 0.4 (pass, threshold 60)"]


@pytest.mark.timeout(200)
def test_an_lu_without_pivots_is_said_to_be_timed_against_a_pivoting_dgetrf(tmp_path):
    """Tester z60: an LU without pivoting was timed against dgetrf, which pivots, with nothing said."""
    notes = {}
    for program in ("lu", "getrf"):
        (tmp_path / f"{program}.py").write_text(compile_path(ROOT / f"programs/{program}.tile")[1])
        driver = import_driver(tmp_path / f"{program}.py", f"bench_pivots_{program}")
        table = run_bench(driver, Options(n=96, tiles={"nb": 32}, workers=1), rounds=1, with_dask=False)
        notes[program] = [note for note in table["notes"] if "pivot" in note]
    assert notes == {"lu": ["scipy dgetrf pivots rows (partial pivoting); the program's LU does not (check lu(A) "
                            "names no pivots): its row searches and interchanges are dgetrf's own work"],
                     "getrf": []}


@pytest.mark.timeout(60)
def test_a_program_without_a_reference_is_said_with_its_check_as_written_options_included(tmp_path):
    """beta = 0.0 was left out of the check bench quoted (tester k64): the check it named was another one."""
    (tmp_path / "p.tile").write_text("program p {\n  tiling uniform(nb = 16)\n  param b = 0.5\n"
                                     "  matrix A[n, n] = random diagdom\n"
                                     "  check product(upper A, upper A, transposed upper A, alpha = 2.0 * b, beta = 0.0)\n"
                                     '  for k in 0 .. A.nt { lauum(A[k, k], "U") }\n}\n')
    _, text = compile_path(tmp_path / "p.tile")
    (tmp_path / "driver.py").write_text(text)
    table = run_bench(import_driver(tmp_path / "driver.py", "bench_alone"), Options(n=40, workers=1), rounds=1,
                      with_dask=False)
    assert "note: no LAPACK/BLAS routine computes what check product(upper A, upper A, transposed upper A, alpha = 1, " \
           "beta = 0) verifies: tiledsl is timed alone" in render(table)
