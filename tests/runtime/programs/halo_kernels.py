"""Kernels of halo.tile (each reads the edges of other tiles: one row or one column) and of
outpart.tile (stamp writes one row of another tile)."""


def edges(first, last, u):
    """U's first row averaged with the two rows, the rest scaled."""
    u[0, :] = (u[0, :] + first[0, :] + last[0, :]) / 3.0
    u[1:, :] *= 0.75


def blend(column, u):
    """U's last column moved towards the column (as far as both reach)."""
    rows = min(u.shape[0], column.shape[0])
    u[:rows, -1] = 0.5 * (u[:rows, -1] + column[:rows, 0])


def mix(v, u):
    """U's leading square block plus a quarter of V's."""
    rows, cols = min(u.shape[0], v.shape[0]), min(u.shape[1], v.shape[1])
    u[:rows, :cols] += 0.25 * v[:rows, :cols]


def stamp(u, row):
    """The first row of another tile set to U's column means (written, not read); U halved."""
    row[0, :] = u.mean(axis=0)
    u *= 0.5


# GPU bodies (array code that CuPy runs as numpy does); mix has none, so it runs on the host
edges_gpu = edges
blend_gpu = blend
stamp_gpu = stamp
