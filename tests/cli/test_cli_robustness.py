"""The command line never shows a traceback for a bad input, and exits with the right status.

``tiledsl check`` on hostile files (empty, binary, not UTF-8, NUL bytes, a directory,
deep nesting, huge lines, token salad) reports a diagnostic and exits 1 within seconds;
usage errors exit 2. Property tests feed random bytes and random token sequences to the
compiler's front door, which must answer with diagnostics only.
"""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tiledsl as tiledsl_package
from tiledsl.compiler import check_source, compile_path
from tiledsl.driverload import not_a_driver
from tiledsl.compiler.source import SourceError, decode

ROOT = Path(__file__).resolve().parents[2]
DIAGNOSTIC = re.compile(r"(error|warning)\[[EW]\d{3}\]")
LIMIT = 20  # seconds per command
CACHE = {}


@pytest.fixture(autouse=True, scope="module")
def private_cache(tmp_path_factory):
    """Keep compiled-driver caches of these runs out of the home directory and the checkout."""
    CACHE["dir"] = tmp_path_factory.mktemp("tiledsl_cache")
    yield


def tiledsl(*args, cwd=None, timeout=LIMIT + 10):
    env = dict(os.environ, XDG_CACHE_HOME=str(CACHE["dir"]))
    env.pop("TILEDSL_DEBUG", None)
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", *map(str, args)], cwd=cwd or ROOT, env=env,
                         capture_output=True, timeout=timeout)
    out.seconds = time.monotonic() - start
    out.out = out.stdout.decode("utf-8", "replace")
    out.err = out.stderr.decode("utf-8", "replace")
    return out


def assert_clean_failure(out, status=1):
    assert "Traceback" not in out.out + out.err, out.err[-3000:]
    assert "internal error" not in out.err, out.err[-3000:]
    assert out.returncode == status, (out.returncode, out.err[-3000:])
    assert out.seconds < LIMIT, f"took {out.seconds:.1f} s"


# ---------------------------------------------------------------- hostile files
KEYWORDS = ["use", "kernel", "program", "tiling", "param", "matrix", "workspace", "like", "rows", "check",
            "random", "load", "for", "in", "out", "inout", "if", "else", "let", "priority", "release",
            "and", "or", "not", "uniform", "hybrid", "spd", "general", "zeros", "identity", "cholesky", "qr"]
PUNCTUATION = ["(", ")", "[", "]", "{", "}", ",", ":", "=", "..", ".", "+", "-", "*", "//", "%",
               "==", "!=", "<", "<=", ">", ">="]
NAMES = ["A", "T", "k", "i", "j", "n", "nb", "s", "b", "B", "x", "o", "potrf", "trsm", "gemm", "syrk",
         "geqrt", "tpqrt", "mt", "nt", "m", "offset", "width", "height", "min", "max", "foo", "_me", "rt"]
INTS = ["0", "1", "2", "3", "32", "007", "99999999999999999999"]
VOCABULARY = KEYWORDS + PUNCTUATION + NAMES + INTS + ['"k.py"', '"a.npy"', '""', "# c\n", "\n", "\r\n", "\t"]


def salad(size: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    words = KEYWORDS + PUNCTUATION + NAMES + INTS + ["\n", "\n", '"k.py"', "# note\n"]
    parts, length = [], 0
    while length < size:
        word = rng.choice(words)
        parts.append(word)
        length += len(word) + 1
    return " ".join(parts)


HOSTILE = {  # name -> (bytes of the file, made when the test runs; the code expected)
    "empty": (lambda: b"", "E209"),
    "binary": (lambda: random.Random(1).randbytes(4096), "E001"),
    "latin-1": (lambda: "program p { # café\n}".encode("latin-1"), "E001"),
    "nul": (lambda: b"program p {\n  let x = 1\0\n}\n", "E001"),
    "nested-parentheses": (lambda: ("program p {\n  let x = " + "(" * 20000 + "1" + ")" * 20000
                                    + "\n}\n").encode(), "E101"),
    "megabyte-line": (lambda: ("program p {\n  let x = " + "+".join(["k"] * 500_000) + "\n}\n").encode(),
                      "E102"),
    # (it declares kernels named by statement words, 'check', 'in', ..., and calls them: E207, before the parse)
    "token-salad": (lambda: salad(500_000).encode(), "E207"),
}


@pytest.mark.timeout(60)
def test_check_hostile_files(tmp_path):
    """One check of every hostile file (a process each cost half a second of imports): each file's
    diagnostic, on a line of its own naming the file, and the command's end within LIMIT seconds."""
    paths = {name: tmp_path / f"{name}.tile" for name in HOSTILE}
    for name, path in paths.items():
        path.write_bytes(HOSTILE[name][0]())
    out = tiledsl("check", *paths.values())
    assert_clean_failure(out)
    for name, path in paths.items():
        said = [line for line in out.out.splitlines() if line.startswith(f"{path}:")]
        assert any(DIAGNOSTIC.search(line) for line in said), (name, out.out[:2000])
        assert any(f"error[{HOSTILE[name][1]}]" in line for line in said), (name, out.out[:2000])
    assert f"checked {len(HOSTILE)} file(s): {len(HOSTILE)} with errors" in out.out


@pytest.mark.timeout(60)
def test_check_missing_path(tmp_path):
    out = tiledsl("check", tmp_path / "nowhere.tile")
    assert_clean_failure(out)
    assert f"{tmp_path / 'nowhere.tile'}: error[E000]: no such file" in out.out


@pytest.mark.timeout(60)
def test_check_directory(tmp_path):
    out = tiledsl("check", tmp_path)
    assert_clean_failure(out)
    assert "error[E000]: is a directory" in out.out


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", [("check",), ("run", "--n", "10"), ("explain", "--n", "10")])
def test_a_pipe_for_a_program_is_refused_not_waited_for(tmp_path, command):
    """A fifo with no writer blocked every command for ever on its read."""
    import os

    fifo = tmp_path / "pipe.tile"
    os.mkfifo(fifo)
    out = tiledsl(command[0], fifo, *command[1:])
    assert_clean_failure(out)
    assert f"{fifo}: error[E000]: is not a regular file (a device, a pipe or a socket): save the program in a file" \
        in (out.out if command[0] == "check" else out.err)  # (check's report is its output)


@pytest.mark.timeout(60)
def test_check_crlf_program_is_clean(tmp_path):
    text = (ROOT / "programs" / "cholesky.tile").read_text()
    path = tmp_path / "crlf.tile"
    path.write_bytes(text.replace("\n", "\r\n").encode())
    out = tiledsl("check", path)
    assert_clean_failure(out, status=0)
    assert "checked 1 file(s): no errors" in out.out
    assert not DIAGNOSTIC.search(out.out)


@pytest.mark.timeout(60)
def test_check_crlf_error_position(tmp_path):
    path = tmp_path / "crlf_bad.tile"
    path.write_bytes(b"program p {\r\n  matrix A[n, n] = random spd\r\n  potrf(A[0, kk])\r\n}\r\n")
    out = tiledsl("check", path)
    assert_clean_failure(out)
    assert f"{path}:3:14: error[E200]: unknown name 'kk'" in out.out
    assert "\r" not in out.out


@pytest.mark.timeout(60)
def test_check_several_files_reports_each(tmp_path):
    bad = tmp_path / "bad.tile"
    bad.write_text("program p {\n  potrff(A[0, 0])\n}\n")
    out = tiledsl("check", ROOT / "programs" / "lu.tile", bad, tmp_path / "missing.tile")
    assert_clean_failure(out)
    assert "error[E201]" in out.out and "error[E000]" in out.out
    assert "checked 3 file(s): 2 with errors" in out.out


@pytest.mark.timeout(60)
def test_check_known_internal_errors(tmp_path):
    """Both files in one check: an internal error in either would end it with no summary."""
    (tmp_path / "escape.tile").write_text('use "\\N{nope}"\nprogram p { }\n')
    (tmp_path / "self-let.tile").write_text("program p {\n  matrix A[n, n] = random spd\n  let k = k + 1\n"
                                            "  potrf(A[k, k])\n}\n")
    out = tiledsl("check", tmp_path / "escape.tile", tmp_path / "self-let.tile")
    assert_clean_failure(out)
    assert "checked 2 file(s): 2 with errors" in out.out, out.out


# ---------------------------------------------------------------- usage errors and compile
@pytest.mark.timeout(60)
@pytest.mark.parametrize("args", [
    ("check",),
    ("explain", "programs/cholesky.tile", "--n", "64", "--gpus", "-1"),
    ("explain", "programs/cholesky.tile", "--n", "64", "--B", "64"),
    ("frobnicate",),
    (),
], ids=["no-file", "negative-gpus", "wrong-tile-setting", "unknown-command", "no-command"])
def test_usage_errors_exit_2(tmp_path, args):
    """(A bad grid and an unknown option exit 2 in one line: test_every_command_reports_a_bad_value_in_one_line
    [explain-grid] and test_every_command_rejects_a_bad_option_in_one_error_line[check].)"""
    out = tiledsl(*args)
    assert_clean_failure(out, status=2)
    assert out.err.strip(), "no message"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", [("compile", "cholesky"), ("graph", "cholesky", "--n", "100"),
                                     ("plot", "t.json")])
def test_an_empty_output_name_is_refused(command):
    """compile -o "" said "cannot write : Is a directory"."""
    out = tiledsl(*command, "-o", "")
    assert_clean_failure(out, status=2)
    assert out.err.strip() == (f"tiledsl {command[0]}: error: argument -o/--output: no file name given "
                               f"(see tiledsl {command[0]} --help)")


@pytest.mark.timeout(60)
def test_compile_writes_a_valid_driver(tmp_path):
    target = tmp_path / "d.py"
    out = tiledsl("compile", "programs/cholesky.tile", "-o", target)
    assert_clean_failure(out, status=0)
    assert out.out == ""
    check = subprocess.run([sys.executable, "-m", "py_compile", str(target)], capture_output=True, text=True,
                           timeout=LIMIT)
    assert check.returncode == 0, check.stderr
    assert "def generate(rt, p):" in target.read_text()


REFUSED_OUTPUTS = [
    ("k.py", "k.py is there and is not a driver tiledsl wrote (it does not open with a generated driver's "
             "docstring): compile replaces only its own drivers; name another file"),
    ("a.npy", "a driver is a Python module: name a .py file"),
    ("numpy.py", "a driver named numpy.py would hide the module numpy from its run (a script's folder comes first "
                 "on the import path): name it otherwise"),
    ("threading.py", "a driver named threading.py would hide Python's module threading from its run (a script's "
                     "folder comes first on the import path): name it otherwise")]


@pytest.mark.timeout(120)
def test_compile_replaces_no_file_but_its_own_drivers_and_hides_no_module(tmp_path):
    """-o k.py replaced the program's kernel module and -o a.npy its data; a driver named tiledsl.py
    or numpy.py ended in a traceback. Each refused name in turn, in one folder (each refusal leaves it
    as it was), then a driver of its own, written and written over."""
    (tmp_path / "k.py").write_text("def scale(Y):\n    Y *= 2\n")
    np.save(tmp_path / "a.npy", np.eye(4))
    (tmp_path / "p.tile").write_text('use "k.py"\nkernel scale(inout Y)\nprogram p {\n  matrix Y[n, n] = load "a.npy"\n'
                                     "  scale(Y[0, 0])\n}\n")
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    for name, said in REFUSED_OUTPUTS:
        out = tiledsl("compile", tmp_path / "p.tile", "-o", tmp_path / name)
        assert_clean_failure(out, status=2)
        assert out.err == f"tiledsl: error: -o {tmp_path / name}: {said}\n"
        assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before, name
    for _ in range(2):  # a driver of its own it replaces
        assert tiledsl("compile", tmp_path / "p.tile", "-o", tmp_path / "driver.py").returncode == 0


@pytest.mark.timeout(120)
def test_compile_names_no_driver_as_the_programs_kernel_module(tmp_path):
    """A driver named as the kernel module, elsewhere than the module, was written; beside the
    module's copy later, it loaded itself as the module ("defines no function scale")."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "k.py").write_text("def scale(Y):\n    Y *= 2\n")
    (tmp_path / "src" / "p.tile").write_text('use "k.py"\nkernel scale(inout Y)\nprogram p {\n'
                                             "  matrix Y[n, n] = zeros\n  scale(Y[0, 0])\n}\n")
    out = tiledsl("compile", tmp_path / "src" / "p.tile", "-o", tmp_path / "k.py")
    assert_clean_failure(out, status=2)
    assert out.err == (f"tiledsl: error: -o {tmp_path / 'k.py'}: the program's kernel module is named k.py too, and "
                       f"the driver looks for it in the .tile's folder and beside itself, where it could find itself: "
                       f"name it otherwise\n")
    assert not (tmp_path / "k.py").exists()


@pytest.mark.timeout(60)
def test_a_drivers_advice_to_regenerate_it_works_in_its_folder(tmp_path):
    """The advice named the .tile as compile was given it (relative to where compile ran) and the
    driver by its bare name: followed in either folder, it failed or wrote another file."""
    (tmp_path / "src").mkdir()
    (tmp_path / "build").mkdir()
    (tmp_path / "src" / "c.tile").write_text((ROOT / "programs" / "cholesky.tile").read_text())
    assert tiledsl("compile", "c.tile", "-o", "../build/drv.py", cwd=tmp_path / "src").returncode == 0
    written = (tmp_path / "build" / "drv.py").read_text()
    advice = re.search(r"regenerate it in its folder with `tiledsl (.*)`", written).group(1)
    assert advice == "compile ../src/c.tile -o drv.py"
    (tmp_path / "build" / "drv.py").unlink()
    assert tiledsl(*advice.split(), cwd=tmp_path / "build").returncode == 0
    assert (tmp_path / "build" / "drv.py").read_text().splitlines()[2] == written.splitlines()[2]
    assert sorted(os.listdir(tmp_path / "src")) == ["c.tile"]


@pytest.mark.timeout(60)
def test_compile_refuses_a_bad_program(tmp_path):
    bad = tmp_path / "bad.tile"
    bad.write_text("program p {\n  potrf(A[0, 0])\n}\n")
    target = tmp_path / "never.py"
    out = tiledsl("compile", bad, "-o", target)
    assert_clean_failure(out)
    assert "error[E200]" in out.err and not target.exists() and "note" not in out.err
    # an earlier driver there stays, and is said to (tester x: a stale driver was then run unawares)
    assert tiledsl("compile", ROOT / "programs" / "cholesky.tile", "-o", target).returncode == 0
    before = target.read_text()
    out = tiledsl("compile", bad, "-o", target)
    assert out.returncode == 1 and target.read_text() == before
    assert out.err.endswith(f"tiledsl: note: {target} was not written: the driver there is an earlier one\n"), out.err


@pytest.mark.timeout(60)
def test_compile_to_an_unwritable_place(tmp_path):
    out = tiledsl("compile", "programs/lu.tile", "-o", tmp_path / "no" / "such" / "dir" / "d.py")
    assert_clean_failure(out, status=2)
    assert out.err == f"tiledsl: error: -o {tmp_path / 'no/such/dir/d.py'}: directory {str(tmp_path / 'no/such/dir')!r} " \
                      f"does not exist\n"



@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", [("run", "cholesky", "--n", "100"), ("explain", "cholesky", "--n", "100")])
def test_a_cache_directory_that_cannot_be_written_is_a_usage_error(tmp_path, command):
    (tmp_path / "a_file").write_text("")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "a_file"))
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", *command], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=LIMIT)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert f"cannot write tiledsl's driver cache in {tmp_path / 'a_file'}/tiledsl/drivers: {tmp_path / 'a_file'} is " \
           f"a file, not a folder (set XDG_CACHE_HOME to a writable directory)" in out.stderr


def test_a_driver_cache_folder_that_is_a_file_or_a_link_loop_is_said_as_such(tmp_path, monkeypatch):
    """Both were 'File exists', which said only that something was there."""
    from tiledsl.driverload import cached_driver_path
    from tiledsl.runtime.world import UsageError

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "tiledsl").mkdir()
    (tmp_path / "tiledsl" / "loop").symlink_to("loop")
    (tmp_path / "tiledsl" / "drivers").symlink_to("loop")
    with pytest.raises(UsageError, match=r"drivers: it is a link that leads nowhere \(to a missing place, or in a "
                                         r"loop\) \(set XDG_CACHE_HOME"):
        cached_driver_path("program p {}", "p.tile", lambda target: "")

def test_a_failed_cache_write_leaves_nothing_and_a_folder_in_a_drivers_place_is_named(tmp_path, monkeypatch):
    """A write that failed (a full disk) left its part-written .tmp behind, which kept the disk full for every
    later run; a folder where the driver goes was 'Is a directory (set XDG_CACHE_HOME ...)', a .tmp a try."""
    from tiledsl.driverload import cached_driver_path
    from tiledsl.runtime.world import UsageError

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def full_disk(self, target):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(Path, "replace", full_disk)  # the .tmp written: the rename fails
        with pytest.raises(UsageError, match="No space left on device"):
            cached_driver_path("program p {}", "p.tile", lambda target: "# d\n")
    folder = tmp_path / "tiledsl" / "drivers"
    assert list(folder.iterdir()) == []
    driver = cached_driver_path("program p {}", "p.tile", lambda target: "# d\n")
    driver.unlink()
    driver.mkdir()
    with pytest.raises(UsageError) as error:
        cached_driver_path("program p {}", "p.tile", lambda target: "# d\n")
    assert str(error.value) == (f"{driver} is a folder, where tiledsl's driver cache keeps this program's driver: "
                                "remove it")
    assert [path.name for path in folder.iterdir()] == [driver.name]


# ---------------------------------------------------------------- property tests
PROGRAM_TOKENS = re.compile(r'"[^"\n]*"|#[^\n]*|\w+|\.\.|//|==|!=|<=|>=|[^\s\w]')
SHIPPED = [PROGRAM_TOKENS.findall((ROOT / "programs" / f"{name}.tile").read_text())
           for name in ("cholesky", "lu", "qr", "hetero_cholesky", "hetero_qr")]
SHIPPED = [[t for t in tokens if not t.startswith("#")] for tokens in SHIPPED]
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def front_door(data: bytes):
    """decode + check_source: only SourceError (a diagnostic) may come out of decoding."""
    try:
        source = decode("fuzz.tile", data)
    except SourceError as error:
        assert error.diagnostic.code == "E001"
        return None
    result = check_source(source)
    for d in result.diagnostics:
        assert re.fullmatch(r"[EW]\d{3}", d.code) and d.message
        result.report()
    return result


@FUZZ
@given(st.binary(max_size=2000))
def test_random_bytes_never_raise(data):
    front_door(data)


@FUZZ
@given(st.lists(st.sampled_from(VOCABULARY), max_size=150))
def test_random_token_sequences_never_raise(tokens):
    front_door(" ".join(tokens).encode())


@FUZZ
@given(st.lists(st.sampled_from(VOCABULARY), max_size=60))
def test_programs_with_random_bodies_never_raise(tokens):
    body = " ".join(tokens)
    front_door(f"program p {{\n  matrix A[n, n] = random spd\n  for k in 0 .. A.nt {{ {body} }}\n}}\n".encode())


EXPRESSION_JOINERS = {"(", "[", ",", "=", "..", ":", ".", "+", "-", "*", "//", "%", "==", "!=", "<", "<=", ">",
                      ">=", "and", "or", "not", "in", "priority"}


def let_value_end(tokens, start: int) -> int:
    """Where the expression starting at ``tokens[start]`` ends (over-approximated by the next statement)."""
    for j in range(start, len(tokens)):
        token = tokens[j]
        if token in ("let", "for", "if", "else", "release", "{", "}"):
            return j
        if (j > start and tokens[j - 1] not in EXPRESSION_JOINERS and j + 1 < len(tokens)
                and tokens[j + 1] in ("(", "[") and re.fullmatch(r"[A-Za-z_]\w*", token)):
            return j  # a call or a tile reference starting the next statement
    return len(tokens)


def self_referential_let(tokens) -> bool:
    """A let whose value names itself or a later let: the known RecursionError (test_regressions.py)."""
    lets = [(i, tokens[i + 1]) for i in range(len(tokens) - 2) if tokens[i] == "let" and tokens[i + 2] == "="]
    for i, _ in lets:
        later = {name for j, name in lets if j >= i}
        value = tokens[i + 3:let_value_end(tokens, i + 3)]
        if later & set(value):
            return True
    return False


def test_the_fuzz_filter_keeps_the_shipped_programs():
    assert not any(self_referential_let(tokens) for tokens in SHIPPED)
    assert self_referential_let("let k = t * s + k".split())
    assert self_referential_let("let a = b + 1 let b = a potrf ( A [ b , b ] )".split())
    assert not self_referential_let("let k = t * s + d let o = A . offset ( k )".split())


@FUZZ
@given(st.integers(0, len(SHIPPED) - 1),
       st.lists(st.tuples(st.sampled_from(["replace", "insert", "delete"]), st.integers(0, 10_000),
                          st.sampled_from(VOCABULARY)), min_size=1, max_size=4))
def test_mutated_programs_never_raise_and_compile_to_python(which, mutations):
    from tiledsl.compiler.codegen import generate

    tokens = list(SHIPPED[which])
    for kind, where, token in mutations:
        where %= len(tokens) + (kind == "insert")
        if kind == "replace" and where < len(tokens):
            tokens[where] = token
        elif kind == "insert":
            tokens.insert(where, token)
        elif tokens and where < len(tokens):
            del tokens[where]
    assume(not self_referential_let(tokens))
    result = front_door(" ".join(tokens).encode())
    if result is not None and result.ok:
        compile(generate(result.checked), "driver.py", "exec")


# ---------------------------------------------------------------- Python files that are not drivers (issue 16.8)
SCRIPT = 'from pathlib import Path\nPath(__file__).with_name("written.txt").write_text("ran")\n'


@pytest.mark.timeout(120)
@pytest.mark.parametrize("args", [("run", "--n", "64"), ("run", "--np", "2", "--n", "64"), ("explain", "--n", "64"),
                                  ("graph", "--n", "64"), ("bench", "--n", "64"), ("tune", "--quick")],
                         ids=["run", "run-np2", "explain", "graph", "bench", "tune"])
def test_a_python_file_that_is_not_a_driver_is_refused_unrun(tmp_path, args):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    out = tiledsl(args[0], script, *args[1:])
    assert_clean_failure(out, status=2)
    assert f"tiledsl: error: {script} is not a tiledsl driver, so it was not used" in out.err
    assert not (tmp_path / "written.txt").exists(), "the script was run"


@pytest.mark.timeout(60)
def test_a_driver_lookalike_with_code_of_its_own_is_refused_unrun(tmp_path):
    """A generated driver with one statement added is no longer what the template writes."""
    result, text = compile_path(ROOT / "programs" / "cholesky.tile")
    driver = tmp_path / "driver.py"
    driver.write_text(text.replace("\nPROGRAM = Program(", "\n" + SCRIPT + "PROGRAM = Program(", 1))
    added = driver.read_text().splitlines().index(SCRIPT.splitlines()[0]) + 1
    assert not_a_driver(driver) == f"line {added} is not one a generated driver has"
    out = tiledsl("run", driver, "--n", "64")
    assert_clean_failure(out, status=2)
    assert not (tmp_path / "written.txt").exists(), "the script was run"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path", sorted((ROOT / "programs").glob("*.tile"))
                         + sorted((ROOT / "docs" / "examples").glob("*.tile")), ids=lambda path: path.name)
def test_every_compiled_driver_is_recognised(tmp_path, path):
    """Shipped programs and the docs' examples (user kernels with flop counts among them)."""
    result, text = compile_path(path)
    (tmp_path / "driver.py").write_text(text)
    assert not_a_driver(tmp_path / "driver.py") is None


@pytest.mark.timeout(60)
def test_a_driver_with_the_templates_optional_helpers_is_recognised(tmp_path):
    """'**', a computed step and a renamed name (a loop variable 'lambda') add _power, _step and
    SOURCE_NAMES to the driver: run and compile -o took it for another file."""
    (tmp_path / "p.tile").write_text("program p {\n  matrix A[n, n] = random spd\n"
                                     "  for lambda in 0 .. A.nt step 1 + 0 * A.nt { potrf(A[lambda ** 1, lambda]) }\n}\n")
    driver = tmp_path / "drv.py"
    for _ in range(2):  # written, then written over
        assert tiledsl("compile", tmp_path / "p.tile", "-o", driver).returncode == 0
    assert all(f"\n{helper}" in driver.read_text() for helper in ("def _power", "def _step", "SOURCE_NAMES"))
    assert not_a_driver(driver) is None
    assert tiledsl("run", driver, "--n", "64", "--nb", "16").returncode == 0


# ---------------------------------------------------------------- a closed stdout (issue 16.7)
def with_closed_stdout(command: list, cwd=ROOT):
    """Run ``command`` with stdout a pipe whose reader has already gone: every write fails."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        return subprocess.run(command, cwd=cwd, stdout=writer, stderr=subprocess.PIPE, timeout=LIMIT * 4,
                              env=dict(os.environ, XDG_CACHE_HOME=str(CACHE["dir"])))
    finally:
        os.close(writer)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("args", [
    ("run", "programs/cholesky.tile", "--n", "256"),
    ("run", "programs/cholesky.tile", "--n", "512", "--nb", "128", "--np", "2"),
    ("explain", "programs/cholesky.tile", "--n", "512", "--nb", "128"),
    ("graph", "programs/cholesky.tile", "--n", "512", "--nb", "128"),
    ("compile", "programs/lu.tile"),
], ids=["run", "run-np2", "explain", "graph", "compile"])
def test_a_closed_stdout_ends_the_command_quietly(args):
    """(--version and a command's --help, to the same closed pipe: test_help_to_a_reader_that_left_ends_with_141_not_0,
    which asserts 141.)"""
    out = with_closed_stdout([sys.executable, "-m", "tiledsl.commands.cli", *args])
    assert out.stderr.decode() == ""
    assert out.returncode in (0, 141)


@pytest.mark.timeout(120)
def test_a_closed_stdout_ends_a_driver_script_quietly(tmp_path):
    result, text = compile_path(ROOT / "programs" / "cholesky.tile")
    (tmp_path / "driver.py").write_text(text)
    out = with_closed_stdout([sys.executable, "driver.py", "--n", "256"], cwd=tmp_path)
    assert (out.returncode, out.stderr.decode()) == (141, "")


@pytest.mark.timeout(120)
def test_a_reader_leaving_after_one_line_ends_explain_quietly():
    """`tiledsl explain ... --json | head -1`: the plan is far larger than the pipe's buffer."""
    env = dict(os.environ, XDG_CACHE_HOME=str(CACHE["dir"]))
    with subprocess.Popen([sys.executable, "-m", "tiledsl.commands.cli", "explain", "programs/cholesky.tile", "--n", "2048",
                           "--nb", "64", "--grid", "2x2", "--json"], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as job:
        first = job.stdout.read(100)
        job.stdout.close()
        error = job.stderr.read().decode()
        status = job.wait(timeout=LIMIT * 3)
    assert first.startswith(b'{"program": "cholesky"')
    assert (status, error) == (141, "")


# ---------------------------------------------------------------- version, help, usage errors (issues 16.9, 16.12)
COMMANDS = ["check", "compile", "explain", "run", "bench", "tune", "plot", "graph"]


@pytest.mark.timeout(60)
def test_version():
    out = tiledsl("--version")
    assert_clean_failure(out, status=0)
    assert out.out == f"tiledsl {tiledsl_package.__version__}\n"
    assert re.fullmatch(r"\d+\.\d+\.\d+", tiledsl_package.__version__)


@pytest.fixture(scope="module")
def helps(private_cache):
    """``tiledsl [COMMAND] --help`` of every command (None: tiledsl's own), run once for the tests
    that read them (those tests share an xdist group, so that one worker runs them all)."""
    return {command: tiledsl(*([command] if command else []), "--help") for command in [None, *COMMANDS, "simulate"]}


@pytest.mark.timeout(120)
@pytest.mark.xdist_group("help-texts")
@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_every_help_lists_the_exit_statuses(helps, command):
    out = helps[command]
    assert_clean_failure(out, status=0)
    statuses = re.findall(r"^  (\S+)\s+(\S.*)$", out.out.split("exit status:\n")[1], re.MULTILINE)
    assert [code for code, _ in statuses] == ["0", "1", "2", "3", "128+N"]
    assert "signal N" in statuses[-1][1]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("args", [
    ("compile", "programs/lu.tile", "--bogus"),
    ("explain", "programs/cholesky.tile"),
    ("run", "programs/cholesky.tile", "--n", "x"),
    ("bench", "programs/cholesky.tile", "--n", "64", "--rounds", "many"),
    ("tune", "programs/cholesky.tile", "--budget", "soon"),
    ("plot", "trace.json"),
    ("graph", "programs/cholesky.tile", "--gpus", "1.5", "--n", "64"),
    ("check", "--frobnicate", "programs/lu.tile"),
], ids=lambda args: args[0])
def test_every_command_rejects_a_bad_option_in_one_error_line(args):
    out = tiledsl(*args)
    assert_clean_failure(out, status=2)
    errors = [line for line in out.err.splitlines() if "error" in line]
    assert len(errors) == 1 and re.match(rf"tiledsl( {args[0]})?: error: ", errors[0]), out.err


@pytest.mark.timeout(240)
@pytest.mark.parametrize("args, message", [
    (("run", "programs/cholesky.tile", "--n", "64", "--np", "0"), "--np must be at least 1, got 0"),
    (("run", "programs/cholesky.tile", "--n", "64", "--np", "2", "--launcher", "no-such-launcher"),
     "launcher 'no-such-launcher' not found (set --launcher or TILEDSL_LAUNCHER)"),
    (("bench", "programs/cholesky.tile", "--n", "64", "--rounds", "0"), "--rounds must be at least 1, got 0"),
    (("tune", "programs/cholesky.tile", "--sizes", "64,x"), "--sizes expects integers separated by commas"),
    (("explain", "programs/cholesky.tile", "--n", "64", "--grid", "2y2"), "bad grid '2y2'"),
    (("graph", "programs/cholesky.tile", "--n", "100000"), "graph draws at most 5000"),
], ids=["run-np", "run-launcher", "bench-rounds", "tune-sizes", "explain-grid", "graph-size"])
def test_every_command_reports_a_bad_value_in_one_line(args, message):
    out = tiledsl(*args)
    assert_clean_failure(out, status=2)
    assert len(out.err.splitlines()) == 1 and out.err.startswith("tiledsl: error: ") and message in out.err, out.err


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["run", "explain", "graph"])
def test_a_matrix_size_dividing_by_a_zero_param_is_a_usage_error(tmp_path, command):
    (tmp_path / "t.tile").write_text("program p {\n  param d = 0\n  matrix A[n // d, n] = zeros\n  potrf(A[0, 0])\n}\n")
    out = tiledsl(command, tmp_path / "t.tile", "--n", "30")
    assert_clean_failure(out, status=2)
    assert out.err.strip() == ("tiledsl: error: the sizes of p's matrices cannot be computed with n = 30, d = 0: "
                               "integer division or modulo by zero")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["run", "explain", "graph", "simulate"])
def test_a_broken_requirement_is_a_usage_error_quoting_it(tmp_path, command):
    (tmp_path / "t.tile").write_text("program p {\n  param dom = 4\n  require dom >= 1 \"a domain holds a row\"\n"
                                     "  matrix A[n, n] = random spd\n"
                                     "  for d in 0 .. A.mt // dom { potrf(A[d * dom, d * dom]) }\n}\n")
    machine = ("--nodes", "1", "--machine", "keeneland") if command == "simulate" else ()
    out = tiledsl(command, tmp_path / "t.tile", "--n", "30", "--nb", "10", "--set", "dom=0", *machine)
    assert_clean_failure(out, status=2)
    assert out.err.strip() == ("tiledsl: error: p requires dom >= 1 (a domain holds a row), which n = 30, nb = 10, "
                               "dom = 0 break (t.tile:3)")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("program, setting, requirement", [
    ("hqr", "domains=0", "domains >= 1 (the tile rows of a column go to at least one domain)"),
    ("tsqr", "cols=50", "cols <= n (A is tall: at most as many columns as rows)")])
def test_the_shipped_programs_state_their_requirements(program, setting, requirement):
    out = tiledsl("run", program, "--n", "40", "--nb", "8", "--set", setting)
    assert_clean_failure(out, status=2)
    assert out.err.startswith(f"tiledsl: error: {program} requires {requirement}, which n = 40, nb = 8, "), out.err


@pytest.mark.timeout(120)
def test_a_matrix_size_of_zero_names_the_settings_that_gave_it(tmp_path):
    """tsqr at n = 3 has cols = n // 8 = 0: the message says so, not only "got 3x0"."""
    (tmp_path / "t.tile").write_text("program p {\n  param cols = n // 8\n  matrix A[n, cols] = zeros\n"
                                     "  potrf(A[0, 0])\n}\n")
    out = tiledsl("run", tmp_path / "t.tile", "--n", "3")
    assert_clean_failure(out, status=2)
    assert out.err.strip() == ("tiledsl: error: matrix A (t.tile:3): matrix size must be at least 1x1, got 3x0 "
                               "(with n = 3, cols = 0)")


@pytest.mark.timeout(120)
def test_a_workspace_height_of_zero_is_a_workspace_at_its_line(tmp_path):
    (tmp_path / "t.tile").write_text("program p {\n  param ib = 4\n  matrix A[n, n] = random general\n"
                                     "  workspace T like A rows ib\n"
                                     "  for k in 0 .. A.nt { geqrt(A[k, k], T[k, k]) }\n}\n")
    out = tiledsl("run", tmp_path / "t.tile", "--n", "100", "--set", "ib=0", "--nb", "32")
    assert_clean_failure(out, status=2)
    assert out.err.strip() == ("tiledsl: error: workspace T (t.tile:4): tile height must be at least 1, got 0 "
                               "(with n = 100, nb = 32, ib = 0)")
    # a height of a tile setting's: the setting is named (it said only n = 100)
    (tmp_path / "t.tile").write_text("program p {\n  matrix A[n, n] = random general\n"
                                     "  workspace T like A rows nb // 64\n"
                                     "  for k in 0 .. A.nt { geqrt(A[k, k], T[k, k]) }\n}\n")
    out = tiledsl("run", tmp_path / "t.tile", "--n", "100", "--nb", "32")
    assert out.err.strip() == ("tiledsl: error: workspace T (t.tile:3): tile height must be at least 1, got 0 "
                               "(with n = 100, nb = 32)")


@pytest.mark.timeout(120)
def test_a_failing_user_kernel_is_located_in_its_module(tmp_path):
    """The innermost line of the user's own code is named, through helpers and into libraries."""
    (tmp_path / "kn.py").write_text("import numpy as np\n\ndef helper(A):\n    return A @ undefined_thing\n\n"
                                    "def h(A):\n    A += helper(A)\n\ndef g(A):\n    np.linalg.cholesky(-A)\n")
    for kernel, expected in (("h", "NameError at kn.py:4: name 'undefined_thing' is not defined"),
                             ("g", "LinAlgError at kn.py:10: Matrix is not positive definite")):
        (tmp_path / "t.tile").write_text(f'use "kn.py"\nkernel {kernel}(inout A)\n'
                                         f"program p {{ matrix A[n, n] = random spd\n  {kernel}(A[0, 0])\n}}\n")
        out = tiledsl("run", tmp_path / "t.tile", "--n", "50")
        assert_clean_failure(out)
        assert out.err.strip().endswith(f"({kernel}(A[0, 0])): {expected}"), out.err


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["host", "GPU body"])
def test_a_kernel_returning_a_new_array_fails_and_one_returning_its_tile_passes(tmp_path, where):
    """`return A + v` (where `A += v` was meant) would lose the result silently, in a GPU body too, and
    so would `return A + v, v`; a number returned (numpy's too) is no lost tile, nor are its own tiles
    returned, in a tuple or dict too (a GPU body's were taken for new arrays). The kernels that
    pass run in one program (a run fails at its first failed task: the others one run each)."""
    bodies = ("def bump(A, v):\n    return A + v\n\ndef ok(A, v):\n    A += v\n    return A[:, :]\n\n"
              "def pair(A, v):\n    return A + v, v\n\ndef norm(A, v):\n    A += v\n    return (A * A).sum()\n\n"
              "def named(A, v):\n    return {'A': A + v}\n\ndef mine(A, v):\n    A += v\n    return (A, 1)\n\n"
              "def kept(A, v):\n    A += v\n    return {'A': A}, [A]\n")
    (tmp_path / "r.py").write_text(bodies + ("" if where == "host" else bodies.replace("(A, v)", "_gpu(A, v)")))
    gpus = () if where == "host" else ("--gpus", "1", "--gpu-backend", "emulated", "--gpu-ratio", "0:1")
    place = "" if where == "host" else " on GPU 1"
    for kernels, status in ((("ok", "norm", "mine", "kept"), 0), (("pair",), 1), (("bump",), 1), (("named",), 1)):
        declared = "".join(f"kernel {kernel}(inout A, float v)\n" for kernel in kernels)
        calls = "".join(f"  {kernel}(A[0, 0], 2.0)\n" for kernel in kernels)
        (tmp_path / "r.tile").write_text(f'use "r.py"\n{declared}program p {{ matrix A[n, n] = zeros\n{calls}}}\n')
        out = tiledsl("run", tmp_path / "r.tile", "--n", "20", *gpus)
        assert out.returncode == status and "Traceback" not in out.err, (kernels, out.err)
        if status:
            kernel, = kernels
            held = {"pair": "a tuple holding ", "named": "a dict holding "}.get(kernel, "")
            assert out.err.strip().endswith(f"{place} ({kernel}(A[0, 0], 2.0)): returned {held}a new ndarray of "
                                            "shape (20, 20), which is dropped: a kernel writes its results into its "
                                            "tiles in place (A[...] = ...)")


@pytest.mark.timeout(120)
def test_a_dropped_result_is_told_to_go_into_the_argument_the_kernel_writes(tmp_path):
    """`acc(in X, inout Y)` returning Y + X was told to write `A[...] = ...`: A was the call's `in`
    matrix, and no argument of the kernel; a panel kernel returning a list was said to return an ndarray."""
    (tmp_path / "k.py").write_text("def acc(X, Y):\n    return Y + X\n\ndef accp(X, P):\n"
                                   "    return [p + 1 for p in P]\n")
    for call, said in (("acc(A[0, 0], B[0, 0])", "returned a new ndarray of shape (10, 10), which is dropped: a "
                                                  "kernel writes its results into its tiles in place (Y[...] = ...)"),
                       ("accp(A[0, 0], B[0 : B.mt, 1])", "returned a list holding a new ndarray of shape (10, 10), "
                                                         "which is dropped: a kernel writes its results into its tiles "
                                                         "in place (P[i][...] = ..., for each tile of the panel)")):
        (tmp_path / "t.tile").write_text(f'use "k.py"\nkernel {call.split("(")[0]}(in X, inout Y)\nprogram r {{\n'
                                         f"  tiling uniform(nb = 10)\n  in matrix A[n, n] = random general\n"
                                         f"  matrix B[n, n] = zeros\n  {call}\n}}\n")
        out = tiledsl("run", tmp_path / "t.tile", "--n", "30")
        assert out.returncode == 1 and out.err.strip().endswith(f"({call}): {said}"), out.err


@pytest.mark.timeout(120)
@pytest.mark.parametrize("body, kind", [("def k(A):\n    A += 1\n    yield A\n", "generator"),
                                        ("async def k(A):\n    A += 1\n", "coroutine"),
                                        ("async def k(A):\n    A += 1\n    yield A\n", "async_generator")])
def test_a_kernel_whose_body_never_runs_fails(tmp_path, body, kind):
    """A kernel with ``yield`` (or an ``async def``) returns without running its body: its tiles would
    be left as they were, and the run would pass. ``check`` refuses one it can read (E212); behind a
    decorator, which only running the module could see through, the run fails its task, naming where the
    function is (tester u83b: a GPU body defined under an ``if`` was not named)."""
    (tmp_path / "g.py").write_text("def as_is(function):\n    return function\n\n\n@as_is\n" + body)
    (tmp_path / "g.tile").write_text('use "g.py"\nkernel k(inout A)\nprogram p {\n  matrix A[n, n] = zeros\n'
                                     "  k(A[0, 0])\n}\n")
    out = tiledsl("run", tmp_path / "g.tile", "--n", "8")
    assert out.returncode == 1 and "Traceback" not in out.err and "never awaited" not in out.err, out.err
    assert out.err.strip().endswith(f"(k(A[0, 0])): returned a {kind} without running its body (k at g.py:5 is a "
                                    "function with 'yield', or an 'async def'): a kernel is a plain function that "
                                    "writes into its tiles"), out.err


@pytest.mark.timeout(180)
@pytest.mark.parametrize("gpus", [[], ["--gpus", "1", "--gpu-ratio", "0:1"]], ids=["host", "gpu"])
def test_a_kernel_replacing_a_panels_tile_in_its_list_fails(tmp_path, gpus):
    """`P[k] = P[k] * 2` (where `P[k] *= 2` was meant) would lose the result silently, on a GPU too
    (whose emulated body is given a list of its own)."""
    (tmp_path / "p.py").write_text("def twice(P):\n    for k in range(len(P)):\n        P[k] = P[k] * 2\n\n"
                                   "def grow(P):\n    P.append(P[0])\n\ndef fine(P):\n    for tile in P:\n"
                                   "        tile *= 2\n\ntwice_gpu = twice\ngrow_gpu = grow\nfine_gpu = fine\n")
    for kernel, status in (("fine", 0), ("grow", 1), ("twice", 1)):
        (tmp_path / "p.tile").write_text(f'use "p.py"\nkernel {kernel}(inout P)\nprogram p {{\n'
                                         f"  tiling uniform(nb = 10)\n  matrix A[n, n] = identity\n"
                                         f"  {kernel}(A[0 : A.mt, 1])\n}}\n")
        out = tiledsl("run", tmp_path / "p.tile", "--n", "25", *gpus)
        assert out.returncode == status and "Traceback" not in out.err, out.err
        if status:
            assert (" on GPU 1 (" in out.err) == bool(gpus), out.err
            assert out.err.strip().endswith(f"({kernel}(A[0 : A.mt, 1])): changed the list of its panel A[0:3, 1], "
                                            "which drops what it put there: a kernel writes into a panel's tiles "
                                            "in place (P[k][...] = ..., not P[k] = ...)"), out.err


@pytest.mark.timeout(60)
def test_check_counts_the_warnings_of_a_program_without_errors(tmp_path):
    (tmp_path / "w.tile").write_text("program p {\n  matrix A[n, n] = random spd\n  param unused = 3\n"
                                     "  for k in A.nt .. 0 { potrf(A[k, k]) }\n}\n")
    out = tiledsl("check", tmp_path / "w.tile")
    assert out.returncode == 0 and out.out.strip().endswith("checked 1 file(s): no errors, 2 warning(s)"), out.out


@pytest.mark.timeout(120)
def test_a_kernel_resizing_its_tile_fails_rather_than_losing_it(tmp_path):
    (tmp_path / "r.py").write_text("def shrink(A):\n    A.resize((3, 3), refcheck=False)\n")
    (tmp_path / "r.tile").write_text('use "r.py"\nkernel shrink(inout A)\n'
                                     "program p { matrix A[n, n] = zeros\n  shrink(A[0, 0])\n}\n")
    out = tiledsl("run", tmp_path / "r.tile", "--n", "20", "--output", f"A={tmp_path / 'a.npy'}")
    assert out.returncode == 1 and "Traceback" not in out.err, out.err
    assert out.err.splitlines()[0].endswith("(shrink(A[0, 0])): changed the shape of A[0, 0] from (20, 20) to (3, 3): "
                                            "a kernel writes into its tiles, it cannot resize them")
    assert not (tmp_path / "a.npy").exists()


@pytest.mark.timeout(120)
def test_outputs_go_where_the_command_line_meant_even_if_a_kernel_changes_directory(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "c.py").write_text(f"import os\n\ndef wander(A):\n    os.chdir({str(tmp_path / 'sub')!r})\n    A += 1\n")
    (tmp_path / "c.tile").write_text('use "c.py"\nkernel wander(inout A)\n'
                                     "program p { matrix A[n, n] = zeros\n  wander(A[0, 0])\n}\n")
    out = tiledsl("run", "c.tile", "--n", "20", "--output", "A=a.npy", "--trace", "t.json", cwd=tmp_path)
    assert out.returncode == 0, out.err
    assert (tmp_path / "a.npy").exists() and (tmp_path / "t.json").exists()
    assert list((tmp_path / "sub").iterdir()) == []


SLEEPING = "    time.sleep(1000)\n"
SWALLOWING = ("    while True:\n        try:\n            time.sleep(1000)\n        except BaseException:\n"
              "            pass\n")
NOT_STOPPED = (", nor stopped 5 s later (it waits where Python cannot interrupt it: C code, a wait of another thread "
               "than the main one, or code that catches the exception)")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where, ranks, body, said", [
    ("import", 1, SLEEPING, "kernel module k.py has not finished loading after 2 s (--watchdog)"),
    ("check", 2, SLEEPING, "check forever (t.tile:4) has not returned after 2 s (--watchdog)"),
    ("import", 1, SWALLOWING, "kernel module k.py has not finished loading after 2 s (--watchdog)" + NOT_STOPPED),
    ("check", 2, SWALLOWING, "check forever (t.tile:4) has not returned after 2 s (--watchdog)" + NOT_STOPPED)])
def test_user_code_that_never_returns_outside_a_task_ends_at_the_watchdog(tmp_path, ranks, where, body, said):
    """A kernel module blocking as it loads, a user check blocking: no task runs, yet no hang (a module
    blocking on another rank than 0: the next test). A sleep is woken and unwinds (it ended the process 5 s
    later, which from Python ended the caller's interpreter); code catching the exception is said when the rank
    ends, 5 s past the limit (given to unwind): 'after 1 s' came 7 s into the run."""
    blocking = f"import time\n\nif True:\n{body}" if where == "import" else ""
    (tmp_path / "k.py").write_text(blocking + f"\ndef forever(before, after):\n    import time\n{body}\n"
                                   "def bump(A):\n    A += 1\n")
    (tmp_path / "t.tile").write_text('use "k.py"\nkernel bump(inout A)\nprogram p {  matrix A[n, n] = zeros\n'
                                     "  check forever(A)\n  for k in 0 .. A.nt { bump(A[k, k]) }\n}\n")
    out = tiledsl("run", "t.tile", "--n", "40", "--nb", "20", "--check", "--watchdog", "2", "--np", ranks, "--json",
                  "--output", "A=a.npy", cwd=tmp_path)
    assert out.returncode == 1 and out.seconds < (60 if body == SWALLOWING else 30) and "Traceback" not in out.err, \
        out.err
    # the file unwritten said after the error, whichever thread ends the rank (tester w81b: not by the watchdog's)
    assert f"tiledsl: error: rank 0: watchdog: {said}\ntiledsl: note: the run failed, so a.npy was not written (a " \
           f"file already there is left as it was)\n" in out.err, out.err
    assert sum("watchdog:" in line for line in out.err.splitlines()) == 1, out.err  # one error a job
    assert json.loads(out.out.splitlines()[-1])["error"] == f"rank 0: watchdog: {said}"  # and its JSON object


@pytest.mark.timeout(120)
def test_a_check_holding_the_gil_in_c_ends_at_the_backstop(tmp_path):
    """A user check stuck in C code that keeps the GIL (a regular expression backtracking for ages) ran for
    ever on one rank, SIGTERM and all: no thread of the rank, nor a signal handler, runs Python code then.
    Here the C code sleeps (ctypes.PyDLL keeps the GIL), on 1 rank and on 2 at once."""
    def run(ranks):
        folder = tmp_path / f"np{ranks}"
        folder.mkdir()
        (folder / "k.py").write_text("import ctypes\n\n\ndef bump(A):\n    A += 1\n\n\ndef forever(before, after):\n"
                                     "    ctypes.PyDLL(None).sleep(3600)\n    return 0.0\n")
        (folder / "t.tile").write_text('use "k.py"\nkernel bump(inout A)\nprogram p {  matrix A[n, n] = zeros\n'
                                       "  check forever(A)\n  for k in 0 .. A.nt { bump(A[k, k]) }\n}\n")
        return tiledsl("run", "t.tile", "--n", "40", "--nb", "20", "--check", "--watchdog", "2", "--np", ranks,
                       cwd=folder)

    with ThreadPoolExecutor(2) as pool:
        runs = dict(zip((1, 2), pool.map(run, (1, 2))))
    for ranks, out in runs.items():
        assert out.returncode == 1 and out.seconds < 60, out.err  # 2 x 2 s + 10 s after the check began
        # (one rank, watched from the command's process, is said as --np says a rank: onerank)
        assert "rank 0 crashed (frozen for 0:00:14: C code held the GIL" in out.err, out.err
        assert 'File "k.py", line 9 in forever' in out.err, out.err


@pytest.mark.timeout(120)
def test_a_module_loading_past_the_limit_on_a_rank_but_0_fails_the_run_too(tmp_path):
    """Ranks but 0 wait 3 s longer, for rank 0 to say it first: a module loading in 4 s on rank 1 under
    --watchdog 2 passed silently (exit 0), and one loading longer was said to be past 5 s (--watchdog)."""
    (tmp_path / "k.py").write_text('import os\nimport time\n\nif os.environ.get("PMI_RANK") == "1":\n'
                                   "    time.sleep(4)\n\n\ndef bump(A):\n    A += 1\n")
    (tmp_path / "t.tile").write_text('use "k.py"\nkernel bump(inout A)\nprogram p {  matrix A[n, n] = zeros\n'
                                     "  for k in 0 .. A.nt { bump(A[k, k]) }\n}\n")
    out = tiledsl("run", "t.tile", "--n", "40", "--nb", "20", "--watchdog", "2", "--np", 2, cwd=tmp_path)
    assert out.returncode == 1, out.err
    assert "tiledsl: error: rank 1: watchdog: kernel module k.py has not finished loading after 2 s (--watchdog)" \
        in out.err.splitlines(), out.err


def test_the_driver_cache_key_covers_every_compiler_stage_that_shapes_a_driver():
    """A change to any of them compiles programs anew (the share plan's dataflow included);
    source, diagnostics and syntax_errors read files and word messages, and no driver text comes from them."""
    from tiledsl.driverload import COMPILER_STAGES

    stages = {path.stem for path in (ROOT / "tiledsl" / "compiler").glob("*.py")} - {"__init__"}
    assert set(COMPILER_STAGES) == stages - {"source", "diagnostics", "syntax_errors"}


def ctrl_c_default():
    """A child's Ctrl-C as a terminal gives it, even under a shell that started the tests in the
    background (which ignores SIGINT, and its children inherit that)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("delay", [0.15, 0.5])
def test_ctrl_c_at_any_moment_of_start_up_is_a_quiet_end(delay):
    """While the libraries load, while the program compiles, while the run starts: no traceback.
    Small tiles make the run last seconds on any machine (n = 3000 at its default tiles ended within
    0.5 s on a fast one, before the signal came)."""
    import signal

    program = Path(sys.executable).with_name("tiledsl")
    if not program.exists():
        pytest.skip("no tiledsl program beside this Python")
    process = subprocess.Popen([str(program), "run", "programs/cholesky.tile", "--n", "3000", "--nb", "30"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_default)
    time.sleep(delay)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    if "init_import_site" in err:  # a loaded machine: the signal came before Python ran any code of ours
        pytest.skip("SIGINT arrived while Python itself was starting")
    if "KeyboardInterrupt" in err and not re.search(r'File "[^"]*/(tiledsl|runtime)/[^"]*\.py"', err):
        pytest.skip("SIGINT arrived while Python read tiledsl's first files, before any code of tiledsl's ran")
    assert process.returncode == 130 and "Traceback" not in err, err


@pytest.mark.timeout(180)
@pytest.mark.parametrize("closed", ["2>&-", ">&-"])
@pytest.mark.parametrize("ranks", [1, 2])
def test_a_closed_stdout_or_stderr_drops_what_would_go_there(closed, ranks):
    """Python sees a closed stream as None: the run goes on, its launcher and ranks too."""
    command = (f"{sys.executable} -m tiledsl.commands.cli run programs/cholesky.tile --n 256 --nb 64 --np {ranks} "
               f"--check {closed}")
    out = subprocess.run(command, shell=True, cwd=ROOT, capture_output=closed == "2>&-", text=True, timeout=150)
    assert out.returncode == 0
    if closed == "2>&-":
        assert "cholesky  residual" in out.stdout


@pytest.mark.timeout(180)
@pytest.mark.parametrize("environment", [
    {"LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"},  # no UTF-8 anywhere: files nor streams
    {"PYTHONIOENCODING": "ascii"}])
def test_a_locale_without_utf8_runs_and_prints_what_it_cannot_encode_escaped(tmp_path, environment):
    """Reading the shipped drivers' templates failed (internal error), and the summary's × failed to
    print (internal error from tiledsl run; a traceback from a compiled driver)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), **environment}
    env.pop("LANG", None)
    driver = tmp_path / "cholesky_driver.py"
    compiled = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "compile", "programs/cholesky.tile",
                               "-o", str(driver)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert compiled.returncode == 0, compiled.stderr
    for command in ([sys.executable, "-m", "tiledsl.commands.cli", "run", "programs/cholesky.tile"],
                    [sys.executable, str(driver)]):
        out = subprocess.run(command + ["--n", "200", "--check"], cwd=ROOT, env=env, capture_output=True,
                             timeout=120)
        assert out.returncode == 0 and b"Traceback" not in out.stderr, out.stderr
        assert b"1 rank \\xd7 " in out.stdout and b"cholesky  residual" in out.stdout, out.stdout


@pytest.mark.timeout(120)
def test_a_damaged_cached_driver_is_written_again(tmp_path, monkeypatch):
    """Emptied, cut short, or edited keeping its size and its last line (a name changed: every run
    was an internal error, KeyError: 'getrf_xopiv'), another program's driver copied in its place (which
    ran instead, its check passing), or a fifo (which blocked)."""
    from tiledsl.driverload import SEAL, cache_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert tiledsl_package.load("lu").run(n=64, tiles={"nb": 32}, check=True).passed
    (cached,) = cache_dir().glob("lu-*.py")
    whole = cached.read_text()
    assert whole.startswith(SEAL.decode())  # how a run tells a driver as it was written
    assert tiledsl_package.load("cholesky").run(n=64, tiles={"nb": 32}).tasks == 4  # 2×2 tiles: lu has 5
    (other,) = cache_dir().glob("cholesky-*.py")
    for damage in ("", whole[:300], whole.replace("getrf_nopiv", "getrf_xopiv"), other.read_text()):
        cached.write_text(damage)  # the last: cholesky's driver, whole, in lu's place (it ran as lu)
        assert tiledsl_package.load("lu").run(n=64, tiles={"nb": 32}, check=True).passed
        assert cached.read_text() == whole
    cached.unlink()
    os.mkfifo(cached)  # no regular file: reading it blocked for ever
    assert tiledsl_package.load("lu").run(n=64, tiles={"nb": 32}, check=True).passed
    assert cached.read_text() == whole


def test_drivers_unused_for_a_month_go_when_a_driver_is_written(tmp_path, monkeypatch):
    from tiledsl.driverload import UNUSED_SECONDS, cache_dir, cached_driver_path

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    written, again = "# written\n", "# again\n"  # stand for drivers
    folder = cache_dir()
    (folder / "__pycache__").mkdir(parents=True)
    old, recent = time.time() - UNUSED_SECONDS - 60, time.time() - UNUSED_SECONDS + 3600
    files = {name: folder / name for name in ("old-1.py", "recent-2.py", "old-3.1.2.tmp", "notes.txt", "old-4.checked",
                                              "recent-5.checked")}  # (.checked: the records of passed checks)
    files["byte code"] = folder / "__pycache__" / "old-1.cpython-312.pyc"
    for name, path in files.items():
        path.write_text("x")
        os.utime(path, (old, recent if name.startswith("recent") else old))
    hit = cached_driver_path("program p {}", "p.tile", lambda target: written)  # a miss: writes, then prunes
    assert hit.read_text().endswith("\n" + written)  # after the seal
    assert {name for name, path in files.items() if path.exists()} == {"recent-2.py", "notes.txt", "recent-5.checked"}
    os.utime(hit, (old, old))
    assert cached_driver_path("program p {}", "p.tile", lambda target: again) == hit  # a hit: kept, and used now
    assert hit.read_text().endswith("\n" + written) and time.time() - hit.stat().st_atime < 60
    assert hit.stat().st_mtime == old  # what Python's byte code of it names
    cached_driver_path("program q {}", "q.tile", lambda target: written)  # a write prunes: the hit is kept
    assert hit.exists()


def test_a_cached_driver_is_compiled_to_byte_code_once(tmp_path):
    """A hit leaves the driver's byte code valid: every run compiled the driver again (a program of
    2,000 calls: seconds and 230 MB more per run)."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    command = [sys.executable, "-m", "tiledsl.commands.cli", "run", "cholesky", "--n", "64"]
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=120)
    [byte_code] = (tmp_path / "cache" / "tiledsl" / "drivers" / "__pycache__").glob("*.pyc")
    first = byte_code.stat().st_mtime_ns
    time.sleep(0.05)
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=120)
    assert byte_code.stat().st_mtime_ns == first  # read, not written again


def test_the_cache_keeps_the_most_recently_used_drivers(tmp_path, monkeypatch):
    """Past MOST_DRIVERS drivers, the least recently used go (with their byte code), however young."""
    from tiledsl import driverload

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(driverload, "MOST_DRIVERS", 3)
    folder = driverload.cache_dir()
    (folder / "__pycache__").mkdir(parents=True)
    now = time.time()
    for age, name in enumerate(["a.b-1", "c-2", "d-3", "e.f-4"]):  # a.b-1 the most recently used
        (folder / f"{name}.py").write_text("x")
        (folder / "__pycache__" / f"{name}.cpython-312.pyc").write_text("x")
        os.utime(folder / f"{name}.py", (now - 60 * (age + 1),) * 2)
    written = driverload.cached_driver_path("program p {}", "p.tile", lambda target: "# d\n")
    assert sorted(path.name for path in folder.glob("*.py")) == sorted(["a.b-1.py", "c-2.py", written.name])
    assert sorted(path.name for path in (folder / "__pycache__").glob("*.pyc")) == [
        "a.b-1.cpython-312.pyc", "c-2.cpython-312.pyc"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", [b"lat\xe9.tile", ("x" * 240 + ".tile").encode()])
def test_any_file_name_the_system_allows_runs(tmp_path, name):
    """A name that is not UTF-8, one near the 255-byte limit (the cached driver's name is cut)."""
    path = os.path.join(os.fsencode(tmp_path), name)
    with open(path, "wb") as target:
        target.write((ROOT / "programs/cholesky.tile").read_bytes())
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    out = subprocess.run([os.fsencode(sys.executable), b"-m", b"tiledsl.commands.cli", b"run", path, b"--n", b"64",
                          b"--nb", b"32", b"--check"], capture_output=True, text=True, timeout=100, env=env)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr


def test_a_relative_cache_home_is_ignored_as_the_xdg_specification_says(monkeypatch, tmp_path):
    from tiledsl.driverload import cache_dir

    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir() == tmp_path / ".cache" / "tiledsl" / "drivers"


@pytest.mark.timeout(120)
def test_a_summary_stdout_cannot_take_is_one_line_not_an_internal_error():
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "programs/cholesky.tile", "--n", "128",
                              "--nb", "64", "--json"], cwd=ROOT, stdout=full, stderr=subprocess.PIPE, text=True,
                             timeout=100)
    assert out.returncode == 1 and "internal error" not in out.stderr
    assert out.stderr.strip() == "tiledsl: error: the output could not be written to stdout: No space left on device"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command, said", [
    (["run", "nope.tile"], "tiledsl: error: nope.tile: no such file"),
    (["run", "programs/cholesky.tile", "--n", "0"], "tiledsl: error: --n must be at least 1, got 0"),
    (["explain", "programs/cholesky.tile", "--n", "0"], "tiledsl: error: --n must be at least 1, got 0"),
])
def test_a_failure_object_stdout_cannot_take_leaves_the_failure_said_and_its_status(command, said):
    """--json's failure object written to `> /dev/full` was a traceback (exit 1), or in a run an internal error
    (exit 3); to a reader that left (| head), a BrokenPipeError traceback, not the 141 of a closed pipe."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", *command, "--json"], cwd=ROOT, stdout=full,
                             stderr=subprocess.PIPE, text=True, timeout=100)
    assert out.returncode == 2 and out.stderr.splitlines() == [
        said, "tiledsl: error: the output could not be written to stdout: No space left on device"], out.stderr
    reader, writer = os.pipe()
    os.close(reader)  # the reader left before the object came
    with os.fdopen(writer, "w") as gone:
        out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", *command, "--json"], cwd=ROOT, stdout=gone,
                             stderr=subprocess.PIPE, text=True, timeout=100)
    assert out.returncode == 141 and out.stderr.splitlines() == [said], out.stderr



@pytest.mark.parametrize("failure", [BrokenPipeError(32, "Broken pipe"), OSError(28, "No space left on device")])
def test_a_kernels_print_to_a_stdout_gone_is_dropped_and_the_main_thread_still_told(failure):
    """On one rank a kernel printing to `| head` or `> /dev/full` failed ('kernel k failed ... BrokenPipeError
    at cli.py'), exit 1: on several ranks the same run ends with 141, or the one line of a full device."""
    from tiledsl.commands.cli import StdoutError, _GuardedStdout

    class Gone:
        def write(self, text):
            raise failure

        def flush(self):
            raise failure

    stdout = _GuardedStdout(Gone())
    written = []
    kernel = threading.Thread(target=lambda: written.append((stdout.write("log line\n"), stdout.flush())))
    kernel.start()
    kernel.join()
    assert written == [(9, None)]
    with pytest.raises(BrokenPipeError if isinstance(failure, BrokenPipeError) else StdoutError):
        stdout.write("summary\n")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", [("compile",), ("explain", "--n", "1000"), ("graph", "--n", "300")])
def test_what_other_commands_write_to_a_full_stdout_is_one_line_too(command):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", command[0], "programs/cholesky.tile",
                              *command[1:]], cwd=ROOT, stdout=full, stderr=subprocess.PIPE, text=True, timeout=100)
    assert out.returncode == 1, out.stderr
    assert out.stderr.strip() == "tiledsl: error: the output could not be written to stdout: No space left on device"


SLOW_LOADING = """
import os, signal, sys, time
import tiledsl.commands as commands


class SignalWhileLoading:  # the import of the commands takes a while, and a signal comes then
    def find_spec(self, name, path, target=None):
        if name == "tiledsl.commands.cli":
            os.kill(os.getpid(), getattr(signal, sys.argv[1]))
            time.sleep(30)
        return None


sys.meta_path.insert(0, SignalWhileLoading())
sys.exit(commands.main())
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name, code, said", [("SIGINT", 130, "tiledsl: stopped by SIGINT"),
                                              ("SIGTERM", 143, "tiledsl: stopped by SIGTERM"),
                                              ("SIGHUP", 129, "tiledsl: stopped by SIGHUP")])
def test_a_signal_while_the_commands_load_ends_at_once_saying_so(name, code, said):
    out = subprocess.run([sys.executable, "-c", SLOW_LOADING, name], capture_output=True, text=True, timeout=50)
    assert (out.returncode, out.stderr) == (code, said + "\n")


@pytest.mark.timeout(90)
def test_ctrl_c_during_a_run_names_the_kernels_left_running(tmp_path):
    """As architecture.md says: the run waits 2 s for its kernels, then names those still running."""
    (tmp_path / "nap.py").write_text("import time\nfrom pathlib import Path\n\n\ndef nap(A):\n"
                                     "    Path(__file__).with_name('began').touch()\n    time.sleep(20)\n")
    (tmp_path / "nap.tile").write_text('use "nap.py"\nkernel nap(inout A)\nprogram p {\n  tiling uniform(nb = 10)\n'
                                       "  matrix A[n, n] = zeros\n  nap(A[0, 0])\n}\n")
    run = subprocess.Popen([sys.executable, "-m", "tiledsl.commands.cli", "run", "nap.tile", "--n", "10"],
                           cwd=tmp_path, stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_default,
                           env=dict(os.environ, XDG_CACHE_HOME=str(CACHE["dir"])))
    deadline = time.monotonic() + 60
    while not (tmp_path / "began").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    run.send_signal(signal.SIGINT)
    err = run.communicate(timeout=30)[1]
    assert run.returncode == 130
    assert re.fullmatch(r"tiledsl: rank 0: stopped by SIGINT\n1 kernel\(s\) of rank 0 still running 2 s after the run "
                        r"stopped, not waited for \(Python cannot stop a thread: it ends as it returns, or with the "
                        r"process\):\n"
                        r"  running #0 nap\(A\[0, 0\]\), line 6, for \d+ s on CPU worker \d\n", err), err


@pytest.mark.timeout(60)
def test_a_value_starting_with_a_dash_is_shown_how_to_give_it():
    out = tiledsl("run", "cholesky", "--n", 100, "--gpus", 1, "--gpu-backend", "emulated", "--gpu-memory", "-5M")
    assert_clean_failure(out, 2)
    assert "argument --gpu-memory: expected one argument (a value starting with '-' is given as " \
           "--gpu-memory=-5M)" in out.err, out.err


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ranks", ["1", "2"])
def test_a_removed_working_directory_is_said_in_one_line(tmp_path, ranks):
    """Path.cwd() raised FileNotFoundError: an internal error on one rank, tracebacks on two."""
    gone = tmp_path / "gone"
    gone.mkdir()
    script = (f"cd {gone} && rm -rf {gone} && {sys.executable} -m tiledsl.commands.cli run "
              f"{ROOT / 'programs/cholesky.tile'} --n 64 --np {ranks} --json")
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=100)
    said = "the current directory no longer exists (it was removed): cd to another one and run again"
    assert out.returncode == 2
    assert out.stderr.strip() == f"tiledsl: error: {said}"
    # --json's failure object too, as for every usage error
    assert json.loads(out.stdout) == {"program": None, "n": None, "np": None, "ok": False, "passed": None,
                                      "error": said}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("argv, hint", [
    (["run", "--", "-p.tile", "--n", "200"],
     "unrecognized arguments: --n 200 (after '--' every word is a file name: give the options before '--')"),
    (["run", "-p.tile", "--n", "200"],
     "(a file whose name starts with '-' is given as ./-p.tile, or after '--')"),
    (["compile", "--", "-p.tile", "-o", "d.py"],  # a short option after '--' too
     "unrecognized arguments: -o d.py (after '--' every word is a file name: give the options before '--')"),
    (["compile", "./-p.tile", "-o", "-d.py"],
     "argument -o/--output: expected one argument (a value starting with '-' is given as -o=-d.py)"),
])
def test_a_program_named_with_a_leading_dash_is_explained(tmp_path, argv, hint):
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", *argv], cwd=tmp_path, capture_output=True,
                         text=True, timeout=50)
    assert out.returncode == 2 and hint in out.stderr, out.stderr
    assert "did you mean" not in out.stderr  # it suggested --n for --n


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command, product", [("compile cholesky", "the driver"),
                                              ("graph cholesky --n 100", "the graph")])
def test_a_product_for_a_closed_stdout_is_refused(command, product):
    """`tiledsl compile chol.tile >&-`: exit 0, no driver anywhere, nothing said."""
    out = subprocess.run(["bash", "-c", f"{sys.executable} -m tiledsl.commands.cli {command} >&-"], cwd=ROOT,
                         capture_output=True, text=True, timeout=100)
    assert (out.returncode, out.stderr) == (2, f"tiledsl: error: stdout is closed (>&-), where {product} would go: "
                                               f"give -o FILE\n")


@pytest.mark.timeout(150)
def test_a_program_after_dashes_runs_on_several_ranks(tmp_path):
    """`tiledsl run --np 2 --n 64 -- -p.tile` passed '--' on to the driver, which refused it: every
    run of that form failed, said as a rank killed by SIGINT."""
    shutil.copy(ROOT / "programs/cholesky.tile", tmp_path / "-p.tile")
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "--np", "2", "--n", "64", "--nb", "32",
                          "--check", "--", "-p.tile"], cwd=tmp_path, capture_output=True, text=True, timeout=140)
    assert out.returncode == 0 and "(pass, threshold 60)" in out.stdout, out.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", [("compile", "cholesky", "-o"), ("graph", "cholesky", "--n", "100", "-o")])
def test_an_output_in_a_folder_that_is_a_file_is_said_as_run_says_it(tmp_path, command):
    (tmp_path / "afile").write_text("")
    target = tmp_path / "afile" / "x.out"
    out = tiledsl(*command, target)
    assert_clean_failure(out, status=2)
    assert out.err == f"tiledsl: error: -o {target}: {str(tmp_path / 'afile')!r} is a file, not a directory\n"


@pytest.mark.timeout(120)
def test_a_reader_leaving_in_the_middle_of_the_graph_ends_it_with_141_not_0():
    """`tiledsl graph ... | head -1`: the DOT text, far larger than the pipe's buffer, went in one
    write, which the reader's leaving cut short; Python's stream dropped the rest and exited 0."""
    env = dict(os.environ, XDG_CACHE_HOME=str(CACHE["dir"]))
    with subprocess.Popen([sys.executable, "-m", "tiledsl.commands.cli", "graph", "programs/cholesky.tile", "--n", "1000",
                           "--nb", "60"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as job:
        first = job.stdout.read(100)
        time.sleep(0.5)  # the whole text is being written, the pipe full
        job.stdout.close()
        error = job.stderr.read().decode()
        status = job.wait(timeout=LIMIT * 3)
    assert first.startswith(b'digraph "cholesky" {')
    assert (status, error) == (141, "")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", [("-m", "tiledsl.commands.cli", "--version"), ("-m", "tiledsl.commands.cli", "run",
                                                                                   "--help"),
                                     ("tests/golden/cholesky.py", "--help")], ids=["version", "help", "driver-help"])
def test_help_to_a_reader_that_left_ends_with_141_not_0(command):
    """argparse drops a write that fails: `tiledsl run --help | true` ended 0, its text lost."""
    read, write = os.pipe()
    os.close(read)  # the reader has left before anything is written
    try:
        out = subprocess.run([sys.executable, *command], cwd=ROOT, stdout=write, stderr=subprocess.PIPE, timeout=100)
    finally:
        os.close(write)
    assert (out.returncode, out.stderr.decode()) == (141, "")


def test_every_command_with_json_says_a_failure_in_json_as_run_does(tmp_path):
    """simulate, explain and tune --json printed nothing on stdout for a usage error (run and bench print
    the failure object), so a script reading their JSON met an empty line."""
    (tmp_path / "bad.tile").write_text("program p {\n  matrix A[n, n] = random spd\n  potrf(A[0 0])\n}\n")
    cases = [(["simulate", "cholesky", "--n", 400, "--nb", 0, "--machine", "local"], 2, ("cholesky", 400)),
             (["simulate", "cholesky", "--n", 400, "--nodes", 2, "--machine", "nowhere"], 2, ("cholesky", 400, 2)),
             (["explain", "cholesky", "--n", 400, "--grid", "0x1"], 2, ("cholesky", 400)),
             (["explain", tmp_path / "bad.tile", "--n", 64], 1, (None, 64)),
             (["tune", "cholesky", "--n", 256, "--budget", 0], 2, ("cholesky", 256))]
    for command, code, said in cases:
        out = tiledsl(*command, "--json")
        assert out.returncode == code and out.out.strip(), (command, out.err)
        failure = json.loads(out.out.strip().splitlines()[-1])
        assert failure["ok"] is False and failure["passed"] is None, out.err
        assert (failure["program"], failure["n"], *([failure["np"]] if "np" in failure else [])) == said
        assert failure["error"] in out.err


@pytest.mark.parametrize("command, error", [
    (["explain", "cholesky", "--nb", "abc"], "argument --nb: invalid int value: 'abc' (see tiledsl explain --help)"),
    (["simulate", "cholesky", "--nodes", "abc"], "argument --nodes: invalid int value: 'abc' (see tiledsl simulate "
                                                 "--help)"),
    (["tune", "cholesky", "--bogus"], "unrecognized arguments: --bogus (see tiledsl tune --help)"),
])
def test_a_usage_error_argparse_finds_is_said_in_json_by_every_command_that_takes_it(command, error):
    """explain, simulate and tune printed nothing on stdout for an error the option parser found."""
    out = tiledsl(*command, "--json")
    assert out.returncode == 2 and json.loads(out.out.strip().splitlines()[-1]) == {
        "program": None, "n": None, "ok": False, "passed": None, "error": error}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("body", ["def k(A):\n    A += 1\n    return (x for x in [A * 2])\n",
                                  "def k(A):\n    A += 1\n    return helper(A)\n\n\ndef helper(A):\n    yield A\n"],
                         ids=["expression", "helper"])
def test_a_kernel_that_ran_and_returned_a_generator_is_not_said_to_have_skipped_its_body(tmp_path, body):
    """A plain kernel returning a generator expression (or another function's generator) ran its body:
    it was told "returned a generator without running its body (a function with 'yield' ...)"."""
    (tmp_path / "g.py").write_text(body)
    (tmp_path / "g.tile").write_text('use "g.py"\nkernel k(inout A)\nprogram p {\n  matrix A[n, n] = zeros\n'
                                     "  k(A[0, 0])\n}\n")
    out = tiledsl("run", tmp_path / "g.tile", "--n", "8")
    assert out.returncode == 1 and "Traceback" not in out.err, out.err
    assert out.err.strip().endswith("(k(A[0, 0])): returned a generator, which is dropped: a kernel writes its "
                                    "results into its tiles in place (A[...] = ...)"), out.err


def test_the_driver_cache_key_covers_the_language_facts_the_compiler_reads(monkeypatch):
    """tiledsl/language.py (tilings, kinds, modes, limits) shapes drivers as a compiler stage does:
    cached drivers are compiled anew when it changes."""
    import tiledsl.driverload as driverload

    read = []
    original = driverload._package_text
    monkeypatch.setattr(driverload, "_package_text", lambda package, name: read.append((package, name))
                        or original(package, name))
    driverload.cache_key("program p {}", "p.tile")
    assert ("tiledsl", "language.py") in read
    assert {("tiledsl.compiler", f"{stage}.py") for stage in ("typer", "checks", "module_use", "scope")} <= set(read)


@pytest.mark.parametrize("args, said", [
    (("compile", "cholesky", "-o", "-"), "tiledsl compile: error: argument -o/--output: leave out -o to write to "
                                         "stdout"),
    (("graph", "cholesky", "--n", 100, "-o", "-"), "tiledsl graph: error: argument -o/--output: leave out -o to write "
                                                   "to stdout"),
    (("run", "cholesky", "--n", 100, "--trace", "-"), "tiledsl run: error: argument --trace: a trace is written to a "
                                                      "file, not to stdout: name one, e.g. --trace trace.json"),
    (("run", "../programs/cholesky", "--n", 100), "tiledsl: error: ../programs/cholesky: no such file (did you mean "
                                                  "../programs/cholesky.tile?)"),
])
def test_a_stdout_or_a_left_off_extension_is_said_so(args, said):
    """`-o -` was 'name a .py file' or 'write the graph as .dot', `--trace -` wrote a file named '-',
    and a program path without its .tile said 'no such file' alone."""
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", *map(str, args)], cwd=ROOT / "tests",
                         capture_output=True, text=True, timeout=100)
    assert out.returncode == 2 and out.stderr.startswith(said), out.stderr
    assert not (ROOT / "tests" / "-").exists()


@pytest.mark.timeout(120)
@pytest.mark.xdist_group("help-texts")
def test_explain_warns_of_a_gpu_backend_without_gpus_and_help_says_what_every_argument_is(helps):
    """explain --gpu-backend cupy without --gpus said nothing (run warns); graph's PROGRAM, plot's
    TRACE.json and bench's --seed had no help, and PROGRAM's left out the drivers taken."""
    out = tiledsl("explain", "cholesky", "--n", "100", "--gpu-backend", "cupy", "--totals")
    assert out.returncode == 0 and out.err == ("tiledsl: warning: --gpu-backend cupy does nothing without --gpus "
                                               "G: the plan has no GPU tiles\n"), out.err
    for command in ("explain", "graph", "simulate", "bench", "tune", "run"):
        assert "or a driver compiled from one (DRIVER.py)" in " ".join(helps[command].out.split())
    assert "a trace that tiledsl run --trace" in helps["plot"].out
    assert "seed of the generated inputs" in helps["bench"].out


def test_ctrl_c_wrapped_by_a_library_is_a_quiet_end_not_an_internal_error(monkeypatch, capsys):
    """Ctrl-C while threadpoolctl loaded: Python 3.11 wraps what __set_name__ raises in a RuntimeError
    ('Error calling __set_name__ on Field ...'), and the run said 'internal error', exit 3."""
    from tiledsl.commands.cli import main
    from tiledsl.runtime import entry

    def interrupted(*args, **kwargs):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as stop:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance '_controller_cache'") from stop

    monkeypatch.setattr(entry, "execute", interrupted)
    assert main(["run", "cholesky", "--n", "64", "--no-tune"]) == 130
    assert capsys.readouterr().err == "tiledsl: rank 0: stopped by SIGINT\n"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["lark.py", "markupsafe.py"])
def test_compile_hides_no_module_of_a_package_tiledsl_requires(tmp_path, name):
    """-o lark.py (the compiler's parser) or markupsafe.py (jinja2's): the driver would have stopped
    itself and every driver beside it, and only a fixed list of packages' names was refused."""
    out = tiledsl("compile", "cholesky", "-o", tmp_path / name)
    assert_clean_failure(out, status=2)
    stem = name[:-3]
    assert out.err == (f"tiledsl: error: -o {tmp_path / name}: a driver named {name} would hide the module {stem} "
                       f"from its run (a script's folder comes first on the import path): name it otherwise\n")
    assert not (tmp_path / name).exists()


@pytest.mark.timeout(120)
def test_a_driver_saved_without_py_is_named_as_one(tmp_path):
    """A driver renamed without its .py (``mv chol.py chol``) given as ``./chol``: read as a program,
    it was a syntax error at its first line ('unexpected '\"\"''), exit 1. One driver, given to run,
    explain and compile (which leave it as it is) in turn."""
    assert tiledsl("compile", "cholesky", "-o", tmp_path / "chol.py").returncode == 0
    (tmp_path / "chol.py").rename(tmp_path / "chol")
    for command in ("run", "explain", "compile"):
        out = tiledsl(command, tmp_path / "chol", *(["--n", "64"] if command != "compile" else []))
        assert_clean_failure(out, status=2)
        assert out.err == (f"tiledsl: error: {tmp_path / 'chol'} is a driver tiledsl compile wrote, under a name "
                           f"without .py: rename it chol.py, and run it as python {tmp_path / 'chol'}.py or tiledsl "
                           f"run {tmp_path / 'chol'}.py\n"), command
    (tmp_path / "chol").rename(tmp_path / "chol.py")  # given to compile as it is: 'rename it chol.py.py'
    out = tiledsl("compile", tmp_path / "chol.py")
    assert_clean_failure(out, status=2)
    assert out.err == (f"tiledsl: error: {tmp_path / 'chol.py'} is a driver tiledsl compile wrote: compile takes a "
                       f".tile program; a driver runs as it is (python {tmp_path / 'chol.py'}, or tiledsl run "
                       f"{tmp_path / 'chol.py'})\n")


def test_a_rank_runs_its_driver_as_a_script_would_but_from_byte_code(tmp_path):
    """`tiledsl run --np` starts each rank with RUN_FROM_BYTE_CODE: the driver sees what `python DRIVER`
    gives it, but runs the byte code its launcher's import wrote (proven by a source changed behind a
    byte code Python still takes as current: same size and time)."""
    import py_compile

    from tiledsl.commands.cli import RUN_FROM_BYTE_CODE

    folder = tmp_path / "real"
    folder.mkdir()
    (tmp_path / "link.py").symlink_to(folder / "d.py")
    shown = "import sys\nprint({!r}, __name__, sys.argv, sys.path[0], __file__)\n"
    driver = folder / "d.py"
    driver.write_text(shown.format("A"))
    stamp = driver.stat().st_mtime_ns
    py_compile.compile(str(tmp_path / "link.py"), doraise=True)  # as the launcher imports it
    driver.write_text(shown.format("B"))
    os.utime(driver, ns=(stamp, stamp))
    ran = [subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60).stdout
           for command in ([sys.executable, "link.py", "x"],
                           [sys.executable, "-c", RUN_FROM_BYTE_CODE, "link.py", "x"])]
    assert ran[0].replace("B", "A", 1) == ran[1], ran
    assert ran[1] == f"A __main__ ['link.py', 'x'] {folder} {tmp_path / 'link.py'}\n"


def test_a_driver_gone_before_its_rank_read_it_is_one_line(tmp_path):
    """tiledsl's cache cleared as a job started: each rank's traceback of a FileNotFoundError."""
    from tiledsl.commands.cli import RUN_FROM_BYTE_CODE

    gone = tmp_path / "cache" / "p-0123.py"
    out = subprocess.run([sys.executable, "-c", RUN_FROM_BYTE_CODE, str(gone), "--n", "8"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stderr) == (1, f"tiledsl: error: the driver {gone} is gone: it was removed as the "
                                               f"job started (tiledsl's cache cleared?): run it again\n")


@pytest.mark.parametrize("damage", [lambda code: code[:40], lambda code: code[:20] + b"\xff" * 40 + code[60:],
                                    lambda code: code[:16] + __import__("marshal").dumps(42)])  # no code object
def test_a_driver_s_damaged_byte_code_is_read_anew_from_its_source(tmp_path, damage):
    """A cached driver's byte code cut short or overwritten made every run of the program an internal
    error (EOFError: marshal data too short), until the user found and deleted the file."""
    import py_compile

    from tiledsl.driverload import import_driver

    driver = tmp_path / "d.py"
    driver.write_text("VALUE = 'from the source'\n" + "".join(f"X{i} = {i}\n" for i in range(20)))
    cached = Path(py_compile.compile(str(driver), doraise=True))
    cached.write_bytes(damage(cached.read_bytes()))
    assert import_driver(driver, "damaged_driver").VALUE == "from the source"


def test_a_cached_driver_s_byte_code_overwritten_with_other_code_is_not_run(tmp_path, monkeypatch):
    """Python judges byte code by its source's time and size alone: a cached driver's byte code whose
    body was overwritten (other constants, another driver's code) ran that program, exit 0."""
    import marshal
    import py_compile

    from tiledsl.driverload import _seal_byte_code, cache_dir, import_driver

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache_dir().mkdir(parents=True)
    driver = cache_dir() / "p-0123.py"
    driver.write_text("VALUE = 'from the source'\n")
    byte_code = Path(py_compile.compile(str(driver), doraise=True))
    _seal_byte_code(byte_code)  # as the import that wrote it sealed it
    assert import_driver(driver, "sealed_driver").VALUE == "from the source"
    other = marshal.dumps(compile("VALUE = 'another program'\n", str(driver), "exec"))
    byte_code.write_bytes(byte_code.read_bytes()[:16] + other)  # its header kept: Python takes it as current
    assert import_driver(driver, "tampered_driver").VALUE == "from the source"


@pytest.mark.timeout(120)
def test_a_moved_cache_runs_its_programs_own_kernels(tmp_path, monkeypatch):
    """A cached driver recorded its program's folder relative to itself: once the cache moved (XDG_CACHE_HOME set
    to the new place), it found the folder that path then named, and there another program's k.py (exit 0)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / "cache"))
    program = tmp_path / "home" / "p"
    program.mkdir(parents=True)
    (program / "k.py").write_text("def bump(A):\n    A += 1.0\n")
    (program / "p.tile").write_text('use "k.py"\nkernel bump(inout A)\nprogram p {\n  tiling uniform(nb = 4)\n'
                                    "  matrix A[4, 4] = zeros\n  bump(A[0, 0])\n}\n")
    assert tiledsl_package.load(program / "p.tile").run(n=4)["A"][0, 0] == 1.0
    moved = tmp_path / "scratch" / "disk" / "cache"
    moved.parent.mkdir(parents=True)
    (tmp_path / "home" / "cache").rename(moved)
    monkeypatch.setenv("XDG_CACHE_HOME", str(moved))
    decoy = moved.parent / "p"  # where the driver's relative path (../../../p) leads from the moved cache
    decoy.mkdir()
    (decoy / "k.py").write_text("def bump(A):\n    A += 666.0\n")
    assert len(list((moved / "tiledsl" / "drivers").glob("p-*.py"))) == 1  # a hit: the moved driver runs
    assert tiledsl_package.load(program / "p.tile").run(n=4)["A"][0, 0] == 1.0


@pytest.mark.timeout(120)
def test_a_run_under_warnings_as_errors_leaves_no_file_open():
    """The run's own streams (duplicates of stdout's and stderr's descriptors) are closed when it ends:
    under ``PYTHONWARNINGS=error`` an unclosed one was "an error was ignored in FileIO", twice."""
    env = dict(os.environ, XDG_CACHE_HOME=str(CACHE["dir"]), PYTHONWARNINGS="error")
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "cholesky", "--n", "64", "--check"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=100)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert "(pass, threshold 60)" in out.stdout
