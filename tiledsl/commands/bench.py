"""``tiledsl bench``: tiledsl against the reference libraries, alternated in one run.

The reference of a program is the LAPACK or BLAS routine (scipy's, given as many
BLAS threads as tiledsl has workers) that computes what its check verifies, with the
options its qualifiers give (:func:`reference_for`): ``solve`` is dgesv, ``solve(symmetric
A, …)`` dposv, ``solve(lower A, …)`` dtrsm; ``inverse`` dgetri, dpotri or dtrtri;
``product(C, A, B)`` dgemm with its transposes, dsyrk for a part of C = A·Aᵀ (or Aᵀ·A),
dsymm for a symmetric operand, dtrmm for B = op(L)·B in place; a user check by its
function's name (:data:`BY_NAME`). A program without one is timed alone, and a note says
why. The routine takes the check's matrices (each once, in the check's order, as the
program's inputs make them) and works on them in place, and the
check's options (product's alpha and beta). When dask is installed, what a dask user
would write at several chunk sizes too (its best is reported; a note says why where
no chunk size fits): ``dask.array.linalg`` for a factorization (Cholesky, LU), a solve
or an inverse (solve, solve_triangular, inv: square chunks dividing the order,
:func:`dask_chunks`), ``@`` for a product (the whole of C, where dsyrk computes a
triangle); none for QR (dask's is tall-and-skinny only).
Every implementation runs once untimed, then once per round, rounds alternate, the
best time of each is kept; ratios are tiledsl's GFLOP/s over the reference's.
"""
from __future__ import annotations

import importlib.util
import inspect
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from scipy.linalg import blas, lapack
from threadpoolctl import threadpool_limits

from ..runtime import Options, checks, execute
from ..runtime.launch import run_notes, source
from ..runtime.layout import make_params, matrix_shapes
from ..runtime.options import tile_values
from ..runtime.reporting import (ABOVE_BOUND, count_text, failure_reasons, flop_count, no_rate_reason, rate_number,
                                 ratio_number, seconds_text, settings_text)

DASK_CHUNKS = (512, 1024, 2048)
DASK_SMALLEST = 64  # a chunk smaller is no blocked algorithm to compare with


@dataclass
class Measure:
    name: str
    times: list = field(default_factory=list)
    info: int = 0  # a reference's LAPACK info when it failed on these inputs: its times are not timings

    @property
    def best(self) -> float:
        return min(self.times)


@dataclass(frozen=True)
class Reference:
    """A LAPACK/BLAS routine of scipy's and how to call it on a check's matrices."""

    routine: str
    run: Callable  # run(*matrices, **options), in place on Fortran-ordered copies
    operands: tuple | None = None  # the positions of the check's arguments it takes (None: all)
    #: what dask computes for it: (what it calls, ``make(da, *chunked matrices, **options)``, the dask array
    #: to compute; ``da`` is dask.array); None where dask has no counterpart (QR: its QR is tall-and-skinny only)
    dask: tuple | None = None
    blocked: bool = True  # dask's routine factors a matrix: it takes square chunks of its order only

    def arity(self) -> int:
        """How many matrices the routine takes."""
        parameters = inspect.signature(self.run).parameters.values()
        return sum(p.default is p.empty and p.kind == p.POSITIONAL_OR_KEYWORD for p in parameters)


def _geqrf(a):
    lwork = int(lapack.dgeqrf_lwork(*a.shape)[0])  # the default lwork would run unblocked
    return lapack.dgeqrf(a, lwork=lwork, overwrite_a=1)


def _getrf(a):
    lu, piv, info = lapack.dgetrf(a, overwrite_a=1)
    # info > 0: U(info, info) is exactly zero, and the factorization complete all the same (a singular
    # A is no error, as tiledsl's getrf warns of it): a timing
    return min(info, 0)


def _potri(a, lower: int = 1):
    c, info = lapack.dpotrf(a, lower=lower, overwrite_a=1)
    return info or lapack.dpotri(c, lower=lower, overwrite_c=1)


def _getri(a):
    lu, piv, info = lapack.dgetrf(a, overwrite_a=1)
    lwork = int(lapack.dgetri_lwork(a.shape[0])[0])
    return info or lapack.dgetri(lu, piv, lwork=lwork, overwrite_lu=1)


def _gels(a, b):
    lwork = int(lapack.dgels_lwork(*a.shape, b.shape[1])[0])
    return lapack.dgels(a, b, lwork=lwork, overwrite_a=1, overwrite_b=1)


def _unlike_reference(program) -> str | None:
    """What the program computes otherwise than its reference: an LU without pivots against dgetrf's
    partial pivoting (none where they compute alike)."""
    check = program.check
    if check.user or check.kind != "lu" or len(check.args) > 1:
        return None
    return (f"scipy dgetrf pivots rows (partial pivoting); the program's LU does not (check lu({check.args[0]}) "
            f"names no pivots): its row searches and interchanges are dgetrf's own work")


def lapack_info(returned) -> int:
    """The ``info`` of what a reference returned (scipy's LAPACK wrappers return it last, or a
    wrapper of two calls the first nonzero one); 0 for a BLAS routine's array."""
    if isinstance(returned, tuple):
        returned = returned[-1]
    return returned if isinstance(returned, int) else 0


FACTORIZATIONS = {
    "cholesky": Reference("dpotrf", lambda a: lapack.dpotrf(a, lower=1, overwrite_a=1),
                          dask=("linalg.cholesky", lambda da, a: da.linalg.cholesky(a, lower=True))),
    "lu": Reference("dgetrf", _getrf, dask=("linalg.lu", lambda da, a: da.linalg.lu(a)[2])),
    "qr": Reference("dgeqrf", _geqrf),
}
#: the references of user checks, by (their kernel module's file name, the check function's name): the shipped
#: tsqr's least-squares check (a user's check named so may compute anything: timed alone)
BY_FUNCTION = {("tsqr_kernels.py", "least_squares"): Reference("dgels", _gels)}


@dataclass(frozen=True)
class Operand:
    """What one argument's qualifiers tell a BLAS routine: ``triangle`` 1 lower, 0 upper (None:
    a full matrix; a symmetric one stores its lower triangle unless upper is said)."""

    symmetric: bool
    triangle: int | None
    trans: int
    unit: int

    @classmethod
    def of(cls, words) -> "Operand":
        given = set(words)
        triangle = 0 if "upper" in given else 1 if "lower" in given or "symmetric" in given else None
        return cls("symmetric" in given, triangle, int("transposed" in given), int("unit" in given))

    @property
    def triangular(self) -> bool:
        return self.triangle is not None and not self.symmetric

    def of_dask(self, da, m):
        """op(M) of the dask array ``m``: what these qualifiers say the stored M stands for."""
        if self.symmetric or self.triangular:
            part = da.tril(m) if self.triangle else da.triu(m)
            if self.symmetric:
                part = part + (da.tril(m, -1) if self.triangle else da.triu(m, 1)).T
            elif self.unit:
                part = part - da.diag(da.diag(m)) + da.eye(m.shape[0], chunks=m.chunks[0][0])
            m = part
        return m.T if self.trans else m


def reference_for(check, options: dict | None = None, module: str | None = None) -> Reference | None:
    """The routine that computes what ``check`` verifies, with the options its qualifiers give
    (``options``: the check's values, product's alpha and beta; ``module``: the program's kernel
    module, whose function a user check is); None where no LAPACK/BLAS routine does."""
    if check.user:
        return BY_FUNCTION.get((Path(module or "").name, check.kind))
    if check.kind in FACTORIZATIONS:
        return FACTORIZATIONS[check.kind]
    words = _qualifiers(check)
    operands = [Operand.of(given) for given in words]
    if check.kind == "solve":
        return _solve_reference(operands[0])
    if check.kind == "inverse":
        return _inverse_reference(operands[0])
    if check.kind != "product":
        return None
    return _product_reference(check.args, operands, bool(words[0]), (options or {}).get("beta", 1.0))


def _qualifiers(check) -> tuple:
    """The words before each of the check's arguments (none for those it does not give)."""
    return tuple(check.qualifiers) + ((),) * (len(check.args) - len(check.qualifiers))


def _solve_reference(a: Operand) -> Reference:
    """solve(A, X, B): the reference takes A and B (X is the result, wherever the program keeps it)."""
    if a.symmetric:
        return Reference("dposv", lambda a_, b: lapack.dposv(a_, b, lower=a.triangle, overwrite_a=1, overwrite_b=1),
                         (0, 2), ("linalg.solve", lambda da, a_, b: da.linalg.solve(a.of_dask(da, a_), b, assume_a="pos")))
    if a.triangular:
        return Reference("dtrsm", lambda a_, b: blas.dtrsm(1.0, a_, b, lower=a.triangle, trans_a=a.trans,
                                                            diag=a.unit, overwrite_b=1), (0, 2),
                         ("linalg.solve_triangular", lambda da, a_, b: da.linalg.solve_triangular(
                             a.of_dask(da, a_), b, lower=bool(a.triangle) != bool(a.trans))))
    return Reference("dgesv", lambda a_, b: lapack.dgesv(a_, b, overwrite_a=1, overwrite_b=1), (0, 2),
                     ("linalg.solve", lambda da, a_, b: da.linalg.solve(a.of_dask(da, a_), b)))


def _inverse_reference(a: Operand) -> Reference:
    """inverse(A, X): the reference inverts A in place."""
    def identity(da, a_):
        return da.eye(a_.shape[0], chunks=a_.chunks[0][0])
    if a.symmetric:
        return Reference("dpotrf+dpotri", lambda a_: _potri(a_, a.triangle), (0,),
                         ("linalg.solve", lambda da, a_: da.linalg.solve(a.of_dask(da, a_), identity(da, a_),
                                                                         assume_a="pos")))
    if a.triangular:
        return Reference("dtrtri", lambda a_: lapack.dtrtri(a_, lower=a.triangle, unitdiag=a.unit, overwrite_c=1),
                         (0,), ("linalg.solve_triangular", lambda da, a_: da.linalg.solve_triangular(
                             a.of_dask(da, a_), identity(da, a_), lower=bool(a.triangle) != bool(a.trans))))
    return Reference("dgetrf+dgetri", _getri, (0,), ("linalg.inv", lambda da, a_: da.linalg.inv(a.of_dask(da, a_))))


def _product_reference(names, operands, part_of_c: bool, beta: float) -> Reference | None:
    """product(C, A, B): C = α·op(A)·op(B) + β·C, or its part that ``C``'s qualifier names."""
    c, a, b = names
    _, left, right = operands
    in_place = beta == 0.0  # B = α·op(L)·B: dtrmm has no β, so the check's must be 0
    if in_place and left.triangular and b == c != a:
        return _trmm(left, side=0)
    if in_place and right.triangular and a == c != b:  # A = α·A·op(U)
        return _trmm(right, side=1)
    if c in (a, b) or left.triangular or right.triangular or (left.symmetric and right.symmetric):
        return None
    if part_of_c and a == b and left.trans != right.trans and not left.symmetric:  # a triangle of A·Aᵀ
        return Reference("dsyrk", lambda c_, a_, alpha=1.0, beta=1.0: blas.dsyrk(
            alpha, a_, beta, c_, trans=left.trans, lower=operands[0].triangle, overwrite_c=1),
            dask=_dask_product(left, right, once=True), blocked=False)
    if part_of_c:  # a triangle of a general product: BLAS has no routine for it
        return None
    if left.symmetric or right.symmetric:
        symmetric, other, side = (left, right, 0) if left.symmetric else (right, left, 1)
        if other.trans:
            return None

        def symm(c_, a_, b_, alpha=1.0, beta=1.0):
            return blas.dsymm(alpha, *((a_, b_) if side == 0 else (b_, a_)), beta, c_, side=side,
                              lower=symmetric.triangle, overwrite_c=1)
        return Reference("dsymm", _taking_a_once(symm) if a == b else symm,
                         dask=_dask_product(left, right, once=a == b), blocked=False)

    def gemm(c_, a_, b_, alpha=1.0, beta=1.0):
        return blas.dgemm(alpha, a_, b_, beta, c_, trans_a=left.trans, trans_b=right.trans, overwrite_c=1)
    return Reference("dgemm", _taking_a_once(gemm) if a == b else gemm, dask=_dask_product(left, right, once=a == b),
                     blocked=False)


def _dask_product(left: Operand, right: Operand, once: bool) -> tuple:
    """dask's α·op(A)·op(B) + β·C, on C, A, B (``once``: on C and A, both operands A): the whole of C,
    a part of which (dsyrk's) BLAS computes."""
    def product(da, c_, a_, b_, alpha=1.0, beta=1.0):
        return alpha * (left.of_dask(da, a_) @ right.of_dask(da, b_)) + beta * c_
    return "matmul", ((lambda da, c_, a_, alpha=1.0, beta=1.0: product(da, c_, a_, a_, alpha, beta)) if once
                      else product)


def _taking_a_once(routine):
    """``routine(c, a, b, ...)`` for a product whose two operands are one matrix, which the
    reference takes once (its matrices are the check's, each once)."""
    return lambda c_, a_, alpha=1.0, beta=1.0: routine(c_, a_, a_, alpha, beta)


def _trmm(triangle: Operand, side: int) -> Reference:
    """The in-place triangular product; it takes the matrix written, then the triangle."""
    def product(da, target, t, alpha=1.0, beta=0.0):
        op = triangle.of_dask(da, t)
        return alpha * (op @ target if side == 0 else target @ op)
    return Reference("dtrmm", lambda target, t, alpha=1.0, beta=0.0: blas.dtrmm(
        alpha, t, target, side=side, lower=triangle.triangle, trans_a=triangle.trans, diag=triangle.unit,
        overwrite_b=1), dask=("matmul", product), blocked=False)


def reference_of(program, params) -> tuple[Reference, list, dict] | None:
    """The reference of ``program`` (None without one, or when its matrices are not the ones
    the routine takes), the names of the matrices it takes and the check's options (their
    values with the run's ``params``)."""
    check = program.check
    if check is None:
        return None
    options = check.option_values(params)
    reference = reference_for(check, options, program.kernel_module)
    if reference is None:
        return None
    matrices = [d.name for d in program.matrices]
    taken = check.args if reference.operands is None else [check.args[i] for i in reference.operands]
    names = [name for i, name in enumerate(taken) if name in matrices and name not in taken[:i]]
    return (reference, names, options) if len(names) == reference.arity() else None


def _without_reference(program, params) -> str:
    """Why a program is timed alone (it has no reference, :func:`reference_of`); the check as written,
    its options at their values in a run with ``params`` (product's ``beta = 0``)."""
    check = program.check
    if check is None:
        return "no reference to time against: the program declares no check (a check says what it computes)"
    if check.user:
        return f"no LAPACK/BLAS routine is known for the user check {check.kind}: tiledsl is timed alone"
    text = ", ".join([" ".join((*given, name)) for given, name in zip(_qualifiers(check), check.args)]
                     + [f"{name} = {value:g}" for name, value in check.option_values(params).items()])
    return f"no LAPACK/BLAS routine computes what check {check.kind}({text}) verifies: tiledsl is timed alone"


def inputs_of(driver, options: Options) -> dict:
    """The program's input matrices, as a run with ``options`` makes them (by name): generated,
    or read from an ``--input`` file or the file a ``load`` names."""
    shapes = matrix_shapes(driver, make_params(driver, options))[0]
    made = {}
    for index, decl in enumerate(driver.PROGRAM.matrices):
        rows, cols = shape = shapes[decl.name]
        made[decl.name] = source(decl, index, shape, options, {}, driver, {})(0, rows, 0, cols)
    return made


def dask_chunks(n: int) -> list[int]:
    """The chunk sizes dask is timed at for order ``n``: for each of :data:`DASK_CHUNKS` below
    ``n``, the divisor of ``n`` nearest it (dask's Cholesky and LU take square chunks only: a
    ragged last chunk is an error), none under :data:`DASK_SMALLEST`."""
    divisors = [d for d in range(DASK_SMALLEST, n) if n % d == 0]
    return sorted({min(divisors, key=lambda d: (abs(d - chunk), d)) for chunk in DASK_CHUNKS if chunk < n}
                  if divisors else set())


def _without_dask(n: int, order: str = "n") -> str:
    """Why dask is not timed at order ``n`` (``order``: what it is, ``n`` or a matrix's order), which
    :func:`dask_chunks` gives no chunk size."""
    if n <= DASK_CHUNKS[0]:
        return (f"dask is not timed: its chunks are about {', '.join(map(str, DASK_CHUNKS))} and {order} = {n} is "
                f"not above the smallest (a single chunk is no blocked factorization to compare with)")
    return (f"dask is not timed: no chunk size from {DASK_SMALLEST} to {n - 1} divides {order} = {n} (dask's "
            f"Cholesky and LU take square chunks only: give sizes with such a divisor to compare with it)")


def _dask(reference: Reference, chunk: int, workers: int) -> tuple[str, Callable]:
    """The name and the run of ``reference``'s dask counterpart at chunks of ``chunk``, on ``workers``
    threads of dask's (each of one BLAS thread)."""
    import dask.array as da

    name, make = reference.dask

    def run(*matrices, **options):
        chunked = (da.from_array(m, chunks=chunk) for m in matrices)
        make(da, *chunked, **options).compute(scheduler="threads", num_workers=workers)
    return f"dask.array.{name} (chunks {chunk})", run


def _dask_sizes(reference: Reference, matrices: list, names: list, order: int, order_name: str) -> tuple:
    """The chunk sizes dask is timed at, and a note where it is not timed for want of one: a factorization
    or a solve takes square chunks dividing the order of its matrix (:func:`dask_chunks`); a product any
    of :data:`DASK_CHUNKS` below its largest dimension."""
    if reference.blocked:
        shape = matrices[0].shape
        if shape[0] != shape[1]:
            return [], f"dask is not timed: its factorizations take square matrices, and {names[0]} is " \
                       f"{shape[0]}×{shape[1]}"
        chunks = dask_chunks(order)
        return chunks, None if chunks else _without_dask(order, order_name)
    largest = max(max(m.shape) for m in matrices)
    chunks = [chunk for chunk in DASK_CHUNKS if chunk < largest]
    return chunks, None if chunks else (
        f"dask is not timed: its chunks are about {', '.join(map(str, DASK_CHUNKS))} and no matrix of the product "
        f"is larger than the smallest (one chunk is no blocked product to compare with)")


def _timed(function, matrices: list, threads: int, options: dict) -> tuple[float, int]:
    """Seconds of ``function`` on copies of ``matrices``, and its LAPACK info (0: it succeeded)."""
    work = [np.array(a, order="F", copy=True) for a in matrices]
    with threadpool_limits(threads):
        _wake_blas()
        start = time.perf_counter()
        returned = function(*work, **options)
        return time.perf_counter() - start, lapack_info(returned)


def _wake_blas() -> None:
    """Products on SciPy's BLAS (the references' LAPACK) with the threads just set: after tiledsl's round, which
    runs BLAS on one thread, the threads were parked or ended, and a reference timed at once paid their start
    (dpotrf at n = 600 took 0.04 to 0.1 s after a round of tiledsl, 0.003 s warm: --rounds 1 said tiledsl 12x
    faster than LAPACK)."""
    square = np.ones((WAKE_ORDER, WAKE_ORDER), order="F")
    for _ in range(3):
        blas.dgemm(1.0, square, square)


#: the order of the products that wake the BLAS threads before a reference is timed
WAKE_ORDER = 384


def run_bench(driver, options: Options, rounds: int = 3, with_dask: bool = True) -> dict:
    """Alternate tiledsl and the references ``rounds`` times; returns the results table."""
    program = driver.PROGRAM
    workers = options.workers
    inputs = inputs_of(driver, options)
    tiled = Measure("tiledsl")
    references = []  # (measure, routine, its matrices, BLAS threads, options)
    params = make_params(driver, options)
    found = reference_of(program, params)
    order, order_name = options.n, "n"  # of the matrix dask factors: the check's, which may be sized other than n
    if found:
        reference, names, check_options = found
        matrices = [inputs[name] for name in names]
        if matrices[0].shape[0] != options.n:
            order, order_name = matrices[0].shape[0], f"the order of {names[0]}"
        references.append((Measure(f"scipy {reference.routine} ({workers} thread{'s' if workers != 1 else ''})"),
                           reference.run, matrices,
                           workers, check_options))
    said = _unlike_reference(program) if found else _without_reference(program, params)
    notes = [said] if said else []
    if found and with_dask and reference.dask is not None:
        chunks, why_not = _dask_sizes(reference, matrices, names, order, order_name)
        installed = importlib.util.find_spec("dask") is not None
        if why_not:  # said whether dask is installed or not: installing it would not help
            notes.append(why_not + ("" if installed else " (it is not installed either)"))
        elif not installed:
            notes.append("dask is not installed (pip install 'dask[array]' to compare with it too)")
        for chunk in chunks if installed else ():
            name, run = _dask(reference, chunk, workers)
            references.append((Measure(name), run, matrices, 1, check_options))
    residual, passed, tiles, params, sources, flops, source = None, None, {}, {}, {}, None, None
    residuals, errors = {}, []
    execute(driver, options, inputs)  # an untimed round first: no implementation is timed cold
    for _, routine, matrices, threads, check_options in references:
        _timed(routine, matrices, threads, check_options)
    for _ in range(rounds):
        result = execute(driver, options, inputs)
        tiled.times.append(result.seconds)
        residual, passed = result.residual, result.passed
        residuals, errors = dict(result.residuals), failure_reasons(result)  # as run says them
        for measure, routine, matrices, threads, check_options in references:
            seconds, measure.info = _timed(routine, matrices, threads, check_options)
            measure.times.append(seconds)
        tiles = tile_values(result.params, program.tiling.kind)
        params = {name: result.params[name] for name in program.params if name in result.params}
        sources = dict(result.sources)
        flops, source = flop_count(program, result.matrices, [result.stats])
    notes = [*run_notes(driver, options, result, [result.stats]), *notes]  # what run warns of (a singular A)
    if not flops and no_rate_reason([result.stats]):
        notes.append(f"no GFLOP/s: {no_rate_reason([result.stats])}")  # as run says it
    rate = flops / min(tiled.times) / 1e9 if flops and min(tiled.times) > 0 else None
    if rate and result.upper_bound and rate > result.upper_bound:  # as run's bound line says it
        notes.append(f"tiledsl's {rate_number(rate)} GFLOP/s is {rate / result.upper_bound:.2f} of the kernel upper "
                     f"bound, {result.upper_bound:.1f} GFLOP/s{ABOVE_BOUND}")
    notes += [f"{m.name} failed on these inputs (LAPACK info = {m.info}): its row is not a timing"
              for m, *_ in references if m.info]
    notes += _spread_notes([tiled] + [r[0] for r in references if not r[0].info], workers)
    notes += [_crowded(workers)] if references and workers > (os.cpu_count() or 1) else []
    if references and source == "kernels":
        notes.append("every row's GFLOP/s divides tiledsl's flop count (its kernels') by the row's time, not the "
                     "work the reference does (a dense routine may do more): compare the times")
    table = _table(program, options, flops, tiled, [r[0] for r in references], (residual, passed), tiles, sources,
                   notes, params)
    # the count of the check's kind, which a program doing less (a band) did not do: say so by every rate
    table.update(residuals=residuals, errors=errors, ok=not errors,  # as run --json's ok
                 nonfinite=dict(result.nonfinite))  # left in the results (--allow-nonfinite), as run says them
    table["flops_basis"] = count_text(program, result.matrices, source).strip(" ()") if flops else None
    return table


def _spread_notes(measures: list, workers: int) -> list:
    """A note for each implementation whose rounds took very different times (a loaded machine, a
    multi-threaded BLAS waiting for its cores): its best time, and the ratios, are then unreliable; one
    note where each ran one round, which shows no spread."""
    if len(measures) > 1 and all(len(m.times) == 1 for m in measures):  # nothing to compare a round with
        return ["one round each: a busy machine, or threads waiting for cores, would not show, and the ratios may "
                "be far off (--rounds 3 shows the spread)"]
    advice = "run again, or with --workers 1" if workers > 1 else "run again on a quieter machine"
    return [f"{m.name}'s rounds took {min(m.times):.4f} to {max(m.times):.4f} s: the machine is busy, or its "
            f"threads wait for cores; its ratio is not reliable ({advice})"
            for m in measures if len(m.times) > 1 and max(m.times) > SPREAD * min(m.times)]


#: rounds of one implementation further apart than this (slowest over fastest) are said to be
SPREAD = 2.0


def _crowded(workers: int) -> str:
    """The note of ``--workers`` beyond this machine's cores: the reference's BLAS threads, as many,
    take turns on them (64 of them on 2 cores made tiledsl 31x LAPACK)."""
    cores = os.cpu_count() or 1
    return (f"--workers {workers} is more than this machine's {cores} cores: tiledsl's workers and the references' "
            f"{workers} BLAS threads take turns on them, so the ratios say little of either (--workers {cores} "
            f"compares them on the cores)")


def _table(program, options, flops, tiled, references, verdict, tiles, sources, notes, params) -> dict:
    """The results table; ``flops``: the run's count (:func:`~tiledsl.runtime.reporting.flop_count`); ``verdict``:
    its check's (residual, passed)."""
    rate = (lambda t: flops / t / 1e9) if flops else (lambda t: None)
    rows = [{"name": m.name, "seconds": m.best, "gflops": rate(m.best),
             "ratio": m.best / tiled.best} if not m.info else
            {"name": m.name, "seconds": None, "gflops": None, "ratio": None, "failed": f"LAPACK info = {m.info}"}
            for m in [tiled] + references]
    dask_rows = [r for r in rows if r["name"].startswith("dask")]
    best_dask = min(dask_rows, key=lambda r: r["seconds"]) if dask_rows else None
    return {"program": program.name, "n": options.n, "tiles": tiles, "params": params, "sources": sources,
            "workers": options.workers,
            "rounds": len(tiled.times), "residual": verdict[0], "passed": verdict[1], "rows": rows,
            "best_dask": best_dask["name"] if best_dask else None, "notes": notes}


def render(table: dict) -> str:
    settings = settings_text(table["sources"], {**table["tiles"], **table["params"]}, None)  # no GPUs: no ratio
    tiles = " ".join(f"{k}={v}" for k, v in {**table["tiles"], **table.get("params", {})}.items())
    rounds = f"best of {table['rounds']} alternated rounds" if table["rounds"] > 1 else "one round"
    width = max(44, *(len(row["name"]) for row in table["rows"]))
    lines = [f"bench {table['program']}: n={table['n']} {tiles}, {table['workers']} worker(s), {rounds}",
             f"settings {settings}", "",
             f"{'implementation':<{width}} {'seconds':>9} {'GFLOP/s':>9} {'tiledsl speedup':>16}"]
    if table.get("flops_basis"):
        lines.insert(2, f"GFLOP/s: {table['flops_basis']}, over each time")
    for row in table["rows"]:
        if row.get("failed"):
            lines.append(f"{row['name']:<{width}} {'failed':>9} {'-':>9} {'-':>16}")
            continue
        rate = rate_number(row["gflops"]) if row["gflops"] else "-"
        ratio = f"{ratio_number(row['ratio'])}x" if row["ratio"] else "-"
        lines.append(f"{row['name']:<{width}} {seconds_text(row['seconds']):>9} {rate:>9} {ratio:>16}")
    if table["residual"] is not None and math.isnan(table["residual"]) and table["errors"]:
        lines.append("\ntiledsl no residual (FAIL: the check failed, see below)")  # as run says it
    elif table["residual"] is not None:
        # each residual by its name where the check gives several (qr and orthogonality), as run lists them
        named = table["residuals"] if len(table["residuals"]) > 1 else {"": table["residual"]}
        lines.append("")
        for name, value in named.items():
            verdict = "pass" if checks.passes(value) else "FAIL: the timings are of a wrong result"
            lines.append(f"tiledsl {name + ' ' if name else ''}residual {value:.3g} ({verdict}, threshold 60)")
    lines += [f"nonfinite {name}: {count} NaN or infinite value(s)" for name, count in table["nonfinite"].items()]
    lines += [f"note: {note}" for note in table["notes"]]
    return "\n".join(lines)
