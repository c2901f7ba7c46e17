"""Machine files for ``tiledsl simulate --machine NAME`` (see :mod:`tiledsl.simulation.machine`)."""
