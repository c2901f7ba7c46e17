"""The job this process belongs to: one rank alone, or one rank of an MPI job.

MPI is initialised only when a launcher started the process (mpiexec, srun,
mpirun set these variables), so a plain ``python driver.py`` never pays for it.
The grid defaults to the squarest one for the number of ranks; workers per rank
default to the cores of the node shared by its ranks, less one for the
communication thread when there are several ranks (DESIGN §4: cores = total −
GPUs − communication threads in use).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import select
import signal
import socket
import sys
import threading
import time

# kept there: a driver whose runtime failed to import needs them too
from ..drivercontract import launcher_rank, launcher_size
from . import threadstart
from .blaspool import restart_after_fork
from .distribution import parse_grid, squarest_grid
from .leftovers import runtime_children

LAUNCHER_VARIABLES = ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "SLURM_STEP_NUM_TASKS")
JOB_DIR_VARIABLE = "TILEDSL_JOB_DIR"  # set by ``tiledsl run --np``: where ranks record their completion
JOB_PID_VARIABLE = "TILEDSL_JOB_PID"  # set by ``tiledsl run --np``: its own pid, which no rank outlives
JOB_HOST_VARIABLE = "TILEDSL_JOB_HOST"  # set by ``tiledsl run --np``: the host where that pid is
JOB_RANKS_VARIABLE = "TILEDSL_JOB_RANKS"  # set by ``tiledsl run --np P``: P, which the launcher must start
#: set by ``tiledsl run --np`` where it passes the job's stdout on itself: rank 0 then writes the lines it says
#: on stderr after its summary to stdout, behind :data:`STDERR_MARK`, and the launcher sends them back to
#: stderr: the job's launcher passes a rank's stdout and stderr on apart, and the error that follows the
#: summary came before it
STDERR_MARK_VARIABLE = "TILEDSL_STDERR_MARK"
STDERR_MARK = "\x1etiledsl-stderr\x1f"
UCX_DEBUG_SIGNAL_VARIABLE = "UCX_DEBUG_SIGNO"
LOCAL_SIZE_VARIABLES = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE")
#: the signals that stop a rank (Ctrl-C, a scheduler's SIGTERM, a hang-up), held back where stopping is no option
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class UsageError(Exception):
    """A bad option or size: reported in one line, exit status 2."""


def launched_by_mpi() -> bool:
    return any(name in os.environ for name in LAUNCHER_VARIABLES)


class RankError(Exception):
    """A failure of the user's program on this rank outside any task (a kernel module that
    cannot be loaded, an input file that changed): reported with the rank, exit status 1,
    and the job aborted, since the other ranks may not share it."""


def environment_switch(variable: str) -> bool:
    """Whether the environment variable ``variable`` is on: set to anything but nothing, 0, false,
    no or off (``TILEDSL_DEBUG=0`` showed the tracebacks)."""
    return os.environ.get(variable, "").strip().lower() not in ("", "0", "false", "no", "off")


#: the standard streams the process found closed (:func:`standard_streams_open`)
closed_streams: set = set()


def standard_streams_open() -> None:
    """A closed stdout or stderr (``2>&-``: Python sets it to None) becomes the null device, its
    descriptor too (processes started later inherit it), so that what would be written there is
    dropped rather than failing the run (a command whose only product goes to stdout refuses it:
    :data:`closed_streams`); an open one whose encoding lacks a character printed (``×`` on an
    ASCII terminal, a C locale) shows it escaped rather than failing."""
    for name, descriptor in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        if stream is not None:
            if hasattr(stream, "reconfigure") and getattr(stream, "errors", None) in ("strict", "surrogateescape"):
                stream.reconfigure(errors="backslashreplace")
            continue
        closed_streams.add(name)
        try:
            os.fstat(descriptor)
        except OSError:  # closed: the null device takes its place
            null = os.open(os.devnull, os.O_RDWR)
            if null != descriptor:
                os.dup2(null, descriptor)
                os.close(null)
            os.set_inheritable(descriptor, True)  # os.open's are not: a launcher started later needs it
            setattr(sys, name, open(descriptor, "w", closefd=False, errors="backslashreplace"))
        else:  # another file took the number: leave it be
            setattr(sys, name, open(os.devnull, "w", errors="backslashreplace"))


class LineTracking:
    """A text stream (stdout) that knows whether what was written last ends mid-line (a kernel's
    ``print(..., end="")``, a result cut by a stop): what must begin a line of its own (the summary,
    ``--json``'s object, which a script reads as stdout's last line) then begins one (:func:`end_open_line`)."""

    def __init__(self, stream):
        self._stream = stream
        self.line_open = False

    def write(self, text: str) -> int:
        if text:  # before the write: a stop lands as it returns, before print's own end of line
            self.line_open = not text.endswith("\n")
        return self._stream.write(text)

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def track_stdout_lines() -> None:
    """Make ``sys.stdout`` a :class:`LineTracking` stream, unless it is one already."""
    if not isinstance(sys.stdout, LineTracking):
        sys.stdout = LineTracking(sys.stdout)


def end_open_line() -> None:
    """End the line a kernel's output left open on stdout, and flush what the kernels wrote there: the
    run's own stream (a descriptor of its own) writes next, and must begin a line."""
    with contextlib.suppress(OSError, ValueError):  # a reader gone, a stream closed: the run says it itself
        if getattr(sys.stdout, "line_open", False):
            sys.stdout.write("\n")
        sys.stdout.flush()


def unraisable_in_one_line() -> None:
    """An exception Python can only ignore (raised in a ``__del__``; most often as the process ends,
    when a kernel module's objects are collected in no set order: a multiprocessing pool left open,
    collected after its own pipes) is said as one warning line naming where it was raised, rather than
    as a traceback: the run's result stands."""
    sys.unraisablehook = _say_unraisable


def _say_unraisable(unraisable, _rank=launcher_rank(), _sys=sys) -> None:
    # bound at definition: as the process ends, this module's names may be gone already
    try:
        trace = unraisable.exc_traceback  # its first frame: the line of the __del__ that raised
        where = f" ({trace.tb_frame.f_code.co_filename}:{trace.tb_lineno})" if trace is not None else ""
        owner = getattr(unraisable.object, "__qualname__", None) or type(unraisable.object).__name__
        _sys.stderr.write(f"tiledsl: warning: rank {_rank}: an error was ignored in {owner}{where}: "
                          f"{unraisable.exc_type.__name__}: {unraisable.exc_value}\n")
        _sys.stderr.flush()
    except Exception:  # noqa: BLE001 - a stream closed as the process ends: Python's own report then
        _sys.__unraisablehook__(unraisable)


def check_working_directory() -> None:
    """A UsageError when the current directory is gone (removed while a shell stood in it):
    relative paths, the kernel modules' search and the job's files all start from it."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise UsageError("the current directory no longer exists (it was removed): "
                         "cd to another one and run again") from None


def record_start() -> None:
    """Tell ``tiledsl run --np`` that this rank started, and its pid (a launcher that fails starts
    none; a SIGHUP is sent to the ranks themselves), and end the rank if that process goes, or the
    launcher's process that started it (:func:`_abandoned`)."""
    global _job_guard
    _record("started", str(os.getpid()))
    owner = os.environ.get(JOB_PID_VARIABLE, "")
    if owner.isdigit():
        # a launcher passes the variables on to other nodes (srun, hydra), where that number is no process
        here = os.environ.get(JOB_HOST_VARIABLE, socket.gethostname()) == socket.gethostname()
        parent = os.getppid()
        _job_guard = (int(owner) if here else None, parent, _command_of(parent))
        threadstart.start(threading.Thread(target=_outlive_no_owner, name="job-owner", daemon=True))


#: under ``tiledsl run --np``: (its pid, None where it runs on another node; this rank's parent; its name)
_job_guard: tuple | None = None
#: seconds between a rank's checks that the ``tiledsl run`` of its job, and its parent, are still there
OWNER_CHECK_SECONDS = 1.0
#: the status of a rank whose parent died
ORPHANED = 1


def _outlive_no_owner() -> None:
    """End this rank once its job is gone (:func:`_abandoned`).

    The stopping signals are the main thread's alone: this thread would take one while the main
    thread defers them through MPI's start-up (:func:`_signals_deferred`), and the rank would
    stop there, where it can neither abort the job nor leave it."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)
    while True:
        time.sleep(OWNER_CHECK_SECONDS)
        status = _abandoned(os.getpid())
        if status == ORPHANED:  # not MPI_Abort, which asks the parent gone to end the job: the
            record_completion(status)  # launcher ends the other nodes' ranks once it sees it gone
            os._exit(status)
        if status is not None:
            end_job(status)


def _abandoned(rank: int) -> int | None:
    """The status rank ``rank`` (this process, or the one a start-up watcher watches) is to end
    with, its job gone: 143 once ``tiledsl run`` is gone (killed by SIGKILL, it stops nothing, and
    the launcher it leaves may stop nothing either: MPICH's hydra, its output pipes closed, once
    spun with a rank for half an hour); :data:`ORPHANED` once its parent is (the launcher's process
    on this node, hydra_pmi_proxy: killed, it left every rank running to the end of the job,
    writing outputs), recorded in the job's folder since what the rank prints went through that
    process; None while neither is."""
    owner, parent, name = _job_guard
    # handed to another process; to init before it started, unless `tiledsl run` is init
    if _parent_of(rank) not in (parent, None) or (parent == 1 and owner != 1):
        _record("orphaned", f"{parent} {name}")
        return ORPHANED
    if owner is not None and not process_exists(owner):
        return 128 + signal.SIGTERM
    return None


def _parent_of(pid: int) -> int | None:
    """The parent of process ``pid``, or None if that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def process_exists(pid: int) -> bool:
    """Whether process ``pid`` still lives: not gone, nor a zombie (ended, its parent not having
    reaped it yet: a rank just killed, whose files are abandoned all the same)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone (its number may be another user's now)
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] != b"Z"  # the state follows the (command)
    except FileNotFoundError:  # gone meanwhile, or no /proc (not Linux: alive, as the signal said)
        return not os.path.isdir("/proc")
    except (OSError, IndexError):
        return True


def _command_of(pid: int) -> str:
    """The command name of process ``pid`` (``hydra_pmi_proxy``), or "" if it cannot be read."""
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip()
    except OSError:
        return ""


def record_completion(status: int) -> None:
    """Tell ``tiledsl run --np`` (through ``$TILEDSL_JOB_DIR``) that this rank reached the end
    of its run with exit ``status``: a rank that exits without it did not finish. A rank another
    thread is ending (:func:`end_job`) ends with that thread's status, whatever its run did."""
    _record("done", str(status if _ending is None else _ending))


def _record(what: str, text: str) -> None:
    folder = os.environ.get(JOB_DIR_VARIABLE)
    if folder:
        # the folder is gone when `tiledsl run` has ended (or was killed): nobody reads the marker,
        # and the rank must still end (end_job); written aside, then renamed: a reader (the launcher,
        # another rank's abort racing this one) never finds it empty
        name = f"{what}.{launcher_rank()}"
        partial = os.path.join(folder, f".{name}.{os.getpid()}.partial")  # matched by no reader's glob
        with contextlib.suppress(OSError):
            with open(partial, "w") as marker:
                marker.write(text)
            os.replace(partial, os.path.join(folder, name))


#: the status a thread of this rank is ending the job with (:func:`end_job`), once one is
_ending: int | None = None
_ending_lock = threading.Lock()


#: with ``--json``: (what the failure object says besides its error, the stream it goes to), once
#: the run knows them (:func:`expect_json`); None otherwise
_failure_object: tuple | None = None


def expect_json(known: dict | None, out=None) -> None:
    """The run has ``--json`` (``known``: the failure object's fields besides ``error``, printed to
    ``out``): a thread that ends the rank (:func:`say_ending`) prints it too. None: it has not."""
    global _failure_object
    _failure_object = None if known is None else (known, out)


_ending_note: str | None = None  # said after the error of a thread ending the rank (:func:`note_on_ending`)


def note_on_ending(note: str | None) -> None:
    """A note for :func:`say_ending` to say after its error: the output files a run ended so does not write."""
    global _ending_note
    _ending_note = note


def say_ending(message: str, code: int = 1) -> None:
    """End the rank, and the job, from any thread, saying ``message`` as an error, once (the first
    thread to end the rank says why); with ``--json``, as the failure object on stdout too."""
    if not begin_ending(code):
        _said.wait(SAYING_SECONDS)  # the first thread says why: ending the process now would cut it short
        end_job(code)
    with contextlib.suppress(OSError, ValueError, AttributeError):  # streams a kernel closed: it ends all the same
        note = f"tiledsl: note: {_ending_note}\n" if _ending_note else ""
        sys.__stderr__.write(f"tiledsl: error: {message}\n{note}")
        sys.__stderr__.flush()
    if _failure_object is not None:
        from .reporting import json_text

        known, out = _failure_object
        end_open_line()
        with contextlib.suppress(OSError, ValueError, AttributeError):
            print(json_text({**known, "error": message}), file=out, flush=True)
    _said.set()
    end_job(code)


_said = threading.Event()  # the thread ending the rank said why (say_ending)
SAYING_SECONDS = 2.0


def begin_ending(code: int) -> bool:
    """Whether this thread is the first to end the rank (with ``code``): the one to say why."""
    global _ending
    with _ending_lock:
        first, _ending = _ending is None, code if _ending is None else _ending
    return first


def end_job(code: int) -> None:
    """End this rank, and the whole job if MPI runs, with ``code`` at once, from any thread
    (what it had to say is said): for a rank whose main thread is stuck in the user's code."""
    begin_ending(code)
    record_completion(code)
    abort_started_mpi(code)
    os._exit(code)


def await_ending() -> None:
    """Where a rank's run reaches a result (it ran, its files are written, its summary is due):
    if another thread is ending the job (:func:`end_job`, which gives the launcher a moment to
    forward what was said before it aborts), wait for that end rather than finish as a success."""
    if _ending is not None:
        time.sleep(20 * ABORT_DELAY)  # the abort ends the process well before
        os._exit(_ending)


def abort_started_mpi(code: int) -> None:
    """Abort the MPI job if this rank started MPI but has no communicator yet (a signal or an
    error during start-up): ending without it would wait in MPI's finalize for the others."""
    MPI = sys.modules.get("mpi4py.MPI")
    if MPI is not None and MPI.Is_initialized() and not MPI.Is_finalized():
        abort_job(MPI, code)


#: seconds an aborting rank gives the launcher to forward what it printed: an abort kills the
#: ranks at once, and the launcher's proxy may not have read the last lines from their pipes
ABORT_DELAY = 0.3


def unless_ignored(signum: int, handler):
    """Give ``signum`` to ``handler`` unless this process was started ignoring it (``nohup``'s
    SIGHUP, the SIGINT of a shell script's background job): a job started so is not to be stopped
    by it. The handler it had."""
    current = signal.getsignal(signum)
    return current if current == signal.SIG_IGN else signal.signal(signum, handler)


def abort_job(MPI, code: int) -> None:
    """End every rank of the job with ``code`` (MPI_Abort), after what this rank printed is out.
    A second signal (a Ctrl-C or SIGTERM repeated) changes nothing now: it is ignored, rather
    than unwinding the wait with a traceback."""
    for signum in STOPPING:
        try:
            signal.signal(signum, signal.SIG_IGN)
        except ValueError:  # not the main thread: the signals go to the main thread anyway
            break
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed (by a kernel), or None: the job ends all the same
            pass
    time.sleep(ABORT_DELAY)
    # MPICH's line ("Abort(1) on node 0 ...: application called MPI_Abort ...") would only repeat
    # that this rank ends the job, after the rank said why
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    MPI.COMM_WORLD.Abort(code)


def communicator(on_error=None, limit: float | None = None):
    """This rank's :class:`~tiledsl.runtime.comm.Communicator`, or None outside an MPI job of 2+ ranks.

    MPI's start-up waits for every rank; a rank stopped before it would hold the others
    there for ever, inside MPI where no Python code runs, so a watcher process (forked
    before MPI starts) ends this rank after ``limit`` seconds (None: no limit), saying why.
    """
    if not launched_by_mpi():
        asked = os.environ.get(JOB_RANKS_VARIABLE, "")
        if asked.isdigit() and int(asked) > 1:  # (tester u83c: each ran the whole program, and wrote its outputs)
            raise UsageError(f"the launcher started this process without MPI (none of {', '.join(LAUNCHER_VARIABLES)} "
                             f"set) where --np asked for {asked} ranks: each process would run the whole program "
                             f"alone (choose an MPI launcher with --launcher or TILEDSL_LAUNCHER)")
        return None
    from .comm import Communicator

    # UCX (under MPICH's wheel) takes SIGHUP for its debug signal when MPI loads it, and the
    # rank would no longer stop on a hang-up; 0 keeps SIGHUP the rank's (read as UCX loads)
    os.environ.setdefault(UCX_DEBUG_SIGNAL_VARIABLE, "0")
    _record("joining", "")  # a rank stopped before MPI's start is the one lacking this (_late_at_start_up)
    with _signals_deferred(), _start_up_watch(limit):  # deferred first: the fork runs Python code
        comm = Communicator(on_error=on_error, limit=limit)
    _record("joined", "")  # one that has "joining" and not this died inside MPI's start (jobs._start_note)
    # first: a launcher of another MPI library than mpi4py's took -n, and each process is alone in its world
    stated = launcher_size()
    if stated is not None and stated[1] != comm.size:  # each process alone in its own MPI world
        comm.stop()  # every process says it: each one is alone, rank 0 of its own world
        raise RankError(f"the launcher started {stated[1]} rank(s) ({stated[0]}={stated[1]}) but MPI sees "
                         f"{comm.size} in this job: mpi4py uses another MPI library than the launcher's, and each "
                         f"process would run the whole program alone (build mpi4py against the launcher's MPI: "
                         f"\"The site's MPI\" in docs/cluster.md)")
    asked = os.environ.get(JOB_RANKS_VARIABLE, "")
    if asked.isdigit() and int(asked) != comm.size:  # a launcher that ignores -n: the run would be another one
        comm.stop()
        raise UsageError(f"the launcher started {comm.size} rank(s) where --np asked for {asked}: it must take "
                         f"'-n {asked}' (choose another with --launcher or TILEDSL_LAUNCHER)")
    if comm.size == 1:
        comm.stop()
        return None
    if comm.rank != 0:
        _reading_nothing()
    return comm


def _reading_nothing() -> None:
    """Standard input at its end: a launcher gives rank 0 the job's, and the other ranks one that
    never ends (hydra's), where a kernel's read waited until the watchdog stopped the run."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)


@contextlib.contextmanager
def _signals_deferred():
    """Within the block, SIGINT, SIGTERM and SIGHUP wait: MPI's start-up is no place to stop
    (a rank interrupted there can neither abort the job, MPI not being up, nor leave it, MPI's
    finalize waiting for the others); they arrive once the block is done, where a stop aborts
    the whole job at once."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def address_limited() -> bool:
    """Whether this process's address space is bounded (ulimit -v), which bounds its threads (each
    reserves its stack there): OpenBLAS's may fail to start, and it then raises SIGINT (ulimit -u,
    finite on every Linux, is no sign: a Ctrl-C there was said as a thread that could not start)."""
    return resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY


#: mallopt's setting of the most malloc arenas (glibc)
M_ARENA_MAX = -8


def share_malloc_arenas() -> None:
    """Under an address-space limit, one malloc arena for every thread from now on: a thread's first allocation
    made it one (up to 8 a core) reserving 64 MiB of that space each, past anything an estimate can count
    (OpenBLAS's threads, MPI's, the run's), and OpenBLAS then found no room for its buffers (the process
    crashed); at the limit, glibc's fallback crawled."""
    if not address_limited():
        return
    with contextlib.suppress(OSError, AttributeError):  # not glibc: no such setting
        ctypes.CDLL(None).mallopt(M_ARENA_MAX, 1)


#: what OpenBLAS's SIGINT is said as where it could not start its threads (under ulimit -v): not a Ctrl-C
OPENBLAS_THREADS = "can't start new thread (OpenBLAS's threads, which it then stops with SIGINT)"


def release_after_blas(held: "HeldInterrupts") -> None:
    """Release ``held`` after a change of OpenBLAS (its load, its thread count) and act on what came; a SIGINT
    under an address-space limit is OpenBLAS's own where it could not start its threads, raised as such."""
    came = held.release(act=False)
    if came and came[0][0] == signal.SIGINT and address_limited():
        raise RuntimeError(OPENBLAS_THREADS)
    act_on(came)


class HeldInterrupts:
    """Ctrl-C, and the stopping signals a command handles (SIGTERM, SIGHUP), held back from the
    moment this is made until :meth:`release`, which then acts on the first that came: state of the
    whole process changed in steps (the BLAS libraries' thread counts one library at a time, the
    switch interval with its count of runs) is never left half changed by an interrupt between
    two steps, nor changed without its undoing due. A Python signal handler runs in the main thread
    only: made in another, it holds nothing, there being nothing there to hold."""

    def __init__(self):
        self.came: list = []  # (signal, frame) of the signals held, in the order they came
        self.previous: dict = {}  # signal -> the handler it had
        if threading.current_thread() is not threading.main_thread():
            return
        try:
            for signum in STOPPING:
                handler = signal.getsignal(signum)
                if callable(handler):
                    signal.signal(signum, self._hold)
                    self.previous[signum] = handler
        except BaseException:  # one whose handler was not yet replaced: the others as they were
            self.release(act=False)
            raise

    def _hold(self, signum, frame) -> None:
        self.came.append((signum, frame))

    def release(self, act: bool = True) -> list:
        """Give the signals their handlers back (once; later calls do nothing), and with ``act`` run the
        handler of the first one held (Ctrl-C's raises KeyboardInterrupt); the signals held."""
        previous, self.previous = self.previous, {}
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        came, self.came = self.came, []
        if act:
            act_on(came)
        return came


def act_on(came: list) -> None:
    """Run the handler of the first signal of ``came`` (:meth:`HeldInterrupts.release`'s), as it
    would have run when it came."""
    if came:
        signum, frame = came[0]
        handler = signal.getsignal(signum)
        if callable(handler):
            handler(signum, frame)


#: seconds numpy's and SciPy's libraries may take to load under an address-space limit (ulimit -v)
LIBRARY_LOAD_SECONDS = 60.0


@contextlib.contextmanager
def libraries_loading():
    """Within the block (numpy's and SciPy's BLAS loading), under an address-space limit: OpenBLAS,
    as it starts, waits for ever (in C, holding the GIL: no signal handler runs, Ctrl-C neither) for
    buffers the limit does not leave it; past :data:`LIBRARY_LOAD_SECONDS` the rank says so and ends."""
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY:
        yield
        return
    said = (f"loading numpy's and SciPy's BLAS has not finished within {LIBRARY_LOAD_SECONDS:g} s: under the "
            f"address-space limit (ulimit -v {limit // 1024}, in KiB) OpenBLAS waits for ever for buffers the limit "
            f"does not leave it; raise the limit")
    with _start_up_watch(LIBRARY_LOAD_SECONDS, said):
        yield


@contextlib.contextmanager
def _start_up_watch(limit: float | None, late: str | None = None):
    """Within the block, a forked watcher kills this process (SIGKILL: the block may hold the
    GIL, and no thread of the rank runs) if the block lasts more than ``limit`` seconds (None: no
    limit), saying ``late`` (by default: the other ranks did not answer), or once its job is gone
    (:func:`_abandoned`: a proxy killed while the ranks start); it is told the block ended by the
    pipe closing."""
    if limit is None and _job_guard is None:
        yield
        return
    read_end, write_end = os.pipe()
    # a Ctrl-C to the group is the rank's to handle: in the watcher it would unwind the rank's
    # copied stack and report (and abort MPI) a second time, so it waits across the fork, and the
    # watcher ignores it (it ends with the pipe anyway)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)
    watcher = os.fork()
    if watcher == 0:  # the watcher: only system calls and small files, then _exit
        for signum in STOPPING:
            signal.signal(signum, signal.SIG_IGN)
        os.close(write_end)
        _watch(read_end, limit, os.getppid(), late)
        os._exit(0)
    restart_after_fork()
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    runtime_children.add(watcher)  # not a kernel's, if the rank ends with it (leftovers)
    os.close(read_end)
    try:
        yield
    finally:
        os.close(write_end)
        os.waitpid(watcher, 0)
        runtime_children.discard(watcher)


def _watch(read_end: int, limit: float | None, rank: int, late: str | None) -> None:
    """The start-up watcher of process ``rank``: returns once ``read_end`` closes, or once it
    killed the rank, saying ``late`` if past ``limit``, or saying that it was stopped where a stop
    it was sent waited :data:`STOP_WAIT_SECONDS` in vain for MPI's start to end (see
    :func:`_start_up_watch`)."""
    deadline = None if limit is None else time.monotonic() + limit
    asked = None  # (the stopping signal waiting for MPI's start, since when)
    while True:
        wait = OWNER_CHECK_SECONDS if deadline is None else min(OWNER_CHECK_SECONDS, deadline - time.monotonic())
        if select.select([read_end], [], [], max(0.0, min(wait, STOP_CHECK_SECONDS)))[0]:
            return
        status = _abandoned(rank) if _job_guard is not None else None
        asked = asked or _stop_waiting(rank)
        if status is None and asked is not None and time.monotonic() - asked[1] >= STOP_WAIT_SECONDS:
            # MPI's start waits for a rank that will never come (stopped before it): end as the stop asked
            name = signal.Signals(asked[0]).name
            os.write(2, f"tiledsl: rank {launcher_rank()}: stopped by {name} (while it was starting)\n".encode())
            status = 128 + asked[0]
        if status is None and deadline is not None and time.monotonic() >= deadline:
            if _first_to_say("late"):  # one error for the job, not one from every rank waiting
                os.write(2, f"tiledsl: error: rank {launcher_rank()}: {late or _late_at_start_up(limit)}\n".encode())
            status = 1
        if status is not None:
            record_completion(status)
            os.kill(rank, signal.SIGKILL)
            return


#: seconds a stopping signal waits for MPI's start to end (where the rank then stops as it says) before the
#: start-up watcher ends the rank, which waits there for a rank the signal stopped before it came
STOP_WAIT_SECONDS = 2.0
#: seconds between the start-up watcher's looks for such a signal
STOP_CHECK_SECONDS = 0.25


def _stop_waiting(pid: int) -> tuple | None:
    """``(signal, now)`` where process ``pid`` has a stopping signal pending (held back by
    :func:`_signals_deferred`: MPI's start is no place to stop), from Linux's ``/proc``; else None."""
    try:
        with open(f"/proc/{pid}/status") as status:
            masks = [int(line.split()[1], 16) for line in status if line.startswith(("SigPnd:", "ShdPnd:"))]
    except (OSError, ValueError, IndexError):
        return None
    pending = [signum for signum in STOPPING
               if any(mask >> (signum - 1) & 1 for mask in masks)]
    return (pending[0], time.monotonic()) if pending else None


def ranks_text(numbers) -> str:
    """``rank 1``, ``ranks 1 and 2``, ``ranks 0, 1 and 2``: at most five named, then how many more
    (``ranks 0, 1, 2, 3, 4 and 15 more``)."""
    numbers = list(numbers)
    if len(numbers) == 1:
        return f"rank {numbers[0]}"
    shown = [str(number) for number in numbers[:5]] + ([f"{len(numbers) - 5} more"] if len(numbers) > 5 else [])
    return f"ranks {', '.join(shown[:-1])} and {shown[-1]}"


def _late_at_start_up(limit: float) -> str:
    """Why MPI's start took ``limit`` seconds: the ranks that never came to it (their marker is
    missing, in a job of ``tiledsl run --np``) where known, else the other ranks."""
    folder, size = os.environ.get(JOB_DIR_VARIABLE), launcher_size()
    missing = [rank for rank in range(size[1]) if not os.path.exists(os.path.join(folder, f"joining.{rank}"))] \
        if folder and size else []
    if missing:
        return (f"{ranks_text(missing)} did not come to MPI's start within {limit:g} s "
                f"(stopped or lost?)")
    return f"the other ranks did not answer within {limit:g} s at start-up (stopped or lost?)"


def _first_to_say(what: str) -> bool:
    """Whether this rank says ``what`` for the job: the first to claim it in the job's folder
    (``tiledsl run --np``), or every rank outside one."""
    folder = os.environ.get(JOB_DIR_VARIABLE)
    if not folder:
        return True
    try:
        os.close(os.open(os.path.join(folder, f"said.{what}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    except OSError:  # the folder is gone or unwritable: say it rather than nothing
        return True
    return True


def grid_for(text: str | None, ranks: int, program) -> tuple[int, int]:
    """The process grid: ``--grid PxQ`` if given (it must use every rank), else
    :func:`preferred_grid` for ``program``."""
    if text is None:
        return preferred_grid(program, ranks)
    try:
        pr, pc = parse_grid(text)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if pr * pc != ranks:
        raise UsageError(f"--grid {pr}x{pc} has {pr * pc} rank(s) but the job has {ranks}: start {pr * pc} "
                         f"(tiledsl run --np {pr * pc}, or the launcher's -n {pr * pc})")
    return pr, pc


def preferred_grid(program, ranks: int) -> tuple[int, int]:
    """One process row for a program whose calls write columns of tiles and no rows (one
    process column for the converse), else the squarest grid: the tiles of a written panel
    that lie on other ranks go to the task's rank and back, and on one process row a
    column of tiles is on one rank (getrf on 4 ranks: 1x4 sent 211 MB, 2x2 1,229 MB)."""
    axes = program.written_panel_axes
    if axes == {0}:
        return 1, ranks
    if axes == {1}:
        return ranks, 1
    return squarest_grid(ranks)


def default_workers(ranks: int, gpus: int = 0) -> int:
    """CPU worker threads per rank when ``--workers`` is not given: the rank's cores less one
    per GPU (its management thread), one for the copy thread and one for MPI, as in use."""
    return max(1, int(core_share(ranks)) - gpus - (gpus > 0) - (ranks > 1))


def core_share(ranks: int) -> float:
    """This rank's share of its node's cores: the cores over the ranks on the node (the launcher's
    count of them, else all ``ranks``); under one where the ranks outnumber the cores."""
    cores = os.cpu_count() or 1
    local = next((int(os.environ[v]) for v in LOCAL_SIZE_VARIABLES if os.environ.get(v, "").isdigit()), ranks)
    return cores / max(1, min(local, ranks))
