"""A kernel that ends its process: named, like any failed task, where that can be done.

* ``os._exit(N)`` in a kernel would end the rank at once with status N (0 a false
  success, 3 read as an internal error of tiledsl) and, on several ranks, leave the
  launcher to kill the others without a word. While a task runs, :func:`guard_exit`'s
  ``os._exit`` raises :class:`KernelExit` in the kernel's thread instead, so the task
  fails as one raising ``SystemExit`` does: kernel, tiles, ``.tile`` line, every rank
  stopped; so it does in the user's code run outside a task (:func:`user_code`: the
  kernel module loading, a user check), whose callers say so. Called by the user's code
  anywhere else while a run is in progress (:func:`run_in_progress`: a thread a kernel
  started) in a process that is tiledsl's own (:func:`claim_process`: the command line, a
  driver; not an application calling the Python API, whose own threads may end it so), it
  ends the rank with status 1 and says where, never 0. Otherwise (the runtime's own calls,
  a process a kernel forks, a process whose run is over) it is the real ``os._exit``.
* A thread the user's code started that raises while a run is in progress (in a process that is
  tiledsl's own) ends the rank the same way, naming the exception and where it rose
  (:func:`_thread_raised`): Python printed its traceback and the run went on to succeed, the
  thread's share of the work missing.
* A crash (a segmentation fault in a kernel's C code) cannot run Python code:
  :func:`fatal_signals_traced` turns on :mod:`faulthandler` for the run, which
  writes every thread's Python stack (the kernels' functions, their files and lines;
  the crashing thread's is headed "Current thread", which a signal sent to the whole
  process makes a thread of the runtime's while a kernel runs on another) before the
  process dies of the signal as before: to stderr, or under
  ``tiledsl run --np`` to the file ``crash.RANK`` of the job's folder, which
  ``tiledsl run`` then prints as rank RANK's crash (the other ranks' stderr does
  not interleave with it, and the rank is named). That stack is all a crash leaves, so
  a kernel is called from a frame of its own whose file name names the ``.tile`` call
  (:func:`call_runner`), which the report quotes.
"""
from __future__ import annotations

import contextlib
import faulthandler
import io
import os
import sys
import threading
import traceback
import types

try:
    import posix as _posix
except ImportError:  # not a POSIX system
    _posix = None

from .errors import is_users
from .world import JOB_DIR_VARIABLE, launcher_rank, say_ending

#: the task the calling thread runs (``task`` set by the engine around a kernel call)
in_kernel = threading.local()
_real_exit = os._exit  # what the guard calls: the os._exit it took the place of (guard_exit)
_guard_pid: int | None = None
_runs = 0  # runs in progress in this process (the Python API may run several at once)
_runs_lock = threading.Lock()
_claimed = False  # the process is tiledsl's (the command line, a driver): no other code may end it
_traced_to = None  # the file faulthandler writes a crash's stack to, during a run (fatal_signals_traced)
_backstop_lock = threading.Lock()


#: the file name of a kernel call's own frame (:func:`call_runner`), as faulthandler writes it
CALL_FRAME = "<tiledsl call at line {line}: {text}>"


def call_runner(line: int, text: str):
    """``run(kernel, arguments, extra)``, which calls ``kernel(*arguments, **extra)`` from a frame
    whose file name (:data:`CALL_FRAME`) names the ``.tile`` call: a crash's stack then says which
    call crashed, at no cost to a task but that frame. The runtime's own calls (line 0: a check's
    kernels, transfers) are called as they are."""
    if line <= 0:
        return _run_kernel
    code = _run_kernel.__code__.replace(co_filename=CALL_FRAME.format(line=line, text=text))
    return types.FunctionType(code, {}, "run")


def _run_kernel(kernel, arguments, extra):
    return kernel(*arguments, **extra)


class KernelExit(BaseException):
    """``os._exit`` called by a kernel (a BaseException: the kernel is to end, as it asked)."""


class RunStop(BaseException):
    """An end of the run that is tiledsl's own, not the user's code's (a stopping signal, the
    watchdog), though it may be raised inside that code: what catches the user's code's every error
    (``except BaseException``: a check raising GeneratorExit is its mistake) lets it through."""


#: what the user's code may raise that is not its mistake: Ctrl-C, and tiledsl's own stops
NOT_USERS = (KeyboardInterrupt, RunStop)


def guard_exit() -> None:
    """Install the ``os._exit`` of the module docstring (idempotent), until the last run of the process
    ends (:func:`run_in_progress`)."""
    global _guard_pid, _real_exit
    _guard_pid = os.getpid()
    if os._exit is not _exit:
        _real_exit, os._exit = os._exit, _exit
    if _posix is not None and _posix._exit is not _exit:  # os._exit under its own module's name
        _posix._exit = _exit


def _unguard_exit() -> None:
    """Give back the ``os._exit`` :func:`guard_exit` took the place of: an application calling the Python
    API keeps its own once its runs are over (unless it has put another in place since)."""
    if os._exit is _exit:
        os._exit = _real_exit
    if _posix is not None and _posix._exit is _exit:
        _posix._exit = _real_exit


def claim_process() -> None:
    """This process is tiledsl's own (a command, a driver): see the module docstring."""
    global _claimed
    _claimed = True


@contextlib.contextmanager
def run_in_progress():
    """Within the block a run is in progress: the user's ``os._exit`` fails it (module docstring)."""
    global _runs
    with _runs_lock:
        guard_exit()
        if not _runs and _claimed and threading.excepthook is not _thread_raised:
            _hooks["threads"], threading.excepthook = threading.excepthook, _thread_raised
        _runs += 1
    try:
        yield
    finally:
        with _runs_lock:
            _runs -= 1
            if not _runs:
                _unguard_exit()
                if threading.excepthook is _thread_raised:
                    threading.excepthook = _hooks.pop("threads")


_hooks: dict = {}  # the threading.excepthook _thread_raised took the place of, while a run is in progress


def _thread_raised(args) -> None:
    """A thread the user's code started (a kernel's helper) that raised while the run goes on: said in one
    line, where the user's code raised it, and the run fails (the work that thread did may be missing from
    the results). It printed a traceback, and the run ended with exit 0. Other threads: as Python says them."""
    frames = traceback.extract_tb(args.exc_traceback) if args.exc_traceback is not None else []
    users = [frame for frame in frames if is_users(frame.filename)]
    if not users or issubclass(args.exc_type, SystemExit) or os.getpid() != _guard_pid:
        _hooks.get("threads", threading.__excepthook__)(args)
        return
    where = f"{os.path.basename(users[-1].filename)}:{users[-1].lineno}"
    name = args.thread.name if args.thread is not None else "a thread"
    said = f": {args.exc_value}" if str(args.exc_value) else ""
    say_ending(f"rank {launcher_rank()}: {args.exc_type.__name__}{said}, raised at {where} in {name}, a thread "
               f"the run's code started: the run did not finish (its work may be missing from the results)")


@contextlib.contextmanager
def user_code():
    """Around the user's code run outside a task: ``os._exit`` there raises :class:`KernelExit`."""
    outer = getattr(in_kernel, "user_code", False)
    in_kernel.user_code = True
    try:
        yield
    finally:
        in_kernel.user_code = outer


def _exit(status: int) -> None:
    # a forked child's one thread may be a worker's copy, flag and all: it must really exit
    if os.getpid() == _guard_pid:
        if getattr(in_kernel, "task", None) is not None or getattr(in_kernel, "user_code", False):
            raise KernelExit(f"called os._exit({status})")
        caller = sys._getframe(1)
        if _runs and _claimed and is_users(caller.f_code.co_filename):
            _stray_exit(status, caller)
    _real_exit(status)


def _stray_exit(status: int, caller) -> None:
    """The user's ``os._exit`` outside any task of a run in progress: said, and never a success."""
    where = f"{os.path.basename(caller.f_code.co_filename)}:{caller.f_lineno}"
    say_ending(f"rank {launcher_rank()}: os._exit({status}) called at {where}, outside any task of the run (in "
               f"{threading.current_thread().name}): the run did not finish")


@contextlib.contextmanager
def fatal_signals_traced():
    """Within the block, a fatal signal writes every thread's Python stack to stderr (unless
    faulthandler is on already, as under pytest; then it is left as it is)."""
    if faulthandler.is_enabled():
        yield
        return
    global _traced_to
    with _crash_file() as target:
        try:
            faulthandler.enable(file=target, all_threads=True)
        except (AttributeError, ValueError, io.UnsupportedOperation, OSError):  # a stderr without a file descriptor
            yield
            return
        _traced_to = target
        try:
            yield
        finally:
            with _backstop_lock:  # the timer never outlives the file it writes to
                _traced_to = None
                faulthandler.cancel_dump_traceback_later()
            faulthandler.disable()


def frozen_backstop(seconds: float | None) -> None:
    """Arm again the last resort against an interpreter that stopped running Python code (a kernel
    in C code that never lets go of the GIL, as a deadlocked extension: then no thread of the run's,
    the watchdog's or a signal handler, ever runs): if this is not called again within ``seconds``,
    faulthandler's own thread writes every thread's stack where a crash's goes and ends the process
    with status 1 (the launcher ends the other ranks). Only in tiledsl's own process, within
    :func:`fatal_signals_traced`; None disarms it."""
    with _backstop_lock:
        if seconds is None or _traced_to is None or not _claimed:
            faulthandler.cancel_dump_traceback_later()
            return
        try:
            faulthandler.dump_traceback_later(seconds, exit=True, file=_traced_to)
        except RuntimeError:  # its timer thread could not start (ulimit -v): the watchdog's own check goes
            pass  # on (dying, it reported no stall: the run hung), and the next tick arms it again


@contextlib.contextmanager
def _crash_file():
    """Where a crash's stack goes: ``crash.RANK`` in the job's folder under ``tiledsl run --np``
    (which reports it), else stderr."""
    folder = os.environ.get(JOB_DIR_VARIABLE)
    if not folder:
        yield sys.stderr
        return
    try:
        target = open(os.path.join(folder, f"crash.{launcher_rank()}"), "w", encoding="utf-8")
    except OSError:
        yield sys.stderr
        return
    with target:
        yield target
