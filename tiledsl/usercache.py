"""Where tiledsl keeps what it can rebuild: ``$XDG_CACHE_HOME/tiledsl/<kind>``.

Compiled drivers (``drivers``), tuned settings (``tune``) and the parser's tables
(``grammar``) live there. Neither compiler nor runtime: both stages import it.
"""
from __future__ import annotations

import os
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
