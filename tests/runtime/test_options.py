"""Run options read from their text (runtime/options.py)."""
import argparse

import numpy as np
import pytest

from tiledsl.runtime.options import byte_size, set_texts, watchdog_seconds
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
    ("2MB", "--gpu-memory: '2MB' is not a size (bytes, or with a suffix K, M, G or T for powers of 1024, or KiB, "
            "MiB, GiB, TiB: e.g. 20G, 512M, 3.5GiB, 1000000)"),
    ("GiB", "--gpu-memory: 'GiB' is not a size (bytes, or with a suffix K, M, G or T for powers of 1024, or KiB, "
            "MiB, GiB, TiB: e.g. 20G, 512M, 3.5GiB, 1000000)"),
])
def test_a_size_that_is_no_whole_positive_number_of_bytes_is_refused(text, message):
    with pytest.raises(UsageError) as error:
        byte_size(text, "--gpu-memory")
    assert str(error.value) == message


@pytest.mark.parametrize("text, size", [("4K", 4096), ("4KiB", 4096), ("3.62 KiB", 3706), ("2gib", 2 ** 31),
                                        ("1.5T", 3 * 2 ** 39), ("1000", 1000)])
def test_a_size_is_read_as_the_messages_write_it_too(text, size):
    """'--gpu-memory 2KiB' was not a size, though the refusal it answered said '2.93 KiB'."""
    assert byte_size(text, "--gpu-memory") == size


def _tiledsl(*args, cwd=None):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


@pytest.mark.timeout(200)
def test_an_option_of_one_value_given_twice_is_refused_by_every_command_and_driver(tmp_path):
    """`--n 1000 ... --n 200` ran n=200 (and --np, --grid, --nodes took their last value), while a
    --set or --input given twice was refused."""
    import subprocess
    import sys

    for args, option, values in ((("run", "cholesky", "--n", 1000, "--nb", 100, "--n", 200), "--n", "1000, then 200"),
                                 (("run", "cholesky", "--np", 2, "--n", 64, "--np", 1), "--np", "2, then 1"),
                                 (("explain", "cholesky", "--grid", "2x2", "--grid", "1x1"), "--grid", "2x2, then 1x1"),
                                 (("simulate", "cholesky", "--nodes", 2, "--nodes", 3), "--nodes", "2, then 3")):
        out = _tiledsl(*args)
        assert out.returncode == 2 and f"error: {option} is given twice ({values}): give it once" in out.stderr, \
            out.stderr
    out = _tiledsl("run", "cholesky", "--n", 64, "--n", 50, "--json")
    assert out.returncode == 2 and '"ok": false' in out.stdout and "--n is given twice" in out.stdout
    assert _tiledsl("run", "cholesky", "--n", 64, "--n", 64).returncode == 0  # the same value twice is one
    (tmp_path / "d.py").write_text(_tiledsl("compile", "cholesky").stdout)
    out = subprocess.run([sys.executable, "d.py", "--n", "64", "--n", "50"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and "d.py: error: --n is given twice (64, then 50): give it once" in out.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("args, said", [
    (("--json", "run", "cholesky", "--n", 100), "tiledsl run cholesky --n 100 --json"),
    (("--n", 100, "run", "cholesky"), "tiledsl run cholesky --n 100"),
    (("-o", "x.py", "compile", "cholesky"), "tiledsl compile cholesky -o x.py"),
    (("--check", "run", "my prog.tile", "--", "x"), "tiledsl run 'my prog.tile' --check -- x"),
])
def test_an_option_before_the_command_is_said_to_go_after_it(args, said):
    """`tiledsl --json run ...` said 'unrecognized arguments: --json (did you mean --json?)', and
    `tiledsl --n 100 run ...` called 100 an invalid command."""
    out = _tiledsl(*args)
    assert out.returncode == 2 and out.stderr.startswith(f"tiledsl: error: options go after the command: {said} ("), \
        out.stderr


@pytest.mark.timeout(120)
def test_a_drivers_usage_error_with_json_names_its_program(tmp_path):
    """A driver knows its program before it reads its options, yet its --json failure object said
    "program": null (and "np": null) for a misspelt option."""
    import json
    import subprocess
    import sys

    (tmp_path / "d.py").write_text(_tiledsl("compile", "cholesky").stdout)
    out = subprocess.run([sys.executable, "d.py", "--json", "--foo"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and json.loads(out.stdout.splitlines()[-1]) == {
        "program": "cholesky", "n": None, "ok": False, "passed": None, "np": 1,
        "error": "unrecognized arguments: --foo (see d.py --help)"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("value, said", [
    ("1_6", "'1_6' is not a number"), ("١٦", "'١٦' is not a number"), ("0x10", "'0x10' is not a number"),
    ("nan", "'nan' is not a finite number"), ("1e999", "'1e999' is not a finite number"),
])
def test_a_set_value_is_a_number_as_a_program_writes_one(value, said):
    """Python's int() took `--set ib=1_6` as 16 and Arabic-Indic digits as digits: neither is a number
    a .tile program could write."""
    out = _tiledsl("run", "qr", "--n", 60, "--set", f"ib={value}")
    assert out.returncode == 2 and f"--set ib={value}: {said} (ib's default is 64)" in out.stderr, out.stderr


@pytest.mark.timeout(120)
def test_an_input_file_is_named_around_an_equals_sign_with_spaces(tmp_path):
    """`--input "A = a.npy"` looked for the file ' a.npy'."""
    np.save(tmp_path / "a.npy", np.eye(40) * 4)
    out = _tiledsl("run", "cholesky", "--input", f"A = {tmp_path / 'a.npy'}", "--output", f"A = {tmp_path / 'l.npy'}")
    assert out.returncode == 0, out.stderr
    assert np.array_equal(np.load(tmp_path / "l.npy"), np.eye(40) * 2)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("program, flag", [("cholesky", "--nb"), ("hetero_cholesky", "--b")])
def test_a_tile_size_below_one_is_said_as_its_option(program, flag):
    """`--nb 0` was 'matrix A (t.tile:4): tile size nb must be at least 1', pointing at the program."""
    out = _tiledsl("run", program, "--n", 100, flag, 0)
    assert out.returncode == 2 and out.stderr.strip() == f"tiledsl: error: {flag} must be from 1 to 2**63 - 1, got 0"


@pytest.mark.timeout(120)
def test_settings_past_the_64_bit_range_are_said_as_such_however_long():
    """--nb 2**63 ran; --set q=<5000 digits> was an internal error (Python writes no integer of more
    than 4,300 digits, which the message tried)."""
    out = _tiledsl("run", "cholesky", "--n", 100, "--nb", 2 ** 63)
    assert out.returncode == 2 and out.stderr.strip() == \
        "tiledsl: error: --nb must be from 1 to 2**63 - 1, got 9223372036854775808"
    out = _tiledsl("run", "qr", "--n", 100, "--set", "ib=" + "9" * 5000)
    assert out.returncode == 2 and out.stderr.strip() == (
        "tiledsl: error: --set ib=9999999999...9999 (5000 digits): an integer of some 5000 digits is beyond the "
        "64-bit range: an integer parameter stays within ±9223372036854775807 (2**63 - 1)")


@pytest.mark.parametrize("item, said", [
    ("uplo=", "--set expects NAME=VALUE, got 'uplo=': no VALUE after the '='"),
    ("=L", "--set expects NAME=VALUE, got '=L': no NAME before the '='"),
    ("uplo", "--set expects NAME=VALUE, got 'uplo': no '='"),
])
def test_a_set_pair_says_what_it_lacks(item, said):
    """`--set uplo=` said only 'expects NAME=VALUE', which the user thought they had written."""
    with pytest.raises(UsageError) as raised:
        set_texts([item])
    assert str(raised.value) == said


@pytest.mark.parametrize("text, accepted", [("0", True), ("-0", True), ("0e5", True), ("1e-400", False),
                                             ("0.1", False), ("0.25", True)])
def test_a_watchdog_limit_that_reads_as_zero_is_off_only_when_written_as_zero(text, accepted):
    """--watchdog 1e-400 read as 0.0 and turned the watchdog off, where 0.1 is refused."""
    if accepted:
        assert watchdog_seconds(text) == float(text)
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="must be 0 \\(off\\) or a number of seconds from 0.25"):
            watchdog_seconds(text)


@pytest.mark.parametrize("value, on", [("", False), ("0", False), ("no", False), (" Off ", False), ("FALSE", False),
                                       ("1", True), ("yes", True), ("2", True)])
def test_an_environment_switch_is_off_as_unset_or_as_0_false_no_off(monkeypatch, value, on):
    """TILEDSL_DEBUG=0 showed tracebacks, where TILEDSL_NO_TUNE=0 was off."""
    from tiledsl.runtime.world import environment_switch

    monkeypatch.setenv("TILEDSL_DEBUG", value)
    assert environment_switch("TILEDSL_DEBUG") is on
