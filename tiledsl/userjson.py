"""JSON files a user writes or hands in (machine files, traces), read strictly and said in plain words.

Python's reader keeps the last of a field given twice (a machine file's second ``cores`` silently
won), answers an integer of more than 4,300 digits with advice to call
``sys.set_int_max_str_digits()``, and a file nested thousands deep with a ``RecursionError``.
Here each is a :class:`ValueError` saying what is wrong with the file.
"""
from __future__ import annotations

import json

#: the most digits of an integer such a file holds: longer is no count, rate or time
MAX_DIGITS = 30


def loads(data: str | bytes):
    """The JSON value of ``data``; a ValueError (a :class:`json.JSONDecodeError` for a syntax
    error) for a file that is not JSON, gives a field twice in one object, holds an integer of
    more than :data:`MAX_DIGITS` digits or is nested too deep."""
    try:
        return json.loads(data, object_pairs_hook=_once_each, parse_int=_short_integer)
    except RecursionError:
        raise ValueError("nested too deep") from None


def cut_short(text: str, error: json.JSONDecodeError) -> bool:
    """Whether ``text``, which is not JSON (``error`` says why), reads as JSON cut off before its end
    (a file whose writing stopped, copied in part): more was expected where it ends, or a string
    left open runs to its end."""
    rest = text[error.pos:]
    if error.msg.startswith("Unterminated string"):
        return '"' not in rest[1:]
    return not rest.strip()


def _once_each(pairs: list) -> dict:
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError(f"field {key!r} is given twice in one object")
        seen.add(key)
    return dict(pairs)


def _short_integer(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_DIGITS:
        raise ValueError(f"an integer of {digits} digits")
    return int(text)
