"""``tiledsl bench``: tiledsl against the reference libraries, alternated in one run.

For a program whose check is ``cholesky``, ``qr`` or ``lu`` the references are
scipy's LAPACK (dpotrf / dgeqrf / dgetrf, given as many BLAS threads as tiledsl
has workers) and, when dask is installed and has the routine,
``dask.array.linalg`` at several chunk sizes (its best is reported). Every
implementation runs once per round, rounds alternate, the best time of each
is kept; ratios are tiledsl's GFLOP/s over the reference's.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from threadpoolctl import threadpool_limits

from ..runtime import Options, execute
from ..runtime.inputs import make_matrix
from ..runtime.reporting import FLOPS, flop_count

DASK_CHUNKS = (512, 1024, 2048)


@dataclass
class Measure:
    name: str
    times: list = field(default_factory=list)

    @property
    def best(self) -> float:
        return min(self.times)


def _scipy(kind: str):
    from scipy.linalg import lapack

    def geqrf(a):
        lwork = int(lapack.dgeqrf_lwork(*a.shape)[0])  # the default lwork would run unblocked
        lapack.dgeqrf(a, lwork=lwork, overwrite_a=1)

    routine = {"cholesky": lambda a: lapack.dpotrf(a, lower=1, overwrite_a=1),
               "qr": geqrf,
               "lu": lambda a: lapack.dgetrf(a, overwrite_a=1)}[kind]
    name = {"cholesky": "dpotrf", "qr": "dgeqrf", "lu": "dgetrf"}[kind]
    return f"scipy {name}", routine


def _dask(kind: str, chunk: int, workers: int):
    try:
        import dask.array as da
    except ImportError:
        return None
    if kind == "qr":
        return None  # dask's QR is tall-and-skinny only
    compute = {"cholesky": lambda x: da.linalg.cholesky(x, lower=True),
               "lu": lambda x: da.linalg.lu(x)[2]}[kind]

    def run(a):
        compute(da.from_array(a, chunks=chunk)).compute(scheduler="threads", num_workers=workers)
    return f"dask.array.linalg.{'cholesky' if kind == 'cholesky' else 'lu'} (chunks {chunk})", run


def _timed(function, a: np.ndarray, threads: int) -> float:
    work = np.array(a, order="F", copy=True)
    with threadpool_limits(threads):
        start = time.perf_counter()
        function(work)
        return time.perf_counter() - start


def run_bench(driver, options: Options, rounds: int = 3, with_dask: bool = True) -> dict:
    """Alternate tiledsl and the references ``rounds`` times; returns the results table."""
    program = driver.PROGRAM
    kind = program.check.kind if program.check else None
    workers = options.workers
    index = 0
    a = make_matrix(program.matrices[index].init, options.seed, index, options.n, options.n)
    tiled = Measure("tiledsl")
    references = []
    if kind in FLOPS:
        name, routine = _scipy(kind)
        references.append((Measure(f"{name} ({workers} threads)"), routine, workers))
        for chunk in DASK_CHUNKS if with_dask else ():
            found = _dask(kind, chunk, workers) if chunk < options.n else None
            if found:
                references.append((Measure(found[0]), found[1], 1))
    residual, tiles, flops = None, {}, None
    for _ in range(rounds):
        result = execute(driver, options, {program.matrices[0].name: a})
        tiled.times.append(result.seconds)
        residual = result.residual
        for measure, routine, threads in references:
            measure.times.append(_timed(routine, a, threads))
        tiles = {k: v for k, v in result.params.items() if k in ("nb", "B", "b", "s") and v is not None}
        flops, _ = flop_count(program, result.matrices, [result.stats])
    return _table(program, options, flops, tiled, [m for m, _, _ in references], residual, tiles)


def _table(program, options, flops, tiled, references, residual, tiles) -> dict:
    """The results table; ``flops``: the run's count (:func:`~tiledsl.runtime.reporting.flop_count`)."""
    rate = (lambda t: flops / t / 1e9) if flops else (lambda t: None)
    rows = [{"name": m.name, "seconds": m.best, "gflops": rate(m.best),
             "ratio": (m.best / tiled.best) if flops else None} for m in [tiled] + references]
    dask_rows = [r for r in rows if r["name"].startswith("dask")]
    best_dask = min(dask_rows, key=lambda r: r["seconds"]) if dask_rows else None
    return {"program": program.name, "n": options.n, "tiles": tiles, "workers": options.workers,
            "rounds": len(tiled.times), "residual": residual, "rows": rows,
            "best_dask": best_dask["name"] if best_dask else None}


def render(table: dict) -> str:
    tiles = " ".join(f"{k}={v}" for k, v in table["tiles"].items())
    lines = [f"bench {table['program']}: n={table['n']} {tiles}, {table['workers']} worker(s), "
             f"best of {table['rounds']} alternated rounds", "",
             f"{'implementation':<44} {'seconds':>9} {'GFLOP/s':>9} {'tiledsl speedup':>16}"]
    for row in table["rows"]:
        rate = f"{row['gflops']:.2f}" if row["gflops"] else "-"
        ratio = f"{row['ratio']:.2f}x" if row["ratio"] else "-"
        lines.append(f"{row['name']:<44} {row['seconds']:>9.4f} {rate:>9} {ratio:>16}")
    if table["residual"] is not None:
        lines.append(f"\ntiledsl residual {table['residual']:.3g} (threshold 60)")
    return "\n".join(lines)
