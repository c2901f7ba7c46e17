"""tiledsl's runtime: what a generated driver imports, and nothing from the compiler.

The public surface is the static program description (:class:`Program` and its
parts) and :func:`main`, the command line of a driver; :func:`execute` runs a
driver module from Python; :func:`array_module` serves a user kernel's GPU body
(``NAME_gpu``), written once for numpy and CuPy. The runtime never imports lark,
jinja2 or the compiler.
"""
import os as _os
import signal as _signal

if _os.environ.get("TILEDSL_JOB_DIR"):  # a rank of `tiledsl run --np` (world.JOB_DIR_VARIABLE)
    # Ctrl-C while numpy and SciPy load ends the rank at once, without a traceback;
    # the run gives SIGINT back to Python's KeyboardInterrupt as it starts (entry._run_and_report)
    if _signal.getsignal(_signal.SIGINT) != _signal.SIG_IGN:  # (a job started ignoring it is not stopped by it)
        _signal.signal(_signal.SIGINT, lambda signum, frame: _os._exit(128 + signum))
    from .world import record_start as _record_start
    _record_start()

from .world import libraries_loading as _libraries_loading  # noqa: E402
from .world import share_malloc_arenas as _share_malloc_arenas  # noqa: E402

_share_malloc_arenas()  # under ulimit -v, before numpy's, SciPy's and MPI's threads make arenas of their own

with _libraries_loading():  # after the handler: these imports are the slow part
    from .dataflow import Event, Loop
    from .panels import array_module
    from .launch import execute
    from .entry import main
from .options import Options
from .reporting import RunResult
from .world import UsageError
from ..drivercontract import DRIVER_FORMAT
from .program import Call, CheckDecl, MatrixDecl, Program, Tiling, WorkspaceDecl, takes_part
from .share import ANY, AT, DIV, MINUS, MOD, PLUS

__all__ = ["ANY", "AT", "Call", "CheckDecl", "DIV", "DRIVER_FORMAT", "Event", "Loop", "MINUS", "MOD", "MatrixDecl",
           "Options",
           "PLUS", "Program", "RunResult", "Tiling", "UsageError", "WorkspaceDecl", "array_module", "execute", "main", "takes_part"]
