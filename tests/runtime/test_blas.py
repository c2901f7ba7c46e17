"""The BLAS/LAPACK bindings (runtime/blas.py): found without importing ``scipy.linalg``, which
the user's code may still import, whole, after them."""
import subprocess
import sys

import pytest

FRESH_PROCESS = """
import sys
import numpy as np
from tiledsl.runtime import blas, kernels
blas.load()
print("scipy.linalg" in sys.modules)
a = np.asfortranarray(np.random.default_rng(0).standard_normal((40, 40)))
spd = a @ a.T + 40 * np.eye(40)
tile = np.asfortranarray(spd.copy())
kernels.potrf(tile)
import scipy.linalg
import scipy.linalg.cython_blas
print(scipy.linalg.cython_blas is blas._cython_module("blas"), "dgemm" in scipy.linalg.cython_blas.__pyx_capi__)
print(np.allclose(np.tril(tile), scipy.linalg.cholesky(spd, lower=True)))
"""


@pytest.mark.timeout(60)
def test_the_routines_load_without_scipy_linalg_which_imports_whole_after_them():
    """Importing ``scipy.linalg`` cost every process that runs kernels a quarter of a second; loaded
    from its file, SciPy's Cython module must still be the one a later import of the package finds."""
    run = subprocess.run([sys.executable, "-c", FRESH_PROCESS], capture_output=True, text=True, timeout=50)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["False", "True", "True", "True"], run.stdout
