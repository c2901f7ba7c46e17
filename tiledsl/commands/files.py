"""Output files of the commands (``compile -o``, ``graph -o``, ``plot -o``, ``simulate --trace``),
written whole or not at all: into a new file beside the target, renamed over it once complete, so a
full disk or a failed writer leaves the file that was there as it was."""
from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


@contextlib.contextmanager
def replacing(target):
    """A new empty file's path beside ``target`` (what a link leads to: the link is kept), with
    ``target``'s suffix for writers that read the format from it; renamed to ``target`` when the
    block ends normally, removed when it raises."""
    path = Path(os.path.realpath(target))
    temporary = path.with_name(f".{path.stem}-{os.getpid()}-{secrets.token_hex(4)}.partial{path.suffix}")
    os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # mode as the umask says
    try:
        if path.is_file():  # it replaces a file: with that file's mode, as writing into it would
            os.chmod(temporary, path.stat().st_mode & 0o7777)
        yield temporary
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
