"""Output files of the commands (``compile -o``, ``graph -o``, ``plot -o``, ``simulate --trace``),
written whole or not at all: into a new file beside the target, renamed over it once complete, so a
full disk or a failed writer leaves the file that was there as it was."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..runtime.outputs import temporary_beside


@contextlib.contextmanager
def replacing(target):
    """A new empty file's path beside ``target`` (:func:`~tiledsl.runtime.outputs.temporary_beside`,
    as a run's outputs are written), with ``target``'s suffix for writers that read the format from it;
    renamed to ``target`` (what a link leads to) when the block ends normally, removed when it raises."""
    temporary = Path(temporary_beside(target, keep_suffix=True))
    try:
        yield temporary
        os.replace(temporary, os.path.realpath(target))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
