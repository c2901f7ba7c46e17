"""The ``tiledsl`` command line: one module per command (cli dispatches; explain, graph,
plot, bench, tune; jobs launches MPI jobs). Commands use the compiler and the runtime;
neither uses them."""


def main() -> int:
    """The ``tiledsl`` program: :func:`.cli.main`, imported here so that a Ctrl-C while the
    libraries load (numpy, scipy, lark: a second or so) is a quiet end too."""
    import sys

    try:
        from .cli import main as command_line
    except KeyboardInterrupt:
        print("tiledsl: interrupted", file=sys.stderr)
        return 130
    return command_line()
