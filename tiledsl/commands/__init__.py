"""The ``tiledsl`` command line: one module per command (cli dispatches; explain, graph,
plot, bench, tune; jobs launches MPI jobs). Commands use the compiler and the runtime;
neither uses them."""


def main() -> int:
    """The ``tiledsl`` program: :func:`.cli.main`, imported here so that a Ctrl-C while the
    libraries load (numpy, scipy, lark: a second or so) is a quiet end too."""
    import signal

    # Not KeyboardInterrupt: raised inside a C extension's import (numpy's), it comes out as
    # an ImportError with a traceback. Until the commands are loaded, Ctrl-C ends at once.
    signal.signal(signal.SIGINT, _interrupted_while_loading)
    from .cli import main as command_line

    signal.signal(signal.SIGINT, signal.default_int_handler)
    return command_line()


def _interrupted_while_loading(signum, frame):
    import os

    os.write(2, b"tiledsl: interrupted\n")
    os._exit(130)
