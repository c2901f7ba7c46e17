"""GPUs through the emulated backend: every program on 1 and 2 GPUs on one rank; on 2 ranks with
2 GPUs each, a program of each tiling on each grid of 2 ranks (TWO_RANKS).

The emulated device keeps tiles in its own memory (no host kernel accepts them),
so every host/GPU copy the protocol needs must really happen; the copies counted
by the runtime must equal those ``explain --gpus G`` predicts. User kernels run
their GPU body (``NAME_gpu``) on the GPU holding their main output, and on the
owner's host without one.
"""
import json
import re
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tiledsl.compiler import compile_path
from tiledsl.driverload import import_driver
from tiledsl.commands.explain import plan
from tiledsl.runtime import Options, execute
from tiledsl.runtime.engine import TaskFailure
from tiledsl.runtime.protocol import Instance
from tiledsl.runtime.userkernels import gpu_kernels

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
    explained = plan(driver, Options(n=517, tiles=TILES[program]), (1, 1), gpus)
    assert result.stats["device_copies"] == explained.copies.get(0, 0) > 0
    placed = Counter(task.owner[1] for task in explained.tasks)
    assert result.stats["tasks_by_device"] == {"host": placed[0], **{f"gpu{g}": placed[g] for g in range(1, gpus + 1)}}


#: the programs run on 2 ranks, and their grid: the runtime's code moving tiles between hosts, GPUs and ranks
#: is one for every program (explain predicts its copies and messages from the tasks alone), so a uniform
#: tiling on 1x2 and on 2x1 and a hybrid one (hetero_qr) stand for the others, which run on one rank above
TWO_RANKS = {"cholesky": (1, 2), "lu": (2, 1), "hetero_qr": (1, 2)}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("program", list(TWO_RANKS))
def test_two_ranks_with_emulated_gpus(tmp_path, program):
    tiles = [item for k, v in TILES[program].items() for item in (f"--{k}", str(v))]
    grid = "x".join(map(str, TWO_RANKS[program]))
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", f"programs/{program}.tile", "--np", "2",
                          "--grid", grid, "--n", "517", *tiles, "--gpus", "2", "--gpu-streams", "2", "--check",
                          "--json", "--watchdog", "60"],
                         cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["passed"] and summary["gpus"] == 2 and tuple(summary["grid"]) == TWO_RANKS[program]
    explained = plan(driver_of(tmp_path, program), Options(n=517, tiles=TILES[program]), TWO_RANKS[program], 2)
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


def test_each_gpu_is_prepared_by_its_management_thread_before_the_clock(tmp_path, monkeypatch):
    """Handles and first launches (``prepare``) are made on the thread that launches the kernels,
    and the run's seconds do not include them."""
    import threading
    import time

    from tiledsl.runtime.devices import EmulatedBackend

    prepared = []

    def prepare(self, device):
        prepared.append((device, threading.current_thread().name))
        time.sleep(0.5)

    monkeypatch.setattr(EmulatedBackend, "prepare", prepare)
    result = execute(driver_of(tmp_path, "cholesky"), Options(n=64, tiles={"nb": 32}, gpus=2, workers=1))
    assert sorted(prepared) == [(1, "gpu-1"), (2, "gpu-2")]
    assert result.seconds < 0.5


def _backend_or_skip(name: str) -> str:
    if name == "cupy":
        from tiledsl.runtime.backends import backend

        try:
            backend("cupy", 1)
        except ValueError as error:
            pytest.skip(f"needs CuPy and an NVIDIA GPU: {error}")
    return name


@pytest.mark.timeout(120)
@pytest.mark.parametrize("gpu_backend", ["emulated", "cupy"])
def test_a_kernel_failing_on_a_gpu_names_the_gpu(compiled, gpu_backend):
    not_spd = np.eye(300)
    not_spd[-1, -1] = -1.0  # the last diagonal tile is on the GPU
    options = Options(n=300, tiles={"B": 100, "b": 50, "s": 2}, gpus=1, gpu_backend=_backend_or_skip(gpu_backend))
    with pytest.raises(TaskFailure) as failure:
        execute(compiled("programs/hetero_cholesky.tile"), options, arrays={"A": not_spd})
    assert str(failure.value).startswith("kernel potrf failed on A[2, 5][50:100, 0:50] on GPU 1 (potrf(A[t, k][o:])")
    assert "not positive definite" in str(failure.value) and failure.value.line == 17


@pytest.mark.timeout(120)
@pytest.mark.parametrize("gpu_backend", ["emulated", "cupy"])
def test_check_finite_looks_at_gpu_tiles(compiled, gpu_backend):
    poisoned = np.eye(300)
    # finite input: the trsm of A[2, 1], on the GPU, divides 1e308 by the pivot 1e-10
    poisoned[195, 195], poisoned[290, 195] = 1e-10, 1e308
    options = Options(n=300, tiles={"nb": 100}, gpus=1, gpu_backend=_backend_or_skip(gpu_backend),
                      check_finite=True)
    with pytest.raises(TaskFailure, match=r"failed on A\[1, 1\], A\[2, 1\] on GPU 1 .*"
                                          r"produced inf at \(90, 95\) of A\[2, 1\] \(--check-finite\)"):
        execute(compiled("programs/lu.tile"), options, arrays={"A": poisoned})


@pytest.mark.timeout(120)
@pytest.mark.parametrize("gpus", [0, 1])
def test_check_finite_places_a_nan_of_a_sub_range_in_its_tile(compiled, tmp_path, gpus):
    """The position inside the sub-range's array was said as the tile's: (0, 0) of B[1, 0] for (5, 30)."""
    (tmp_path / "nan_kernels.py").write_text('def sub(X, Y):\n    Y -= X\n    Y[0, 0] = float("nan")\n\n\n'
                                             "sub_gpu = sub\n")
    (tmp_path / "nan.tile").write_text('use "nan_kernels.py"\nkernel sub(in X, inout Y)\nprogram nanprog {\n'
                                       "  tiling uniform(nb = 100)\n  matrix A[n, n] = random general\n"
                                       "  matrix B[n, n] = random general\n"
                                       "  sub(A[0, 0][0 : 10, 0 : 20], B[1, 0][5 : 15, 30 : 50])\n}\n")
    options = Options(n=200, gpus=gpus, gpu_ratio=(0, 1) if gpus else None, check_finite=True)
    with pytest.raises(TaskFailure, match=r"produced nan at \(5, 30\) of B\[1, 0\] \(--check-finite\)$"):
        execute(compiled(str(tmp_path / "nan.tile")), options)


@pytest.mark.timeout(120)
def test_a_gpu_kernel_calling_sys_exit_fails_the_run(compiled, monkeypatch):
    """17.3: what a kernel raises on a GPU's management thread, SystemExit too, is its task's failure."""
    import threading

    from tiledsl.runtime import kernels

    host_potrf = kernels.potrf

    def potrf_exiting_on_gpus(a, *options):
        if threading.current_thread().name.startswith("gpu-"):
            sys.exit(0)
        host_potrf(a, *options)

    monkeypatch.setitem(kernels.CPU_KERNELS, "potrf", potrf_exiting_on_gpus)
    options = Options(n=300, tiles={"B": 100, "b": 50, "s": 2}, gpus=1, watchdog=60)
    with pytest.raises(TaskFailure) as failure:
        execute(compiled("programs/hetero_cholesky.tile"), options)
    assert str(failure.value).startswith("kernel potrf failed on A[") and " on GPU 1 " in str(failure.value)
    assert "SystemExit at test_gpus.py:" in str(failure.value) and failure.value.line == 17


# ---------------------------------------------------------------- user kernels' GPU bodies
GPU_BODIES = {  # GPU bodies a test appends to placement_kernels.py: each notes where it ran
    "mix": "def mix_gpu(a, b, c):\n    ran('mix', a, b, c)\n    xp = array_module(c)\n"
           "    c += xp.matmul(a, b.T) * 0.5\n",
    "pair": "def pair_gpu(a, b):\n    ran('pair', a, b)\n    a *= 1.5\n    b[:a.shape[0]] += a\n",
    "fresh": "def fresh_gpu(a, b):\n    ran('fresh', a, b)\n    b[:] = a + 1.0\n",
}
RAN = """
import threading

from tiledsl.runtime import array_module


def ran(kernel, *tiles):
    \"\"\"Note a GPU body's run: its thread and the types of its tiles.\"\"\"
    with open({log!r}, "a") as log:
        log.write(f"{{kernel}} {{threading.current_thread().name}} {{' '.join(type(t).__name__ for t in tiles)}}\\n")

"""


def placement_with_gpu_bodies(folder: Path, kernels):
    """placement.tile compiled in ``folder``, its module given GPU bodies for ``kernels``; and the log."""
    programs = ROOT / "tests/runtime/programs"
    shutil.copy(programs / "placement.tile", folder)
    log = folder / "ran.log"
    (folder / "placement_kernels.py").write_text((programs / "placement_kernels.py").read_text()
                                                  + RAN.format(log=str(log))
                                                  + "\n\n".join(GPU_BODIES[k] for k in kernels))
    _, text = compile_path(folder / "placement.tile")
    (folder / "placement.py").write_text(text)
    return import_driver(folder / "placement.py", f"placement_{'_'.join(kernels) or 'cpu'}"), log


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kernels", [(), ("mix",), ("mix", "pair", "fresh")], ids=["cpu-only", "mixed", "gpu"])
def test_user_kernels_run_their_gpu_body_on_gpus_and_their_cpu_body_on_the_host(tmp_path, kernels):
    """Bitwise the CPU run's result, whichever kernels have a GPU body; each GPU body runs on its
    GPU's thread (on host arrays, unwrapped) exactly for the tasks explain places on a GPU."""
    driver, log = placement_with_gpu_bodies(tmp_path, kernels)
    alone = execute(driver, Options(n=56, watchdog=60)).matrices["A"].assemble()
    assert not log.exists()  # no GPU, no GPU body
    options = Options(n=56, gpus=2, gpu_ratio=(1, 1), gpu_streams=len(kernels) or 1, watchdog=60)
    result = execute(driver, options)
    assert np.array_equal(result.matrices["A"].assemble(), alone)
    explained = plan(driver, options, (1, 1), 2)
    assert result.stats["instances"] == [explained.totals()[0][kind] for kind in Instance]
    assert result.stats["device_copies"] == explained.copies[0]
    on_gpus = Counter(task.call.kernel for task in explained.tasks if task.owner[1])
    assert sorted(on_gpus) == sorted(kernels)
    assert set(explained.on_host) == {"mix", "pair", "fresh"} - set(kernels)
    runs = [line.split() for line in log.read_text().splitlines()] if kernels else []
    assert Counter(kernel for kernel, *_ in runs) == on_gpus
    assert {thread for _, thread, *_ in runs} <= {"gpu-1", "gpu-2"}
    assert {kind for _, _, *kinds in runs for kind in kinds} <= {"ndarray"}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("gpus", [1, 0])
def test_a_gpu_body_that_is_not_a_function_fails_the_run_at_its_call_as_a_cpu_bodys_does(tmp_path, gpus):
    """It was a usage error (exit 2) naming no rank and no line, unlike a CPU body that is no function."""
    driver, _ = placement_with_gpu_bodies(tmp_path, ())
    with open(tmp_path / "placement_kernels.py", "a") as module:
        module.write("\npair_gpu = 'fast'\n")
    with pytest.raises(TaskFailure) as error:
        execute(driver, Options(n=56, gpus=gpus))
    assert re.fullmatch(r"kernel module placement_kernels.py: pair_gpu must be a function \(the GPU body of kernel "
                        r"pair, for the call pair\(.*\)\), not str 'fast'", str(error.value))
    assert error.value.line == 21  # placement.tile's call of pair


@pytest.mark.timeout(60)
def test_a_gpu_body_bound_to_none_is_none(tmp_path):
    """``pair_gpu = fast if cupy_found else None``: pair runs on the host, as without the name."""
    driver, _ = placement_with_gpu_bodies(tmp_path, ("pair",))
    with open(tmp_path / "placement_kernels.py", "a") as module:
        module.write("\npair_gpu = None\n")
    assert "pair" not in gpu_kernels(driver.PROGRAM, driver)
    alone = execute(driver, Options(n=56, watchdog=60)).matrices["A"].assemble()
    with_gpus = execute(driver, Options(n=56, gpus=2, gpu_ratio=(1, 1), watchdog=60)).matrices["A"].assemble()
    assert np.array_equal(with_gpus, alone)


@pytest.mark.timeout(120)
def test_gpus_the_ratio_deals_no_column_are_said_to_have_run_nothing(tmp_path):
    """--gpu-ratio 5:1 on five tile columns puts them all on the host: the GPUs sat idle, unsaid."""
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "cholesky", "--n", "640", "--nb", "128",
                          "--gpus", "2", "--gpu-backend", "emulated", "--gpu-ratio", "5:1", "--no-tune"],
                         capture_output=True, text=True, timeout=100)
    assert out.returncode == 0 and ("tiledsl: warning: GPU 1, 2 held no tile and ran no task: the host:GPU ratio 5:1 "
                                    "dealt them no tile column that a task touches at this size (--gpu-ratio 0:1 "
                                    "gives the GPUs every column)") in out.stderr
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "cholesky", "--n", "640", "--nb", "128",
                          "--gpus", "2", "--gpu-backend", "emulated", "--no-tune"],
                         capture_output=True, text=True, timeout=100)
    assert out.returncode == 0 and "ran no task" not in out.stderr, out.stderr
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "cholesky", "--n", "256", "--nb", "256",
                          "--gpus", "2", "--gpu-backend", "emulated", "--gpu-ratio", "0:1", "--no-tune"],
                         capture_output=True, text=True, timeout=100)  # one column: no ratio helps
    assert out.returncode == 0 and ("tiledsl: warning: GPU 2 held no tile and ran no task: the GPUs had every tile "
                                    "column, and there are fewer columns than GPUs at this size (smaller tiles give "
                                    "more)") in out.stderr
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "cholesky", "--n", "300", "--nb", "100",
                          "--np", "2", "--gpus", "2", "--gpu-backend", "emulated", "--no-tune"],
                         capture_output=True, text=True, timeout=100)  # each rank's GPUs: rank 1 has one column
    assert out.returncode == 0 and "warning: rank 0: GPU 2; rank 1: GPU 1, 2 held no tile and ran no task" in out.stderr
    (tmp_path / "k.py").write_text("def scale(A):\n    A *= 2.0\n")  # no GPU body: its tasks run on the host
    (tmp_path / "s.tile").write_text('use "k.py"\nkernel scale(inout A)\nprogram s {\n  tiling uniform(nb = 100)\n'
                                     "  matrix A[n, n] = random general\n"
                                     "  for i in 0 .. A.mt { for j in 0 .. A.nt { scale(A[i, j]) } }\n}\n")
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "s.tile", "--n", "1000", "--gpus", "2",
                          "--gpu-backend", "emulated", "--no-tune"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=100)  # the GPUs hold tiles, and ran nothing for want of a GPU body: said so
    assert out.returncode == 0 and "ran no task" not in out.stderr, out.stderr
    assert "tiledsl: warning: --gpus 2: no task ran on a GPU: kernel(s) scale have no GPU body, so every task ran " \
        "on a host, the GPUs holding tiles for nothing (a kernel NAME runs on GPUs once its module defines a " \
        "function NAME_gpu; `tiledsl explain --gpus 2` shows where each task runs)\n" in out.stderr, out.stderr
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "s.tile", "--n", "300", "--gpus", "2",
                          "--gpu-backend", "emulated", "--gpu-ratio", "1:1", "--no-tune"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=100)  # and GPU 2 got no column: no ratio would help
    assert out.returncode == 0 and "held no tile" not in out.stderr and "--gpu-ratio" not in out.stderr, out.stderr
    assert "no task ran on a GPU: kernel(s) scale have no GPU body" in out.stderr, out.stderr
    (tmp_path / "y.tile").write_text("program y {\n  tiling uniform(nb = 100)\n  matrix A[n, n] = random general\n"
                                     "  matrix Y[n, 100] = zeros\n  for i in 0 .. A.mt { for j in 0 .. A.nt {\n"
                                     '    gemm(A[i, j], A[j, 0], Y[i, 0], "N", "N") } }\n}\n')
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "y.tile", "--n", "300", "--gpus", "2",
                          "--gpu-backend", "emulated", "--no-tune"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=100)  # the GPUs hold columns of A, every task writes Y's one column, the host's
    assert out.returncode == 0 and "tiledsl: warning: --gpus 2: no task ran on a GPU: every task wrote a tile that " \
        "a host holds (a task runs where the tile it writes lies), the GPUs holding only tiles that tasks read; " \
        "--gpu-ratio 0:1 gives the GPUs every tile column" in out.stderr, out.stderr
    # explain says it as the run does (tester g52: it said the GPUs "held no tile", counting only the tiles written)
    explained = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "explain", "y.tile", "--n", "300",
                                "--gpus", "2", "--no-tune"], cwd=tmp_path, capture_output=True, text=True, timeout=100)
    assert explained.returncode == 0 and "held no tile" not in explained.stdout, explained.stdout
    assert "\n--gpus 2: no task ran on a GPU: every task wrote a tile that a host holds (a task runs where the " \
        "tile it writes lies), the GPUs holding only tiles that tasks read; --gpu-ratio 0:1 gives the GPUs every " \
        "tile column\n" in explained.stdout, explained.stdout


@pytest.mark.timeout(120)
def test_kernels_without_a_gpu_body_and_others_placed_on_the_host_are_both_said(tmp_path):
    """Tester x60: a run whose kernels with a GPU body all wrote host tiles, and one kernel had none, was
    told only of the missing body, though defining it would have moved no task."""
    (tmp_path / "k.py").write_text("def scale(A):\n    A *= 2.0\n\ndef fill(A):\n    A[:] = 1.0\n\nfill_gpu = fill\n")
    (tmp_path / "s.tile").write_text('use "k.py"\nkernel scale(inout A)\nkernel fill(inout A)\nprogram s {\n'
                                     "  tiling uniform(nb = 100)\n  matrix A[n, n] = random general\n"
                                     "  matrix Y[n, 100] = zeros\n"
                                     "  for i in 0 .. A.mt { for j in 0 .. A.nt { scale(A[i, j]) } fill(Y[i, 0]) }\n}\n")
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "s.tile", "--n", "300", "--gpus", "2",
                          "--gpu-backend", "emulated", "--no-tune"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=100)
    assert out.returncode == 0 and "tiledsl: warning: --gpus 2: no task ran on a GPU: kernel(s) scale have no GPU " \
        "body (a kernel NAME runs on GPUs once its module defines a function NAME_gpu), and every task of fill " \
        "wrote a tile that a host holds (a task runs where the tile it writes lies), the GPUs holding only tiles " \
        "that tasks read; --gpu-ratio 0:1 gives the GPUs every tile column (`tiledsl explain --gpus 2` shows " \
        "where each task runs)\n" in out.stderr, out.stderr


@pytest.mark.timeout(120)
def test_gpus_of_an_out_of_core_run_hold_their_tiles_on_the_host_and_are_not_said_idle():
    """Out of core, a GPU's tiles live on the host and its cache serves them: it held them, and ran tasks."""
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "cholesky", "--n", "1000", "--nb", "200",
                          "--gpus", "2", "--gpu-backend", "emulated", "--gpu-memory", "2M", "--no-tune", "--json"],
                         capture_output=True, text=True, timeout=100)
    assert out.returncode == 0 and "held no tile" not in out.stderr, out.stderr
    stats = json.loads(out.stdout.splitlines()[-1])["ranks"][0]
    assert stats["out_of_core"] is not None and stats["gpus_without_tiles"] == []
    assert stats["tasks_by_device"]["gpu1"] > 0 and stats["tasks_by_device"]["gpu2"] > 0


@pytest.mark.timeout(120)
def test_a_gpu_dealt_only_tiles_no_task_touches_is_said_to_have_run_nothing(tmp_path):
    """Rank 0's GPU was dealt tile column 5 of a lower Cholesky (above the diagonal: A[0, 5], A[2, 5],
    A[4, 5], which no task touches nor stores): it ran nothing, unsaid, as it 'held tiles'."""
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "cholesky", "--n", "600", "--nb", "100",
                          "--np", "2", "--grid", "2x1", "--gpus", "1", "--gpu-ratio", "5:1", "--gpu-backend",
                          "emulated", "--no-tune", "--json"], capture_output=True, text=True, timeout=100, cwd=tmp_path,
                         env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
    summary = json.loads(out.stdout.splitlines()[-1])
    assert out.returncode == 0 and [r["gpus_without_tiles"] for r in summary["ranks"]] == [[1], []], out.stderr
    assert summary["ranks"][0]["tasks_by_device"]["gpu1"] == 0
    assert summary["notes"] == ["rank 0: GPU 1 held no tile and ran no task: the host:GPU ratio 5:1 dealt it no tile "
                                "column that a task touches at this size (--gpu-ratio 0:1 gives the GPUs every column)"]


def test_gpus_more_than_a_ranks_tile_columns_are_told_of_smaller_tiles_not_of_a_ratio():
    """Three tile columns and four GPUs: the advice '--gpu-ratio 0:1 gives the GPUs every column',
    followed, still left GPU 4 idle (and 97 of 100)."""
    from types import SimpleNamespace

    from tiledsl.runtime.reporting import idle_gpus_warning, rank_columns

    matrices = {"A": SimpleNamespace(nt=3)}
    ranks = [{"rank": 0, "tasks": 10, "gpus_without_tiles": [3, 4]}]
    run = SimpleNamespace(gpus=4, gpu_ratio=(1, 1))
    assert rank_columns(matrices, (1, 1)) == 3 and rank_columns(matrices, (1, 2)) == 2
    assert idle_gpus_warning(run, ranks, columns=rank_columns(matrices, (1, 1))) == (
        "GPU 3, 4 held no tile and ran no task: a rank holds at most 3 tile column(s), fewer than its 4 GPUs: "
        "GPU 4 gets none whatever the host:GPU ratio (smaller tiles give more); --gpu-ratio 0:1 gives GPU 3 a column")
    # GPU 5-8 idle under 0:1 itself (4 columns)
    ranks = [{"rank": 0, "tasks": 10, "gpus_without_tiles": [5, 6, 7, 8]}]
    assert idle_gpus_warning(SimpleNamespace(gpus=8, gpu_ratio=(0, 1)), ranks, columns=4).endswith(
        "there are fewer columns than GPUs at this size (smaller tiles give more)")
    assert idle_gpus_warning(SimpleNamespace(gpus=8, gpu_ratio=(1, 2)), ranks, columns=4).endswith(
        "fewer than its 8 GPUs, whatever the host:GPU ratio (smaller tiles give more)")
    assert "--gpu-ratio 0:1 gives the GPUs every column" in idle_gpus_warning(run, ranks, columns=8)
