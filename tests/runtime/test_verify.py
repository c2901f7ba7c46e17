"""The distributed checks (task streams) agree with dense reference residuals and catch errors;
they cost about what the factorization costs, and the summary gives their time.

Residuals of a correct run are rounding noise (~1e-3) whose value depends on the
order of summation, so the comparison with the dense formulas is made on a
result with one entry perturbed: then both must give the same, large, number.
"""
import itertools
import math
import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import dense_checks
from tiledsl.runtime import Options, engine, execute, launch
from tiledsl.runtime.inputs import make_matrix
from tiledsl.runtime.recording import record

ROOT = Path(__file__).resolve().parents[2]

CASES = [("programs/cholesky.tile", {"nb": 96}, "spd", dense_checks.cholesky_residual),
         ("programs/lu.tile", {"nb": 96}, "diagdom", dense_checks.lu_residual),
         ("programs/hetero_cholesky.tile", {"B": 128, "b": 48, "s": 2}, "spd", dense_checks.cholesky_residual)]


def run_perturbed(monkeypatch, driver, options, tile=(2, 1), entry=(5, 3)):
    """Run, add 1e-3 to one entry of the factored A (by default below the diagonal), then check."""
    captured = {}
    original_verify = launch._verify

    def perturb_then_verify(driver, params, engine, matrices, sources, *rest):
        matrices["A"].tile(*tile).data[entry] += 1e-3
        captured["factored"] = matrices["A"].assemble()
        return original_verify(driver, params, engine, matrices, sources, *rest)

    monkeypatch.setattr(launch, "_verify", perturb_then_verify)
    return execute(driver, options), captured["factored"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path, tiles, kind, dense", CASES, ids=[c[0][9:-5] for c in CASES])
def test_stream_residual_equals_the_dense_one(compiled, monkeypatch, path, tiles, kind, dense):
    n = 333
    result, factored = run_perturbed(monkeypatch, compiled(path), Options(n=n, tiles=tiles, check=True, seed=5))
    expected = dense(make_matrix(kind, 5, 0, n, n), factored)
    assert expected > 1000
    assert result.residual == pytest.approx(expected, rel=1e-6)
    assert not result.passed


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path, tiles, kind, dense", CASES[:2], ids=["cholesky", "lu"])
@pytest.mark.parametrize("scale", ["1-norm overflows", "near the smallest normal"])
def test_a_residual_near_the_float_limits_is_the_dense_one(compiled, monkeypatch, tmp_path, path, tiles, kind, dense,
                                                           scale):
    """A scaled by 4^k (its factors by 2^k, or 4^k for U), its result perturbed: the residual is
    the dense one of the unscaled matrices. Where ‖A‖₁ overflowed although every entry was
    finite, every residual was 0, a pass; where ‖A‖₁·n·ε underflowed, the check crashed."""
    n = 333
    general = make_matrix("general", 5, 0, n, n)
    a = general @ general.T + np.eye(n)  # SPD (LU needs no pivots), ‖A‖₁ ≈ 15·max|A|
    power = (int(np.log2(np.finfo(float).max / (2 * np.abs(a).max()))) // 2 if scale.startswith("1") else -500)
    assert np.isinf(np.abs(np.ldexp(a, 2 * power)).sum(axis=0)).any() == scale.startswith("1")
    np.save(tmp_path / "a.npy", np.ldexp(a, 2 * power))
    factor_power = power if kind == "spd" else 2 * power  # L·Lᵀ, or L (unit, unscaled)·U
    captured = {}
    original_verify = launch._verify

    def perturb_then_verify(driver, params, engine, matrices, sources, *rest):
        matrices["A"].tile(2, 1).data[5, 3] += 1e-3 * (2.0 ** factor_power if kind == "spd" else 1.0)
        factored = matrices["A"].assemble()
        if kind == "spd":
            captured["factored"] = np.ldexp(factored, -power)
        else:  # U (the upper triangle) carries the scale, L does not
            captured["factored"] = np.where(np.triu(np.ones((n, n), bool)), np.ldexp(factored, -factor_power), factored)
        return original_verify(driver, params, engine, matrices, sources, *rest)

    monkeypatch.setattr(launch, "_verify", perturb_then_verify)
    result = execute(compiled(path), Options(n=n, tiles=tiles, check=True, inputs={"A": str(tmp_path / "a.npy")}))
    expected = dense(a, captured["factored"])
    assert expected > 1000 and result.residual == pytest.approx(expected, rel=1e-6)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path, tiles", [("programs/qr.tile", {"nb": 96}),
                                         ("programs/hetero_qr.tile", {"B": 128, "b": 48, "s": 2})])
def test_qr_check_passes_a_correct_run_and_fails_a_perturbed_one(compiled, monkeypatch, path, tiles):
    driver = compiled(path)
    correct = execute(driver, Options(n=301, tiles=tiles, check=True))
    assert set(correct.residuals) == {"qr", "orthogonality"} and correct.passed
    perturbed, _ = run_perturbed(monkeypatch, driver, Options(n=301, tiles=tiles, check=True))
    assert not perturbed.passed and max(perturbed.residuals.values()) > 1000


SUB_RANGE_QR = """program p {
  tiling uniform(nb = 64)
  param ib = 16
  matrix A[n, n] = random general
  workspace T like A rows 2 * ib
  check qr(A, T)
  for k in 0 .. min(A.mt, A.nt) {
    geqrt(A[k, k], T[k, k][0 : ib])
    for j in k + 1 .. A.nt { gemqrt(A[k, k], T[k, k][0 : ib], A[k, j]) }
    for i in k + 1 .. A.mt {
      tpqrt(A[k, k], A[i, k], T[i, k][ib : 2 * ib])
      for j in k + 1 .. A.nt { tpmqrt(A[i, k], T[i, k][ib : 2 * ib], A[k, j], A[i, j]) }
    }
  }
}
"""


@pytest.mark.timeout(60)
def test_the_qr_check_replays_reflectors_whose_t_is_a_row_sub_range(tmp_path):
    """geqrt's T in rows 0 : ib of a tile, tpqrt's in rows ib : 2·ib: the check applies
    each with its own rows of T (it once passed the whole tile, and failed a right QR)."""
    from tiledsl.compiler import compile_path
    from tiledsl.driverload import import_driver

    (tmp_path / "p.tile").write_text(SUB_RANGE_QR)
    result, text = compile_path(tmp_path / "p.tile")
    assert text is not None, result.report()
    (tmp_path / "p.py").write_text(text)
    run = execute(import_driver(tmp_path / "p.py", "sub_range_qr"), Options(n=201, check=True, workers=2))
    assert run.passed and set(run.residuals) == {"qr", "orthogonality"}, run.residuals
    assert max(run.residuals.values()) < 5


ZERO_ROWS_QR = """program p {
  tiling uniform(nb = 16)
  param z = 4
  param ib = 8
  matrix A[n, n] = zeros
  workspace T like A rows ib
  check qr(A, T)
  for k in 0 .. min(A.mt, A.nt) {
    geqrt(A[k, k], T[k, k])
    for j in k + 1 .. A.nt { gemqrt(A[k, k], T[k, k], A[k, j]) }
    for i in k + 1 .. A.mt {
      tpqrt(A[k, k], A[i, k][0 : A.height(i) - z], T[i, k])
      for j in k + 1 .. A.nt { tpmqrt(A[i, k][0 : A.height(i) - z], T[i, k], A[k, j], A[i, j][0 : A.height(i) - z]) }
    }
  }
}
"""


@pytest.mark.timeout(60)
def test_the_qr_check_replays_reflectors_whose_v_is_a_row_sub_range(tmp_path):
    """V in the top rows of the tiles below the diagonal (their last z rows, zero, need no reflector):
    the check applied its Q to whole tiles and failed, "kernel check_tpmqrt failed ... C2 of shape
    (16, 16) does not match V of shape (12, 16)", with no residual."""
    import tiledsl

    (tmp_path / "p.tile").write_text(ZERO_ROWS_QR)
    a = np.random.default_rng(3).standard_normal((64, 64))
    a[np.arange(64) % 16 >= 12] = 0.0  # every tile's last 4 rows
    a[:16] = np.random.default_rng(4).standard_normal((16, 64))  # the first tile row is whole
    out = tiledsl.load(tmp_path / "p.tile").run(A=a, check=True)
    assert out.passed and max(out.residuals.values()) < 5, out.residuals


PARTIAL = {"cholesky": "matrix A[n, n] = random spd\n  check cholesky(A)\n  for k in 0 .. A.nt { potrf(A[k, k]) }",
           "lu": "matrix A[n, n] = random diagdom\n  check lu(A)\n  for k in 0 .. A.nt { getrf_nopiv(A[k, k]) }",
           "qr": "param ib = 50\n  matrix A[n, n] = random general\n  workspace T like A rows ib\n"
                 "  check qr(A, T)\n  for k in 0 .. A.nt { geqrt(A[k, k], T[k, k]) }"}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", list(PARTIAL))
def test_a_program_that_leaves_tiles_untouched_fails_its_check_cleanly(tmp_path, kind):
    """Only the diagonal tiles are factored: the check reads the others' inputs and fails."""
    from tiledsl.compiler import compile_path
    from tiledsl.driverload import import_driver

    (tmp_path / "p.tile").write_text(f"program p {{\n  tiling uniform(nb = 100)\n  {PARTIAL[kind]}\n}}\n")
    result, text = compile_path(tmp_path / "p.tile")
    assert text is not None, result.report()
    (tmp_path / "p.py").write_text(text)
    run = execute(import_driver(tmp_path / "p.py", f"partial_{kind}"), Options(n=300, check=True, workers=2))
    assert not run.passed and run.residuals[kind] > 1e6


def reflectors_of(driver, params, matrices):
    """The block reflectors of a uniform-tile QR run, as :mod:`dense_checks` takes them."""
    found = []
    geometry = matrices["A"].geometry
    recorded = record(driver, matrices, params, keep=lambda call: call.kernel in ("geqrt", "tpqrt"))
    for call, tiles, _ in recorded.submitted:
        v, t = tiles[0 if call.kernel == "geqrt" else 1], tiles[-1]
        cols = geometry.col_range(v.j)
        top = geometry.row_range(v.i) if call.kernel == "geqrt" else cols  # tpqrt: the triangle's rows
        found.append(dense_checks.Reflector(call.kernel, top, geometry.row_range(v.i), cols, t.data.copy()))
    return found


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n, nb", [(301, 96), (384, 128)])
def test_qr_stream_residuals_equal_the_dense_ones(compiled, monkeypatch, n, nb):
    """A perturbed T makes Q far from orthogonal: both residuals are large and must agree."""
    driver = compiled("programs/qr.tile")
    captured = {}
    original_verify = launch._verify

    def perturb_then_verify(driver, params, engine, matrices, *rest):
        matrices["T"].tile(1, 0).data[0, 0] += 1e-3
        captured["factored"] = matrices["A"].assemble()
        captured["reflectors"] = reflectors_of(driver, params, matrices)
        return original_verify(driver, params, engine, matrices, *rest)

    monkeypatch.setattr(launch, "_verify", perturb_then_verify)
    result = execute(driver, Options(n=n, tiles={"nb": nb}, check=True, seed=7, workers=2))
    expected_qr, expected_orthogonality = dense_checks.qr_residuals(
        make_matrix("general", 7, 0, n, n), captured["factored"], captured["reflectors"])
    assert expected_qr > 1000 and expected_orthogonality > 1000
    assert result.residuals["qr"] == pytest.approx(expected_qr, rel=1e-6)
    assert result.residuals["orthogonality"] == pytest.approx(expected_orthogonality, rel=1e-6)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("program, bound, n", [("qr", 5.0, 1536), ("cholesky", 3.0, 2304), ("lu", 3.0, 2304)])
def test_the_check_costs_about_what_the_factorization_costs(compiled, monkeypatch, program, bound, n):
    """16.10: the check's tasks are O(n³) work in the same BLAS kernels as the factorization
    (they cost 3 to 5 times more: masked copies of every tile, Q applied three times).
    Costs are the CPU seconds of the kernels' threads, which a shared machine does not inflate.
    The flop ratios: Cholesky and LU about 1.3 (whole tiles on the diagonal); QR 2.5
    (forming Q as the factorization, then A − Q·R and QᵀQ, n³ each), whose CPU seconds came to
    3.7 times the factorization's beside another test's job on a 2-core machine: QR's bound is 5,
    which an O(n⁴) or pure-Python check would still exceed many times. QR runs on 8×8 tiles of 192
    (12×12 for the others, whose bound is nearer): its ratio was the same there, at a third of the cost.
    Cholesky's CPU seconds came to 2.4 times once on CI's loaded machine (1.3 here): its bound is 3."""
    cpu = {"factorization": 0.0, "check": 0.0}
    run_task = engine._execute

    def timed(task, *rest):
        began = time.thread_time()
        run_task(task, *rest)
        phase = "check" if task.call.kernel.startswith("check_") else "factorization"
        cpu[phase] += time.thread_time() - began  # one worker thread: no race on this phase's sum

    monkeypatch.setattr(engine, "_execute", timed)
    result = execute(compiled(f"programs/{program}.tile"), Options(n=n, tiles={"nb": 192}, check=True, workers=1))
    assert result.passed
    assert cpu["check"] < bound * cpu["factorization"], cpu


@pytest.mark.timeout(120)
def test_the_summary_gives_the_checks_time_and_the_whole_time():
    """`seconds` stays the factorization's; `check_seconds` and `total_seconds` join it."""
    command = [sys.executable, "-m", "tiledsl.commands.cli", "run", "programs/lu.tile", "--n", "300", "--nb", "96",
               "--check"]
    out = subprocess.run([*command, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=100)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["check_seconds"] > 0 and list(summary["phases"]) == ["setup", "run", "check", "outputs"]
    assert summary["total_seconds"] == pytest.approx(sum(summary["phases"].values()))
    assert summary["total_seconds"] > summary["seconds"] + summary["check_seconds"]
    text = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=100).stdout
    assert "\n  check     " in text and "\n  total     " in text and "(setup " in text


def test_check_declarations_are_judged_alike_by_the_compiler_and_the_runtime():
    """`tiledsl check` refuses exactly the qualifiers of built-in checks that a run refuses (a
    driver's declarations are checked again at run time, from the runtime's own table)."""
    from tiledsl.compiler import check_source
    from tiledsl.compiler.source import decode
    from tiledsl.language import CHECK_ARGUMENTS as ARGUMENTS, CHECK_QUALIFIERS
    from tiledsl.runtime.verify import _views
    from tiledsl.runtime.world import UsageError

    word_sets = [()] + [(w,) for w in CHECK_QUALIFIERS] + list(itertools.combinations(CHECK_QUALIFIERS, 2)) + \
        [("unit", "lower", "transposed")]
    for kind, signatures in ARGUMENTS.items():
        for signature in signatures:
            names = ["A", "T"] if kind in ("lu", "qr") and len(signature) == 2 else ["A", "B", "C"][:len(signature)]
            for position, words in itertools.product(range(len(signature)), word_sets):
                qualifiers = [()] * len(signature)
                qualifiers[position] = words
                declared = ", ".join(" ".join([*q, name]) for q, name in zip(qualifiers, names))
                text = ("program p {\n  matrix A[n, n] = random spd\n  matrix B[n, n] = random general\n"
                        "  matrix C[n, n] = random general\n  workspace T like A rows 4\n"
                        f"  check {kind}({declared})\n  geqrt(A[0, 0], T[0, 0])\n  gemm(B[0, 0], C[0, 0], A[0, 0])\n"
                        "  getrf(B[0, 0], T[0, 0])\n}\n")  # (lu(A, T) reads getrf's pivots, qr(A, T) geqrt's reflectors)
                result = check_source(decode("p.tile", text.encode()))
                try:
                    _views(SimpleNamespace(kind=kind, args=names, qualifiers=qualifiers), "check")
                    runs = True
                except UsageError:
                    runs = False
                assert not any(d.is_error for d in result.diagnostics) == runs, (kind, declared)


@pytest.mark.timeout(60)
def test_a_cholesky_check_of_a_matrix_that_turns_out_not_square_is_refused(tmp_path):
    import tiledsl

    path = tmp_path / "rectangle.tile"
    path.write_text('program rectangle {\n  tiling uniform(nb = 4)\n  param m = 3\n  matrix A[n, m] = identity\n'
                    '\n  check cholesky(A)\n  getrf_nopiv(A[0, 0])\n}\n')
    with pytest.raises(tiledsl.TiledslError, match=r"check cholesky \(rectangle\.tile:6\): A is 4×3, not square"):
        tiledsl.load(path).run(n=4, check=True)


TRIANGULAR_SOLVE = """
program trsolve {
  tiling uniform(nb = 128)
  param nrhs = 300
  in matrix L[n, n] = random spd
  matrix X[n, nrhs] = random general
  check solve(lower L, X, X)

  for k in 0 .. L.nt {
    for j in 0 .. X.nt { trsm(L[k, k], X[k, j], "L", "L", "N", "N", 1.0) }
    for m in k + 1 .. L.mt {
      for j in 0 .. X.nt { gemm(L[m, k], X[k, j], X[m, j], "N", "N", -1.0, 1.0) }
    }
  }
}
"""


@pytest.mark.timeout(120)
def test_a_result_that_overflowed_fails_its_check_without_numpy_warnings(tmp_path):
    """A random triangle's solve overflows: the check's norms are inf or NaN, said as tiledsl's
    own failure, not with numpy's RuntimeWarnings from inside the runtime before it."""
    rng = np.random.default_rng(1)
    np.save(tmp_path / "L.npy", rng.standard_normal((1000, 1000)))
    np.save(tmp_path / "X.npy", rng.standard_normal((1000, 300)))
    (tmp_path / "trsolve.tile").write_text(TRIANGULAR_SOLVE)
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "trsolve.tile", "--input", "L=L.npy",
                          "--input", "X=X.npy", "--check"], cwd=tmp_path, capture_output=True, text=True, timeout=100)
    assert out.returncode == 1 and "check gave no residual (NaN)" in out.stderr, out.stderr
    assert "Warning" not in out.stderr, out.stderr


@pytest.mark.timeout(120)
def test_an_lu_residual_near_the_threshold_is_computed_again_exactly(compiled, tmp_path):
    """LU without pivoting under a pivot of 3e-6: float64's sums gave a residual of 58.6, a pass,
    where the exact one is 146 (a tester's sum of error-free products, here again with fsum)."""
    a = np.random.default_rng(11).uniform(-0.5, 0.5, (200, 200))
    a[0, 0] = 3e-6
    np.save(tmp_path / "a.npy", a)
    result = execute(compiled("programs/lu.tile"), Options(n=200, tiles={"nb": 64}, check=True,
                                                           inputs={"A": str(tmp_path / "a.npy")}))
    lu = result.matrices["A"].assemble()
    l, u = np.tril(lu, -1) + np.eye(200), np.triu(lu)
    exact = max(math.fsum(column) for column in np.abs(exact_difference(a, l, u)).T)
    expected = exact / (np.abs(a).sum(axis=0).max() * 200 * np.finfo(float).eps)
    # 146 on one machine, 151 on another (its BLAS rounds otherwise): far above the threshold either way
    assert result.residuals["lu"] == pytest.approx(expected, rel=1e-9) and 100 < expected < 200
    assert not result.passed and not any("threshold" in note for note in result.notes)


def exact_difference(a, l, u):
    """a − l·u, each entry the correctly rounded sum (fsum) of a and the exact products: each
    l[i, k]·u[k, j] as two floats whose sum is exact (Dekker's product), a row of entries at once."""
    difference = np.empty_like(a)
    for i, row in enumerate(l):
        products = row[:, None] * u
        terms = np.vstack([a[i], -products, -_dekker_error(row[:, None], u, products)])
        difference[i] = [math.fsum(column) for column in terms.T.tolist()]
    return difference


def _dekker_error(x, y, p):
    split = 134217729.0
    hx = split * x; xh = hx - (hx - x); xl = x - xh
    hy = split * y; yh = hy - (hy - y); yl = y - yh
    return ((xh * yh - p) + xh * yl + xl * yh) + xl * yl


def test_an_exact_update_leaves_the_exact_difference_in_two_floats():
    """c + low −= a·b with no rounding but the last, whatever the entries' range: against Fractions."""
    from fractions import Fraction
    from tiledsl.runtime.verify import exact_update

    rng = np.random.default_rng(3)
    a = rng.standard_normal((6, 37)) * 10.0 ** rng.integers(-12, 12, (6, 37))
    b = rng.standard_normal((37, 5)) * 10.0 ** rng.integers(-12, 12, (37, 5))
    c = np.asfortranarray(rng.standard_normal((6, 5)))
    low = np.zeros_like(c)
    want = [[Fraction(c[i, j]) - sum(Fraction(a[i, k]) * Fraction(b[k, j]) for k in range(37)) for j in range(5)]
            for i in range(6)]
    exact_update(a, b, c, low)
    for i in range(6):
        for j in range(5):
            scale = sum(abs(Fraction(a[i, k]) * Fraction(b[k, j])) for k in range(37)) + abs(want[i][j])
            assert abs(Fraction(c[i, j]) + Fraction(low[i, j]) - want[i][j]) <= scale * Fraction(2) ** -100


def test_only_residuals_within_10x_of_the_threshold_are_near_it():
    from tiledsl.runtime.checks import near_threshold

    assert near_threshold({"cholesky": 5.99, "qr": 600.0}) is None
    assert near_threshold({"qr": 0.1, "orthogonality": 6.0}).startswith("the orthogonality residual is within")
    assert near_threshold({"a": 59.0, "b": 599.0}).startswith("the a and b residuals are within")
    assert near_threshold({"cholesky": float("nan")}) is None
    assert near_threshold({"lu": 59.0}) is None  # computed again exactly


@pytest.mark.timeout(120)
@pytest.mark.parametrize("program", ["lu", "getrf"])
def test_the_exact_lu_residual_is_that_of_the_exact_difference(compiled, monkeypatch, tmp_path, program):
    """The exact products, with getrf's interchanges too, on a run whose factors did not grow: the
    residual is that of P·A − L·U summed exactly (float64's may be a few times off, as docs say)."""
    from scipy.linalg import lu_factor

    from tiledsl.runtime import verify

    a = np.random.default_rng(4).uniform(-0.5, 0.5, (150, 150)) + (0 if program == "getrf" else 150 * np.eye(150))
    np.save(tmp_path / "a.npy", a)
    monkeypatch.setattr(verify, "near", lambda value: True)
    result = execute(compiled(f"programs/{program}.tile"), Options(n=150, tiles={"nb": 64}, check=True,
                                                                   inputs={"A": str(tmp_path / "a.npy")}))
    rows = np.arange(150)
    if program == "getrf":  # the pivots are LAPACK's (docs/language.md)
        for k, p in enumerate(lu_factor(a)[1]):
            rows[[k, p]] = rows[[p, k]]
    lu = result.matrices["A"].assemble()
    difference = exact_difference(a[rows], np.tril(lu, -1) + np.eye(150), np.triu(lu))
    exact = max(math.fsum(column) for column in np.abs(difference).T)
    assert result.residuals["lu"] == pytest.approx(exact / (np.abs(a).sum(axis=0).max() * 150 * np.finfo(float).eps),
                                                   rel=1e-9)


UPPER_CHOLESKY = """
program cholu {
  tiling uniform(nb = 100)
  matrix A[n, n] = random spd
  check cholesky(upper A)
  for k in 0 .. A.nt {
    potrf(A[k, k], "U")
    for j in k + 1 .. A.nt { trsm(A[k, k], A[k, j], "L", "U", "T", "N") }
    for i in k + 1 .. A.nt {
      syrk(A[k, i], A[i, i], "U", "T")
      for j in i + 1 .. A.nt { gemm(A[k, i], A[k, j], A[i, j], "T", "N") }
    }
  }
}
"""


def _driver_of(tmp_path, text: str, name: str):
    """The driver of the program ``text``, compiled in ``tmp_path``."""
    from tiledsl.compiler import compile_path
    from tiledsl.driverload import import_driver

    (tmp_path / f"{name}.tile").write_text(text)
    result, compiled_text = compile_path(tmp_path / f"{name}.tile")
    assert compiled_text is not None, result.report()
    (tmp_path / f"{name}.py").write_text(compiled_text)
    return import_driver(tmp_path / f"{name}.py", f"driver_{name}")


@pytest.mark.timeout(200)
@pytest.mark.parametrize("ranks", [1, 4])
def test_an_upper_cholesky_passes_check_cholesky_upper_on_any_number_of_ranks(tmp_path, ranks):
    """potrf "U" leaves A = UᵀU's U in the upper triangle: `check cholesky(upper A)` reads it there
    (`check cholesky(A)` read L from the lower triangle, and failed with a residual of 5e13). On one
    rank, and on 2x2, whose tiles and their mirrors lie across process rows and columns both."""
    (tmp_path / "cholu.tile").write_text(UPPER_CHOLESKY)
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "cholu.tile", "--n", "300", "--nb", "64",
                          "--check", "--no-tune", "--np", str(ranks), "--json"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.splitlines()[-1])
    assert summary["passed"] and summary["residuals"]["cholesky"] < 1, summary["residuals"]


@pytest.mark.timeout(120)
def test_the_upper_cholesky_residual_is_the_dense_one_and_catches_a_wrong_factor(tmp_path, monkeypatch):
    """A perturbed U gives ‖A − UᵀU‖ as a dense computation does; a lower Cholesky declared upper fails."""
    n = 333
    original_verify = launch._verify
    result, factored = run_perturbed(monkeypatch, _driver_of(tmp_path, UPPER_CHOLESKY, "cholu"),
                                     Options(n=n, tiles={"nb": 96}, check=True, seed=5), tile=(1, 2), entry=(3, 5))
    expected = dense_checks.cholesky_residual(make_matrix("spd", 5, 0, n, n), factored.T)
    assert expected > 1000 and not result.passed
    assert result.residual == pytest.approx(expected, rel=1e-6)
    monkeypatch.setattr(launch, "_verify", original_verify)
    lower = (ROOT / "programs/cholesky.tile").read_text().replace("check cholesky(A)", "check cholesky(upper A)")
    assert "upper A" in lower
    run = execute(_driver_of(tmp_path, lower, "cholesky_declared_upper"), Options(n=300, tiles={"nb": 64}, check=True))
    assert not run.passed and run.residuals["cholesky"] > 1e6


@pytest.mark.timeout(60)
def test_check_cholesky_upper_refuses_hybrid_tiles(tmp_path):
    """An upper factor on tiles cut unlike in rows and columns is refused, not checked wrongly: by the
    compiler (E209), and by the run of a driver that declares it all the same (its declaration
    edited after compiling, as no compiled program can hold it)."""
    import tiledsl
    from tiledsl.runtime.world import UsageError

    program = (ROOT / "programs/hetero_cholesky.tile").read_text()
    text = program.replace("check cholesky(A)", "check cholesky(upper A)")
    assert "upper A" in text
    (tmp_path / "hetero.tile").write_text(text)
    with pytest.raises(tiledsl.TiledslError, match=r"E209.*check cholesky\(upper A\) needs a uniform tiling"):
        tiledsl.load(tmp_path / "hetero.tile")
    _driver_of(tmp_path, program.replace("check cholesky(A)", "check cholesky(lower A)"), "hetero_lower")
    source = (tmp_path / "hetero_lower.py").read_text()
    assert source.count("qualifiers=(('lower',),)") == 1
    (tmp_path / "hetero_upper.py").write_text(source.replace("qualifiers=(('lower',),)", "qualifiers=(('upper',),)"))
    from tiledsl.driverload import import_driver
    driver = import_driver(tmp_path / "hetero_upper.py", "driver_hetero_upper")
    with pytest.raises(UsageError, match=r"needs tiles whose rows and columns are cut alike"):
        execute(driver, Options(n=300, check=True))
