"""`tiledsl tune` (ICS'12 §3.6) and the tuned defaults of `tiledsl run` and `explain`.

The decisions are pure functions checked on synthetic speed tables; the search
takes an injected timing function; the cache lives under a private
XDG_CACHE_HOME; the end-to-end runs use the emulated GPU backend at tiny sizes.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from tiledsl.api import load
from tiledsl.commands.cli import main
from tiledsl.compiler import compile_path
from tiledsl.driverload import import_driver
from tiledsl.drivercontract import source_digest
from tiledsl.commands.explain import plan
from tiledsl.runtime import Options, execute, tuning
from tiledsl.runtime.distribution import BlockCyclic, parse_ratio
from tiledsl.commands import tune as tune_command
from tiledsl.commands.tune import (STEP, gpu_only_unless_slower, hill_climb, host_width, hybrid_split,
                                   inner_block_candidates, mix_rates, narrowest_column,
                                   search_inner_blocks, smallest_near_best, tune)
from tiledsl.runtime.layout import inner_block_params
from tiledsl.runtime.tuning import RATIOS, nearest_ratio
from tiledsl.runtime.world import UsageError

ROOT = Path(__file__).resolve().parents[2]
TINY = ("--sizes", "64,128", "--n", "256", "--budget", "5")


def tiledsl(*args, cache, cwd=ROOT, timeout=120, env=None):
    env = {**{k: v for k, v in os.environ.items() if k not in ("TILEDSL_NO_TUNE", "TILEDSL_DEBUG")},
           "XDG_CACHE_HOME": str(cache), **(env or {})}
    return subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def in_process(capsys, *args):
    """``tiledsl ARGS`` in this process, for a command that runs no program: explain, graph, or one
    refused before it times or runs anything (the option parser's errors, a usage error, --help):
    ``(exit status, stdout, stderr)``. A subprocess each cost half a second of imports; how the command
    line exits, as a process, on such errors is tests/cli/test_cli_robustness.py's (tune's among them)."""
    try:
        status = main([str(arg) for arg in args])
    except SystemExit as stop:  # the option parser's errors, and --help
        status = stop.code
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return status, out.out, out.err


def last_json(out):
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def grammar_tables(tmp_path_factory):
    """The grammar's parser tables, as a command's first run writes them to the user's cache."""
    home = tmp_path_factory.mktemp("grammar_home")
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "check", "programs/cholesky.tile"], cwd=ROOT,
                         env={**os.environ, "XDG_CACHE_HOME": str(home)}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return home / "tiledsl" / "grammar"


@pytest.fixture
def cache(tmp_path, monkeypatch, grammar_tables):
    """A private cache directory, tuning enabled (the suite's conftest disables it). It holds the
    grammar's tables, as any user's cache does after a first command: without them each test's
    first command built them again (a fifth of a second), which no test here is about."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("TILEDSL_NO_TUNE", raising=False)
    shutil.copytree(grammar_tables, tmp_path / "tiledsl" / "grammar")
    return tmp_path


def driver_of(tmp_path, program):
    _, text = compile_path(ROOT / f"programs/{program}.tile")
    (tmp_path / f"{program}.py").write_text(text)
    return import_driver(tmp_path / f"{program}.py", f"tune_{program}")


def key_of(program, source=None) -> str:
    """The tune cache's :func:`~tiledsl.runtime.tuning.program_key` of a shipped program (by name), or of the
    program in ``source``."""
    return tuning.program_key(load(source or ROOT / f"programs/{program}.tile").program)


def seed_cache(program, gpus, backend, tiles, ratio=None, params=None, source=None, **more):
    """Write a tuned entry as tiledsl tune would (without ``params``: as versions before inner
    blocks were tuned wrote it) for a shipped program, or the one in ``source``; the file's path."""
    entry = {"program": program, "gpus": gpus, "backend": backend, "tiles": tiles, "gpu_ratio": ratio, **more}
    if params is not None:
        entry["params"] = params
    return tuning.store(tuning.entry_key(key_of(program, source), gpus, backend), entry)


# ---------------------------------------------------------------- decisions on synthetic tables
@pytest.mark.timeout(10)
@pytest.mark.parametrize("rates, size", [
    ({64: 10, 128: 50, 192: 90, 256: 96, 320: 100, 384: 99}, 256),     # 96 >= 95% of 100
    ({128: 95, 256: 100, 512: 100}, 128),                               # exactly 95%
    ({64: 1, 128: 2, 192: 4}, 192),                                     # still growing: the largest
    ({128: 800, 256: 2400, 384: 2900, 512: 3050, 1024: 3100, 2048: 3000}, 512),  # a GPU-like curve
])
def test_b_is_the_smallest_size_within_95_percent_of_the_best_rate(rates, size):
    assert smallest_near_best(rates) == size


@pytest.mark.timeout(10)
def test_the_host_width_follows_the_papers_formula():
    # B_h = B·f_core·cores / (f_core·cores + f_gpu·gpus)
    assert host_width(1024, 10.0, 8, 300.0, 1) == pytest.approx(1024 * 80 / 380)
    assert host_width(960, 20.0, 12, 240.0, 3) == pytest.approx(960 * 240 / (240 + 720))
    assert host_width(512, 1.0, 1, 1.0, 1) == pytest.approx(256)  # an emulated GPU: one more core
    # one GPU's block takes as long as the host's G slices
    B, f_core, cores, f_gpu, gpus = 1024, 10.0, 8, 300.0, 2
    B_h = host_width(B, f_core, cores, f_gpu, gpus)
    assert gpus * B_h / (f_core * cores) == pytest.approx((B - B_h) / f_gpu)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("B, B_h, s, expected", [
    (1024, 215.6, 2, (192, 2)),   # rounded down to a multiple of 64
    (1024, 300.0, 3, (128, 3)),   # two host slices share B_h
    (256, 250.0, 2, (192, 2)),    # the GPU keeps a slice of 64 at least
    (1024, 20.0, 2, (64, 1)),     # under a step: every column on a GPU
    (1024, 63.0, 2, (64, 1)),     # rounded down: the host never gets more than its share
    (1024, 100.0, 2, (64, 2)),
    (128, 100.0, 1, (64, 1)),     # s = 1 stays
])
def test_hybrid_split_rounds_b_to_multiples_of_64(B, B_h, s, expected):
    assert hybrid_split(B, B_h, s) == expected
    b, slices = expected
    assert (slices - 1) * b < B and b % STEP == 0


@pytest.mark.timeout(10)
@pytest.mark.parametrize("host, gpu, gpus, ratio", [
    (80.0, 80.0, 1, (1, 1)), (20.0, 60.0, 1, (1, 3)), (120.0, 40.0, 1, (3, 1)),
    (1.0, 1000.0, 2, (0, 1)), (40.0, 40.0, 2, (1, 1)), (80.0, 40.0, 2, (2, 1)), (160.0, 40.0, 2, (4, 1))])
def test_the_column_ratio_gives_the_host_its_share_of_the_speed(host, gpu, gpus, ratio):
    assert nearest_ratio(host, gpu, gpus) == ratio


@pytest.mark.timeout(10)
def test_the_kernel_mix_weights_kernels_by_task_count():
    speeds = {"gemm": {64: 20.0, 128: 40.0}, "potrf": {64: 2.0, 128: 4.0}}
    rates = mix_rates(speeds, {"gemm": 10, "potrf": 0})
    assert rates == pytest.approx({64: 20.0, 128: 40.0})
    both = mix_rates(speeds, {"gemm": 1, "potrf": 3})  # 2s³ of gemm and 3·s³/3 of potrf
    assert both[128] == pytest.approx(3 / (2 / 40 + 1 / 4))


# ---------------------------------------------------------------- the search
@pytest.mark.timeout(10)
def test_the_search_walks_to_the_fastest_candidate():
    candidates = list(range(64, 1025, 64))
    times = {c: 1 + abs(c - 448) / 64 for c in candidates}
    calls = []

    def measure(c):
        calls.append(c)
        return times[c]
    best, history = hill_climb(candidates, candidates.index(256), measure, max_trials=10)
    assert best == 448
    assert len(calls) == len(set(calls)) <= 10  # each candidate timed once
    assert dict(history) == {c: times[c] for c in calls}


@pytest.mark.timeout(10)
def test_the_search_keeps_the_fastest_it_measured_within_its_limits():
    candidates = list(range(64, 1025, 64))
    times = {c: abs(c - 960) for c in candidates}
    best, history = hill_climb(candidates, 0, times.get, max_trials=3)
    assert [c for c, _ in history] == [64, 128, 192] and best == 192
    best, history = hill_climb(candidates, 5, times.get, more_time=lambda: False)
    assert history == [(384, times[384])] and best == 384  # the start is always timed
    # a noisy neighbour: the fastest measured wins, even when it is not the start
    noisy = {64: 3.0, 128: 1.0, 192: 2.0}
    assert hill_climb([64, 128, 192], 1, noisy.get)[0] == 128
    assert hill_climb([64, 128, 192], 0, noisy.get)[0] == 128


@pytest.mark.timeout(10)
def test_ratio_candidates_are_ordered_by_the_hosts_share():
    assert RATIOS[0] == 0 and Fraction(1, 1) in RATIOS and RATIOS == sorted(RATIOS)


@pytest.mark.timeout(10)
def test_the_gpu_only_setting_is_always_measured_and_wins_when_fastest():
    calls = []

    def measure(setting):
        calls.append(setting)
        return {Fraction(0): 0.5, Fraction(1): 0.9}.get(setting, 1.0)
    # the search stayed at 1:1 (its neighbours were slower) and never reached 0:1
    chosen, history = hill_climb(RATIOS, RATIOS.index(1), measure)
    assert chosen == 1 and Fraction(0) not in calls
    chosen, history = gpu_only_unless_slower(history, RATIOS[0], measure)
    assert chosen == 0 and calls[-1] == 0 and history[-1] == (0, 0.5)
    # slower than the split: the search's choice stays; measured already: not again
    slower = {Fraction(0): 2.0, Fraction(1, 2): 1.0}
    assert gpu_only_unless_slower([(Fraction(1, 2), 1.0)], 0, slower.get)[0] == Fraction(1, 2)
    assert gpu_only_unless_slower([(0, 3.0), (1, 2.0)], 0, lambda r: pytest.fail("measured again")) == \
        (1, [(0, 3.0), (1, 2.0)])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("gpu_only_seconds, taking_seconds, picked", [
    (0.5, 9.0, "gpu only"), (2.0, 9.0, "split"), (2.0, 0.4, "host takes")])
def test_tune_never_picks_a_split_slower_than_the_gpus_alone(tmp_path, monkeypatch, gpu_only_seconds,
                                                             taking_seconds, picked):
    """tune() itself, its trial runs replaced by a fake timing: hybrid tiles with s = 1 and
    uniform tiles at 0:1 are the GPU-only settings. A larger host share is faster, so the
    ratio search climbs away from 0:1. Uniform tiles are timed at 0:1 with the host taking
    GPU tasks too (hybrid ones are not), and keep it when it is the fastest."""
    def fake(self, tiles, ratio, params, host_takes=False):
        if host_takes:
            assert ratio == (0, 1) and self.options.host_speeds["core"] and self.options.host_speeds["gpu"]
            return taking_seconds
        gpu_only = ratio == (0, 1) if ratio is not None else tiles.get("s") == 1
        host_share = ratio[0] / ratio[1] / 100 if ratio else 0
        return gpu_only_seconds if gpu_only else 1.0 + abs(tiles.get("nb", tiles.get("b")) - 128) / 640 - host_share
    monkeypatch.setattr(tune_command.Trials, "seconds", fake)
    # the decisions, not the budget: a loaded machine may spend the 2 s timing the kernels
    monkeypatch.setattr(tune_command.Trials, "time_for_another", lambda self: True)
    for program in ("cholesky", "hetero_cholesky"):
        result = tune(driver_of(tmp_path, program), gpus=1, workers=1, budget=2, sizes=[64, 128, 192], n=384)
        if program == "cholesky":  # the best ratio without taking is kept for --host-takes off
            assert result["host_takes"] == (picked == "host takes"), result
            assert (result["gpu_ratio"] == [0, 1]) == (picked == "gpu only"), result
        else:
            assert "host_takes" not in result and (result["tiles"]["s"] == 1) == (picked == "gpu only"), result



@pytest.mark.timeout(120)
@pytest.mark.parametrize("program, gpus, sizes, n, setting, tried", [
    ("cholesky", 0, [128, 256], 1024, "nb", {128, 256}),  # nb=64 was tried and chosen
    ("hetero_cholesky", 0, [128], 1024, "b", {128}),  # b=64 and 192 too
    ("hetero_cholesky", 1, [64, 320], 640, "B", {320}),  # B=128: 64 widened for the two slices
])
def test_sizes_are_the_tile_sizes_tune_tries_and_chooses_from(tmp_path, monkeypatch, program, gpus, sizes, n, setting,
                                                              tried):
    """--sizes limited only the kernels' timing: the search stepped to other sizes (--sizes 640 chose nb=448)."""
    seen = set()

    def fake(self, tiles, ratio, params, host_takes=False):
        seen.add(tiles[setting])
        return tiles[setting] / 64 + (tiles.get("s") == 1)  # the smaller the faster, the GPUs alone slower

    monkeypatch.setattr(tune_command.Trials, "seconds", fake)
    monkeypatch.setattr(tune_command.Trials, "time_for_another", lambda self: True)
    monkeypatch.setattr(tune_command, "smallest_near_best", min)  # the GPU's B: the smallest size timed
    result = tune(driver_of(tmp_path, program), gpus=gpus, workers=1, budget=5, sizes=sizes, n=n)
    assert seen == tried and result["tiles"][setting] == min(tried), result["tiles"]


@pytest.mark.timeout(60)
def test_sizes_that_no_hybrid_host_slice_fits_are_refused(tmp_path):
    """hetero_cholesky's B=512, s=2 leaves its host slice b at most 448 wide; --sizes 512 tuned b=448."""
    with pytest.raises(UsageError, match=r"^--sizes 512: hetero_cholesky's hybrid tiling B=512, s=2 leaves the host "
                                         r"slices b at most 448 wide: give such a size$"):
        tune(driver_of(tmp_path, "hetero_cholesky"), workers=1, budget=2, sizes=[512], n=1024)



@pytest.mark.timeout(120)
def test_a_host_slice_chosen_for_want_of_room_says_so(tmp_path, monkeypatch):
    """B=128, s=2 leaves room for b=64 only: 'b = 64: the smallest size within 95% of the best rate', where
    the table showed 128 twice as fast."""
    _, text = compile_path(ROOT / "programs/hetero_cholesky.tile")
    (tmp_path / "hc128.py").write_text(re.sub(r"'B': \d+, 'b': \d+, 's': \d+", "'B': 128, 'b': 32, 's': 2", text))
    said = []
    monkeypatch.setattr(tune_command, "smallest_near_best", max)  # the rates favour 128
    monkeypatch.setattr(tune_command.Trials, "seconds", lambda self, tiles, ratio, params, host_takes=False: 1.0)
    tune(import_driver(tmp_path / "hc128.py", "tune_hc128"), workers=1, budget=2, sizes=[64, 128], n=1024,
         log=said.append)
    assert "b = 64: the size nearest to 128 (the smallest within 95% of the best rate of the kernel mix on a core) " \
           "that B=128, s=2 leave room for ((s-1)·b < B)" in said, said


@pytest.mark.timeout(30)
def test_the_ratios_searched_are_one_per_way_of_dealing_the_columns_that_gives_each_gpu_some(tmp_path):
    """n=800, nb=320: 3 tile columns, which every ratio from 3:4 up keeps all on the host, 1:G deals
    as 1:1 does, and 2:3 and 2:1 leave GPU 2 none (the run would warn of it); 1:1 is the one nearest
    the guess, 5:4. With 4 GPUs no ratio gives each of them one of 3 columns: 0:1 gives three of them one
    (2:3 gave one GPU a column, and was tuned, and the run then warned that three held none)."""
    ratios, columns = tune_command.distinct_ratios(driver_of(tmp_path, "cholesky"),
                                                   Options(n=800, tiles={"nb": 320}, gpus=2), Fraction(5, 4))
    assert (ratios, columns) == ([Fraction(0), Fraction(1)], 3)
    ratios, columns = tune_command.distinct_ratios(driver_of(tmp_path, "cholesky"),
                                                   Options(n=800, tiles={"nb": 320}, gpus=4), Fraction(5, 4))
    assert (ratios, columns) == ([Fraction(0)], 3)


@pytest.mark.timeout(120)
def test_tune_never_keeps_a_ratio_that_gives_the_gpus_no_column_at_its_trials(tmp_path, monkeypatch):
    """A larger host share is faster here, as it may be by noise alone: tune timed 3:4, 5:4, 4:3, ...,
    each keeping the 3 columns on the host, as different splits, and saved one (runs then used no GPU)."""
    tried = []

    def fake(self, tiles, ratio, params, host_takes=False):
        tried.extend([] if host_takes else [ratio])
        return 9.0 if host_takes else 1.0 - Fraction(*ratio) / 100

    monkeypatch.setattr(tune_command.Trials, "seconds", fake)
    monkeypatch.setattr(tune_command.Trials, "time_for_another", lambda self: True)
    result = tune(driver_of(tmp_path, "cholesky"), gpus=2, workers=1, budget=5, sizes=[320], n=800,
                  clock=lambda: 0.0)  # a loaded machine spends no budget: the search is the same
    dealt = lambda ratio: tuple(BlockCyclic(1, 1, 2, *ratio).device_of(0, j) for j in range(3))
    searched = list(dict.fromkeys(tried[1:]))  # after the tile search's one run, at the guessed ratio
    assert len({dealt(ratio) for ratio in searched}) == len(searched) and all(any(dealt(r)) for r in searched)
    assert result["gpu_ratio"] == [1, 1]  # the largest host share among them: 3:4 and up give the GPUs nothing


# ---------------------------------------------------------------- inner blocks
@pytest.mark.timeout(30)
@pytest.mark.parametrize("program, blocks", [("qr", ("ib",)), ("hetero_qr", ("ib",)), ("tsqr", ("ib",)),
                                             ("gesv", ()), ("cholesky", ())])
def test_inner_blocks_are_the_params_that_are_a_workspaces_rows(tmp_path, program, blocks):
    # tsqr's cols, nrhs and domains and gesv's nrhs are no workspace's rows; gesv's P has 1
    assert inner_block_params(driver_of(tmp_path, program)) == blocks


@pytest.mark.timeout(30)
def test_a_param_whose_probe_leaves_the_program_no_size_is_no_inner_block(tmp_path):
    """lev at the probe value makes w = 2 ** lev overflow: neither is a workspace's rows, ib is."""
    (tmp_path / "levels.tile").write_text("program levels {\n  tiling uniform(nb = 64)\n  param lev = 2\n"
                                          "  param w = 2 ** lev\n  param ib = 32\n"
                                          "  matrix A[n, w * nb] = random general\n  workspace T like A rows ib\n"
                                          "  for k in 0 .. A.nt { geqrt(A[0, k], T[0, k]) }\n}\n")
    _, text = compile_path(tmp_path / "levels.tile")
    (tmp_path / "levels.py").write_text(text)
    assert inner_block_params(import_driver(tmp_path / "levels.py", "tune_levels")) == ("ib",)


MEANING_PARAMS = {  # a param a workspace's rows that is more than a blocking: tune changed what the program computed
    "a user kernel's workspace": ("  param k = 4\n  matrix A[n, n] = random general\n  workspace S like A rows k\n"
                                  "  for i in 0 .. A.mt { pool(A[i, 0], S[i, 0]) }\n"),
    "a QR T that also sizes a matrix": ("  param ib = 32\n  matrix A[n, n] = random general\n"
                                        "  matrix B[ib, n] = zeros\n  workspace T like A rows ib\n"
                                        "  for k in 0 .. A.nt { geqrt(A[k, k], T[k, k]) }\n"),
    "a QR T a user kernel reads too": ("  param ib = 32\n  matrix A[n, n] = random general\n"
                                       "  workspace T like A rows ib\n"
                                       "  for k in 0 .. A.nt { geqrt(A[k, k], T[k, k])  pool(A[k, k], T[k, k]) }\n"),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", sorted(MEANING_PARAMS))
def test_a_param_that_means_something_is_no_inner_block(tmp_path, case):
    """A max-pooling program's `workspace S like A rows k` (rows pooled per tile): tune timed k=32..128,
    saved k=128, and later runs wrote a (1024, 1024) S where the program's (16, 1024) was meant."""
    (tmp_path / "pool.py").write_text("def pool(A, S):\n    S[:] = A[:S.shape[0]]\n")
    (tmp_path / "meaning.tile").write_text('use "pool.py"\nkernel pool(in A, inout S)\nprogram meaning {\n'
                                           '  tiling uniform(nb = 64)\n' + MEANING_PARAMS[case] + '}\n')
    _, text = compile_path(tmp_path / "meaning.tile")
    (tmp_path / "meaning_driver.py").write_text(text)
    assert inner_block_params(import_driver(tmp_path / "meaning_driver.py", f"tune_meaning_{len(case)}")) == ()


@pytest.mark.timeout(10)
@pytest.mark.parametrize("width, default, candidates", [
    (64, 64, [32, 64]), (384, 64, [32, 48, 64, 96, 128, 192, 384]), (1024, 64, [32, 64, 128, 256, 512]),
    (192, 32, [32, 48, 64, 96, 192]), (128, 40, [32, 40, 64, 128]), (64, 128, [32, 64])])
def test_inner_block_candidates_divide_the_tiles_and_keep_the_default(width, default, candidates):
    assert inner_block_candidates(width, default) == candidates


@pytest.mark.timeout(10)
def test_the_inner_block_fits_the_narrowest_tile_column():
    assert narrowest_column({"nb": 384}) == 384
    assert narrowest_column({"B": 512, "b": 128, "s": 2}) == 128
    assert narrowest_column({"B": 256, "b": 192, "s": 2}) == 64  # the GPU's slice is the narrower
    assert narrowest_column({"B": 512, "b": 64, "s": 1}) == 512  # one slice: the whole block


@pytest.mark.timeout(10)
def test_the_inner_block_search_climbs_each_parameter_in_turn():
    best = {"ib": 256, "jb": 64}
    seconds = lambda values: 1 + sum(abs(values[k] - best[k]) for k in best) / 64
    calls = []

    def measure(values):
        calls.append(dict(values))
        return seconds(values)
    values, history = search_inner_blocks(["ib", "jb"], {"ib": 64, "jb": 32}, 1024, measure)
    assert values == best and calls[0] == {"ib": 64, "jb": 32}
    # ib first (at most INNER_TRIALS sizes: 512 is not reached), then jb from ib's best
    assert [c["ib"] for c in calls[:4]] == [64, 32, 128, 256] and tune_command.INNER_TRIALS == 4
    assert all(c["jb"] == 32 for c in calls[:4])
    assert [(c["ib"], c["jb"]) for c in calls[4:]] == [(256, 32), (256, 64), (256, 128)]
    assert len(history) == len(calls) and all((c, seconds(c)) in history for c in calls)
    # a start wider than the tiles begins at the nearest candidate; no time left: only it is timed
    values, history = search_inner_blocks(["ib"], {"ib": 200}, 128, lambda v: v["ib"], more_time=lambda: False)
    assert values == {"ib": 128} and history == [({"ib": 128}, 128)]


# ---------------------------------------------------------------- the distribution's ratio
@pytest.mark.timeout(10)
def test_block_cyclic_deals_h_host_columns_and_g_per_gpu():
    dist = BlockCyclic(1, 1, gpus=2, host_columns=1, gpu_columns=2)
    assert [dist.device_of(0, j) for j in range(10)] == [0, 1, 2, 1, 2, 0, 1, 2, 1, 2]
    assert [BlockCyclic(1, 1, 1, 0, 1).device_of(0, j) for j in range(3)] == [1, 1, 1]
    assert [BlockCyclic(1, 2, 1, 3, 1).device_of(0, j) for j in range(10)] == [0, 0, 0, 0, 0, 0, 1, 1, 0, 0]
    with pytest.raises(ValueError, match="gpu_columns"):
        BlockCyclic(1, 1, 1, 1, 0)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("text, ratio", [("1:4", (1, 4)), (" 3 : 2 ", (3, 2)), ("2", (2, 1)), ("0:1", (0, 1))])
def test_parse_ratio(text, ratio):
    assert parse_ratio(text) == ratio


@pytest.mark.timeout(10)
@pytest.mark.parametrize("text", ["", "1:0", "a:b", "1:2:3", "-1:2", "1/2"])
def test_parse_ratio_rejects_bad_text(text):
    with pytest.raises(ValueError, match="bad GPU ratio"):
        parse_ratio(text)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("program, gpus, ratio", [("cholesky", 1, (2, 1)), ("qr", 2, (1, 2)), ("lu", 1, (0, 1))])
def test_the_runtime_copies_what_explain_predicts_at_any_ratio(tmp_path, program, gpus, ratio):
    driver = driver_of(tmp_path, program)
    result = execute(driver, Options(n=517, tiles={"nb": 96}, check=True, gpus=gpus, gpu_ratio=ratio, watchdog=60))
    assert result.passed, result.residuals
    assert result.gpu_ratio == ratio
    predicted = plan(driver, Options(n=517, tiles={"nb": 96}, gpu_ratio=ratio), (1, 1), gpus)
    assert result.stats["device_copies"] == predicted.copies.get(0, 0)


# ---------------------------------------------------------------- the cache
@pytest.mark.timeout(10)
def test_the_cache_round_trips_under_xdg_cache_home(cache):
    path = seed_cache("cholesky", 2, "cupy", {"nb": 512}, [1, 8])
    assert path == tuning.cache_path() and path.parent == cache / "tiledsl" / "tune"
    seed_cache("cholesky", 0, "emulated", {"nb": 320})
    assert tuning.lookup(key_of("cholesky"), "uniform", 2, "cupy") == ({"nb": 512}, (1, 8), {}, path, False, None, ())
    assert tuning.lookup(key_of("cholesky"), "uniform", 0, "cupy") == ({"nb": 320}, None, {}, path,
                                                                    False, None, ())  # no GPU: any backend
    seed_cache("qr", 0, "emulated", {"nb": 256}, params={"ib": 96})
    assert tuning.lookup(key_of("qr"), "uniform", 0, "emulated") == tuning.Tuned({"nb": 256}, None, {"ib": 96}, path)
    assert tuning.lookup(key_of("cholesky"), "uniform", 1, "cupy") is None
    assert tuning.lookup(key_of("qr"), "uniform", 2, "cupy") is None
    seed_cache("cholesky", 1, "cupy", {"nb": 512}, [0, 1], host_takes=True)
    assert tuning.lookup(key_of("cholesky"), "uniform", 1, "cupy").host_takes is True
    content = json.loads(path.read_text())
    cholesky, qr = key_of("cholesky"), key_of("qr")  # names with a digest of the kernels: cholesky@2dce8fb2
    assert re.fullmatch(r"cholesky@[0-9a-f]{8}", cholesky) and cholesky != qr.replace("qr", "cholesky")
    assert set(content["entries"]) == {f"{cholesky}/cupy/2", f"{cholesky}/cpu", f"{qr}/cpu", f"{cholesky}/cupy/1"}
    assert content["machine"] == tuning.machine()
    # no temporary file left; the lock file of the updates (tuning._updating) stays, empty
    assert sorted(p.name for p in path.parent.iterdir()) == [f".{path.name}.lock", path.name]


@pytest.mark.timeout(20)
def test_a_save_waits_for_a_lock_held_elsewhere_says_so_and_gives_up_past_its_limit(cache, monkeypatch, capsys):
    """Another process holding the cache's lock (a stuck one) is said, and refused, never waited on forever."""
    path = seed_cache("cholesky", 0, "emulated", {"nb": 320})
    monkeypatch.setattr(tuning, "LOCK_NOTICE", 0.1)
    monkeypatch.setattr(tuning, "LOCK_LIMIT", 0.5)
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               f"fd = os.open({str(path.with_name('.' + path.name + '.lock'))!r}, os.O_WRONLY)\n"
                               "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(30)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UsageError, match=r"another process has held its lock \(\.[^ ]+\.lock\) for 0\.5 s; "
                                             r"a tiledsl tune saves in milliseconds, so that process is stuck"):
            tuning.store("x/cpu", {"tiles": {"nb": 64}})
        assert capsys.readouterr().err.count("tiledsl: waiting for another process's lock on the tuning cache") == 1
    finally:
        holder.kill()
        holder.wait()
    tuning.store("x/cpu", {"tiles": {"nb": 64}})  # let go: saved at once
    assert tuning.entry("x", 0, "emulated") == {"tiles": {"nb": 64}}


@pytest.mark.timeout(10)
def test_a_cache_of_a_newer_format_is_ignored_with_a_warning_and_not_written_over(cache):
    path = seed_cache("cholesky", 0, "emulated", {"nb": 320})
    content = {**json.loads(path.read_text()), "version": 99}
    path.write_text(json.dumps(content))
    said = []
    assert tuning.lookup(key_of("cholesky"), "uniform", 0, "emulated", said.append) is None
    assert said == [f"ignoring the tuning cache {path}: it is of format 99, a newer tiledsl's (this one reads format 1)"]
    with pytest.raises(UsageError, match="cannot add to the tuning cache .*: it is of format 99, .*; it was left as it "
                                         "is"):
        tuning.store("x/cpu", {"tiles": {"nb": 64}})
    assert json.loads(path.read_text()) == content


@pytest.mark.timeout(10)
def test_a_cache_that_cannot_be_read_is_not_written_over(cache, monkeypatch):
    """Another user's cache, unreadable to this one: tune replaced it, the other entries dropped."""
    path = seed_cache("lu", 0, "emulated", {"nb": 320})
    before = path.read_bytes()
    from tiledsl import usercache

    unreadable = usercache.read_bytes

    def read_bytes(file):
        if Path(file) == path:
            raise PermissionError(13, "Permission denied")
        return unreadable(file)

    monkeypatch.setattr(usercache, "read_bytes", read_bytes)
    said = []
    assert tuning.lookup(key_of("lu"), "uniform", 0, "emulated", warn=said.append) is None  # a run goes on without it
    assert said == [f"ignoring the tuning cache {path}: Permission denied"]
    with pytest.raises(UsageError, match=r"cannot read the tuning cache .* to add to it: Permission denied; it was "
                                         r"left as it is"):
        seed_cache("cholesky", 0, "emulated", {"nb": 256})
    monkeypatch.undo()
    assert path.read_bytes() == before


@pytest.mark.timeout(10)
def test_the_machine_key_names_the_host_and_hashes_the_hardware():
    here = {"hostname": "node-7.cluster", "cpu": "AMD EPYC 7763", "cores": 128, "gpus": ["NVIDIA A100"]}
    key = tuning.machine_key(here)
    assert key.startswith("node-7.cluster-") and key == tuning.machine_key(dict(here))
    assert tuning.machine_key({**here, "gpus": ["NVIDIA H100"]}) != key
    assert tuning.machine_key({**here, "cores": 64}) != key
    assert tuning.machine_key({**here, "hostname": "a/b c"}).startswith("a_b_c-")
    assert tuning.machine_key() == tuning.machine_key(tuning.machine())


@pytest.mark.timeout(10)
@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"entries": 3}', "\x00\x01", b"\x00\xff\xfe",
                                  '{"entries": {}, "version": "1"}', '{"entries": {}, "version": true}',
                                  '{"entries": ' + "[" * 100_000 + "]" * 100_000 + "}"])  # a RecursionError
def test_a_corrupt_cache_is_ignored_with_one_warning(cache, text):
    path = tuning.cache_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())  # bytes: not UTF-8 (an internal error)
    warnings = []
    assert tuning.lookup(key_of("cholesky"), "uniform", 0, "emulated", warnings.append) is None
    assert len(warnings) == 1 and str(path) in warnings[0] and "\n" not in warnings[0]
    seed_cache("cholesky", 0, "emulated", {"nb": 128})  # tuning again rewrites it
    assert tuning.lookup(key_of("cholesky"), "uniform", 0, "emulated", warnings.append)[0] == {"nb": 128}


@pytest.mark.timeout(10)
def test_an_entry_that_does_not_fit_the_program_is_ignored(cache):
    seed_cache("cholesky", 0, "emulated", {"B": 512, "b": 128})
    warnings = []
    assert tuning.lookup(key_of("cholesky"), "uniform", 0, "emulated", warnings.append) is None
    assert "do not fit uniform tiling" in warnings[0]
    seed_cache("cholesky", 0, "emulated", {"nb": -3})
    assert tuning.lookup(key_of("cholesky"), "uniform", 0, "emulated", warnings.append) is None
    seed_cache("qr", 0, "emulated", {"nb": 256}, params={"ib": 0})
    assert tuning.lookup(key_of("qr"), "uniform", 0, "emulated", warnings.append) is None
    assert "ib = 0 is not an integer from 1 to 2**63 - 1" in warnings[-1]
    # a value beyond 64 bits is the entry's fault too, not an option the user never gave
    seed_cache("cholesky", 0, "emulated", {"nb": 2 ** 63})
    assert tuning.lookup(key_of("cholesky"), "uniform", 0, "emulated", warnings.append) is None
    assert "nb = 9223372036854775808 is not an integer from 1 to 2**63 - 1" in warnings[-1]
    seed_cache("qr", 0, "emulated", {"nb": 256}, params={"ib": 10 ** 30})
    assert tuning.lookup(key_of("qr"), "uniform", 0, "emulated", warnings.append) is None


# ---------------------------------------------------------------- run with tuned defaults
@pytest.mark.timeout(120)
def test_run_uses_tuned_values_and_says_where_they_came_from(tmp_path, cache):
    path = seed_cache("cholesky", 1, "emulated", {"nb": 128}, [2, 1])
    # each run with TILEDSL_NO_TUNE set to a value that is not "on" (0, false, empty): the cache is read all
    # the same (TILEDSL_NO_TUNE=0 ignored it too)
    out = tiledsl("run", "programs/cholesky.tile", "--n", 400, "--gpus", 1, "--check", "--json", cache=cache,
                  env={"TILEDSL_NO_TUNE": "0"})
    assert out.returncode == 0, out.stderr
    summary = last_json(out)
    assert summary["tiles"] == {"nb": 128} and summary["gpu_ratio"] == "2:1"
    assert summary["sources"] == {"nb": f"tuned ({path})", "gpu_ratio": f"tuned ({path})"}
    text = tiledsl("run", "programs/cholesky.tile", "--n", 400, "--gpus", 1, cache=cache,
                   env={"TILEDSL_NO_TUNE": "false"})
    assert text.returncode == 0, text.stderr
    assert f"  settings  nb=128, gpu-ratio 2:1: tuned ({path})" in text.stdout.splitlines()
    # the driver run as a script reads the same cache
    assert tiledsl("compile", "programs/cholesky.tile", "-o", tmp_path / "chol.py", cache=cache).returncode == 0
    env = dict(os.environ, XDG_CACHE_HOME=str(cache), TILEDSL_NO_TUNE="")
    script = subprocess.run([sys.executable, str(tmp_path / "chol.py"), "--n", "400", "--gpus", "1", "--json"],
                            capture_output=True, text=True, timeout=100, env=env)
    assert script.returncode == 0, script.stderr
    assert last_json(script)["tiles"] == {"nb": 128} and last_json(script)["gpu_ratio"] == "2:1"


@pytest.mark.timeout(120)
def test_explicit_options_win_and_no_tune_ignores_the_cache(cache):
    path = seed_cache("cholesky", 1, "emulated", {"nb": 128}, [2, 1])
    explicit = last_json(tiledsl("run", "programs/cholesky.tile", "--n", 400, "--gpus", 1, "--nb", 64,
                                 "--gpu-ratio", "1:3", "--json", cache=cache))
    assert explicit["tiles"] == {"nb": 64} and explicit["gpu_ratio"] == "1:3"
    assert explicit["sources"] == {"nb": "command line", "gpu_ratio": "command line"}
    mixed = last_json(tiledsl("run", "programs/cholesky.tile", "--n", 400, "--gpus", 1, "--nb", 64, "--json",
                              cache=cache))
    assert mixed["sources"] == {"nb": "command line", "gpu_ratio": f"tuned ({path})"}
    for args, env in [(("--no-tune",), None), ((), {"TILEDSL_NO_TUNE": "1"})]:
        ignored = tiledsl("run", "programs/cholesky.tile", "--n", 400, "--gpus", 1, "--json", *args,
                          cache=cache, env=env)
        assert ignored.returncode == 0, ignored.stderr
        summary = last_json(ignored)
        assert summary["tiles"] == {"nb": 256} and summary["gpu_ratio"] == "1:1"
        assert summary["sources"] == {"nb": "program default", "gpu_ratio": "default"}
    other = last_json(tiledsl("run", "programs/cholesky.tile", "--n", 400, "--json", cache=cache))  # no GPU entry
    assert other["sources"] == {"nb": "program default"} and other["gpu_ratio"] is None
    # TILEDSL_NO_TUNE set to a value that is not "on" keeps the cache: the runs of
    # test_run_uses_tuned_values_and_says_where_they_came_from


@pytest.mark.timeout(120)
def test_a_tuned_host_takes_is_used_unless_the_command_line_says(cache):
    speeds = {"core": {"gemm": 40.0}, "gpu": {"gemm": 0.4}}
    path = seed_cache("cholesky", 1, "emulated", {"nb": 128}, [2, 1], host_takes=True, speeds=speeds)
    text = tiledsl("run", "programs/cholesky.tile", "--n", 400, "--gpus", 1, "--check", cache=cache)
    assert text.returncode == 0, text.stderr
    assert f"  settings  nb=128, gpu-ratio 0:1, host-takes on: tuned ({path})" in text.stdout.splitlines()
    assert "; CPU workers took " in text.stdout
    off = last_json(tiledsl("run", "programs/cholesky.tile", "--n", 400, "--gpus", 1, "--host-takes", "off", "--json",
                            cache=cache))
    assert off["host_takes"] is False and "host_takes" not in off["sources"] and off["totals"]["host_took"] == 0
    assert off["gpu_ratio"] == "2:1" and off["sources"]["gpu_ratio"] == f"tuned ({path})"
    given = last_json(tiledsl("run", "programs/cholesky.tile", "--n", 400, "--gpus", 1, "--gpu-ratio", "1:1",
                              "--host-takes", "on", "--no-tune", "--json", cache=cache))  # the rates still read
    assert given["host_takes"] and given["sources"]["host_takes"] == "command line" and given["gpu_ratio"] == "1:1"
    said = last_json(tiledsl("run", "programs/cholesky.tile", "--n", 400, "--gpus", 1, "--host-takes", "on",
                             "--json", cache=cache))  # the tuned choice said again: the same run
    assert said["host_takes"] and said["gpu_ratio"] == "0:1" and said["sources"]["host_takes"] == "command line"
    out_of_core = last_json(tiledsl("run", "programs/cholesky.tile", "--n", 400, "--gpus", 1, "--host-takes", "on",
                                    "--gpu-memory", "700K", "--json", cache=cache))  # the text said so; the JSON not
    assert out_of_core["out_of_core"] and "--host-takes does nothing out of core" in out_of_core["notes"]
    assert not out_of_core["host_takes"] and "host_takes" not in out_of_core["sources"]  # not said as a setting


@pytest.mark.timeout(120)
def test_explain_predicts_the_tuned_run(cache, capsys):
    seed_cache("cholesky", 1, "emulated", {"nb": 128}, [1, 2])
    status, explained, err = in_process(capsys, "explain", ROOT / "programs/cholesky.tile", "--n", 517, "--gpus", 1,
                                        "--json")
    assert status == 0, err
    predicted = json.loads(explained)
    assert predicted["tiles"]["nb"] == 128 and predicted["gpu_ratio"] == "1:2"  # as run's summary has them
    ran = last_json(tiledsl("run", "programs/cholesky.tile", "--n", 517, "--gpus", 1, "--json", cache=cache))
    assert ran["ranks"][0]["device_copies"] == predicted["copies"]["0"] > 0
    assert ran["tasks"] == len(predicted["tasks"])
    text = in_process(capsys, "explain", ROOT / "programs/cholesky.tile", "--n", 517, "--gpus", 1)[1]
    assert "(host:GPU columns 1:2)" in text.splitlines()[0] and "tuned values: nb tuned (" in text


@pytest.mark.timeout(120)
def test_graph_draws_the_tuned_run_unless_told_not_to(cache, capsys):
    seed_cache("cholesky", 0, "emulated", {"nb": 128})
    tasks = lambda out: int(re.search(r"nb=\d+, (\d+) tasks", out)[1])
    status, tuned, err = in_process(capsys, "graph", ROOT / "programs/cholesky.tile", "--n", 512)
    assert status == 0, err
    untuned = in_process(capsys, "graph", ROOT / "programs/cholesky.tile", "--n", 512, "--no-tune")[1]
    assert tasks(tuned) == 20 and tasks(untuned) == 4  # 4×4 tiles of 128; the program's nb = 384: 2×2


@pytest.mark.timeout(120)
def test_a_corrupt_cache_warns_in_one_line_and_the_run_goes_on(cache):
    path = tuning.cache_path()
    path.parent.mkdir(parents=True)
    path.write_text('{"entries": {"cholesky/cpu": ')
    out = tiledsl("run", "programs/cholesky.tile", "--n", 300, "--check", cache=cache)
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("tiledsl: warning: ignoring the corrupt tuning cache")
    assert "Traceback" not in out.stderr and "nb=256: program default" in out.stdout


@pytest.mark.timeout(60)
def test_usage_errors_of_the_ratio(cache):
    for args, text in [(("--gpu-ratio", "1:2"), "--gpu-ratio needs --gpus"),
                       (("--gpus", 1, "--gpu-ratio", "1:0"), "bad GPU ratio")]:
        out = tiledsl("run", "programs/cholesky.tile", "--n", 100, *args, cache=cache)
        assert out.returncode == 2 and text in out.stderr and "Traceback" not in out.stderr
    out = tiledsl("run", "programs/hetero_cholesky.tile", "--n", 300, "--gpus", 1, "--gpu-ratio", "1:2", cache=cache)
    assert out.returncode == 2 and "applies to uniform tiling" in out.stderr


# ---------------------------------------------------------------- tiledsl tune end to end
@pytest.mark.timeout(180)
def test_tune_cholesky_on_an_emulated_gpu_then_run_uses_it(cache):
    out = tiledsl("tune", "cholesky", "--gpus", 1, "--gpu-backend", "emulated", *TINY, cache=cache, timeout=150)
    assert out.returncode == 0, out.stderr
    path = tuning.cache_path()
    key = f"{key_of('cholesky')}/emulated/1"
    assert f"saved in {path} as {key}" in out.stdout and "kernel speeds" in out.stdout
    entry = json.loads(path.read_text())["entries"][key]
    assert entry["tiles"]["nb"] in (64, 128, 192) and entry["tiles"]["nb"] % 64 == 0
    host, gpu = entry["gpu_ratio"]
    assert host >= 0 and gpu >= 1 and entry["workers"] >= 1 and entry["trial_n"] == 256
    assert set(entry["speeds"]) == {"core", "gpu"} and {"64", "128"} <= set(entry["speeds"]["gpu"]["gemm"])
    assert {"gemm", "potrf", "syrk", "trsm"} <= set(entry["speeds"]["core"])
    summary = last_json(tiledsl("run", "programs/cholesky.tile", "--n", 300, "--gpus", 1, "--check", "--json",
                                cache=cache))
    assert summary["passed"] and summary["tiles"] == entry["tiles"]
    ratio = "0:1" if entry["host_takes"] else f"{host}:{gpu}"  # taking GPU tasks goes with every column there
    assert summary["gpu_ratio"] == ratio and summary["sources"]["nb"] == f"tuned ({path})"
    assert summary["host_takes"] is entry["host_takes"] and ("host_takes" in summary["sources"]) is entry["host_takes"]
    # simulated on this machine with those rates: emulated GPUs share its cores, which the model leaves out
    simulated = last_json(tiledsl("simulate", "cholesky", "--n", 300, "--nodes", 1, "--gpus", 1, "--json", cache=cache))
    assert any(note.startswith("the GPUs are emulated here") for note in simulated["notes"]), simulated["notes"]


@pytest.mark.timeout(120)
def test_the_tile_search_never_times_candidates_with_a_gpu_idle(cache, tmp_path):
    """At n = 256 the formula's 5:4 dealt both 128-wide columns to the host: nb was chosen from runs on the host
    alone (tester w57). Each trial's ratio is one of those dealing every GPU a column at its tiles."""
    out = tiledsl("tune", "cholesky", "--gpus", 2, "--quick", "--sizes", "64,128", "--n", 256, "--no-save", "--json",
                  cache=cache)
    assert out.returncode == 0, out.stderr
    search, driver = last_json(out)["search"], driver_of(tmp_path, "cholesky")
    assert {trial["tiles"]["nb"] for trial in search} == {64, 128}
    for trial in search:
        ratio = Fraction(*trial["gpu_ratio"])
        dealing, _ = tune_command.distinct_ratios(driver, Options(n=256, tiles=trial["tiles"], gpus=2), ratio)
        assert ratio in dealing, trial


@pytest.mark.timeout(180)
def test_tune_qr_tunes_ib_with_the_tiles_then_run_uses_it(cache):
    out = tiledsl("tune", "qr", "--gpus", 1, "--quick", "--sizes", "64,128", "--n", 256, cache=cache, timeout=150)
    assert out.returncode == 0, out.stderr
    entry = json.loads(tuning.cache_path().read_text())["entries"][f"{key_of('qr')}/emulated/1"]
    nb, ib = entry["tiles"]["nb"], entry["params"]["ib"]
    assert set(entry["params"]) == {"ib"} and ib in inner_block_candidates(nb, 64)
    assert f"tuned qr: nb={nb} ib={ib}, gpu-ratio " in out.stdout and "inner blocks ib" in out.stdout
    tried = {(t["tiles"]["nb"], t["params"]["ib"]) for t in entry["search"]}
    assert {(64, 32), (64, 64), (128, 32), (128, 64)} <= tried  # ib searched at each nb
    assert any(t["gpu_ratio"] == [0, 1] for t in entry["search"])  # the GPU alone, always measured
    summary = last_json(tiledsl("run", "programs/qr.tile", "--n", 300, "--gpus", 1, "--check", "--json",
                                cache=cache))
    assert summary["passed"] and summary["tiles"] == {"nb": nb}
    assert summary["sources"]["ib"] == summary["sources"]["nb"] == f"tuned ({tuning.cache_path()})"


@pytest.mark.timeout(120)
def test_a_tuned_ib_goes_with_its_tiles_and_set_wins(cache, capsys):
    path = seed_cache("qr", 0, "emulated", {"nb": 128}, params={"ib": 96})
    text = tiledsl("run", "programs/qr.tile", "--n", 300, "--check", cache=cache)
    assert text.returncode == 0, text.stderr
    assert f"  settings  nb=128, ib=96: tuned ({path})" in text.stdout.splitlines()
    explained = json.loads(in_process(capsys, "explain", ROOT / "programs/qr.tile", "--n", 300, "--json")[1])
    assert explained["params"]["ib"] == 96 and explained["sources"]["ib"] == f"tuned ({path})"
    for args, source in [(("--set", "ib=32"), "command line"), (("--nb", 64), "program default")]:
        summary = last_json(tiledsl("run", "programs/qr.tile", "--n", 300, "--json", *args, cache=cache))
        assert summary["sources"]["ib"] == source  # other tiles than the tuned ones: ib is the program's
    # a cache written before inner blocks were tuned: nb is used, ib not mentioned
    seed_cache("qr", 0, "emulated", {"nb": 128})
    summary = last_json(tiledsl("run", "programs/qr.tile", "--n", 300, "--json", cache=cache))
    assert summary["sources"] == {"nb": f"tuned ({path})"}


EDITED_QR = """\
program qr {
  tiling uniform(nb = 64)
  param ib = 4
  matrix A[n, n] = random general
  matrix B[n, n] = zeros
  for r in 0 .. ib {
    for i in 0 .. A.mt { for j in 0 .. A.nt { gemm(A[i, i], A[i, j], B[i, j]) } }
  }
}
"""


@pytest.mark.timeout(120)
def test_a_tuned_ib_is_not_given_to_a_program_where_it_is_no_longer_an_inner_block(tmp_path, cache):
    """An entry goes by the program's name and the kernels it calls: edited since, keeping both, with
    ``ib`` now a loop count (a run's result depends on it), the tuned ib was used and changed the result
    silently."""
    (tmp_path / "qr.tile").write_text(EDITED_QR)
    path = seed_cache("qr", 0, "emulated", {"nb": 64}, params={"ib": 64}, source=tmp_path / "qr.tile")
    out = tiledsl("run", tmp_path / "qr.tile", "--n", 128, "--json", cache=cache)
    assert out.returncode == 0, out.stderr
    assert (f"tiledsl: warning: ignoring the tuned ib = 64 of {path}: not an inner block (a workspace's rows) "
            "of qr as it is now; run tiledsl tune again") in out.stderr
    summary = last_json(out)
    assert summary["params"]["ib"] == 4 and summary["sources"] == {"nb": f"tuned ({path})"}


@pytest.mark.timeout(60)
def test_a_program_of_the_same_name_calling_other_kernels_takes_no_tuned_values(tmp_path, cache):
    """The shipped qr tuned, then another program named qr (a copy made into another algorithm) run: it
    took qr's tiles, ib and kernel rates, said as "tuned"."""
    path = seed_cache("qr", 0, "emulated", {"nb": 32}, params={"ib": 2})
    (tmp_path / "qr.tile").write_text(EDITED_QR)
    out = tiledsl("run", tmp_path / "qr.tile", "--n", 128, "--json", cache=cache)
    assert out.returncode == 0 and str(path) not in out.stderr, out.stderr
    summary = last_json(out)
    assert summary["params"]["ib"] == 4 and summary["sources"] == {"nb": "program default"}
    assert summary["tiles"] == {"nb": 64}


@pytest.mark.timeout(180)
def test_tune_json_without_gpus_and_without_saving(cache):
    out = tiledsl("tune", "programs/lu.tile", "--json", "--no-save", "--workers", 1, *TINY, cache=cache)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["program"] == "lu" and result["gpus"] == 0 and result["gpu_ratio"] is None
    assert set(result["tiles"]) == {"nb"} and result["cache"] is None and "gpu" not in result["speeds"]
    assert not tuning.cache_path().exists()


@pytest.mark.timeout(120)
def test_tune_a_hybrid_program_in_process(tmp_path, cache):
    driver = driver_of(tmp_path, "hetero_cholesky")
    lines = []
    result = tune(driver, gpus=1, backend="emulated", workers=1, budget=5, sizes=[64, 128, 192], n=384,
                  log=lines.append)
    B, b, s = (result["tiles"][k] for k in ("B", "b", "s"))
    assert B % 64 == 0 and b % 64 == 0 and (s - 1) * b < B and s in (1, 2)
    assert result["formula"]["B_h"] == pytest.approx(
        host_width(result["formula"]["B"], result["formula"]["f_core"], 1, result["formula"]["f_gpu"], 1), abs=0.1)
    assert any(line.startswith("B_h = B·f_core·W/") for line in lines)
    run = execute(driver, Options(n=300, tiles=result["tiles"], gpus=1, check=True))
    assert run.passed


def test_a_host_share_under_a_slice_says_why_it_gives_no_host_slice():
    """'B_h = ... = 112 → b = 64, s = 1', then a search of s = 3: s = 1 read as contradicting the share."""
    tuner = tune_command._Tuner.__new__(tune_command._Tuner)
    lines = []
    tuner.best, tuner.defaults, tuner.sizes_given = {"core": 1.0, "gpu": 10.0}, {"s": 3}, False
    tuner.workers, tuner.gpus, tuner.log = 2, 1, lines.append
    guess = tuner.hybrid_gpu_guess({"gpu": {"gemm": {512: 10.0}}})
    assert lines[1].endswith("= 85 → b = 64, s = 1 (no host slice: the share of each of the 2 slices, 43, is "
                             "under 64; the search tries them)"), lines
    assert (64, 3) in guess.candidates


@pytest.mark.timeout(60)
def test_tune_with_cupy_and_no_gpu_is_a_clear_usage_error(cache):
    try:
        import cupy  # noqa: F401
        if cupy.cuda.runtime.getDeviceCount() > 0:
            pytest.skip("a GPU is present")
    except Exception:
        pass
    out = tiledsl("tune", "cholesky", "--gpus", 1, "--gpu-backend", "cupy", *TINY, cache=cache)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("tiledsl: error:") and out.stderr.count("\n") == 1
    assert "Traceback" not in out.stderr and not tuning.cache_path().exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("args, text", [
    (("--gpus", -1), "--gpus must be from 0 to 1024, got -1"), (("--sizes", "100"), "multiples of 64"),
    (("--sizes", "a,b"), "--sizes expects integers"), (("--sizes", "0,64"), "--sizes must be positive multiples of 64"),
    (("--sizes", "64,,"), "--sizes expects integers separated by commas, got '64,,'"),  # was tune at 64, said nothing
    (("--budget", 0), "--budget must be a finite positive number of seconds, got 0\n"),
    (("--budget", "nan"), "--budget must be a finite positive number of seconds, got nan\n"),
    (("--budget", "inf"), "--budget must be a finite positive number of seconds, got inf\n"),
    (("--budget", "1e400"), "--budget must be a finite positive number of seconds, got 1e400 (inf as a float)\n"),
    (("--budget", "1e-400"), "--budget must be a finite positive number of seconds, got 1e-400 (0 as a float)\n"),
    (("--budget", "soon"), "tiledsl: error: --budget expects a number of seconds, got 'soon'\n"),
    (("--workers", 0), "--workers must be from 1 to 1024")])
def test_tune_usage_errors(cache, capsys, args, text):
    status, _, err = in_process(capsys, "tune", "cholesky", *args)
    assert status == 2 and text in err


@pytest.mark.timeout(120)
def test_sizes_above_half_of_n_are_left_out_before_any_timing(cache):
    """--n 256 --sizes 64,128,192: 192 was timed and chosen, then the run refused it. One run: what it
    says of 192, and what it chose."""
    out = tiledsl("tune", "cholesky", "--n", 256, "--sizes", "64,128,192", "--budget", 3, "--no-save", cache=cache)
    assert out.returncode == 0, out.stderr
    assert "--sizes: 192 left out: runs of --n 256 tell tiles apart up to half of it" in out.stdout, out.stdout
    assert re.search(r"^tuned cholesky: nb=(64|128) ", out.stdout, re.M), out.stdout


@pytest.mark.timeout(120)
def test_tune_times_user_kernels_in_its_runs_of_the_program_and_simulate_uses_their_rate(tmp_path, cache):
    """A user kernel cannot be timed alone: the search's runs of the program time it, its rate on
    a core joins the cache, and simulate times its tasks with it (memory included)."""
    (tmp_path / "halve_kernels.py").write_text("import time\n"
                                               "def halve(A):\n    A *= 0.5\n    time.sleep(0.004)\n")
    (tmp_path / "halve.tile").write_text('use "halve_kernels.py"\nkernel halve(inout A) flops A.m * A.n\n'
                                         "program halve {\n  tiling uniform(nb = 64)\n"
                                         "  matrix A[n, n] = random general\n"
                                         "  for i in 0 .. A.mt { for j in 0 .. A.nt { halve(A[i, j]) } }\n}\n")
    out = tiledsl("tune", tmp_path / "halve.tile", "--workers", 1, *TINY, cache=cache)
    assert out.returncode == 0, out.stderr
    assert ("not timed alone: halve (user kernels; the tile sizes follow gemm's rates, and the search's runs of "
            "the program time them)") in out.stdout
    entry = tuning.entry(key_of("halve", tmp_path / "halve.tile"), 0, "emulated")
    assert entry["measured_in_run"] == ["halve"]
    (size, rate), = entry["speeds"]["core"]["halve"].items()
    tile = entry["tiles"]["nb"]
    assert int(size) == round((tile * tile / 2) ** (1 / 3))  # a task's flops as a gemm's: A.m·A.n = 2·s³
    # 4.1 to 6 ms a task: tile² flops in that time (the rate a gemm has is thousands of times more)
    assert tile * tile / 6e-3 / 1e9 < rate < tile * tile / 4e-3 / 1e9, out.stdout
    assert f"timed in the search's runs of the program, on a core: halve {rate:.3g} GFLOP/s" in out.stdout
    simulated = tiledsl("simulate", tmp_path / "halve.tile", "--n", 256, "--nodes", 1, "--workers", 1, "--json",
                        cache=cache)
    assert simulated.returncode == 0, simulated.stderr
    tasks = -(-256 // tile) ** 2
    assert last_json(simulated)["seconds"] > tasks * 4e-3  # at gemm's rate: well under a millisecond
    # the rates are the module's as tune timed it: a run and a simulation after an edit say so
    assert entry["kernel_module"] == source_digest((tmp_path / "halve_kernels.py").read_bytes())
    assert entry["kernel_helpers"] == [] and "has changed" not in simulated.stderr
    with open(tmp_path / "halve_kernels.py", "a") as module:
        module.write("# edited\n")
    for command, *more in (("run", "--workers", 1), ("simulate", "--workers", 1), ("explain",),
                           ("bench", "--workers", 1, "--rounds", 1)):
        out = tiledsl(command, tmp_path / "halve.tile", "--n", 128, *more, cache=cache)
        assert out.returncode == 0, out.stderr
        assert out.stderr.count("warning: halve_kernels.py (or a helper file it imports) has changed since tiledsl "
                                "tune measured halve with it: the tuned tile sizes and kernel rates (") == 1, \
            (command, out.stderr)


@pytest.mark.timeout(120)
def test_tune_records_the_helper_files_the_kernel_module_imports_and_an_edit_of_one_is_warned_of(tmp_path, cache):
    """The kernel's code lived in a helper: editing it changed what tune had timed, without a word (tester u67)."""
    (tmp_path / "hk.py").write_text("from hhelp import work\n")
    (tmp_path / "hhelp.py").write_text("def work(A):\n    A += 1.0\n")
    (tmp_path / "ht.tile").write_text('use "hk.py"\nkernel work(inout A)\nprogram ht {\n  tiling uniform(nb = 64)\n'
                                      "  matrix A[n, n] = zeros\n  for i in 0 .. A.mt { work(A[i, i]) }\n}\n")
    assert tiledsl("tune", tmp_path / "ht.tile", "--workers", 1, *TINY, cache=cache).returncode == 0
    assert tuning.entry(key_of("ht", tmp_path / "ht.tile"), 0, "emulated")["kernel_helpers"] == ["hhelp.py"]
    said = "warning: hk.py (or a helper file it imports) has changed since tiledsl tune measured ht"
    assert said not in tiledsl("run", tmp_path / "ht.tile", "--n", 128, cache=cache).stderr
    (tmp_path / "hhelp.py").write_text("def work(A):\n    A += 2.0\n")
    assert said in tiledsl("run", tmp_path / "ht.tile", "--n", 128, cache=cache).stderr


@pytest.mark.timeout(120)
def test_a_program_of_slow_user_kernels_is_tuned_within_its_budget(tmp_path, cache):
    """The rates tune times are the prelude's: the timed warm-up tells how much slower the
    program runs, and the search's size shrinks so that its trials fit the budget."""
    (tmp_path / "slow_kernels.py").write_text("def slow(A, B, C):\n    for _ in range(60):\n"
                                              "        C += (A @ B) * 1e-3\n")
    (tmp_path / "slow.tile").write_text('use "slow_kernels.py"\nkernel slow(in A, in B, inout C) flops 120 * A.m * A.n * B.n\n'
                                        "program slow {\n  tiling uniform(nb = 64)\n"
                                        "  matrix A[n, n] = random general\n  matrix C[n, n] = zeros\n"
                                        "  for i in 0 .. A.mt { for j in 0 .. A.nt { for k in 0 .. A.nt {\n"
                                        "    slow(A[i, k], A[k, j], C[i, j]) } } }\n}\n")
    started = time.monotonic()
    out = tiledsl("tune", tmp_path / "slow.tile", "--no-save", "--workers", 1, "--quick", cache=cache)
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - started < 25, out.stdout  # --quick: 10 s; it took a minute when runs followed gemm


@pytest.mark.timeout(60)
def test_tune_takes_run_s_watchdog_for_its_trial_runs(cache):
    """tune refused --watchdog (unrecognized arguments), which a stall's report advised: a kernel that
    never returns held it for the automatic limit, a minute at least, whatever its budget."""
    began = time.monotonic()
    out = tiledsl("tune", "tests/runtime/programs/faults.tile", *TINY, "--set", "fault=2", "--no-save",
                  "--watchdog", 1, cache=cache)
    assert out.returncode == 1 and time.monotonic() - began < 30, out.stderr
    assert re.match(r"tiledsl: error: rank 0 \(faults.tile:20\): in tune's trial run at n=256, nb=\d+, fault=2 "
                    r"\(.*\): watchdog: no task completed for 1\.\d s; ", out.stderr), out.stderr


@pytest.mark.timeout(60)
def test_a_trial_run_stuck_past_the_budget_ends_at_the_watchdog_which_says_how_to_end_it_sooner(cache, capsys):
    """--quick ('a 10-second budget') ran 63 s on a kernel that never returns (the automatic limit's
    minute), and the report advised --watchdog for a slower kernel only. The budget cuts no run short
    (a slow kernel cannot be told from a stuck one): the help says so, and the report how to stop sooner."""
    script = ("import sys\nfrom tiledsl.runtime import watchdog\nfrom tiledsl.commands.cli import main\n"
              "watchdog.FLOOR_SECONDS = 2.0  # the automatic limit, at 2 s rather than 60\n"
              "sys.exit(main(sys.argv[1:]))\n")
    out = subprocess.run([sys.executable, "-c", script, "tune", "tests/runtime/programs/faults.tile", "--quick",
                          "--sizes", "64,128", "--n", "256", "--set", "fault=2", "--no-save"], cwd=ROOT,
                         env={**os.environ, "XDG_CACHE_HOME": str(cache)}, capture_output=True, text=True, timeout=50)
    assert out.returncode == 1, out.stderr
    assert ("(the automatic limit, the larger of 2 s and 20 times the longest task so far: --watchdog SECONDS sets "
            "another, longer for a slower kernel or shorter to stop a stuck one sooner, and --watchdog 0 turns it "
            "off); ") in out.stderr, out.stderr
    helped = " ".join(in_process(capsys, "tune", "--help")[1].split())
    assert ("--budget SECONDS time for the whole tuning (default 30), which tune fits its trial runs to; none is cut "
            "short, since a slow kernel cannot be told from a stuck one: one whose kernel never returns ends at the "
            "watchdog's limit (a minute at least, unless --watchdog sets it)") in helped, helped


@pytest.mark.timeout(120)
def test_bench_uses_the_tuned_tiles_as_run_does_and_no_tune_ignores_them(cache):
    path = seed_cache("gemm", 0, None, {"nb": 128})
    tuned = tiledsl("bench", "gemm", "--n", 256, "--rounds", 1, "--no-dask", "--workers", 1, "--json", cache=cache)
    assert tuned.returncode == 0, tuned.stderr
    table = json.loads(tuned.stdout)
    assert table["tiles"] == {"nb": 128} and table["sources"] == {"nb": f"tuned ({path})"}
    plain = tiledsl("bench", "gemm", "--n", 256, "--rounds", 1, "--no-dask", "--workers", 1, "--json", "--no-tune",
                    cache=cache)
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout)["sources"] == {"nb": "program default"}


@pytest.mark.timeout(120)
def test_a_search_size_below_two_tiles_is_refused_and_nothing_is_cached(cache, capsys):
    status, _, err = in_process(capsys, "tune", ROOT / "programs/hetero_cholesky.tile", "--n", "300", "--budget", "5")
    assert status == 2 and err.strip() == ("tiledsl: error: --n 300 is less than two tiles of the program's B, "
                                           "which tune keeps without GPUs, 512: runs of one tile cannot tell tile "
                                           "sizes apart (give --n 1024 or more, or leave it out)")
    assert tuning.entry(key_of("hetero_cholesky"), 0, "emulated") is None
    started = time.monotonic()  # below two of the smallest size: said before any kernel is timed
    status, out, err = in_process(capsys, "tune", ROOT / "programs/cholesky.tile", "--n", "10")
    assert status == 2 and err.strip() == (
        "tiledsl: error: --n 10 is less than two tiles of the smallest size tune tries, 64: runs of one tile "
        "cannot tell tile sizes apart (give --n 128 or more, or leave it out)")
    assert time.monotonic() - started < 20 and "kernel speeds" not in out
    assert "not tried" not in out  # "sizes 128 to 1024 not tried: ... up to half of it, 5", then no size was


@pytest.mark.timeout(120)
def test_a_failing_trial_run_says_it_was_tunes_and_at_which_size_and_n_sets_them(cache, tmp_path, capsys):
    (tmp_path / "k5.py").write_text("def sc(Y, a):\n    Y *= a\n")
    (tmp_path / "fixed.tile").write_text('use "k5.py"\nkernel sc(inout Y, float a) flops Y.m * Y.n\n'
                                         'program fixed {\n  matrix A[n, n] = random general\n  sc(A[3, 1], 0.5)\n}\n')
    out = tiledsl("tune", tmp_path / "fixed.tile", "--quick", "--sizes", "64,128", "--no-save", cache=cache)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert ("in tune's trial run at n=256, nb=128 (tune chooses the sizes; --n and --sizes set them): "
            "tile A[3, 1] does not exist") in out.stderr
    out = tiledsl("tune", tmp_path / "fixed.tile", "--quick", "--sizes", "64,128", "--n", 1024, "--no-save", cache=cache)
    assert out.returncode == 0, out.stderr
    # the count of the program's tasks, before any trial, walks the loop nest at sizes tune chose too
    (tmp_path / "wraps.tile").write_text("program wraps {\n  matrix A[n, n] = random spd\n"
                                         "  for k in 0 .. A.nt { potrf(A[k * 7 % (A.nt + 1), k]) }\n}\n")
    status, _, err = in_process(capsys, "tune", tmp_path / "wraps.tile", "--quick", "--n", 400, "--no-save")
    assert status == 1
    assert ("rank 0 (wraps.tile:3): in tune's count of the program's tasks at n=400, nb=64 (tune chooses the sizes; "
            "--n and --sizes set them): tile A[7, 1] does not exist") in err, err


@pytest.mark.timeout(120)
def test_a_tuned_run_reports_its_fraction_of_the_kernel_upper_bound(cache):
    seed_cache("cholesky", 0, "emulated", {"nb": 128}, speeds={"core": {"gemm": {64: 20.0, 128: 40.0}}})
    summary = last_json(tiledsl("run", "programs/cholesky.tile", "--n", 400, "--workers", 2, "--json", cache=cache))
    assert summary["upper_bound"] == 80.0  # 2 workers × gemm's 40 GFLOP/s on 128-tiles
    assert summary["of_upper_bound"] == pytest.approx(summary["gflops"] / 80.0)
    text = tiledsl("run", "programs/cholesky.tile", "--n", 400, "--workers", 2, cache=cache).stdout
    assert "of the kernel upper bound, 80.0 GFLOP/s (gemm's tuned rates × the cores used and GPUs)" in text
    # tiles larger than tune timed: no bound, said (the line was gone without a word)
    text = tiledsl("run", "programs/cholesky.tile", "--n", 400, "--nb", 256, "--workers", 2, cache=cache).stdout
    assert ("  bound     none: tune timed gemm on tiles up to 128, and this run's reach 256 (tiledsl tune --sizes with "
            "larger ones times them)\n") in text, text
    untuned = last_json(tiledsl("run", "programs/cholesky.tile", "--n", 400, "--no-tune", "--json", cache=cache))
    assert untuned["upper_bound"] is None and untuned["of_upper_bound"] is None
    # nor where --host-takes reads the rates it estimates with (tester w57: the bound came back with it)
    seed_cache("cholesky", 1, "emulated", {"nb": 128},
               speeds={"core": {"gemm": {128: 40.0}}, "gpu": {"gemm": {128: 90.0}}})
    taking = last_json(tiledsl("run", "programs/cholesky.tile", "--n", 400, "--nb", 128, "--gpus", 1, "--no-tune",
                               "--host-takes", "on", "--json", cache=cache))
    assert taking["upper_bound"] is None and taking["sources"].get("host_takes") == "command line"


@pytest.mark.timeout(120)
def test_the_python_api_takes_the_tuned_values_as_run_does(cache):
    import tiledsl

    seed_cache("cholesky", 0, "emulated", {"nb": 128})
    a = np.eye(300) * 300.0
    assert tiledsl.load("cholesky").run(A=a).tiles == {"nb": 128}
    assert tiledsl.load("cholesky").run(A=a, tuned=False).tiles == {"nb": 256}  # the program's default
    assert tiledsl.load("cholesky").run(A=a, tiles={"nb": 64}).tiles == {"nb": 64}


def test_trials_repeat_and_go_on_only_while_the_budget_holds_the_longest_run(monkeypatch):
    """A program slower than its kernels' rates promised: a trial's second run, and the next
    setting, are left out once the budget left is less than the longest run so far."""
    runs = []

    def slow_trial(driver, options):
        runs.append(options.tiles["nb"])
        return type("Result", (), {"seconds": 0.01 * len(runs), "kernel_rates": {}})()
    monkeypatch.setattr(tune_command, "trial", slow_trial)
    monkeypatch.setattr(tune_command, "_accepts", lambda driver, options: True)  # no program: no requirement
    clock = iter([0.0] * 5 + [10.0])  # the start and end of each run
    left = {"seconds": 5.0}
    trials = tune_command.Trials(None, Options(n=64), repeats=2, remaining=lambda: left["seconds"])
    monkeypatch.setattr(tune_command.time, "perf_counter", lambda: next(clock))
    assert trials.seconds({"nb": 64}, None, {}) == 0.01 and runs == [64, 64]
    assert trials.longest == 0.0 and trials.time_for_another()
    left["seconds"] = 9.0  # the next run takes 10 s: no second run of it, and no other setting
    assert trials.seconds({"nb": 128}, None, {}) == 0.03 and runs == [64, 64, 128]
    assert trials.longest == 10.0 and not trials.time_for_another()


@pytest.mark.timeout(120)
def test_tune_tells_prelude_kernels_it_does_not_time_from_user_kernels(cache):
    out = tiledsl("tune", "programs/getrf.tile", "--no-save", "--workers", 1, *TINY, cache=cache)
    assert out.returncode == 0, out.stderr
    assert "not timed alone: getrf, laswp (prelude kernels tune has no timing for; the tile sizes follow " in out.stdout
    assert "on a core: getrf " in out.stdout and "; laswp not (no flops counted, or no task on a core): gemm's " \
        "rate stands for it" in out.stdout


@pytest.mark.timeout(120)
def test_a_program_that_loads_its_matrix_is_tuned_at_the_files_size(tmp_path, cache, capsys):
    """Tune's runs take the n the loaded file fixes, and tiles up to half of it."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((300, 300))
    np.save(tmp_path / "data.npy", a @ a.T + 300 * np.eye(300))
    (tmp_path / "chol.tile").write_text((ROOT / "programs" / "cholesky.tile").read_text().replace(
        "random spd", 'load "data.npy"'))
    out = tiledsl("tune", tmp_path / "chol.tile", "--no-save", "--workers", 1, "--budget", 5, cache=cache)
    assert out.returncode == 0, out.stderr
    assert f"n = 300: the program's load files fix it (A from {tmp_path / 'data.npy'} (300×300))" in out.stdout
    assert "search at n=300 " in out.stdout and re.search(r"tuned cholesky: nb=(64|128) ", out.stdout), out.stdout
    started = time.monotonic()  # another --n: refused before any kernel is timed (it timed them all first)
    status, out, err = in_process(capsys, "tune", tmp_path / "chol.tile", "--no-save", "--n", 1000)
    assert status == 2 and err.strip() == (
        f"tiledsl: error: --n 1000: the program's load files fix n = 300 (A from {tmp_path / 'data.npy'} (300×300)): "
        "tune runs the program at the n of its files (leave --n out)")
    assert time.monotonic() - started < 20 and "kernel speeds" not in out
    assert tiledsl("tune", tmp_path / "chol.tile", "--no-save", "--n", 300, "--budget", 3, cache=cache).returncode == 0
    np.save(tmp_path / "data.npy", np.ones((300, 200)))
    status, _, err = in_process(capsys, "tune", tmp_path / "chol.tile", "--no-save")
    assert status == 2 and err.strip().endswith(
        f"(tune runs the program at the sizes of its load files: A from {tmp_path / 'data.npy'} (300×200))"), err


def _required(tmp_path, requirement: str) -> Path:
    """cholesky.tile with one more requirement."""
    text = (ROOT / "programs/cholesky.tile").read_text().replace("  check cholesky(A)",
                                                                 f"  require {requirement}\n  check cholesky(A)")
    (tmp_path / "required.tile").write_text(text)
    return tmp_path / "required.tile"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("requirement, extra, refused", [
    ("n >= 1000", ("--n", 1024), lambda search: False),  # tune counted the tasks at n = 512 and stopped
    ("n >= 1000", (), lambda search: False),  # it picks the trials' size itself
    ("nb >= 128", (), lambda search: search["tiles"]["nb"] < 128)])
def test_tune_tries_only_sizes_the_programs_requirements_accept(tmp_path, cache, requirement, extra, refused):
    out = tiledsl("tune", _required(tmp_path, requirement), "--json", "--no-save", "--workers", 1, "--quick",
                  "--sizes", "64,128,192", *extra, cache=cache)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["search"] and not any(refused(search) for search in result["search"])
    assert result["trial_n"] >= 1000 or "nb" in requirement


@pytest.mark.timeout(120)
def test_tune_refused_everywhere_says_where_it_looked(tmp_path, cache, capsys):
    # (n < 0 can meet no size: check refuses it, E209; this one no size tune tries meets)
    status, _, err = in_process(capsys, "tune", _required(tmp_path, 'n < nb - 100000 "never"'), "--no-save",
                                "--quick")
    assert status == 2 and "requires n < nb - 100000 (never)" in err, err
    assert "(tune counts the program's tasks at n=1536 nb=64: give --n, --sizes or --set at which the program's " \
           "requirements hold)" in err


@pytest.mark.timeout(120)
def test_tune_runs_every_trial_with_the_parameters_given(cache):
    """--set fixes a parameter in every run (tune times the program as it will run); an inner block
    given so is not searched."""
    out = tiledsl("tune", "programs/qr.tile", "--json", "--no-save", "--workers", 1, "--set", "ib=32", *TINY,
                  cache=cache)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["params"] == {} and all(search["params"] == {} for search in result["search"])
    assert result["sets"] == {"ib": 32}


# ---------------------------------------------------------------- sizes inferred at the tuned tiles
WIDE = ('use "k.py"\nkernel touch(inout X) flops 0\nprogram wide {\n  tiling uniform(nb = 100)\n  param c = 4\n'
        '  require n % nb == 0 "whole tiles"\n  matrix A[n, c * nb] = zeros\n'
        "  for k in 0 .. A.nt { touch(A[0, k]) }\n}\n")


@pytest.fixture
def wide(tmp_path, cache):
    """A program whose input's width is c tiles, tuned to tiles of 48, and an input of 4 such tiles."""
    (tmp_path / "k.py").write_text("def touch(X):\n    pass\n")
    (tmp_path / "wide.tile").write_text(WIDE)
    np.save(tmp_path / "a.npy", np.zeros((96, 192)))
    return tmp_path, seed_cache("wide", 0, "emulated", {"nb": 48}, source=tmp_path / "wide.tile")


@pytest.mark.timeout(120)
def test_the_inputs_are_fitted_at_the_tuned_tiles_the_run_uses(wide, cache, capsys):
    folder, path = wide
    program, given = folder / "wide.tile", f"A={folder / 'a.npy'}"
    ran = tiledsl("run", program, "--input", given, "--json", cache=cache)
    assert ran.returncode == 0, ran.stderr
    assert (last_json(ran)["tiles"], last_json(ran)["params"]) == ({"nb": 48}, {"c": 4})
    assert last_json(ran)["sources"] == {"nb": f"tuned ({path})"}
    status, explained, err = in_process(capsys, "explain", program, "--input", given, "--json")
    assert status == 0, err
    assert [json.loads(explained)[k] for k in ("n", "tiles", "params")] == [96, {"nb": 48}, {"c": 4}]
    untuned = tiledsl("run", program, "--input", given, "--no-tune", cache=cache)  # 192 is no multiple of 100
    assert untuned.returncode == 2 and untuned.stderr.strip() == (
        "tiledsl: error: the input files' shapes fit no size of wide: with n=96, c=4, A has shape (96, 192), "
        f"expected (96, 400); give --n and --set or --nb for the size you mean (A: --input {given})")
    loaded = load(program).run(A=np.zeros((96, 192)))  # the API, in this process, reads the same cache
    assert (loaded.n, loaded.tiles, loaded.params) == (96, {"nb": 48}, {"c": 4})


@pytest.mark.timeout(120)
def test_a_requirement_the_tuned_tiles_break_says_they_are_tuned(wide, cache):
    folder, _ = wide
    out = tiledsl("run", folder / "wide.tile", "--n", 200, cache=cache)  # 200 is a multiple of 100, not of 48
    assert out.returncode == 2 and out.stderr.strip() == (
        "tiledsl: error: wide requires n % nb == 0 (whole tiles), which n = 200, nb = 48, c = 4 break (wide.tile:6); "
        "nb = 48 is tuned (tiledsl tune's cache): give --nb, or --no-tune")
    assert tiledsl("run", folder / "wide.tile", "--n", 200, "--no-tune", cache=cache).returncode == 0


@pytest.mark.timeout(60)
def test_a_tile_setting_given_to_tune_as_a_parameter_is_said_to_be_tunes_choice(cache, capsys):
    status, _, err = in_process(capsys, "tune", "cholesky", "--set", "nb=64")
    assert status == 2 and err.strip() == (
        "tiledsl: error: --set nb: nb is a tile setting, which tune chooses: --sizes S1,S2,... limits the tile "
        "sizes it tries")
    status, _, err = in_process(capsys, "tune", "cholesky", "--set", "b=64")  # said a tile setting of cholesky's
    assert status == 2 and err.strip() == (
        "tiledsl: error: --set b: b is a setting of hybrid tiling, and cholesky's tiling is uniform, whose tile sizes "
        "tune chooses: --sizes S1,S2,... limits the tile sizes it tries")


def test_a_kernel_without_a_flop_count_is_said_to_be_timed_as_a_gemm():
    """Its rate is its time as a gemm's flops on its largest tile, which simulate uses alike:
    shown bare, it read as the kernel's own GFLOP/s (a shift at 612)."""
    from types import SimpleNamespace

    from tiledsl.commands import tune

    calls = [SimpleNamespace(kernel="mm", flops=lambda *shapes: 1.0), SimpleNamespace(kernel="shift", flops=None)]
    trials = SimpleNamespace(driver=SimpleNamespace(PROGRAM=SimpleNamespace(calls=calls)),
                             kernel_rates={None: {"mm": {"128": 20.1}, "shift": {"128": 612.0}}})
    said = []
    tune.time_in_run(trials, None, ["mm", "shift"], 0, {"speeds": {"core": {}}}, said.append)
    assert said == ["timed in the search's runs of the program, on a core: mm 20.1 GFLOP/s, shift 612 GFLOP/s "
                    "as if a gemm on its largest tile (it declares no flop count)"]


def test_only_kernels_with_a_gpu_body_are_said_to_take_gemms_rate_on_a_gpu(monkeypatch):
    """A user kernel without a GPU body runs on the host: "on a GPU they take gemm's rate" named it too."""
    from types import SimpleNamespace

    from tiledsl.commands import tune

    calls = [SimpleNamespace(kernel="mm", flops=lambda *shapes: 1.0), SimpleNamespace(kernel="host", flops=None)]
    trials = SimpleNamespace(driver=SimpleNamespace(PROGRAM=SimpleNamespace(calls=calls)),
                             kernel_rates={None: {"mm": {"128": 20.1}, "host": {"128": 3.0}}})
    monkeypatch.setattr(tune, "gpu_kernels", lambda program, driver: frozenset({"potrf", "mm"}))
    said = []
    tune.time_in_run(trials, None, ["mm", "host"], 1, {"speeds": {"core": {}}}, said.append)
    assert said[0].endswith("; on a GPU mm takes gemm's rate (a GPU kernel returns at launch)")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("gpus, sizes, message", [
    (1, [64], r"^--sizes 64: hetero_cholesky's hybrid tiles of s = 2 slices need B of at least 128: give such a size$"),
    (0, [512], r"^--sizes 512: hetero_cholesky's hybrid tiling B=512, s=2 leaves the host slices b at most 448 wide"),
])
def test_sizes_that_make_no_hybrid_tiling_are_refused_before_any_kernel_is_timed(tmp_path, monkeypatch, gpus, sizes,
                                                                                 message):
    """Refused after the whole table of kernel speeds, which took its share of the budget for nothing."""
    def never(self):
        raise AssertionError("a kernel was timed")

    monkeypatch.setattr(tune_command._Tuner, "time_kernels", never)
    with pytest.raises(UsageError, match=message):
        tune(driver_of(tmp_path, "hetero_cholesky"), gpus=gpus, workers=1, budget=2, sizes=sizes, n=1024)


# ---------------------------------------------------------------- the search's sizes when the budget picks n
@pytest.mark.timeout(120)
@pytest.mark.parametrize("rates, trial_n, searched, said", [
    # flat rates: nb = 64, trials of n = 128 (the budget's smallest), which tell apart nothing wider
    ({64: 1.0, 128: 1.0, 192: 1.0, 256: 1.0}, 128, [64], "nb=128, nb=192, nb=256 not tried: runs of n=128, the "
     "largest the budget of 0.5 s allows, tell tiles apart only up to half of it (give a larger --budget or --n "
     "to try them)"),
    # still growing at 256, the last size timed: the search climbs no further than the kernels were timed
    ({64: 0.25, 128: 0.5, 192: 0.75, 256: 1.0}, 512, [64, 128, 192, 256], "nb = 256: the smallest size within 95% "
     "of the best rate of the kernel mix on a core; the search keeps to the sizes timed, up to 256 (not timed: 320 "
     "to 1024: the rates stopped growing, or the timing's share of the budget ran out)"),
])
def test_without_n_the_search_tries_only_timed_sizes_of_two_tiles_or_more(tmp_path, monkeypatch, rates, trial_n,
                                                                          searched, said):
    """tune --budget 0.5 searched at n=256 up to nb=384 (one-tile runs, and sizes whose kernels were not timed),
    and picked nb=320 from them."""
    monkeypatch.setattr(tune_command._Tuner, "time_kernels",
                        lambda self: {"core": {kernel: dict(rates) for kernel in self.kernels}})
    lines = []
    result = tune(driver_of(tmp_path, "cholesky"), workers=1, budget=0.5, log=lines.append)
    tried = [record["tiles"]["nb"] for record in result["search"]]
    assert result["trial_n"] == trial_n and tried and set(tried) <= set(searched), lines
    assert said in lines


@pytest.mark.timeout(120)
def test_tune_json_has_ok_as_run_json_does(cache, capsys, monkeypatch):
    """It had none; a result that could not be cached has ok false and the error (exit 2)."""
    out = tiledsl("tune", "cholesky", "--json", "--workers", 1, *TINY, cache=cache)
    assert out.returncode == 0 and last_json(out)["ok"] is True and "error" not in last_json(out), out.stderr
    (cache / "a-file").write_text("")  # the cache's folder cannot be made under a file
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache / "a-file"))
    status, out, err = in_process(capsys, "tune", "cholesky", "--json", "--workers", 1, *TINY)
    failure = json.loads(out.strip().splitlines()[-1])
    assert status == 2 and failure["ok"] is False and failure["error"] in err


@pytest.mark.timeout(120)
def test_a_gpu_backend_without_gpus_is_warned_of_as_run_does(cache):
    """tune --gpu-backend cupy without --gpus ignored the backend and said nothing."""
    out = tiledsl("tune", "cholesky", "--gpu-backend", "cupy", "--no-save", "--json", "--workers", 1, *TINY,
                  cache=cache)
    assert out.returncode == 0 and out.stderr == ("tiledsl: warning: --gpu-backend cupy does nothing without --gpus G: "
                                                  "tune times the kernels on a core only\n"), out.stderr
    assert last_json(out)["gpus"] == 0 and last_json(out)["gpu_backend"] is None
    run = tiledsl("run", "cholesky", "--n", 256, "--gpu-backend", "cupy", cache=cache)
    assert "tiledsl: warning: --gpu-backend cupy does nothing without --gpus G: the run uses no GPU" in run.stderr


@pytest.mark.timeout(120)
def test_a_hybrid_runs_bound_is_at_its_large_tiles_and_a_rate_above_it_says_why(cache):
    """hetero_cholesky with B = 1500 was bounded at gemm's rate on its 64-wide slices, tuned, and ran at 1.16
    of it; a band program's standard count put it at 8.28 of its bound, unexplained."""
    seed_cache("hetero_cholesky", 0, "emulated", {"B": 128, "b": 64, "s": 2},
               speeds={"core": {"gemm": {64: 20.0, 128: 40.0}}})
    sizes = ("--n", 300, "--b", 64, "--s", 2, "--workers", 1, "--json")
    assert last_json(tiledsl("run", "hetero_cholesky", "--B", 1536, *sizes, cache=cache))["upper_bound"] is None
    assert last_json(tiledsl("run", "hetero_cholesky", "--B", 128, *sizes, cache=cache))["upper_bound"] == 40.0
    seed_cache("cholesky", 0, "emulated", {"nb": 128}, speeds={"core": {"gemm": {128: 0.001}}})
    text = tiledsl("run", "cholesky", "--n", 400, "--workers", 1, cache=cache).stdout
    assert re.search(r"bound     \d+\.\d\d of the kernel upper bound, 0\.0 GFLOP/s \(gemm's tuned rates × the cores "
                     r"used and GPUs\): above it, the count is more than the work this run did", text), text


@pytest.mark.timeout(120)
def test_the_upper_bound_counts_no_more_workers_than_the_cores_that_run_them(cache):
    """--workers 8 on 2 cores was bounded by 8 × gemm's rate, 4 ranks by 4 workers' worth: a bound
    no run could reach."""
    seed_cache("cholesky", 0, "emulated", {"nb": 128}, speeds={"core": {"gemm": {64: 20.0, 128: 40.0}}})
    cores = os.cpu_count() or 1
    summary = last_json(tiledsl("run", "programs/cholesky.tile", "--n", 400, "--workers", cores + 6, "--json",
                                cache=cache))
    assert summary["upper_bound"] == 40.0 * cores
    summary = last_json(tiledsl("run", "programs/cholesky.tile", "--n", 400, "--np", 2, "--workers", cores,
                                "--json", cache=cache))  # the node's cores shared by its two ranks
    assert summary["upper_bound"] == 40.0 * 2 * min(cores, cores / 2)
    summary = last_json(tiledsl("run", "programs/cholesky.tile", "--n", 400, "--np", cores + 1, "--workers", 1,
                                "--json", cache=cache))  # more ranks than cores: each has a share of one
    assert summary["upper_bound"] == pytest.approx(40.0 * cores)
    # one 64x64 tile under nb = 128: bounded by the rate at 64, not at the nb it does not reach
    summary = last_json(tiledsl("run", "programs/cholesky.tile", "--n", 64, "--workers", 1, "--json", cache=cache))
    assert summary["upper_bound"] == 20.0


@pytest.mark.timeout(60)
def test_sizes_a_small_n_leaves_out_are_said_and_blamed_for_a_single_trial(tmp_path):
    """--n 200 allows tiles up to 100: tune timed 64 alone, ran its one trial in 0.5 s of a 60 s budget,
    and said nothing of the sizes it left out but 'a larger --budget compares them'."""
    said = []
    result = tune(driver_of(tmp_path, "cholesky"), workers=1, budget=20, n=200, log=said.append)
    assert result["sizes_left_out"] == {"sizes": list(range(128, 1025, 64)), "by": "--n 200", "from_files": False}
    assert "sizes 128 to 1024 not tried: --n 200 tells tiles apart up to half of it, 100" in said
    assert tune_command.render(result).splitlines()[-1] == (
        "note: tune ran one trial, so no other setting was compared with it: --n 200 left it one tile size to try "
        "(nb=64; a larger --n tries 128 to 1024 too)")


@pytest.mark.timeout(60)
def test_sizes_given_that_the_load_files_n_leaves_out_are_blamed_for_a_single_trial(tmp_path):
    """--sizes 64,128 of a program loading 129×37 and 37×131 files: 128 left out ('runs of --n 131', never
    given), one trial in 0.8 s of a 60 s budget, and 'a larger --budget compares them', which it did not."""
    np.save(tmp_path / "a.npy", np.ones((129, 37)))
    np.save(tmp_path / "b.npy", np.ones((37, 131)))
    (tmp_path / "rgload.tile").write_text(
        'program rgload {\n  tiling uniform(nb = 64)\n  param m = n\n  param k = n\n'
        '  in matrix A[m, k] = load "a.npy"\n  in matrix B[k, n] = load "b.npy"\n  matrix C[m, n] = zeros\n'
        '  for i in 0 .. C.mt { for j in 0 .. C.nt { for l in 0 .. A.nt {\n'
        '    gemm(A[i, l], B[l, j], C[i, j], "N", "N", 1.0, 1.0) } } }\n}\n')
    _, text = compile_path(tmp_path / "rgload.tile")
    (tmp_path / "rgload.py").write_text(text)
    said = []
    result = tune(import_driver(tmp_path / "rgload.py", "tune_rgload"), workers=1, budget=60, sizes=[64, 128],
                  log=said.append)
    files = "n = 131, which the program's load files fix"
    assert f"--sizes: 128 left out: runs of {files}, tell tiles apart up to half of it" in said
    assert result["sizes_left_out"] == {"sizes": [128], "by": files, "from_files": True}
    assert tune_command.render(result).splitlines()[-1] == (
        f"note: tune ran one trial, so no other setting was compared with it: {files}, left it one tile size to try "
        f"(nb=64; load files of a larger n try 128 too)")
    result.pop("sizes_left_out")  # --sizes 64: one setting to try, nor is the budget why
    assert tune_command.render(result).splitlines()[-1] == (
        "note: tune ran one trial, so no other setting was compared with it: it had only nb=64 to try")


@pytest.mark.timeout(30)
def test_a_hybrid_program_without_gpus_is_refused_an_n_below_two_of_its_own_tiles_before_any_timing(tmp_path,
                                                                                                    monkeypatch):
    """--n 100 was told 'give --n 128 or more' (two of the smallest size), which then was refused after
    the kernels were timed: without GPUs tune keeps the program's B (512) and searches b in it."""
    def never(self):
        raise AssertionError("a kernel was timed")

    monkeypatch.setattr(tune_command._Tuner, "time_kernels", never)
    with pytest.raises(UsageError, match=r"^--n 128 is less than two tiles of the program's B, which tune keeps "
                                         r"without GPUs, 512: .*\(give --n 1024 or more, or leave it out\)$"):
        tune(driver_of(tmp_path, "hetero_cholesky"), workers=1, budget=2, sizes=[64], n=128)


@pytest.mark.timeout(30)
def test_a_hybrid_program_on_gpus_is_refused_an_n_below_two_of_its_smallest_b_before_any_timing(tmp_path,
                                                                                                monkeypatch):
    """--n 200 timed the kernels at 64 only, named B = 128 'the smallest GPU gemm size within 95%' (a
    size never timed: 128 is the least that holds two slices of 64), then refused --n 200."""
    def never(self):
        raise AssertionError("a kernel was timed")

    monkeypatch.setattr(tune_command._Tuner, "time_kernels", never)
    with pytest.raises(UsageError, match=r"^--n 200 is less than two tiles of the smallest B of hetero_cholesky's "
                                         r"s = 2 slices, 128: .*\(give --n 256 or more, or leave it out\)$"):
        tune(driver_of(tmp_path, "hetero_cholesky"), gpus=1, workers=1, budget=2, n=200)


@pytest.mark.timeout(120)
def test_the_bound_line_counts_the_cores_used_and_the_tutorial_explains_it(cache):
    """The bound is capped at the rank's share of the cores: workers beyond them add nothing, so the line
    said "× the workers" wrongly; tutorial §9 explained every summary line but this one."""
    seed_cache("cholesky", 0, "emulated", {"nb": 128}, speeds={"core": {"gemm": {128: 40.0}}})
    workers = (os.cpu_count() or 1) + 2
    text = tiledsl("run", "programs/cholesky.tile", "--n", 400, "--workers", workers, cache=cache).stdout
    bound = 40.0 * (os.cpu_count() or 1)
    assert f"of the kernel upper bound, {bound:.1f} GFLOP/s (gemm's tuned rates × the cores used and GPUs)" in text
    section = (ROOT / "docs" / "tutorial.md").read_text().split("## 9. Reading the summary", 1)[1].split("\n## ")[0]
    assert "* `bound`" in section


@pytest.mark.timeout(300)
def test_explain_bench_and_tune_json_name_the_settings_as_run_does(cache, capsys):
    """explain put n and the tile settings (nulls for B, b, s) in "params", and gave "gpu_ratio": [1, 1];
    tune said "backend" and [1, 1]; bench gave the tile sources as one string, "tiling"."""
    keys = ("n", "tiles", "params", "gpu_backend", "gpu_ratio", "sources")
    ran = last_json(tiledsl("run", "qr", "--n", 400, "--nb", 100, "--gpus", 1, "--json", cache=cache))
    explained = json.loads(in_process(capsys, "explain", "qr", "--n", 400, "--nb", 100, "--gpus", 1, "--json",
                                      "--totals")[1].strip().splitlines()[-1])
    assert {k: explained[k] for k in keys} == {k: ran[k] for k in keys} == {
        "n": 400, "tiles": {"nb": 100}, "params": {"ib": 64, "m": 400}, "gpu_backend": "emulated", "gpu_ratio": "1:1",
        "sources": {"nb": "command line", "gpu_ratio": "default"}}
    benched = last_json(tiledsl("bench", "qr", "--n", 400, "--nb", 100, "--rounds", 1, "--no-dask", "--json",
                                cache=cache))
    assert "tiling" not in benched and benched["sources"] == {"nb": "command line"}
    tuned = last_json(tiledsl("tune", "cholesky", "--gpus", 1, *TINY, "--no-save", "--json", cache=cache))
    assert "backend" not in tuned and tuned.get("gpu_backend") == "emulated", tuned  # (a failure's object: why)
    assert re.fullmatch(r"\d+:\d+", tuned["gpu_ratio"])


@pytest.mark.timeout(10)
def test_the_inner_blocks_tried_at_each_tile_size_divide_it_or_are_the_programs_default():
    """The best ib of the tiles tried before (96 at nb=192) was taken for the program's default at the
    next tiles: nb=320 tried ib=96, and a run could be tuned to an ib that divides neither its tiles
    nor is qr.tile's 64 (README: 'among the sizes from 32 to 512 that divide them and the program's
    own default')."""
    tried = []
    search_inner_blocks(["ib"], {"ib": 96}, 320, lambda v: tried.append(v["ib"]) or abs(v["ib"] - 96),
                        defaults={"ib": 64})
    assert tried and all(320 % ib == 0 or ib == 64 for ib in tried), tried
    assert tried[0] == 64  # the candidate nearest the earlier best


@pytest.mark.timeout(10)
def test_an_inner_block_the_requirements_refuse_is_not_tried():
    """`require ib <= 48`: ib=64 was timed, as 'inf s'."""
    tried = []
    values, _ = search_inner_blocks(["ib"], {"ib": 32}, 256, lambda v: tried.append(v["ib"]) or 1 / v["ib"],
                                    allowed=lambda v: v["ib"] <= 48)
    assert tried and max(tried) <= 48 and values == {"ib": max(tried)}
    assert search_inner_blocks(["ib"], {"ib": 32}, 256, lambda v: 1.0, allowed=lambda v: False) == ({"ib": 32}, [])


@pytest.mark.timeout(120)
def test_an_inner_block_given_by_a_formula_of_the_tiles_is_tried_at_its_value_there(tmp_path):
    """ib = nb // 6: at nb = 192 tune tried the 42 of the program's own nb = 256, which divides neither."""
    (tmp_path / "qrib.tile").write_text((ROOT / "programs/qr.tile").read_text().replace(
        "param ib = 64", "param ib = nb // 6").replace("nb = 384", "nb = 256"))
    out = tiledsl("tune", tmp_path / "qrib.tile", "--quick", "--sizes", 192, "--n", 768, "--no-save",
                  cache=tmp_path)
    assert out.returncode == 0, out.stderr
    line = next(line for line in out.stdout.splitlines() + out.stderr.splitlines() if "nb=192:" in line)
    tried = [int(ib) for ib in re.findall(r"ib=(\d+)", line)]
    assert tried and all(192 % ib == 0 for ib in tried), line


@pytest.mark.timeout(120)
def test_a_tuning_cache_that_cannot_be_written_is_said_before_any_timing(tmp_path, monkeypatch, capsys):
    """With a read-only cache folder, tune timed for its whole budget and only then failed to save."""
    from tiledsl.runtime.world import UsageError

    tuning_module = tuning
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("TILEDSL_NO_TUNE", raising=False)
    folder = tuning_module.cache_path().parent
    folder.parent.mkdir(parents=True)
    folder.write_text("")  # where the folder of the cache would be: nothing can be written there
    status, out, err = in_process(capsys, "tune", "cholesky", "--budget", 60, "--n", 300)
    assert status == 2 and out == "", out
    assert err.startswith("tiledsl: error: cannot ") and "tuning cache" in err, err
    with pytest.raises(UsageError, match=r"cannot write the tuning cache .*: Permission denied \(set XDG_CACHE_HOME "
                                         r"to a writable directory, or tune with --no-save\)"):
        def refused(*args, **kwargs):
            raise PermissionError(13, "Permission denied")
        monkeypatch.setattr(Path, "write_text", refused)
        tuning_module.check_storable(tmp_path / "elsewhere" / "cache.json")
    assert tiledsl("tune", "cholesky", "--quick", "--no-save", "--n", 200, cache=tmp_path).returncode == 0


@pytest.mark.timeout(60)
def test_a_load_file_too_small_to_tune_is_said_as_the_files_not_as_an_n_given(tmp_path, cache, capsys):
    """A program loading a 100×100 file: '--n 100 is less than two tiles ... (give --n 128 or more, or leave
    it out)' of an --n never given, and --n 128 was then refused for the file's shape."""
    a = np.random.default_rng(0).standard_normal((100, 100))
    np.save(tmp_path / "data.npy", a @ a.T + 100 * np.eye(100))
    (tmp_path / "ld.tile").write_text('program ld {\n  tiling uniform(nb = 64)\n  matrix A[n, n] = load "data.npy"\n'
                                      "  for k in 0 .. A.nt { potrf(A[k, k]) }\n}\n")
    status, _, err = in_process(capsys, "tune", tmp_path / "ld.tile", "--quick")
    assert status == 2 and err == (
        "tiledsl: error: n = 100, which the program's load files fix, is less than two tiles of the smallest size tune "
        "tries, 64: runs of one tile cannot tell tile sizes apart (tune the program with files of n = 128 or more)\n")


@pytest.mark.timeout(120)
def test_a_program_whose_files_fix_two_sizes_is_tuned_at_both(tmp_path, cache):
    """Each file was fitted alone: X[m, 1] (m = n by default) gave n = 300 where Y[1, n] fixes n = 200,
    then the run failed, and --n 200, as its message advised, was refused."""
    (tmp_path / "k.py").write_text("def step(X, Y, T):\n    T[...] = X[:, 0:1] + Y[0:1, :]\n")
    (tmp_path / "p.tile").write_text(
        'use "k.py"\nkernel step(in X, in Y, out T)\nprogram outer {\n  tiling uniform(nb = 32)\n  param m = n\n'
        '  in matrix X[m, 1] = load "x.npy"\n  in matrix Y[1, n] = load "y.npy"\n  matrix T[m, n] = zeros\n'
        '  for i in 0 .. T.mt { for j in 0 .. T.nt { step(X[i, 0], Y[0, j], T[i, j]) } }\n}\n')
    np.save(tmp_path / "x.npy", np.ones((300, 1)))
    np.save(tmp_path / "y.npy", np.ones((1, 200)))
    for extra in ((), ("--n", 200)):
        out = tiledsl("tune", tmp_path / "p.tile", "--no-save", "--workers", 1, "--quick", *extra, cache=cache)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("n = 200, m = 300: the program's load files fix them") and \
            "search at n=200 " in out.stdout, out.stdout


@pytest.mark.timeout(120)
def test_a_param_the_load_files_fix_is_not_advised_as_a_set_to_give(tmp_path, cache):
    """'they were tuned with --set k=180: give a run that too', where a plain run fits k from the file."""
    (tmp_path / "ld.tile").write_text('program ld {\n  tiling uniform(nb = 64)\n  param k = n\n'
                                      '  in matrix A[n, k] = load "data.npy"\n  matrix C[n, n] = zeros\n'
                                      "  for j in 0 .. C.nt { for l in 0 .. A.nt { syrk(A[j, l], C[j, j]) } }\n}\n")
    np.save(tmp_path / "data.npy", np.ones((300, 180)))
    out = tiledsl("tune", tmp_path / "ld.tile", "--quick", "--workers", 1, cache=cache)
    assert out.returncode == 0 and ", tuned with k=180 (in " in out.stdout, out.stderr
    assert "--set" not in out.stdout.splitlines()[-1], out.stdout
    run = tiledsl("run", tmp_path / "ld.tile", cache=cache)
    assert run.returncode == 0 and "tuned (" in run.stdout, run.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("entry, warned", [
    ({"tiles": {"nb": 64}, "speeds": "x"}, 'ignoring the kernel rates of the tuned entry {key} of {path}: '
                                           'speeds is the text "x", not an object of the devices\' rates'),
    (5, "ignoring the tuned entry {key} of {path}: the number 5, not an object"),
])
def test_a_tuned_entry_edited_by_hand_is_warned_of_in_words_and_the_run_goes_on(cache, entry, warned):
    """speeds = "x" failed the run as an internal error ('str' object has no attribute 'get'); an entry
    that is a number was said as "'int' object has no attribute 'get'"."""
    key = tuning.entry_key(key_of("cholesky"), 0, "emulated")
    path = tuning.store(key, {})
    content = json.loads(path.read_text())
    content["entries"][key] = entry
    path.write_text(json.dumps(content))
    out = tiledsl("run", "cholesky", "--n", 256, "--check", cache=cache)
    assert out.returncode == 0 and "internal error" not in out.stderr, out.stderr
    assert f"tiledsl: warning: {warned.format(path=path, key=key)}; run tiledsl tune again to rewrite it\n" in out.stderr


@pytest.mark.timeout(120)
def test_tunes_saving_at_once_each_keep_the_other_s_entry(tmp_path):
    """Each store read the file, added its entry and replaced the file: of eight tunes saving at
    once, one's entry was lost though every one said it saved it."""
    script = ("import sys\nfrom tiledsl.runtime import tuning\n"
              "for i in range(15):\n    tuning.store(f'p{sys.argv[1]}-{i}/cpu', {'tiles': {'nb': 64}})\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    writers = [subprocess.Popen([sys.executable, "-c", script, str(w)], env=env) for w in range(6)]
    assert [writer.wait(timeout=100) for writer in writers] == [0] * 6
    saved = json.loads(next((tmp_path / "tiledsl" / "tune").glob("*.json")).read_text())["entries"]
    assert sorted(saved) == sorted(f"p{w}-{i}/cpu" for w in range(6) for i in range(15))


@pytest.mark.timeout(60)
def test_a_fifo_or_a_folder_in_the_tuning_cache_is_said_not_waited_on(tmp_path, monkeypatch):
    """A fifo where the cache file or its lock goes blocked run and tune for ever; a folder where the
    lock goes was said as the cache file being a directory."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = tuning.cache_path()
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    warned = []
    assert tuning.read(path, warned.append)["entries"] == {}
    assert warned == [f"ignoring the tuning cache {path}: not a regular file"]
    path.unlink()
    lock = path.with_name(f".{path.name}.lock")
    for make in (os.mkfifo, os.mkdir):
        make(lock)
        with pytest.raises(UsageError, match=rf"^cannot write the tuning cache {re.escape(str(path))} "
                                             rf"\({re.escape(str(lock))}\): "):
            tuning.store("cholesky/cpu", {"tiles": {"nb": 64}})
        (os.unlink if make is os.mkfifo else os.rmdir)(lock)


@pytest.mark.timeout(120)
def test_a_ratio_that_is_no_pair_is_said_so(cache):
    path = seed_cache("cholesky", 1, "emulated", {"nb": 64}, ratio="1:1")
    out = tiledsl("run", "cholesky", "--n", 256, "--gpus", 1, cache=cache)
    assert out.returncode == 0, out.stderr
    assert (f"ignoring the tuned entry {key_of('cholesky')}/emulated/1 of {path}: gpu_ratio is the text \"1:1\", not a pair "
            f"[H, G] of host and GPU columns; run tiledsl tune again to rewrite it") in out.stderr


@pytest.mark.timeout(10)
def test_sizes_the_user_gave_are_all_timed_however_the_rates_go(monkeypatch):
    """--sizes 64,...,704: one slow reading at 384 ended the timing at 448 (the rates no longer growing),
    and the search chose among 128-256 without naming the sizes left out."""
    monkeypatch.setattr(tune_command, "time_kernel", lambda run, inputs, place, min_time, clock: 1.0)
    sizes = list(range(64, 705, 64))
    timed = lambda plateau: sorted(tune_command.measure_speeds(  # noqa: E731
        ["gemm"], sizes, {"core": None}, 32, deadline=float("inf"), min_time=0.0, plateau=plateau)["core"]["gemm"])
    assert timed(False) == sizes
    assert timed(True) == sizes  # rates of size³ / 1 s keep growing: no plateau either
    monkeypatch.setattr(tune_command, "KERNEL_FLOPS", {"gemm": 0.0})  # flat rates: a plateau after three sizes
    assert timed(True) == sizes[:3] and timed(False) == sizes


def test_the_result_says_a_single_trial_and_the_settings_tiles_were_tuned_with():
    """--budget 0.2 ran one candidate and saved it as tuned without a word; tiles tuned with --set ib=32
    were said to be used by every run, which then ran them with the program's ib."""
    result = {"program": "qr", "tiles": {"nb": 128}, "params": {}, "gpu_ratio": None, "sets": {"ib": 32},
              "seconds": 1.5, "gpus": 0, "backend": None, "search": [{"tiles": {"nb": 128}, "seconds": 0.2}]}
    lines = tune_command.render(result, "/c/tuning.json", "qr/cpu").splitlines()
    assert lines[1] == ("note: the budget let tune run one trial, so no other setting was compared with it (a larger "
                        "--budget compares them)")
    assert lines[2].endswith("(--no-tune ignores them); they were tuned with --set ib=32: give a run that too to run "
                             "it as tuned")
    result.update(sets={}, search=result["search"] * 2)
    assert len(tune_command.render(result, "/c/tuning.json", "qr/cpu").splitlines()) == 2


def test_hybrid_host_slices_narrower_than_tunes_sizes_are_said_with_what_to_do(tmp_path, monkeypatch):
    """'hetero_cholesky's hybrid tiling B=100, s=3 leaves no b to tune without GPUs' said neither why (b
    at most 49, tune's sizes multiples of 64) nor what to do (--sizes 32 is refused too)."""
    text = (ROOT / "programs/hetero_cholesky.tile").read_text()
    (tmp_path / "h.tile").write_text(re.sub(r"tiling hybrid\([^)]*\)", "tiling hybrid(B = 100, b = 30, s = 3)", text))
    _, driver_text = compile_path(tmp_path / "h.tile")
    (tmp_path / "h.py").write_text(driver_text)
    monkeypatch.setattr(tune_command._Tuner, "time_kernels", lambda self: pytest.fail("a kernel was timed"))
    with pytest.raises(UsageError, match=r"^hetero_cholesky's hybrid tiling B=100, s=3 leaves the host slices b at "
                                         r"most 49 wide, below the 64 tune times kernels at \(sizes are multiples of "
                                         r"64\): give runs b yourself \(--b\), or give the program a B of at least 129 "
                                         r"or a smaller s$"):
        tune(import_driver(tmp_path / "h.py", "tune_narrow_slices"), workers=1, budget=2)


@pytest.mark.parametrize("program, n", [("hqr", None), ("hqr", 1000), ("tsqr", None)])
def test_the_census_of_kernels_holds_those_only_many_tile_rows_call(tmp_path, program, n):
    """Tester d62: tune timed hqr's and tsqr's kernels at 8×8 tiles, where a column's 8 tile rows are 8 domains:
    tpqrt and tpmqrt, which the trial runs called (and which do most of the work at large sizes), were not timed,
    and simulate priced them at gemm's rate."""
    (tmp_path / f"{program}.py").write_text(compile_path(ROOT / f"programs/{program}.tile")[1])
    driver = import_driver(tmp_path / f"{program}.py", f"census_{program}_{n}")
    counts = tune_command.task_counts(driver, n=n)
    assert counts["tpqrt"] > 0 and counts["tpmqrt"] > 0, counts


def test_a_program_of_one_name_and_kernels_in_other_loops_is_tuned_apart(tmp_path):
    """Tester i63: a left-looking Cholesky named cholesky, calling the shipped one's four kernels, took its
    tuned tiles (the key digested the name, the tiling and the kernels alone); comments and layout do not count."""
    shipped = (ROOT / "programs/cholesky.tile").read_text()
    (tmp_path / "same.tile").write_text("# a comment of my own\n" + shipped.replace("  for k in", "  for   k in"))
    (tmp_path / "left.tile").write_text(
        "program cholesky {\n  tiling uniform(nb = 256)\n  matrix A[n, n] = random spd\n  check cholesky(A)\n"
        "  for k in 0 .. A.nt {\n    for j in 0 .. k {\n      syrk(A[k, j], A[k, k])\n"
        "      for m in k + 1 .. A.mt { gemm(A[m, j], A[k, j], A[m, k]) }\n    }\n    potrf(A[k, k])\n"
        "    for m in k + 1 .. A.mt { trsm(A[k, k], A[m, k]) }\n  }\n}\n")
    assert key_of("cholesky", tmp_path / "same.tile") == key_of("cholesky")
    assert key_of("cholesky", tmp_path / "left.tile") != key_of("cholesky")


@pytest.mark.parametrize("field, value, said", [
    ("params", [1], "params is the list [1], not an object of names and values"),
    ("host_takes", "yes", 'host_takes is the text "yes", not true or false'),
    ("gpu_ratio", [0, 0], "gpu_ratio's GPU columns = 0 is not an integer from 1 to 2**63 - 1"),
])
def test_a_tuned_entry_edited_by_hand_is_ignored_saying_which_field(cache, field, value, said):
    """Tester i63: a list for params said "'list' object has no attribute 'items'", host_takes "yes" was taken
    as off without a word, and a ratio's 0 did not say which half."""
    edited = {"gpu_ratio": [1, 1], "params": {"ib": 64}, field: value}
    path = seed_cache("qr", 1, "emulated", {"nb": 256}, edited.pop("gpu_ratio"), **edited)
    warned = []
    assert tuning.lookup(key_of("qr"), "uniform", 1, "emulated", warned.append) is None
    assert warned == [f"ignoring the tuned entry {key_of('qr')}/emulated/1 of {path}: {said}; "
                      f"{tuning._REWRITE}"], warned


@pytest.mark.parametrize("shared, said", [
    (5, "shared_cores is 5, not an object"),
    ({"factor": "x"}, "shared_cores.factor is 'x', not a number above 0"),
    ({"factor": -1}, "shared_cores.factor is -1, not a number above 0"),
])
def test_simulate_refuses_a_tuned_entry_whose_sharing_was_edited_by_hand(cache, capsys, shared, said):
    """Tester i63: simulate failed with an internal error (AttributeError, TypeError), or blamed gemm's rate for
    a factor it had scaled it by; run takes the entry (it reads no factor)."""
    seed_cache("cholesky", 0, "emulated", {"nb": 128}, speeds={"core": {"gemm": {"64": 10.0, "128": 12.0}}},
               shared_cores=shared)
    status, _, err = in_process(capsys, "simulate", "cholesky", "--n", 512)
    assert status == 2 and err == (f"tiledsl: error: the tuned entry of cholesky in {tuning.cache_path()}: {said}: "
                                   f"run `tiledsl tune cholesky` again to rewrite it\n"), err
