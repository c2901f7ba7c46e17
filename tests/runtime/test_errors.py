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
