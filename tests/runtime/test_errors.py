"""runtime.errors: a kernel's exception in one line, whatever it is."""
import subprocess
import sys

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
    (ValueError("\x1b[31mred\x1b[0m\tand a bell\x07 \x9b"), "\\x1b[31mred\\x1b[0m\tand a bell\\x07 \\x9b"),
])
def test_an_exceptions_message_is_one_line(error, text):
    assert message_of(error) == text


def test_a_long_message_is_cut_and_says_how_long_it_was():
    text = message_of(ValueError("x" * 5000))
    assert text == "x" * MESSAGE_LIMIT + "… (5000 characters)"


def failed_run(folder, name: str, text: str, n: int) -> str:
    """The stderr of ``tiledsl run NAME.tile --n N`` of the program ``text``, which fails cleanly."""
    (folder / f"{name}.tile").write_text(text)
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", f"{name}.tile", "--n", str(n)],
                         cwd=folder, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    return out.stderr


def test_a_failure_names_the_loop_nests_values_as_the_program_does(tmp_path):
    """A let ``id`` is ``id_`` in the driver (``id`` is Python's): the message says ``id``."""
    err = failed_run(tmp_path, "ids", "program ids {\n  tiling uniform(nb = 4)\n  matrix U[n, n] = random general\n"
                                      "  for _i in 0 .. U.mt {\n    let id = min(_i, 0)\n"
                                      "    gemm(U[id, 0], U[1, 1], U[_i, 0])\n  }\n}\n", 8)
    assert "with _i = 0, id = 0)" in err and "id_" not in err and "user_i" not in err


def test_a_failing_hoisted_ownership_test_quotes_its_own_statement(tmp_path):
    """The ownership tests of a loop body's statements are hoisted together above them: one that
    fails is quoted as its statement, not as the first of the block."""
    err = failed_run(tmp_path, "hoisted", "program hoisted {\n  tiling uniform(nb = 100)\n"
                                          "  matrix A[n, n] = random spd\n  for k in 0 .. A.nt {\n"
                                          "    potrf(A[k, k])\n    potrf(A[2 ** (k - 1), 0])\n  }\n}\n", 300)
    assert err.strip().endswith("2 ** -1 (in `potrf(A[2 ** (k - 1), 0])`, with k = 0)"), err


def test_a_failure_leaves_out_the_lets_of_a_loop_that_ended(tmp_path):
    """``s`` is a setting of hybrid tilings only: a let of that name in a uniform program, in a loop
    that ended, is not named with its last value (the driver once bound it from the parameters too)."""
    (tmp_path / "k.py").write_text("def touch(A):\n    pass\n")  # a kernel that never fails: the index alone does
    err = failed_run(tmp_path, "ended", 'use "k.py"\nkernel touch(inout A)\nprogram ended {\n'
                                        "  tiling uniform(nb = 4)\n  matrix A[n, n] = zeros\n"
                                        "  for k in 0 .. A.mt { let s = k * 2  touch(A[s // 2, 0]) }\n"
                                        "  for i in 0 .. A.mt { touch(A[i, 1][0 : 3]) }\n}\n", 10)
    assert err.strip().endswith("(in `touch(A[i, 1][0:3])`, with i = 2)"), err


def _limits(address: int, processes: int):
    """getrlimit as under `ulimit -v` (``address`` bytes; RLIM_INFINITY: none) and `ulimit -u`."""
    import resource

    return lambda which: ({resource.RLIMIT_AS: address, resource.RLIMIT_NPROC: processes,
                           resource.RLIMIT_STACK: 8 * 2 ** 20}[which], resource.RLIM_INFINITY)


@pytest.mark.parametrize("error, address, processes, text", [
    (MemoryError("no room"), -1, -1, "out of memory: no room; use more ranks on other nodes (the ranks on one node "
                                     "share its memory) or a smaller --n"),
    (MemoryError(), 300 * 2 ** 20, -1, "out of memory; this process's address space is limited to 300.00 MiB "
                                       "(ulimit -v): raise that limit, or use more ranks (each has its own limit) or "
                                       "a smaller --n"),
    (RuntimeError("can't start new thread"), 300 * 2 ** 20, -1,
     "cannot start a thread (each reserves its stack, 8.00 MiB by ulimit -s); this process's address space is "
     "limited to 300.00 MiB (ulimit -v): raise that limit, or use smaller thread stacks (ulimit -s) or fewer "
     "workers"),  # not more ranks or a smaller --n, which leave every rank its threads (tester y58)
    (ImportError("libx.so: failed to map segment from shared object"), 300 * 2 ** 20, -1,
     "out of memory: libx.so: failed to map segment from shared object (no room to load it); this process's address "
     "space is limited to 300.00 MiB (ulimit -v): raise that limit"),  # was an internal error, under ulimit -v 170000
    (RuntimeError("can't allocate read lock"), -1, -1,
     "out of memory: can't allocate read lock; use more ranks on other nodes (the ranks on one node share its memory) "
     "or a smaller --n"),
    (RuntimeError("can't start new thread"), -1, 4096,
     "cannot start a thread: this user's processes and threads may have reached their limit (ulimit -u 4096): raise "
     "it, or use fewer workers (each is a thread); or memory ran out; use more ranks on other nodes (the ranks on one "
     "node share its memory) or a smaller --n"),
])
def test_memory_or_a_thread_that_runs_out_is_said_with_the_limit_that_binds(monkeypatch, error, address, processes,
                                                                            text):
    """Under `ulimit -v 300000` a thread that could not start was an internal error (exit 3); memory that ran
    out advised ranks on other nodes, where each rank has its own limit."""
    import resource

    from tiledsl.runtime import errors

    infinite = resource.RLIM_INFINITY
    monkeypatch.setattr(errors.resource, "getrlimit", _limits(infinite if address < 0 else address,
                                                              infinite if processes < 0 else processes))
    assert errors.shortage(error) == text
    assert errors.shortage(RuntimeError("another")) is None and errors.shortage(ValueError()) is None


def test_memory_that_runs_out_in_the_loop_nest_or_a_kernel_is_said_as_a_shortage(monkeypatch):
    """'the loop nest failed: MemoryError: ...' (and a kernel's 'MemoryError: ...') gave no advice; the
    Python API raised numpy's own MemoryError where the command line said 'out of memory'."""
    import numpy as np

    import tiledsl
    from tiledsl.runtime import errors, launch, resources

    monkeypatch.setattr(errors, "_address_limit", lambda: None)
    said = str(errors.loop_nest_failure(MemoryError("no room"), 1))
    assert said == "out of memory: no room; use more ranks on other nodes (the ranks on one node share its memory) " \
                   "or a smaller --n"
    # a kernel's, named at its line in the user's code (language.md), as its other errors are
    assert errors.shortage(MemoryError("no room"), None, " at km.py:3").startswith("out of memory at km.py:3: no room; ")
    # one allocation past the node's memory (tester w: 728 TiB on 23 GiB): no setting of the run helps
    monkeypatch.setattr(resources, "meminfo", lambda field: 2 ** 30)
    huge = MemoryError("Unable to allocate 2.00 GiB for an array with shape (16384, 16384) and data type float64")
    assert errors.shortage(huge, None, " at km.py:3").endswith(
        "; that one allocation is more than this node's 1.00 GiB of memory: no setting of the run makes it fit (the "
        "code at km.py:3 asks for it)")
    assert errors.shortage(huge).endswith("use more ranks on other nodes (the ranks on one node share its memory) "
                                          "or a smaller --n")  # tiledsl's own allocation: a setting makes it fit

    def short(*args, **kwargs):
        raise MemoryError("Unable to allocate 8 bytes")

    monkeypatch.setattr(launch, "_fill_inputs", short)
    with pytest.raises(tiledsl.TiledslError, match=r"^rank 0: out of memory: Unable to allocate 8 bytes; use more"):
        tiledsl.load("cholesky").run(A=np.eye(8))
    with pytest.raises(tiledsl.TiledslError) as checked:  # the remedies are the API's, and the check's too
        tiledsl.load("cholesky").run(A=np.eye(8), check=True)
    assert str(checked.value).endswith("with tiledsl run --np (a run from Python is one rank) or smaller inputs (the "
                                       "files or arrays given fix the sizes), or run with check=False")


def test_a_runs_remedies_for_memory_are_those_of_its_refusal(monkeypatch):
    """Memory that ran out during a --check run did not advise running without it; the API was told '--n'."""
    import resource

    from tiledsl.runtime import resources
    from tiledsl.runtime.options import API, COMMAND_LINE

    unlimited = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    monkeypatch.setattr(resources.resource, "getrlimit", lambda which: unlimited)
    assert resources.shortage_remedies(True, True, False, COMMAND_LINE) == (
        "use more ranks on other nodes (the ranks on one node share its memory), a smaller --n or a smaller "
        "--window, or run without --check")
    assert resources.shortage_remedies(False, False, False, API) == (
        "use more ranks on other nodes (the ranks on one node share its memory) with tiledsl run --np (a run from "
        "Python is one rank) or a smaller n")


@pytest.mark.timeout(60)
def test_a_thread_that_cannot_start_ends_the_run_as_a_shortage_not_a_bug(tmp_path):
    import json
    import os

    programs = os.path.join(os.path.dirname(__file__), "..", "..", "programs", "cholesky.tile")
    script = ("import sys\nfrom tiledsl.runtime import entry\n"
              "def full(*args, **kwargs):\n    raise RuntimeError(\"can't start new thread\")\n"
              "entry.execute = full\nfrom tiledsl.commands.cli import main\n"
              f"sys.exit(main(['run', {os.path.abspath(programs)!r}, '--n', '64', '--json']))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=50, cwd=tmp_path,
                         env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
    assert out.returncode == 1 and "internal error" not in out.stderr, out.stderr
    assert out.stderr.startswith("tiledsl: error: rank 0: cannot start a thread"), out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["ok"] is False


@pytest.mark.timeout(60)
def test_openblas_stopping_itself_with_sigint_is_a_thread_that_could_not_start_not_a_ctrl_c(tmp_path):
    """OpenBLAS raises SIGINT where pthread_create fails (ulimit -v): every rank said 'stopped by SIGINT',
    exit 130, where nobody pressed Ctrl-C."""
    import os

    programs = os.path.join(os.path.dirname(__file__), "..", "..", "programs", "cholesky.tile")
    script = ("import signal, sys, threadpoolctl\nfrom tiledsl.runtime import world\n"
              "real = threadpoolctl.threadpool_limits\n"
              "def failing(*args, **kwargs):\n    signal.raise_signal(signal.SIGINT)\n"
              "    return real(*args, **kwargs)\n"
              "threadpoolctl.threadpool_limits = failing\nworld.address_limited = lambda: True\n"
              "from tiledsl.commands.cli import main\n"
              f"sys.exit(main(['run', {os.path.abspath(programs)!r}, '--n', '64']))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=50, cwd=tmp_path,
                         env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
    assert out.returncode == 1 and out.stderr.startswith("tiledsl: error: rank 0: cannot start a thread"), out.stderr


@pytest.mark.timeout(60)
def test_openblas_stopping_itself_with_sigint_as_scipy_loads_is_a_thread_that_could_not_start():
    """Under `ulimit -v 250000` the SIGINT came as SciPy's BLAS loaded, before any run: 'stopped by SIGINT', exit
    130 (a KeyboardInterrupt traceback from Python)."""
    script = ("import signal\nfrom tiledsl.runtime import blas, world\n"
              "blas._ROUTINES = [lambda: signal.raise_signal(signal.SIGINT)]\n"
              "blas.address_limited = world.address_limited = lambda: True\n"
              "try:\n    blas.load()\nexcept RuntimeError as error:\n    print(error)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=50)
    assert out.stdout == "can't start new thread (OpenBLAS's threads, which it then stops with SIGINT)\n", out.stderr


@pytest.mark.timeout(60)
def test_libraries_that_never_finish_loading_under_an_address_space_limit_end_the_process(tmp_path):
    """Under `ulimit -v 250000` OpenBLAS, as SciPy loaded it, waited for ever for buffers the limit did not
    leave it, in C holding the GIL: `timeout 60 tiledsl run ...` (SIGTERM) did not end it either."""
    import os
    import resource
    import time

    limit = 64 * 2 ** 30  # any limit arms the watch; this one leaves the test room
    script = ("import ctypes\nfrom tiledsl.runtime import world\nworld.LIBRARY_LOAD_SECONDS = 1\n"
              "with world.libraries_loading():\n    ctypes.PyDLL(None).sleep(40)\n")
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=50, cwd=tmp_path,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY)),
                         env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
    assert out.returncode == -9 and time.monotonic() - start < 30, out.stderr
    assert out.stderr == (f"tiledsl: error: rank 0: loading numpy's and SciPy's BLAS has not finished within 1 s: "
                          f"under the address-space limit (ulimit -v {limit // 1024}, in KiB) OpenBLAS waits for "
                          f"ever for buffers the limit does not leave it; raise the limit\n")


@pytest.mark.timeout(60)
def test_a_loop_nest_failure_gives_the_values_its_statement_names_floats_and_characters_too(tmp_path):
    """`with q = 3, i = 0` of `inc(Y[i, 0], v)`: an integer parameter the call does not name, and not the
    float v whose value made the count negative."""
    import tiledsl

    (tmp_path / "uk.py").write_text("def inc(Y, v, side):\n    Y += v\n")
    (tmp_path / "u.tile").write_text('use "uk.py"\nkernel inc(inout Y, float v, char side in "LR") flops v * Y.m\n'
                                     'program u {\n  param v = 0.25\n  param q = 3\n  param side = "L"\n'
                                     "  matrix Y[n, n] = random general\n"
                                     "  for i in 0 .. Y.mt { inc(Y[i, 0], v, side) }\n}\n")
    with pytest.raises(tiledsl.TiledslError) as failed:
        tiledsl.load(tmp_path / "u.tile").run(n=12, tiles={"nb": 5}, params={"v": -1.0})
    assert str(failed.value).endswith('(in `inc(Y[i, 0], v, side)`, with side = "L", v = -1.0, i = 0)'), failed.value
