"""Inferring n and the params from the inputs' shapes (runtime.fitting): solved where the
size formulas are affine in them, ambiguous where two values fit, a requirement said as
such, and char or float params never taken for sizes."""
import pytest

from tiledsl.runtime.fitting import fit
from tiledsl.runtime.layout import check_settings
from tiledsl.runtime.options import API, COMMAND_LINE, Options
from tiledsl.runtime.world import UsageError
from tiledsl.api import load

KERNELS = "def touch(X):\n    pass\n"

# the programs declare matrices and params only for their shapes: the compiler's warnings say so
pytestmark = pytest.mark.filterwarnings("ignore::tiledsl.api.TiledslWarning")


def driver(tmp_path, body: str):
    """The driver of a program `p` of these declarations, whose one task touches B's first tile."""
    (tmp_path / "k.py").write_text(KERNELS)
    (tmp_path / "p.tile").write_text(f'use "k.py"\nkernel touch(inout X)\nprogram p {{\n  tiling uniform(nb = 4)\n'
                                     f'{body}\n  touch(B[0, 0])\n}}\n')
    return load(tmp_path / "p.tile").driver


def fitted(tmp_path, body: str, shapes: dict, params=None, n=None, spelling=API):
    return fit(driver(tmp_path, body), shapes, n, {}, params or {}, spelling)


@pytest.mark.parametrize("body, shapes, expected", [
    ("param q = 2\n  matrix B[n * q, n] = zeros", {"B": (900, 300)}, (300, {"q": 3})),
    ("param q = 2\n  matrix B[n + q, n] = zeros", {"B": (350, 300)}, (300, {"q": 50})),
    ("param q = 2\n  matrix B[n * q, n] = zeros", {"B": (600, 300)}, (300, {})),  # q's default fits
    ("param p = 3\n  matrix A[2 * n, n + 1] = zeros\n  matrix B[n // 2, p * n] = zeros", {"A": (20, 11)}, (10, {})),
    ("param p = 3\n  matrix A[2 * n, n + 1] = zeros\n  matrix B[n // 2, p * n] = zeros", {"B": (5, 30)}, (10, {})),
    ("param p = 3\n  matrix A[2 * n, n + 1] = zeros\n  matrix B[n // 2, p * n] = zeros", {"B": (5, 50)},
     (10, {"p": 5})),  # n // 2 = 5 leaves 10 and 11, of which only 10 divides 50
])
def test_a_value_the_shapes_determine_is_solved_for(tmp_path, body, shapes, expected):
    assert fitted(tmp_path, body, shapes) == expected


def test_two_values_fitting_alike_are_listed(tmp_path):
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, "param r = n // 2\n  matrix B[r, r] = zeros", {"B": (150, 150)}, spelling=COMMAND_LINE)
    assert str(error.value) == ("the input files' shapes fit several sizes (n=300, r=150 or n=301, r=150): "
                                "give --n or --set to choose")


def test_a_requirement_the_only_fitting_values_break_is_the_error(tmp_path):
    body = 'param q = 2\n  require q >= 3 "three blocks at least"\n  matrix B[n * q, n] = zeros'
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, body, {"B": (600, 300)})
    assert str(error.value) == ("p requires q >= 3 (three blocks at least), which n = 300, nb = 4, q = 2 break "
                                "(p.tile:6)")
    assert fitted(tmp_path, body, {"B": (900, 300)}) == (300, {"q": 3})


def test_char_and_float_params_are_never_sizes(tmp_path):
    """Eight params, six of them char or float: only steps and m are tried against the dimensions."""
    chars = "".join(f'param {name} = "L"\n  ' for name in ("side", "uplo", "trans", "diag"))
    body = (chars + "param alpha = 1.0\n  param beta = 0.5\n  param steps = 2\n  param m = n\n"
            "  require steps >= 1\n  matrix A[n, n] = zeros\n  matrix B[n, m] = zeros\n  matrix C[n, 150] = zeros")
    assert fitted(tmp_path, body, {"A": (300, 300), "B": (300, 200), "C": (300, 150)}) == (300, {"m": 200})
    assert fitted(tmp_path, body, {"B": (300, 200)}, params={"side": "R", "alpha": 2.5}) == (
        300, {"side": "R", "alpha": 2.5, "m": 200})


def test_n_no_input_depends_on_is_not_guessed(tmp_path):
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, "param m = 1\n  matrix B[m, m] = zeros", {"B": (4, 4)})
    assert str(error.value) == "n cannot be inferred: no input's shape depends on it; give n="


def test_the_defaults_in_a_type_error_are_those_of_the_run_or_said_as_following_n(tmp_path):
    gemm = load("gemm").driver
    for n, default in ((100, "100"), (None, "n")):
        with pytest.raises(UsageError) as error:
            check_settings(gemm, Options(n=n, sets={"m": 5.0}, spelling=API))
        assert str(error.value) == f"params={{'m': 5.0}}: m is an integer parameter (its default is {default})"
    tsqr = load("tsqr").driver
    with pytest.raises(UsageError) as error:
        check_settings(tsqr, Options(n=None, sets={"cols": 2.5, "nrhs": 3}, spelling=API))
    assert str(error.value) == "params={'cols': 2.5}: cols is an integer parameter (its default is computed from n)"
