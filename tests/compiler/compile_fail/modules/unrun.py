"""Kernels whose body a call does not run (e212_body_never_runs.tile)."""


def tiles(A):
    for row in A:
        yield row


async def later(A):
    A += 1


def fine(A):
    def inner():
        yield A  # a generator inside is no matter: fine itself runs
    A += 1
