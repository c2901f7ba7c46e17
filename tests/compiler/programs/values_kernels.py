"""Kernels of the value-argument and panel tests: each writes what it received into its tile."""


def put(A, k, x, c):
    A[0, 0], A[0, 1], A[0, 2] = k, x, ord(c)


def append_digit(A, k):
    A[0, 0] = A[0, 0] * 10 + k


def column_sums(P, S):
    """S (1 × w) <- the column sums of the panel P (a list of tiles, top to bottom)."""
    S[0, :] = sum(tile.sum(axis=0) for tile in P)


def row_sums(P, S):
    """S (h × 1) <- the row sums of the row panel P (a list of tiles, left to right)."""
    S[:, 0] = sum(tile.sum(axis=1) for tile in P)


def scale_panel(P, alpha):
    for tile in P:
        tile *= alpha
