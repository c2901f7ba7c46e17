"""Out-of-core GPUs (runtime/outofcore.py, runtime/devicecache.py) through the emulated backend.

A ``--gpu-memory`` of a few tiles sends a run out of core: its GPU tiles stay on
the host and each GPU caches at most that many bytes of them. The result must be
bitwise the in-memory run's and the CPU run's (same kernels, same order per tile),
with copies in and out, evictions and write-backs counted and the peak within the
bound; instances are still those ``explain`` predicts. A bound below one task's
tiles is a one-line error. The eviction policy is tested alone as a state machine.
"""
import json
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tiledsl.commands.explain import plan
from tiledsl.runtime import Options, UsageError, execute
from tiledsl.runtime.devicecache import RESIDENT, WRITING_BACK, CacheFull, CachePolicy
from tiledsl.runtime.engine import TaskFailure
from tiledsl.runtime.outofcore import GpuCache
from tiledsl.runtime.program import Call
from tiledsl.runtime.protocol import Instance
from tiledsl.runtime.reporting import summary_text

ROOT = Path(__file__).resolve().parents[2]
N, NB = 389, 64  # 7×7 tiles, the last row and column ragged (5 wide)
TILE = 8 * NB * NB
BOUND = 5 * TILE  # a few tiles' worth: every task fits, the matrix (49 tiles) does not


def run(driver, **options):
    return execute(driver, Options(n=N, tiles={"nb": NB}, seed=5, watchdog=60, **options))


def assert_within_bound(cache: dict, bound: int) -> None:
    assert cache["cache_bytes"] == bound and 0 < cache["peak_cache_bytes"] <= bound
    assert cache["copies_in"] > 0 and cache["copies_out"] > 0 and cache["evictions"] > 0
    assert cache["bytes_in"] > cache["copies_in"] * 8 * 5 * 5  # the smallest tile is 5×5


# --------------------------------------------------------------------------- whole runs


@pytest.mark.timeout(120)
@pytest.mark.parametrize("program, streams", [("cholesky", 1), ("lu", 3), ("qr", 3)])
def test_out_of_core_is_bitwise_the_in_memory_and_the_cpu_run(compiled, program, streams):
    driver = compiled(f"programs/{program}.tile")
    cpu = run(driver)
    in_memory = run(driver, gpus=2)
    out_of_core = run(driver, gpus=2, gpu_memory=BOUND, check=True, gpu_streams=streams)
    for name, matrix in cpu.matrices.items():
        assert np.array_equal(out_of_core.matrices[name].assemble(), matrix.assemble()), name
        assert np.array_equal(out_of_core.matrices[name].assemble(), in_memory.matrices[name].assemble()), name
    assert out_of_core.passed and in_memory.stats["out_of_core"] is None
    assert_within_bound(out_of_core.stats["out_of_core"], BOUND)
    assert out_of_core.stats["instances"] == in_memory.stats["instances"]
    assert "gpu cache out of core, 160.0 KiB per GPU" in summary_text(driver.PROGRAM, out_of_core, [out_of_core.stats])


@pytest.mark.timeout(120)
def test_a_hybrid_tiling_out_of_core_is_bitwise_the_cpu_run(compiled):
    """Host tasks (POTF2 on the host's slices) read and write tiles the GPUs cached: written back first."""
    driver = compiled("programs/hetero_cholesky.tile")
    tiles = {"B": 160, "b": 48, "s": 3}
    cpu = execute(driver, Options(n=517, tiles=tiles, seed=2, watchdog=60))
    bound = 4 * 8 * 160 * 160
    out_of_core = execute(driver, Options(n=517, tiles=tiles, seed=2, watchdog=60, gpus=2, gpu_memory=bound))
    assert np.array_equal(out_of_core.matrices["A"].assemble(), cpu.matrices["A"].assemble())
    cache = out_of_core.stats["out_of_core"]
    assert 0 < cache["peak_cache_bytes"] <= bound and cache["copies_out"] > 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("program", ["instances", "placement"])
def test_every_instance_type_and_kernels_without_gpu_bodies_out_of_core(compiled, program):
    """instances.tile makes every type one rank can, placement.tile's kernels have no GPU body
    (they run on the host): bitwise the CPU run, with the instances explain predicts."""
    driver = compiled(f"tests/runtime/programs/{program}.tile")
    alone = execute(driver, Options(n=56, watchdog=60)).matrices["A"].assemble()
    options = Options(n=56, gpus=2, gpu_ratio=(1, 1), watchdog=60)
    options.gpu_memory = 4 * 8 * 8 * 8  # four 8×8 tiles
    result = execute(driver, options)
    assert np.array_equal(result.matrices["A"].assemble(), alone)
    explained = plan(driver, Options(n=56, gpu_ratio=(1, 1)), (1, 1), 2).totals()[0]
    assert result.stats["instances"] == [explained[kind] for kind in Instance]
    cache = result.stats["out_of_core"]
    assert cache["peak_cache_bytes"] <= options.gpu_memory
    assert (cache["copies_in"] > 0) == (program == "instances")
    # the copies are the cache's: a zeroed buffer for a T written elsewhere moves nothing (it was counted)
    assert result.stats["device_copies"] == cache["copies_in"] + cache["copies_out"]


def run_two_ranks(program: str, output: Path, *options) -> dict:
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", program, "--np", "2", "--grid", "1x2",
                          "--gpus", "2", "--output", f"A={output}", "--json", "--watchdog", "60", "--no-tune",
                          *map(str, options)], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(200)
def test_two_ranks_out_of_core_receive_on_the_host_and_match_the_cpu_run(compiled, tmp_path):
    cpu = run(compiled("programs/cholesky.tile")).matrices["A"].assemble()
    summary = run_two_ranks("programs/cholesky.tile", tmp_path / "A.npy", "--n", N, "--nb", NB, "--seed", 5,
                            "--gpu-memory", BOUND, "--check")
    assert summary["passed"] and summary["totals"]["messages_sent"] > 0
    for stats in summary["ranks"]:
        assert_within_bound(stats["out_of_core"], BOUND)
    assert summary["out_of_core"]["copies_in"] == sum(r["out_of_core"]["copies_in"] for r in summary["ranks"])
    assert np.array_equal(np.load(tmp_path / "A.npy"), cpu)


@pytest.mark.timeout(200)
def test_two_ranks_out_of_core_make_every_instance_type_explain_predicts(compiled, tmp_path):
    """Minor outputs computed on a GPU for another rank are written back and sent home at once."""
    driver = compiled("tests/runtime/programs/instances.tile")
    alone = execute(driver, Options(n=56, watchdog=60)).matrices["A"].assemble()
    summary = run_two_ranks("tests/runtime/programs/instances.tile", tmp_path / "A.npy", "--n", 56,
                            "--gpu-ratio", "1:1", "--gpu-memory", 4 * 8 * 8 * 8)
    explained = plan(driver, Options(n=56, gpu_ratio=(1, 1)), (1, 2), 2).totals()
    ranks = sorted(summary["ranks"], key=lambda stats: stats["rank"])
    assert [stats["instances"] for stats in ranks] == [[explained[r][kind] for kind in Instance] for r in (0, 1)]
    assert all(stats["instances"][Instance.INTER_NODE_SOURCE_MINOR_OUTPUT - 1] for stats in ranks)
    assert all(0 < stats["out_of_core"]["peak_cache_bytes"] <= 4 * 8 * 8 * 8 for stats in ranks)
    assert np.array_equal(np.load(tmp_path / "A.npy"), alone)


@pytest.mark.timeout(120)
def test_the_bound_is_held_to_the_tiles_the_gpus_hold_not_the_largest_of_the_matrix(compiled):
    """n = 300 on tiles of 200, half the columns on the GPU: it homes A[1, 1] (100×100) and reads
    A[1, 0] (100×200); 240 KiB was refused as "less than one tile (312.50 KiB)", a tile on the host."""
    driver = compiled("programs/cholesky.tile")
    alone = execute(driver, Options(n=300, tiles={"nb": 200}, check=True))
    cached = execute(driver, Options(n=300, tiles={"nb": 200}, check=True, gpus=1, gpu_backend="emulated",
                                     gpu_ratio=(1, 1), gpu_memory=240 * 1024))
    assert cached.passed and np.array_equal(cached.matrices["A"].assemble(), alone.matrices["A"].assemble())


def test_sizes_compared_in_a_message_read_apart_when_they_differ():
    from tiledsl.runtime.resources import compared_bytes

    assert compared_bytes(720000, 719999) == ("720,000 bytes", "719,999 bytes")
    assert compared_bytes(2 ** 20, 2 ** 19) == ("1.00 MiB", "512.00 KiB")
    assert compared_bytes(1, 1) == ("1 byte", "1 byte")


@pytest.mark.timeout(120)
def test_a_bound_below_one_tile_or_one_tasks_tiles_is_refused(compiled):
    driver = compiled("programs/cholesky.tile")
    with pytest.raises(UsageError, match=r"--gpu-memory allows 24.19 KiB, less than the largest tile its GPUs hold "
                                         r"\(32.00 KiB\)"):
        run(driver, gpus=1, gpu_memory=TILE - 8000)
    with pytest.raises(TaskFailure, match=r"a call of gemm needs its 3 tile\(s\) A\[2, 0\], A\[1, 0\], A\[2, 1\] "
                                          r"\(96.00 KiB\) at once on GPU 1, more than its cache of 64.00 KiB "
                                          r"\(--gpu-memory\)"):
        run(driver, gpus=1, gpu_memory=2 * TILE)


def test_a_refused_call_with_a_sub_range_says_the_cache_holds_whole_tiles():
    cache = GpuCache.__new__(GpuCache)
    cache.device, cache.policy = 1, CachePolicy(100)
    cache.ooc = SimpleNamespace(bound="--gpu-memory", rank=0)
    uses = [SimpleNamespace(nbytes=80, name=name) for name in ("A[0, 0]", "A[1, 0]")]
    call = Call("gemm", ("in", "inout"), main=1, line=4, text="gemm")
    with pytest.raises(TaskFailure, match=r"\(160 bytes; a sub-range of this rank's tile holds the whole tile out "
                                          r"of core\) at once"):
        cache.check_fits(call, uses, partial=True)
    with pytest.raises(TaskFailure, match=r"\(160 bytes\) at once"):
        cache.check_fits(call, uses)


class _Use(str):
    nbytes = 8  # a 1×1 tile


def test_a_refused_call_of_many_one_by_one_tiles_names_a_few_and_no_smaller_tiles():
    """179 tiles named on one line of 1,956 characters, and "use smaller tiles" at nb = 1 (tester y58)."""
    cache = GpuCache.__new__(GpuCache)
    cache.device, cache.policy = 1, CachePolicy(64)
    cache.ooc = SimpleNamespace(bound="--gpu-memory", rank=0)
    call = Call("gemm", ("in", "inout"), main=1, line=4, text="gemm")
    with pytest.raises(TaskFailure) as refused:
        cache.check_fits(call, [_Use(f"A[{i}, 0]") for i in range(10)])
    assert str(refused.value) == ("a call of gemm needs its 10 tile(s) A[0, 0], A[1, 0], A[2, 0], A[3, 0], A[4, 0], "
                                  "A[5, 0] and 4 more (80 bytes) at once on GPU 1, more than its cache of 64 bytes "
                                  "(--gpu-memory): allow more")


@pytest.mark.timeout(120)
def test_an_impossible_bound_is_one_line_on_the_command_line_and_a_usage_error():
    """Exit status 2, as the same --gpu-memory refused before the run (below one tile) is: it was 1."""
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "programs/qr.tile", "--n", "300",
                          "--nb", "64", "--gpus", "1", "--gpu-memory", "64K"],
                         cwd=ROOT, capture_output=True, text=True, timeout=100)
    errors = [line for line in out.stderr.splitlines() if "warning" not in line]
    assert out.returncode == 2 and len(errors) == 1, out.stderr
    assert errors[0].startswith("tiledsl: error: rank 0 (qr.tile:") and "more than its cache of 64.00 KiB" in errors[0]


@pytest.mark.timeout(200)
def test_a_sub_range_received_from_another_rank_is_cached_at_its_own_size(tmp_path):
    """Out of core, a column received from another rank is an entry of its own size, said as that
    part; only a sub-range of a tile the rank holds costs the whole tile (and the message says so)."""
    (tmp_path / "k.py").write_text("def take(N, V):\n    V[:, :1] = N\ntake_gpu = take\n")
    (tmp_path / "h.tile").write_text(
        'use "k.py"\nkernel take(in N, inout V) flops 0\nprogram h {\n  tiling uniform(nb = 64)\n'
        "  matrix U[n, n] = random general\n  matrix V[n, n] = zeros\n"
        "  for j in 1 .. U.nt { take(U[0, j - 1][:, 63 : 64], V[0, j]) }\n}\n")
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "h.tile", "--n", "128", "--np", "2",
                          "--grid", "1x2", "--gpus", "1", "--gpu-backend", "emulated", "--gpu-ratio", "0:1",
                          "--gpu-memory", "32K", "--watchdog", "60", "--no-tune"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert out.returncode == 2 and "tiledsl: error: rank 1 (h.tile:7): a call of take needs its 2 tile(s) " \
        "U[0, 0][0:64, 63:64], V[0, 1] (32.50 KiB) at once on GPU 1, more than its cache of 32.00 KiB" in out.stderr, \
        out.stderr


# --------------------------------------------------------------------------- the policy alone


def resident(policy: CachePolicy, key, nbytes=1, version=0, dirty=False):
    entry = policy.add(key, nbytes, version)
    policy.arrived(entry)
    if dirty:
        policy.wrote(entry, version + 1)
    return entry


def test_victims_are_unused_ones_oldest_first_then_the_furthest_next_use():
    policy = CachePolicy(capacity=4)
    for key in "abcd":
        policy.pin(resident(policy, key))
        policy.unpin(policy.entries[key])
    policy.plan(7, ["a"])
    policy.plan(3, ["b"])
    policy.pin(policy.entries["c"])  # c: used again, so d is the least recently used of the unused
    policy.unpin(policy.entries["c"])
    order = []
    for new in range(4):
        enough, dropped, to_write_back = policy.make_room(1)
        assert enough and not to_write_back
        order += [entry.key for entry in dropped]
        resident(policy, new)
        policy.plan(0, [new])  # the newcomers are needed first of all
    assert order == ["d", "c", "a", "b"]
    assert policy.evictions == 4 and policy.used == 4


def test_pinned_fetching_and_dirty_entries_are_not_dropped_dirty_ones_are_written_back_first():
    policy = CachePolicy(capacity=3)
    pinned = resident(policy, "pinned")
    policy.pin(pinned)
    policy.add("fetching", 1, 0)
    dirty = resident(policy, "dirty", dirty=True)
    assert policy.make_room(1) == (False, [], [dirty])
    policy.write_back(dirty)
    assert dirty.state == WRITING_BACK and policy.make_room(1) == (False, [], [])  # its write-back is under way
    policy.written_back(dirty)
    assert dirty.state == RESIDENT and not dirty.dirty
    assert policy.make_room(1) == (True, [dirty], [])
    assert set(policy.entries) == {"pinned", "fetching"}
    assert (policy.write_backs, policy.written_bytes, policy.fetches) == (1, 1, 3)


def test_a_prefetch_takes_only_entries_no_earlier_task_needs():
    policy = CachePolicy(capacity=2)
    soon, late = resident(policy, "soon"), resident(policy, "late")
    policy.plan(1, ["soon"])
    policy.plan(9, ["late"])
    assert policy.make_room(1, before=5) == (True, [late], [])
    assert policy.make_room(2, before=5) == (False, [], [])  # task 1 needs soon before task 5
    assert policy.make_room(2) == (True, [soon], [])  # the running task may take any
    policy.unplan(1, ["soon"])
    assert policy.next_use("soon") is None and policy.next_use("late") == 9


def test_a_task_larger_than_the_cache_is_refused():
    with pytest.raises(CacheFull):
        CachePolicy(capacity=10).make_room(11)


def test_a_simulated_window_never_exceeds_the_bound_and_fetches_only_what_the_host_holds():
    """Random tasks of one to three tiles, some written, each admitted as a GPU's management thread
    does (hits pinned first, then room made; write-backs and fetches arrive later, in order): a tile
    leaves the cache only once the host holds its newest version."""
    rng = random.Random(7)
    sizes = {key: rng.choice([2, 3, 5]) for key in range(12)}
    policy = CachePolicy(capacity=16)
    tasks = [rng.sample(range(12), rng.randint(1, 3)) for _ in range(300)]
    for number, keys in enumerate(tasks):
        policy.plan(number, keys)
    versions, on_host = dict.fromkeys(sizes, 0), dict.fromkeys(sizes, 0)
    for number, keys in enumerate(tasks):
        taken, under_way = {}, []
        while len(taken) < len(keys) or under_way:
            for key in keys:
                if key not in taken and policy.lookup(key, versions[key]) is not None:
                    taken[key] = policy.lookup(key, versions[key])
                    policy.pin(taken[key])
            for key in [k for k in keys if k not in taken]:
                enough, dropped, to_write_back = policy.make_room(sizes[key])
                assert not any(entry.dirty for entry in dropped)
                for entry in to_write_back:
                    policy.write_back(entry)
                    under_way.append(entry)
                if not enough:
                    break
                assert on_host[key] == versions[key]
                taken[key] = policy.add(key, sizes[key], versions[key])
                policy.pin(taken[key])
                under_way.append(taken[key])
            assert policy.used <= policy.capacity
            assert under_way or len(taken) == len(keys), "no room, and nothing under way to make some"
            if under_way:  # the oldest copy arrives
                entry = under_way.pop(0)
                if entry.state == WRITING_BACK:
                    on_host[entry.key] = entry.version
                    policy.written_back(entry)
                else:
                    policy.arrived(entry)
        for key in keys:
            if rng.random() < 0.5:
                versions[key] += 1
                policy.wrote(taken[key], versions[key])
            policy.unpin(taken[key])
        policy.unplan(number, keys)
    assert policy.peak <= policy.capacity and policy.evictions > 0 and policy.write_backs > 0


# --------------------------------------------------------------------------- a real GPU (skipped without one)


def _cupy_or_skip() -> None:
    from tiledsl.runtime.backends import backend

    try:
        backend("cupy", 1)
    except ValueError as error:
        pytest.skip(f"needs CuPy and an NVIDIA GPU: {error}")


@pytest.mark.timeout(300)
def test_out_of_core_on_a_gpu_is_bitwise_its_in_memory_run(compiled):
    """CuPy: host tiles pinned, copied straight into and out of them; same kernels, same result."""
    _cupy_or_skip()
    driver = compiled("programs/cholesky.tile")
    in_memory = run(driver, gpus=1, gpu_backend="cupy")
    out_of_core = run(driver, gpus=1, gpu_backend="cupy", gpu_memory=BOUND, check=True)
    assert np.array_equal(out_of_core.matrices["A"].assemble(), in_memory.matrices["A"].assemble())
    assert out_of_core.passed
    assert_within_bound(out_of_core.stats["out_of_core"], BOUND)


@pytest.mark.timeout(120)
def test_gpus_homing_no_tile_hold_nothing_whatever_the_bound(compiled):
    """One tile column, dealt to the host at 1:1: no task runs on the GPU, so no bound sends the
    run out of core (nor refuses it for being below one tile)."""
    driver = compiled("programs/tsqr.tile")
    result = execute(driver, Options(n=1200, tiles={"nb": 150}, sets={"cols": 150, "ib": 30, "domains": 2}, gpus=1,
                                     gpu_ratio=(1, 1), gpu_memory=100 * 1024, watchdog=60))
    assert result.stats["out_of_core"] is None and result.stats["tasks_by_device"] == {"host": result.tasks, "gpu1": 0}


@pytest.mark.timeout(120)
def test_tiles_only_host_tasks_read_are_not_counted_as_copies_a_gpu_may_hold(compiled):
    """cholesky n=1000 nb=200 on one GPU at 1:1 (ratio default): the GPU homes 1.9 MB and receives at
    most as much, yet --gpu-memory 6M went out of core (12 copies in, 0 evictions, --host-takes off):
    the estimate counted twice every host tile, read by host tasks only."""
    driver = compiled("programs/cholesky.tile")
    options = dict(n=1000, tiles={"nb": 200}, seed=5, watchdog=60, gpus=1, gpu_ratio=(1, 1))
    in_memory = execute(driver, Options(**options))
    bounded = execute(driver, Options(**options, gpu_memory=6 * 2 ** 20))
    assert bounded.stats["out_of_core"] is None
    assert bounded.stats["device_copies"] == in_memory.stats["device_copies"]
    assert np.array_equal(bounded.matrices["A"].assemble(), in_memory.matrices["A"].assemble())
    assert execute(driver, Options(**options, gpu_memory=2 * 2 ** 20)).stats["out_of_core"] is not None


@pytest.mark.timeout(120)
def test_a_bound_below_one_tile_is_no_matter_where_no_task_runs_on_a_gpu(tmp_path):
    """Tester z80c: a --gpu-memory below the largest tile was refused though the program's kernel has no GPU
    body, so every task runs on the host and the caches stay empty; with a GPU body it is still refused."""
    import tiledsl

    (tmp_path / "k.py").write_text("def twice(A):\n    A *= 2\n")
    (tmp_path / "g.tile").write_text('use "k.py"\nkernel twice(inout A)\nprogram g {\n  tiling uniform(nb = 64)\n'
                                     "  matrix A[n, n] = random general\n"
                                     "  for i in 0 .. A.mt { for j in 0 .. A.nt { twice(A[i, j]) } }\n}\n")
    settings = {"n": N, "seed": 5, "gpus": 1, "gpu_backend": "emulated", "gpu_memory": TILE // 4}
    alone = tiledsl.load(tmp_path / "g.tile").run(n=N, seed=5)
    with pytest.warns(tiledsl.TiledslWarning, match=r"no task ran on a GPU: kernel\(s\) twice have no GPU body"):
        cached = tiledsl.load(tmp_path / "g.tile").run(**settings)
    assert np.array_equal(cached.matrices["A"], alone.matrices["A"])
    cache = cached.gpus["out_of_core"]
    assert cache["cache_bytes"] == TILE // 4 and cache["peak_cache_bytes"] == 0, cache
    (tmp_path / "k.py").write_text("def twice(A):\n    A *= 2\n\n\ndef twice_gpu(A):\n    A *= 2\n")
    with pytest.raises(tiledsl.TiledslError, match=r"gpu_memory allows 8.00 KiB, less than the largest tile its GPUs "
                                                   r"hold \(32.00 KiB\)"):
        tiledsl.load(tmp_path / "g.tile").run(**settings)
