"""The distributed runtime under real ``mpiexec``: correctness, messages, failures.

Every test starts a real MPI job through ``tiledsl run --np P`` (the mpich wheel's
mpiexec), with a timeout.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tiledsl.commands import jobs
from tiledsl.commands.explain import plan
from tiledsl.runtime import Options, execute

from differential_programs import KERNEL_MODULE, KERNEL_MODULE_SOURCE, generate, initial_matrices, interpret

ROOT = Path(__file__).resolve().parents[2]
# a square grid, and a row and a column of ranks each way in turn: every grid, both ways of each program
GRIDS = [("2x2", "1x2", "3x1"), ("2x2", "2x1", "1x3")]
SIZES = {"cholesky": ["--nb", "96"], "lu": ["--nb", "96"], "qr": ["--nb", "96", "--set", "ib=32"],
         "hetero_cholesky": ["--B", "160", "--b", "48", "--s", "3"],
         "hetero_qr": ["--B", "160", "--b", "48", "--s", "3", "--set", "ib=16"]}


def run(*args, np_=2, cache=None, timeout=120):
    env = dict(os.environ, XDG_CACHE_HOME=str(cache)) if cache else None
    return subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", *map(str, args), "--np", str(np_)],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


def summary(out):
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(600)
@pytest.mark.parametrize("program", list(SIZES))
def test_every_program_is_correct_the_same_to_the_bit_and_sends_what_explain_predicts_on_a_square_a_row_and_a_column(
        compiled, tmp_path, program):
    """Each run on a grid (a square, a row and a column of ranks, 2 to 4 ranks) passes its check, every
    rank sending; its output A is that of one rank (run in this process) to the bit; and each rank
    sent and received the messages ``explain`` predicts for that grid. Neither --check nor --output
    changes a bit of the factorization or a message of it (a check's and an output's traffic come after)."""
    words = SIZES[program]
    options = Options(n=517, tiles={k[2:]: int(v) for k, v in zip(words[::2], words[1::2]) if k != "--set"},
                      sets={k: int(v) for k, v in (w.split("=") for w in words[1::2] if "=" in w)})
    driver = compiled(f"programs/{program}.tile")
    one_rank = execute(driver, options).matrices["A"].assemble()
    for grid in GRIDS[list(SIZES).index(program) % 2]:
        shape = (int(grid[0]), int(grid[2]))
        result = summary(run(f"programs/{program}.tile", "--n", 517, *words, "--grid", grid, "--check", "--json",
                             "--watchdog", 60, "--output", f"A={tmp_path / grid}.npy", np_=shape[0] * shape[1]))
        assert result["np"] == shape[0] * shape[1] and result["grid"] == list(shape)
        assert result["residual"] < 60, (grid, result["residuals"])
        assert all(r["messages_sent"] > 0 for r in result["ranks"]), grid
        assert np.array_equal(np.load(tmp_path / f"{grid}.npy"), one_rank), grid
        predicted = plan(driver, options, shape).messages
        for stats in result["ranks"]:
            rank = stats["rank"]
            assert stats["messages_sent"] == sum(c for (s, _), c in predicted.items() if s == rank), (grid, rank)
            assert stats["messages_received"] == sum(c for (_, r), c in predicted.items() if r == rank), (grid, rank)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("broadcast", ["direct", "tree"])
def test_a_failure_on_one_rank_stops_every_rank(tmp_path, broadcast):
    a = np.eye(512)
    a[400, 400] = -1.0  # A[3, 3] with nb = 128 is not positive definite, on rank 3 of the 2x2 grid
    np.save(tmp_path / "bad.npy", a)
    segments = jobs.segments()
    began = time.monotonic()
    out = run("programs/cholesky.tile", "--n", 512, "--nb", 128, "--input", f"A={tmp_path / 'bad.npy'}",
              "--broadcast", broadcast, np_=4, cache=tmp_path / "cache", timeout=60)
    elapsed = time.monotonic() - began
    assert out.returncode == 1, (out.returncode, out.stderr)
    assert elapsed < 30
    assert "Traceback" not in out.stderr
    assert "rank 3 (cholesky.tile:10): kernel potrf failed on A[3, 3]" in out.stderr, out.stderr
    assert "not positive definite" in out.stderr
    assert "MPI_Abort" not in out.stderr  # MPICH's own line would only repeat that the rank ended the job
    leftover = subprocess.run(["pgrep", "-f", str(tmp_path / "cache")], capture_output=True, text=True)
    assert leftover.stdout == "", "processes left behind"
    in_use = jobs.mapped()
    assert not [p for p in jobs.segments() - segments if str(p) not in in_use], "shared memory left behind"


@pytest.mark.timeout(60)
def test_a_grid_that_does_not_match_the_ranks_is_refused_before_anything_starts():
    out = run("programs/cholesky.tile", "--n", 256, "--grid", "2x2", np_=3)
    assert out.returncode == 2
    assert out.stderr.count("--grid 2x2 has 4 rank(s) but the job has 3") == 1


@pytest.mark.timeout(60)
def test_a_usage_error_met_before_mpi_starts_is_said_once():
    out = run("programs/cholesky.tile", "--n", 256, "--output", "Q=x.npy", np_=4)
    assert out.returncode == 2
    assert out.stderr.count("--output Q=...: no matrix named Q (the program has A)") == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n", [300, 600])  # 300: rank 1 has no GPU tile, and no usage error
def test_a_usage_error_met_on_some_ranks_ends_the_job_at_once_said_once(n):
    """Rank 0 alone refused and left; rank 1 waited a minute for it, then failed with exit 1."""
    began = time.monotonic()
    out = run("programs/cholesky.tile", "--n", n, "--nb", 100, "--gpus", 1, "--gpu-backend", "emulated",
              "--gpu-memory", "70K", np_=2)
    assert out.returncode == 2 and time.monotonic() - began < 30, out.stderr
    assert out.stderr.count("tiledsl: error: ") == 1 and "less than the largest tile its GPUs hold (78.12 KiB)" in out.stderr, out.stderr


@pytest.mark.timeout(60)
def test_more_ranks_than_tiles_run_with_the_idle_ones_named():
    """A rank owning no tile has nothing to do: the run goes on, and says so (it was refused)."""
    out = run("programs/cholesky.tile", "--n", 100, "--nb", 100, "--check", np_=2)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == ("tiledsl: warning: 2 ranks but only 1 of them own tiles (the largest matrix, A, "
                                  "has 1×1 tiles): rank 1 has nothing to do; no grid of 2 ranks gives every rank a "
                                  "task: use fewer ranks, or smaller tiles (--nb 50 on --grid 1x2)")
    assert "cholesky  residual" in out.stdout and "ran no task" not in out.stderr


@pytest.mark.timeout(120)
def test_ranks_without_tiles_are_named_with_the_grids_that_would_give_them_tiles(tmp_path):
    (tmp_path / "tall.tile").write_text("program tall {\n  tiling uniform(nb = 64)\n"
                                        "  matrix A[n, 64] = random general\n  matrix C[n, 64] = zeros\n"
                                        "  for m in 0 .. A.mt { gemm(A[m, 0], A[m, 0], C[m, 0], \"N\", \"T\") }\n}\n")
    out = run(tmp_path / "tall.tile", "--n", 256, "--grid", "2x2", np_=4)
    assert out.returncode == 0, out.stderr
    assert "4 ranks but only 2 of them own tiles (the largest matrix, A, has 4×1 tiles): ranks 1 and 3 have nothing " \
           "to do; use --grid 4x1, on which every rank runs a task" in out.stderr


@pytest.mark.timeout(120)
def test_a_small_matrix_declared_first_does_not_refuse_a_run_whose_other_matrices_cover_the_ranks(tmp_path):
    (tmp_path / "norm.tile").write_text("program norm {\n  tiling uniform(nb = 64)\n"
                                        "  matrix S[1, 1] = zeros\n  matrix A[n, n] = random spd\n"
                                        "  for k in 0 .. A.mt { potrf(A[k, k]) }\n}\n")
    out = run(tmp_path / "norm.tile", "--n", 256, np_=2)
    assert out.returncode == 0, out.stderr


@pytest.mark.timeout(300)
@pytest.mark.parametrize("path, matrix, grid, sizes", [
    ("programs/cholesky.tile", "A", "1x4", ["--n", 600, *SIZES["cholesky"]]),
    # staged from GPUs
    ("programs/qr.tile", "A", "2x2", ["--n", 600, *SIZES["qr"], "--gpus", 1, "--gpu-backend", "emulated"]),
    # sub-ranges go directly, announced too: each version of halo's is read on the rank of the next tile
    # column alone (1x2 as 1x4), 12x12 tiles of 8
    ("tests/runtime/programs/halo.tile", "U", "1x2", ["--n", 96, "--nb", 8]),
])
def test_a_tree_broadcast_gives_the_same_bits_and_the_same_receives(tmp_path, path, matrix, grid, sizes):
    """--broadcast tree: every rank receives what it receives from the owners alone, the result
    is the same to the bit, and forwarding ranks take over sends from the owners."""
    results = {}
    for broadcast in ("direct", "tree"):
        results[broadcast] = summary(run(path, *sizes, "--grid", grid, "--json", "--broadcast", broadcast,
                                         "--output", f"{matrix}={tmp_path / broadcast}.npy",
                                         np_=int(grid[0]) * int(grid[2])))
    assert np.array_equal(np.load(tmp_path / "direct.npy"), np.load(tmp_path / "tree.npy"))
    direct, tree = results["direct"]["ranks"], results["tree"]["ranks"]
    for key in ("messages_received", "bytes_received"):
        assert [r[key] for r in tree] == [r[key] for r in direct], key
    assert sum(r["messages_sent"] for r in tree) == sum(r["messages_sent"] for r in direct)
    # every input delivered is announced by a plan (under tree only); outputs going home are not
    plans, received = sum(r["plans_sent"] for r in tree), sum(r["messages_received"] for r in direct)
    assert 0 < plans == sum(r["plans_received"] for r in tree) <= received
    assert sum(r["plans_sent"] for r in direct) == 0
    if "cholesky" in path:  # a panel tile goes to three ranks: one of them gets it from another
        assert [r["messages_sent"] for r in tree] != [r["messages_sent"] for r in direct]
        assert plans == received  # no task of Cholesky writes a tile of another rank


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name, matrix, n, checked", [("gauss_jordan", "B", 700, True), ("red_black", "X", 320, False)])
def test_a_program_under_an_or_or_a_residue_walks_its_share_and_sends_what_explain_predicts(compiled, tmp_path, name,
                                                                                             matrix, n, checked):
    """Gauss-Jordan (``if m != k``: two ranges of m) and red-black sweeps (``if (i + j + sweep) % 2 == 0``)
    on 2x2 ranks: each rank walks its share (the driver describes its dataflow), its messages are
    explain's, and the result is one rank's to the bit (and passes its check). Without priority clauses,
    a program's priorities are derived from every task: --priorities none, for the share walk."""
    path, options = f"tests/runtime/programs/{name}.tile", Options(n=n, tiles={"nb": 64 if checked else 32})
    driver = compiled(path)
    assert hasattr(driver, "dataflow")
    one_rank = execute(driver, options).matrices[matrix].assemble()
    result = summary(run(path, "--n", n, "--nb", options.tiles["nb"], "--grid", "2x2", "--json", "--priorities", "none",
                         *(["--check"] if checked else []), "--output", f"{matrix}={tmp_path / 'x.npy'}", np_=4))
    assert np.array_equal(np.load(tmp_path / "x.npy"), one_rank)
    assert result["residual"] < 60 if checked else result["passed"] is None
    assert result["walk"] == {"rank_walks": "share", "whole_because": None}
    predicted = plan(driver, options, (2, 2)).messages
    for stats in result["ranks"]:
        assert stats["messages_sent"] == sum(c for (s, _), c in predicted.items() if s == stats["rank"])
        assert stats["messages_received"] == sum(c for (_, r), c in predicted.items() if r == stats["rank"])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed, grid, extra", [(0, "2x2", ()), (1, "2x2", ()), (2, "2x2", ()), (3, "2x2", ()),
                                               (8, "2x2", ()), (4, "3x1", ("--broadcast", "tree")),
                                               (5, "1x2", ("--gpus", 1, "--gpu-backend", "emulated"))])
def test_a_random_affine_program_on_ranks_walking_their_shares_computes_the_reference_bits(tmp_path, seed, grid,
                                                                                            extra):
    """Programs drawn at random (:mod:`differential_programs`, affine: see test_share) run on several
    ranks (tree broadcasts, emulated GPUs), each rank walking its share: every matrix and workspace comes
    back with the bits of the sequential reference, which runs the calls one by one in program order (a
    stale copy, a lost version or a message sent to the wrong rank shows in the bits, or as a stall)."""
    program = generate(seed, affine=True)
    (tmp_path / KERNEL_MODULE).write_text(KERNEL_MODULE_SOURCE)
    (tmp_path / "p.tile").write_text(program.text)
    arrays = initial_matrices(program)
    words = ["--n", program.n, "--nb", program.nb, *(w for name, value in program.params.items()
                                                   for w in ("--set", f"{name}={value}"))]
    for name, matrix in program.matrices.items():
        if matrix.given:
            np.save(tmp_path / f"in_{name}.npy", arrays[name])
            words += ["--input", f"{name}={tmp_path / f'in_{name}.npy'}"]
    interpret(program, arrays)  # arrays: now what the program computes
    written = [name for name in arrays if not (name in program.matrices and program.matrices[name].read_only)]
    for name in written:
        words += ["--output", f"{name}={tmp_path / f'out_{name}.npy'}"]
    result = summary(run(tmp_path / "p.tile", *words, "--grid", grid, *extra, "--priorities", "none", "--json",
                         "--watchdog", 60, np_=int(grid[0]) * int(grid[2]), timeout=240))
    assert result["walk"] == {"rank_walks": "share", "whole_because": None}, program.text
    for name in written:
        got = np.load(tmp_path / f"out_{name}.npy")
        assert np.array_equal(got.view(np.uint64), np.ascontiguousarray(arrays[name]).view(np.uint64)), \
            f"{name} differs\n{program.text}"
    assert sum(stats["messages_sent"] for stats in result["ranks"]) > 0  # (the seeds are chosen so)


@pytest.mark.timeout(60)
def test_explain_says_how_a_run_with_the_programs_priorities_walks_the_loop_nest(compiled, tmp_path):
    """As run --json's walk (tester z81a: explain could not say it)."""
    options = Options(n=1000, tiles={"nb": 200})
    assert plan(compiled("programs/cholesky.tile"), options, (2, 2)).walk == {"rank_walks": "share",
                                                                                 "whole_because": None}
    assert plan(compiled("programs/cholesky.tile"), options, (1, 1)).walk == {"rank_walks": "whole",
                                                                                 "whole_because": None}
    source = (ROOT / "tests/runtime/programs/red_black.tile").read_text()
    (tmp_path / "rb_mod.tile").write_text(source.replace("(i + j + sweep) % 2 == 0", "(i + j + sweep) % X.nt < 1"))
    walk = plan(compiled(str(tmp_path / "rb_mod.tile")), Options(n=128, tiles={"nb": 32}), (1, 2)).walk
    assert walk["rank_walks"] == "whole" and walk["whole_because"].startswith(
        "the program's loop nest has no affine description for a share walk to follow (line 11: (i + j + sweep) % "
        "X.nt < 1: an order of a modulo by X.nt, which is not a number; docs/cluster.md); and the program's "
        "priorities are derived")


@pytest.mark.timeout(60)
def test_a_run_says_why_its_ranks_walk_the_whole_loop_nest(tmp_path):
    """As simulate's walk line does: the statement outside the affine class, or the derived priorities."""
    source = (ROOT / "tests/runtime/programs/red_black.tile").read_text()
    (tmp_path / "rb.tile").write_text(source.replace("(i + j + sweep) % 2 == 0", "(i + j + sweep) % X.nt < 1"))
    walk = summary(run(tmp_path / "rb.tile", "--n", 128, "--json", "--priorities", "none", np_=2))["walk"]
    assert walk == {"rank_walks": "whole", "whole_because": "the program's loop nest has no affine description for "
                    "a share walk to follow (line 11: (i + j + sweep) % X.nt < 1: an order of a modulo by X.nt, "
                    "which is not a number; docs/cluster.md)"}
    walk = summary(run("programs/cholesky.tile", "--n", 128, "--nb", 32, "--json", "--priorities", "auto",
                       np_=2))["walk"]
    assert walk["rank_walks"] == "whole" and walk["whole_because"].startswith("--priorities auto derives")

