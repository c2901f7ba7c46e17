"""Inferring n and the params from the inputs' shapes (runtime.fitting): solved where the
size formulas are affine in them, ambiguous where two values fit or the shapes leave them
free, a requirement said as such, and char or float params never taken for sizes; the
messages of the params' defaults and requirements (runtime.layout) it relies on."""
import re
from dataclasses import replace

import numpy as np
import pytest

from tiledsl.runtime.fitting import check_files, file_shapes, fit, fit_files
from tiledsl.runtime.layout import check_settings, make_params
from tiledsl.runtime.options import API, COMMAND_LINE, Options, SetText
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
    return fit(driver(tmp_path, body), shapes, Options(n=n, sets=params or {}, spelling=spelling))


@pytest.mark.parametrize("body, shapes, expected", [
    ("param q = 2\n  matrix B[n * q, n] = zeros", {"B": (900, 300)}, (300, {"q": 3})),
    ("param q = 2\n  matrix B[n + q, n] = zeros", {"B": (350, 300)}, (300, {"q": 50})),
    ("param q = 2\n  matrix B[n * q, n] = zeros", {"B": (600, 300)}, (300, {})),  # q's default fits
    ("param p = 3\n  matrix A[2 * n, n + 1] = zeros\n  matrix B[n // 2, p * n] = zeros", {"A": (20, 11)}, (10, {})),
    ("param p = 3\n  matrix A[2 * n, n + 1] = zeros\n  matrix B[n // 2, p * n] = zeros", {"B": (5, 30)}, (10, {})),
    ("param p = 3\n  matrix A[2 * n, n + 1] = zeros\n  matrix B[n // 2, p * n] = zeros", {"B": (5, 50)},
     (10, {"p": 5})),  # n // 2 = 5 leaves 10 and 11, of which only 10 divides 50
    # two unknowns setting both dimensions together: solved for at once, not one at a time
    ("param r = 3\n  matrix B[n + r, n - r] = zeros", {"B": (105, 95)}, (100, {"r": 5})),
    ("param r = 3\n  matrix B[n + 2 * r, n + r] = zeros", {"B": (110, 105)}, (100, {"r": 5})),
    ("param r = 3\n  matrix B[2 * n + r, n // 2 + r] = zeros", {"B": (205, 55)}, (100, {"r": 5})),
])
def test_a_value_the_shapes_determine_is_solved_for(tmp_path, body, shapes, expected):
    assert fitted(tmp_path, body, shapes) == expected


@pytest.mark.timeout(120)
def test_more_unknowns_than_the_shapes_tell_keep_a_default_that_fits(tmp_path):
    """Three unknowns and two dimensions: too many to try together ("give n and params"), though
    q's default fits (and r's does not: 2n = 407)."""
    body = "param q = 4\n  param r = 3\n  matrix B[n + q + r, n - q] = zeros"
    assert fitted(tmp_path, body, {"B": (300, 110)}) == (114, {"r": 182})
    with pytest.raises(UsageError, match=r"fit several sizes \(n=6, q=-2, r=3 or n=12, q=4, r=-9 or \.\.\.\)"):
        fitted(tmp_path, body, {"B": (7, 8)})  # each default fits (and other values): the user chooses


def test_fits_of_more_unknowns_than_dimensions_are_listed_as_some_of_them(tmp_path):
    """n * q = 110 has eight solutions; the list named three as if they were all."""
    with pytest.raises(UsageError, match=r"fit several sizes \(n=1, q=110, r=194 or .* or \.\.\.\): give"):
        fitted(tmp_path, "param q = 4\n  param r = 3\n  matrix B[n * q, n + r] = zeros", {"B": (110, 195)})


def test_two_values_fitting_alike_are_listed(tmp_path):
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, "param r = n // 2\n  matrix B[r, r] = zeros", {"B": (150, 150)}, spelling=COMMAND_LINE)
    assert str(error.value) == ("the input files' shapes fit several sizes (n=300, r=150 or n=301, r=150): "
                                "give --n to choose")


@pytest.mark.parametrize("shape, listed", [((300, 103), "n=3, q=100 or n=100, q=3"),
                                           ((600, 50), "n=20, q=30 or n=30, q=20"),  # one was run silently
                                           ((2496, 100), "n=48, q=52 or n=52, q=48")])  # none was found
def test_the_solutions_of_a_product_are_all_found(tmp_path, shape, listed):
    """n * q and n + q: both solutions, from different starts and a sweep of each unknown."""
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, "param q = 2\n  matrix B[n * q, n + q] = zeros", {"B": shape})
    assert str(error.value) == (f"the inputs' shapes fit several sizes ({listed}): give n= or params={{'q': ...}} to "
                                f"choose")


def test_a_misfit_of_a_shape_the_tile_size_sets_names_the_tile_setting(tmp_path):
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, "matrix B[n, nb] = zeros", {"B": (100, 50)}, spelling=COMMAND_LINE)
    assert str(error.value).endswith("B has shape (100, 50), expected (100, 4); give --n and --set or --nb for the "
                                     "size you mean")


def test_a_requirement_the_only_fitting_values_break_is_the_error(tmp_path):
    body = 'param q = 2\n  require q >= 3 "three blocks at least"\n  matrix B[n * q, n] = zeros'
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, body, {"B": (600, 300)})
    assert str(error.value) == ("p requires q >= 3 (three blocks at least), which n = 300, nb = 4, q = 2 break "
                                "(p.tile:6)")
    assert fitted(tmp_path, body, {"B": (900, 300)}) == (300, {"q": 3})


@pytest.mark.parametrize("q", [-1, 0])
def test_a_requirement_the_given_settings_break_at_any_size_is_the_error(tmp_path, q):
    """--set q=-1 with an input was told that B has shape (200, 100), expected (-100, 100): give --n (tester r66)."""
    body = 'param q = 2\n  require q >= 1 "q at least one"\n  matrix B[n * q, n] = zeros'
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, body, {"B": (200, 100)}, params={"q": q})
    assert str(error.value) == f"p requires q >= 1 (q at least one), which n = 100, nb = 4, q = {q} break (p.tile:6)"
    with pytest.raises(UsageError, match=r"B has shape \(200, 100\), expected \(300, 100\)"):  # at any q it meets
        fitted(tmp_path, body, {"B": (200, 100)}, params={"q": 3})


@pytest.mark.parametrize("inputs", [{}, {"B": (1000, 50)}])
def test_the_size_given_as_a_param_is_said_to_be_an_option_of_its_own(tmp_path, inputs):
    """--set n=79 without --n nor inputs was told 'give --n (the matrix order) or --input ...' (with --n too: '--set
    n: n is not a parameter')."""
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, "param q = 2\n  matrix B[n, q] = zeros", inputs, params={"n": SetText("79")},
               spelling=COMMAND_LINE)
    assert str(error.value) == "--set n: n is not a parameter of p: give it as --n"


def test_char_and_float_params_are_never_sizes(tmp_path):
    """Eight params, six of them char or float: only steps and m are tried against the dimensions."""
    chars = "".join(f'param {name} = "L"\n  ' for name in ("side", "uplo", "trans", "diag"))
    body = (chars + "param alpha = 1.0\n  param beta = 0.5\n  param steps = 2\n  param m = n\n"
            "  require steps >= 1\n  matrix A[n, n] = zeros\n  matrix B[n, m] = zeros\n  matrix C[n, 150] = zeros")
    assert fitted(tmp_path, body, {"A": (300, 300), "B": (300, 200), "C": (300, 150)}) == (300, {"m": 200})
    assert fitted(tmp_path, body, {"B": (300, 200)}, params={"side": "R", "alpha": 2.5}) == (
        300, {"side": "R", "alpha": 2.5, "m": 200})


def test_a_param_no_shape_depends_on_that_a_requirement_pins_is_inferred(tmp_path):
    """Tester v: B is n x r (side L) or r x n (side R), its shape in rows and cols, and a requirement ties
    them to r: with side R and B 77 x 437, 'nothing in the inputs' shapes depends on r: give r=', though
    the requirement leaves r one value. A param the requirements do not pin is still not guessed."""
    body = ('param side = "L"\n  param r = 150\n  param rows = n\n  param cols = r\n'
            '  require (side == "L" and rows == n and cols == r) or (side == "R" and rows == r and cols == n)\n'
            "  matrix A[n, n] = zeros\n  matrix B[rows, cols] = zeros")
    assert fitted(tmp_path, body, {"A": (437, 437), "B": (77, 437)}, params={"side": "R"}) == (
        437, {"side": "R", "r": 77, "rows": 77, "cols": 437})
    with pytest.raises(UsageError, match=r"^p requires rows <= r, which n = 300, nb = 4, r = 150, rows = 200 break"):
        fitted(tmp_path, "param r = 150\n  param rows = n\n  require rows <= r\n  matrix B[rows, n] = zeros",
               {"B": (200, 300)})  # r >= 200 would do: none is guessed, the requirement is the error


def test_n_no_input_depends_on_is_not_guessed(tmp_path):
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, "param m = 1\n  matrix B[m, m] = zeros", {"B": (4, 4)})
    assert str(error.value) == "nothing in the inputs' shapes depends on n: give n="


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


@pytest.mark.parametrize("text, said", [("1e400", "is not a finite number"), ("inf", "is not a finite number"),
                                         ("nan", "is not a finite number"), ("one", "is not a number")])
def test_a_set_text_that_is_no_finite_number_says_which(tmp_path, text, said):
    path = tmp_path / "scale.tile"
    path.write_text("program scale {\n  param alpha = 1.5\n  matrix A[n, n] = zeros\n"
                    "  gemm(A[0, 0], A[1, 0], A[1, 1], \"N\", \"N\", alpha, 1.0)\n}\n")
    with pytest.raises(UsageError) as error:
        check_settings(load(path).driver, Options(n=100, sets={"alpha": SetText(text)}, spelling=COMMAND_LINE))
    assert str(error.value) == f"--set alpha={text}: {text!r} {said} (alpha's default is 1.5)"


@pytest.mark.parametrize("body, side, listed", [
    ('param q = 2\n  require q >= 3 "three"\n  matrix B[n * q, n * q] = zeros', 300,
     "n=1, q=300 or n=2, q=150 or n=3, q=100 or n=4, q=75 or ..."),  # q's default fits, but breaks it
    ('param q = 2\n  require q >= 3 "three"\n  require n % 2 == 0 "even"\n  matrix B[n * q, n * q] = zeros', 300,
     "n=2, q=150 or n=4, q=75 or n=6, q=50 or n=10, q=30 or ..."),  # n=100, q=3 meets both too
    ("param q = 2\n  matrix B[n * q, n * q] = zeros", 301, "n=1, q=301 or n=7, q=43 or n=43, q=7 or n=301, q=1"),
])
def test_values_the_shapes_leave_free_to_move_together_are_ambiguous(tmp_path, body, side, listed):
    """n · q is all the shapes tell: the fits are listed, never one picked."""
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, body, {"B": (side, side)}, spelling=COMMAND_LINE)
    assert str(error.value) == (f"the input files' shapes fit several sizes ({listed}): give --n or --set q=... to "
                                f"choose")


@pytest.mark.parametrize("body, shapes, spelling, choose", [
    ("param h = 10\n  matrix B[h // 2, n] = zeros", {"B": (7, 40)}, COMMAND_LINE, "--set h=... to choose"),
    ("param h = 10\n  matrix B[h // 2, n // 2] = zeros", {"B": (7, 20)}, COMMAND_LINE, "--n and --set h=... to choose"),
    ("param h = 10\n  param g = 3\n  matrix B[h // 2, g // 2] = zeros\n  matrix A[n, n] = zeros",
     {"A": (5, 5), "B": (7, 20)}, API, "params={'h': ..., 'g': ...} to choose"),
])
def test_fits_are_told_apart_by_what_differs_in_them(tmp_path, body, shapes, spelling, choose):
    """B[h // 2, n] of 7×40, h=14 or 15 with n=40 in both, was told 'give --n or --set to choose'."""
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, body, shapes, spelling=spelling)
    assert str(error.value).endswith(f"): give {choose}")


def test_a_file_that_fits_several_values_at_the_n_given_is_told_each(tmp_path):
    """--n 40 and B[h // 2, n] of 7×40: the file was said against h=10's 5 rows, with no hint."""
    np.save(tmp_path / "b.npy", np.ones((7, 40)))
    program = driver(tmp_path, "param h = 10\n  matrix B[h // 2, n] = zeros")
    with pytest.raises(UsageError) as error:
        check_files(program, Options(n=40, inputs={"B": str(tmp_path / "b.npy")}, spelling=COMMAND_LINE))
    assert str(error.value).endswith("has shape (7, 40) but the matrix needs shape (5, 40) (--set h=14 or --set h=15 "
                                     "gives the matrix the file's shape)")
    np.save(tmp_path / "c.npy", np.ones((81, 7)))  # n=40, and p + q = 7: several sizes, at another n
    program = driver(tmp_path, "param p = 2\n  param q = 3\n  param h = 10\n  matrix B[h // 2, n] = zeros\n"
                               "  matrix C[n * 2 + 1, p + q] = zeros")
    with pytest.raises(UsageError) as error:  # 'give --set p=... --set q=... --set h=...' alone kept --n 30
        check_files(program, Options(n=30, inputs={name: str(tmp_path / f"{name.lower()}.npy") for name in "BC"},
                                     spelling=COMMAND_LINE))
    assert str(error.value).endswith(
        "(leave --n out: the input files' shapes fit several sizes (n=40, h=14, p=2, q=5 or n=40, h=14, p=4, q=3 or "
        "n=40, h=15, p=2, q=5 or n=40, h=15, p=4, q=3): give --set p=... --set q=... --set h=... to choose)")


def test_one_fit_the_shapes_do_not_pin_down_is_ambiguous_too(tmp_path):
    body = 'param q = 2\n  require q == 3\n  matrix B[n * q, n * q] = zeros'
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, body, {"B": (300, 300)})
    assert str(error.value) == ("the inputs' shapes do not pin down n and q: n=100, q=3 fits, and so may other "
                                "values; give n= or params= to choose")
    assert fitted(tmp_path, body, {"B": (300, 300)}, params={"q": 3}) == (100, {"q": 3})


def test_the_param_a_derived_default_follows_is_inferred_rather_than_the_derived_one_overridden(tmp_path):
    """w = 8 fits with lev = 2 overridden as with lev = 3 inferred: the latter keeps w = 2 ** lev."""
    body = "param lev = 2\n  param w = 2 ** lev\n  matrix B[n, w * nb] = zeros"
    assert fitted(tmp_path, body, {"B": (1000, 32)}) == (1000, {"lev": 3})


def test_inputs_giving_one_size_two_values_are_said_to_disagree(tmp_path):
    body = "param m = n\n  matrix A[m, n] = zeros\n  matrix B[n, m] = zeros"
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, body, {"A": (400, 250), "B": (400, 250)})
    assert str(error.value) == ("the inputs' shapes disagree with p, which makes A's rows and B's columns the same "
                                "size (here 400 and 250), and A's columns and B's rows the same size (here 250 and "
                                "400); A is 400×250, B is 400×250")


def test_inputs_that_each_fit_a_size_of_their_own_are_said_to_disagree(tmp_path):
    """A's shape gives n=100 and B's n=300: the message was 'with n=300, r=-195, q=3, A has shape (105, 95),
    expected (105, 495); give n= and params= for the size you mean', a size no input meant."""
    body = "param r = 1\n  param q = 2\n  matrix A[n + r, n - r] = zeros\n  matrix B[n * q, n] = zeros"
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, body, {"A": (105, 95), "B": (900, 300)})
    assert str(error.value) == ("the inputs' shapes disagree with p: A alone fits n=100, r=5 and B alone n=300, q=3, "
                                "a different n; A is 105×95, B is 900×300")


def test_sizes_no_unknown_moves_are_not_tied_to_each_other(tmp_path):
    """S[m, 1] and T[1, n]: S's columns and T's rows are both 1, which ties nothing; a wrong one is
    said against the shape expected."""
    body = "param m = n\n  matrix S[m, 1] = zeros\n  matrix T[1, n] = zeros\n  matrix B[m, n] = zeros"
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, body, {"S": (230, 2), "T": (1, 170)})
    assert str(error.value) == ("the inputs' shapes fit no size of p: with n=170, m=230, S has shape (230, 2), "
                                "expected (230, 1); give n= and params= for the size you mean")


@pytest.mark.parametrize("spelling, inputs, said", [(COMMAND_LINE, "input files'", "--set nrhs=64"),
                                                    (API, "inputs'", "params={'nrhs': 64}")])
def test_a_param_given_that_sizes_an_input_otherwise_is_the_one_to_leave_out(tmp_path, spelling, inputs, said):
    """--set nrhs=64 with a 50-column B file was told 'give --n and --set for the size you mean'; the API's
    arrays were called files ('to take nrhs from the files' shapes')."""
    body = "param nrhs = 50\n  matrix L[n, n] = zeros\n  matrix B[n, nrhs] = zeros"
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, body, {"L": (1000, 1000), "B": (1000, 50)}, params={"nrhs": SetText("64")}, spelling=spelling)
    assert str(error.value) == (f"the {inputs} shapes fit no size of p: with n=1000, nrhs=64, B has shape (1000, 50), "
                                f"expected (1000, 64); {said} sizes B: leave it out to take nrhs=50 from the {inputs} "
                                f"shapes")


def test_a_param_to_leave_out_is_named_where_the_inputs_then_fit_several_sizes(tmp_path):
    """gemm's A alone (90×70) with m=80: 'give n= and params= for the size you mean'; with B too, m=80 was named
    as the one to leave out. Without it, A gives m=90 and k=70, and n is still to choose."""
    body = "param m = n\n  param k = n\n  matrix B[m, k] = zeros\n  matrix C[m, n] = zeros"
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, body, {"B": (90, 70)}, params={"m": SetText("80")}, spelling=API)
    assert str(error.value).endswith("params={'m': 80} sizes B: leave it out to take m=90 from the inputs' shapes, "
                                     "and give n= or params= to choose among the sizes they fit"), error.value


def test_a_square_matrix_given_a_rectangle_is_said_to_be_square(tmp_path):
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, "matrix B[n, n] = zeros", {"B": (300, 200)})
    assert str(error.value) == "the inputs' shapes disagree with p, which makes B square; B is 300×200"


def test_an_n_the_given_params_leave_out_of_every_shape_is_asked_for(tmp_path):
    body = "param m = n\n  param k = n\n  matrix B[m, k] = zeros"
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, body, {"B": (400, 250)}, params={"m": 400, "k": 250}, spelling=COMMAND_LINE)
    assert str(error.value) == "nothing in the input files' shapes depends on n: give --n"


def test_the_shapes_are_fitted_at_the_runs_tiles_and_a_misfit_of_tuned_ones_says_so(tmp_path):
    program = driver(tmp_path, "param c = 4\n  matrix B[n, c * nb] = zeros")
    tuned = Options(n=None, tiles={"nb": 8}, sources={"nb": "tuned (cache)"}, spelling=COMMAND_LINE)
    assert fit(program, {"B": (100, 16)}, tuned) == (100, {"c": 2})
    (tmp_path / "fixed").mkdir()
    program = driver(tmp_path / "fixed", "matrix B[n, 4 * nb] = zeros")
    with pytest.raises(UsageError) as error:
        fit(program, {"B": (100, 16)}, tuned)  # nb = 4, the program's, fits
    assert str(error.value) == ("the input files' shapes fit no size of p: with n=100, B has shape (100, 16), "
                                "expected (100, 32); nb = 8 is tuned (tiledsl tune's cache): give --nb, or --no-tune")


@pytest.mark.parametrize("body, lev, why", [
    ("param lev = 2\n  param w = 2 ** lev", -1, "the exponent of '**' is negative: 2 ** -1"),
    ("param lev = 2\n  param w = 2 ** lev", 70, "2 ** 70 is beyond the 64-bit range"),
    ("param lev = 2\n  param w = 4 // lev", 0, "integer division or modulo by zero"),
])
def test_a_default_that_cannot_be_computed_names_its_param_and_the_values(tmp_path, body, lev, why):
    program = driver(tmp_path, body + "\n  matrix B[n, w * nb] = zeros")
    with pytest.raises(UsageError) as error:
        make_params(program, Options(n=100, sets={"lev": lev}))
    assert str(error.value) == f"the default of param w cannot be computed with n = 100, nb = 4, lev = {lev}: {why}"


def test_a_requirement_that_tuned_values_break_says_so(tmp_path):
    program = driver(tmp_path, 'require n % nb == 0 "whole tiles"\n  matrix B[n, n] = zeros')
    tuned = Options(n=384, tiles={"nb": 256}, sources={"nb": "tuned (cache)"})
    with pytest.raises(UsageError) as error:
        make_params(program, tuned)
    assert str(error.value) == ("p requires n % nb == 0 (whole tiles), which n = 384, nb = 256 break (p.tile:5); "
                                "nb = 256 is tuned (tiledsl tune's cache): give --nb, or --no-tune")
    with pytest.raises(UsageError) as error:
        make_params(program, replace(tuned, n=385))  # the program's nb = 4 breaks it too: the tuning is not why
    assert str(error.value) == "p requires n % nb == 0 (whole tiles), which n = 385, nb = 256 break (p.tile:5)"


def test_a_misfit_at_the_n_given_names_an_n_and_params_that_fit(tmp_path):
    """The API said only that nothing fit at n=40; the command line named the settings."""
    body = "param q = 4\n  param r = 2\n  matrix B[n + q, n - r] = zeros"
    with pytest.raises(UsageError, match=re.escape("give n= and params= for the size you mean (n=56, params={'r': 8} "
                                                   "fits)")):
        fitted(tmp_path, body, {"B": (57, 48)}, params={"q": 1}, n=40)


def test_a_misfit_with_every_sizing_value_given_asks_for_none(tmp_path):
    """n and r given, a param that sizes nothing left: "give n= and params=" asked for what was given."""
    body = "param r = 3\n  param unused = 8\n  matrix B[n, r * n] = zeros"
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, body, {"B": (300, 700)}, params={"r": 3}, n=300)
    assert str(error.value).endswith("B has shape (300, 700), expected (300, 900)")


def test_a_misfit_of_a_shape_only_the_tile_size_sets_names_no_trial_n(tmp_path):
    """B[nb, nb] given 40×40: 'with n=40, B has shape (40, 40), expected (4, 4); give --n and --set or
    --nb', an n nothing determined and options that cannot help."""
    with pytest.raises(UsageError) as error:
        fitted(tmp_path, "param q = 2\n  matrix A[n, q] = zeros\n  matrix B[nb, nb] = zeros", {"B": (40, 40)},
               spelling=COMMAND_LINE)
    assert str(error.value) == ("the input files' shapes fit no size of p: B has shape (40, 40), expected (4, 4), "
                                "a shape that only nb changes: give --nb for the size you mean")


@pytest.mark.parametrize("sets, said", [
    ({}, "(the input files fit n=131, m=129, k=37: leave --n out) (load 'a.npy' of matrix A, p.tile:7)"),
    ({"m": SetText("5")}, "(the input files fit n=131, m=129, k=37: leave --n and --set m=5 out) "
                          "(load 'a.npy' of matrix A, p.tile:7)"),
    ({"m": SetText("129"), "k": SetText("37")}, "(--n 131 gives the matrix the file's shape)"),  # B's alone: fits A
])
def test_a_file_at_odds_with_the_n_given_is_told_settings_that_fit_every_file(tmp_path, sets, said):
    """--n 100, A (loaded) 129×37 and B 37×131: A was told '--set m=129 --set k=37 gives the matrix the
    file's shape', after which B failed with '--n 131 gives ...': each file's advice fitted it alone."""
    np.save(tmp_path / "a.npy", np.ones((129, 37)))
    np.save(tmp_path / "b.npy", np.ones((37, 131)))
    program = driver(tmp_path, 'param m = n\n  param k = n\n  matrix A[m, k] = load "a.npy"\n'
                               '  matrix B[k, n] = zeros')
    with pytest.raises(UsageError) as error:
        check_files(program, Options(n=100, sets=sets, inputs={"B": str(tmp_path / "b.npy")}, spelling=COMMAND_LINE))
    assert str(error.value).endswith(said)


def test_files_no_settings_fit_together_are_said_to_disagree(tmp_path):
    """A 129×37 and B 129×37 (B[k, n] transposed): no size fits both, and the advice for A alone failed on B."""
    np.save(tmp_path / "a.npy", np.ones((129, 37)))
    program = driver(tmp_path, "param m = n\n  param k = n\n  matrix A[m, k] = zeros\n  matrix B[k, n] = zeros")
    with pytest.raises(UsageError) as error:
        check_files(program, Options(n=100, inputs={name: str(tmp_path / "a.npy") for name in "AB"},
                                     spelling=COMMAND_LINE))
    assert str(error.value).endswith(
        "has shape (129, 37) but the matrix needs shape (100, 100); the input files' shapes disagree with p, which "
        "makes A's columns and B's rows the same size (here 37 and 129); A is 129×37, B is 129×37")


def test_the_settings_that_fit_are_said_as_python_takes_them(tmp_path):
    """'(n=400 params={'m': 520} params={'k': 300} fits)': params= twice is a SyntaxError in a call."""
    body = "param m = n\n  param k = n\n  matrix A[m, k] = zeros\n  matrix B[k, n] = zeros"
    with pytest.raises(UsageError, match=re.escape("(n=400, params={'m': 520, 'k': 300} fits)")):
        fitted(tmp_path, body, {"A": (520, 300), "B": (300, 400)}, n=300)


@pytest.mark.parametrize("shape, hint", [((6,), True), ((), False), ((2, 2, 2), False)])
def test_an_input_file_of_other_than_two_dimensions_is_said_as_the_api_says_an_array(tmp_path, shape, hint):
    """Tester w81f: a 1-D file got 'holds 1 dimension(s), not 2', the API's array a shape and how to reshape it."""
    np.save(tmp_path / "v.npy", np.zeros(shape))
    with pytest.raises(UsageError) as refused:
        file_shapes({"A": str(tmp_path / "v.npy")})
    said = f"input file {str(tmp_path / 'v.npy')!r} of matrix A: expected a 2-D array, got shape {shape}"
    assert str(refused.value) == said + (" (a vector is a matrix of one column: save it as "
                                         "numpy.save(FILE, vector.reshape(-1, 1)))" if hint else "")


def test_shapes_that_fit_no_size_are_said_with_the_file_that_gave_each(tmp_path):
    """Tester v82f: a loaded file of the wrong shape was said as 'A is 130×70', naming neither the file nor the
    `load` line; a file that cannot be a matrix, or is missing, now names the `load` line too."""
    np.save(tmp_path / "a.npy", np.ones((130, 70)))
    np.save(tmp_path / "b.npy", np.ones((3, 4)))
    program = driver(tmp_path, '  matrix A[n, n] = load "a.npy"\n  matrix B[n, n] = zeros')
    with pytest.raises(UsageError) as error:
        fit_files(program, Options(n=None, inputs={"B": str(tmp_path / "b.npy")}, spelling=COMMAND_LINE))
    assert str(error.value).endswith(f"(A: {tmp_path / 'a.npy'}, load at p.tile:5; B: --input B={tmp_path / 'b.npy'})")
    np.save(tmp_path / "a.npy", np.ones(4))
    with pytest.raises(UsageError) as error:
        fit_files(program, Options(n=None, spelling=COMMAND_LINE))
    assert str(error.value).endswith("(load 'a.npy' of matrix A, p.tile:5)")
    (tmp_path / "a.npy").unlink()
    with pytest.raises(UsageError) as error:
        fit_files(program, Options(n=None, spelling=COMMAND_LINE))
    assert str(error.value).startswith("the file of load 'a.npy' of matrix A (p.tile:5) does not exist: a relative "
                                       "path is relative")
