"""Kernels and a check of the examples of the language reference (docs/language.md).

A user kernel module: tiledsl calls each function with its arguments in the
order of the ``kernel`` declaration, a tile as a 2-D float64 column-major array,
a panel (a range of tiles) as a list of them, an int, a float or a char value as
a Python int, float or one-character str. Kernels write their ``out`` and
``inout`` arguments in place. ``NAME_gpu`` is kernel NAME's body on a GPU, where
the arrays are CuPy's (numpy's on the emulated backend); ``array_module`` gives
the library of an argument, so that one body serves both. A check function
takes the matrices before and after the run and returns a residual.
"""
import numpy as np

from tiledsl.runtime import array_module
from tiledsl.runtime.checks import scaled


def axpby(X, Y, alpha, beta):
    """Y <- alpha·X + beta·Y (in place; numpy and CuPy alike)."""
    Y *= beta
    Y += alpha * X


axpby_gpu = axpby  # the same operators on CuPy arrays


def sum_squares(P, S):
    """S (1×w) <- S + the sums of squares of the columns of the column panel P (tiles top to bottom)."""
    xp = array_module(S)
    stacked = xp.vstack(P)
    S[0, :] += (stacked * stacked).sum(axis=0)


sum_squares_gpu = sum_squares


def axpby_residual(before, after):
    """‖Y − (0.5·X₀ − Y₀)‖₁ / (‖0.5·X₀ − Y₀‖₁·n·ε): the result of program axpby_tiles."""
    expected = 0.5 * before["X"] - before["Y"]
    difference = np.linalg.norm(after["Y"] - expected, 1)
    return scaled(difference, np.linalg.norm(expected, 1), expected.shape[1])
