"""The kernel table of a run: the prelude's kernels and the user's, loaded from the Python
module a program names with ``use``."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from .world import RankError, UsageError

def kernels(program, driver) -> dict:
    from .kernels import CPU_KERNELS

    table = dict(CPU_KERNELS)
    if program.kernel_module:
        module = _load_kernel_module(program, driver)
        for call in program.calls:
            if call.kernel not in CPU_KERNELS:
                body = getattr(module, call.kernel, None)
                if not callable(body):
                    raise UsageError(f"kernel module {program.kernel_module} defines no function {call.kernel}")
                table[call.kernel] = body
    return table


def _load_kernel_module(program, driver):
    bases = [Path(program.source).parent, Path(getattr(driver, "__file__", ".")).parent, Path.cwd()]
    for base in bases:
        path = base / program.kernel_module
        if path.is_file():
            spec = importlib.util.spec_from_file_location(f"tiledsl_kernels_{path.stem}", path)
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except (Exception, SystemExit) as error:  # the user's code: a failure of the run, not ours
                what = (f"called sys.exit({error.code!r})" if isinstance(error, SystemExit)
                        else f"raised {type(error).__name__}: {error}")
                raise RankError(f"kernel module {path} {what} while being loaded") from None
            return module
    raise UsageError(f"kernel module {program.kernel_module} not found next to {program.source}")

