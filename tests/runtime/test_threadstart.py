"""Starting a thread that never begins running: said, not waited for without end."""
import threading
import time

import pytest

from tiledsl.runtime import errors, threadstart


@pytest.mark.timeout(30)
def test_a_thread_that_never_begins_is_said_as_one_that_cannot_start(monkeypatch):
    """Thread.start waited for ever for a thread whose set-up died of MemoryError (under `ulimit -v`)."""
    monkeypatch.setattr(threadstart, "START_SECONDS", 0.3)
    silent = threading.Thread(target=lambda: None, name="cpu-0", daemon=True)
    silent._bootstrap = lambda: None  # as a thread whose set-up failed: it never says it runs
    began = time.monotonic()
    with pytest.raises(RuntimeError) as refused:
        threadstart.start(silent)
    assert time.monotonic() - began < 5
    assert str(refused.value) == ("can't start new thread: cpu-0 did not begin running within 0.3 s (memory ran "
                                  "out as Python set it up)")
    assert errors.shortage(refused.value).startswith("cannot start a thread")


@pytest.mark.timeout(30)
def test_a_thread_that_begins_runs_as_ever():
    ran = threading.Event()
    thread = threadstart.start(threading.Thread(target=ran.set, name="x"))
    thread.join(5)
    assert ran.is_set() and not thread.is_alive() and thread.ident is not None
