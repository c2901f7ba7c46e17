"""The Python API (tiledsl.api): matrices by name apart from the settings, and n and
the program's params inferred from the arrays' shapes, on real runs."""
from pathlib import Path

import numpy as np
import pytest

import tiledsl
from tiledsl.api import TiledslError

ROOT = Path(__file__).resolve().parents[2]

# Matrices named like the settings of hybrid tiling (B, b, s) and like a
# setting of run() (seed); A's width is the param m (default 2).
SETTING_NAMES = """
program settings {
  tiling uniform(nb = 4)
  param m = 2
  matrix A[n, m] = random general
  matrix B[n, n] = random general
  matrix b[n, n] = zeros
  matrix s[n, n] = zeros
  matrix seed[n, n] = zeros

  for k in 0 .. B.mt {
    gemm(A[k, 0], A[k, 0], B[k, k])
    gemm(A[k, 0], A[k, 0], s[k, k])
  }
}
"""

# A matrix named nb, which only hybrid tiling leaves free: tile (0, 0) is 4 rows by b = 2 columns.
HYBRID_NB = """
program hybrid_nb {
  tiling hybrid(B = 4, b = 2, s = 2)
  matrix nb[n, n] = zeros
  potrf(nb[0, 0])
}
"""


def program(tmp_path, text: str) -> tiledsl.api.Loaded:
    path = tmp_path / "p.tile"
    path.write_text(text)
    return tiledsl.load(path)


def block_diagonal_products(a: np.ndarray, nb: int) -> np.ndarray:
    """A_k·A_kᵀ on each nb×nb diagonal block, zeros elsewhere."""
    product = np.zeros((a.shape[0], a.shape[0]))
    for r in range(0, a.shape[0], nb):
        product[r:r + nb, r:r + nb] = a[r:r + nb] @ a[r:r + nb].T
    return product


@pytest.mark.timeout(120)
def test_matrices_named_B_b_s_are_arrays_and_n_and_m_come_from_their_shapes(tmp_path):
    settings = program(tmp_path, SETTING_NAMES)
    rng = np.random.default_rng(1)
    a, b_big, b_small = rng.standard_normal((8, 3)), rng.standard_normal((8, 8)), rng.standard_normal((8, 8))
    out = settings.run({"seed": np.full((8, 8), 7.0)}, A=a, B=b_big, b=b_small, s=np.zeros((8, 8)),
                       tiles={"nb": 4}, seed=3)
    products = block_diagonal_products(a, 4)
    assert out["A"].shape == (8, 3)  # m = 3 inferred, not the default 2
    assert np.allclose(out["B"], b_big - products)
    assert np.allclose(out["s"], -products)
    assert np.array_equal(out["b"], b_small)
    assert np.array_equal(out["seed"], np.full((8, 8), 7.0))
    assert out.tasks == 4 and out.residuals == {} and out.passed is None


@pytest.mark.timeout(120)
def test_a_param_the_arrays_do_not_involve_keeps_its_default(tmp_path):
    out = program(tmp_path, SETTING_NAMES).run(B=np.zeros((12, 12)))
    assert out["A"].shape == (12, 2)
    assert np.allclose(out["s"], -block_diagonal_products(out["A"], 4))


@pytest.mark.timeout(120)
def test_a_matrix_named_nb_under_hybrid_tiling(tmp_path):
    nb = np.ones((4, 4))
    nb[:2, :2] = 4 * np.eye(2)
    out = program(tmp_path, HYBRID_NB).run(nb=nb)
    # potrf of the 4×2 tile: L11 = chol(4·I) = 2·I, the rows below become ones·L11⁻ᵀ = 0.5
    assert np.allclose(np.tril(out["nb"][:2, :2]), 2 * np.eye(2))
    assert np.allclose(out["nb"][2:, :2], 0.5)
    assert np.array_equal(out["nb"][:, 2:], np.ones((4, 2)))


@pytest.mark.timeout(120)
def test_cholesky_n_inferred_and_checked(tmp_path):
    rng = np.random.default_rng(0)
    g = rng.standard_normal((96, 96))
    spd = g @ g.T + 96 * np.eye(96)
    out = tiledsl.load(ROOT / "programs/cholesky.tile").run(A=spd, tiles={"nb": 32}, check=True)
    lower = np.tril(out["A"])
    assert np.allclose(lower @ lower.T, spd)
    assert out.passed is True and set(out.residuals) and out.residual == max(out.residuals.values())
    assert out.residual < 60


@pytest.mark.timeout(120)
def test_old_style_tile_keyword_points_at_tiles():
    cholesky = tiledsl.load(ROOT / "programs/cholesky.tile")
    with pytest.raises(TiledslError, match=r"no matrix nb: tile settings go in tiles=.*tiles=\{'nb'"):
        cholesky.run(A=np.eye(64), nb=32)
    with pytest.raises(TiledslError, match=r"cholesky has no matrix C \(its matrices: A\)"):
        cholesky.run(C=np.eye(64))
    with pytest.raises(TiledslError, match=r"qr has no matrix ib: it is a parameter, set with params=\{'ib'"):
        tiledsl.load(ROOT / "programs/qr.tile").run(A=np.eye(64), ib=8)
    with pytest.raises(TiledslError, match=r"T is a workspace of qr"):
        tiledsl.load(ROOT / "programs/qr.tile").run(A=np.eye(64), T=np.eye(64))
    with pytest.raises(TiledslError, match=r"tiles=\{'B': \.\.\.\}: cholesky's uniform tiling takes nb"):
        cholesky.run(A=np.eye(64), tiles={"B": 32})
    with pytest.raises(TiledslError, match=r"positional argument is a mapping of matrices"):
        cholesky.run(64)
    with pytest.raises(TiledslError, match=r"params\['ib'\] = 2.5: ib is an integer parameter \(its default is 64\)"):
        tiledsl.load(ROOT / "programs/qr.tile").run(A=np.eye(64), params={"ib": 2.5})


@pytest.mark.timeout(120)
def test_a_matrix_named_like_a_setting_given_as_that_setting_is_refused(tmp_path):
    with pytest.raises(TiledslError, match=r"seed= is a setting of run\(\); give matrix seed in the mapping"):
        program(tmp_path, SETTING_NAMES).run(B=np.zeros((8, 8)), seed=np.zeros((8, 8)))


@pytest.mark.timeout(120)
def test_contradictory_shapes_name_the_matrix_its_shape_and_the_expected_one(tmp_path):
    settings = program(tmp_path, SETTING_NAMES)
    with pytest.raises(TiledslError, match=r"fit no size of settings: with n=8, m=2, A has shape \(8, 3\), "
                                           r"expected \(8, 2\); B has shape \(6, 6\), expected \(8, 8\); "
                                           r"give n= and params= for the size you mean$"):
        settings.run(A=np.zeros((8, 3)), B=np.zeros((6, 6)))
    with pytest.raises(TiledslError, match=r"with n=12, A has shape \(10, 10\), expected \(12, 12\)$"):
        tiledsl.load(ROOT / "programs/cholesky.tile").run(A=np.eye(10), n=12)
    with pytest.raises(TiledslError, match=r"matrix A: expected a 2-D array, got shape \(3,\)"):
        settings.run(A=np.zeros(3))


@pytest.mark.timeout(120)
def test_ambiguous_and_undetermined_sizes_are_errors_saying_what_to_pass(tmp_path):
    product = program(tmp_path, """
program product {
  tiling uniform(nb = 4)
  param p = 1
  param q = 1
  matrix A[n, p * q] = zeros
  matrix C[n, n] = zeros
  for k in 0 .. A.mt {
    gemm(A[k, 0], A[k, 0], C[k, k])
  }
}
""")
    with pytest.raises(TiledslError, match=r"fit several sizes \(n=4, p=1, q=6 or n=4, p=6, q=1\): give n= or "
                                           r"params= to choose"):
        product.run(A=np.zeros((4, 6)))
    assert product.run(A=np.zeros((4, 6)), params={"p": 1}).tasks == 1  # q = 6 follows
    (tmp_path / "m").mkdir()
    no_n = program(tmp_path / "m", """
program no_n {
  tiling uniform(nb = 4)
  param m = 1
  matrix A[m, m] = zeros
  matrix C[m, m] = zeros
  for k in 0 .. A.mt {
    gemm(A[k, 0], A[k, 0], C[k, k])
  }
}
""")
    with pytest.raises(TiledslError, match=r"n cannot be inferred: no input array's shape depends on it; give n="):
        no_n.run(A=np.zeros((4, 4)))
    assert no_n.run(A=np.zeros((4, 4)), n=1).tasks == 1


@pytest.mark.timeout(120)
def test_a_failed_kernel_names_the_kernel_its_line_and_rank():
    not_spd = -np.eye(64)
    with pytest.raises(TiledslError, match=r"rank 0 \(cholesky\.tile:\d+\): .*potrf"):
        tiledsl.load(ROOT / "programs/cholesky.tile").run(A=not_spd, tiles={"nb": 32})


@pytest.mark.timeout(120)
def test_a_matrix_given_both_in_the_mapping_and_by_keyword_is_refused():
    with pytest.raises(TiledslError, match=r"matrix A is given twice \(in the mapping and as A=\)"):
        tiledsl.load(ROOT / "programs/cholesky.tile").run({"A": np.eye(8)}, A=np.eye(8))


@pytest.mark.timeout(120)
def test_nan_left_in_a_matrix_is_counted_in_the_output():
    spd = np.eye(64) * 4.0
    spd[0, 5] = np.nan  # above the diagonal of a diagonal tile: potrf never reads it, the count sees it
    out = tiledsl.load(ROOT / "programs/cholesky.tile").run(A=spd, tiles={"nb": 32})
    assert out.nonfinite == {"A": 1} and out.passed is None
