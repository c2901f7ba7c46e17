"""Panels as kernels receive them (runtime/panels.py): built-in kernels take a panel as one
matrix, a view of adjacent tiles or a gathered copy written back when the call writes it;
and programs passing panels to built-in kernels, by columns and by rows (a Cholesky, a
product, a QR whose check replays geqrt and tpqrt on panels), pass their checks and give
the same bits on 1 rank and on emulated GPUs; the product and the QR on 4 ranks too (2x2:
the product's row and column panels, and the QR's column panels read and written, as the
Cholesky's are, cross process rows and columns)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg

from tiledsl.runtime import Options, execute
from tiledsl.runtime.kernels import CPU_KERNELS
from tiledsl.runtime.panels import Panel, as_matrix, taking_matrices

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def rng():
    return np.random.default_rng(20261124)


def _adjacent(rows_per_tile, cols, rng):
    """Tiles one after another in one Fortran array (as a column-stored matrix holds them)."""
    whole = np.asfortranarray(rng.standard_normal((sum(rows_per_tile), cols)))
    ends = np.cumsum(rows_per_tile)
    return whole, [whole[end - rows:end] for rows, end in zip(rows_per_tile, ends)]


def test_adjacent_tiles_are_a_view_written_through(rng):
    whole, tiles = _adjacent([3, 4, 2], 5, rng)
    with as_matrix(Panel(tiles, 0, True), "k") as matrix:
        assert np.shares_memory(matrix, whole) and matrix.shape == (9, 5)
        matrix[8, 4] = 42.0
    assert tiles[2][1, 4] == 42.0


def test_read_only_views_of_adjacent_tiles_are_a_read_only_view(rng):
    whole, tiles = _adjacent([3, 4], 2, rng)
    views = [tile.view() for tile in tiles]
    for view in views:
        view.flags.writeable = False
    with as_matrix(Panel(views, 0, False), "k") as matrix:
        assert np.shares_memory(matrix, whole) and not matrix.flags.writeable


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("written", [True, False])
def test_tiles_apart_are_gathered_and_written_back_only_when_written(rng, axis, written):
    sizes = [3, 0, 5]
    tiles = [np.asfortranarray(rng.standard_normal((s, 4) if axis == 0 else (4, s))) for s in sizes]
    before = [tile.copy() for tile in tiles]
    with as_matrix(Panel(tiles, axis, written), "k") as matrix:
        np.testing.assert_array_equal(matrix, np.concatenate(before, axis=axis))
        matrix += 1.0
    for tile, old in zip(tiles, before):
        np.testing.assert_array_equal(tile, old + 1.0 if written else old)


def test_a_failed_kernel_writes_nothing_back(rng):
    tiles = [np.asfortranarray(rng.standard_normal((2, 2))) for _ in range(2)]
    before = [tile.copy() for tile in tiles]

    def failing(A):
        A[...] = 0.0
        raise ValueError("boom")
    with pytest.raises(ValueError, match="boom"):
        taking_matrices(failing)(Panel(tiles, 0, True))
    for tile, old in zip(tiles, before):
        np.testing.assert_array_equal(tile, old)


def test_tiles_of_a_panel_must_line_up():
    with pytest.raises(ValueError, match="gemm: a panel's tiles have 2, 3 rows; they must all have the same"):
        CPU_KERNELS["gemm"](Panel([np.zeros((2, 2)), np.zeros((3, 2))], 1, False), np.eye(4), np.zeros((2, 4)))


def test_a_column_list_kernel_gets_its_column_panels_as_lists_and_row_panels_as_matrices():
    got = []
    kernel = taking_matrices(lambda *arguments: got.append(arguments), lists=True)
    column, row = Panel([np.eye(2), np.eye(2)], 0, True), Panel([np.eye(2), np.eye(2)], 1, True)
    kernel(column, row, 1.5)
    assert got[0][0] is column and got[0][1].shape == (2, 4) and got[0][2] == 1.5


def test_every_built_in_kernel_takes_panels(rng):
    """trsm on a column panel of right-hand sides, as on the matrix they stack into."""
    L = np.asfortranarray(np.tril(rng.standard_normal((4, 4))) + 4 * np.eye(4))
    B = rng.standard_normal((4, 6))
    tiles = [np.asfortranarray(B[:, :2]), np.asfortranarray(B[:, 2:])]
    CPU_KERNELS["trsm"](L, Panel(tiles, 1, True), "L", "L", "N", "N")
    np.testing.assert_allclose(np.hstack(tiles), scipy.linalg.solve_triangular(L, B, lower=True), rtol=1e-13)


def test_column_sums_have_the_same_bits_wherever_the_column_lies(rng):
    """A panel's column starts at any offset in a stacked matrix: asum's sums must not move
    with it (BLAS's dasum gave sums a few ulps apart at different alignments)."""
    x = rng.standard_normal((301, 5)) * 75
    sums = set()
    for offset in range(8):
        whole = np.empty((320, 5), order="F")
        view = whole[offset:offset + 301]
        view[...] = x
        s = np.zeros((1, 5), order="F")
        CPU_KERNELS["asum"](view, s)
        sums.add(s.tobytes())
    assert len(sums) == 1


# ----------------------------------------------------------------------------- programs

PROGRAMS = {"panel_cholesky": {}, "panel_gemm": {"m": 250, "k": 170}, "panel_qr": {}}
N = 301


def _options(program, **options) -> Options:
    return Options(n=N, sets=PROGRAMS[program], watchdog=60, check=True, **options)


@pytest.fixture(scope="module")
def one_rank(compiled):
    runs = {}

    def get(program):
        if program not in runs:
            result = execute(compiled(f"tests/runtime/programs/{program}.tile"), _options(program, workers=2))
            assert result.passed, result.residuals
            runs[program] = {name: m.assemble() for name, m in result.matrices.items()}
        return runs[program]
    return get


@pytest.mark.parametrize("program", list(PROGRAMS))
def test_a_program_of_panels_passes_its_check_on_emulated_gpus_with_the_same_bits(compiled, one_rank, program):
    result = execute(compiled(f"tests/runtime/programs/{program}.tile"),
                     _options(program, workers=2, gpus=2, gpu_backend="emulated"))
    assert result.passed and result.stats["device_copies"] > 0
    for name, matrix in one_rank(program).items():
        assert np.array_equal(result.matrices[name].assemble(), matrix), name


@pytest.mark.parametrize("program", ["panel_gemm", "panel_qr"])
def test_a_program_of_panels_gives_the_same_bits_on_four_ranks(tmp_path, one_rank, program):
    expected = one_rank(program)
    command = [sys.executable, "-m", "tiledsl.commands.cli", "run", f"tests/runtime/programs/{program}.tile",
               "--np", "4", "--grid", "2x2", "--n", str(N), "--check", "--json", "--watchdog", "60"]
    command += [word for k, v in PROGRAMS[program].items() for word in ("--set", f"{k}={v}")]
    command += [word for name in expected for word in ("--output", f"{name}={tmp_path / name}.npy")]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["passed"] and all(r["messages_sent"] > 0 for r in summary["ranks"])
    for name, matrix in expected.items():
        assert np.array_equal(np.load(tmp_path / f"{name}.npy"), matrix), name
