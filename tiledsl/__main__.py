"""``python -m tiledsl``: the ``tiledsl`` command, for an environment whose scripts are not on PATH."""
import sys

from .commands import main

sys.exit(main())
