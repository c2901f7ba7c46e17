"""Rank 1 never comes to MPI's start (stopped before it, as a scheduler's SIGTERM can); rank 0 is sent
SIGTERM while it waits there, its stopping signals held back: it must end as stopped within seconds,
not at the start-up limit (30 s here; 60 s by default)."""
import os
import signal
import subprocess
import sys
import time

if os.environ.get("PMI_RANK") == "1":
    time.sleep(60)  # never at MPI's start: the job's end kills it
    sys.exit(0)

from tiledsl.runtime import world  # noqa: E402
from tiledsl.runtime.entry import stopped_by_signal  # noqa: E402

signal.signal(signal.SIGTERM, stopped_by_signal)
subprocess.Popen(["sh", "-c", f"sleep 1.5; kill -TERM {os.getpid()}"])  # once this rank waits in MPI's start
world.communicator(limit=30)
print("MPI started: rank 1 was expected never to come", flush=True)
