"""GPUs through the emulated backend: every program on 1 and 2 GPUs, on 1 and 2 ranks.

The emulated device keeps tiles in its own memory (no host kernel accepts them),
so every host/GPU copy the protocol needs must really happen; the copies counted
by the runtime must equal those ``explain --gpus G`` predicts.
"""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tiledsl.compiler import compile_path
from tiledsl.driverload import import_driver
from tiledsl.explain import plan
from tiledsl.runtime import Options, execute

ROOT = Path(__file__).resolve().parents[2]
TILES = {"cholesky": {"nb": 96}, "lu": {"nb": 96}, "qr": {"nb": 96},
         "hetero_cholesky": {"B": 160, "b": 48, "s": 3}, "hetero_qr": {"B": 160, "b": 48, "s": 3}}


def driver_of(tmp_path, program):
    _, text = compile_path(ROOT / f"programs/{program}.tile")
    (tmp_path / f"{program}.py").write_text(text)
    return import_driver(tmp_path / f"{program}.py", f"gpu_{program}")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("program", list(TILES))
@pytest.mark.parametrize("gpus", [1, 2])
def test_one_rank_with_emulated_gpus(tmp_path, program, gpus):
    driver = driver_of(tmp_path, program)
    options = Options(n=517, tiles=TILES[program], check=True, gpus=gpus, watchdog=60)
    result = execute(driver, options)
    assert result.passed, result.residuals
    predicted = plan(driver, Options(n=517, tiles=TILES[program]), (1, 1), gpus).copies
    assert result.stats["device_copies"] == predicted.get(0, 0) > 0


@pytest.mark.timeout(300)
@pytest.mark.parametrize("program", ["cholesky", "qr", "hetero_qr"])
def test_two_ranks_with_emulated_gpus(tmp_path, program):
    tiles = [item for k, v in TILES[program].items() for item in (f"--{k}", str(v))]
    out = subprocess.run([sys.executable, "-m", "tiledsl.cli", "run", f"programs/{program}.tile", "--np", "2",
                          "--n", "517", *tiles, "--gpus", "2", "--check", "--json", "--watchdog", "60"],
                         cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["passed"] and summary["gpus"] == 2
    explained = plan(driver_of(tmp_path, program), Options(n=517, tiles=TILES[program]), tuple(summary["grid"]), 2)
    for stats in summary["ranks"]:
        assert stats["device_copies"] == explained.copies.get(stats["rank"], 0), stats["rank"]
        assert stats["messages_sent"] == sum(c for (s, _), c in explained.messages.items() if s == stats["rank"])


def test_a_missing_copy_cannot_go_unnoticed():
    """Host kernels refuse emulated device memory, so a forgotten transfer fails loudly."""
    from tiledsl.runtime.devices import EmulatedBackend

    gpu = EmulatedBackend(1)
    tile = gpu.to_device(np.eye(4), 1)
    with pytest.raises(TypeError, match="copy is missing"):
        gpu.kernels["gemm"](tile, tile, np.zeros((4, 4)))
