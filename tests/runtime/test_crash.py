"""A kernel that ends its process (runtime/crash.py): os._exit fails its task like any
failure; a segmentation fault leaves the kernel's Python stack on stderr."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tiledsl.runtime import Options, execute
from tiledsl.runtime.engine import TaskFailure

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = "tests/runtime/programs/exits.tile"


@pytest.mark.timeout(60)
def test_os_exit_in_a_kernel_fails_its_task_naming_it(compiled):
    with pytest.raises(TaskFailure) as failure:
        execute(compiled(PROGRAM), Options(n=16, sets={"how": 1}, workers=1))
    assert str(failure.value) == ("kernel leave failed on A[1, 1] (leave(A[1, 1])): called os._exit(3) "
                                  "(a kernel must return, or raise an Exception; it may not end the run)")
    assert failure.value.line == 11 and failure.value.rank == 0


@pytest.mark.timeout(60)
def test_os_exit_outside_a_kernel_still_ends_the_process(monkeypatch):
    from tiledsl.runtime import crash

    monkeypatch.setattr(os, "_exit", os._exit)  # put back after the test
    crash.guard_exit()  # as during a run
    pid = os.fork()
    if pid == 0:
        os._exit(7)  # the test's own thread runs no kernel
    assert os.waitpid(pid, 0)[1] == 7 << 8


@pytest.mark.timeout(60)
def test_a_run_gives_back_the_os_exit_it_found(compiled, monkeypatch):
    """The guard stayed os._exit for the rest of the process, an application's own os._exit too."""
    def own(status):
        raise AssertionError("not called")

    monkeypatch.setattr(os, "_exit", own)
    execute(compiled(PROGRAM), Options(n=16, workers=1))
    assert os._exit is own


def cli(*args):
    return subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", PROGRAM, "--n", "16", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=100)


@pytest.mark.timeout(120)
def test_os_exit_in_a_kernel_is_a_program_error_not_an_internal_one():
    out = cli("--set", "how=1")
    assert out.returncode == 1, out.stderr
    assert out.stderr.strip() == ("tiledsl: error: rank 0 (exits.tile:11): kernel leave failed on A[1, 1] "
                                  "(leave(A[1, 1])): called os._exit(3) (a kernel must return, or raise an "
                                  "Exception; it may not end the run)")


@pytest.mark.timeout(120)
def test_a_segmentation_fault_in_a_kernel_shows_the_kernel_on_stderr():
    """One rank: faulthandler's stacks of every thread, exit -11; the run's process watched from the command's
    (onerank), it is said as --np says a rank's crash."""
    out = cli("--set", "how=2")
    assert out.returncode == 1, out.stderr
    assert out.stderr.startswith("tiledsl: error: rank 0 (exits.tile:12) crashed (Segmentation fault) in kernel "
                                 "code crash (exits_kernels.py:11), in `crash(A[1, 1])`\n"), out.stderr
    assert 'exits_kernels.py", line 11 in crash' in out.stderr and "Fatal Python error" not in out.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how, said", [
    ("4", "tiledsl: error: rank 0 ended with exit status 0 without finishing the run: code the run called ended "
          "the process (posix._exit, a C library's exit() or a Fortran STOP, MPI_Abort)"),
    ("5", "tiledsl: error: rank 0 (exits.tile:15): kernel posix_exit failed on A[1, 1] (posix_exit(A[1, 1])): "
          "called os._exit(0) (a kernel must return, or raise an Exception; it may not end the run)"),
    # on two ranks: both exit(0), said as such, or one does first and the launcher kills the other (exit status 9,
    # said with which ended first, or that it cannot be told): each way names a C library's exit()
    ("4 --np 2", r"tiledsl: error: ranks? (0 and 1|\d) ended (with exit status 0 )?without finishing the run.*"
                 r"a C library's exit\(\)")])
def test_a_kernel_ending_the_process_with_status_0_is_no_success(how, said):
    """Tester w: a C library's exit(0) (a Fortran STOP) or posix._exit(0) in a kernel ended a one-rank run with
    exit 0 and not a word, --json printing nothing: a false success. (On two ranks the cause was not said.)"""
    how, *ranks = how.split()
    out = cli("--set", f"how={how}", "--json", *ranks)
    assert out.returncode == 1 and (re.match(said, out.stderr) if ranks else out.stderr.strip() == said), out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["ok"] is False


@pytest.mark.timeout(180)
def test_a_segmentation_fault_on_one_of_several_ranks_names_the_rank_and_shows_its_stack():
    out = cli("--set", "how=2", "--np", "2", "--json")
    assert out.returncode == 1, out.stderr
    crashed = [line for line in out.stderr.splitlines() if "crashed" in line]
    # the .tile call too, from the frame the kernel is called from (a crash runs no Python code)
    assert len(crashed) == 1 and crashed[0].startswith("tiledsl: error: rank ") \
        and crashed[0].endswith(" (exits.tile:12) crashed (Segmentation fault) in kernel code crash "
                                "(exits_kernels.py:11), in `crash(A[1, 1])`"), out.stderr
    assert 'exits_kernels.py", line 11 in crash' in out.stderr and "without a word" not in out.stderr
    assert "Extension modules" not in out.stderr
    # --json's stdout says so too (there was only the launcher's banner, which is left out now)
    said = json.loads(out.stdout.strip().splitlines()[-1])
    errors = [line.removeprefix("tiledsl: error: ") for line in out.stderr.splitlines()
              if line.startswith("tiledsl: error: ")]
    assert said == {"program": "exits", "n": 16, "np": 2, "ok": False, "passed": None,
                    "error": "; ".join(errors)}, out.stdout


@pytest.mark.timeout(180)
def test_a_signal_to_a_rank_s_process_names_the_kernel_another_thread_ran():
    """A kernel's os.kill(os.getpid(), SIGSEGV) reached the main thread: the rank 'crashed in
    tiledsl's runtime, at _wait_until_idle', with neither kernel nor call. (The kernel's own thread
    may take it, at the kill or already asleep after it: then it names the kernel's line.)"""
    out = cli("--set", "how=3", "--np", "2")
    assert out.returncode == 1, out.stderr
    crashed = [line for line in out.stderr.splitlines() if "crashed" in line]
    assert len(crashed) == 1 and re.fullmatch(
        r"tiledsl: error: rank \d \(exits.tile:13\) crashed \(Segmentation fault\) (in tiledsl's runtime, at \w+ "
        r"\([a-z_]+\.py:\d+\), a signal to the whole process while kernel code signal \(exits_kernels.py:1[78]\) ran"
        r"|in kernel code signal \(exits_kernels.py:1[78]\)), in `signal\(A\[1, 1\]\)`", crashed[0]), out.stderr
    assert re.search(r'exits_kernels.py", line 1[78] in signal', out.stderr)  # at the kill, or asleep after


def test_a_crash_report_names_the_function_the_runtime_called():
    from tiledsl.commands.jobs import _crash_parts
    from tiledsl.runtime import engine

    stack = (f'Fatal Python error: Aborted\n\nStack (most recent call first):\n'
             f'  File "/usr/lib/python3/ctypes/__init__.py", line 519 in string_at\n'
             f'  File "/home/u/k.py", line 3 in scale\n'
             f'  File "{engine.__file__}", line 498 in _call_kernel\n\n'
             f'Extension modules: numpy._core._multiarray_umath (total: 1)\n')
    what, site, frames = _crash_parts(stack)
    assert (what, site, len(frames)) == ("Aborted", " in kernel code scale (k.py:3)", 3)
    inside = _crash_parts(f'Fatal Python error: Segmentation fault\n\n'
                          f'  File "{engine.__file__}", line 10 in _worker\n')
    assert inside[1] == " in tiledsl's runtime, at _worker (engine.py:10)"
    assert _crash_parts("Fatal Python error: Segmentation fault\n")[1:] == ("", ())
    from tiledsl.runtime import userkernels  # a crash as the kernel module loads: not "kernel code exec_module"
    loading = _crash_parts(f'Fatal Python error: Segmentation fault\n\n'
                           f'  File "/usr/lib/python3/ctypes/__init__.py", line 519 in string_at\n'
                           f'  File "/home/u/k.py", line 3 in <module>\n'
                           f'  File "<frozen importlib._bootstrap>", line 241 in _call_with_frames_removed\n'
                           f'  File "<frozen importlib._bootstrap_external>", line 940 in exec_module\n'
                           f'  File "{userkernels.__file__}", line 184 in _import\n')
    assert loading[1] == " while loading k.py (k.py:3)"
    # every thread's stack: the crashing thread's own kernel, not another thread's
    worker = (f'  File "/home/u/k.py", line 7 in {{name}}\n'
              f'  File "{engine.__file__}", line 498 in _call_kernel\n\n')
    waiting = f'  File "{engine.__file__}", line 396 in _wait_until_idle\n\n'
    both = _crash_parts(f'Fatal Python error: Segmentation fault\n\nThread 0x00007f01 (most recent call first):\n'
                        f'{worker.format(name="other")}Current thread 0x00007f02 (most recent call first):\n'
                        f'{worker.format(name="mine")}Thread 0x00007f03 (most recent call first):\n{waiting}')
    assert both[1] == " in kernel code mine (k.py:7)"
    # a signal sent to the process, taken by the waiting main thread while two kernels ran
    signalled = _crash_parts(f'Fatal Python error: Segmentation fault\n\nThread 0x00007f01 (most recent call first):\n'
                             f'{worker.format(name="first")}Thread 0x00007f02 (most recent call first):\n'
                             f'{worker.format(name="second")}Current thread 0x00007f03 (most recent call first):\n'
                             f'{waiting}')
    assert signalled[1] == (" in tiledsl's runtime, at _wait_until_idle (engine.py:396), a signal to the whole "
                            "process while kernel code first (k.py:7) ran (and 1 other task(s))")
    assert signalled[2][0].endswith("line 7 in first")


# ---------------------------------------------------------------- the user's code outside a task
OUTSIDE = {  # how: (kernel module, the error line)
    "loading": ("import os\nos._exit(0)\n\ndef mark(A):\n    A *= 2\n\ndef mine(before, after):\n    return 0.0\n",
                "tiledsl: error: rank #: kernel module outside_kernels.py:2: called os._exit(0) while being loaded"),
    "checking": ("import os\n\ndef mark(A):\n    A *= 2\n\ndef mine(before, after):\n    os._exit(0)\n",
                 "tiledsl: error: check mine (outside.tile:4): mine raised os._exit(0) at outside_kernels.py:7"),
    "a kernel's thread": ("import os, threading, time\n\ndef mark(A):\n    threading.Thread(target=lambda: "
                          "os._exit(0)).start()\n    time.sleep(2)\n    A *= 2\n\n"
                          "def mine(before, after):\n    return 0.0\n",
                          "tiledsl: error: rank #: os._exit(0) called at outside_kernels.py:4, outside any task of "
                          "the run (in Thread-1 (<lambda>)): the run did not finish"),
    # the run ends while that thread's rank waits for the launcher to forward its message: no success
    "a kernel's thread as the run ends": (
        "import os, threading, time\n\ndef mark(A):\n    called = threading.Event()\n"
        "    threading.Thread(target=lambda: (called.set(), os._exit(0))).start()\n    called.wait()\n"
        "    time.sleep(0.02)\n    A *= 2\n\ndef mine(before, after):\n    return 0.0\n",
        "tiledsl: error: rank #: os._exit(0) called at outside_kernels.py:5, outside any task of "
        "the run (in Thread-1 (<lambda>)): the run did not finish"),
    # several at once: the one that says why is not cut short by another ending the process
    "threads of a kernel at once": (
        "import os, threading\n\ndef mark(A):\n    go = threading.Event()\n    for _ in range(8):\n"
        "        threading.Thread(target=lambda: (go.wait(), os._exit(0)), name='helper').start()\n"
        "    go.set()\n    A *= 2\n\ndef mine(before, after):\n    return 0.0\n",
        "tiledsl: error: rank #: os._exit(0) called at outside_kernels.py:6, outside any task of "
        "the run (in helper): the run did not finish"),
}


#: the rank counts each case of OUTSIDE runs on, rotated: a kernel's thread on both; every rank loading the
#: module at once, and the rank waiting for the launcher as the run ends, on 2; the others on 1
OUTSIDE_RANKS = {"loading": [2], "checking": [1], "a kernel's thread": [1, 2],
                 "a kernel's thread as the run ends": [2], "threads of a kernel at once": [1]}


@pytest.mark.timeout(200)
@pytest.mark.parametrize("where, ranks", [(where, ranks) for where in OUTSIDE for ranks in OUTSIDE_RANKS[where]])
def test_os_exit_0_from_the_users_code_outside_a_task_fails_the_run(tmp_path, where, ranks):
    """It ended the run at once with status 0, printing nothing: a false success. Each case runs on the
    rank counts OUTSIDE_RANKS gives it: 1 and 2 ranks both stay covered, not every case on both."""
    module, said = OUTSIDE[where]
    (tmp_path / "outside_kernels.py").write_text(module)
    (tmp_path / "outside.tile").write_text('use "outside_kernels.py"\nkernel mark(inout A)\nprogram outside {\n'
                                           "  check mine(A)\n  tiling uniform(nb = 8)\n  matrix A[n, n] = zeros\n"
                                           "  mark(A[0, 0])\n}\n")
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "outside.tile", "--n", "16", "--check",
                          "--np", str(ranks), "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert out.returncode == 1, out.stderr
    assert said in [re.sub(r"rank \d", "rank #", line) for line in out.stderr.splitlines()], out.stderr  # either rank
    assert "without a word" not in out.stderr and "Traceback" not in out.stderr, out.stderr
    # the failure object, whichever thread ended the rank (or a summary, the run having ended)
    failure = json.loads(out.stdout.splitlines()[-1])
    reason = failure["error"] if "error" in failure else failure["errors"][0]
    assert failure["ok"] is False and f"tiledsl: error: {reason}" in out.stderr.splitlines()


@pytest.mark.timeout(200)
@pytest.mark.parametrize("ranks", [1, 2])
def test_a_thread_a_kernel_left_running_does_not_keep_the_process_alive(tmp_path, ranks):
    """The summary printed, then the process waited for the thread for ever."""
    (tmp_path / "lingering_kernels.py").write_text(
        "import threading, time\n\ndef mark(A):\n    for _ in range(2):\n"
        "        threading.Thread(target=lambda: time.sleep(3600), name='forever', daemon=False).start()\n"
        "    A *= 2\n")
    (tmp_path / "lingering.tile").write_text('use "lingering_kernels.py"\nkernel mark(inout A)\nprogram lingering {\n'
                                             "  tiling uniform(nb = 8)\n  matrix A[n, n] = zeros\n  mark(A[0, 0])\n}\n")
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "lingering.tile", "--n", "16",
                          "--np", str(ranks), "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith("{") and '"ok": true' in out.stdout
    assert ("tiledsl: note: rank 0: 2 thread(s) started during the run still running (forever ×2): the process ends "
            "without waiting for them") in out.stderr


@pytest.mark.timeout(120)
def test_an_application_calling_the_api_keeps_its_threads_own_os_exit(tmp_path):
    """Only tiledsl's own processes (the command line, a driver) turn a stray os._exit into a failure:
    an application's thread may end its process as it means to, a run in progress or not."""
    (tmp_path / "k.py").write_text("import os, threading, time\n\ndef mark(A):\n    threading.Thread(target=lambda: "
                                   "os._exit(5)).start()\n    time.sleep(2)\n")
    (tmp_path / "p.tile").write_text('use "k.py"\nkernel mark(inout A)\nprogram p {\n  tiling uniform(nb = 8)\n'
                                     "  matrix A[n, n] = zeros\n  mark(A[0, 0])\n}\n")
    code = f"import tiledsl\ntiledsl.load({str(tmp_path / 'p.tile')!r}).run(n=8)\nprint('after the run')\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100)
    assert (out.returncode, out.stdout, out.stderr) == (5, "", "")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ranks", ["1", "2"])
def test_a_segmentation_fault_in_a_user_check_shows_the_check(tmp_path, ranks):
    """A user check that crashed said nothing: on one rank only the shell's 'Segmentation fault', on two
    'rank 0 ended without finishing the run and without a word'."""
    (tmp_path / "k.py").write_text("import ctypes\n\n\ndef mycheck(before, after):\n    ctypes.string_at(0)\n"
                                   "    return 0.0\n")
    (tmp_path / "ck.tile").write_text('use "k.py"\nprogram p {\n  tiling uniform(nb = 64)\n'
                                      "  matrix A[n, n] = random spd\n  check mycheck(A)\n"
                                      "  for k in 0 .. A.nt { potrf(A[k, k]) }\n}\n")
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "ck.tile", "--n", "128", "--check",
                          "--np", ranks], cwd=tmp_path, capture_output=True, text=True, timeout=100,
                         env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache")))
    assert out.returncode == 1 and ("tiledsl: error: rank 0 crashed (Segmentation fault) in kernel code mycheck "
                                    "(k.py:5)") in out.stderr, out.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ranks", ["1", "2"])
def test_a_thread_a_kernel_started_that_raises_fails_the_run(tmp_path, ranks):
    """Tester w: Python printed the thread's traceback, and the run went on to exit 0, the thread's work
    missing from its results."""
    (tmp_path / "k.py").write_text("import threading\n\n\ndef boom():\n    raise RuntimeError('thread boom')\n\n\n"
                                   "def k(A):\n    helper = threading.Thread(target=boom, name='helper')\n"
                                   "    helper.start()\n    helper.join()\n    A += 1\n")
    (tmp_path / "p.tile").write_text('use "k.py"\nkernel k(inout A)\nprogram p {\n  matrix A[n, n] = zeros\n'
                                     "  k(A[0, 0])\n}\n")
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "p.tile", "--n", "10", "--np", ranks],
                         cwd=tmp_path, capture_output=True, text=True, timeout=100)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "tiledsl: error: rank 0: RuntimeError: thread boom, raised at k.py:5 in helper, a thread the run's code " \
           "started: the run did not finish (its work may be missing from the results)" in out.stderr, out.stderr
