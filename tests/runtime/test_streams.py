"""Several compute streams per GPU (runtime/streams.py): the plan of each launch, proved with vector clocks.

StreamOrder decides each kernel's stream and the events it waits for; VectorClocks,
the emulated backend's check, says whether a real GPU could run a kernel before or
beside one it conflicts with. Random launch sequences planned by StreamOrder never
race, and the same sequences with the waits left out do. Whole runs on several
streams are in test_library (every program), test_outofcore, test_heteroprio and
test_gpus (user GPU bodies, two ranks).
"""
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tiledsl.runtime.devices import EmulatedBackend
from tiledsl.runtime.streams import StreamOrder, StreamRace, VectorClocks

ROOT = Path(__file__).resolve().parents[2]


def launch(order: StreamOrder, reads, writes, event="e"):
    stream, waits = order.plan(reads, writes)
    order.launched(stream, (event, stream), reads, writes)
    return stream, waits


def test_one_stream_orders_everything_by_itself():
    order = StreamOrder(1)
    assert launch(order, [], ["a"]) == (0, [])
    assert launch(order, ["a"], ["b"]) == (0, [])
    assert launch(order, ["b"], ["a"]) == (0, [])
    assert order.writer("a") == (0, ("e", 0)) and order.writer("c") is None


def test_updates_of_one_tile_stay_on_its_stream_and_new_tiles_take_turns():
    order = StreamOrder(3)
    first, _ = launch(order, [], ["a"])
    assert [launch(order, [], ["a"])[0] for _ in range(4)] == [first] * 4
    others = [launch(order, [], [key])[0] for key in "bcd"]
    assert sorted({first, *others}) == [0, 1, 2]


def test_a_kernel_waits_for_the_writer_of_what_it_reads_and_for_the_readers_of_what_it_writes():
    order = StreamOrder(2)
    s_a, _ = launch(order, [], ["a"], "write a")
    s_b, _ = launch(order, [], ["b"], "write b")
    assert s_a != s_b
    stream, waits = launch(order, ["a"], ["b"], "read a")  # on b's stream: waits for a's writer
    assert stream == s_b and waits == [("write a", s_a)]
    stream, waits = launch(order, [], ["a"], "write a again")  # on a's stream: waits for its reader
    assert stream == s_a and waits == [("read a", s_b)]


def test_one_event_per_other_stream_the_latest_needed():
    order = StreamOrder(3)
    launch(order, [], ["x"], "x")  # stream 1
    launch(order, [], ["y"], "y")  # stream 2
    launch(order, ["x"], ["y"], "y reads x")  # stream 2, waits for x
    launch(order, ["y"], ["z"], "z")  # stream 0
    stream, waits = order.plan(["x", "y", "z"], ["w"])  # a new tile: stream 1
    assert stream == 1 and sorted(waits) == [("y reads x", 2), ("z", 0)]


@pytest.mark.parametrize("seed", range(20))
def test_planned_launches_never_race_and_unplanned_ones_do(seed):
    rng = random.Random(seed)
    streams = rng.randint(2, 4)
    keys = [f"t{i}" for i in range(rng.randint(2, 6))]
    sequence = []
    for _ in range(60):
        touched = rng.sample(keys, rng.randint(1, min(3, len(keys))))
        written = touched[:rng.randint(1, len(touched))]
        sequence.append(([k for k in touched if k not in written], written))

    def replay(wait: bool) -> int:
        """The events waited for (or that should have been)."""
        order, clocks, waited = StreamOrder(streams), VectorClocks(), 0
        for reads, writes in sequence:
            stream, waits = order.plan(reads, writes)
            waited += len(waits)
            for event in waits if wait else ():
                clocks.wait(stream, event)
            clocks.access(stream, reads, writes, "kernel")
            order.launched(stream, clocks.record(stream), reads, writes)
        return waited

    if replay(wait=True):  # some launch needed another stream's kernel: leaving its wait out races
        with pytest.raises(StreamRace, match="a missing wait_event"):
            replay(wait=False)


def test_what_the_host_saw_finish_orders_what_it_launches_next():
    clocks = VectorClocks()
    clocks.access("copy", ["a"], [], "a copy")
    with pytest.raises(StreamRace):
        clocks.access("kernel", [], ["a"], "a kernel")
    clocks = VectorClocks()
    clocks.access("copy", ["a"], [], "a copy")
    clocks.host_saw(clocks.record("copy"))
    clocks.access("kernel", [], ["a"], "a kernel")


def test_the_emulated_backend_refuses_a_kernel_launched_without_its_waits(monkeypatch):
    gpu = EmulatedBackend(1, streams=2)
    a, b = gpu.to_device(np.eye(4), 1), gpu.to_device(np.ones((4, 4)), 1)
    gpu.kernels["potrf"](a, written=[a])
    monkeypatch.setattr(StreamOrder, "plan", lambda self, reads, writes: (1 - self.writer(reads[0])[0], []))
    with pytest.raises(StreamRace, match="kernel trsm on stream"):
        gpu.kernels["trsm"](a, b, written=[b])


def test_a_copy_from_the_gpu_waits_for_the_tiles_writer():
    gpu = EmulatedBackend(1, streams=3)
    tiles = [gpu.to_device(np.full((3, 3), float(i)), 1) for i in range(3)]
    for tile in tiles:
        gpu.kernels["gemm"](tiles[0], tiles[1], tile, written=[tile])
    assert all(np.isfinite(gpu.to_host(tile)).all() for tile in tiles)


@pytest.mark.timeout(60)
def test_the_option_on_the_command_line():
    def run(*options):
        return subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "programs/cholesky.tile",
                               "--n", "300", "--nb", "64", *options], cwd=ROOT, capture_output=True, text=True,
                              timeout=50)
    out = run("--gpus", "1", "--gpu-streams", "3", "--check", "--json")
    summary = json.loads(out.stdout)
    assert out.returncode == 0 and summary["passed"] and summary["gpu_streams"] == 3
    assert "3 compute streams each" in run("--gpus", "1", "--gpu-streams", "3").stdout
    for options, message in ((("--gpus", "1", "--gpu-streams", "0"), "--gpu-streams must be at least 1, got 0"),
                             (("--gpu-streams", "2",), "--gpu-streams needs --gpus G")):
        out = run(*options)
        assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr
