"""The panel kernel of the left-looking Cholesky factorization (docs/tutorial.md, part 2).

A user kernel module for ``docs/examples/left_cholesky.tile``. tiledsl calls
``update`` with its arguments in the order of the ``kernel`` declaration: a
PANEL (a range of tiles, here a row of them) as a Python list of arrays, left to
right; a tile as one array; a char value as a one-character str, a float value
as a Python float. Every value comes, the declared defaults filled in.

One body serves the host and the GPUs: ``array_module`` gives the array library
of its argument, numpy on the host (and on the emulated GPU backend), CuPy on a
GPU. ``update_gpu`` names the GPU body; without it, a run with ``--gpus`` would
run every update on the host, its tiles copied there and back.

Threads: the work is one matrix product, and numpy's matmul releases the GIL.
"""
from tiledsl.runtime import array_module


def update(P, Q, C, uplo, alpha):
    """C <- C + alpha·P·Qᵀ, with P = [P₀ P₁ …] and Q = [Q₀ Q₁ …] two row panels whose tiles
    have the same widths; uplo "A" updates all of C, "L" its lower triangle only (a diagonal tile)."""
    xp = array_module(C)
    product = xp.hstack(P) @ xp.hstack(Q).T  # one product over the whole row of tiles
    if uplo == "L":
        product = xp.tril(product)
    C += alpha * product


update_gpu = update  # the same body on a GPU, where xp is cupy and the tiles CuPy arrays
