"""runtime.errors: a kernel's exception in one line, whatever it is."""
import pytest

from tiledsl.runtime.errors import MESSAGE_LIMIT, message_of


class Unprintable(Exception):
    def __str__(self):
        raise TypeError("bad str")


@pytest.mark.parametrize("error, text", [
    (ValueError("plain"), "plain"),
    (ValueError("line one\nline two\n\n  indented\n"), "line one | line two | indented"),
    (KeyError("k"), "'k'"),
    (RuntimeError(), ""),
    (Unprintable(), "(its message could not be printed: TypeError in its __str__)"),
])
def test_an_exceptions_message_is_one_line(error, text):
    assert message_of(error) == text


def test_a_long_message_is_cut_and_says_how_long_it_was():
    text = message_of(ValueError("x" * 5000))
    assert text == "x" * MESSAGE_LIMIT + "… (5000 characters)"


def test_a_failure_names_the_loop_nests_values_as_the_program_does(tmp_path):
    """A let ``id`` is ``id_`` in the driver (``id`` is Python's): the message says ``id``."""
    import subprocess
    import sys

    (tmp_path / "ids.tile").write_text("program ids {\n  tiling uniform(nb = 4)\n  matrix U[n, n] = random general\n"
                                       "  for _i in 0 .. U.mt {\n    let id = min(_i, 0)\n"
                                       "    gemm(U[id, 0], U[1, 1], U[_i, 0])\n  }\n}\n")
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "ids.tile", "--n", "8"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "with _i = 0, id = 0)" in out.stderr and "id_" not in out.stderr and "user_i" not in out.stderr


def test_a_failing_hoisted_ownership_test_quotes_its_own_statement(tmp_path):
    """The ownership tests of a loop body's statements are hoisted together above them: one that
    fails is quoted as its statement, not as the first of the block."""
    import subprocess
    import sys

    (tmp_path / "hoisted.tile").write_text("program hoisted {\n  tiling uniform(nb = 100)\n"
                                           "  matrix A[n, n] = random spd\n  for k in 0 .. A.nt {\n"
                                           "    potrf(A[k, k])\n    potrf(A[2 ** (k - 1), 0])\n  }\n}\n")
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "hoisted.tile", "--n", "300"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().endswith("2 ** -1 (in `potrf(A[2 ** (k - 1), 0])`, with k = 0)"), out.stderr
