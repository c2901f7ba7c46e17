"""Exceptions of a run: a kernel's numerical failure, and a task or loop nest that failed.

A kernel only knows its own tiles, so it reports *what* went wrong numerically in a
short human message (:class:`KernelError`); the runtime wraps it with the kernel
name, the tiles, the ``.tile`` line and the rank (:class:`TaskFailure`). An error in
the program's own loop nest (a tile that does not exist, a division by zero) becomes
a :class:`TaskFailure` too, wherever the loop nest is walked (:func:`loop_nest_failure`).
"""
from __future__ import annotations

import linecache
import os
import re
import resource
import sysconfig
import traceback

_TILE_LINE = re.compile(r"# \S+\.tile:(\d+)")


class KernelError(Exception):
    """A kernel could not complete on its input (e.g. a matrix that is not SPD)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class KernelFault(KernelError):
    """A kernel returned having done what the runtime refuses (written a NaN where the run checks for
    them, resized a tile, returned a result): the runtime's finding, no exception of the kernel's, so no
    cause of the failure a Python API caller inspects."""


# where the runtime and the installed libraries live: a frame elsewhere is the user's code
_NOT_USERS = tuple({os.path.dirname(os.path.abspath(__file__)) + os.sep}
                   | {os.path.abspath(path) + os.sep for key, path in sysconfig.get_paths().items()
                      if key in ("stdlib", "platstdlib", "purelib", "platlib")})


def is_users(filename: str) -> bool:
    """Whether code of the file ``filename`` is the user's (not the runtime's, Python's or a library's)."""
    return not filename.startswith("<") and not os.path.abspath(filename).startswith(_NOT_USERS)


def user_code_line(error: BaseException) -> str:
    """`` at kernels.py:12``: the innermost line of the user's own code (a kernel module) that
    ``error`` went through, or "" when it rose in the runtime or a library alone. A file below the
    folder of the outermost (the kernel module) is named from there: ``helpers/io.py:3``."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if is_users(frame.filename)]
    if not frames:
        return ""
    folder = os.path.dirname(os.path.abspath(frames[0].filename))
    inner = os.path.abspath(frames[-1].filename)
    shown = os.path.relpath(inner, folder) if inner.startswith(folder + os.sep) else os.path.basename(inner)
    return f" at {shown}:{frames[-1].lineno}"


#: the most characters of an exception's message a one-line report keeps
MESSAGE_LIMIT = 500


#: control characters (a tab aside) as escapes: a message's terminal codes (colours, a cleared screen)
#: reached the terminal raw
_CONTROLS = {code: f"\\x{code:02x}" for code in [*range(0x20), *range(0x7f, 0xa0)] if code != 0x09}


def message_of(error: BaseException) -> str:
    """``str(error)`` on one line (lines joined by " | ", control characters escaped), cut at
    :data:`MESSAGE_LIMIT` characters; a stand-in when the user's exception cannot even be turned into text."""
    try:
        text = str(error)
    except Exception as failure:  # its __str__ raised: the failure is still the task's
        return f"(its message could not be printed: {type(failure).__name__} in its __str__)"
    return one_line(text)


def one_line(text: str) -> str:
    """A user's ``text`` as one line of a message (lines joined by " | ", control characters escaped),
    cut at :data:`MESSAGE_LIMIT` characters."""
    text = " | ".join(line.strip() for line in text.splitlines() if line.strip()).translate(_CONTROLS)
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT] + f"… ({len(text)} characters)"


class TaskFailure(Exception):
    """A task (or the program's loop nest) failed on this rank."""

    def __init__(self, message: str, rank: int, line: int | None = None):
        super().__init__(message)
        self.rank = rank
        self.line = line
        self.kernel_notes: list = []  # what this rank's kernels said before (.notes), as its statistics hold it


class KernelFailure(TaskFailure):
    """A task's kernel failed (raised, or did what the runtime refuses), not the loop nest around it."""


class SettingFailure(TaskFailure):
    """A task the run's settings leave no room for (its tiles past ``--gpu-memory``), found as it came: a
    usage error (exit status 2) like the same setting refused before the run, named at the call."""


class InternalFailure(TaskFailure):
    """A bug of tiledsl stopped the run on this rank (said as an internal error, exit status 3)."""


def shortage(error: BaseException, remedies: str | None = None, at: str = "") -> str | None:
    """A MemoryError, or a thread that could not start, said as what it is, with what helps (the
    run's estimate was checked before it started, so the memory went past it or to another process
    since): ``remedies``, the run's own (:func:`.resources.shortage_remedies`: the settings it has,
    as its interface spells them), or else the general advice; ``at``: where in the user's code it ran
    out (`` at kernels.py:3``, :func:`user_code_line`). None for any other error."""
    if isinstance(error, MemoryError) or isinstance(error, RuntimeError) and str(error) in _NO_LOCK:
        said = f": {error}" if str(error) else ""
        beyond = _beyond_the_node(str(error), at) if at else None  # (tiledsl's own: a setting makes it fit)
        return f"out of memory{at}{said}; {beyond or _more_memory(remedies)}"
    if isinstance(error, (ImportError, OSError)) and "failed to map segment" in str(error):  # a library's
        more = _more_memory("raise that limit" if _address_limit() is not None else remedies)
        return f"out of memory: {error} (no room to load it); {more}"
    if isinstance(error, RuntimeError) and "can't start new thread" in str(error):
        if _address_limit() is not None:  # the usual cause there: each thread's stack is reserved in it
            from .resources import bytes_text, thread_stack_bytes

            stack = thread_stack_bytes()
            source = " by ulimit -s" if stack == resource.getrlimit(resource.RLIMIT_STACK)[0] else ""
            # the stacks shrink neither with the size nor with more ranks, each of which has as many threads
            return (f"cannot start a thread (each reserves its stack, {bytes_text(stack)}{source}); "
                    f"{_more_memory('raise that limit, or use smaller thread stacks (ulimit -s) or fewer workers')}")
        processes = resource.getrlimit(resource.RLIMIT_NPROC)[0]
        count = (f"this user's processes and threads may have reached their limit (ulimit -u {processes}): raise "
                 f"it, or use fewer workers (each is a thread); or " if processes != resource.RLIM_INFINITY else "")
        return f"cannot start a thread: {count}memory ran out; {_more_memory(remedies)}"
    return None


#: numpy's MemoryError: "Unable to allocate 728. TiB for an array with shape ..."
_ALLOCATION = re.compile(r"Unable to allocate (\d+(?:\.\d*)?) (B|KiB|MiB|GiB|TiB|PiB|EiB) ")
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def _beyond_the_node(message: str, at: str) -> str | None:
    """What is said of one allocation by the user's code ``at`` larger than this node's memory (728 TiB
    on 23 GiB): no setting of the run makes it fit, the code must change; None where it is not that."""
    from .resources import bytes_text, meminfo

    asked, total = _ALLOCATION.search(message), meminfo("MemTotal")
    if asked is None or total is None:
        return None
    size = float(asked[1]) * 1024 ** _UNITS.index(asked[2])
    if size <= total:
        return None
    return (f"that one allocation is more than this node's {bytes_text(total)} of memory: no setting of the run "
            f"makes it fit (the code{at} asks for it)")


#: what Python raises for a lock it could not make (memory that ran out)
_NO_LOCK = {"can't allocate lock", "cannot allocate lock", "can't allocate read lock"}


def more_ranks(per_process: bool) -> str:
    """The advice of more ranks for a lack of memory: under a limit of each process's (ulimit -v) any
    more ranks; else ranks on other nodes, since the ranks on one node share its memory."""
    return ("more ranks (each has its own limit)" if per_process
            else "more ranks on other nodes (the ranks on one node share its memory)")


def _more_memory(remedies: str | None) -> str:
    """The limit met where it is the process's own, and ``remedies`` (or the general ones)."""
    from .resources import bytes_text

    limit = _address_limit()
    if remedies is None:  # per process: ranks on the same node each have their own
        remedies = (f"raise that limit, or use {more_ranks(True)} or a smaller --n" if limit is not None
                    else f"use {more_ranks(False)} or a smaller --n")
    return (f"this process's address space is limited to {bytes_text(limit)} (ulimit -v): " if limit is not None
            else "") + remedies


def _address_limit() -> int | None:
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    return None if limit == resource.RLIM_INFINITY else limit


class ValueArgumentError(ArithmeticError):
    """A kernel's value argument out of the range a kernel takes (an int past 64 bits, a float
    that overflowed): the program's mistake, at the call's line."""


def loop_nest_failure(error: Exception, rank: int, remedies: str | None = None) -> TaskFailure:
    """The failure of the driver's loop nest that raised ``error``, at its ``.tile`` line (``remedies``:
    what helps the run where memory ran out, see :func:`shortage`)."""
    from .flops import FlopCountError
    from .matrix import TileIndexError

    if isinstance(error, TaskFailure):
        return error
    if isinstance(error, (TileIndexError, FlopCountError, ValueArgumentError)):
        return TaskFailure(f"{error}{_where(error)}", rank, getattr(error, "line", None) or driver_line(error))
    said = shortage(error, remedies)  # memory (or a thread) that ran out as the loop nest made tiles or messages
    if said is not None:
        return TaskFailure(f"{said}{_where(error)}", rank, driver_line(error))
    # a mistake in the program's arithmetic, e.g. a division by zero: said in the program's words
    return TaskFailure(f"the loop nest failed: {_arithmetic_text(error)}{_where(error)}", rank, driver_line(error))


def _arithmetic_text(error: Exception) -> str:
    """What went wrong in the loop nest's arithmetic, in the program's terms: Python's name for it (its
    "integer division or modulo by zero" of a program with no modulo) only for an error of another kind."""
    if isinstance(error, ZeroDivisionError):
        return "a division by zero (the right operand of '//', '%' or '/' is 0)"
    if isinstance(error, (ArithmeticError, ValueError)):  # the driver's own checks: a negative exponent, a step of 0
        return str(error)
    return f"{type(error).__name__}: {error}"


def driver_line(error: BaseException) -> int | None:
    """The ``.tile`` line of the driver statement that raised ``error``, from its comments."""
    frame, number = _generate_frame(error)
    return None if frame is None else tile_line(frame.f_code.co_filename, number)


def _generate_frame(error: BaseException):
    """(the innermost frame of the driver's ``generate`` that ``error`` passed, its line number),
    or (None, None)."""
    found = (None, None)
    traceback = error.__traceback__
    while traceback is not None:
        if traceback.tb_frame.f_code.co_name == "generate":
            found = (traceback.tb_frame, traceback.tb_lineno)
        traceback = traceback.tb_next
    return found


def _where(error: BaseException) -> str:
    """`` (in `STATEMENT`, with k = 1, m = 2)``: the ``.tile`` call or release that raised ``error``
    (quoted from the driver's comment above it) and the values then of the loop variables, lets and
    parameters it names (integers, floats and characters: a float parameter may be what failed)."""
    frame, number = _generate_frame(error)
    if frame is None:
        return ""
    lines = linecache.getlines(frame.f_code.co_filename)
    source_names = frame.f_globals.get("SOURCE_NAMES", {})  # the driver's renamings of .tile names
    statement = _quoted_statement(lines, number - 1) or _let_statement(lines, number - 1, source_names)
    named = set(re.findall(r"[A-Za-z_]\w*", statement)) if statement else None
    # every loop variable around it (a let it names may take one value at several iterations: tester q66),
    # and the lets and parameters it names
    values = ", ".join(f"{shown} = {value_text(value)}" for name, loop in _names_in_scope(lines, number - 1)
                       for shown, value in [(source_names.get(name, name), frame.f_locals.get(name))]
                       if type(value) in (int, float, str) and (loop or named is None or shown in named))
    parts = ([f"in `{statement}`"] if statement else []) + ([f"with {values}"] if values else [])
    return f" ({', '.join(parts)})" if parts else ""


def value_text(value) -> str:
    """A value as the program writes it: ``3``, ``-1.0``, ``"L"`` (a char that does not print, or a
    quote, as Python writes it: bare, it would read as the message's own punctuation)."""
    if isinstance(value, str):
        return f'"{value}"' if value.isprintable() and value != '"' else repr(value)
    return repr(value)


_LOOP = re.compile(r"\s*for ([A-Za-z]\w*) in ")
_ASSIGNED = re.compile(r"\s*([A-Za-z]\w*) = ")


def _names_in_scope(lines: list, at: int) -> list:
    """The loop variables and lets of the driver's loop nest visible at line ``at`` (0-based), in
    the order the program gives them values, each as ``(name, whether a loop's)``: those of the loops
    around it and the lets before it in its own or an enclosing block, not those of a loop that ended
    before it."""
    names: list = []
    if at >= len(lines):
        return names
    indent = len(lines[at]) - len(lines[at].lstrip())
    for text in reversed(lines[:at]):
        stripped = text.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("def "):
            break
        level = len(text) - len(stripped)
        if level < indent:  # a header of an enclosing block: a loop's variable, or an if/else
            indent = level
            found = _LOOP.match(text)
        else:
            found = _ASSIGNED.match(text) if level == indent else None
        if found and found.group(1) not in [name for name, _ in names]:
            names.append((found.group(1), found.re is _LOOP))
    return names[::-1]


_QUOTED = re.compile(r"^\s*# \S+\.tile:(\d+): (.+)$")
_OWNER_LINE = re.compile(r"^\s*_r\d+ = ")


_LET_LINE = re.compile(r"^\s*([A-Za-z]\w*) = (.+?)  # \S+\.tile:\d+$")


def _let_statement(lines: list, at: int, source_names: dict) -> str | None:
    """``let q = A.nt // z``: the ``.tile`` let whose driver line ``at`` (0-based) is, in the
    program's names, where the driver wrote its value as the program does (no helper of its own,
    ``_power``, no parameter read from ``p``); else None."""
    found = _LET_LINE.match(lines[at]) if at < len(lines) else None
    if found is None or re.search(r"\b_|\bp\[", found.group(2)):
        return None
    value = re.sub(r"[A-Za-z]\w*", lambda name: source_names.get(name.group(), name.group()), found.group(2))
    return f"let {source_names.get(found.group(1), found.group(1))} = {value}"


def _quoted_statement(lines: list, at: int) -> str | None:
    """The ``.tile`` statement a driver quotes in the comment heading the block that line ``at``
    (0-based) belongs to. A submit comes after its statement's comment. Owner lines (``_rN =
    ...``, each ending in its statement's ``# X.tile:N``) are hoisted, together, above the
    comments of the statements they serve: the one quoting line N, further down the same block.
    A control line (for, if, let: a trailing ``# X.tile:N``) quotes nothing."""
    if at >= len(lines):
        return None
    if _OWNER_LINE.match(lines[at]):
        return _quoted_below(lines, at)
    for text in reversed(lines[:at + 1]):
        found = _QUOTED.match(text)
        if found:
            return found.group(2).strip()
        if _TILE_LINE.search(text):
            return None
    return None


def _quoted_below(lines: list, at: int) -> str | None:
    """The statement that the owner line ``at`` serves: quoted further down its block."""
    line = _TILE_LINE.search(lines[at])
    indent = len(lines[at]) - len(lines[at].lstrip())
    for text in lines[at + 1:]:
        if text.strip() and len(text) - len(text.lstrip()) < indent:
            return None  # the block ended
        found = _QUOTED.match(text)
        if found and line and found.group(1) == line.group(1):
            return found.group(2).strip()
    return None


def tile_line(filename: str, number: int | None) -> int | None:
    """The ``.tile`` line of a generated driver's statement, from the ``# FILE.tile:N`` comments above it
    (None when the statement's line is unknown: a frame between two lines has ``f_lineno`` None)."""
    if number is None:
        return None
    for candidate in range(number, 0, -1):
        found = _TILE_LINE.search(linecache.getline(filename, candidate))
        if found:
            return int(found.group(1))
    return None
