"""The library of programs under programs/: each passes its own check and agrees with
scipy at ragged sizes, on 1 rank, on 1 and 2 emulated GPUs and on 4 ranks (2x2, or the
default grid, 1x4 for programs of column tasks: real ``tiledsl run --np 4`` jobs), with
every output bitwise the same; and the routine
``tiledsl bench`` measures each new program against computes the same result.

Sizes are small and ragged (n = 301 on 64-wide tiles, the shapes of the products and
right-hand sides all different), so that the whole file stays fast: the 1-rank and
GPU runs are in-process, and each new program starts one MPI job, on 2x2 or on its
default grid in turn (the default grid of each is checked in-process). The shipped
programs that predate the library run on 1 rank and on GPUs only
(tests/runtime/test_mpi.py runs them on several grids).
"""
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import pytest
import scipy.linalg

from tiledsl.commands.bench import inputs_of, reference_of, render, run_bench
from tiledsl.compiler import compile_path
from tiledsl.driverload import import_driver
from tiledsl.runtime import Options, execute
from tiledsl.runtime.layout import make_distribution, make_matrices, make_params, placement
from tiledsl.runtime.recording import record

ROOT = Path(__file__).resolve().parents[2]
N = 301


def _relative(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def _getrf(inputs, out, params):
    """LAPACK's own result: the same L\\U to rounding and the same pivots as scipy's lu_factor."""
    lu, piv = scipy.linalg.lu_factor(inputs["A"])
    nb, n = params["nb"], params["n"]
    pivots = np.concatenate([out["P"][k, k * nb:(k + 1) * nb] + k * nb for k in range(-(-n // nb))])
    assert np.array_equal(pivots, piv)
    assert _relative(out["A"], lu) < 1e-13


def _solution(assume):
    def compare(inputs, out, params):
        expected = scipy.linalg.solve(inputs["A"], inputs["B"], assume_a=assume)
        assert _relative(out["B"], expected) < 1e-12
    return compare


def _trtri(inputs, out, params):
    assert _relative(np.tril(out["A"]), np.linalg.inv(np.tril(inputs["A"]))) < 1e-13
    assert np.array_equal(np.triu(out["A"], 1), np.triu(inputs["A"], 1))  # never touched


def _potri(inputs, out, params):
    assert _relative(np.tril(out["A"]), np.tril(np.linalg.inv(inputs["A"]))) < 1e-12


def _gemm(inputs, out, params):
    assert _relative(out["C"], inputs["C"] + inputs["A"] @ inputs["B"]) < 1e-14


def _syrk(inputs, out, params):
    expected = inputs["C"] - inputs["A"] @ inputs["A"].T
    assert _relative(np.tril(out["C"]), np.tril(expected)) < 1e-14
    assert np.array_equal(np.triu(out["C"], 1), np.triu(inputs["C"], 1))


def _trmm(inputs, out, params):
    assert _relative(out["B"], np.tril(inputs["A"]) @ inputs["B"]) < 1e-14


def _tsqr(inputs, out, params):
    expected = scipy.linalg.lstsq(inputs["A"], inputs["B"])[0]
    assert _relative(out["B"][:params["cols"]], expected) < 1e-12


def _qr(inputs, out, params):
    """R agrees with LAPACK's to the signs of its rows; the strict lower triangle holds reflectors."""
    expected = scipy.linalg.qr(inputs["A"], mode="r")[0]
    assert _relative(np.abs(np.triu(out["A"])), np.abs(expected)) < 1e-12


class Case(NamedTuple):
    tiles: dict  # tile settings
    sets: dict  # --set parameters
    compare: Callable | None = None  # compare(inputs, outputs, params): asserts agreement with scipy
    reference: str | None = None  # the routine tiledsl bench runs against it


NEW = {"getrf": Case({"nb": 64}, {}, _getrf, "dgetrf"),
       "gesv": Case({"nb": 64}, {"nrhs": 70}, _solution("gen"), "dgesv"),
       "posv": Case({"nb": 64}, {"nrhs": 70}, _solution("pos"), "dposv"),
       "trtri": Case({"nb": 64}, {}, _trtri, "dtrtri"),
       "potri": Case({"nb": 64}, {}, _potri, "dpotrf+dpotri"),
       "gemm": Case({"nb": 64}, {"m": 250, "k": 170}, _gemm, "dgemm"),
       "syrk": Case({"nb": 64}, {"k": 170}, _syrk, "dsyrk"),
       "trmm": Case({"nb": 64}, {"nrhs": 70}, _trmm, "dtrmm"),
       # 5 tile rows, 2 domains: chains of 2 and 3 tiles, their merge, and a short last tile row
       "tsqr": Case({"nb": 64}, {"cols": 90, "nrhs": 5, "domains": 2}, _tsqr, "dgels"),
       # 5 tile rows, 2 domains: chains of 2 and 3 tiles, then the merge of their R factors
       "hqr": Case({"nb": 64}, {"domains": 2}, _qr, "dgeqrf")}
SHIPPED = {"cholesky": Case({"nb": 64}, {}), "lu": Case({"nb": 64}, {}), "qr": Case({"nb": 64}, {}),
           "hetero_cholesky": Case({"B": 160, "b": 48, "s": 3}, {}),
           "hetero_qr": Case({"B": 160, "b": 48, "s": 3}, {})}
PROGRAMS = {**NEW, **SHIPPED}
SQUARE_BY_DEFAULT = {"tsqr", "hqr"}  # they write no panel: the others' column tasks get a 1x4 grid
# ...where it gives most ranks a task: trmm's B has 2 tile columns (nrhs = 70), 2 ranks computing on 1x4
SQUARE_BY_TASKS = {"trmm"}
# the grid of each new program's 4-rank job (None: its default), column tasks on a square and on a row of
# ranks in turn: on 2x2 the panels of getrf (its pivots too), posv, potri and syrk cross process rows; gesv,
# trtri and gemm run on the row of ranks they get by default; trmm's default is 2x2 (by its tasks), as tsqr's
# and hqr's is (they write no panel)
FOUR_RANKS = {"getrf": "2x2", "gesv": None, "posv": "2x2", "trtri": None, "potri": "2x2", "gemm": None,
              "syrk": "2x2", "trmm": None, "tsqr": "2x2", "hqr": "2x2"}


def test_every_program_is_in_the_library():
    assert sorted(PROGRAMS) == sorted(p.stem for p in (ROOT / "programs").glob("*.tile"))


def _options(program, **options) -> Options:
    case = PROGRAMS[program]
    return Options(n=N, tiles=case.tiles, sets=case.sets, watchdog=60, **options)


def _run(compiled, program, **options):
    result = execute(compiled(f"programs/{program}.tile"), _options(program, check=True, **options))
    assert result.passed, result.residuals
    return result, {name: m.assemble() for name, m in result.matrices.items()}


@pytest.fixture(scope="module")
def one_rank(compiled):
    """one_rank(program) -> (result, outputs) of its checked 1-rank CPU run, made once."""
    runs = {}

    def get(program):
        if program not in runs:
            runs[program] = _run(compiled, program, workers=2)
        return runs[program]
    return get


@pytest.mark.timeout(60)
@pytest.mark.parametrize("program", list(PROGRAMS))
def test_one_rank_passes_its_check_and_agrees_with_scipy(compiled, one_rank, program):
    result, outputs = one_rank(program)
    compare = PROGRAMS[program].compare
    if compare:
        compare(inputs_of(compiled(f"programs/{program}.tile"), _options(program)), outputs, result.params)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("gpus, streams", [(1, 1), (2, 3)])
@pytest.mark.parametrize("program", list(PROGRAMS))
def test_emulated_gpus_give_the_same_bits(compiled, one_rank, program, gpus, streams):
    """On 1 GPU of one compute stream, and on 2 of 3 streams each (their order checked: runtime/streams.py)."""
    result, outputs = _run(compiled, program, gpus=gpus, gpu_backend="emulated", gpu_streams=streams)
    assert result.stats["device_copies"] > 0
    expected = one_rank(program)[1]
    for name, matrix in expected.items():
        assert np.array_equal(outputs[name], matrix), name


@pytest.mark.timeout(120)
@pytest.mark.parametrize("program, grid", list(FOUR_RANKS.items()))
def test_four_ranks_give_the_same_bits(compiled, tmp_path, one_rank, program, grid):
    """On the program's grid of FOUR_RANKS; its default grid on 4 ranks, one process row for column
    tasks (2x2 for the others), is the one the ranks place their tiles on (as each does, in this process)."""
    default = (2, 2) if program in SQUARE_BY_DEFAULT | SQUARE_BY_TASKS else (1, 4)
    driver = compiled(f"programs/{program}.tile")
    assert placement(driver, make_params(driver, _options(program)), None, 4, 0, 0)[0] == default
    tiles, sets = NEW[program].tiles, NEW[program].sets
    expected = one_rank(program)[1]
    command = [sys.executable, "-m", "tiledsl.commands.cli", "run", f"programs/{program}.tile", "--np", "4",
               *(["--grid", grid] if grid else []), "--n", str(N), "--check", "--json", "--watchdog", "60"]
    command += [word for k, v in tiles.items() for word in (f"--{k}", str(v))]
    command += [word for k, v in sets.items() for word in ("--set", f"{k}={v}")]
    command += [word for name in expected for word in ("--output", f"{name}={tmp_path / name}.npy")]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["np"] == 4 and summary["passed"], summary["residuals"]
    assert summary["grid"] == ([2, 2] if grid else list(default))
    # on 2x2 every rank sends (column tasks gather from the other process row); on 1x4 a rank may own
    # only tiles that never leave it
    if summary["grid"] == [2, 2]:
        assert all(r["messages_sent"] > 0 for r in summary["ranks"])
    else:
        assert summary["totals"]["messages_sent"] > 0
    for name, matrix in expected.items():
        assert np.array_equal(np.load(tmp_path / f"{name}.npy"), matrix), name


@pytest.mark.timeout(60)
@pytest.mark.parametrize("program", list(NEW))
def test_the_bench_reference_computes_what_the_program_does(compiled, one_rank, program):
    """The routine tiledsl bench times, run on the same inputs, passes the program's own comparison."""
    driver = compiled(f"programs/{program}.tile")
    result, outputs = one_rank(program)
    reference, names, options = reference_of(driver.PROGRAM, result.params)
    assert reference.routine == NEW[program].reference
    inputs = inputs_of(driver, _options(program))
    work = {name: np.array(inputs[name], order="F") for name in names}
    reference.run(*work.values(), **options)
    NEW[program].compare(inputs, {**outputs, **work}, result.params)


@pytest.mark.timeout(60)
def test_bench_reports_the_ratio_against_the_reference(compiled):
    driver = compiled("programs/trmm.tile")
    table = run_bench(driver, _options("trmm", check=True, workers=2), rounds=2, with_dask=False)
    ours, reference = table["rows"]
    assert reference["name"] == "scipy dtrmm (2 threads)" and len(table["rows"]) == 2
    assert reference["ratio"] == pytest.approx(reference["seconds"] / ours["seconds"])
    flops = N * N * NEW["trmm"].sets["nrhs"]  # the kernels' count: n²·nrhs for a triangle times B
    assert ours["gflops"] == pytest.approx(flops / ours["seconds"] / 1e9, rel=0.05)
    assert table["residual"] < 60


@pytest.mark.timeout(60)
def test_getrf_fails_its_check_without_the_swaps_of_the_left_columns(tmp_path):
    text = (ROOT / "programs/getrf.tile").read_text()
    left = "    for j in 0 .. k {\n      laswp(P[k, k], A[k : A.mt, j])\n    }\n"
    assert left in text
    (tmp_path / "getrf.tile").write_text(text.replace(left, ""))
    _, driver_text = compile_path(tmp_path / "getrf.tile")
    (tmp_path / "driver.py").write_text(driver_text)
    driver = import_driver(tmp_path / "driver.py", "getrf_without_left_swaps")
    result = execute(driver, _options("getrf", check=True, workers=2))
    assert result.residuals["lu"] > 1e3


@pytest.mark.timeout(60)
@pytest.mark.parametrize("dropped, residual", [
    ("          ttmqrt(A[t, k], T2[t, k], A[k, j], A[t, j]) priority 2 * (A.nt - k)\n", "qr"),
    ("                tpmqrt(A[i, k], T[i, k], A[t, j], A[i, j]) priority A.nt - j\n", "qr"),
])
def test_hqr_fails_its_check_without_either_levels_updates(tmp_path, dropped, residual):
    """check qr replays ttqrt's reflectors as well as geqrt's and tpqrt's: the check sees
    a missing update of either level of the tree."""
    text = (ROOT / "programs/hqr.tile").read_text()
    assert dropped in text
    (tmp_path / "hqr.tile").write_text(text.replace(dropped, ""))
    _, driver_text = compile_path(tmp_path / "hqr.tile")
    (tmp_path / "driver.py").write_text(driver_text)
    driver = import_driver(tmp_path / "driver.py", f"hqr_without_{len(dropped)}")
    result = execute(driver, _options("hqr", check=True, workers=2))
    assert result.residuals[residual] > 1e3


@pytest.mark.timeout(60)
@pytest.mark.parametrize("check, routine, names", [
    ("inverse(symmetric A, X)", "dpotrf+dpotri", ["A"]),  # X the result, a matrix of its own
    ("solve(A, X, B)", "dgesv", ["A", "B"]),
    ("solve(A, B, B)", "dgesv", ["A", "B"]),
    ("solve(symmetric A, X, B)", "dposv", ["A", "B"]),
    ("solve(lower A, B, B)", "dtrsm", ["A", "B"]),
    ("solve(transposed upper A, X, B)", "dtrsm", ["A", "B"]),
    ("inverse(upper A, A)", "dtrtri", ["A"]),
    ("inverse(A, X)", "dgetrf+dgetri", ["A"]),
])
def test_the_bench_reference_takes_the_checks_inputs_wherever_the_result_is(tmp_path, check, routine, names):
    """The reference of a solve or an inverse takes A (and B): the result X may be a matrix
    of its own, which the routine does not take."""
    (tmp_path / "p.tile").write_text(
        "program p { matrix A[n, n] = random spd  matrix X[n, n] = identity  matrix B[n, n] = random general\n"
        f"  check {check}\n  for k in 0 .. A.nt {{ potrf(A[k, k])  potrf(X[k, k])  potrf(B[k, k]) }} }}\n")
    _, text = compile_path(tmp_path / "p.tile")
    (tmp_path / "driver.py").write_text(text)
    reference, found, _ = reference_of(import_driver(tmp_path / "driver.py", f"bench_{routine}").PROGRAM, {"n": 8})
    assert (reference.routine, found) == (routine, names)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("check, note", [
    ("", "no reference to time against: the program declares no check (a check says what it computes)"),
    ("check lu(A)", None),
])
def test_bench_says_why_tiledsl_is_timed_alone(tmp_path, check, note):
    (tmp_path / "p.tile").write_text(
        "program p { tiling uniform(nb = 50)  matrix A[n, n] = random spd  matrix X[n, n] = identity\n"
        f"  {check}\n  for k in 0 .. A.nt {{ potrf(A[k, k])  potrf(X[k, k]) }} }}\n")
    _, text = compile_path(tmp_path / "p.tile")
    (tmp_path / "driver.py").write_text(text)
    driver = import_driver(tmp_path / "driver.py", f"bench_alone_{len(check)}")
    table = run_bench(driver, Options(n=100, workers=1), rounds=1, with_dask=False)
    assert [said for said in table["notes"] if not said.startswith(("one round each", "scipy dgetrf pivots"))] == \
        ([note] if note else [])
    assert len(table["rows"]) == (1 if note else 2)


def test_the_general_inverse_reference_inverts_in_place():
    from tiledsl.commands.bench import Operand, _inverse_reference, lapack_info

    a = np.asfortranarray(np.random.default_rng(3).standard_normal((70, 70)) + 20 * np.eye(70))
    work = a.copy(order="F")
    assert lapack_info(_inverse_reference(Operand.of(())).run(work)) == 0
    assert np.allclose(work @ a, np.eye(70), atol=1e-12)
    assert lapack_info(_inverse_reference(Operand.of(())).run(np.zeros((5, 5), order="F"))) == 1  # singular: dgetrf's info


@pytest.mark.timeout(60)
def test_a_reference_that_fails_on_the_inputs_is_no_timing(tmp_path):
    """dposv on a matrix that is not positive definite returns info > 0 at once: its row says it
    failed rather than showing a time far below tiledsl's."""
    (tmp_path / "p.tile").write_text(
        "program p { tiling uniform(nb = 50)  matrix A[n, n] = random general  matrix B[n, n] = random general\n"
        "  check solve(symmetric A, B, B)\n  for k in 0 .. B.nt { trsm(A[k, k], B[k, k]) } }\n")
    _, text = compile_path(tmp_path / "p.tile")
    (tmp_path / "driver.py").write_text(text)
    table = run_bench(import_driver(tmp_path / "driver.py", "bench_failing"), Options(n=100, workers=1), rounds=1,
                      with_dask=False)
    tiled, reference = table["rows"]
    assert tiled["seconds"] > 0 and reference["name"] == "scipy dposv (1 thread)"
    assert reference["seconds"] is None and reference["failed"].startswith("LAPACK info = ")
    assert any(note.startswith("scipy dposv (1 thread) failed on these inputs (LAPACK info = ") for note in table["notes"])
    assert re.search(r"scipy dposv \(1 thread\) +failed +- +-", render(table))


@pytest.mark.timeout(60)
def test_bench_times_no_implementation_cold(compiled, monkeypatch):
    """One untimed call of tiledsl and of each reference comes before the timed rounds."""
    from tiledsl.commands import bench

    calls = {"tiledsl": 0, "reference": 0}
    timed, executed = bench._timed, bench.execute
    monkeypatch.setattr(bench, "_timed", lambda *a: calls.__setitem__("reference", calls["reference"] + 1) or timed(*a))
    monkeypatch.setattr(bench, "execute", lambda *a: calls.__setitem__("tiledsl", calls["tiledsl"] + 1) or executed(*a))
    table = run_bench(compiled("programs/trmm.tile"), _options("trmm", workers=1), rounds=1, with_dask=False)
    assert calls == {"tiledsl": 2, "reference": 2} and table["rounds"] == 1


def _tsqr_kernels():
    import importlib.util

    spec = importlib.util.spec_from_file_location("tsqr_kernels", ROOT / "programs" / "tsqr_kernels.py")
    tsqr_kernels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tsqr_kernels)
    return tsqr_kernels


def test_the_least_squares_check_takes_lapacks_one_norm():
    """dqrt17's ratio takes ‖(B − A·X)ᵀ·A‖₁; the check took its ∞-norm, low by up to nrhs: an X off
    along one direction at a ratio of 200 was said to be 12.5 and passed."""
    tsqr_kernels = _tsqr_kernels()
    rng = np.random.default_rng(0)
    m, n, nrhs = 700, 150, 16
    a, b = rng.uniform(-0.5, 0.5, (m, n)), rng.uniform(-0.5, 0.5, (m, nrhs))
    x = np.linalg.lstsq(a, b, rcond=None)[0]
    eps = np.finfo(float).eps
    norm_a = np.linalg.norm(a, 1)
    scale = norm_a * (norm_a * np.linalg.norm(x, 1) + np.linalg.norm(b, 1)) * max(m, n, nrhs) * eps
    direction = np.linalg.solve(a.T @ a, np.eye(n)[3])  # (B − A·X)ᵀ·A changes in its column 3 alone
    wrong = x - np.outer(direction, np.full(nrhs, 200 * scale / nrhs))
    after = b.copy()
    after[:n] = wrong
    assert tsqr_kernels.least_squares({"A": a, "B": b}, {"B": after}) == pytest.approx(200, rel=1e-6)
    assert np.linalg.norm((b - a @ wrong).T @ a, 1) / scale == pytest.approx(200, rel=1e-6)


def test_the_least_squares_check_passes_lapacks_solution_of_an_ill_conditioned_matrix():
    """dqrt17's scale, ‖A‖·‖B‖, failed LAPACK's own dgels on a Vandermonde matrix of condition 1.2e8
    (123; numpy's lstsq 1766; tiledsl's 117, X within 1e-9 of dgels's): a backward-stable X's normal
    equations are off by about ε·‖A‖²·‖X‖. A wrong X still fails."""
    import scipy.linalg

    tsqr_kernels = _tsqr_kernels()
    a = np.vander(np.linspace(0, 1, 40), 12)
    b = np.random.default_rng(1).standard_normal((40, 2))
    for x in (scipy.linalg.lapack.dgels(a, b)[1][:12], np.linalg.lstsq(a, b, rcond=None)[0]):
        after = b.copy()
        after[:12] = x
        assert tsqr_kernels.least_squares({"A": a, "B": b}, {"B": after}) < 1
        after[:12] = x + 1e-3 * np.abs(x).max()
        assert tsqr_kernels.least_squares({"A": a, "B": b}, {"B": after}) > 1000


def _unit_lower(a):
    return np.tril(a, -1) + np.eye(len(a))


def _mirrored_lower(a):
    return np.tril(a) + np.tril(a, -1).T


def _mirrored_upper(a):
    return np.triu(a) + np.triu(a, 1).T


# (check, routine, what the routine leaves in the matrix it writes, from the inputs C, A, B; part: the
# part of it compared)
_VARIANTS = [
    ("product(C, A, B)", "dgemm", lambda C, A, B: C + A @ B, np.asarray),
    ("product(C, transposed A, B)", "dgemm", lambda C, A, B: C + A.T @ B, np.asarray),
    ("product(C, A, transposed B, alpha = 2.0, beta = 0.5)", "dgemm", lambda C, A, B: 0.5 * C + 2 * A @ B.T,
     np.asarray),
    ("product(C, transposed A, A)", "dgemm", lambda C, A, B: C + A.T @ A, np.asarray),
    ("product(C, A, A)", "dgemm", lambda C, A, B: C + A @ A, np.asarray),
    ("product(C, symmetric A, A)", "dsymm", lambda C, A, B: C + _mirrored_lower(A) @ A, np.asarray),
    ("product(C, transposed A, transposed A)", "dgemm", lambda C, A, B: C + A.T @ A.T, np.asarray),
    ("product(lower C, transposed A, A)", "dsyrk", lambda C, A, B: C + A.T @ A, np.tril),
    ("product(symmetric C, transposed A, A)", "dsyrk", lambda C, A, B: C + A.T @ A, np.tril),
    ("product(upper C, A, transposed A, alpha = -1.0)", "dsyrk", lambda C, A, B: C - A @ A.T, np.triu),
    ("product(C, symmetric A, B)", "dsymm", lambda C, A, B: C + _mirrored_lower(A) @ B, np.asarray),
    ("product(C, A, symmetric upper B)", "dsymm", lambda C, A, B: C + A @ _mirrored_upper(B), np.asarray),
    ("product(B, lower unit A, B, beta = 0.0)", "dtrmm", lambda C, A, B: _unit_lower(A) @ B, np.asarray),
    ("product(B, transposed upper A, B, beta = 0.0)", "dtrmm", lambda C, A, B: np.triu(A).T @ B, np.asarray),
    ("product(A, A, upper B, beta = 0.0)", "dtrmm", lambda C, A, B: A @ np.triu(B), np.asarray),
    ("solve(transposed lower unit A, B, B)", "dtrsm",
     lambda C, A, B: np.linalg.solve(_unit_lower(A).T, B), np.asarray),
    ("solve(symmetric upper A, X, B)", "dposv", lambda C, A, B: np.linalg.solve(_mirrored_upper(A), B), np.asarray),
    ("inverse(upper unit A, A)", "dtrtri", lambda C, A, B: np.linalg.inv(np.triu(A, 1) + np.eye(len(A))),
     lambda m: np.triu(m, 1)),  # the unit diagonal is implied, not written
    ("inverse(symmetric upper A, A)", "dpotrf+dpotri", lambda C, A, B: np.linalg.inv(_mirrored_upper(A)), np.triu),
]


@pytest.mark.parametrize("text, routine, expected, part", _VARIANTS, ids=[v[0] for v in _VARIANTS])
def test_the_bench_reference_follows_the_checks_qualifiers(text, routine, expected, part):
    """Each qualifier of a check (a triangle, unit, transposed, symmetric, the part of C that counts)
    reaches the BLAS/LAPACK routine bench times: it computes what the check verifies."""
    from tiledsl.commands.bench import reference_for
    from tiledsl.runtime.program import CheckDecl

    kind, rest = text.rstrip(")").split("(")
    words = [item.split() for item in rest.split(", ") if "=" not in item]
    options = tuple((name, float(value)) for name, value in
                    (item.split(" = ") for item in rest.split(", ") if "=" in item))
    check = CheckDecl(kind, tuple(w[-1] for w in words), 1, tuple(tuple(w[:-1]) for w in words), options)
    reference = reference_for(check, dict(options))
    assert reference.routine == routine
    rng = np.random.default_rng(7)
    spd = rng.standard_normal((9, 9))
    inputs = {"C": rng.standard_normal((9, 9)), "A": spd @ spd.T + 9 * np.eye(9), "B": rng.standard_normal((9, 9))}
    taken = check.args if reference.operands is None else [check.args[i] for i in reference.operands]
    names = [name for i, name in enumerate(taken) if name not in taken[:i] and name != "X"]
    work = {name: np.array(inputs[name], order="F") for name in names}
    reference.run(*work.values(), **dict(options))
    written = "B" if kind == "solve" else check.args[0]
    assert np.allclose(part(work[written]), part(expected(inputs["C"], inputs["A"], inputs["B"])), atol=1e-10)


@pytest.mark.parametrize("text, beta", [("product(lower C, A, B)", 1.0), ("product(C, lower A, B)", 1.0),
                                        ("product(A, A, B)", 1.0), ("product(C, symmetric A, transposed B)", 1.0),
                                        ("product(B, lower A, B)", 1.0), ("product(B, lower A, B)", 2.0),
                                        ("product(lower C, A, A)", 1.0)])
def test_bench_has_no_reference_where_blas_has_no_routine(text, beta):
    """dtrmm has no beta: B = L·B + βB with β ≠ 0 is no routine's."""
    from tiledsl.commands.bench import reference_for
    from tiledsl.runtime.program import CheckDecl

    words = [item.split() for item in text.rstrip(")").split("(")[1].split(", ")]
    check = CheckDecl("product", tuple(w[-1] for w in words), 1, tuple(tuple(w[:-1]) for w in words))
    assert reference_for(check, {"beta": beta}) is None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ranks", [2, 3, 4, 8])
def test_tsqr_gives_every_rank_of_a_column_of_ranks_tasks(tmp_path, ranks):
    """tsqr's domains were contiguous, their heads rows d·dom (dom = 4): on 2 or 4 ranks of a P×1 grid
    rank 0 owned every head and ran every task ([59, 0, 0, 0]). Strided, they follow the process rows."""
    (tmp_path / "spread_tsqr.py").write_text(compile_path(ROOT / "programs" / "tsqr.tile")[1])
    driver = import_driver(tmp_path / "spread_tsqr.py", "spread_tsqr")
    params = make_params(driver, Options(n=1500, tiles={"nb": 64}, sets={"cols": 64}))
    matrices = make_matrices(driver, params, make_distribution(driver.PROGRAM, params, (ranks, 1), 0), 0)
    running = Counter(tiles[call.main].rank for call, tiles, _ in record(driver, matrices, params).submitted)
    assert sorted(running) == list(range(ranks)), running


@pytest.mark.timeout(60)
def test_tsqr_below_eight_rows_asks_for_its_columns():
    """At n < 8 the default cols = n // 8 is 0: 'matrix size must be at least 1x1, got 7x0' said nothing
    of cols."""
    import tiledsl

    with pytest.raises(tiledsl.TiledslError) as refused:
        tiledsl.load("tsqr").run(n=7, tiles={"nb": 3})
    assert "tsqr requires cols >= 1 (A has a column at least: the default, n // 8, has none below n = 8)" \
        in str(refused.value)
    assert tiledsl.load("tsqr").run(n=7, tiles={"nb": 3}, params={"cols": 2}, check=True).passed


@pytest.mark.parametrize("module, reference", [("tsqr_kernels.py", "dgels"), ("../programs/tsqr_kernels.py", "dgels"),
                                               ("lsk.py", None)])
def test_a_user_checks_reference_is_the_shipped_tsqrs_only(module, reference):
    """A user's check named least_squares (computing anything) was benched against dgels, by its name alone."""
    from tiledsl.commands.bench import reference_for
    from tiledsl.runtime.program import CheckDecl

    check = CheckDecl("least_squares", ("A", "B"), 1, user=True)
    found = reference_for(check, {}, module)
    assert (found.routine if found else None) == reference


@pytest.mark.timeout(60)
def test_bench_says_a_rate_above_the_kernel_upper_bound_as_run_does(compiled):
    """A run's bound line said why its rate passed the bound (a count of more work than it did, a busy
    tune); bench printed the same rate without a word (a block diagonal's potrfs, counted as n³/3)."""
    driver = compiled("programs/cholesky.tile")
    speeds = {"core": {"gemm": 0.001}}  # as if tune had timed gemm at 1 MFLOP/s: every run passes it
    table = run_bench(driver, Options(n=100, tiles={"nb": 50}, workers=1, bound_rates=speeds), rounds=1,
                      with_dask=False)
    said = [note for note in table["notes"] if "upper bound" in note]
    assert len(said) == 1 and said[0].startswith("tiledsl's ") and said[0].endswith(
        "of the kernel upper bound, 0.0 GFLOP/s: above it, the count is more than the work this run did (a band, a "
        "part of the factorization), or its kernels ran faster than tune timed them (a busy machine then)"), said


@pytest.mark.timeout(60)
def test_the_kernel_upper_bound_is_of_programs_of_prelude_kernels_only(compiled, tmp_path):
    """Tester v82h: a program of its own kernels was judged against gemm's tuned rate, which bounds the prelude's
    kernels, not a user's (its own measured at a fifth of it: '0.14 of the kernel upper bound')."""
    from tiledsl.api import load

    speeds = {"core": {"gemm": {"64": 50.0}}}
    bounded = execute(compiled("programs/cholesky.tile"), Options(n=64, tiles={"nb": 32}, workers=1,
                                                                 bound_rates=speeds))
    assert bounded.upper_bound == 50.0
    (tmp_path / "k.py").write_text("def double(A):\n    A *= 2\n")
    (tmp_path / "t.tile").write_text('use "k.py"\nkernel double(inout A) flops A.m * A.n\nprogram t {\n'
                                     "  tiling uniform(nb = 32)\n  matrix A[n, n] = random spd\n"
                                     "  for k in 0 .. A.nt { double(A[k, k]) potrf(A[k, k]) }\n}\n")
    own = execute(load(tmp_path / "t.tile").driver, Options(n=64, tiles={"nb": 32}, workers=1, bound_rates=speeds))
    assert own.upper_bound is None and own.untimed_tiles is None
