"""Every shipped program runs correctly on one rank, ragged sizes included.

Each run is verified twice: by the program's backward-error check (DESIGN §5,
threshold 60) and against scipy's own factorization to 1e-10 relative.

The sizes are 1, 7 and 100 (within a tile or two), then the last block of n = 1000 behind two
full blocks (of nb, or of B) and that of n = 1500 behind three: the same ragged, exact or empty
last tiles and slices as at those sizes, behind fewer full blocks, whose tasks would only repeat
those kept (on three full blocks every kind of task runs on full tiles alone too).
"""
import numpy as np
import pytest
import scipy.linalg

from tiledsl.runtime import Options, execute
from tiledsl.runtime.inputs import make_matrix


def sizes(width):
    """1, 7, 100, and the last block of n = 1000 after 2 blocks of ``width`` (nb, or B), that of 1500 after 3."""
    return (1, 7, 100, 2 * width + 1000 % width, 3 * width + 1500 % width)


UNIFORM = ({"nb": 64}, {"nb": 256}, {"nb": 300})
HYBRID = ({"B": 256, "b": 64, "s": 2}, {"B": 300, "b": 96, "s": 3}, {"B": 128, "b": 32, "s": 4})


def _relative(a, b):
    scale = np.linalg.norm(b)
    return np.linalg.norm(a - b) / (scale if scale else 1.0)


def _compare_cholesky(original, result):
    expected = scipy.linalg.cholesky(original, lower=True)
    assert _relative(np.tril(result["A"]), expected) < 1e-10


def _compare_lu(original, result):
    p, l, u = scipy.linalg.lu(original)  # diagonally dominant by columns: no row exchange
    assert np.array_equal(p, np.eye(len(p)))
    factored = result["A"]
    assert _relative(np.tril(factored, -1) + np.eye(len(p)), l) < 1e-10
    assert _relative(np.triu(factored), u) < 1e-10


def _compare_qr(original, result):
    r = scipy.linalg.qr(original, mode="r")[0]
    assert _relative(np.abs(np.triu(result["A"])), np.abs(r)) < 1e-10  # R is unique up to row signs


CASES = [(f"programs/{name}.tile", tiles, compare, kind)
         for name, compare, kind, tilings in (
             ("cholesky", _compare_cholesky, "spd", UNIFORM), ("lu", _compare_lu, "diagdom", UNIFORM),
             ("qr", _compare_qr, "general", UNIFORM),
             ("hetero_cholesky", _compare_cholesky, "spd", HYBRID), ("hetero_qr", _compare_qr, "general", HYBRID))
         for tiles in tilings]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("path, tiles, compare, kind", CASES,
                         ids=[f"{c[0].split('/')[1][:-5]}-{'-'.join(map(str, c[1].values()))}" for c in CASES])
def test_program_is_correct_at_every_size(compiled, path, tiles, compare, kind):
    driver = compiled(path)
    for n in sizes(tiles.get("nb", tiles.get("B"))):
        result = execute(driver, Options(n=n, tiles=tiles, check=True, workers=2, seed=n))
        assert result.residual is not None and result.residual < 60, (n, result.residuals)
        original = make_matrix(kind, n, 0, n, n)
        compare(original, {name: m.assemble() for name, m in result.matrices.items()})


@pytest.mark.timeout(300)
@pytest.mark.parametrize("program", ["qr", "hqr"])
def test_qr_programs_factor_tall_and_wide_matrices(compiled, program):
    """qr.tile and hqr.tile take A m×n (tester c61: both were square only), ragged and narrower than a tile."""
    driver = compiled(f"programs/{program}.tile")
    for m, n in ((300, 100), (100, 300), (257, 65), (65, 257), (1, 7), (7, 1), (64, 200)):
        sets = {"m": m, **({"domains": 3} if program == "hqr" else {})}  # (not a multiple of the tile rows)
        result = execute(driver, Options(n=n, sets=sets, tiles={"nb": 64}, check=True, workers=2, seed=m))
        assert result.residual is not None and result.residual < 60, (m, n, result.residuals)
        factored = result.matrices["A"].assemble()
        assert factored.shape == (m, n)
        r = scipy.linalg.qr(make_matrix("general", m, 0, m, n), mode="r")[0]
        assert _relative(np.abs(np.triu(factored))[:min(m, n)], np.abs(r)[:min(m, n)]) < 1e-10, (m, n)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("program, kind", [("getrf", "general"), ("lu", "diagdom")])
def test_lu_programs_factor_tall_and_wide_matrices(compiled, program, kind):
    """getrf.tile and lu.tile take A m×n, as dgetrf does: L's m×min(m, n) unit lower and U's min(m, n)×n upper
    factors, held in A, make the input again (P's rows swapped for getrf)."""
    driver = compiled(f"programs/{program}.tile")
    for m, n in ((300, 100), (100, 300), (257, 65), (65, 257), (1, 7), (7, 1)):
        result = execute(driver, Options(n=n, sets={"m": m}, tiles={"nb": 64}, check=True, workers=2, seed=m))
        assert result.residual is not None and result.residual < 60, (m, n, result.residuals)
        factored, k = result.matrices["A"].assemble(), min(m, n)
        assert factored.shape == (m, n)
        lower, upper = np.tril(factored, -1)[:, :k] + np.eye(m, k), np.triu(factored)[:k]
        original = make_matrix(kind, m, 0, m, n)
        if program == "getrf":
            u_ref = scipy.linalg.lu(original)[2]
            assert _relative(np.abs(upper), np.abs(u_ref)) < 1e-10, (m, n)  # the same pivots: LAPACK's U
        else:
            assert _relative(lower @ upper, original) < 1e-13, (m, n)


REPRODUCED = {"cholesky": {"nb": 100}, "lu": {"nb": 100}, "qr": {"nb": 100},
              "hetero_cholesky": {"B": 160, "b": 48, "s": 3}, "hetero_qr": {"B": 160, "b": 48, "s": 3}}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("program", list(REPRODUCED))
def test_results_do_not_depend_on_the_number_of_workers(compiled, program):
    """Bitwise: every matrix and workspace, whatever the order in which workers ran the tasks."""
    driver = compiled(f"programs/{program}.tile")
    runs = [{name: m.assemble() for name, m in
             execute(driver, Options(n=701, tiles=REPRODUCED[program], workers=w)).matrices.items()}
            for w in (1, 2, 4)]
    for name in runs[0]:
        assert all(np.array_equal(runs[0][name], other[name]) for other in runs[1:]), name
