"""The digest by which a compiled driver knows whether its ``.tile`` file changed since.

The compiler records it in the driver (``Program.source_digest``); the runtime computes it
again from the file when the driver runs. It is of the text as the compiler reads it (a
byte-order mark dropped, CRLF and CR line ends as LF), so that a checkout that rewrites
line ends changes nothing.
"""
import hashlib


def source_digest(data: bytes) -> str:
    """The first 16 hex digits of the SHA-256 of ``data``, a ``.tile`` file's bytes, read as text."""
    text = data.removeprefix(b"\xef\xbb\xbf").replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return hashlib.sha256(text).hexdigest()[:16]
