"""tiledsl.userjson: the JSON files users hand in are read strictly, their faults said plainly."""
import json

import pytest

from tiledsl import userjson


def test_a_well_formed_file_reads_as_json_does():
    text = '{"a": [1, 2.5, -3, {"b": null}], "c": "d"}'
    assert userjson.loads(text) == json.loads(text) and userjson.loads(text.encode()) == json.loads(text)


@pytest.mark.parametrize("text, message", [
    ('{"a": 1, "b": {"c": 2, "c": 3}}', "field 'c' is given twice in one object"),
    ('{"a": -' + "9" * 31 + "}", "an integer of 31 digits"),
    ("[" * 100_000 + "]" * 100_000, "nested too deep"),
])
def test_what_python_reads_leniently_or_not_at_all_is_a_value_error_in_plain_words(text, message):
    with pytest.raises(ValueError) as raised:
        userjson.loads(text)
    assert str(raised.value) == message


def test_a_syntax_error_stays_a_decode_error_with_its_position():
    with pytest.raises(json.JSONDecodeError) as raised:
        userjson.loads('{"a": }')
    assert (raised.value.lineno, raised.value.colno) == (1, 7)
