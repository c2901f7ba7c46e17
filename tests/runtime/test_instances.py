"""Every instance type of the protocol (runtime/protocol.py, runtime/exchange.py), built on purpose.

``programs/instances.tile`` places each task's main output in one block column
and its other arguments in every other column, so that on 2 ranks and with 2
emulated GPUs per rank the arguments live at every kind of place. Each run is
real (in-process with emulated GPUs, or ``mpiexec`` through ``tiledsl run
--np 2``); its output must equal a 1-rank CPU run bitwise, and the instances
each rank counted must be those ``tiledsl explain`` predicts, with the types
the configuration is built for among them. ``programs/placement.tile`` does the same
with user kernels that have no GPU body, which run on their owner's host.
"""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tiledsl.commands.explain import plan
from tiledsl.runtime import Options, execute
from tiledsl.runtime.protocol import Instance

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = "tests/runtime/programs/instances.tile"
USER_PROGRAM = "tests/runtime/programs/placement.tile"
N = 56  # 7×7 tiles of 8: every row the program names, and 7 columns to place
RATIO = (1, 1)  # with 2 GPUs, block columns cycle host, GPU 1, GPU 2 on each rank

ON_ONE_RANK_WITH_GPUS = {1, 2, 3, 5, 6, 7}
ON_TWO_CPU_RANKS = {1, 2, 4, 5, 6, 8}
EVERY_TYPE = {int(kind) for kind in Instance}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A on one rank without GPUs, where no instance but the owner exists."""
    path = tmp_path_factory.mktemp("reference") / "A.npy"
    out = run_cli("--output", f"A={path}")
    assert out.returncode == 0, out.stderr
    return np.load(path)


def run_cli(*args, np_=1, program=PROGRAM):
    command = [sys.executable, "-m", "tiledsl.commands.cli", "run", program, "--n", str(N), "--no-tune", "--json",
               "--watchdog", "60", *map(str, args)]
    if np_ > 1:
        command += ["--np", str(np_), "--grid", f"1x{np_}"]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240)


def predicted(compiled, grid, gpus, program=PROGRAM) -> list:
    """Per rank, the instance counts by type (index t - 1 for type t) that explain predicts."""
    totals = plan(compiled(program), Options(n=N, gpu_ratio=RATIO if gpus else None), grid, gpus).totals()
    return [[totals[rank][kind] for kind in Instance] for rank in sorted(totals)]


def types_present(counts: list) -> set:
    return {t for per_rank in counts for t, count in enumerate(per_rank, 1) if count}


@pytest.mark.timeout(240)
def test_one_rank_with_two_emulated_gpus_creates_types_1_2_3_5_6_7(compiled, reference):
    # the two minor outputs of tpqrt(A[3, k], A[4, j], T[4, j]) go to another GPU together (16.1)
    result = execute(compiled(PROGRAM), Options(n=N, gpus=2, gpu_ratio=RATIO, watchdog=60))
    counts = [result.stats["instances"]]
    assert counts == predicted(compiled, (1, 1), 2)
    assert types_present(counts) == ON_ONE_RANK_WITH_GPUS
    assert np.array_equal(result.matrices["A"].assemble(), reference)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("gpus, expected", [(0, ON_TWO_CPU_RANKS), (2, EVERY_TYPE)], ids=["cpu", "2-gpus"])
def test_two_ranks_create_the_types_they_are_built_for(compiled, reference, tmp_path, gpus, expected):
    path = tmp_path / "A.npy"
    extra = ["--gpus", gpus, "--gpu-ratio", "1:1"] if gpus else []
    out = run_cli("--output", f"A={path}", *extra, np_=2)
    assert out.returncode == 0, out.stdout + out.stderr
    ranks = json.loads(out.stdout.strip().splitlines()[-1])["ranks"]
    counts = [stats["instances"] for stats in sorted(ranks, key=lambda stats: stats["rank"])]
    assert counts == predicted(compiled, (1, 2), gpus)
    assert types_present(counts) == expected
    assert np.array_equal(np.load(path), reference)


@pytest.mark.timeout(240)
def test_kernels_without_a_gpu_body_run_on_the_host_with_the_instances_explain_predicts(compiled, tmp_path):
    """Their GPU tiles (the main output too) are copied to the host and sent home: types 3, 6 and 7."""
    driver = compiled(USER_PROGRAM)
    alone = execute(driver, Options(n=N, watchdog=60)).matrices["A"].assemble()
    result = execute(driver, Options(n=N, gpus=2, gpu_ratio=RATIO, watchdog=60))
    counts = [result.stats["instances"]]
    assert counts == predicted(compiled, (1, 1), 2, USER_PROGRAM)
    assert types_present(counts) == ON_ONE_RANK_WITH_GPUS
    assert np.array_equal(result.matrices["A"].assemble(), alone)
    path = tmp_path / "A.npy"
    out = run_cli("--output", f"A={path}", "--gpus", 2, "--gpu-ratio", "1:1", np_=2, program=USER_PROGRAM)
    assert out.returncode == 0, out.stdout + out.stderr
    ranks = json.loads(out.stdout.strip().splitlines()[-1])["ranks"]
    counts = [stats["instances"] for stats in sorted(ranks, key=lambda stats: stats["rank"])]
    assert counts == predicted(compiled, (1, 2), 2, USER_PROGRAM)
    assert types_present(counts) == EVERY_TYPE
    assert np.array_equal(np.load(path), alone)
