"""GIL-releasing ctypes bindings to the BLAS/LAPACK that SciPy ships.

``scipy.linalg.blas`` / ``scipy.linalg.lapack`` hold the GIL for the whole call, so
worker threads calling them do not run in parallel. ``scipy.linalg.cython_blas`` and
``cython_lapack`` export plain C function pointers (as PyCapsules in ``__pyx_capi__``);
calling those through :mod:`ctypes` releases the GIL for the duration of the foreign
call, which is what lets the runtime's CPU workers run kernels on all cores.

Every routine keeps the Fortran calling convention: the functions below take the
routine's argument list in LAPACK order, *without* the trailing ``info`` of LAPACK
routines. Arguments are marshalled by type: ``str`` -> ``char*``, ``int`` -> ``int*``,
``float`` -> ``double*``, :class:`numpy.ndarray` -> pointer to its first element (the
caller passes the leading dimension explicitly), :class:`ctypes.c_void_p` -> that raw
address (the caller keeps the memory alive). LAPACK routines return their
``info`` (>= 0); a negative ``info`` (a bad argument, i.e. a bug in the caller)
raises :class:`ValueError`. The routine that is a Fortran function (``dlange``)
returns its double.
"""
from __future__ import annotations

import ctypes
import functools
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import threading

import numpy as np

from .world import HeldInterrupts, libraries_loading, release_after_blas

_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _foreign(library: str, name: str, restype=None):
    """The C function ``name`` exported by SciPy's cython module of ``library`` (``blas`` or
    ``lapack``), as a ctypes callable.

    CFUNCTYPE (not PYFUNCTYPE) is what makes ctypes drop the GIL around the call.
    No argtypes are declared: :func:`_by_reference` already turns every argument into
    a pointer, and skipping ctypes' per-argument conversion halves the call overhead.
    ``restype`` is ctypes.c_double for the routines that are Fortran functions.
    """
    capsule = _cython_module(library).__pyx_capi__[name]
    function = ctypes.CFUNCTYPE(restype)(_capsule_pointer(capsule, _capsule_name(capsule)))
    function.argtypes = None
    return function


@functools.cache
def _cython_module(library: str):
    """SciPy's ``scipy.linalg.cython_<library>``, loaded from its file where ``scipy.linalg`` is not
    imported yet: importing that package costs a quarter of a second (NumPy's testing, f2py and
    array-API modules) in every process that runs kernels, which use none of it. Cython gives a
    later import of the package the same module object, found anew in ``sys.modules``."""
    name = f"scipy.linalg.cython_{library}"
    with _loading:
        if "scipy.linalg" not in sys.modules and name not in sys.modules:
            try:
                return _module_from_file(name)
            except Exception:  # an unusual SciPy install: the usual import says what is wrong, if anything
                sys.modules.pop(name, None)
        return importlib.import_module(name)


_loading = threading.Lock()


def _module_from_file(name: str):
    import scipy

    package, _, leaf = name.rpartition(".")
    folder = os.path.join(scipy.__path__[0], *package.split(".")[1:])
    found = importlib.machinery.PathFinder.find_spec(leaf, [folder])
    spec = importlib.util.spec_from_file_location(name, found.origin)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules.pop(name, None)  # Cython put it there: its package's import must find it as a submodule of its own
    return module


@functools.lru_cache(maxsize=4096, typed=True)
def _scalar(value):
    """A pointer to a C char/int/double holding ``value``.

    Cached because kernels make thousands of small calls (the LU base case) where
    building ctypes scalars costs more than the foreign call; sharing them between
    threads is safe since BLAS/LAPACK never write their scalar input arguments.
    """
    if isinstance(value, str):
        return ctypes.byref(ctypes.c_char(value.encode()))
    if isinstance(value, (int, np.integer)):
        return ctypes.byref(ctypes.c_int(int(value)))
    if isinstance(value, (float, np.floating)):
        return ctypes.byref(ctypes.c_double(float(value)))
    raise TypeError(f"cannot pass {type(value).__name__} to BLAS/LAPACK")


def _by_reference(args) -> list:
    """The ctypes pointers for a Fortran argument list (see the module docstring)."""
    pointers = []
    for arg in args:
        if isinstance(arg, np.ndarray):
            # The ndarray stays referenced by the caller's argument tuple for the whole
            # foreign call, so its buffer cannot be freed underneath BLAS.
            pointers.append(ctypes.c_void_p(arg.ctypes.data))
        elif isinstance(arg, ctypes.c_void_p):
            pointers.append(arg)
        else:
            pointers.append(_scalar(arg))
    return pointers


def _blas(name: str, library: str = "blas", restype=None):
    """A Python function calling routine ``name`` (BLAS, or a LAPACK routine without
    ``info``) with marshalled arguments; it returns what the routine returns."""
    function = _resolved(library, name, restype)

    def call(*args):
        return function()(*_by_reference(args))

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"BLAS {name.upper()} (Fortran argument order)."
    return call


def _lapack(name: str):
    """A Python function calling LAPACK routine ``name``; appends ``info`` and returns it."""
    function = _resolved("lapack", name)

    def call(*args) -> int:
        info = ctypes.c_int(0)
        function()(*_by_reference(args), ctypes.byref(info))
        if info.value < 0:
            raise ValueError(f"{name}: argument {-info.value} had an illegal value")
        return info.value

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"LAPACK {name.upper()} (Fortran argument order, info returned)."
    return call


_ROUTINES = []  # each routine's finder (see _resolved)


def _resolved(library: str, name: str, restype=None):
    """A function returning the routine's ctypes callable, found on its first call: importing
    SciPy's linalg takes a seventh of a second, which processes that run no kernel (a job's
    launcher, ``check``, ``explain``) skip."""
    finder = functools.cache(lambda: _foreign(library, name, restype))
    _ROUTINES.append(finder)
    return finder


def load() -> None:
    """Find every routine now: before a run's clock starts rather than in its first kernels,
    and before threadpoolctl limits BLAS's threads (it sees only the libraries loaded). The first
    load is watched (:func:`.world.libraries_loading`)."""
    global _loaded
    if not _loaded:
        # a Ctrl-C while SciPy's modules load is held until they have: raised inside a Cython module's set-up,
        # it was dropped without a word, and the run went on to succeed (1 in 8 at 10 ms after a run's fork);
        # under ulimit -v, OpenBLAS raises SIGINT where it cannot start its threads: said as what it is
        held = HeldInterrupts()
        try:
            with libraries_loading():
                for finder in _ROUTINES:
                    finder()
        except BaseException:
            held.release(act=False)
            raise
        release_after_blas(held)
        _loaded = True


_loaded = False  # every routine found


# Argument lists in Fortran order (LAPACK's trailing info omitted).
dgemm = _blas("dgemm")  # transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc
dsyrk = _blas("dsyrk")  # uplo, trans, n, k, alpha, a, lda, beta, c, ldc
dtrsm = _blas("dtrsm")  # side, uplo, transa, diag, m, n, alpha, a, lda, b, ldb
dsymm = _blas("dsymm")    # side, uplo, m, n, alpha, a, lda, b, ldb, beta, c, ldc
dsyr2k = _blas("dsyr2k")  # uplo, trans, n, k, alpha, a, lda, b, ldb, beta, c, ldc
dtrmm = _blas("dtrmm")    # side, uplo, transa, diag, m, n, alpha, a, lda, b, ldb
dscal = _blas("dscal")    # n, alpha, x, incx
dger = _blas("dger")      # m, n, alpha, x, incx, y, incy, a, lda
# norm ('M' max |a_ij|, 'F' Frobenius, ...), m, n, a, lda, work -> the norm
dlange = _blas("dlange", "lapack", ctypes.c_double)
dlaswp = _blas("dlaswp", "lapack")  # n, a, lda, k1, k2, ipiv (int32, 1-based), incx

dpotrf = _lapack("dpotrf")    # uplo, n, a, lda
dtrtri = _lapack("dtrtri")    # uplo, diag, n, a, lda
dlauum = _lapack("dlauum")    # uplo, n, a, lda
dgetrf = _lapack("dgetrf")    # m, n, a, lda, ipiv[min(m,n)] (int32)
dgeqrf = _lapack("dgeqrf")    # m, n, a, lda, tau[min(m,n)], work[lwork], lwork
dgeqrt = _lapack("dgeqrt")    # m, n, nb, a, lda, t, ldt, work[nb*n]
dgemqrt = _lapack("dgemqrt")  # side, trans, m, n, k, nb, v, ldv, t, ldt, c, ldc, work[n*nb]
dtpqrt = _lapack("dtpqrt")    # m, n, l, nb, a, lda, b, ldb, t, ldt, work[nb*n]
# side, trans, m, n, k, l, nb, v, ldv, t, ldt, a, lda, b, ldb, work[n*nb]
dtpmqrt = _lapack("dtpmqrt")
