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
"""
import hashlib

DRIVER_FORMAT = 3  # 3: main takes the program alone; 2: a loop's share terms are a function (runtime.share.among)


def source_digest(data: bytes) -> str:
    """The first 16 hex digits of the SHA-256 of ``data``, a ``.tile`` file's bytes, read as text."""
    text = data.removeprefix(b"\xef\xbb\xbf").replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return hashlib.sha256(text).hexdigest()[:16]
