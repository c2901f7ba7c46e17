"""Run each fault scenario of issues 16 and 17 for real and print a markdown table.

    python scripts/fault_table.py

Every scenario is a 2-rank ``tiledsl run --np 2`` job on a small size, in a folder of
its own holding a good ``out.npy`` beforehand; the fault is injected at the right moment
(a signal sent with os.kill, a kernel that exits, an input cut short). The table gives
the exit status, the seconds from the fault to the end, the first line of the message,
whether the previous output is intact, and what was left behind (processes running in
the folder, orphaned /dev/shm/mpich_shm_* segments). Not a test: a tool for a report.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tiledsl.commands import jobs

ROOT = Path(__file__).resolve().parents[1]
CHOLESKY = ROOT / "programs" / "cholesky.tile"
KERNELS = '''import os, sys
if os.environ.get("EXIT_AT_IMPORT") == os.environ.get("PMI_RANK"):
    sys.exit(0)

def quit_(a):
    if os.environ.get("PMI_RANK") == "1" and os.environ.get("EXIT_IN_KERNEL"):
        os._exit(0)
'''
EXITS = '''use "exits.py"
kernel quit_(inout A)
program exits {
  tiling uniform(nb = 64)
  matrix A[n, n] = random spd
  for k in 0 .. A.nt {
    potrf(A[k, k])
    if k == 1 { quit_(A[k, k]) }
    for m in k + 1 .. A.mt { trsm(A[k, k], A[m, k]) }
  }
}
'''
STUBBORN = "#!/bin/sh\ntrap '' TERM HUP INT\n\"$@\"\nsleep 60\n"
BIG = ["--n", "8000", "--nb", "200"]  # about 10 s on 2 cores: the faults strike mid-run
GOOD = np.arange(9.0).reshape(3, 3)


def rank_pid(rank: int, in_mpi: bool, folder: Path, timeout: float = 60) -> int | None:
    """The pid of rank ``rank`` running in ``folder`` (``in_mpi``: once MPI started in it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for environ in Path("/proc").glob("[0-9]*/environ"):
            try:
                if (f"PMI_RANK={rank}".encode() in environ.read_bytes().split(b"\0")
                        and Path(environ.parent, "cwd").resolve() == folder
                        and (not in_mpi or "mpich_shm" in Path(environ.parent, "maps").read_text())):
                    return int(environ.parent.name)
            except OSError:
                continue
        time.sleep(0.02)
    return None


def processes_in(folder: Path) -> int:
    count = 0
    for cwd in Path("/proc").glob("[0-9]*/cwd"):
        try:
            state = (cwd.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
            count += cwd.resolve() == folder and state != "Z" and int(cwd.parent.name) != os.getpid()
        except OSError:
            continue
    return count


def scenario(name: str, args: list, fault, env: dict | None = None) -> list:
    """Run one job in a fresh folder with ``fault(job, folder)`` (returning when it struck)."""
    folder = Path(tempfile.mkdtemp(prefix="fault-")).resolve()
    (folder / "exits.py").write_text(KERNELS)
    (folder / "exits.tile").write_text(EXITS)
    np.save(folder / "out.npy", GOOD)
    before = jobs.segments()
    job = subprocess.Popen([sys.executable, "-m", "tiledsl.commands.cli", "run", *args], cwd=folder, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, **(env or {})))
    struck = fault(job, folder) or time.monotonic()
    try:
        out, err = job.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        job.kill()
        out, err = job.communicate()
    seconds = time.monotonic() - struck
    time.sleep(0.5)
    for pid in [rank_pid(r, False, folder, 0.1) for r in (0, 1)]:
        if pid:  # a stopped rank still there: say so, then end it
            os.kill(pid, signal.SIGKILL)
    message = next((line for line in err.splitlines() if line.startswith("tiledsl")), err.strip()[:80])
    try:
        intact = "yes" if np.array_equal(np.load(folder / "out.npy"), GOOD) else "replaced"
    except (OSError, ValueError):
        intact = "UNREADABLE"
    in_use = jobs.mapped()
    orphans = [p for p in jobs.segments() - before if str(p) not in in_use]
    left = f"{processes_in(folder)} processes, {len(orphans)} segments"
    jobs.remove_orphans(before)
    return [name, str(job.returncode), f"{seconds:.1f}", message.replace("|", "/"), intact, left]


def signal_rank(signum: int, rank: int = 1, in_mpi: bool = True, after: float = 0.0):
    def fault(job, folder):
        pid = rank_pid(rank, in_mpi, folder)
        time.sleep(after)  # into the run, past the start-up
        if pid:
            os.kill(pid, signum)
        return time.monotonic()
    return fault


def signal_job(signum: int, stop_rank: bool = False):
    def fault(job, folder):
        pid = rank_pid(1, True, folder)
        if stop_rank and pid:
            os.kill(pid, signal.SIGSTOP)
        job.send_signal(signum)
        return time.monotonic()
    return fault


def none(job, folder):
    return time.monotonic()


def main() -> None:
    rows = []
    big_out = [str(CHOLESKY), "--np", "2", *BIG, "--output", "A=out.npy"]
    rows.append(scenario("SIGKILL rank 1 while running", big_out, signal_rank(signal.SIGKILL, after=2)))
    rows.append(scenario("SIGINT rank 1 while running", big_out, signal_rank(signal.SIGINT, after=2)))
    rows.append(scenario("SIGTERM rank 1 while running", big_out, signal_rank(signal.SIGTERM, after=2)))
    rows.append(scenario("os._exit(0) in a kernel on rank 1", ["exits.tile", "--np", "2", "--n", "256",
                                                                "--output", "A=out.npy"], none,
                         {"EXIT_IN_KERNEL": "1"}))
    rows.append(scenario("sys.exit(0) importing kernels on rank 1", ["exits.tile", "--np", "2", "--n", "256",
                                                                      "--output", "A=out.npy"], none,
                         {"EXIT_AT_IMPORT": "1"}))
    np.save(Path(tempfile.gettempdir()) / "fault-a.npy", np.eye(int(BIG[1])) * int(BIG[1]))
    rows.append(scenario("--input cut short during the run (--check)",
                         [str(CHOLESKY), "--np", "2", *BIG, "--check", "--input",
                          f"A={Path(tempfile.gettempdir()) / 'fault-a.npy'}", "--output", "A=out.npy"],
                         _truncate))
    rows.append(scenario("SIGSTOP rank 1 at start-up, --watchdog 3", [*big_out, "--watchdog", "3"],
                         signal_rank(signal.SIGSTOP, in_mpi=False)))
    rows.append(scenario("SIGSTOP rank 1 while running (default watchdog)", big_out,
                         signal_rank(signal.SIGSTOP, after=2)))
    rows.append(scenario("SIGHUP to tiledsl run", big_out, signal_job(signal.SIGHUP)))
    rows.append(scenario("SIGINT to tiledsl run, rank 1 stopped", big_out, signal_job(signal.SIGINT, True)))
    stubborn = Path(tempfile.gettempdir()) / "fault-stubborn.sh"
    stubborn.write_text(STUBBORN)
    stubborn.chmod(0o755)
    rows.append(scenario("SIGTERM, launcher ignoring SIGTERM (grace 30 s)",
                         [*big_out, "--launcher", f"{stubborn} {shutil.which('mpiexec')}"],
                         signal_job(signal.SIGTERM)))
    print("| scenario | exit | seconds to stop | message | previous output intact | leftovers |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def _truncate(job, folder):
    rank_pid(1, True, folder)
    time.sleep(0.5)
    source = Path(tempfile.gettempdir()) / "fault-a.npy"
    with open(source, "r+b") as f:
        f.truncate(4096)
    return time.monotonic()


if __name__ == "__main__":
    main()
