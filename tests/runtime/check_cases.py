"""Cases of the checks any program may declare (solve, inverse, product, pivoted LU), built with
numpy/scipy, and the harness that runs :mod:`tiledsl.runtime.verify` on them on the ranks of a job.

A :class:`Case` holds each matrix's original and final values (what a run would have
left), its tiling, the check declaration, and a dense reference residual written the
plain way. :func:`residuals` runs the check on this process's rank (alone, or as a
rank of an MPI job: ``tests/runtime/mpi/check_cases_job.py``); ``wrong=True`` first
perturbs one entry of the result, so that the check must fail with the dense value.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.linalg

from tiledsl.runtime.checks import EPS
from tiledsl.runtime.distribution import BlockCyclic, Hybrid, squarest_grid
from tiledsl.runtime.engine import Engine
from tiledsl.runtime.geometry import Geometry
from tiledsl.runtime.inputs import make_matrix
from tiledsl.runtime.matrix import TiledMatrix
from tiledsl.runtime.program import CheckDecl, Program, Tiling
from tiledsl.runtime.verify import Verifier

NB = 64  # ragged: the sizes below are no multiple of it
HYBRID = (96, 32, 3)  # B, b, s


@dataclass
class Case:
    """One check: ``matrices`` name -> (original or None for a workspace, final)."""

    decl: CheckDecl
    matrices: dict
    dense: object  # dense(originals, finals) -> {name: residual}
    wrong: tuple  # (matrix, row, column): the final entry a wrong result changes
    hybrid: bool = False
    workspaces: dict = field(default_factory=dict)  # name -> (the matrix it is like, its tiles' rows)

    def geometry(self, name: str) -> Geometry:
        if name in self.workspaces:
            like, rows = self.workspaces[name]
            return Geometry.workspace(self.geometry(like), rows)
        m, n = self.matrices[name][1].shape
        return Geometry.hybrid(m, n, *HYBRID) if self.hybrid else Geometry.uniform(m, n, NB)


def decl(kind: str, args: str, qualifiers=(), **options) -> CheckDecl:
    return CheckDecl(kind, tuple(args.split()), line=3, qualifiers=tuple(tuple(q.split()) for q in qualifiers),
                     options=tuple(options.items()))


# ---------------------------------------------------------------- dense references
def _scaled(diff: float, bound: float, n: int) -> float:
    return diff / (bound * n * EPS)


def _inf(x) -> float:
    return np.linalg.norm(x, np.inf)


def _one(x) -> float:
    return np.linalg.norm(x, 1)


def sym(a):
    """The symmetric matrix whose lower triangle ``a`` stores."""
    return np.tril(a) + np.tril(a, -1).T


def solve_residual(op_a, x, b) -> float:
    return _scaled(_inf(b - op_a @ x), _inf(op_a) * _inf(x) + _inf(b), op_a.shape[0])


def inverse_residual(op_a, op_x) -> float:
    n = op_a.shape[0]
    return _scaled(_one(np.eye(n) - op_a @ op_x), _one(op_a) * _one(op_x), n)


def product_residual(c, op_a, op_b, c0, alpha=1.0, beta=1.0, keep=lambda x: x) -> float:
    """``keep`` cuts the part of C that counts out of a full matrix; β = 0 leaves C₀ unread (BLAS)."""
    c0 = c0 if beta else np.zeros_like(c0)
    bound = abs(alpha) * _inf(op_a) * _inf(op_b) + abs(beta) * _inf(keep(c0))
    return _scaled(_inf(keep(c - (alpha * op_a @ op_b + beta * c0))), bound, op_a.shape[1])


def pivoted_lu_residual(a, lu, piv) -> float:
    m, n = lu.shape
    k = min(m, n)
    rows = np.arange(m)
    for j, p in enumerate(piv):
        rows[[j, p]] = rows[[p, j]]
    low, up = np.tril(lu[:, :k], -1) + np.eye(m, k), np.triu(lu[:k, :])
    return _scaled(_one(a[rows] - low @ up), _one(a), n)


# ---------------------------------------------------------------- cases
def _general(m, n, index):
    return make_matrix("general", 11, index, m, n)


def _junk_above(a, index):
    """``a`` below and on its diagonal, unrelated values above (what a lower-triangular
    kernel leaves, or an input whose upper triangle no one reads)."""
    return np.tril(a) + np.triu(_general(*a.shape, index), 1)


def _pivots_tiles(piv, m, n, tiles):
    """The pivots as a workspace of one row per tile row holds them: P[t, t] row 0 for panel t."""
    g = Geometry.uniform(m, n, NB)
    p = np.zeros((g.mt * tiles, n))
    for t in range(min(g.mt, g.nt)):
        c0, c1 = g.col_range(t)
        w = min(c1, m) - c0
        p[t * tiles, c0:c0 + w] = piv[c0:c0 + w] - c0
    return p


def cases() -> dict:
    """Every case, by name (the same on every rank: all is deterministic)."""
    found = {}
    n, r = 150, 37

    spd = make_matrix("spd", 11, 1, n, n)
    a0 = _junk_above(spd, 2)  # only its lower triangle is the matrix
    b0 = _general(n, r, 3)
    x = scipy.linalg.solve(spd, b0, assume_a="pos")
    factor = _junk_above(np.linalg.cholesky(spd), 4)
    found["posv"] = Case(decl("solve", "A B B", ["symmetric", "", ""]), {"A": (a0, factor), "B": (b0, x)},
                         lambda o, f: {"solve": solve_residual(sym(o["A"]), f["B"], o["B"])}, ("B", 140, 30))

    unit = _general(n, n, 5) / n  # a unit lower triangle stays well conditioned
    x = scipy.linalg.solve_triangular(unit, b0, lower=True, unit_diagonal=True)
    found["trsm"] = Case(decl("solve", "A X B", ["lower unit", "", ""]),
                         {"A": (unit, unit), "X": (np.zeros_like(b0), x), "B": (b0, b0)},
                         lambda o, f: {"solve": solve_residual(np.tril(o["A"], -1) + np.eye(n), f["X"], o["B"])},
                         ("X", 100, 0))

    diagdom = make_matrix("diagdom", 11, 6, n, n)
    inverse = _junk_above(np.linalg.inv(np.tril(diagdom)), 7)  # trtri in place
    found["trtri"] = Case(decl("inverse", "A A", ["lower", "lower"]), {"A": (diagdom, inverse)},
                          lambda o, f: {"inverse": inverse_residual(np.tril(o["A"]), np.tril(f["A"]))},
                          ("A", 120, 40))

    found["potri"] = Case(decl("inverse", "A X", ["symmetric", "symmetric"]),
                          {"A": (a0, a0), "X": (np.zeros((n, n)), _junk_above(np.linalg.inv(spd), 8))},
                          lambda o, f: {"inverse": inverse_residual(sym(o["A"]), sym(f["X"]))}, ("X", 130, 20),
                          hybrid=True)

    found["inverse transposed"] = Case(decl("inverse", "A X", ["transposed", "transposed"]),
                                       {"A": (diagdom, diagdom), "X": (np.zeros((n, n)), np.linalg.inv(diagdom))},
                                       lambda o, f: {"inverse": inverse_residual(o["A"].T, f["X"].T)}, ("X", 3, 145))

    m, k, w = 130, 70, 90
    a, b, c0 = _general(m, k, 9), _general(k, w, 10), _general(m, w, 11)
    found["gemm"] = Case(decl("product", "C A B", alpha=-0.5, beta=2.0),
                         {"A": (a, a), "B": (b, b), "C": (c0, -0.5 * a @ b + 2.0 * c0)},
                         lambda o, f: {"product": product_residual(f["C"], o["A"], o["B"], o["C"], -0.5, 2.0)},
                         ("C", 129, 89))

    nan = np.full((m, w), np.nan)
    found["gemm beta 0"] = Case(decl("product", "C A B", beta=0.0), {"A": (a, a), "B": (b, b), "C": (nan, a @ b)},
                                lambda o, f: {"product": product_residual(f["C"], o["A"], o["B"], o["C"], beta=0.0)},
                                ("C", 64, 1))

    found["gemm transposed"] = Case(decl("product", "C A B", ["", "transposed", ""]),
                                    {"A": (a.T, a.T), "B": (b, b), "C": (c0, a @ b + c0)},
                                    lambda o, f: {"product": product_residual(f["C"], o["A"].T, o["B"], o["C"])},
                                    ("C", 0, 0), hybrid=True)

    panel = _general(120, 50, 12)
    c0 = _junk_above(make_matrix("spd", 11, 13, 120, 120), 14)
    found["syrk"] = Case(decl("product", "C A A", ["symmetric", "", "transposed"], alpha=-1.0),
                         {"A": (panel, panel), "C": (c0, _junk_above(sym(c0) - panel @ panel.T, 15))},
                         lambda o, f: {"product": product_residual(sym(f["C"]), o["A"], o["A"].T, sym(o["C"]), -1.0)},
                         ("C", 119, 64))

    lower, b0 = _junk_above(make_matrix("diagdom", 11, 16, 100, 100), 17), _general(100, 60, 18)
    found["trmm"] = Case(decl("product", "B A B", ["", "lower", ""], beta=0.0),
                         {"A": (lower, lower), "B": (b0, np.tril(lower) @ b0)},
                         lambda o, f: {"product": product_residual(f["B"], np.tril(o["A"]), o["B"], o["B"], 1.0, 0.0)},
                         ("B", 50, 59))

    for label, (rows, cols) in {"getrf": (150, 150), "getrf tall": (170, 120), "getrf wide": (120, 170)}.items():
        a = _general(rows, cols, 19)
        lu, piv = scipy.linalg.lu_factor(a)
        found[label] = Case(decl("lu", "A P"),
                            {"A": (a, lu), "P": (None, _pivots_tiles(piv, rows, cols, 2))},
                            lambda o, f, piv=piv: {"lu": pivoted_lu_residual(o["A"], f["A"], piv)},
                            ("A", 110, 20), workspaces={"P": ("A", 2)})
    return found


# ---------------------------------------------------------------- the harness
class Harness:
    """One engine on this rank (alone, or a rank of ``comm``'s job) running checks of cases."""

    def __init__(self, comm=None, workers: int = 2):
        self.comm = comm
        self.rank, size = (comm.rank, comm.size) if comm is not None else (0, 1)
        self.grid = squarest_grid(size)
        self.engine = Engine(Program("checks", "checks.tile", Tiling("uniform"), matrices=()), {}, workers,
                             comm=comm)
        self.tag = 0

    def residuals(self, case: Case, wrong: bool = False) -> dict:
        """The check's residuals on this rank's share of the case (every rank gets them); its notes
        are left in ``self.notes``."""
        distribution = Hybrid(*self.grid, HYBRID[2]) if case.hybrid else BlockCyclic(*self.grid)
        finals = self.finals(case, wrong)
        matrices = {}
        for name in case.matrices:
            matrix = TiledMatrix(name, case.geometry(name), distribution, self.rank, self.tag)
            self.tag += matrix.mt * matrix.nt
            matrix.allocate(lambda r0, r1, c0, c1, f=finals[name]: f[r0:r1, c0:c1])
            matrices[name] = matrix
        self.engine.attach(matrices)
        sources = {name: (lambda r0, r1, c0, c1, o=original: o[r0:r1, c0:c1])
                   for name, (original, _) in case.matrices.items() if original is not None}
        verifier = Verifier(self.engine, matrices, sources, self.comm, self.tag)
        found = verifier.check(case.decl, None, None)
        self.tag, self.notes = verifier.first_tag, verifier.notes
        return found

    @staticmethod
    def finals(case: Case, wrong: bool) -> dict:
        finals = {name: np.asfortranarray(final) for name, (_, final) in case.matrices.items()}
        if wrong:
            name, i, j = case.wrong
            finals[name] = finals[name].copy(order="F")
            finals[name][i, j] += 1e-3
        return finals

    @staticmethod
    def dense(case: Case, wrong: bool = False) -> dict:
        originals = {name: original for name, (original, _) in case.matrices.items()}
        return case.dense(originals, Harness.finals(case, wrong))
