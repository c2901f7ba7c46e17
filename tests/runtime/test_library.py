"""The library of programs under programs/: each passes its own check and agrees with
scipy at ragged sizes, on 1 rank, on 1 and 2 emulated GPUs and on 4 ranks (2x2, a
real ``tiledsl run --np 4`` job), with every output bitwise the same.

Sizes are small and ragged (n = 301 on 64-wide tiles, the shapes of the products and
right-hand sides all different), so that the whole file stays fast: the 1-rank and
GPU runs are in-process, and each new program starts one MPI job. The shipped
programs that predate the library run on 1 rank and on GPUs only (tests/runtime/
test_mpi.py runs them on every grid).
"""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg

from tiledsl.runtime import Options, execute
from tiledsl.runtime.inputs import make_matrix

ROOT = Path(__file__).resolve().parents[2]
N = 301


def _relative(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def _getrf(inputs, out, params):
    """LAPACK's own result: the same L\\U to rounding and the same pivots as scipy's lu_factor."""
    lu, piv = scipy.linalg.lu_factor(inputs["A"])
    nb, n = params["nb"], params["n"]
    pivots = np.concatenate([out["P"][k, k * nb:(k + 1) * nb] + k * nb for k in range(-(-n // nb))])
    assert np.array_equal(pivots, piv)
    assert _relative(out["A"], lu) < 1e-13


def _solution(assume):
    def compare(inputs, out, params):
        expected = scipy.linalg.solve(inputs["A"], inputs["B"], assume_a=assume)
        assert _relative(out["B"], expected) < 1e-12
    return compare


def _trtri(inputs, out, params):
    assert _relative(np.tril(out["A"]), np.linalg.inv(np.tril(inputs["A"]))) < 1e-13
    assert np.array_equal(np.triu(out["A"], 1), np.triu(inputs["A"], 1))  # never touched


def _potri(inputs, out, params):
    assert _relative(np.tril(out["A"]), np.tril(np.linalg.inv(inputs["A"]))) < 1e-12


def _gemm(inputs, out, params):
    assert _relative(out["C"], inputs["C"] + inputs["A"] @ inputs["B"]) < 1e-14


def _syrk(inputs, out, params):
    expected = inputs["C"] - inputs["A"] @ inputs["A"].T
    assert _relative(np.tril(out["C"]), np.tril(expected)) < 1e-14
    assert np.array_equal(np.triu(out["C"], 1), np.triu(inputs["C"], 1))


def _trmm(inputs, out, params):
    assert _relative(out["B"], np.tril(inputs["A"]) @ inputs["B"]) < 1e-14


def _tsqr(inputs, out, params):
    expected = scipy.linalg.lstsq(inputs["A"], inputs["B"])[0]
    assert _relative(out["B"][:params["cols"]], expected) < 1e-12


# program -> (tile settings, --set parameters, comparison with scipy or None)
NEW = {"getrf": ({"nb": 64}, {}, _getrf),
       "gesv": ({"nb": 64}, {"nrhs": 70}, _solution("gen")),
       "posv": ({"nb": 64}, {"nrhs": 70}, _solution("pos")),
       "trtri": ({"nb": 64}, {}, _trtri),
       "potri": ({"nb": 64}, {}, _potri),
       "gemm": ({"nb": 64}, {"m": 250, "k": 170}, _gemm),
       "syrk": ({"nb": 64}, {"k": 170}, _syrk),
       "trmm": ({"nb": 64}, {"nrhs": 70}, _trmm),
       # 5 tile rows in domains of 2: both levels of the tree, and a short last tile row
       "tsqr": ({"nb": 64}, {"cols": 90, "nrhs": 5, "dom": 2}, _tsqr)}
SHIPPED = {"cholesky": ({"nb": 64}, {}, None), "lu": ({"nb": 64}, {}, None), "qr": ({"nb": 64}, {}, None),
           "hetero_cholesky": ({"B": 160, "b": 48, "s": 3}, {}, None),
           "hetero_qr": ({"B": 160, "b": 48, "s": 3}, {}, None)}
PROGRAMS = {**NEW, **SHIPPED}


def test_every_program_is_in_the_library():
    assert sorted(PROGRAMS) == sorted(p.stem for p in (ROOT / "programs").glob("*.tile"))


def _inputs(driver, params, seed):
    """The programs' input matrices, as the run makes them."""
    shapes = driver.shapes(params)[0]
    return {d.name: make_matrix(d.init, seed, i, *shapes[d.name]) for i, d in enumerate(driver.PROGRAM.matrices)}


def _run(compiled, program, **options):
    tiles, sets, _ = PROGRAMS[program]
    result = execute(compiled(f"programs/{program}.tile"),
                     Options(n=N, tiles=tiles, sets=sets, check=True, watchdog=60, **options))
    assert result.passed, result.residuals
    return result, {name: m.assemble() for name, m in result.matrices.items()}


@pytest.fixture(scope="module")
def one_rank(compiled):
    """one_rank(program) -> (result, outputs) of its checked 1-rank CPU run, made once."""
    runs = {}

    def get(program):
        if program not in runs:
            runs[program] = _run(compiled, program, workers=2)
        return runs[program]
    return get


@pytest.mark.timeout(60)
@pytest.mark.parametrize("program", list(PROGRAMS))
def test_one_rank_passes_its_check_and_agrees_with_scipy(compiled, one_rank, program):
    result, outputs = one_rank(program)
    compare = PROGRAMS[program][2]
    if compare:
        driver = compiled(f"programs/{program}.tile")
        compare(_inputs(driver, result.params, 42), outputs, result.params)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("gpus", [1, 2])
@pytest.mark.parametrize("program", list(PROGRAMS))
def test_emulated_gpus_give_the_same_bits(compiled, one_rank, program, gpus):
    result, outputs = _run(compiled, program, gpus=gpus, gpu_backend="emulated")
    assert result.stats["device_copies"] > 0
    expected = one_rank(program)[1]
    for name, matrix in expected.items():
        assert np.array_equal(outputs[name], matrix), name


@pytest.mark.timeout(120)
@pytest.mark.parametrize("program", list(NEW))
def test_four_ranks_give_the_same_bits(tmp_path, one_rank, program):
    tiles, sets, _ = NEW[program]
    expected = one_rank(program)[1]
    command = [sys.executable, "-m", "tiledsl.commands.cli", "run", f"programs/{program}.tile", "--np", "4",
               "--grid", "2x2", "--n", str(N), "--check", "--json", "--watchdog", "60"]
    command += [word for k, v in tiles.items() for word in (f"--{k}", str(v))]
    command += [word for k, v in sets.items() for word in ("--set", f"{k}={v}")]
    command += [word for name in expected for word in ("--output", f"{name}={tmp_path / name}.npy")]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["np"] == 4 and summary["passed"], summary["residuals"]
    assert all(r["messages_sent"] > 0 for r in summary["ranks"])
    for name, matrix in expected.items():
        assert np.array_equal(np.load(tmp_path / f"{name}.npy"), matrix), name
