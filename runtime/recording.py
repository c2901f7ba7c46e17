"""Stand-in runtimes that record what a driver's loop nest would submit.

Running ``generate`` against one of these costs only the loop nest's integer
arithmetic. :class:`Everyone` is a rank number equal to every rank, so the
driver submits every task of the program (``tiledsl explain``, the reflector
list of the QR check); a real rank number records that rank's share.
"""
from __future__ import annotations


class Everyone:
    """A rank number equal to every rank: the driver then submits every task."""

    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


class Recorder:
    """Records ``(call, tiles, regions)`` of every submit whose kernel ``keep`` accepts, and
    ``events``: the same submits and the released tiles, in program order."""

    def __init__(self, matrices: dict, rank, keep=lambda call: True):
        self.matrices = matrices
        self.rank = rank
        self.keep = keep
        self.submitted: list = []
        self.events: list = []  # ("task", (call, tiles, regions)) or ("release", tile)
        self.count = 0

    def matrix(self, name):
        return self.matrices[name]

    def submit(self, call, tiles, regions, priority):
        self.count += 1
        if self.keep(call):
            self.submitted.append((call, tiles, regions))
            self.events.append(("task", (call, tiles, regions)))

    def release(self, tile):
        self.events.append(("release", tile))


def record(driver, matrices: dict, params, rank=None, keep=lambda call: True) -> Recorder:
    """Run the driver's loop nest for ``rank`` (None: every rank) and return what it submitted."""
    recorder = Recorder(matrices, Everyone() if rank is None else rank, keep)
    driver.generate(recorder, params)
    return recorder
