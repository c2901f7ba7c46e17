"""User checks: ``check NAME(A, B, ...)`` where NAME is a function of the program's kernel module.

The one check that gathers: rank 0 receives every named matrix's final tiles from
the ranks that own them, rebuilds each original whole from the input's source (a
workspace's: zeros), and calls ``NAME(before, after)``, two dicts name → numpy
array (float64, the matrices' original and final values), or ``NAME(before, after,
params)`` for a function that takes three: the run's ``n``, tile settings and
``param`` values, name → number. The function returns a float residual, or a dict
name → float; the run passes when every residual is below
:data:`~.checks.THRESHOLD` (a NaN fails). Rank 0 broadcasts the residuals, or why
there are none (the function raised, returned something else, or is not there):
then every rank raises the same :class:`~.checks.CheckError`, one line naming the
function and the check's ``.tile`` line, never a traceback.
"""
from __future__ import annotations

import inspect
import math
import numbers
import traceback
from pathlib import Path

import numpy as np

from .checks import CheckError
from .crash import NOT_USERS, KernelExit, fatal_signals_traced, user_code
from .userkernels import UNBOUND, is_body, load_kernel_module, what_is
from .verify import fill_untouched
from .watchdog import CodeLimit, deadline
from .world import RankError, UsageError


def run(check, driver, matrices: dict, sources: dict, comm, params: dict,
        limit: CodeLimit | None = None) -> dict:
    """The residuals of the user check ``check``, on every rank (computed on rank 0); ``params``:
    the run's parameters, name → value, the third argument of a function that takes three; a
    function that has not returned within ``limit`` ends the job."""
    finals = {name: _gather(matrices[name], comm) for name in dict.fromkeys(check.args)}
    outcome = None
    if comm is None or comm.rank == 0:
        before = {name: _original(matrices[name], sources.get(name)) for name in finals}
        where = f"{Path(driver.PROGRAM.source).name}:{check.line}"
        # a crash in it is said with its stack, as one in a kernel, and so is a freeze past its deadline
        with fatal_signals_traced(), deadline(limit, f"check {check.kind} ({where}) has not returned", 0):
            outcome = _call(check, driver, before, finals, params)
    if comm is not None:
        outcome = comm.broadcast(outcome)
    residuals, error = outcome
    if error is not None:
        raise CheckError(check.kind, error)
    return residuals


def _gather(matrix, comm) -> np.ndarray | None:
    """The whole final ``matrix`` on rank 0 (None on the other ranks)."""
    fill_untouched(matrix)
    g = matrix.geometry
    mine = [(g.row_range(t.i)[0], g.col_range(t.j)[0], t.data) for t in matrix.local_tiles()]
    parts = comm.gather(mine) if comm is not None else [mine]
    if parts is None:
        return None
    whole = np.zeros((matrix.m, matrix.n), order="F")
    for r0, c0, block in (piece for part in parts for piece in part):
        whole[r0:r0 + block.shape[0], c0:c0 + block.shape[1]] = block
    return whole


def _original(matrix, source) -> np.ndarray:
    if source is None:  # a workspace
        return np.zeros((matrix.m, matrix.n), order="F")
    return np.array(source(0, matrix.m, 0, matrix.n), dtype=np.float64, order="F")


def _call(check, driver, before: dict, after: dict, params: dict) -> tuple:
    """``(residuals, None)``, or ``(None, why)`` when the check function gave none."""
    program = driver.PROGRAM
    where = f"check {check.kind} ({Path(program.source).name}:{check.line})"
    if not program.kernel_module:
        return None, f"{where}: the program names no kernel module to find the function {check.kind} in"
    try:
        module = load_kernel_module(program, driver)
    except (UsageError, RankError) as error:
        return None, f"{where}: {error}"
    function = vars(module).get(check.kind, UNBOUND)
    if function is UNBOUND:
        return None, f"{where}: kernel module {program.kernel_module} defines no function {check.kind}"
    if not is_body(function):  # a function, or any other callable but a class, as a kernel's body
        return None, (f"{where}: kernel module {program.kernel_module}: {check.kind} must be a function, "
                      f"{what_is(function)}")
    arguments = (before, after, dict(params)) if _takes_three(function) else (before, after)
    try:
        with user_code():
            value = function(*arguments)
    except NOT_USERS:
        raise
    except BaseException as error:  # the user's check: its failure (GeneratorExit too) is the run's, in one line
        return None, f"{where}: {check.kind} raised {_described(error, module)}"
    residuals, problem = _residuals(check.kind, value)
    if problem is not None:
        return None, f"{where}: {check.kind} {problem}"
    return residuals, None


def _takes_three(function) -> bool:
    """Whether a check function takes three positional arguments (the third: the parameters)."""
    try:
        inspect.signature(function).bind(None, None, None)
    except TypeError:
        return False
    return True


def _described(error: BaseException, module) -> str:
    """``ValueError at checks.py:12: message``: the error and the last line of the kernel module it went through."""
    path = Path(module.__file__).resolve()
    line = next((frame.lineno for frame in reversed(traceback.extract_tb(error.__traceback__))
                 if Path(frame.filename).resolve() == path), None)
    if isinstance(error, SystemExit):
        what = f"sys.exit({error.code!r})"
    elif isinstance(error, KernelExit):
        what = str(error).removeprefix("called ")  # os._exit(0)
    else:
        what = type(error).__name__
    text = "" if isinstance(error, (SystemExit, KernelExit)) or not str(error) else f": {error}"
    return f"{what}{f' at {path.name}:{line}' if line else ''}{text}"


_BELOW_ZERO = "below 0: a residual is a ratio of norms (a signed difference would always pass)"


def _residuals(name: str, value) -> tuple[dict | None, str | None]:
    """``({name: value}, None)`` for a number, the dict itself for a dict name → number; else
    ``(None, what is wrong)``: another type, an entry that is not a number, or a negative
    residual (a residual is a ratio of norms: a negative one is a mistake, never a pass)."""
    def real(x) -> bool:
        return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))
    value = _unwrapped(value)
    if isinstance(value, dict):
        value = {key: _unwrapped(entry) for key, entry in value.items()}
    if real(value):
        if value < 0:
            return None, f"returned {_as_float(value):g}, {_BELOW_ZERO}"
        return {name: _as_float(value)}, None
    if not isinstance(value, dict) or not value:
        shown = "an empty dict" if isinstance(value, dict) else type(value).__name__
        return None, f"returned {shown}; a check returns a float residual or a non-empty dict of name → float"
    for key, entry in value.items():
        if not isinstance(key, str):
            return None, f"returned a dict whose key {key!r} is not a name (str)"
        if not key.strip():  # the summary's line of it would name nothing
            return None, f"returned a dict whose key {key!r} is blank: name each residual"
        if not real(entry):
            return None, f"returned a dict whose entry {key!r} is {type(entry).__name__}, not a number"
        if entry < 0:
            return None, f"returned a dict whose entry {key!r} is {_as_float(entry):g}, {_BELOW_ZERO}"
    return {k: _as_float(v) for k, v in value.items()}, None


def _unwrapped(value):
    """A 0-d numpy array's element (``np.linalg.norm(x, axis=None, keepdims=...)``, ``np.array(r)``: a
    number, as numpy's scalars are); anything else as it is."""
    return value[()] if isinstance(value, np.ndarray) and value.ndim == 0 else value


def _as_float(number) -> float:
    """``number`` as a float: an integer past float's range (10**400) is infinite, as a residual that
    large is (it fails the check)."""
    try:
        return float(number)
    except OverflowError:
        return math.inf if number > 0 else -math.inf
