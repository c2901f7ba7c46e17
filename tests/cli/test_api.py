"""The Python API (tiledsl.api): matrices by name apart from the settings, and n and
the program's params inferred from the arrays' shapes, on real runs."""
import os
import re
import subprocess
import sys
import time
import traceback
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import tiledsl
from tiledsl.api import TiledslError, TiledslWarning

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


@pytest.mark.timeout(60)
def test_hybrid_settings_whose_last_slice_is_empty_are_said_as_settings(tmp_path):
    """(s-1)*b >= B was the first matrix's error at its line ('matrix nb (p.tile:4): ...'), though
    the settings alone are at fault: said of them, given or the program's defaults."""
    loaded = program(tmp_path, HYBRID_NB)
    with pytest.raises(TiledslError) as refused:
        loaded.run(n=8, tiles={"b": 4})
    assert str(refused.value) == ("hybrid tiling needs (s-1)*b < B, so that the last slice of a block is not "
                                  "empty: (2-1)*4 = 4 with B=4 (b given; B and s the program's defaults); use b at "
                                  "most 3 with s=2, a larger B, or s=1")


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
    # Mapping's == compared the matrices: "The truth value of an array with more than one element is ambiguous"
    assert out == out and out != dict(out) and len({out, out}) == 1


@pytest.mark.timeout(120)
def test_old_style_tile_keyword_points_at_tiles():
    cholesky = tiledsl.load(ROOT / "programs/cholesky.tile")
    with pytest.raises(TiledslError, match=r"no matrix nb: tile settings go in tiles=.*tiles=\{'nb'"):
        cholesky.run(A=np.eye(64), nb=32)
    with pytest.raises(TiledslError, match=r"cholesky has no matrix C \(its matrices: A\)"):
        cholesky.run(C=np.eye(64))
    with pytest.raises(TiledslError, match=r"no matrix B \(its matrices: A\); its uniform tiling takes tiles=\{'nb'"):
        cholesky.run(B=np.eye(64))  # a setting of hybrid tiling: not one to suggest
    with pytest.raises(TiledslError, match=r"qr has no matrix ib: it is a parameter, set with params=\{'ib'"):
        tiledsl.load(ROOT / "programs/qr.tile").run(A=np.eye(64), ib=8)
    with pytest.raises(TiledslError, match=r"T is a workspace of qr"):
        tiledsl.load(ROOT / "programs/qr.tile").run(A=np.eye(64), T=np.eye(64))
    with pytest.raises(TiledslError, match=r"tiles=\{'B': \.\.\.\}: cholesky's uniform tiling takes nb"):
        cholesky.run(A=np.eye(64), tiles={"B": 32})
    with pytest.raises(TiledslError, match=r"positional argument is a mapping of matrices"):
        cholesky.run(64)
    with pytest.raises(TiledslError, match=r"^run\(\) takes the matrices by name, got 2 positional arguments: "
                                           r"run\(A=\.\.\., B=\.\.\.\), or one mapping"):
        tiledsl.load(ROOT / "programs/gemm.tile").run(np.eye(64), np.eye(64))
    with pytest.raises(TiledslError, match=r"params=\{'ib': 2.5\}: ib is an integer parameter \(its default is 64\)"):
        tiledsl.load(ROOT / "programs/qr.tile").run(A=np.eye(64), params={"ib": 2.5})
    # a number given as a string: its quotes are the mistake ("'3' is not a finite number", it said)
    with pytest.raises(TiledslError, match=r"params=\{'ib': '3'\}: ib is an integer parameter: give 3 without quotes"):
        tiledsl.load(ROOT / "programs/qr.tile").run(A=np.eye(64), params={"ib": "3"})



@pytest.mark.timeout(120)
@pytest.mark.parametrize("settings, message", [
    ({"tiles": [64]}, r"tiles= is a mapping of names to values, e\.g\. tiles=\{'nb': 256\}, got \[64\]"),
    ({"params": [1]}, r"params= is a mapping of names to values, e\.g\. params=\{'ib': 32\}, got \[1\]"),
    ({"check": "no"}, r"check must be True or False, got 'no'"),
    ({"A": None}, r"matrix A: expected a 2-D array, got None"),
])
def test_settings_of_the_wrong_kind_are_refused_by_name(settings, message):
    with pytest.raises(TiledslError, match=message):
        tiledsl.load("cholesky").run(n=20, **settings)


@pytest.mark.timeout(60)
def test_a_check_of_an_infinite_input_is_a_verdict_not_a_warning():
    """The check's arithmetic on a NaN or an infinity warns nothing (under warnings as errors, the
    check's own task failed): the verdict says the input held it."""
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal((100, 100)) for _ in range(3))
    c[0, 0] = np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = tiledsl.load("gemm").run(A=a, B=b, C=c, tiles={"nb": 48}, allow_nonfinite=True, check=True)
    assert not out.passed and out.errors[0].startswith("the check has no residual: C's input held 1 NaN or "
                                                        "infinite value(s)")


@pytest.mark.timeout(60)
def test_allow_nonfinite_returns_the_output_that_would_fail_the_run():
    a = np.eye(64) * 64
    a[40, 40] = np.inf
    cholesky = tiledsl.load("cholesky")
    with pytest.raises(TiledslError, match=r"A holds \d+ NaN or infinite value\(s\) after the run; "
                                           r"its input held 1; allow_nonfinite=True takes them for results"):
        cholesky.run(A=a, tiles={"nb": 32})
    out = cholesky.run(A=a, tiles={"nb": 32}, allow_nonfinite=True)
    assert out.nonfinite["A"] >= 1 and np.isinf(out["A"][40, 40])


def test_loading_a_program_that_is_not_there_is_a_tiledsl_error():
    with pytest.raises(TiledslError, match=r"cholesk: no such file, nor a shipped program of that name "
                                           r"\(did you mean cholesky\?\)"):
        tiledsl.load("cholesk")
    for wrong in (42, None, ["cholesky"]):
        with pytest.raises(TiledslError, match=r"^load takes a .tile file's path \(a str or a pathlib.Path\) or a "
                                               rf"shipped program's name, got {type(wrong).__name__} "):
            tiledsl.load(wrong)


@pytest.mark.timeout(60)
def test_a_path_may_be_bytes_or_any_path_like(tmp_path):
    (tmp_path / "c.tile").write_text((ROOT / "programs/cholesky.tile").read_text())
    for path in (bytes(tmp_path / "c.tile"), tmp_path / "c.tile", str(tmp_path / "c.tile")):
        assert tiledsl.load(path).run(n=16, tiles={"nb": 8}, check=True).passed


@pytest.mark.timeout(120)
def test_a_matrix_named_like_a_setting_given_as_that_setting_is_refused(tmp_path):
    with pytest.raises(TiledslError, match=r"seed= is a setting of run\(\); give matrix seed in the mapping"):
        program(tmp_path, SETTING_NAMES).run(B=np.zeros((8, 8)), seed=np.zeros((8, 8)))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["tiles", "params"])
def test_a_matrix_named_like_a_mapping_setting_given_as_that_setting_is_refused(tmp_path, name):
    loaded = program(tmp_path, f"program p {{\n  tiling uniform(nb = 4)\n  matrix {name}[n, n] = zeros\n"
                               f"  for k in 0 .. {name}.mt {{ potrf({name}[k, k]) }}\n}}\n")
    with pytest.raises(TiledslError, match=rf"^{name}= is a setting of run\(\); give matrix {name} in the mapping"):
        loaded.run(**{name: np.eye(8)})


@pytest.mark.timeout(120)
def test_an_array_given_for_a_setting_is_named_by_its_shape_not_printed():
    cholesky = tiledsl.load("cholesky")
    for settings, message in (({"n": np.ones((150, 150))}, "n must be an integer, got an array of shape (150, 150)"),
                              ({"tiles": np.ones((3, 3))}, "tiles= is a mapping of names to values, e.g. "
                                                           "tiles={'nb': 256}, got an array of shape (3, 3)")):
        with pytest.raises(TiledslError) as error:
            cholesky.run(**settings)
        assert str(error.value) == message


@pytest.mark.timeout(120)
def test_contradictory_shapes_name_the_matrix_its_shape_and_the_expected_one(tmp_path):
    settings = program(tmp_path, SETTING_NAMES)
    with pytest.raises(TiledslError) as error:
        settings.run(A=np.zeros((8, 3)), B=np.zeros((6, 6)))  # the dimensions n sizes all
    assert str(error.value) == ("the inputs' shapes disagree with settings, which makes A's rows, B's rows and "
                                "B's columns the same size (here 8, 6 and 6); A is 8×3, B is 6×6")
    with pytest.raises(TiledslError, match=r"fit no size of settings: with n=8, m=2, A has shape \(8, 3\), "
                                           r"expected \(8, 2\); B has shape \(6, 6\), expected \(8, 8\)$"):
        settings.run(A=np.zeros((8, 3)), B=np.zeros((6, 6)), n=8, params={"m": 2})
    with pytest.raises(TiledslError, match=r"with n=12, A has shape \(10, 10\), expected \(12, 12\) \(n=10 fits\)$"):
        tiledsl.load(ROOT / "programs/cholesky.tile").run(A=np.eye(10), n=12)
    with pytest.raises(TiledslError, match=r"matrix A: expected a 2-D array, got shape \(3,\)"):
        settings.run(A=np.zeros(3))


SQUARE_OF_PRODUCT = """
program square {
  tiling uniform(nb = 10)
  param q = DEFAULT
  require q >= 3
  matrix A[n * q, n * q] = zeros
  matrix C[n * q, n * q] = zeros
  for i in 0 .. A.mt {
    gemm(A[i, 0], A[i, 0], C[i, i])
  }
}
"""


@pytest.mark.timeout(60)
def test_a_default_that_fits_is_kept_and_one_breaking_a_requirement_leaves_the_sizes_free(tmp_path):
    """The tutorial's example (From Python): A[n * q, n * q] of 300×300 and require q >= 3."""
    (tmp_path / "fits").mkdir()
    fits = program(tmp_path / "fits", SQUARE_OF_PRODUCT.replace("DEFAULT", "3"))
    out = fits.run(A=np.zeros((300, 300)))
    assert (out.n, out.params) == (100, {"q": 3})
    breaks = program(tmp_path, SQUARE_OF_PRODUCT.replace("DEFAULT", "2"))
    with pytest.raises(TiledslError, match=r"fit several sizes \(n=1, q=300 or n=2, q=150 or n=3, q=100 or "):
        breaks.run(A=np.zeros((300, 300)))


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
    # (p=2, q=3 and p=3, q=2 fit too: three unknowns, two dimensions)
    with pytest.raises(TiledslError, match=r"fit several sizes \(n=4, p=1, q=6 or n=4, p=6, q=1 or \.\.\.\): give "
                                           r"n= or params= to choose"):
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
    with pytest.raises(TiledslError, match=r"^nothing in the inputs' shapes depends on n: give n=$"):
        no_n.run(A=np.zeros((4, 4)))
    assert no_n.run(A=np.zeros((4, 4)), n=1).tasks == 1


@pytest.mark.timeout(60)
def test_a_default_the_params_given_cannot_compute_is_a_tiledsl_error(tmp_path):
    powers = program(tmp_path, "program powers {\n  tiling uniform(nb = 4)\n  param lev = 2\n  param w = 2 ** lev\n"
                               "  matrix A[n, w * nb] = zeros\n  for k in 0 .. A.nt { potrf(A[0, k]) }\n}\n")
    with pytest.raises(TiledslError) as error:
        powers.run(n=16, params={"lev": -1})
    assert str(error.value) == ("the default of param w cannot be computed with n = 16, nb = 4, lev = -1: the "
                                "exponent of '**' is negative: 2 ** -1")


@pytest.mark.timeout(120)
def test_a_param_fixed_by_one_array_is_used_to_find_the_odd_one_out(tmp_path):
    """A right-hand side of 3 columns sets nrhs, whatever its default: the rows are what is wrong."""
    solve = program(tmp_path, """
program solve {
  tiling uniform(nb = 4)
  param nrhs = 300
  param m = 1000
  matrix L[n, n] = zeros
  matrix B[n, nrhs] = zeros
  matrix R[m, nrhs] = zeros
  for k in 0 .. L.mt {
    trsm(L[k, k], B[k, 0])
    trsm(L[k, k], R[k, 0])
  }
}
""")
    with pytest.raises(TiledslError) as error:
        solve.run(L=np.zeros((500, 500)), B=np.zeros((400, 3)))
    assert str(error.value) == ("the inputs' shapes disagree with solve, which makes L's rows, L's columns and "
                                "B's rows the same size (here 500, 500 and 400); L is 500×500, B is 400×3")
    with pytest.raises(TiledslError, match=r"^nothing in the inputs' shapes depends on n: give n=$"):
        solve.run(R=np.zeros((1000, 7)))  # n = 7 and n = 1000 fit alike: neither is a choice to offer


@pytest.mark.timeout(120)
def test_a_failed_kernel_names_the_kernel_its_line_and_rank():
    not_spd = -np.eye(64)
    with pytest.raises(TiledslError, match=r"rank 0 \(cholesky\.tile:\d+\): .*potrf"):
        tiledsl.load(ROOT / "programs/cholesky.tile").run(A=not_spd, tiles={"nb": 32})


@pytest.mark.timeout(120)
def test_a_failed_kernels_own_exception_is_the_errors_cause(tmp_path):
    """A library user can catch what the kernel raised: the exception object, its traceback through the kernel."""
    (tmp_path / "bad_kernels.py").write_text("class Boom(Exception):\n    pass\n\n\n"
                                             "def boom(A):\n    if A[0, 0] > 10:\n        raise Boom('too big')\n")
    (tmp_path / "bad.tile").write_text('use "bad_kernels.py"\nkernel boom(inout A)\nprogram bad {\n'
                                       '  tiling uniform(nb = 4)\n  matrix A[n, n] = zeros\n'
                                       '  for i in 0 .. A.mt { boom(A[i, i]) }\n}\n')
    with pytest.raises(TiledslError, match=r"kernel boom failed on A\[1, 1\].*Boom at bad_kernels.py:7") as caught:
        tiledsl.load(tmp_path / "bad.tile").run(A=np.diag([0.0] * 4 + [20.0] * 4))
    cause = caught.value.__cause__
    assert type(cause).__name__ == "Boom" and str(cause) == "too big"
    assert traceback.extract_tb(cause.__traceback__)[-1].name == "boom"
    with pytest.raises(TiledslError) as caught:  # a failure of no kernel has no cause
        tiledsl.load(ROOT / "programs/cholesky.tile").run(A=np.eye(8), tiles={"nb": "x"})
    assert caught.value.__cause__ is None
    # tester b61: a kernel module failing as it loads kept nothing of what it raised
    loaded = tiledsl.load(tmp_path / "bad.tile")  # then its module edited
    for text, kind in (("raise RuntimeError('import fail')\n", RuntimeError), ("def boom(A:\n", SyntaxError)):
        (tmp_path / "bad_kernels.py").write_text(text)
        with pytest.raises(TiledslError, match=rf"^rank 0: kernel module .*bad_kernels.py:1: {kind.__name__}") \
                as caught:
            loaded.run(A=np.eye(8))
        assert type(caught.value.__cause__) is kind


@pytest.mark.timeout(120)
def test_a_matrix_given_both_in_the_mapping_and_by_keyword_is_refused():
    with pytest.raises(TiledslError, match=r"matrix A is given twice \(in the mapping and as A=\)"):
        tiledsl.load(ROOT / "programs/cholesky.tile").run({"A": np.eye(8)}, A=np.eye(8))


@pytest.mark.timeout(60)
def test_a_stall_under_the_automatic_limit_advises_the_apis_watchdog_setting():
    """The stall's report advised --watchdog SECONDS, which run() does not take (its other messages
    say allow_nonfinite=True, params=...). In a process of its own: the stalled kernel sleeps on."""
    script = ("import tiledsl\nfrom tiledsl.runtime import watchdog\n"
              "watchdog.FLOOR_SECONDS = 2.0  # the automatic limit, at 2 s rather than 60\n"
              "try:\n    tiledsl.load('tests/runtime/programs/faults.tile').run(n=256, params={'fault': 2})\n"
              "except tiledsl.TiledslError as error:\n    print(error)\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=50)
    assert out.stdout.startswith("rank 0 (faults.tile:20): watchdog: no task completed for "), out.stdout + out.stderr
    assert "(the automatic limit, the larger of 2 s and 20 times the longest task so far: watchdog=SECONDS sets " \
           "another, longer for a slower kernel or shorter to stop a stuck one sooner, and watchdog=0 turns it off); " \
           in out.stdout, out.stdout


@pytest.mark.timeout(120)
def test_nan_left_in_a_matrix_fails_the_run_as_on_the_command_line():
    spd = np.eye(64) * 4.0
    spd[0, 5] = np.nan  # above the diagonal of a diagonal tile: potrf never reads it, the count sees it
    with pytest.raises(TiledslError) as caught:
        tiledsl.load(ROOT / "programs/cholesky.tile").run(A=spd, tiles={"nb": 32})
    assert str(caught.value) == ("A holds 1 NaN or infinite value(s) after the run; its input held 1; "
                                 "allow_nonfinite=True takes them for results")
    out = caught.value.output  # the run's output stays at hand on the error
    assert out.nonfinite == {"A": 1} and out.passed is None
    # why it failed, as --json's errors says it (it held nothing: a script logging summary() logged no reason)
    assert out.errors == [str(caught.value)] and out.summary()["errors"] == out.errors
    # failed, as --json's ok says (passed is the check's verdict only: True of a run that checked and failed so)
    assert out.ok is False and out.summary()["ok"] is False
    assert np.isnan(out["A"][0, 5]) and out["A"][0, 0] == 2.0
    with pytest.raises(KeyError, match=r"the output has no matrix 'a' \(its matrices: A\); did you mean 'A'\?"):
        out["a"]  # was KeyError('a'), where every other misnamed matrix is named with the program's


# A user check that raises, or returns text: elementwise Y = X + Y, checked by `verdict`.
USER_CHECK = """
use "checks.py"

kernel add(in X, inout Y)

program checked {
  tiling uniform(nb = 4)
  matrix X[n, n] = random general
  matrix Y[n, n] = zeros
  check verdict(X, Y)

  for i in 0 .. Y.mt { for j in 0 .. Y.nt { add(X[i, j], Y[i, j]) } }
}
"""

CHECK_BODIES = {
    "raises": "def verdict(before, after):\n    raise KeyError('nope')\n",
    "text": "def verdict(before, after):\n    return 'tiny'\n",
    "blank name": "def verdict(before, after):\n    return {'  ': 2.0}\n",
}
CHECK_MESSAGES = {
    "raises": "check verdict (checked.tile:10): verdict raised KeyError at checks.py:6: 'nope'",
    "text": ("check verdict (checked.tile:10): verdict returned str; a check returns a float residual "
             "or a non-empty dict of name → float"),
    "blank name": "check verdict (checked.tile:10): verdict returned a dict whose key '  ' is blank: name each residual",
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", sorted(CHECK_BODIES))
def test_a_check_that_gives_no_residual_is_an_error_saying_why(tmp_path, case):
    (tmp_path / "checked.tile").write_text(USER_CHECK)
    kernels = "def add(X, Y):\n    Y[:] += X\n\n\n"  # puts `raise` on line 6
    (tmp_path / "checks.py").write_text(kernels + CHECK_BODIES[case])
    with pytest.raises(TiledslError) as caught:
        tiledsl.load(tmp_path / "checked.tile").run(n=8, check=True)
    assert str(caught.value) == CHECK_MESSAGES[case]
    out = caught.value.output
    assert out.errors == [CHECK_MESSAGES[case]] and out.passed is False
    assert np.isnan(out.residuals["verdict"]) and out.nonfinite == {}
    assert np.array_equal(out["Y"], out["X"])  # the run itself completed


@pytest.mark.timeout(120)
@pytest.mark.parametrize("body", ["    while True:\n        pass\n",
                                  "    while True:\n        try:\n            while True:\n                pass\n"
                                  "        except BaseException:\n            return 1.0\n"])
def test_a_check_past_its_deadline_fails_the_run_and_leaves_the_interpreter_usable(tmp_path, body):
    """A user check spinning past the watchdog ended the user's interpreter (the rank's end, os._exit); one
    that swallows the interruption and returns has overrun all the same."""
    (tmp_path / "checked.tile").write_text(USER_CHECK)
    (tmp_path / "checks.py").write_text("def add(X, Y):\n    Y[:] += X\n\n\ndef verdict(before, after):\n" + body)
    program = tiledsl.load(tmp_path / "checked.tile")
    began = time.monotonic()
    with pytest.raises(tiledsl.TiledslError) as failed:
        program.run(n=8, check=True, watchdog=1)
    assert str(failed.value) == ("rank 0: watchdog: check verdict (checked.tile:10) has not returned after 1 s "
                                 "(watchdog=)")
    assert time.monotonic() - began < 30
    assert program.run(n=8).passed is None  # the next run goes on


@pytest.mark.timeout(120)
def test_a_residual_too_large_is_among_the_errors_as_json_says_it_without_raising(tmp_path):
    """errors held nothing where the check failed by its residual, so a script logging summary()
    logged a failed run with no reason; --json gives 'check failed: the verdict residual 100 is not below 60'."""
    (tmp_path / "checked.tile").write_text(USER_CHECK)
    (tmp_path / "checks.py").write_text("def add(X, Y):\n    Y[:] += X\n\n\n"
                                        "def verdict(before, after):\n    return 100.0\n")
    out = tiledsl.load(tmp_path / "checked.tile").run(n=8, check=True)
    assert out.passed is False and out.errors == ["check failed: the verdict residual 100 is not below 60"]
    assert out.summary()["errors"] == out.errors and out.ok is False and out.summary()["ok"] is False


@pytest.mark.timeout(120)
def test_a_nan_input_names_the_check_it_left_without_residual_as_json_does():
    a = np.eye(64) * 3
    a[5, 5] = np.nan
    out = tiledsl.load("gemm").run(A=a, tiles={"nb": 32}, check=True, allow_nonfinite=True)
    # once: 'check failed: residual nan is not below 60' followed, where no residual had been said
    assert out.errors == ["the check has no residual: A's input held 1 NaN or infinite value(s), which no backward "
                          "error measures"]
    with pytest.raises(TiledslError) as caught:
        tiledsl.load("gemm").run(A=a, tiles={"nb": 32}, check=True)
    assert caught.value.output.errors[:1] == out.errors and "C holds 64 NaN" in caught.value.output.errors[2]


@pytest.mark.timeout(120)
def test_a_run_of_a_program_whose_tile_file_changed_since_it_was_loaded_warns(tmp_path):
    """A compiled driver warns that its .tile changed since it was compiled; a loaded program ran its old
    self silently."""
    source = tmp_path / "p.tile"
    source.write_text("program p {\n  tiling uniform(nb = 8)\n  matrix A[n, n] = random spd\n"
                      "  potrf(A[0, 0])\n}\n")
    loaded = tiledsl.load(source)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded.run(n=8)
    source.write_text(source.read_text().replace("nb = 8", "nb = 4"))
    with pytest.warns(TiledslWarning, match=rf"^{re.escape(str(source))} has changed since it was loaded: the run "
                                            r"is of the program as it was then \(load it again: tiledsl.load\("):
        assert loaded.run(n=8).tiles == {"nb": 8}
    source.unlink()  # tester b61: removed, it ran silently
    with pytest.warns(TiledslWarning, match=rf"^{re.escape(str(source))} is no longer there \(moved or removed "
                                            r"since it was loaded\): the run is of the program as it was then$"):
        assert loaded.run(n=8).tiles == {"nb": 8}


@pytest.mark.timeout(120)
def test_a_loaded_program_whose_folder_moved_is_told_to_be_loaded_again(tmp_path):
    """Its kernel module not found, the API spoke of 'the driver's' directory and of 'a driver moved
    elsewhere', a driver its user never made."""
    folder = tmp_path / "t9"
    folder.mkdir()
    (folder / "k.py").write_text("def bump(A):\n    A += 1.0\n")
    (folder / "p.tile").write_text('use "k.py"\nkernel bump(inout A)\nprogram p {\n  tiling uniform(nb = 4)\n'
                                   "  matrix A[n, n] = zeros\n  bump(A[0, 0])\n}\n")
    loaded = tiledsl.load(folder / "p.tile")
    assert loaded.run(n=4)["A"][0, 0] == 1.0
    folder.rename(tmp_path / "moved")
    with pytest.raises(TiledslError) as error:
        loaded.run(n=4)
    assert str(error.value) == (f"{folder / 'p.tile'} is no longer there (moved or removed since the program was "
                                f"loaded), nor is its kernel module k.py beside it: load the program again from "
                                f"where it is now")


@pytest.mark.timeout(120)
def test_a_program_loaded_by_a_relative_path_keeps_its_files_after_the_process_moves(tmp_path, monkeypatch):
    """After os.chdir, a program loaded as 'p.tile' took the new folder's data.npy and k.py for its own (and
    passed its check), and its edits were looked for in the new folder's p.tile."""
    program, stray = tmp_path / "program", tmp_path / "stray"
    for folder, value in ((program, 1.0), (stray, -5.0)):
        folder.mkdir()
        (folder / "k.py").write_text(f"def bump(A):\n    A += {value}\n")
        np.save(folder / "data.npy", np.full((4, 4), value))
        (folder / "p.tile").write_text('use "k.py"\nkernel bump(inout A)\nprogram p {\n  tiling uniform(nb = 4)\n'
                                       '  matrix A[4, 4] = load "data.npy"\n  bump(A[0, 0])\n}\n')
    monkeypatch.chdir(program)
    loaded = tiledsl.load("p.tile")
    monkeypatch.chdir(stray)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # stray/p.tile differs from the program's: no warning
        (stray / "p.tile").write_text((stray / "p.tile").read_text() + "# another program\n")
        assert loaded.run(n=4)["A"][0, 0] == 2.0
    (program / "data.npy").rename(program / "aside.npy")
    with pytest.raises(TiledslError, match=r"data\.npy.* does not exist"):
        loaded.run(n=4)
    (program / "aside.npy").rename(program / "data.npy")
    (program / "k.py").rename(program / "aside.py")
    with pytest.raises(TiledslError) as error:
        loaded.run(n=4)
    assert re.fullmatch(rf"kernel module k\.py not found next to \S*p\.tile \(looked in "
                        rf"{re.escape(str(program))}\): it belongs beside the \.tile file", str(error.value)), \
        error.value  # no word of drivers
    (program / "aside.py").rename(program / "k.py")
    (program / "p.tile").write_text((program / "p.tile").read_text() + "# edited\n")
    with pytest.warns(TiledslWarning, match=re.escape(f"load it again: tiledsl.load({str(program / 'p.tile')!r})")):
        loaded.run(n=4)


@pytest.mark.timeout(120)
def test_a_loaded_program_pickles_by_its_path_as_a_pool_passes_it():
    """pickle (a multiprocessing pool's arguments) failed: "cannot pickle 'module' object"."""
    import pickle

    program = tiledsl.load("cholesky")
    again = pickle.loads(pickle.dumps(program))
    assert again.path == program.path and repr(again) == f"<tiledsl program cholesky from {program.path}>"
    assert again.run(n=100, check=True).passed is True


@pytest.mark.timeout(120)
def test_a_loaded_program_finds_its_kernel_module_from_another_directory(tmp_path, monkeypatch):
    (tmp_path / "checked.tile").write_text(USER_CHECK)
    (tmp_path / "checks.py").write_text("def add(X, Y):\n    Y[:] += X\n\n\n"
                                        "def verdict(before, after):\n    return 0.0\n")
    monkeypatch.chdir(tmp_path)
    program = tiledsl.load("checked.tile")  # a relative path, then another working directory
    monkeypatch.chdir(tmp_path.parent)
    x = np.arange(64.0).reshape(8, 8)
    out = program.run(X=x, check=True)
    assert out.passed is True and np.array_equal(out["Y"], x)


REFUSED_INPUTS = {
    "complex": (np.eye(8, dtype=complex), "matrix A: complex values (dtype complex128); tiledsl computes in "
                                          "float64: pass A.real to drop the imaginary part"),
    "bool": (np.eye(8, dtype=bool), "matrix A: dtype bool is not a number type; tiledsl takes arrays "
                                    "of floats or integers: pass A.astype(float) for 0 and 1"),
    "text": (np.full((8, 8), "1.5"), "matrix A: dtype <U3 is not a number type; tiledsl takes arrays "
                                     "of floats or integers"),
    "big integer": (np.eye(8, dtype=np.int64) * (2 ** 53 + 1),
                    "matrix A: element (0, 0) = 9007199254740993 is not exactly a float64 "
                    "(nearest 9007199254740992.0)"),
    "fraction": (np.full((8, 8), Fraction(1, 3), dtype=object),
                 "matrix A: element (0, 0) = 1/3 is not exactly a float64 (nearest 0.3333333333333333)"),
    "None": (np.full((8, 8), None), "matrix A: element (0, 0) is None, not a number"),
    "numpy big integer": (np.full((8, 8), np.int64(2 ** 53 + 1), dtype=object),
                          "matrix A: element (0, 0) = 9007199254740993 is not exactly a float64 "
                          "(nearest 9007199254740992.0)"),
    "numpy largest unsigned": (np.full((8, 8), np.uint64(2 ** 64 - 1), dtype=object),
                               "matrix A: element (0, 0) = 18446744073709551615 is not exactly a float64 "
                               "(nearest 1.8446744073709552e+19)"),
    "integer past float64": (np.array([[1.0] * 7 + [-10 ** 400]] * 8, dtype=object),
                             "matrix A: element (0, 7) = -100000000...0000 (401 digits) is beyond float64's range "
                             "(about ±1.8e308)"),
    "text element": (np.full((8, 8), "3.0", dtype=object), "matrix A: element (0, 0) = '3.0' is text, not a number"),
    "bytes element": (np.full((8, 8), b"3", dtype=object), "matrix A: element (0, 0) = b'3' is bytes, not a number"),
    "bool element": (np.array([[1.0] * 7 + [True]] * 8, dtype=object),  # as an array of bools is
                     "matrix A: element (0, 7) = True is a bool, not a number"),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", sorted(REFUSED_INPUTS))
def test_an_input_float64_cannot_hold_exactly_is_refused_by_name(case):
    value, message = REFUSED_INPUTS[case]
    with pytest.raises(TiledslError) as caught:
        tiledsl.load(ROOT / "programs/cholesky.tile").run(A=value, tiles={"nb": 4})
    assert str(caught.value) == message


@pytest.mark.timeout(120)
@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.float32, object, "numpy integers in an object array"])
def test_an_input_float64_holds_exactly_is_accepted(dtype):
    spd = (np.eye(8) * 4).astype(dtype) if dtype != "numpy integers in an object array" else \
        np.array([[np.int64(4 * (i == j)) for j in range(8)] for i in range(8)], dtype=object)
    out = tiledsl.load(ROOT / "programs/cholesky.tile").run(A=spd, tiles={"nb": 4}, check=True)
    assert out.passed is True and np.array_equal(np.tril(out["A"]), np.eye(8) * 2)


def test_the_api_error_is_tiledsl_error_at_the_top_of_the_package():
    assert tiledsl.TiledslError is TiledslError
    # completed in a notebook, and what a star import brings: the API, not the package's modules
    assert {"TiledslError", "TiledslWarning", "load", "note"} <= set(dir(tiledsl))
    names = {}
    exec("from tiledsl import *", names)
    assert sorted(name for name in names if not name.startswith("__")) == ["TiledslError", "TiledslWarning", "load",
                                                                            "note"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n, nb, order", [(40, 64, "F"), (200, 200, "F"), (1, 64, "C")])
def test_a_single_tile_input_is_not_the_checks_original(n, nb, order):
    """One tile covering a whole Fortran-ordered input (or a 1×1 one) was that very array: the
    factorization overwrote the original the check compares with, and a right run failed."""
    m = np.random.default_rng(3).standard_normal((n, n))
    a = np.array(m @ m.T + n * np.eye(n), order=order)
    kept = a.copy()
    out = tiledsl.load(ROOT / "programs/cholesky.tile").run(A=a, tiles={"nb": nb}, check=True, workers=1)
    assert out.passed and out.residuals["cholesky"] < 1
    assert np.array_equal(a, kept)


@pytest.mark.timeout(120)
def test_gpus_take_their_share_of_the_tiles_through_the_api():
    m = np.random.default_rng(1).standard_normal((300, 300))
    a = m @ m.T + 300 * np.eye(300)
    cholesky = tiledsl.load(ROOT / "programs/cholesky.tile")
    on_cores = cholesky.run(A=a, tiles={"nb": 64}, check=True, workers=1)
    on_gpus = cholesky.run(A=a, tiles={"nb": 64}, check=True, workers=1, gpus=2, gpu_backend="emulated")
    assert on_cores.passed and on_gpus.passed and np.array_equal(on_cores["A"], on_gpus["A"])
    with pytest.raises(TiledslError, match=r"^gpus must be at least 0, got -1$"):
        cholesky.run(A=a, gpus=-1)
    with pytest.raises(TiledslError, match=r"^gpu_backend must be 'emulated' or 'cupy', got 'cuda'$"):
        cholesky.run(A=a, gpu_backend="cuda")
    with pytest.raises(TiledslError, match=r"^seed must be below 2\^64, got 18446744073709551616$"):
        cholesky.run(n=100, seed=2 ** 64)


@pytest.mark.timeout(120)
def test_loading_a_shipped_programs_name_beside_a_tile_file_of_that_name_warns(tmp_path, monkeypatch):
    (tmp_path / "qr.tile").write_text("program mine {\n  matrix A[n, n] = random spd\n  potrf(A[0, 0])\n}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.warns(tiledsl.api.TiledslWarning, match=r"^qr is the shipped program \(.*\); the qr\.tile in this "
                      r"directory is another program: give its path, \./qr\.tile, to run that one$"):
        assert tiledsl.load("qr").program.name == "qr"
    assert tiledsl.load("./qr.tile").program.name == "mine"


@pytest.mark.timeout(120)
def test_a_shipped_program_is_loaded_and_compiled_by_its_name_as_the_commands_run_it():
    assert tiledsl.load("cholesky").run(A=np.eye(64) * 64, tiles={"nb": 32}).tasks == 4
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "compile", "cholesky"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and "def generate(rt, p):" in out.stdout, out.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("nb", [64, 128])
def test_nan_in_an_input_tile_no_task_touches_counts_as_one_left(nb):
    """At nb = 64 the NaN lies in tile (0, 1), which Cholesky never touches; at 128 in (0, 0): either
    way it is in the output, so the run fails alike, and nonfinite agrees with the array returned."""
    a = np.eye(200) * 200.0
    a[3, 100] = np.nan
    with pytest.raises(TiledslError, match="A holds 1 NaN or infinite value.s. after the run; its input held 1;"):
        tiledsl.load("cholesky").run(A=a, tiles={"nb": nb})
    out = tiledsl.load("cholesky").run(A=a, tiles={"nb": nb}, allow_nonfinite=True)
    assert out.nonfinite == {"A": int(np.isnan(out["A"]).sum())} == {"A": 1} and out.input_nonfinite == {"A": 1}


@pytest.mark.timeout(120)
def test_loading_one_new_program_from_several_threads_at_once(tmp_path, monkeypatch):
    import threading

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "fresh.tile"
    path.write_text((ROOT / "programs/cholesky.tile").read_text().replace("program cholesky", "program fresh"))
    results = []

    def load_and_run():
        try:
            results.append(tiledsl.load(path).run(n=100, tiles={"nb": 32}, check=True).passed)
        except Exception as error:  # noted, for the assertion to show
            results.append(repr(error))
    threads = [threading.Thread(target=load_and_run) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [True] * 6


@pytest.mark.timeout(120)
def test_gpu_settings_are_the_command_lines():
    a = np.random.default_rng(3).standard_normal((150, 150))
    a = a @ a.T + 150 * np.eye(150)
    cholesky = tiledsl.load("cholesky")
    alone = cholesky.run(A=a, tiles={"nb": 32})["A"]
    out = cholesky.run(A=a, tiles={"nb": 32}, gpus=2, gpu_memory="40K", gpu_ratio=(0, 1), gpu_streams=3,
                       check=True, watchdog=0)
    assert out.passed and np.array_equal(out["A"], alone)
    gpus = out.summary()["gpus"]
    assert gpus["streams"] == 3 and gpus["tasks_by_device"]["host"] == 0 and gpus["out_of_core"]["cache_bytes"] == 40 * 1024
    assert cholesky.run(A=a, tiles={"nb": 32}).gpus is None
    for settings, message in ((dict(gpu_memory="1M"), "gpu_memory= needs gpus= .at least 1 GPU."),
                              (dict(gpus=1, gpu_memory="lots"), "gpu_memory: 'lots' is not a size"),
                              (dict(gpus=1, gpu_ratio=(1, 0)), "G must be at least 1 .*the host, leave out gpus=;"),
                              (dict(gpus=1, gpu_ratio=1.5), "gpu_ratio must be 'H:G' or .H, G., got 1.5"),
                              (dict(gpus=1, gpu_streams=0), "gpu_streams must be at least 1, got 0"),
                              (dict(gpus=1, host_takes="yes"), r"host_takes must be True \('on'\), False \('off'\) or None"),
                              (dict(watchdog=-1), "watchdog must be 0 .off. or a number of seconds from 0.25"),
                              (dict(gpu_memroy="1M"), "no setting gpu_memroy: did you mean gpu_memory=.")):
        with pytest.raises(TiledslError, match=message):
            cholesky.run(A=a, **settings)
    with pytest.warns(tiledsl.TiledslWarning, match="^gpu_backend='emulated' does nothing without gpus=: the run uses "
                                                    "no GPU$"):
        assert np.array_equal(cholesky.run(A=a, tiles={"nb": 32}, gpu_backend="emulated")["A"], alone)
    with pytest.warns(tiledsl.TiledslWarning, match="^host_takes=False does nothing without gpus=: the run uses no "
                                                    "GPU$"):  # True is refused above; False was taken silently
        assert np.array_equal(cholesky.run(A=a, tiles={"nb": 32}, host_takes="off")["A"], alone)
    with pytest.warns(tiledsl.TiledslWarning, match=r"^seed=7 does nothing: cholesky generates no matrix at random "
                                                    r"here \(its random matrices are given as inputs, or it has none\)$"):
        assert np.array_equal(cholesky.run(A=a, tiles={"nb": 32}, seed=7)["A"], alone)


@pytest.mark.timeout(60)
def test_the_output_is_a_mapping_of_matrices_and_says_what_ran():
    import json

    out = tiledsl.load("gemm").run(n=90, tiles={"nb": 32}, params={"k": 40}, check=True)
    assert "C" in out and sorted(out) == ["A", "B", "C"] and len(out) == 3 and dict(out)["C"] is out["C"]
    summary = json.loads(json.dumps(out.summary()))
    assert summary["n"] == 90 and summary["tiles"] == {"nb": 32} and summary["params"] == {"m": 90, "k": 40}
    assert summary["gflops"] > 0 and summary["passed"] is True and summary["residual"] == out.residual
    # named and meant as --json's: a log of several programs' summaries says which is which, and how long each part took
    assert summary["program"] == "gemm" and summary["flops_source"] == "kernels", summary
    assert 0 < summary["check_seconds"] < summary["total_seconds"] and "run" in summary["phases"], summary
    assert summary["no_gflops"] is None


@pytest.mark.timeout(60)
def test_an_output_without_gflops_says_why(tmp_path):
    """As the summary line says it (the API said nothing: gflops None, no note)."""
    (tmp_path / "k.py").write_text("def fill(A):\n    A[...] = 1.0\n")
    (tmp_path / "u.tile").write_text('use "k.py"\nkernel fill(out A)\nprogram u {\n  matrix A[n, n] = zeros\n'
                                     "  fill(A[0, 0])\n}\n")
    out = tiledsl.load(tmp_path / "u.tile").run(n=50)
    assert out.gflops is None and out.no_gflops == out.summary()["no_gflops"] == "kernel fill declares no flop count"


@pytest.mark.timeout(60)
def test_warnings_the_command_line_would_print(tmp_path):
    path = tmp_path / "unused.tile"
    path.write_text("program unused {\n  tiling uniform(nb = 4)\n  param p = 3\n  matrix A[n, n] = identity\n"
                    "  potrf(A[0, 0])\n}\n")
    with pytest.warns(tiledsl.TiledslWarning, match=r"warning\[W300\]: param 'p' is declared but never used"):
        program = tiledsl.load(path)
    with pytest.warns(tiledsl.TiledslWarning, match="program unused declares no check: check=True has nothing"):
        program.run(n=4, check=True)


@pytest.mark.parametrize("settings, message", [
    (dict(A=np.ma.masked_array(np.eye(8))), r"a masked array, .*: pass A.filled\(value\)"),
    (dict(A="a.npy"), r"got the text 'a.npy'; for a .npy file, pass np.load"),
    (dict(A=np.eye(8), ranks=2), r"a run from Python is one rank: several ranks are `tiledsl run --np P`"),
    (dict(A=np.eye(8), trace="t.json"), r"--trace is an option of `tiledsl run` that run\(\) does not take"),
    (dict(A=np.eye(8), params={"n": 8}), r"n is not a parameter of the program: give run\(n=...\)"),
    (dict(A=np.eye(8), params={"nb": 4}), r"nb is not a parameter of the program: give tiles=\{'nb': ...\}"),
    (dict(A=np.eye(8), params={"b": 4}), r"b is not a parameter of the program: b is a setting of hybrid tiling, and "
                                         r"cholesky's tiling is uniform, which takes tiles=\{'nb': ...\}$"),
    (dict(A=np.eye(8), params={"A": np.eye(8)}), r"A is a matrix of cholesky, not a parameter: give it as "
                                                 r"run\(A=array\)$")])
def test_inputs_and_names_that_mean_something_else_are_explained(settings, message):
    with pytest.raises(TiledslError, match=message):
        tiledsl.load("cholesky").run(**settings)


def test_a_parameter_given_as_a_tile_setting_is_told_where_it_goes():
    with pytest.raises(TiledslError, match=r"^tiles=\{'ib': ...\}: ib is a parameter of qr: give params=\{'ib': ...\}; "
                                           r"qr's uniform tiling takes nb$"):
        tiledsl.load("qr").run(n=100, tiles={"nb": 64, "ib": 32})


@pytest.mark.timeout(60)
def test_a_broken_requirement_is_said_as_the_command_line_says_it():
    for given in (dict(n=40, params={"domains": 0}), dict(A=np.eye(40), params={"domains": 0})):
        with pytest.raises(TiledslError) as error:
            tiledsl.load("hqr").run(tiles={"nb": 8}, **given)
        assert str(error.value).startswith("hqr requires domains >= 1 (the tile rows of a column go to at least one "
                                           "domain), which n = 40, nb = 8, ib = 64, domains = 0, m = 40 break"), error.value


@pytest.mark.timeout(60)
def test_numpy_scalars_as_settings_come_back_as_python_numbers():
    import json

    out = tiledsl.load("gemm").run(n=np.int64(8), tiles={"nb": np.int64(4)}, params={"k": np.int32(5)},
                                   gpus=np.int64(1), gpu_streams=np.int64(2), workers=np.int64(1), seed=np.uint32(3))
    summary = json.loads(json.dumps(out.summary()))
    assert (summary["n"], summary["tiles"], summary["params"]) == (8, {"nb": 4}, {"m": 8, "k": 5})
    assert summary["gpus"]["streams"] == 2 and type(out.n) is int and type(out.params["k"]) is int
    for wrong in ({"n": np.float64(8.0)}, {"tiles": {"nb": np.float64(4.0)}}):  # said as the numbers they hold
        with pytest.raises(TiledslError, match=r"must be an integer, got (8|4)\.0$"):
            tiledsl.load("gemm").run(**wrong)


@pytest.mark.timeout(60)
def test_a_fraction_for_a_float_param_is_the_float_the_kernel_and_the_summary_see(tmp_path):
    import json
    from fractions import Fraction

    scaled = program(tmp_path, """program scaled {
  tiling uniform(nb = 4)
  param alpha = 2.0
  param m = 3
  matrix L[n, n] = random spd
  matrix A[n, n] = random general
  require m >= 0
  for i in 0 .. A.mt { trmm(L[i, i], A[i, i], alpha = alpha) }
}
""")
    out = scaled.run(n=8, params={"alpha": Fraction(1, 3)})
    assert type(out.params["alpha"]) is float and json.loads(json.dumps(out.summary()))["params"]["alpha"] == 1 / 3
    with pytest.raises(TiledslError, match=r"m is an integer parameter \(its default is 3\)$"):
        scaled.run(n=8, params={"m": Fraction(3, 1)})


@pytest.mark.timeout(60)
def test_a_numpy_text_for_a_char_param_is_the_python_text_the_kernel_sees(tmp_path):
    """np.str_("R") reached the kernel as np.str_ (np.int64 and np.float16 are Python's int and float; tester r66)."""
    sided = program(tmp_path, """program sided {
  tiling uniform(nb = 4)
  param side = "L"
  matrix L[n, n] = random spd
  matrix A[n, n] = random general
  for i in 0 .. A.mt { trmm(L[i, i], A[i, i], side = side) }
}
""")
    out = sided.run(n=8, params={"side": np.str_("R")})
    assert type(out.params["side"]) is str and out.params["side"] == "R"


@pytest.mark.timeout(60)
def test_a_parameter_of_the_wrong_type_shows_the_default_of_the_run():
    gemm = tiledsl.load("gemm")
    with pytest.raises(TiledslError) as error:
        gemm.run(n=100, params={"m": 5.0})
    assert str(error.value) == "params={'m': 5.0}: m is an integer parameter (its default is 100)"
    with pytest.raises(TiledslError) as error:
        gemm.run(C=np.zeros((30, 30)), params={"m": 5.0})  # n is not known yet: m's default follows it
    assert str(error.value) == "params={'m': 5.0}: m is an integer parameter (its default is n)"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("params", [{}, {"cols": 200}])
def test_a_requirement_the_arrays_shapes_break_is_named(params):
    with pytest.raises(TiledslError) as error:
        tiledsl.load("tsqr").run(A=np.ones((20, 200)), params=params)
    assert str(error.value) == ("tsqr requires cols <= n (A is tall: at most as many columns as rows), which n = 20, "
                                "nb = 512, cols = 200, nrhs = 16, ib = 64, domains = 12 break (tsqr.tile:29)")


@pytest.mark.timeout(60)
def test_the_size_comes_from_a_loaded_file_as_on_the_command_line(tmp_path):
    (tmp_path / "l.tile").write_text('program l {\n  tiling uniform(nb = 4)\n  matrix M[n, n] = load "m.npy"\n'
                                     "  for k in 0 .. M.nt { potrf(M[k, k]) }\n}\n")
    np.save(tmp_path / "m.npy", 4 * np.eye(8))
    loaded = tiledsl.load(tmp_path / "l.tile")
    out = loaded.run()
    assert out.n == 8 and np.array_equal(out["M"], 2 * np.eye(8))
    with pytest.raises(TiledslError) as error:
        loaded.run(n=6)  # the file's shape is checked before the run, in the API's words
    assert str(error.value) == ("the inputs' shapes fit no size of l: with n=6, M has shape (8, 8), expected (6, 6) "
                                "(n=8 fits)")
    assert np.array_equal(loaded.run(M=np.eye(4) * 9)["M"], 3 * np.eye(4))  # an array replaces the file


@pytest.mark.timeout(60)
def test_an_empty_array_is_said_in_the_apis_words():
    with pytest.raises(TiledslError) as error:
        tiledsl.load("cholesky").run(A=np.zeros((0, 0)))
    assert str(error.value) == "matrix A: the array is empty (0×0): a matrix has at least one row and one column"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("settings, text", [
    ({"gpu_memory": "1K"}, "GPU tiles of rank 0 go out of core, but gpu_memory allows 1.00 KiB, less than the largest tile its GPUs hold"),
    ({"host_takes": True}, "host_takes=True needs this machine's kernel rates on a core and a GPU")])
def test_gpu_settings_are_named_as_the_api_names_them(settings, text, monkeypatch):
    monkeypatch.setenv("TILEDSL_NO_TUNE", "1")
    with pytest.raises(tiledsl.TiledslError, match=re.escape(text)):
        tiledsl.load("cholesky").run(n=300, gpus=1, **settings)


BLAS_THREADS = """
use "probe.py"
kernel blas_threads(inout A)

program probe {
  tiling uniform(nb = 4)
  matrix A[n, n] = zeros
  blas_threads(A[0, 0])
}
"""


@pytest.mark.timeout(120)
def test_a_run_from_another_thread_also_has_single_threaded_blas(tmp_path):
    """threadpoolctl lets one thread at a time set the BLAS limits: a run that kept that role
    after it ended left every later run from another thread with multi-threaded BLAS."""
    import threading

    (tmp_path / "probe.py").write_text(
        "from threadpoolctl import threadpool_info\n\n\n"
        "def blas_threads(a):\n    a[0, 0] = max(pool['num_threads'] for pool in threadpool_info())\n")
    from threadpoolctl import threadpool_limits

    probe = program(tmp_path, BLAS_THREADS)
    with threadpool_limits(2):  # the process's BLAS multi-threaded, whatever the suite's environment says
        seen = [probe.run(n=4)["A"][0, 0]]
        elsewhere = threading.Thread(target=lambda: seen.append(probe.run(n=4)["A"][0, 0]))
        elsewhere.start()
        elsewhere.join()
        seen.append(probe.run(n=4)["A"][0, 0])
    assert seen == [1.0, 1.0, 1.0]


@pytest.mark.timeout(120)
def test_a_ctrl_c_as_a_run_sets_the_blas_threads_leaves_them_as_they_were(tmp_path):
    """The libraries' thread counts change one by one: a Ctrl-C between two left one at 1 thread for the
    rest of the process (later runs took 1 as what to restore). And under no address-space limit a
    Ctrl-C there is one, not a thread that could not start."""
    script = ("import signal, threadpoolctl, tiledsl\nfrom threadpoolctl import threadpool_info\n"
              "real = threadpoolctl.threadpool_limits\n"
              "def interrupted(*args, **kwargs):\n    limiter = real(*args, **kwargs)\n"
              "    signal.raise_signal(signal.SIGINT)\n    return limiter\n"
              "chol = tiledsl.load('cholesky')\nchol.run(n=64)  # every BLAS library loaded\n"
              "before = [pool['num_threads'] for pool in threadpool_info()]\n"
              "threadpoolctl.threadpool_limits = interrupted\n"
              "try:\n    chol.run(n=64)\nexcept KeyboardInterrupt:\n    print('interrupted')\n"
              "threadpoolctl.threadpool_limits = real\n"
              "print(chol.run(n=64).passed, [pool['num_threads'] for pool in threadpool_info()] == before)\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=100,
                         env={**os.environ, "OPENBLAS_NUM_THREADS": "2"})
    assert out.returncode == 0 and out.stdout.split() == ["interrupted", "None", "True"], out.stderr


@pytest.mark.timeout(120)
def test_a_kernel_module_sleeping_as_it_loads_raises_at_the_watchdog_and_the_interpreter_goes_on(tmp_path):
    """Tester w81b: the watchdog ended the caller's whole interpreter 5 s past the limit (exit 1, no atexit
    handler), a sleep of the main thread being beyond the exception it raised; now a signal wakes it."""
    (tmp_path / "k.py").write_text("import time\n\ntime.sleep(60)\n\n\ndef bump(A):\n    A += 1\n")
    (tmp_path / "t.tile").write_text('use "k.py"\nkernel bump(inout A)\nprogram p {  matrix A[n, n] = zeros\n'
                                     "  for k in 0 .. A.nt { bump(A[k, k]) }\n}\n")
    script = ("import atexit, time, tiledsl\natexit.register(lambda: print('atexit'))\nbegan = time.monotonic()\n"
              "try:\n    tiledsl.load('t.tile').run(n=40, watchdog=2)\nexcept tiledsl.TiledslError as error:\n"
              "    print(error, time.monotonic() - began < 10)\nprint('after')\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=100)
    assert out.returncode == 0 and out.stdout.splitlines() == [
        "rank 0: watchdog: kernel module k.py has not finished loading after 2 s (watchdog=) True", "after",
        "atexit"], (out.stdout, out.stderr)


@pytest.mark.timeout(120)
def test_a_new_process_limits_scipys_blas_too(tmp_path):
    """SciPy's OpenBLAS, which the prelude's kernels call, loads with the first kernel: a limit
    set before it loaded left it on every core in a fresh process."""
    (tmp_path / "probe.py").write_text(
        "from threadpoolctl import threadpool_info\n\n\n"
        "def blas_threads(a):\n    a[0, 0] = max(pool['num_threads'] for pool in threadpool_info())\n")
    (tmp_path / "probe.tile").write_text(BLAS_THREADS.replace("zeros", "random spd").replace(
        "blas_threads(A[0, 0])", "potrf(A[0, 0])\n  blas_threads(A[0, 0])"))
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "probe.tile", "--n", "4",
                          "--output", "A=a.npy"], cwd=tmp_path, capture_output=True, text=True, timeout=100)
    assert out.returncode == 0, out.stderr
    assert np.load(tmp_path / "a.npy")[0, 0] == 1.0


@pytest.mark.timeout(120)
def test_overlapping_runs_from_two_threads_keep_single_threaded_blas_until_the_last_ends(tmp_path):
    """The first run to end restored the BLAS threads while another was still going: its later
    kernels ran on threaded BLAS, and its results changed in their last bits."""
    import threading

    from threadpoolctl import threadpool_info

    threads = lambda: max(pool["num_threads"] for pool in threadpool_info())
    before = threads()
    runs, seen = {}, {}
    for name in ("first", "second"):  # each kernel waits for its flag, then says what BLAS has
        folder = tmp_path / name
        folder.mkdir()
        (folder / "probe.py").write_text(
            "import os, time\nfrom threadpoolctl import threadpool_info\n\n\n"
            f"def blas_threads(a):\n    while not os.path.exists({str(folder / 'go')!r}):\n        time.sleep(0.01)\n"
            "    a[0, 0] = max(pool['num_threads'] for pool in threadpool_info())\n")
        probe = program(folder, BLAS_THREADS)
        run = lambda name=name, probe=probe: seen.update({name: probe.run(n=4)["A"][0, 0]})
        runs[name] = threading.Thread(target=run)
        runs[name].start()
        time.sleep(0.5)  # in its kernel: the first run set the limit, the second found it set
    for name in ("first", "second"):  # the first ends while the second still runs
        (tmp_path / name / "go").touch()
        runs[name].join()
    assert seen == {"first": 1.0, "second": 1.0}
    assert threads() == before  # the last run to end gave back what there was


@pytest.mark.timeout(120)
def test_a_run_lets_go_of_its_tiles_without_the_cyclic_collector():
    """A tile and its matrix refer to each other: with the garbage collector off (as some services
    run), each run kept its matrices' tiles, 6.4 MB a run at n = 1200."""
    import gc
    import tracemalloc

    program = tiledsl.load("cholesky")
    program.run(n=600, tiles={"nb": 200})
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        program.run(n=600, tiles={"nb": 200})
        first = tracemalloc.get_traced_memory()[0]
        for _ in range(4):
            program.run(n=600, tiles={"nb": 200})
        grown = tracemalloc.get_traced_memory()[0] - first
    finally:
        tracemalloc.stop()
        if was_enabled:
            gc.enable()
    assert grown < 2 * 600 * 600 * 8, grown  # one matrix is 2.9 MB; four runs kept 11.5 MB


@pytest.mark.parametrize("key", [3, None, 2.5])
def test_a_matrix_keyed_by_other_than_a_string_is_refused_by_name(key):
    with pytest.raises(TiledslError) as error:
        tiledsl.load("gesv").run({key: np.eye(5)})
    assert str(error.value) == f"gesv has no matrix {key!r}: matrices are named by strings (its matrices: A, B)"


@pytest.mark.parametrize("key, message", [
    ("seed", "cholesky has no matrix seed (its matrices: A): seed is a setting of run(), given as run(..., seed=...)"),
    ("", "cholesky has no matrix '' (its matrices: A)"),  # read as no name at all
    ("A ", "cholesky has no matrix 'A ' (its matrices: A)"),  # read as a contradiction
])
def test_a_matrix_key_that_is_a_setting_or_no_plain_name_is_said_plainly(key, message):
    """{"seed": 3} said 'run() has no setting seed: did you mean seed=?'."""
    with pytest.raises(TiledslError) as error:
        tiledsl.load("cholesky").run({key: np.eye(4)})
    assert str(error.value) == message


@pytest.mark.timeout(120)
def test_a_run_warns_from_python_of_what_the_command_line_warns_of_after_it(recwarn):
    """GPUs left without a tile column were warned of by `tiledsl run` only: from Python the run
    warned of nothing, and its summary's notes were empty, as if the GPUs had worked."""
    out = tiledsl.load("cholesky").run(n=600, tiles={"nb": 200}, gpus=2, gpu_backend="emulated", gpu_ratio="5:1",
                                       tuned=False)
    said = ('GPU 1, 2 held no tile and ran no task: the host:GPU ratio 5:1 dealt them no tile column that a task '
            'touches at this size (gpu_ratio="0:1" gives the GPUs every column)')
    assert [str(w.message) for w in recwarn if w.category is tiledsl.TiledslWarning] == [said]
    assert out.summary()["notes"] == [said]


def test_a_matrix_file_loaded_as_a_program_is_answered_in_python():
    """tiledsl.load("a.npy") advised `--input NAME=a.npy`, an option of the command line."""
    with pytest.raises(TiledslError, match=re.escape("a.npy is a matrix file, not a program: give its matrix to "
                                                     "run(), as run(NAME=numpy.load('a.npy'))")):
        tiledsl.load("a.npy")


@pytest.mark.timeout(120)
def test_a_missing_load_file_with_n_given_is_said_without_the_driver_cache(tmp_path, monkeypatch):
    """With n= given, a missing `load` file was 'the size cannot be read from Y's file' (no size was
    read), and the places looked in named tiledsl's driver cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "ld.tile").write_text('program ld {\n  matrix Y[n, n] = load "data.npy"\n'
                                      '  for k in 0 .. Y.mt { potrf(Y[k, k]) }\n}\n')
    with pytest.raises(TiledslError) as raised:
        tiledsl.load(tmp_path / "ld.tile").run(n=4, tiles={"nb": 2})
    said = str(raised.value)
    assert said.startswith("the file of load 'data.npy' of matrix Y (ld.tile:2) does not exist"), said
    assert said.endswith(f"looked for in {tmp_path}") and "cache" not in said


@pytest.mark.timeout(120)
def test_a_corrupt_tuning_cache_is_warned_at_the_callers_line(tmp_path, monkeypatch):
    """The warning pointed at runtime/layout.py, not at the user's run() as the others do."""
    import os

    from tiledsl.runtime import tuning

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # not tmp_path/tiledsl: the package's name
    monkeypatch.delenv("TILEDSL_NO_TUNE", raising=False)
    path = tuning.cache_path()
    path.parent.mkdir(parents=True)
    path.write_text('{"entries": {"cholesky/cpu": ')
    (tmp_path / "user.py").write_text("import tiledsl\n\ntiledsl.load('cholesky').run(n=60)\n")
    out = subprocess.run([sys.executable, "user.py"], cwd=tmp_path, capture_output=True, text=True, timeout=100,
                         env=os.environ)
    assert out.returncode == 0 and out.stderr.startswith(f"{tmp_path / 'user.py'}:3: TiledslWarning: ignoring the "
                                                         f"corrupt tuning cache {path}"), out.stderr


@pytest.mark.timeout(120)
def test_the_output_says_where_its_settings_came_from(monkeypatch):
    """--json had "sources" and "workers"; the Python output had neither, so a notebook could not tell
    a tuned tile size from the program's default."""
    monkeypatch.setenv("TILEDSL_NO_TUNE", "1")
    out = tiledsl.load("qr").run(n=60, tiles={"nb": 20}, workers=1)
    assert out.sources == {"nb": "given"} and out.workers == 1
    assert out.summary()["sources"] == {"nb": "given"} and out.summary()["workers"] == 1
    assert tiledsl.load("cholesky").run(n=60).sources == {"nb": "program default"}


def test_a_python_complex_among_objects_is_refused_as_complex():
    """It was 'not an array of numbers (float() argument must be ... not 'complex')'."""
    given = np.eye(4, dtype=object) * 5
    given[0, 1] = 1 + 0j
    with pytest.raises(TiledslError, match=re.escape("matrix A: element (0, 1) = (1+0j) is complex; tiledsl "
                                                     "computes in float64: pass the real parts")):
        tiledsl.load("cholesky").run(A=given, tiles={"nb": 2})


def test_a_parameter_given_to_run_over_a_tuned_one_is_said_given():
    """With qr's ib in the tuning cache, params={'ib': 32} was said to come from the 'command line'."""
    from tiledsl.runtime.layout import _use_tuned_params
    from tiledsl.runtime.options import API, COMMAND_LINE, Options

    program = tiledsl.load("qr").driver.PROGRAM
    for spelling, said in ((API, "given"), (COMMAND_LINE, "command line")):
        options = Options(n=60, sets={"ib": 32}, spelling=spelling)
        _use_tuned_params(program, options, {"ib": 48}, {"ib": 48}, "tuned (t.json)")
        assert options.sets == {"ib": 32} and options.sources == {"ib": said}


def test_a_requirements_reason_of_several_lines_is_quoted_on_one(tmp_path):
    """`require n > 1 "first\\nsecond"` split the usage error over two lines."""
    (tmp_path / "p.tile").write_text('program p {\n  require n > 1 "first\\nsecond"\n  matrix A[n, n] = random spd\n'
                                     "  potrf(A[0, 0])\n}\n")
    with pytest.raises(TiledslError) as error:
        tiledsl.load(tmp_path / "p.tile").run(n=1)
    assert str(error.value).startswith("p requires n > 1 (first\\nsecond), which n = 1")


def test_check_finite_names_the_task_that_wrote_a_nan(tmp_path):
    """Tester w: run(check_finite=True) was refused as a command-line option, and a NaN a kernel wrote could not
    be traced to its task from Python (numpy finds it in the result, not who wrote it)."""
    (tmp_path / "k.py").write_text("import numpy as np\n\n\ndef spoil(A):\n    A[0, 0] = np.nan\n")
    (tmp_path / "s.tile").write_text('use "k.py"\nkernel spoil(inout A)\nprogram s {\n  tiling uniform(nb = 32)\n'
                                     "  matrix A[n, n] = random spd\n  spoil(A[1, 1])\n"
                                     "  for k in 0 .. A.nt { potrf(A[k, k]) }\n}\n")
    program = tiledsl.load(str(tmp_path / "s.tile"))
    with pytest.raises(tiledsl.TiledslError, match=r"kernel potrf failed on A\[1, 1\] .*\(no input held one: an "
                                                   r"earlier task wrote it, and check_finite=True names the first"):
        program.run(n=64)
    with pytest.raises(tiledsl.TiledslError, match=r"kernel spoil failed on A\[1, 1\] .*nan at \(0, 0\) of A\[1, 1\] "
                                                   r"\(check_finite=True\)") as caught:  # as run() spells it (f51)
        program.run(n=64, check_finite=True)
    assert caught.value.__cause__ is None  # the runtime's finding: the kernel raised nothing
    with pytest.raises(tiledsl.TiledslError, match="allow_nonfinite=True and check_finite=True contradict"):
        program.run(n=64, check_finite=True, allow_nonfinite=True)
    with pytest.raises(tiledsl.TiledslError, match="check_finite must be True or False, got 'yes'"):
        program.run(n=64, check_finite="yes")
    spoiled = np.eye(64)
    spoiled[1, 1] = np.nan
    with pytest.raises(tiledsl.TiledslError) as caught:  # an input's, said as run() spells it too (tester v82c)
        program.run(check_finite=True, A=spoiled)
    assert str(caught.value) == "rank 0: input A holds nan at (1, 1) (check_finite=True refuses non-finite inputs)"
