"""Which rank ended first (tiledsl/commands/rankwatch.py), on real processes."""
import os
import subprocess
import threading
import time

import pytest

from tiledsl.commands.rankwatch import RankWatch

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs Linux pidfds")


def _wait_until(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.mark.timeout(60)
def test_the_rank_that_ended_first_is_named_and_ranks_of_other_nodes_leave_it_unknown(tmp_path):
    processes = [subprocess.Popen(["sleep", "60"]) for _ in range(3)]
    try:
        with RankWatch(str(tmp_path), lambda pids: set(pids) - {processes[2].pid}) as watch:  # rank 2: elsewhere
            for rank, process in enumerate(processes):
                (tmp_path / f"started.{rank}").write_text(str(process.pid))
            _wait_until(lambda: len(watch._watched) == 2)
            processes[1].kill()
            processes[1].wait()
            _wait_until(lambda: 1 in watch.ended)
            time.sleep(0.05)
            processes[0].kill()
            processes[0].wait()
            _wait_until(lambda: 0 in watch.ended)
        first, lead = watch.first_of([0, 1])
        assert first == 1 and 0.04 < lead < 5
        assert watch.first_of([0, 1, 2]) is None  # rank 2's end was not seen
        assert watch.first_of([1]) is None  # one rank lost: nothing to order
    finally:
        for process in processes:
            process.kill()
            process.wait()


class _HeldWatch(RankWatch):
    """A watch whose thread waits at ``gate`` once it watches every rank, as a thread the
    machine did not run for a while would."""

    def __init__(self, folder, ranks):
        super().__init__(folder, lambda pids: set(pids))
        self.ranks, self.gate = ranks, threading.Event()

    def _add_new_ranks(self, selector):
        super()._add_new_ranks(selector)
        if len(self._watched) == self.ranks:
            self.gate.wait(10)


@pytest.mark.timeout(60)
def test_ends_seen_at_one_wake_up_are_ordered_without_a_lead(tmp_path):
    processes = [subprocess.Popen(["sleep", "60"]) for _ in range(3)]
    try:
        with _HeldWatch(str(tmp_path), 3) as watch:
            for rank, process in enumerate(processes):
                (tmp_path / f"started.{rank}").write_text(str(process.pid))
            _wait_until(lambda: len(watch._watched) == 3)
            for rank in (2, 0, 1):  # not the order of their pidfds
                processes[rank].kill()
                processes[rank].wait()
            watch.gate.set()
            _wait_until(lambda: len(watch.ended) == 3)
        assert watch.first_of([0, 1, 2]) == (2, None)
        assert watch.first_of([0, 1]) == (0, None)
    finally:
        for process in processes:
            process.kill()
            process.wait()


@pytest.mark.timeout(60)
def test_the_job_s_folder_removed_under_the_watch_ends_nothing(tmp_path):
    """A job stopped as it started removed its folder while the watch listed it (Path.glob saw
    the folder, then could not list it): FileNotFoundError out of the rank-watch thread, its
    traceback cut short by the process ending. Gone, the folder is no matter."""
    folder = tmp_path / "job"
    folder.mkdir()
    errors = []
    previous, threading.excepthook = threading.excepthook, errors.append
    try:
        with RankWatch(str(folder), lambda pids: set(pids)) as watch:
            (folder / "started.0").write_text("not a pid")
            time.sleep(0.12)
            (folder / "started.0").unlink()
            folder.rmdir()
            time.sleep(0.12)  # a few more looks at a folder that is gone
            assert watch._thread.is_alive()
    finally:
        threading.excepthook = previous
    assert errors == [] and not watch._thread.is_alive()
