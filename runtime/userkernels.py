"""The kernel table of a run: the prelude's kernels and the user's, loaded from the Python
module a program names with ``use``.

A user kernel is a Python function the module itself defines (looked up in the
module's own namespace, never among the attributes every module object has, such as
``__eq__`` or ``__class__``). A module that is missing or not a ``.py`` file is a usage
error; one whose own code fails as it loads (a syntax error, an import that fails, a
``SystemExit``) is this rank's failure (:class:`~.world.RankError`: the job is aborted),
naming the file, the line and the cause, never a traceback.
"""
from __future__ import annotations

import importlib.util
import traceback
import types
from pathlib import Path

from .world import RankError, UsageError


def kernels(program, driver) -> dict:
    from .kernels import CPU_KERNELS

    table = dict(CPU_KERNELS)
    if program.kernel_module:
        module = _load_kernel_module(program, driver)
        for call in program.calls:
            if call.kernel not in CPU_KERNELS:
                body = vars(module).get(call.kernel)
                if not isinstance(body, types.FunctionType):
                    raise UsageError(f"kernel module {program.kernel_module} defines no function {call.kernel}"
                                     f" (for the call {call.text} at line {call.line})")
                table[call.kernel] = body
    return table


def _load_kernel_module(program, driver):
    bases = [Path(program.source).parent, Path(getattr(driver, "__file__", ".")).parent, Path.cwd()]
    for base in bases:
        path = base / program.kernel_module
        if path.is_file():
            return _import(path)
    raise UsageError(f"kernel module {program.kernel_module} not found next to {program.source}")


def _import(path: Path):
    """Execute the kernel module at ``path``; its failures are this rank's, naming the file and line."""
    if path.suffix != ".py":
        raise UsageError(f"kernel module {path} is not a Python file (its name must end in .py)")
    spec = importlib.util.spec_from_file_location(f"tiledsl_kernels_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as error:
        raise RankError(f"kernel module {path}:{error.lineno}: SyntaxError: {error.msg}") from None
    except (Exception, SystemExit) as error:  # a failing import, a SystemExit: the module's mistake
        line = next((frame.lineno for frame in reversed(traceback.extract_tb(error.__traceback__))
                     if Path(frame.filename).resolve() == path.resolve()), None)
        where = f"{path}:{line}" if line else str(path)
        what = (f"called sys.exit({error.code!r}) while being loaded" if isinstance(error, SystemExit)
                else f"{type(error).__name__}: {error}")
        raise RankError(f"kernel module {where}: {what}") from None
    return module
