"""commands.joboutput: the launcher's stdout passed on, MPICH's banner left out, failures said once."""
import os
import subprocess
import sys
import threading

import pytest

from tiledsl.commands.joboutput import Forwarder

BANNER = (b"\n" + b"=" * 83 + b"\n=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   PID 7947 RUNNING AT vm\n"
          b"=   EXIT CODE: 11\n=   CLEANING UP REMAINING PROCESSES\n=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES\n"
          + b"=" * 83 + b"\nYOUR APPLICATION TERMINATED WITH THE EXIT STRING: Segmentation fault (signal 11)\n"
          b"This typically refers to a problem with your application.\n"
          b"Please see the FAQ page for debugging suggestions\n")


def _forwarded(data: bytes, target: int, json_last: bool = False, error_target: int = 2) -> Forwarder:
    read_end, write_end = os.pipe()
    output = Forwarder(os.fdopen(read_end, "rb"), target, json_last, error_target).start()
    writer = threading.Thread(target=lambda: (os.write(write_end, data), os.close(write_end)))
    writer.start()
    output.finish()
    writer.join()
    return output


@pytest.mark.timeout(20)
def test_mpichs_banner_is_left_out_and_the_rest_passed_on_as_it_was(tmp_path):
    """A rank that died put MPICH's banner on stdout before the --json object, which no JSON reader took."""
    text = b"summary\n\n  blank line above kept\n" + BANNER + b'{"ok": false}\n'
    with open(tmp_path / "out", "wb") as out:
        output = _forwarded(text, out.fileno())
    assert (tmp_path / "out").read_bytes() == b'summary\n\n  blank line above kept\n{"ok": false}\n'
    assert output.failure is None and not output.reader_gone


@pytest.mark.timeout(20)
@pytest.mark.parametrize("json_last", [True, False])
def test_rank_0s_json_object_is_passed_on_last_on_a_line_of_its_own(tmp_path, json_last):
    """Rank 1's kernel printed 'partial' without its newline, which came after rank 0's object: the object
    began on its line, an empty line followed, and stdout's last line was no JSON."""
    text = b'partial{"program": "p", "ok": true}\n\nlate line\nunfinished'
    with open(tmp_path / "out", "wb") as out:
        _forwarded(text, out.fileno(), json_last)
    assert (tmp_path / "out").read_bytes() == (b'partial\n\nlate line\nunfinished\n{"program": "p", "ok": true}\n'
                                               if json_last else text)


@pytest.mark.timeout(20)
def test_a_stdout_that_cannot_be_written_is_noted_and_the_pipe_drained():
    with open("/dev/full", "wb") as full:
        output = _forwarded(b"line\n" * 100_000, full.fileno())  # more than a pipe holds: drained, no wait
    assert output.failure is not None and output.failure.strerror == "No space left on device"


@pytest.mark.timeout(20)
def test_a_reader_that_left_ends_the_passing_on_quietly():
    read_end, write_end = os.pipe()
    os.close(read_end)
    output = _forwarded(b"line\n" * 100_000, write_end)
    os.close(write_end)
    assert output.reader_gone and output.failure is None


@pytest.mark.timeout(120)
@pytest.mark.parametrize("json_asked", [(), ("--json",)])
def test_a_job_whose_stdout_is_full_says_so_in_one_line(tmp_path, json_asked):
    """`tiledsl run --np 2 > /dev/full`: six lines of hydra's write errors, then 'rank 1 ended without finishing
    the run and without a word' (exit 1), or nothing at all (exit 255); with --json the line came twice (once
    more for the failure object that could not be written either)."""
    with open("/dev/full", "wb") as full:
        run = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "cholesky", "--np", "2", "--n",
                              "256", "--nb", "64", *json_asked], stdout=full, stderr=subprocess.PIPE, text=True,
                             timeout=100, cwd=tmp_path, env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")))
    assert run.returncode == 1, run.stderr
    assert run.stderr == "tiledsl: error: the output could not be written to stdout: No space left on device\n"


@pytest.mark.timeout(120)
def test_the_json_object_of_a_job_whose_rank_crashed_is_all_of_stdout(tmp_path):
    import json

    (tmp_path / "crash.py").write_text("import ctypes\nimport os\n\n\ndef crash(A):\n"
                                       "    if os.environ.get('PMI_RANK') == '1':\n        ctypes.string_at(0)\n")
    (tmp_path / "crash.tile").write_text('use "crash.py"\nkernel crash(inout A)\nprogram crashes {\n'
                                         "  tiling uniform(nb = 64)\n  matrix A[n, n] = random spd\n"
                                         "  for k in 0 .. A.nt { crash(A[k, k]) }\n}\n")
    run = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "crash.tile", "--np", "2", "--n", "256",
                          "--json"], capture_output=True, text=True, timeout=100, cwd=tmp_path,
                         env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")))
    assert run.returncode == 1, run.stderr
    assert json.loads(run.stdout)["error"].startswith("rank 1 (crash.tile:6) crashed (Segmentation fault) in kernel code crash "
                                                  "(crash.py:7), in `crash(A[k, k])`")


@pytest.mark.timeout(20)
def test_a_marked_line_goes_to_stderr_in_its_place_among_the_lines_of_stdout(tmp_path):
    """Rank 0's error after its summary came before the summary: the job's launcher passed its two streams on
    apart. Sent on stdout behind the mark, it keeps its place; what a kernel printed before it without its
    newline stays on stdout."""
    mark = b"\x1etiledsl-stderr\x1f"
    text = b"summary\n  check  FAIL, see below\n" + mark + b"tiledsl: error: why\npartial" + mark + b"note\n"
    with open(tmp_path / "out", "wb") as out, open(tmp_path / "err", "wb") as err:
        _forwarded(text, out.fileno(), error_target=err.fileno())
    assert (tmp_path / "out").read_bytes() == b"summary\n  check  FAIL, see below\npartial\n"
    assert (tmp_path / "err").read_bytes() == b"tiledsl: error: why\nnote\n"
