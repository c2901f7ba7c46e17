"""Run options read from their text (runtime/options.py)."""
import pytest

from tiledsl.runtime.options import byte_size
from tiledsl.runtime.world import UsageError


@pytest.mark.parametrize("text, size", [("1", 1), ("1000000", 10 ** 6), ("1e6", 10 ** 6), ("2K", 2048),
                                        ("1.5M", 3 * 2 ** 19), ("20g", 20 * 2 ** 30)])
def test_a_size_is_bytes_or_a_power_of_1024(text, size):
    assert byte_size(text, "--gpu-memory") == size


@pytest.mark.parametrize("text, message", [
    ("0", "--gpu-memory must be at least 1 byte, got '0'"),
    ("0.5", "--gpu-memory must be at least 1 byte, got '0.5'"),  # was 0 bytes, then "allows 0 bytes"
    ("-3G", "--gpu-memory must be at least 1 byte, got '-3G'"),
    ("inf", "--gpu-memory: 'inf' is not a finite size"),  # was "must be positive"
    ("1e400", "--gpu-memory: '1e400' is not a finite size"),
    ("nanM", "--gpu-memory: 'nanM' is not a finite size"),
    ("2MB", "--gpu-memory: '2MB' is not a size (bytes, or with a suffix K, M, G or T for powers of 1024: "
            "e.g. 20G, 512M, 1000000)"),
])
def test_a_size_that_is_no_whole_positive_number_of_bytes_is_refused(text, message):
    with pytest.raises(UsageError) as error:
        byte_size(text, "--gpu-memory")
    assert str(error.value) == message
