"""The checks made before a run starts (runtime/resources.py): a rank without tiles is warned of; and
the grid a run takes by default (world.preferred_grid, layout.placement)."""
import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tiledsl.runtime import Call, MatrixDecl, Options, Program, Tiling, resources
from tiledsl.runtime.distribution import BlockCyclic, Hybrid
from tiledsl.runtime.layout import make_params, placement
from tiledsl.runtime.resources import ranks_without_tiles
from tiledsl.runtime.world import UsageError, preferred_grid

PROGRAMS = Path(__file__).resolve().parents[2] / "programs"


def _program(*names):
    return SimpleNamespace(matrices=[SimpleNamespace(name=name) for name in names])


def _matrix(distribution, mt, nt):
    return SimpleNamespace(distribution=distribution, mt=mt, nt=nt)


@pytest.mark.timeout(10)
def test_a_rank_owning_tiles_of_another_matrix_only_is_enough():
    grid = BlockCyclic(pr=1, pc=2)
    assert ranks_without_tiles(_program("S", "A"), {"S": _matrix(grid, 1, 1), "A": _matrix(grid, 4, 4)}, 2,
                               pytest.fail) is None  # no warning: no grid to walk for


@pytest.mark.timeout(10)
def test_hybrid_tiles_are_counted_in_block_columns_and_the_busy_grids_advised():
    """4×12 tiles in block columns of s = 3 (4 of them): 1x6 leaves two ranks without a block column."""
    matrices = {"A": _matrix(Hybrid(pr=1, pc=6, s=3), 4, 12)}
    advice = "use --grid 2x3 or --grid 3x2, on which every rank runs a task"
    assert ranks_without_tiles(_program("A"), matrices, 6, lambda: advice) == (
        "6 ranks but only 4 of them own tiles (the largest matrix, A, has 4×12 tiles, 4 block column(s) of 3 "
        "slices): ranks 4 and 5 have nothing to do; use --grid 2x3 or --grid 3x2, on which every rank runs a task")


@pytest.mark.timeout(10)
def test_the_advice_is_asked_for_only_where_a_rank_has_no_tiles():
    matrices = {"A": _matrix(Hybrid(pr=1, pc=3, s=3), 2, 6)}
    assert ranks_without_tiles(_program("A"), matrices, 3, lambda: "ADVICE").endswith(
        "only 2 of them own tiles (the largest matrix, A, has 2×6 tiles, 2 block column(s) of 3 slices): "
        "rank 2 has nothing to do; ADVICE")
    assert ranks_without_tiles(_program("A"), matrices, 2, lambda: pytest.fail("asked")) is None


def _writing(*panels) -> Program:
    """A program with one call per (mode, axis) in ``panels``: a panel it reads or writes."""
    calls = tuple(Call("k", ("in", mode), main=1, line=1, text="k", panels=(1,), panel_axes=(axis,))
                  for mode, axis in panels)
    return Program("p", "p.tile", Tiling("uniform", {"nb": 1}), (MatrixDecl("A", "general", line=1),), calls=calls)


def test_a_program_writing_columns_of_tiles_gets_one_process_row():
    assert preferred_grid(_writing(("inout", 0), ("in", 1)), 6) == (1, 6)
    assert preferred_grid(_writing(("out", 1)), 6) == (6, 1)
    assert preferred_grid(_writing(("inout", 0), ("inout", 1)), 6) == (2, 3)
    assert preferred_grid(_writing(("in", 0)), 4) == (2, 2)


def test_a_program_writing_panels_takes_the_grid_where_most_ranks_compute(compiled):
    """gemm on 12×12 tiles and 16 ranks took 4x4 (1x16 leaves 4 ranks without tiles): 4 ranks computed and
    the messages doubled, where 1x16 has 12 computing. getrf's updates run in every process row: on 5 tile
    columns and 6 ranks, 2x3 has all 6 computing (1x6: 5), and on 3 tile columns and 4 ranks 2x2 has 4
    (1x4 left a rank without a tile, where the grid's choice counted only process columns)."""
    getrf = compiled("programs/getrf.tile")
    params = make_params(getrf, Options(n=301, tiles={"nb": 64}))  # 5 tile columns
    assert placement(getrf, params, None, 4, 0, 0)[0] == (1, 4)
    assert placement(getrf, params, None, 6, 0, 0)[0] == (2, 3)
    assert placement(getrf, make_params(getrf, Options(n=300, tiles={"nb": 100})), None, 4, 0, 0)[0] == (2, 2)
    assert placement(getrf, params, "3x2", 6, 0, 0)[0] == (3, 2)
    gemm = compiled("programs/gemm.tile")
    square = make_params(gemm, Options(n=1200, tiles={"nb": 100}))
    assert placement(gemm, square, None, 16, 0, 0)[0] == (1, 16)


def test_without_a_grid_the_squarest_one_that_gives_every_rank_tiles_is_taken(compiled):
    gemm = compiled("programs/gemm.tile")
    narrow = make_params(gemm, Options(n=50, tiles={"nb": 64}, sets={"m": 301, "k": 50}))  # C: 5×1 tiles
    assert placement(gemm, narrow, None, 3, 0, 0)[0] == (3, 1)  # 1x3 would leave two ranks idle
    assert placement(gemm, narrow, None, 4, 0, 0)[0] == (4, 1)
    wide = make_params(gemm, Options(n=301, tiles={"nb": 64}, sets={"m": 50, "k": 50}))  # C: 1×5 tiles
    assert placement(gemm, wide, None, 3, 0, 0)[0] == (1, 3)
    assert placement(gemm, wide, None, 7, 0, 0)[0] == (1, 7)  # none works: the preferred one, here the squarest


_ROW_SUM = """program rowsum {
  tiling uniform(nb = 64)
  matrix A[n, 64] = random general
  matrix C[n, 64] = zeros
  for m in 1 .. A.mt { gemm(A[m, 0], A[m, 0], WRITTEN, "T", "N") }
}
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("written, advice", [
    ("C[m, 0]", "use --grid 2x1, on which every rank runs a task"),
    # every task writes A[0, 0]: 2x1 gives rank 1 tiles but no task (it was advised), nor do smaller tiles
    ("A[0, 0]", "no grid of 2 ranks gives every rank a task, nor at smaller tiles (down to --nb 8): use fewer ranks")])
def test_a_rank_without_tiles_is_advised_only_a_grid_on_which_it_would_compute(tmp_path, capsys, written, advice):
    from tiledsl.commands.cli import main

    (tmp_path / "rowsum.tile").write_text(_ROW_SUM.replace("WRITTEN", written))
    assert main(["explain", str(tmp_path / "rowsum.tile"), "--grid", "1x2", "--n", "256", "--totals"]) == 0
    assert ("tiledsl: warning: 2 ranks but only 1 of them own tiles (the largest matrix, A, has 4×1 tiles): rank 1 "
            f"has nothing to do; {advice}\n") in capsys.readouterr().err  # (after A[0, 0]'s: C is never used)


@pytest.mark.timeout(60)
def test_where_no_grid_gives_every_rank_tiles_a_program_writing_rows_keeps_one_process_column(compiled, tmp_path):
    """2×2 tiles on 3 ranks: 1x3 (the squarest, taken before) ran both row tasks on rank 0 and sent
    4 messages; 3x1 gives ranks 0 and 1 a row each, and sends nothing."""
    (tmp_path / "rp.py").write_text("def rowscale(P):\n    for t in P:\n        t *= 2.0\n")
    (tmp_path / "rowp.tile").write_text('use "rp.py"\nkernel rowscale(inout P)\nprogram rowp {\n'
                                        "  tiling uniform(nb = 50)\n  matrix A[n, n] = random general\n"
                                        "  for i in 0 .. A.mt { rowscale(A[i, 0 : A.nt]) }\n}\n")
    rows = compiled(str(tmp_path / "rowp.tile"))
    assert placement(rows, make_params(rows, Options(n=100)), None, 3, 0, 0)[0] == (3, 1)


def _memory_case(tile_bytes: int, transfers_window: int, check: bool):
    """check_memory's arguments for one 1×1-tiled matrix whose single tile is ``tile_bytes`` (a multiple of 8)."""
    side = tile_bytes // 8
    distribution = SimpleNamespace(nranks=1)
    matrix = SimpleNamespace(rank=0, m=side, n=1, distribution=distribution,
                             geometry=SimpleNamespace(row_starts=[0, side], col_starts=[0, 1]),
                             owned_extent=lambda: (1, tile_bytes))
    tile = SimpleNamespace(rank=0, matrix=matrix, shape=(side, 1))
    program = SimpleNamespace(matrices=[SimpleNamespace(name="A")], check=SimpleNamespace(kind="cholesky"))
    return program, {"A": matrix}, [tile], transfers_window, check


@pytest.mark.timeout(10)
@pytest.mark.parametrize("window, check, named, unnamed", [
    (0, False, [], ["--window", "--check"]),
    (2, False, ["a smaller --window"], ["--check"]),
    (0, True, ["without --check"], ["--window"])])
def test_the_memory_refusal_names_only_remedies_that_shrink_what_it_refuses(monkeypatch, window, check, named,
                                                                         unnamed):
    """A smaller --window was advised though the estimate had no window buffers (1 rank, no GPUs), and
    "more ranks" though the ranks on one node share its memory."""
    monkeypatch.setattr(resources, "_available_memory", lambda: (8, ""))
    with pytest.raises(UsageError) as refused:
        resources.check_memory(*_memory_case(1024, window, check))
    advice = str(refused.value).split("is available: ", 1)[1]
    assert advice.startswith("use more ranks on other nodes (the ranks on one node share its memory)")
    assert all(words in advice for words in named) and not any(words in advice for words in unnamed), advice


@pytest.mark.timeout(10)
def test_the_memory_refusal_of_an_api_run_advises_in_the_apis_terms(monkeypatch):
    """A run from Python (one rank) was advised "a smaller --n, or run without --check"."""
    from tiledsl.runtime.options import API

    monkeypatch.setattr(resources, "_available_memory", lambda: (8, ""))
    with pytest.raises(UsageError) as refused:
        resources.check_memory(*_memory_case(1024, 2, True), spelling=API)
    assert str(refused.value).endswith(
        "is available: use more ranks on other nodes (the ranks on one node share its memory) with tiledsl run --np "
        "(a run from Python is one rank) or a smaller n, or run with check=False")


def _cgroup_tree(tmp_path, version: int, limit: str, usage: int, inactive: int):
    """A /proc/self/cgroup and a /sys/fs/cgroup of one memory cgroup, as cgroup v1 or v2 lay them out."""
    if version == 1:
        (tmp_path / "cgroup").write_text("4:memory:/job\n0::/\n")
        folder, names = tmp_path / "sys" / "memory" / "job", ("memory.limit_in_bytes", "memory.usage_in_bytes",
                                                            "total_inactive_file")
    else:
        (tmp_path / "cgroup").write_text("0::/job\n")
        folder, names = tmp_path / "sys" / "job", ("memory.max", "memory.current", "inactive_file")
    folder.mkdir(parents=True)
    (folder / names[0]).write_text(f"{limit}\n")
    (folder / names[1]).write_text(f"{usage}\n")
    (folder / "memory.stat").write_text(f"anon 5\n{names[2]} {inactive}\n")
    return str(tmp_path / "cgroup"), str(tmp_path / "sys")


@pytest.mark.timeout(10)
@pytest.mark.parametrize("version", [1, 2])
def test_a_containers_memory_limit_is_what_a_run_may_take(tmp_path, version):
    """A container's limit was not looked at: MemAvailable is the host's, so a run past the limit was
    killed by the kernel (a rank lost) rather than refused with its numbers. Its file cache counts
    as free, as the kernel reclaims it first."""
    paths = _cgroup_tree(tmp_path, version, str(2 ** 30), 700 * 2 ** 20, 100 * 2 ** 20)
    assert resources.cgroup_memory_left(*paths) == 2 ** 30 - 600 * 2 ** 20


@pytest.mark.timeout(10)
@pytest.mark.parametrize("version, limit", [(1, "9223372036854771712"), (2, "max")])
def test_a_cgroup_without_a_limit_is_no_limit(tmp_path, version, limit):
    assert resources.cgroup_memory_left(*_cgroup_tree(tmp_path, version, limit, 2 ** 20, 0)) is None


@pytest.mark.timeout(60)
def test_a_run_past_the_address_space_limit_is_refused_naming_it(tmp_path):
    """Under `ulimit -v`, a run past it was an internal error (MemoryError while making its tiles, exit 3)."""
    limit = 1536 * 2 ** 20
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", str(PROGRAMS / "cholesky.tile"),
                          "--n", "20000", "--nb", "500"], capture_output=True, text=True, timeout=50, cwd=tmp_path,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
                         env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
    assert out.returncode == 2 and ("(under the address-space limit, ulimit -v): raise the limit, or use more ranks "
                                    "(each has its own limit) or a smaller --n") in out.stderr, out.stderr
    assert "the run needs at least 1.49 GiB on this rank" in out.stderr and "internal error" not in out.stderr


@pytest.mark.timeout(60)
def test_memory_that_runs_out_past_the_estimate_is_said_as_out_of_memory(tmp_path):
    """A MemoryError the estimate did not foresee (another process took the memory meanwhile) was said
    as an internal error of tiledsl, exit 3, asking for a bug report."""
    script = ("import sys\nfrom tiledsl.runtime import launch\n"
              "def full(*args):\n    raise MemoryError('Unable to allocate 1.91 MiB for an array')\n"
              "launch.check_memory = full\nfrom tiledsl.commands.cli import main\n"
              f"sys.exit(main(['run', {str(PROGRAMS / 'cholesky.tile')!r}, '--n', '64', '--json']))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=50, cwd=tmp_path,
                         env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
    assert out.returncode == 1 and "internal error" not in out.stderr, out.stderr
    assert "rank 0: out of memory: Unable to allocate 1.91 MiB for an array; use more ranks" in out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["ok"] is False


@pytest.mark.timeout(10)
def test_a_refusal_under_a_small_limit_says_its_sizes_in_mib():
    """Under `ulimit -v 600000` a refusal read 'needs about 0.31 GiB ... but 0.24 GiB is available', and
    advised more ranks on other nodes, where each rank has its own limit."""
    case = _memory_case(8 * 2 ** 20, 0, False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(resources, "_available_memory", lambda: (5 * 2 ** 20, resources._ADDRESS_LIMIT))
        with pytest.raises(UsageError) as refused:
            resources.check_memory(*case)
    assert str(refused.value) == (
        "the run needs about 8.00 MiB on this rank (tiles 8.00 MiB, transfer buffers 0 bytes, check 0 bytes) but "
        "5.00 MiB is available (under the address-space limit, ulimit -v): raise the limit, or use more ranks (each "
        "has its own limit) or a smaller --n")


@pytest.mark.timeout(60)
def test_tiny_tiles_are_refused_for_their_records_before_any_tile_is_made(compiled, monkeypatch):
    """--n 1500 --nb 1 under ulimit -v 1100000: 2,250,000 tiles of 8 bytes passed the estimate of their
    values, then ran out of memory making the tiles' objects (about 500 bytes each)."""
    cholesky = compiled("programs/cholesky.tile")
    matrices = placement(cholesky, make_params(cholesky, Options(n=1500, tiles={"nb": 1})), None, 1, 0, 0)[2]
    monkeypatch.setattr(resources, "_available_memory", lambda: (500 * 2 ** 20, resources._ADDRESS_LIMIT))
    with pytest.raises(UsageError) as refused:
        resources.check_memory(cholesky.PROGRAM, matrices, None, 0, False, 0.5)
    said = str(refused.value)
    assert "(50% of the 17.17 MiB of tiles it owns, and 1.07 GiB of their records" in said, said
    assert "raise the limit, or use larger tiles, more ranks" in said
    assert matrices["A"].made_tiles() == []


@pytest.mark.timeout(10)
def test_a_stall_with_little_address_space_left_says_so(monkeypatch):
    """A kernel's first BLAS call under a small `ulimit -v` waits for ever in OpenBLAS for its buffers: the
    watchdog blamed the kernel alone."""
    monkeypatch.setattr(resources, "address_space_left", lambda: 31 * 2 ** 20)
    monkeypatch.setattr(resources.resource, "getrlimit", lambda which: (350000 * 1024, resource.RLIM_INFINITY))
    assert resources.address_space_note() == (
        "; only 31.00 MiB of address space is left under this process's limit (ulimit -v 350000, in KiB), where a "
        "BLAS waits for ever for buffers it cannot have: raise the limit")
    monkeypatch.setattr(resources, "address_space_left", lambda: 200 * 2 ** 20)
    assert resources.address_space_note() == ""


@pytest.mark.timeout(10)
def test_a_refusal_of_a_run_sized_by_its_inputs_does_not_advise_a_smaller_n(monkeypatch):
    """--input A=big.npy (200000×200000) was advised 'a smaller --n', which the file's shape then refused."""
    monkeypatch.setattr(resources, "_available_memory", lambda: (8, ""))
    with pytest.raises(UsageError) as refused:
        resources.check_memory(*_memory_case(1024, 0, False), sized_by_inputs=True)
    assert str(refused.value).endswith("is available: use more ranks on other nodes (the ranks on one node share its "
                                       "memory) or smaller inputs (the files or arrays given fix the sizes)")


@pytest.mark.timeout(60)
def test_the_advice_of_smaller_tiles_starts_from_the_matrix_and_names_the_programs_grid(tmp_path, capsys):
    """n = 40 and nb = 256: 'nor at smaller tiles (down to --nb 32)', where --nb 10 gives every rank a task;
    a program writing rows of tiles was advised 1x4, its messages many, where its own 4x1 sends none."""
    from tiledsl.commands.cli import main

    assert main(["explain", "cholesky", "--grid", "2x2", "--n", "40", "--totals"]) == 0
    assert "no grid of 4 ranks gives every rank a task: use fewer ranks, or smaller tiles (--nb 14 on --grid " \
           "2x2)" in capsys.readouterr().err
    (tmp_path / "k.py").write_text("def pscale(P):\n    for t in P:\n        t *= 2.0\n")
    (tmp_path / "rows.tile").write_text('use "k.py"\nkernel pscale(inout P)\nprogram rows {\n  tiling uniform(nb = 50)\n'
                                        "  matrix A[n, n] = random general\n"
                                        "  for k in 0 .. A.mt { pscale(A[k, k : A.nt]) }\n}\n")
    assert main(["explain", str(tmp_path / "rows.tile"), "--grid", "4x1", "--n", "130", "--totals"]) == 0
    assert "smaller tiles (--nb 33 on --grid 4x1)" in capsys.readouterr().err  # 4 tile rows, as even as they go
    # the halvings of 3 went to 1 (100 tiles), where 2 works (25)
    assert main(["explain", "lu", "--grid", "1x5", "--n", "10", "--nb", "3", "--totals"]) == 0
    assert "smaller tiles (--nb 2 on --grid 1x5)" in capsys.readouterr().err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n, nb", [(2, 1), (1, 256)])
def test_at_1x1_tiles_only_fewer_ranks_are_advised(compiled, n, nb):
    """Smaller tiles were advised at nb = 1 (or a 1x1 matrix), where none exist."""
    from tiledsl.runtime.gridadvice import idle_rank_advice

    cholesky = compiled("programs/cholesky.tile")
    options = Options(n=n, tiles={"nb": nb})
    assert idle_rank_advice(cholesky, options, make_params(cholesky, options), 4) == \
        "no grid of 4 ranks gives every rank a task, and each tile is a single element already: use fewer ranks"


@pytest.mark.timeout(10)
def test_under_an_address_limit_the_threads_reservations_count_and_fewer_workers_are_advised(monkeypatch):
    """qr at n = 800 under `ulimit -v 500000` passed the estimate (tiles and check: 20 MiB), then its workers'
    first BLAS calls found no room for OpenBLAS's buffers: it waited, gave up and the process crashed."""
    monkeypatch.setattr(resources, "_available_memory", lambda: (100 * 2 ** 20, resources._ADDRESS_LIMIT))
    monkeypatch.setattr(resources, "address_space_left", lambda: 100 * 2 ** 20)
    monkeypatch.setattr(resources, "thread_stack_bytes", lambda: 8 * 2 ** 20)
    monkeypatch.setattr(resources, "_reserved", {"workers": 0})
    case = _memory_case(8 * 2 ** 20, 0, False)
    resources.check_memory(*case)  # no threads: the tiles fit
    with pytest.raises(UsageError) as refused:
        resources.check_memory(*case, threads=(2, 1))  # 3 stacks and 2 workers' two BLAS buffers: 152 MiB
    assert str(refused.value) == (
        "the run needs about 160.00 MiB on this rank (tiles 8.00 MiB, transfer buffers 0 bytes, check 0 bytes, "
        "threads 152.00 MiB (each thread's stack and a worker's BLAS buffers, reserved under ulimit -v)) but 100.00 MiB "
        "is available (under the address-space limit, ulimit -v): raise the limit, or use fewer workers (--workers N)")
    resources.check_memory(*case, threads=(1, 0))  # 16 + 64 + 8 MiB: fits, and OpenBLAS keeps that buffer
    assert resources.thread_address_space(1, 0) == 8 * 2 ** 20


@pytest.mark.timeout(10)
def test_without_an_address_limit_the_threads_reservations_do_not_count(monkeypatch):
    monkeypatch.setattr(resources, "_available_memory", lambda: (9 * 2 ** 20, ""))
    monkeypatch.setattr(resources, "address_space_left", lambda: None)
    resources.check_memory(*_memory_case(8 * 2 ** 20, 0, False), threads=(64, 8))


@pytest.mark.timeout(60)
def test_under_an_address_limit_threads_share_one_malloc_arena():
    """Each thread's first allocation reserved a 64 MiB arena of the limited address space, past the estimate."""
    script = ("import ctypes, re, threading\nfrom tiledsl.runtime import world\n"
              "def size():\n    return int(re.search(r'VmSize:\\s+(\\d+)', open('/proc/self/status').read())[1])\n"
              "world.share_malloc_arenas()\nbefore = size()\nlibc = ctypes.CDLL(None)\n"
              "libc.malloc.restype = ctypes.c_void_p\nfree = threading.Barrier(5)\n"
              "def allocate():\n    libc.malloc(1000)\n    free.wait()\n"
              "threads = [threading.Thread(target=allocate) for _ in range(4)]\n"
              "[t.start() for t in threads]\ngrown = size() - before\nfree.wait()\nprint(grown // 1024)\n")
    limit = 4 * 2 ** 30
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=50,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    assert out.returncode == 0, out.stderr
    stacks = 4 * resources.thread_stack_bytes() // 2 ** 20
    assert int(out.stdout) <= stacks + 16, (out.stdout, stacks)  # an arena each: 256 MiB more


@pytest.mark.timeout(10)
def test_a_refusal_first_collects_the_cycles_an_earlier_run_left(monkeypatch):
    """From Python, a run after a large one was refused: its arrays, held in reference cycles, were not
    collected yet (gc.collect() before it let the run through)."""
    collected = []
    monkeypatch.setattr(resources.gc, "collect", lambda: collected.append(True))
    monkeypatch.setattr(resources, "_available_memory", lambda: ((9 if collected else 7) * 2 ** 20, ""))
    resources.check_memory(*_memory_case(8 * 2 ** 20, 0, False))
    assert collected == [True]


@pytest.mark.timeout(10)
@pytest.mark.parametrize("threads, tile_bytes, available, said", [
    ((1, 1), 64 * 2 ** 20, 100, "raise the limit, or use more ranks (each has its own limit), a smaller --n or "
                                "smaller thread stacks (ulimit -s, 8.00 MiB now)"),
    ((4, 1), 2 ** 10, 100, "raise the limit, or use fewer workers (--workers N)"),
    ((1, 1), 2 ** 10, 60, "raise the limit"),
    # 5 MiB short, which 1 MiB stacks give back (14 MiB); the window, at 1, and the check, 1 KiB, cannot (tester y58)
    ((1, 1), 2 ** 10, 75, "raise the limit, or use smaller thread stacks (ulimit -s, 8.00 MiB now)"),
])
def test_a_refusal_under_ulimit_v_advises_only_what_can_help(monkeypatch, threads, tile_bytes, available, said):
    """'fewer workers' was advised to a run of one worker, and 'more ranks or a smaller --n' where the threads'
    reservations alone (80 MiB) passed what was available (47 MiB): neither could make it fit."""
    monkeypatch.setattr(resources, "_available_memory", lambda: (available * 2 ** 20, resources._ADDRESS_LIMIT))
    monkeypatch.setattr(resources, "address_space_left", lambda: available * 2 ** 20)
    monkeypatch.setattr(resources, "thread_stack_bytes", lambda: 8 * 2 ** 20)
    monkeypatch.setattr(resources, "_reserved", {"workers": 0})
    with pytest.raises(UsageError) as refused:
        resources.check_memory(*_memory_case(tile_bytes, 0, False), threads=threads)
    assert str(refused.value).endswith(f"is available (under the address-space limit, ulimit -v): {said}"), \
        refused.value


@pytest.mark.timeout(10)
def test_a_refusal_advises_no_window_or_check_too_small_to_close_the_gap(monkeypatch):
    """'use a smaller --window' at --window 1, and 'run without --check' for a check of a few KiB, where the run
    was 27 MiB short: followed, the run was refused again (tester y58)."""
    monkeypatch.setattr(resources, "_available_memory", lambda: (75 * 2 ** 20, resources._ADDRESS_LIMIT))
    monkeypatch.setattr(resources, "address_space_left", lambda: 75 * 2 ** 20)
    monkeypatch.setattr(resources, "thread_stack_bytes", lambda: 8 * 2 ** 20)
    monkeypatch.setattr(resources, "_reserved", {"workers": 0})
    with pytest.raises(UsageError) as refused:
        resources.check_memory(*_memory_case(2 ** 10, 1, True), threads=(1, 1))
    assert str(refused.value).endswith(": raise the limit, or use smaller thread stacks (ulimit -s, 8.00 MiB now)")


def test_ranks_are_named_as_a_sentence_names_them():
    from tiledsl.runtime.world import ranks_text

    assert [ranks_text(r) for r in ([3], [1, 2], [0, 1, 2], list(range(20)))] == [
        "rank 3", "ranks 1 and 2", "ranks 0, 1 and 2", "ranks 0, 1, 2, 3, 4 and 15 more"]
