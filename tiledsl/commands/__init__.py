"""The ``tiledsl`` command line: one module per command (cli dispatches; explain, graph,
plot, bench, tune; jobs launches MPI jobs). Commands use the compiler and the runtime;
neither uses them."""

from ..drivercontract import blas_on_one_thread_unless_set

blas_on_one_thread_unless_set()  # before any command loads numpy

#: what run, explain, graph, simulate, bench and tune take as PROGRAM (check and compile take no driver)
PROGRAM_HELP = "a .tile file, a shipped program's name, or a driver compiled from one (DRIVER.py)"


def main() -> int:
    """The ``tiledsl`` program: :func:`.cli.main`, imported here so that a Ctrl-C while the
    libraries load (numpy, scipy, lark: a second or so) is a quiet end too."""
    import signal
    import sys

    # Not KeyboardInterrupt: raised inside a C extension's import (numpy's), it comes out as
    # an ImportError with a traceback. Until a run sets its own handlers, a stopping signal
    # ends the command at once, saying so; Ctrl-C is a KeyboardInterrupt again once loaded.
    # (a signal the command was started ignoring, as under nohup, stays ignored)
    ignored = {signum for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
               if signal.getsignal(signum) == signal.SIG_IGN}
    global _json_wanted
    given = sys.argv[1:sys.argv.index("--") if "--" in sys.argv else None]
    _json_wanted = "--json" in given and ("run" if given[:1] == ["run"] else "other")
    for signum in {signal.SIGINT, signal.SIGTERM, signal.SIGHUP} - ignored:
        signal.signal(signum, _stopped)
    try:
        from .cli import main as command_line
    except ModuleNotFoundError as error:  # a dependency the environment lacks (lark, numpy): no traceback
        from ..packages import missing_package

        if missing_package(error) is None:
            raise
        print(f"tiledsl: error: {missing_package(error)}", file=sys.stderr)
        return 2

    if signal.SIGINT not in ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    from ..runtime.entry import process_status

    return process_status(command_line())


def _stopped(signum, frame):
    import os
    import signal

    name = signal.Signals(signum).name
    try:
        os.write(2, f"tiledsl: stopped by {name}\n".encode())
        if _json_wanted:  # --json's failure object, as reporting.failure_json words it, without loading it
            ranks = '"np": null, ' if _json_wanted == "run" else ""
            os.write(1, f'{{"program": null, "n": null, {ranks}"ok": false, "passed": null, '
                        f'"error": "stopped by {name}"}}\n'.encode())
    except OSError:  # SIGHUP: the terminal may be gone
        pass
    os._exit(128 + signum)


#: "run" or "other" when the command line has --json, whose failure object a stop while loading prints
_json_wanted = False
