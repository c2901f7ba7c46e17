"""Where tiledsl keeps what it can rebuild: ``$XDG_CACHE_HOME/tiledsl/<kind>``.

Compiled drivers (``drivers``), tuned settings (``tune``) and the parser's tables
(``grammar``) live there. Neither compiler nor runtime: both stages import it.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


def cache_dir(kind: str) -> Path:
    """``$XDG_CACHE_HOME/tiledsl/<kind>`` (``~/.cache/tiledsl/<kind>`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # unset, empty or relative: ignored, as the XDG specification says
        base = _home() / ".cache"
    return Path(base) / "tiledsl" / kind


def _home() -> Path:
    """The user's home: ``$HOME``, or the password database's where it is empty or relative
    (``HOME=`` would put the cache at the file system's root, as ``~`` is then ``/``)."""
    home = os.environ.get("HOME", "")
    if not os.path.isabs(home):
        try:
            import pwd

            home = pwd.getpwuid(os.getuid()).pw_dir
        except (ImportError, KeyError):  # no such database (Windows), or no entry for this user
            return Path.home()
    return Path(home)


def read_bytes(path) -> bytes:
    """The bytes of the cache file at ``path``: an OSError where it is no regular file, as where it
    is missing (a fifo put there blocked the read for ever)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
        with open(descriptor, "rb", closefd=False) as opened:
            return opened.read()
    finally:
        os.close(descriptor)
