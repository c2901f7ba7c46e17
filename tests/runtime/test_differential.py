"""Random programs compute the same bits on every configuration, and the bits of a sequential reference.

The programs come from :mod:`differential_programs`: nested loops with affine bounds and
steps, ``let``, ``if``, panels and sub-ranges of every access mode, value arguments,
priorities and ``release``, calling the prelude's gemm, trsm, trmm and syrk and
order-sensitive user kernels on matrices and workspaces of different shapes. Each one
runs through the Python API (``tiledsl.load(path).run(...)``) on one worker, the
baseline, then on two workers, on one emulated GPU holding every tile in a memory that
fits the largest task and little more (so that it runs out of core), and on two emulated
GPUs with two streams each. Every matrix and workspace must come back with the baseline's
bits, and the baseline with the bits of the reference interpreter, which runs the calls
one by one in program order. The comparison with the reference is bitwise too, not
within a tolerance: the reference calls the same BLAS routines that tiledsl binds
(SciPy's dgemm, dtrsm, dtrmm and dsyrk; the programs' triangles are at most 16 wide, below
the order at which tiledsl's trsm splits its triangle) on the same operands, and the
user kernels' own functions, whose results do not depend on memory layout. A
difference is therefore a task run before one it depends on, a stale or lost tile,
or a wrong operand, never rounding.
"""
import re
import warnings
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pytest

import tiledsl
from tiledsl.api import Loaded, Output
from tiledsl.compiler import check_source
from tiledsl.compiler.source import decode

from differential_programs import (FEATURES, KERNEL_MODULE, KERNEL_MODULE_SOURCE, Execution, Program, features,
                                   generate, geometries, initial_matrices, interpret)

SEEDS = range(50)
#: Each seed's tests in one xdist group: they share the seed's loaded program and baseline run.
SEED_PARAMS = [pytest.param(seed, id=f"seed{seed}", marks=pytest.mark.xdist_group(f"differential-seed{seed}"))
               for seed in SEEDS]
program_of = lru_cache(maxsize=None)(generate)  # the same Program for a seed's every test (none changes it)

#: The configurations compared with one worker: run()'s settings for a :class:`Case`. Out of core,
#: every tile lives on the GPU, whose memory holds the largest task's tiles and at least one
#: whole tile (tiledsl's least), and no more.
CONFIGURATIONS = {
    "two-workers": lambda case: dict(workers=2),
    "one-gpu-out-of-core": lambda case: dict(workers=1, gpus=1, gpu_ratio=(0, 1), gpu_memory=max(
        case.execution.largest_call_bytes, 8 * case.program.nb ** 2)),
    "two-gpus-two-streams": lambda case: dict(workers=2, gpus=2, gpu_streams=2),
}

pytestmark = pytest.mark.filterwarnings("error::tiledsl.TiledslWarning")


#: the notes the drawn programs' calls give as they mean them: a triangle read from the top-left corner of a
#: wider whole tile (kernel_checks.require_triangle), a workspace tile read before any call wrote it (zeros)
AS_MEANT = re.compile(r"larger than \w+ \(\d+x\d+\) needs: its top-left \d+x\d+ triangle was used"
                    r"|, which no task wrote before it \(a workspace holds zeros until one does\)")


@dataclass
class Case:
    """One seed's program, loaded, with what the reference computed and the baseline run."""

    program: Program
    loaded: Loaded
    inputs: dict
    expected: dict
    execution: Execution
    baseline: Output | None = None

    def run(self, **settings) -> Output:
        """The program run through the API on its inputs, at its sizes, with ``settings``; a
        failure (or a warning) fails the test with the program's text, but for the warning of a GPU
        that ran nothing, a fact of the program (its tasks touch none of the GPU's tiles), when true,
        and that of a triangle read from the corner of a wider tile, which the programs drawn mean."""
        program = self.program
        try:
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always", tiledsl.TiledslWarning)
                out = self.loaded.run(n=program.n, tiles={"nb": program.nb}, params=program.params, **self.inputs,
                                      **settings)
        except tiledsl.TiledslError as error:
            pytest.fail(f"run({settings}) failed: {error}\n{program.text}")
        for warning in said:
            if AS_MEANT.search(str(warning.message)):
                continue
            idle = re.match(r"GPU ([\d, ]+) held no tile and ran no task", str(warning.message))
            if idle is None or any(out.gpus["tasks_by_device"][f"gpu{gpu}"] for gpu in idle[1].split(", ")):
                pytest.fail(f"run({settings}) warned: {warning.message}\n{program.text}")
        return out


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """prepared(seed) -> the :class:`Case` of ``seed``, made once per module."""
    folder = tmp_path_factory.mktemp("differential")
    (folder / KERNEL_MODULE).write_text(KERNEL_MODULE_SOURCE)
    cases = {}

    def prepare(seed: int) -> Case:
        if seed not in cases:
            program = program_of(seed)
            path = folder / f"seed{seed}.tile"
            path.write_text(program.text)
            arrays = initial_matrices(program)
            inputs = {name: arrays[name].copy() for name, m in program.matrices.items() if m.given}
            execution = interpret(program, arrays)
            case = Case(program, tiledsl.load(path), inputs, arrays, execution)
            case.baseline = case.run(workers=1)
            cases[seed] = case
        return cases[seed]
    return prepare


def bit_differences(expected, got, program: Program) -> list:
    """One line per matrix or workspace of ``expected`` whose bits ``got`` does not reproduce."""
    shapes, lines = geometries(program), []
    for name, want in expected.items():
        if name not in got:
            lines.append(f"{name}: not returned")
            continue
        have = got[name]
        if have.shape != want.shape:
            lines.append(f"{name}: shape {have.shape}, expected {want.shape}")
            continue
        differ = np.ascontiguousarray(have).view(np.uint64) != np.ascontiguousarray(want).view(np.uint64)
        if differ.any():
            row, col = np.argwhere(differ)[0]
            tile = (row // (shapes[name].tile_rows or program.nb), col // program.nb)
            lines.append(f"{name}: {differ.sum()} of {differ.size} entries differ, the first at ({row}, {col}), "
                         f"in tile {name}[{tile[0]}, {tile[1]}]: {float(have[row, col])!r}, expected "
                         f"{float(want[row, col])!r}")
    return lines


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seed", SEED_PARAMS)
def test_the_checker_accepts_every_generated_program_without_a_diagnostic(tmp_path, seed):
    program = program_of(seed)
    (tmp_path / KERNEL_MODULE).write_text(KERNEL_MODULE_SOURCE)
    result = check_source(decode(str(tmp_path / "program.tile"), program.text.encode()))
    assert result.ok and not result.diagnostics, f"{result.report()}\n{program.text}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", SEED_PARAMS)
def test_one_worker_computes_the_bits_of_the_sequential_reference(prepared, seed):
    case = prepared(seed)
    assert case.baseline.tasks == case.execution.calls, (
        f"{case.baseline.tasks} tasks, the reference made {case.execution.calls} calls\n{case.program.text}")
    differences = bit_differences(case.expected, case.baseline, case.program)
    assert not differences, "\n".join(differences) + "\n" + case.program.text


@pytest.mark.timeout(120)
@pytest.mark.parametrize("configuration", CONFIGURATIONS)
@pytest.mark.parametrize("seed", SEED_PARAMS)
def test_workers_and_emulated_gpus_compute_the_bits_of_one_worker(prepared, seed, configuration):
    case = prepared(seed)
    settings = CONFIGURATIONS[configuration](case)
    out = case.run(**settings)
    assert out.tasks == case.execution.calls, (
        f"{configuration}: {out.tasks} tasks, the reference made {case.execution.calls} calls\n{case.program.text}")
    if "gpu_memory" in settings:  # the configuration means what it says: the GPU's cache evicted tiles
        assert out.gpus["out_of_core"] and out.gpus["out_of_core"]["evictions"] > 0, (out.gpus, case.program.text)
    differences = bit_differences(case.baseline, out, case.program)
    assert not differences, f"{configuration} ({settings}):\n" + "\n".join(differences) + "\n" + case.program.text


@pytest.mark.timeout(60)
def test_the_seeds_cover_every_feature_of_the_generator():
    totals = Counter()
    for seed in SEEDS:
        totals.update(features(program_of(seed)))
    assert not [name for name in FEATURES if not totals[name]], totals
