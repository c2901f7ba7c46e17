"""The distributed checks (task streams) agree with dense reference residuals and catch errors.

Residuals of a correct run are rounding noise (~1e-3) whose value depends on the
order of summation, so the comparison with the dense formulas is made on a
result with one entry perturbed: then both must give the same, large, number.
"""
import pytest

import dense_checks
from tiledsl.runtime import Options, execute, launch
from tiledsl.runtime.inputs import make_matrix

CASES = [("programs/cholesky.tile", {"nb": 96}, "spd", dense_checks.cholesky_residual),
         ("programs/lu.tile", {"nb": 96}, "diagdom", dense_checks.lu_residual),
         ("programs/hetero_cholesky.tile", {"B": 128, "b": 48, "s": 2}, "spd", dense_checks.cholesky_residual)]


def run_perturbed(monkeypatch, driver, options):
    """Run, add 1e-3 to one entry of the factored A below the diagonal, then check."""
    captured = {}
    original_verify = launch._verify

    def perturb_then_verify(driver, params, engine, matrices, sources, *rest):
        matrices["A"].tiles[2][1].data[5, 3] += 1e-3
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
@pytest.mark.parametrize("path, tiles", [("programs/qr.tile", {"nb": 96}),
                                         ("programs/hetero_qr.tile", {"B": 128, "b": 48, "s": 2})])
def test_qr_check_passes_a_correct_run_and_fails_a_perturbed_one(compiled, monkeypatch, path, tiles):
    driver = compiled(path)
    correct = execute(driver, Options(n=301, tiles=tiles, check=True))
    assert set(correct.residuals) == {"qr", "orthogonality"} and correct.passed
    perturbed, _ = run_perturbed(monkeypatch, driver, Options(n=301, tiles=tiles, check=True))
    assert not perturbed.passed and max(perturbed.residuals.values()) > 1000


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
