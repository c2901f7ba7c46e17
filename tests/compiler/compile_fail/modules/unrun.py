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


if __name__ == "__main__":  # (tester x) never run as the run imports the module
    def scripted(A):
        A += 1
else:
    def imported(A):
        A += 1
