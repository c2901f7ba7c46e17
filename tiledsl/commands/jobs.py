"""Running the ranks of an MPI job from the command line, and cleaning up after it.

:func:`run_job` starts the launcher (``mpiexec -n P python driver.py ...``),
forwards SIGINT, SIGTERM and SIGHUP to it (SIGHUP, which kills hydra, to the
ranks of this node; so every rank hears them once, and the launcher is never
left running without us), kills every process of the job when it has not ended
:data:`GRACE_SECONDS` after the first signal, checks that every rank finished
its run (each records it in the job's folder), says what ended a job that no
rank could report (a launcher or its proxy killed), and removes what a failed
job leaves behind.

MPICH keeps the ranks of a node in touch through a shared-memory segment
(``/dev/shm/mpich_shm_*``) that the ranks unlink when they finalize; a job that
is aborted, interrupted or loses a rank to SIGKILL never gets there, and the
segment stays until reboot. Hydra (MPICH's ``mpiexec``) also writes files under
``$TMPDIR``, and a topology file in ``/tmp`` that an aborted job leaves.
``tiledsl run --np`` runs the job in a private ``$TMPDIR``, removes the topology
files the job made, and, after a failed job, the segments that appeared during
it and that no process maps any more.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from ..runtime import crash
from ..runtime.reporting import json_text, unwritable_text
from ..runtime.world import process_exists, ranks_text, unless_ignored
from .joboutput import Forwarder
from .rankwatch import RankWatch

SHARED_MEMORY = Path("/dev/shm")
TOPOLOGY_FOLDER = Path("/tmp")  # where hydra writes its topology files, a path written into MPICH
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# mpiexec (hydra) passes SIGINT and SIGTERM on to the ranks but dies of SIGHUP, leaving them
# to be killed without a word, and on SIGINT prints lines of its own ("Sending Ctrl-C to
# processes as requested", and an assertion dump when it comes twice): SIGHUP and SIGINT go to
# the ranks of this node instead (whose abort ends the others), or to the launcher (SIGHUP as
# SIGTERM) while none has started
SENT_FOR = {signal.SIGHUP: signal.SIGTERM, signal.SIGINT: signal.SIGINT}
PR_SET_PDEATHSIG = 1  # prctl(2)
#: what can end a run's process unseen, said when one ended so
UNSEEN_ENDS = "posix._exit, a C library's exit() or a Fortran STOP, MPI_Abort"
GRACE_SECONDS = 30  # after the first forwarded signal, how long the job has to end before it is killed
LINGER_SECONDS = 5.0  # how long the launcher may outlive the last rank (it waits for the output pipes)
ORPHAN_WAIT = 3.0  # after a failed job, how long its ranks have to let go of their segments
KILLED_SECONDS = 2.0  # how long a killed job's processes may take to be gone (a SIGKILL is not instant)
POLL_SECONDS = 0.2  # how often a waiting launcher is checked on
STALE_SECONDS = 600.0  # what a killed job left (segments, its folder) is removed by a later job after this
JOB_DIR_VARIABLE = "TILEDSL_JOB_DIR"  # as runtime.world names it: where ranks record their completion
JOB_PID_VARIABLE = "TILEDSL_JOB_PID"  # as runtime.world names it: this process, which no rank outlives
STDERR_MARK_VARIABLE = "TILEDSL_STDERR_MARK"  # as runtime.world names it: rank 0's later errors come on stdout
JOB_HOST_VARIABLE = "TILEDSL_JOB_HOST"  # as runtime.world names it: the host this process runs on
JOB_RANKS_VARIABLE = "TILEDSL_JOB_RANKS"  # as runtime.world names it: the ranks the launcher must start


def run_job(command: list[str], ranks: int | None = None, grace: float = GRACE_SECONDS,
            failure_json: dict | None = None, program_file: str | None = None) -> int:
    """Run ``command`` (a launcher and its ``ranks`` ranks) to its end; its exit status.

    128+N after a forwarded signal N (whatever the job returned); 1 when the launcher
    returned 0 but some rank did not record that it finished the run (it exited in
    the middle: ``os._exit(0)``, ``sys.exit(0)``), when a rank was lost (killed by a
    signal: the launcher's own status, 9 or 11, is said, not returned), or when a piece
    of the launcher was (the launcher itself, or its process on this node). With
    ``failure_json`` (``--json``: what the ranks' JSON line says of the run), a failure no rank
    reported is also that line on stdout, with what was said on stderr as its error.
    ``program_file``: the ``.tile`` file's name, which a rank's crash is said at.
    """
    remove_stale()
    before, topologies = segments(), topology_files()
    with private_tmpdir(os.environ) as environment:
        if sys.stderr.isatty():  # the ranks' stderr is a pipe: rank 0's progress bar asks for it (16.11)
            environment["TILEDSL_PROGRESS"] = "1"
        folder = environment[JOB_DIR_VARIABLE]
        environment[JOB_PID_VARIABLE] = str(os.getpid())  # a rank ends when we are gone, even killed
        environment[JOB_HOST_VARIABLE] = socket.gethostname()  # ranks on other nodes cannot see us
        if ranks is not None:  # a launcher that ignores -n is said to, not run as another job
            environment[JOB_RANKS_VARIABLE] = str(ranks)
        # a session of its own: a Ctrl-C reaches the job once, through us, not twice
        with RankWatch(folder, lambda pids: set(job_processes(folder)) & set(pids)) as watch:
            # no rank reads our stdin: the launcher would forward it to rank 0 and take it from the
            # shell's loop that feeds us (`while read n; do tiledsl run ...; done < sizes`)
            target = _stdout_descriptor()
            if target is not None:  # rank 0's errors after its summary come through it, after the summary
                environment[STDERR_MARK_VARIABLE] = "1"
            job = subprocess.Popen(command, env=environment, start_new_session=True, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE if target is not None else None,
                                   preexec_fn=_ended_with(os.getpid()))
            output = Forwarder(job.stdout, target, json_last=failure_json is not None).start() \
                if target is not None else None
            code = _wait_forwarding_signals(job, folder, grace, lambda: _ranks_ended_since(watch, ranks), ranks)
            if output is not None:
                output.finish()
        said = _Said(sys.stderr)
        with contextlib.redirect_stderr(said):
            code = _outcome(job, code, folder, ranks, command[0], watch, program_file)
            code = _output_outcome(output, code)
        # a job stopped before rank 0 said its summary or failure: said as "stopped by SIGTERM"
        stopped = _forwarded_signal(code) and recorded_status(folder, 0) is None
        errors = said.errors or [f"stopped by {signal_name(code - 128)}"] * stopped
        unwritable = output is not None and output.failure is not None  # said once: no object could follow
        if code != 0 and failure_json is not None and errors and not _some_rank_reported(folder) and not unwritable:
            # a script reads the last line of stdout
            print(json_text({**failure_json, "error": "; ".join(errors)}), flush=True)
        if code != 0:
            kill_job(job, folder)
        remove_topology_files(topologies, folder)
    if code != 0:
        remove_orphans(before)
    return code


def _stdout_descriptor() -> int | None:
    """Our stdout's file descriptor, what was written to it before flushed; None where it has none."""
    try:
        sys.stdout.flush()
        return sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture): the launcher writes to it
        return None


def _output_outcome(output: Forwarder | None, code: int) -> int:
    """The job's status once its output was passed on: a stdout that could not be written fails a
    job that succeeded (said); one whose reader left ends it as SIGPIPE does a process."""
    if output is None or code != 0:
        return code
    if output.failure is not None:
        print(f"tiledsl: error: {unwritable_text(output.failure)}", file=sys.stderr, flush=True)
        return 1
    return 128 + signal.SIGPIPE if output.reader_gone else code


class _Said:
    """A stream that writes through to ``stream`` and keeps the errors said (``tiledsl: error:``)."""

    def __init__(self, stream):
        self.stream, self.errors = stream, []

    def write(self, text: str) -> int:
        self.errors += [line.removeprefix("tiledsl: error: ") for line in text.splitlines()
                        if line.startswith("tiledsl: error: ")]
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def _outcome(job: subprocess.Popen, code: int, folder: str, ranks: int | None, launcher: str,
             watch: RankWatch, program_file: str | None = None) -> int:
    """The exit status of a job whose launcher ended with ``code`` (see :func:`run_job`), with what
    went wrong said on stderr where no rank could say it (``watch``: which rank ended first)."""
    if code == 0:
        return _check_every_rank_finished(folder, ranks, launcher) if ranks is not None else 0
    if _forwarded_signal(code):
        if ranks is not None and all(recorded_status(folder, rank) == "0" for rank in range(ranks)):
            return 0  # every rank had finished its run, summary and files written: the signal came as they exited
        if not _some_rank_reported(folder):  # the ranks were still starting: the launcher ended them
            print(f"tiledsl: stopped by {signal_name(code - 128)}", file=sys.stderr, flush=True)
        return code
    if ranks is not None and all(recorded_status(folder, rank) == "0" for rank in range(ranks)):
        # a rank killed as it exited (kill -9 after its summary): the run had succeeded, its files written
        print(f"tiledsl: warning: the launcher ended with exit status {code}{_as_signal(code)}, after every rank "
              f"had finished the run, its summary and files written: the run succeeded", file=sys.stderr, flush=True)
        return 0
    if _report_orphans(folder):
        return 1
    code = _recorded_failure(folder, code) if code > 3 else code
    # 141: the launcher died of SIGPIPE, its reader gone (`| head`), a quiet end
    if code == 128 + signal.SIGPIPE or _some_rank_reported(folder):
        return code
    if job.returncode < 0:  # the launcher itself was killed, and the ranks with it
        _report_launcher_killed(folder, ranks, -job.returncode, launcher, job.pid)
        return 1
    if code == signal.SIGTERM and _report_stopped_while_starting(folder, ranks, watch):
        return 128 + signal.SIGTERM  # as for a SIGTERM a rank handles, or one sent to us
    if _report_lost_ranks(folder, ranks, code, launcher, watch, program_file) and code >= 3:
        # a rank lost is a program error (options.EXIT_CODES), not the launcher's status: nor is a 3 (a kernel's
        # MPI_Abort(3)) tiledsl's internal error
        return 1
    return code


def _ended_with(parent: int):
    """What the launcher runs before it starts: Linux sends it SIGTERM, which it passes on to the
    ranks, when ``parent`` (this process) dies, even of SIGKILL, which no handler of ours sees;
    without it the job would run on, orphaned. Elsewhere, nothing."""
    def die_with_parent() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        except (OSError, AttributeError):  # not Linux
            return
        if os.getppid() != parent:  # it died before the call took effect
            os.kill(os.getpid(), signal.SIGTERM)
    return die_with_parent if sys.platform.startswith("linux") else None


def _check_every_rank_finished(folder: str, ranks: int, launcher: str) -> int:
    """0 when every rank recorded that it finished its run with status 0, else 1 (said on stderr)."""
    statuses = {rank: recorded_status(folder, rank) for rank in range(ranks)}  # each rank's file, read once
    unfinished = [rank for rank, status in statuses.items() if status != "0"]
    if unfinished and _some_rank_started(folder, launcher, 0):  # else said: `--launcher true` starts none
        silent = all(statuses[rank] is None for rank in unfinished)  # and the launcher's status 0: exit(0), unseen
        how = ((" with exit status 0", f": code the run called ended the process ({UNSEEN_ENDS})") if silent
               else ("", ""))
        print(f"tiledsl: error: {ranks_text(unfinished)} ended{how[0]} without finishing the run{how[1]}",
              file=sys.stderr, flush=True)
    return 1 if unfinished else 0


def _some_rank_started(folder: str, launcher: str, code: int) -> bool:
    """Whether a rank recorded that it started; if none did, say so."""
    if any(Path(folder).glob("started.*")):
        return True
    print(f"tiledsl: error: no rank started: the launcher ({launcher}) ended with exit status {code} before "
          f"any rank reached tiledsl (or every rank died while starting)", file=sys.stderr, flush=True)
    return False


def _some_rank_reported(folder: str) -> bool:
    """Whether a rank recorded a failure: it printed why before it ended the job."""
    return any(text.strip() not in ("", "0") for text in _read_markers(folder))


def _report_lost_ranks(folder: str, ranks: int | None, code: int, launcher: str, watch: RankWatch,
                       program_file: str | None = None) -> bool:
    """Say which ranks ended without a word (killed by a signal, lost), or that none started,
    when none said why; whether there were such ranks."""
    if ranks is None:
        return False
    lost = [rank for rank in range(ranks) if recorded_status(folder, rank) is None]
    if not lost:
        return False
    if not _some_rank_started(folder, launcher, code):
        return True
    crashed = crashes(folder, lost)
    report_crashes(crashed, program_file)
    lost = [rank for rank in lost if rank not in crashed]
    if crashed and lost:
        _said_ended_by_launcher(lost)
    if crashed:
        return True
    first = watch.first_of(lost)
    if first is not None and (first[1] is None or first[1] < CLOSE_ENDS_SECONDS):
        # seen at one wake-up, or nearly: the kernel's order of ends may be the inverse of the deaths' (the one
        # killed first may take longer to end: its threads, its memory), so neither is named first
        starting, advice = next((note for note in (_start_note(folder, r) for r in lost) if note[0]), ("", ""))
        print(f"tiledsl: error: {ranks_text(lost)} ended{starting} without finishing the run and "
              f"without a word, within {CLOSE_ENDS_SECONDS * 1e3:.0f} ms of each other: which died first cannot be "
              f"told (once one dies the launcher ends the others; the launcher's exit status is {code}"
              f"{_as_signal(code)})"
              f"{advice}", file=sys.stderr, flush=True)
        return True
    if first is not None:  # its process ended before the others', which the launcher then ended
        rank, lead = first
        before = f"{lead:.3f} s before the others"
        starting, advice = _start_note(folder, rank)
        print(f"tiledsl: error: rank {rank} ended{starting} without finishing the run and without a word, first "
              f"({before}; the launcher's exit status is {code}{_as_signal(code)}){advice}",
              file=sys.stderr, flush=True)
        _said_ended_by_launcher([other for other in lost if other != rank])
        return True
    # on other nodes, which one died first cannot be told: once one dies the launcher kills the others
    why = ("at least one died (a crash, a signal) and the launcher then ended the others" if len(lost) > 1
           else "killed by a signal, or lost")
    print(f"tiledsl: error: {ranks_text(lost)} ended without finishing the run and without "
          f"a word ({why}; the launcher's exit status is {code}{_as_signal(code)})", file=sys.stderr, flush=True)
    return True


def _report_stopped_while_starting(folder: str, ranks: int | None, watch: RankWatch) -> bool:
    """Say that a rank was stopped by SIGTERM before it could handle it (the launcher's status 15 says
    a rank died of it, and no rank said a word); whether it was."""
    lost = [rank for rank in range(ranks or 0) if recorded_status(folder, rank) is None]
    if not lost or crashes(folder, lost):
        return False
    first = watch.first_of(lost) if len(lost) > 1 else (lost[0], None)
    if first is None:  # not watched: it had not recorded its pid yet
        print("tiledsl: stopped by SIGTERM (sent to a rank while it was starting)", file=sys.stderr, flush=True)
    else:
        print(f"tiledsl: rank {first[0]}: stopped by SIGTERM (while it was starting)", file=sys.stderr, flush=True)
    return True


#: seconds between the ends of two ranks within which which died first cannot be told: a rank killed by SIGKILL
#: was seen to end 1-2 ms, once 6 ms, after the one the launcher then ended (a loaded machine; 8-17 ms before it
#: otherwise): an order seen closer than this is not said, a wrong one sent the user to an innocent rank's logs
CLOSE_ENDS_SECONDS = 0.010


def _start_note(folder: str, rank: int) -> tuple[str, str]:
    """What a rank that died without a word inside MPI's start adds to the report of it, before and after its
    exit status (empty elsewhere): under an address-space limit, which the ranks share with this process, MPI's
    libraries may find no room for their threads (UCX aborts: "pthread_create() failed")."""
    joining, joined = (Path(folder, f"{what}.{rank}").exists() for what in ("joining", "joined"))
    if not joining or joined:
        return "", ""
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY:
        return " as MPI started,", ""
    return " as MPI started,", (f"; under the address-space limit (ulimit -v {limit // 1024}, in KiB) MPI's "
                                f"libraries may find no room for their threads and buffers: raise the limit")


def _said_ended_by_launcher(ranks: list) -> None:
    print(f"tiledsl: error: the launcher then ended {ranks_text(ranks)}", file=sys.stderr, flush=True)


def _as_signal(code: int) -> str:
    """What the launcher's exit status says of a rank that died without a word: hydra exits
    with the number of the signal that killed a rank."""
    if code == signal.SIGKILL:
        return (", which is how it reports a rank killed by SIGKILL: the system's out-of-memory killer sends it "
                "(see `dmesg`), as does `kill -9`, and the launcher itself to the others once a rank ended by "
                "itself (a C library's exit())")
    # MPI_Abort(N) ends the job with N too (tester w: a kernel's MPI_Abort(3) was said as a SIGQUIT)
    return (f", which is how it reports a rank killed by {signal_name(code)}, or MPI_Abort({code}) called"
            if 1 < code < signal.NSIG else "")


def _report_orphans(folder: str) -> bool:
    """Say which of the launcher's processes died (hydra's proxy on this node), as the ranks it ran
    recorded it before they ended (what they print went through it); whether one did."""
    parents = set()
    for marker in Path(folder).glob("orphaned.*"):
        with contextlib.suppress(OSError):
            parents.add(marker.read_text().strip())
    for parent in sorted(parents):
        pid, _, name = parent.partition(" ")
        print(f"tiledsl: error: {name or 'a process'} (pid {pid}), the launcher's process that ran ranks on "
              f"this node, died: the job was stopped", file=sys.stderr, flush=True)
    return bool(parents)


def _report_launcher_killed(folder: str, ranks: int | None, signum: int, launcher: str, pid: int) -> None:
    """Say that the launcher was killed by ``signum`` (the ranks did not die first: it did)."""
    lost = [rank for rank in range(ranks or 0) if recorded_status(folder, rank) is None]
    unfinished = f" ({ranks_text(lost)} had not finished)" if lost else ""
    print(f"tiledsl: error: the launcher ({Path(launcher).name}, pid {pid}) was killed by {signal_name(signum)}: "
          f"the job was stopped{unfinished}", file=sys.stderr, flush=True)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def report_crashes(crashed: dict, program_file: str | None) -> list[str]:
    """Say each rank's crash (:func:`crashes`): what happened, the kernel and the ``.tile`` call it ran, and
    the stack's frames, once per place (every rank crashing in one kernel repeats them); the first lines said."""
    shown, said_first = set(), []
    for rank, stack in crashed.items():
        what, site, frames = _crash_parts(stack)
        call = next(filter(None, map(_CALL.match, frames)), None)
        at = f" ({f'{program_file}:' if program_file else 'line '}{call['line']})" if call else ""
        site += f", in `{call['text']}`" if call else ""
        said = "" if (site, frames) in shown or not frames else "\n" + "\n".join(frames)
        shown.add((site, frames))
        said_first.append(f"rank {rank}{at} crashed ({what}){site}")
        print(f"tiledsl: error: {said_first[-1]}{said}", file=sys.stderr, flush=True)
    return said_first


def crashes(folder: str, ranks: list) -> dict:
    """Rank -> the stack its crash left (:mod:`tiledsl.runtime.crash`), for those of ``ranks`` that
    crashed."""
    stacks = {}
    for rank in ranks:
        try:
            stack = Path(folder, f"crash.{rank}").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if stack.strip():
            stacks[rank] = stack
    return stacks


_RUNTIME_FOLDER = Path(crash.__file__).resolve().parent
_FRAME = re.compile(r'\s*File "(?P<path>.*)", line (?P<line>\d+) in (?P<function>\S+)')
_THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ .*$", re.MULTILINE)
#: the frame of the .tile call whose kernel crashed (crash.call_runner)
_CALL = re.compile(r'\s*File "' + re.escape(crash.CALL_FRAME).replace(r"\{line\}", r"(?P<line>\d+)")
                   .replace(r"\{text\}", "(?P<text>.*)") + '", line')
_TIMEOUT = re.compile(r"Timeout \((\d+:\d\d:\d\d(?:\.\d+)?)\)!")
_STANDARD_LIBRARY = Path(sysconfig.get_paths()["stdlib"]).resolve()


def _crash_parts(stack: str) -> tuple[str, str, tuple]:
    """(what happened, where: " in kernel code NAME (FILE:LINE)", the frames told) of the text
    faulthandler wrote (:mod:`tiledsl.runtime.crash`): "Fatal Python error: Segmentation fault"
    and every thread's frames, most recent first, the crashing one's headed "Current thread", then
    the extension modules loaded, which say nothing here; or "Timeout (H:MM:SS)!" and every thread's
    (the watchdog's last resort, the interpreter frozen by C code holding the GIL). The crashing
    thread is told where it ran the user's code or no thread did; else the kernel another thread
    ran: a signal sent to the whole process (``os.kill(os.getpid(), ...)`` in a kernel, ``kill``
    from outside) reaches a thread of the runtime's, most often the main one, waiting."""
    first, _, rest = stack.strip().partition("\n")
    timeout = _TIMEOUT.match(first)
    what = (f"frozen for {timeout[1]}: C code held the GIL, and no Python code ran, past the watchdog's limit"
            if timeout else first.removeprefix("Fatal Python error: ").strip())
    threads = _threads(rest)
    told = [thread for thread in threads if thread[1].startswith((" in kernel", " while"))]
    current = next((thread for thread in threads if thread[0]), None)
    if current is not None and (current in told or not told):
        return what, current[1], current[2]
    kernels = [thread for thread in told if thread[1].startswith(" in kernel")]
    if current is None or not kernels:  # a timeout: no thread crashed; or one thread's stack only
        _, site, frames = (told or threads)[0]
        return what, site, frames
    _, site, frames = kernels[0]
    others = f" (and {len(kernels) - 1} other task(s))" if len(kernels) > 1 else ""
    return what, (f"{current[1]}, a signal to the whole process while{site.removeprefix(' in')} ran"
                  f"{others}"), frames


def _threads(text: str) -> list[tuple[bool, str, tuple]]:
    """(whether it crashed, where, its frames) of each thread's stack in a faulthandler text (one
    headed "Stack" where it wrote the crashing thread's alone)."""
    parts = _THREAD.split(text)  # text before the first header, then (header, stack) pairs
    threads = [(header == "Current thread", *_thread_site(block)) for header, block in zip(parts[1::2], parts[2::2])]
    return threads or [(False, *_thread_site(text))]


def _thread_site(block: str) -> tuple[str, tuple]:
    """(where, the frames) of one thread's stack in a faulthandler text: the function of the user's
    the runtime called, if any."""
    found = [match for match in map(_FRAME.match, block.splitlines()) if match]
    frames = tuple(match.string.rstrip() for match in found)
    ours = [i for i, match in enumerate(found) if Path(match["path"]).resolve().parent == _RUNTIME_FOLDER]
    if not ours:
        return "", frames
    # the function the runtime called: the outermost frame above its own that is neither the import
    # system's nor the standard library's (a thread's wait)
    called = [match for match in found[:ours[0]]
              if not match["path"].startswith("<") and not Path(match["path"]).is_relative_to(_STANDARD_LIBRARY)]
    below = called[-1] if called else found[ours[0]]
    at = f"({Path(below['path']).name}:{below['line']})"
    if not called:
        return f" in tiledsl's runtime, at {below['function']} {at}", frames
    if below["function"] == "<module>":  # a module's own code, as it loaded
        return f" while loading {Path(below['path']).name} {at}", frames
    return f" in kernel code {below['function']} {at}", frames


def _forwarded_signal(code: int) -> bool:
    return code > 128 and code - 128 in FORWARDED


def _recorded_failure(folder: str, code: int) -> int:
    """The exit status a rank recorded before it was killed (its start-up watcher kills a rank
    stuck in MPI, whose launcher then reports the SIGKILL), else the launcher's ``code``."""
    recorded = [text for text in map(str.strip, _read_markers(folder)) if text in ("1", "2", "3")]
    return int(min(recorded)) if recorded else code


def _read_markers(folder: str) -> list:
    texts = []
    for marker in Path(folder).glob("done.*"):
        with contextlib.suppress(OSError):
            texts.append(marker.read_text())
    return texts


def recorded_status(folder: str, rank: int) -> str | None:
    try:
        return Path(folder, f"done.{rank}").read_text().strip()
    except OSError:
        return None


def kill_job(job: subprocess.Popen, folder: str) -> None:
    """Kill every process of the job: the launcher's process group, and the processes that
    carry the job's folder in their environment (hydra starts its proxies and the ranks in
    sessions of their own, beyond the reach of the launcher's group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(job.pid, signal.SIGKILL)
    killed = job_processes(folder)
    for pid in killed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    # until they are gone: the files a rank abandoned are removed next (outputs.remove_abandoned)
    deadline = time.monotonic() + KILLED_SECONDS
    while any(process_exists(pid) for pid in killed) and time.monotonic() < deadline:
        time.sleep(0.02)


def job_processes(folder: str) -> list[int]:
    """The processes (of this user) whose environment names ``folder`` as their job's."""
    marker = f"{JOB_DIR_VARIABLE}={folder}".encode()
    found = []
    for environ in _of_every_process("environ"):
        with contextlib.suppress(OSError):
            if marker in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
    return found


def local_ranks(folder: str) -> list[int]:
    """The ranks of the job in ``folder`` running on this node, by the pids they recorded there
    (each checked to be a process of the job still: a number may have been reused)."""
    ours = set(job_processes(folder))
    pids = []
    for marker in Path(folder).glob("started.*"):
        with contextlib.suppress(OSError, ValueError):
            pids.append(int(marker.read_text()))
    return [pid for pid in pids if pid in ours]


def _ranks_ended_since(watch: RankWatch, ranks: int | None) -> float:
    """Seconds since every rank of the job ended (0 while one runs, or where that is not known)."""
    last = watch.last_end(ranks) if ranks else None
    return 0.0 if last is None else time.monotonic() - last


def _wait_forwarding_signals(job: subprocess.Popen, folder: str, grace: float, ranks_ended_since,
                             ranks: int | None = None) -> int:
    """Wait for the job, forwarding signals; ``grace`` seconds after the first one, kill it all.
    A launcher still running :data:`LINGER_SECONDS` after every rank ended (``ranks_ended_since()``)
    waits on processes a kernel left holding the ranks' output: they and it are killed."""
    received, signalled = [], set()  # the signals received; the ranks the first was passed to

    def forward(signum, frame):
        received.append(signum)
        if len(received) > 1:  # once: the job is stopping, and is killed if it has not ended by the grace
            return
        if signum not in SENT_FOR:
            with contextlib.suppress(ProcessLookupError):
                job.send_signal(signum)
        elif not _pass_on(local_ranks(folder), signum, signalled):
            # every rank still starting: none ran anything, and a signal the launcher passed on would reach
            # them inside Python's own start, a traceback each; the job ends, and its stop is said for them
            kill_job(job, folder)
        raise _Forwarded  # out of a wait without a deadline (waitpid resumes after a handler)

    for signum in FORWARDED:
        unless_ignored(signum, forward)
    try:
        code = _wait_for_launcher(job, folder, ranks_ended_since, ranks)
    except _Forwarded:
        code = None
    try:
        if code is None and _wait_passing_on(job, folder, grace, received[0], signalled) is None:
            kill_job(job, folder)
            code = job.wait()
    finally:
        # after a signal we end with 128+N: one repeated from now on (a second Ctrl-C), even while
        # Python exits (which puts back the default of a signal that has a handler), changes nothing;
        # without one, the job has ended as it went: a signal as we report it stops nothing either (it
        # said "stopped by SIGINT", exit 130, of a run that had succeeded, its files written)
        for signum in FORWARDED:
            signal.signal(signum, signal.SIG_IGN)
    if received:
        return 128 + received[0]
    return 128 - code if code < 0 else code


def _pass_on(ranks: list, signum: int, signalled: set) -> list:
    """Send ``signum`` to those of this node's ``ranks`` not ``signalled`` yet (they stop as for any
    stopping signal, naming it), adding them; those it was sent to."""
    sent = [pid for pid in ranks if pid not in signalled]
    for pid in sent:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)
    signalled.update(sent)
    return sent


def _wait_passing_on(job: subprocess.Popen, folder: str, grace: float, signum: int, signalled: set) -> int | None:
    """The job's exit status, or None if it is still running ``grace`` seconds on; meanwhile a rank that
    starts after the signal ``signum`` was passed on (:data:`SENT_FOR`) is sent it too: it held the
    job until the grace ran out, the others gone."""
    deadline = time.monotonic() + grace
    while (code := _wait(job, min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))) is None:
        if time.monotonic() >= deadline:
            return None
        if signum in SENT_FOR and signalled:
            _pass_on(local_ranks(folder), signum, signalled)
    return code


def _wait_for_launcher(job: subprocess.Popen, folder: str, ranks_ended_since, ranks: int | None = None) -> int:
    """The launcher's exit status; when it lingered after the ranks' end and was killed, the one
    the ranks recorded (0, or the failure a rank reported); killed too :data:`END_SECONDS` after a rank
    recorded the end of its run (1 where some of its ``ranks`` did not: stopped or lost)."""
    while (code := _wait(job, POLL_SECONDS)) is None:
        if ranks_ended_since() > LINGER_SECONDS:
            _end_leftovers(job, folder)
            return _recorded_failure(folder, 0)
        ended = _recorded_ends(folder)
        if ranks and ended and time.time() - min(ended.values()) > END_SECONDS:  # one ended its run long ago
            kill_job(job, folder)
            job.wait()
            late = [rank for rank in range(ranks) if rank not in ended]
            if late:
                print(f"tiledsl: error: {ranks_text(late)} did not end {'its run' if len(late) == 1 else 'their runs'} within {END_SECONDS:g} s "
                      f"of a rank that had (stopped or lost?): the job was ended", file=sys.stderr, flush=True)
                return 1
            print(f"tiledsl: warning: every rank ended its run, but not its process within {END_SECONDS:g} s (one "
                  f"stopped, or stuck as it exited): the job was ended", file=sys.stderr, flush=True)
            return _recorded_failure(folder, 0)
    return code


#: how long every rank may take to end, process included, once one has ended its run: the ranks end
#: together (rank 0's summary gathers every rank's statistics), so one not ended by then is stopped or
#: lost, and would hold the job for ever
END_SECONDS = 60.0


def _recorded_ends(folder: str) -> dict:
    """Rank -> when it recorded the end of its run (``done.RANK``, the wall clock's seconds)."""
    ended = {}
    for marker in Path(folder).glob("done.*"):
        with contextlib.suppress(OSError, ValueError):
            ended[int(marker.name.removeprefix("done."))] = marker.stat().st_mtime
    return ended


def _end_leftovers(job: subprocess.Popen, folder: str) -> None:
    """Kill the job's processes that outlived its ranks (and the launcher waiting on them), saying which."""
    launcher = {job.pid, *_children(job.pid)}
    left = [f"pid {pid} ({_command_line(pid)})" for pid in job_processes(folder) if pid not in launcher]
    kill_job(job, folder)
    job.wait()
    if left:
        print(f"tiledsl: warning: every rank ended, but {', '.join(left)} that a kernel left running held their "
              f"output open, and the launcher waited for it: killed (a kernel must not leave processes behind)",
              file=sys.stderr, flush=True)
        return
    # none but the launcher's own (a proxy stopped, or stuck): what the ranks wrote last may be lost with it
    failed = [(rank, status) for rank in sorted(_recorded_ends(folder))
              if (status := recorded_status(folder, rank)) in ("1", "2", "3")]
    said = "".join(f"; rank {rank} ended with exit status {status}" for rank, status in failed)
    print(f"tiledsl: {'error' if failed else 'warning'}: every rank ended, but the launcher did not (a process of its "
          f"own stopped or stuck): killed{said}"
          + (f", and what {'it' if len(failed) == 1 else 'they'} said may not have come through" if failed else ""),
          file=sys.stderr, flush=True)


def _children(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes (Linux), [] where not known."""
    with contextlib.suppress(OSError, ValueError):
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


def _command_line(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:80]
    return "?"


class _Forwarded(Exception):
    """The first signal was forwarded: the grace period starts."""


def _wait(job: subprocess.Popen, timeout: float | None) -> int | None:
    """The job's exit status, or None if it is still running after ``timeout`` seconds."""
    try:
        return job.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def topology_files() -> set[Path]:
    """This user's topology files of MPICH's hydra now: each proxy writes one in /tmp (whatever
    TMPDIR says), keeps it open, and removes it when it ends normally, not when it is killed or
    the job aborted (MPI_Abort): each failed job left one more."""
    found = set()
    for path in TOPOLOGY_FOLDER.glob("hydra_hwloc_xmlfile_*"):
        with contextlib.suppress(OSError):  # removed meanwhile, by the job that made it
            if path.stat().st_uid == os.getuid():
                found.add(path)
    return found


def remove_topology_files(before: set[Path], folder: str, wait: float = ORPHAN_WAIT) -> list[Path]:
    """Remove the topology files made since ``before`` (by the job in ``folder``) that no process
    holds open, once the job's processes are gone (up to ``wait`` seconds); the paths removed. A
    file held open is a job's running beside this one."""
    made = topology_files() - before
    deadline = time.monotonic() + wait
    while made and job_processes(folder) and time.monotonic() < deadline:
        time.sleep(0.05)
    held = opened(made)
    removed = [path for path in sorted(made) if str(path) not in held]
    for path in removed:
        with contextlib.suppress(OSError):
            path.unlink()
    return removed


def opened(paths: set[Path]) -> set[str]:
    """Those of ``paths`` that some process of this user holds open."""
    wanted, found = {str(p) for p in paths}, set()
    if not wanted:
        return found
    for descriptors in _of_every_process("fd"):
        try:
            names = os.listdir(descriptors)
        except OSError:  # the process ended meanwhile, or is not ours to look at
            continue
        for name in names:
            with contextlib.suppress(OSError):
                target = os.readlink(descriptors / name)
                if target in wanted:
                    found.add(target)
    return found


def _of_every_process(entry: str):
    """``/proc/PID/ENTRY`` of every process now. Not ``Path.glob``: a process that ends while the
    glob lists its folder made it raise FileNotFoundError out of ``tiledsl run`` (exit 3)."""
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            yield Path("/proc", pid, entry)


def segments() -> set[Path]:
    """This user's MPICH shared-memory segments now."""
    try:
        return {p for p in SHARED_MEMORY.glob("mpich_shm_*") if p.stat().st_uid == os.getuid()}
    except OSError:
        return set()


def mapped() -> set[str]:
    """Paths under :data:`SHARED_MEMORY` that some process of this user maps."""
    found, folder = set(), f"{SHARED_MEMORY}/"
    for maps in _of_every_process("maps"):
        with contextlib.suppress(OSError):
            found.update(line.split(None, 5)[5].strip() for line in maps.read_text(errors="surrogateescape").splitlines()
                         if folder in line and len(line.split(None, 5)) == 6)
    return found


def remove_orphans(before: set[Path], wait: float = ORPHAN_WAIT) -> list[Path]:
    """Remove the segments made since ``before`` that no process maps; the paths removed.

    The ranks of a failed job may still be exiting when the launcher returns: a
    segment one of them maps is given up to ``wait`` seconds to be let go.
    """
    deadline = time.monotonic() + wait
    while True:
        made = sorted(segments() - before)
        in_use = mapped() if made else set()
        if not any(str(p) in in_use for p in made) or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    orphans = [p for p in made if str(p) not in in_use]
    for path in orphans:
        with contextlib.suppress(OSError):
            path.unlink()
    return orphans


def remove_stale(age: float = STALE_SECONDS) -> None:
    """Remove what jobs whose ``tiledsl run`` was killed (SIGKILL: nothing of ours ran) left: this
    user's MPICH segments no process maps, hydra's topology files no process holds open, and job
    folders no process names, older than ``age`` seconds (a job starting now has made none, or
    uses them)."""
    now = time.time()
    topologies = {p for p in topology_files() if _age(p, now) > age}
    held = opened(topologies)
    for path in topologies:
        if str(path) not in held:
            with contextlib.suppress(OSError):
                path.unlink()
    old = [p for p in segments() if _age(p, now) > age]
    folders = [p for p in Path(tempfile.gettempdir()).glob("tiledsl-job-*")
               if _age(p, now) > age and p.stat().st_uid == os.getuid()]
    if old:
        in_use = mapped()
        for path in old:
            if str(path) not in in_use:
                with contextlib.suppress(OSError):
                    path.unlink()
    for folder in folders:
        if not job_processes(str(folder)):
            shutil.rmtree(folder, ignore_errors=True)


def _age(path: Path, now: float) -> float:
    try:
        return now - path.stat().st_mtime
    except OSError:
        return 0.0


@contextlib.contextmanager
def private_tmpdir(environment: dict):
    """``environment`` with TMPDIR (and the job's folder) pointing at a directory removed on exit."""
    with tempfile.TemporaryDirectory(prefix="tiledsl-job-") as folder:
        yield dict(environment, TMPDIR=folder, **{JOB_DIR_VARIABLE: folder})
