"""What a compiled driver and the runtime that runs it agree on.

:data:`DRIVER_FORMAT` numbers the drivers' dealings with the runtime: a driver states the
format it was generated for and stops with a message on a runtime of an older one (a driver
compiled on one machine, run by an older tiledsl on a cluster). Raise it whenever generated
drivers come to need what older runtimes lack: a new keyword of ``Program`` or ``Call``, a
new name imported from ``tiledsl.runtime``.

:func:`source_digest` is how a driver knows whether its ``.tile`` file changed since: the
compiler records it in the driver (``Program.source_digest``), the runtime computes it again
from the file. It is of the text as the compiler reads it (a byte-order mark dropped, CRLF and
CR line ends as LF), so that a checkout that rewrites line ends changes nothing.

:func:`hiding` is what a driver, or ``tiledsl run DRIVER.py``, says of a file beside a script
that is named as a module of Python's own (``copy.py``): Python imports it in that module's place.

Only os and sys, which Python has loaded before any script, are imported at the top: a driver
whose runtime failed to import reads this module then.
"""
import os
import sys

DRIVER_FORMAT = 3  # 3: main takes the program alone; 2: a loop's share terms are a function (runtime.share.among)


def source_digest(data: bytes) -> str:
    """The first 16 hex digits of the SHA-256 of ``data``, a ``.tile`` file's bytes, read as text."""
    import hashlib  # here: a hashlib.py beside a driver must not stop its message (hiding)

    text = data.removeprefix(b"\xef\xbb\xbf").replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return hashlib.sha256(text).hexdigest()[:16]


def hiding(folder: str, modules) -> str | None:
    """What to say of a file in ``folder`` (a script's, first on the import path) named as one of
    ``modules`` that is Python's own (``copy.py`` for copy), which an import of that module would
    load in its place; None when there is none."""
    for name in sorted(set(modules) & sys.stdlib_module_names):
        for path in (os.path.join(folder, f"{name}.py"), os.path.join(folder, name, "__init__.py")):
            if os.path.isfile(path):
                shown = os.path.dirname(path) if path.endswith("__init__.py") else path
                return (f"{shown} hides Python's module {name}, which tiledsl's runtime imports (a script's folder "
                        f"comes first on the import path): rename it, or move it out of {folder or '.'}")
    return None
