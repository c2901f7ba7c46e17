"""Sub-range transfers: only the rows or columns an ``in`` argument names move.

tests/runtime/programs/halo.tile reads one row or one column of other tiles (two
parts of one version by one task, a column to another device, a whole tile and
then a part of the same version). Every run is checked three ways: its outputs are
bitwise those of one rank, its messages and bytes (and host/GPU copies) are those
``explain`` predicts, and the bytes are the parts', not the tiles'.
"""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tiledsl.commands.explain import plan
from tiledsl.runtime import Options
from tiledsl.runtime.protocol import delivery

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "tests/runtime/programs/halo.tile"
N, NB = 37, 8  # ragged: the last tile row and column are 5 wide


def _run(tmp_path, name: str, *options, program=PROGRAM) -> tuple[dict, np.ndarray]:
    output = tmp_path / f"{name}.npy"
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", str(program), "--n", str(N),
                          "--json", "--watchdog", "60", "--output", f"U={output}", *map(str, options)],
                         cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), np.load(output)


# the tests comparing with one rank's run share an xdist group: one worker runs them, and that run once
ONE_RANK = pytest.mark.xdist_group("halo-one-rank")


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("halo"), "one")[1]


def test_a_whole_version_serves_every_part_and_a_part_moves_once_per_place():
    delivered, shape = {}, (8, 8)
    assert delivery(delivered, 1, (0, 1, 0, 8), shape) == (True, (0, 1, 0, 8))
    assert delivery(delivered, 1, (0, 1, 0, 8), shape) == (False, None)
    assert delivery(delivered, 1, (7, 8, 0, 8), shape) == (True, (7, 8, 0, 8))  # another part: another message
    assert delivery(delivered, 2, (0, 1, 0, 8), shape) == (True, (0, 1, 0, 8))  # another place
    assert delivery(delivered, 1, None, shape) == (True, None)
    assert delivery(delivered, 1, (3, 4, 0, 8), shape) == (False, None)  # the whole version is there


def test_parts_past_a_quarter_of_the_tile_move_it_whole():
    delivered, shape = {}, (8, 8)
    assert delivery(delivered, 1, (0, 1, 0, 8), shape) == (True, (0, 1, 0, 8))
    assert delivery(delivered, 1, (1, 2, 0, 8), shape) == (True, (1, 2, 0, 8))  # 16 of 64 elements
    assert delivery(delivered, 1, (4, 5, 0, 8), shape) == (True, None)  # 24: one message of the whole tile
    assert delivery(delivered, 1, (6, 8, 0, 8), shape) == (False, None)
    assert delivery(delivered, 2, (0, 8, 0, 3), shape) == (True, None)  # one big part: the whole tile


@pytest.mark.timeout(120)
@pytest.mark.parametrize("grid, gpus", [("2x2", 0), ("2x1", 2)])
@ONE_RANK
def test_only_the_named_rows_and_columns_move(tmp_path, compiled, one_rank, grid, gpus):
    ranks = int(grid[0]) * int(grid[2])
    summary, output = _run(tmp_path, "many", "--np", ranks, "--grid", grid,
                           *(["--gpus", gpus, "--gpu-backend", "emulated"] if gpus else []))
    assert np.array_equal(output, one_rank)
    explained = plan(compiled(str(PROGRAM.relative_to(ROOT))), Options(n=N, tiles={"nb": NB}),
                     (int(grid[0]), int(grid[2])), gpus)
    for stats in summary["ranks"]:
        rank = stats["rank"]
        assert stats["messages_sent"] == sum(c for (s, _), c in explained.messages.items() if s == rank)
        assert stats["bytes_sent"] == sum(b for (s, _), b in explained.volume.items() if s == rank) > 0
        assert stats["bytes_received"] == sum(b for (_, r), b in explained.volume.items() if r == rank)
        assert stats["device_copies"] == explained.copies.get(rank, 0)
    whole_tiles = sum(explained.messages.values()) * NB * NB * 8
    assert sum(s["bytes_sent"] for s in summary["ranks"]) < whole_tiles / 3  # one row or column of 8, but for parts past a quarter


@pytest.mark.timeout(240)
def test_an_out_sub_range_written_elsewhere_leaves_the_rest_of_its_tile(tmp_path):
    """The kernel writes one row of a tile on another rank (or device): the tile's other
    rows come back as they were, so every placement gives one rank's result. (The written
    tile is the one below the task's: two process rows put it on another rank; more process
    columns only deal other columns j of the same exchange to other ranks.)"""
    program = ROOT / "tests/runtime/programs/outpart.tile"
    _, alone = _run(tmp_path, "alone", program=program)
    for options in (("--np", 2, "--grid", "2x1"), ("--gpus", 2, "--gpu-backend", "emulated")):
        _, output = _run(tmp_path, "placed", *options, program=program)
        assert np.array_equal(output, alone), options
    assert np.count_nonzero(alone[NB + 1:2 * NB]) == (NB - 1) * N  # the random rows under the stamped one


@pytest.mark.timeout(120)
@ONE_RANK
def test_parts_go_to_emulated_gpus_of_one_rank(tmp_path, compiled, one_rank):
    summary, output = _run(tmp_path, "gpus", "--gpus", 2, "--gpu-backend", "emulated")
    assert np.array_equal(output, one_rank)
    explained = plan(compiled(str(PROGRAM.relative_to(ROOT))), Options(n=N, tiles={"nb": NB}), (1, 1), 2)
    assert summary["ranks"][0]["device_copies"] == explained.copies[0] > 0


@pytest.mark.timeout(120)
@ONE_RANK
def test_parts_received_by_an_out_of_core_rank_are_cached_apart_from_their_tiles(tmp_path, compiled, one_rank):
    summary, output = _run(tmp_path, "ooc", "--np", 2, "--grid", "2x1", "--gpus", 2, "--gpu-backend", "emulated",
                           "--gpu-memory", "2K")
    assert np.array_equal(output, one_rank)
    assert summary["out_of_core"]["copies_in"] > 0 and summary["out_of_core"]["peak_cache_bytes"] <= 2048
    explained = plan(compiled(str(PROGRAM.relative_to(ROOT))), Options(n=N, tiles={"nb": NB}), (2, 1), 2)
    for stats in summary["ranks"]:
        assert stats["bytes_sent"] == sum(b for (s, _), b in explained.volume.items() if s == stats["rank"])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", [["explain", "--grid", "2x1"], ["graph", "-o", "dag.dot"],
                                     ["simulate", "--nodes", "2", "--machine", "keeneland"]])
def test_a_sub_range_outside_its_tile_is_the_programs_mistake_everywhere(tmp_path, capsys, monkeypatch, command):
    """What moves is decided from the sub-ranges, so commands that plan moves check them as a run does."""
    from tiledsl.commands.cli import main

    text = PROGRAM.read_text().replace("[U.height(i - 1) - 1 :]", "[U.height(i - 1) - 1 : U.height(i - 1) + 3]")
    (tmp_path / "bad.tile").write_text(text)
    (tmp_path / "halo_kernels.py").write_text((PROGRAM.parent / "halo_kernels.py").read_text())
    monkeypatch.chdir(tmp_path)
    assert main([command[0], "bad.tile", "--n", "300", "--nb", "100", *command[1:]]) == 1
    err = capsys.readouterr().err
    assert "error: bad.tile:23: sub-range [99:103, :] is outside tile U[0, 0] (100×100)" in err, err
