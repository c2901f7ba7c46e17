"""tiledsl: a language and compiler for tile algorithms, and the runtime that runs them.

``tiledsl.load(path)`` compiles a ``.tile`` program and returns an object whose
``run(A=array, tiles={...}, params={...})`` executes it (see :mod:`tiledsl.api`). The compiler is imported
lazily so that ``tiledsl.runtime`` (all a generated driver needs) stays free of
lark and jinja2.
"""
import os as _os

__version__ = "0.1.0"
__all__ = ["load", "note", "TiledslError", "TiledslWarning"]

# A checkout imported as it is, not through its install's mapping (``pip install .``, then Python
# started in the checkout, whose tiledsl/ then comes first on sys.path): the subpackages that the
# install maps from the checkout's top level (runtime/, grammars/, programs/) are looked for there.
_TOP = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if (not _os.path.isdir(_os.path.join(__path__[0], "runtime"))
        and _os.path.isfile(_os.path.join(_TOP, "runtime", "__init__.py"))):
    __path__.append(_TOP)


def load(path):
    """Compile the ``.tile`` program at ``path`` into a runnable :class:`tiledsl.api.Loaded`."""
    from .api import load as _load

    return _load(path)


def note(text: str) -> None:
    """Called by a kernel while its task runs: say ``text`` when the run is over, as a warning
    naming the rank, the ``.tile`` line, the kernel and its tiles (once per call site, with a count
    of the other tasks there that said something). See :mod:`tiledsl.runtime.notes`."""
    from .runtime.notes import note as _note

    _note(text)


def __getattr__(name):
    """``tiledsl.TiledslError`` and ``tiledsl.TiledslWarning``, the API's, without importing the
    compiler up front."""
    if name in ("TiledslError", "TiledslWarning"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'tiledsl' has no attribute {name!r}")


def __dir__():
    """The module's names with the two :func:`__getattr__` provides (a notebook completes them)."""
    return sorted({*globals(), "TiledslError", "TiledslWarning"})
