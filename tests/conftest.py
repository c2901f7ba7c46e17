"""Fixtures of the whole suite."""
import os

# Tile sizes tuned on this machine (tiledsl tune, in the user's cache) must not change what
# the tests run: runs and explain ignore them. Tests of tuning unset this themselves.
os.environ["TILEDSL_NO_TUNE"] = "1"
