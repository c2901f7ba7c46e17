"""runtime.sameness: the ranks of a job run one driver, with one set of options, on one set of input files."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tiledsl.runtime.sameness import SAMPLE_BYTES, _difference, _load_difference, fingerprint

ROOT = Path(__file__).resolve().parents[2]
_BESIDE = Path(sys.executable).with_name("mpiexec")  # the launcher of the mpich wheel in use
MPIEXEC = str(_BESIDE) if _BESIDE.exists() else shutil.which("mpiexec")


def test_a_fingerprint_tells_files_apart_anywhere_in_them(tmp_path):
    big = np.random.default_rng(0).random(200_000).tobytes()  # 1.6 MB: sampled, not read whole
    (tmp_path / "a").write_bytes(big)
    assert fingerprint(str(tmp_path / "a"))[0] == len(big)
    for place in (0, len(big) // 2 - len(big) // 2 % SAMPLE_BYTES, len(big) - 1):  # a sample's first byte, the last
        changed = bytearray(big)
        changed[place] ^= 1
        (tmp_path / "b").write_bytes(bytes(changed))
        assert fingerprint(str(tmp_path / "b")) != fingerprint(str(tmp_path / "a")), place
    (tmp_path / "small").write_bytes(b"x" * 10)
    assert fingerprint(str(tmp_path / "small")) != fingerprint(str(tmp_path / "a"))
    assert fingerprint(str(tmp_path / "missing")) is None


def test_the_first_difference_from_rank_0_is_said_naming_the_rank():
    same = {"driver": "d", "path": "/a/d.py", "argv": ["--n", "8"], "inputs": {"A": (8, "x")}}
    assert _difference([same, same], {"A": "/a/A.npy"}) is None
    assert _difference([same, same, {**same, "driver": "e", "path": "/b/d.py"}], {"A": "/a/A.npy"}) == (
        "rank 2 runs another driver (/b/d.py) than rank 0 (/a/d.py): every rank of a job must run the same "
        "compiled program (copy one file to every node)")
    assert _difference([same, {**same, "argv": ["--n", "9"]}], {}) == (
        "rank 1 was given other options than rank 0 (--n 9, against --n 8): every rank of a job must be given the same")
    assert _difference([same, {**same, "inputs": {"A": None}}], {"A": "/a/A.npy"}) == (
        "rank 1 sees --input A /a/A.npy other than rank 0 does (missing there): every rank must read the same file "
        "(on a node's own disk, an identical copy)")


def test_a_file_the_program_loads_found_elsewhere_or_other_on_a_rank_is_said_naming_it():
    class Decl:
        load, line = "data/A.npy", 3

    class Driver:
        class PROGRAM:
            source = "/p/t.tile"
    same = {"loads": {"A": ("/p/data/A.npy", (8, "x"))}}
    assert _load_difference([same, same], {"A": Decl}, Driver) is None
    assert _load_difference([same, {"loads": {"A": ("/q/data/A.npy", (8, "x"))}}], {"A": Decl}, Driver) == (
        'rank 1 reads load "data/A.npy" of matrix A (t.tile:3) from /q/data/A.npy, rank 0 from /p/data/A.npy: every '
        "rank must read the same file: run one driver, at one path on every node, where its program's folder is as "
        "compiled")
    assert _load_difference([same, {"loads": {"A": ("/p/data/A.npy", (8, "y"))}}], {"A": Decl}, Driver) == (
        'rank 1 reads load "data/A.npy" of matrix A (t.tile:3), /p/data/A.npy, other than rank 0 does (another '
        "file of that name): every rank must read the same file (on a node's own disk, an identical copy)")


@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec")
@pytest.mark.timeout(200)
def test_ranks_finding_a_loaded_file_in_two_copies_of_the_program_are_not_mixed_into_the_job(tmp_path):
    """Tester v82f: two ranks, each beside a copy of the program with its own A.npy, factored a blend of the
    two files, and the check passed."""
    for folder, seed in (("a", 1), ("b", 2)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "t.tile").write_text(
            (ROOT / "programs/cholesky.tile").read_text().replace("random spd", 'load "A.npy"'))
        a = np.random.default_rng(seed).random((64, 64))
        np.save(tmp_path / folder / "A.npy", a @ a.T + 64 * np.eye(64))
        assert subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "compile", "t.tile", "-o", "d.py"],
                              cwd=tmp_path / folder, capture_output=True, timeout=60).returncode == 0
    rank_1 = tmp_path / "rank1.sh"  # rank 1 runs b's copy of the driver
    rank_1.write_text('#!/bin/bash\nif [ "$PMI_RANK" = 1 ]; then set -- "$1" ../b/d.py "${@:3}"; fi\nexec "$@"\n')
    rank_1.chmod(0o755)
    out = subprocess.run([MPIEXEC, "-n", "2", rank_1, sys.executable, "d.py", "--nb", "16", "--check"],
                         cwd=tmp_path / "a", capture_output=True, text=True, timeout=150,
                         env={**os.environ, "TILEDSL_NO_TUNE": "1"})
    assert out.returncode == 2 and out.stderr == (
        f'tiledsl: error: rank 1 reads load "A.npy" of matrix A (t.tile:6) from {tmp_path / "b" / "A.npy"}, rank 0 '
        f"from {tmp_path / 'a' / 'A.npy'}: every rank must read the same file: run one driver, at "
        f"one path on every node, where its program's folder is as compiled\n"), out.stderr


@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec")
@pytest.mark.timeout(200)
def test_a_rank_running_another_driver_or_in_another_folder_is_not_mixed_into_the_job(tmp_path):
    """A driver edited on one rank passed its check on a wrong result (its ranks generated other matrices); a
    rank started in another folder read its own A.npy for a relative --input, and the run passed on it."""
    driver = tmp_path / "chol.py"
    assert subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "compile", ROOT / "programs/cholesky.tile",
                           "-o", driver], capture_output=True, timeout=60).returncode == 0
    edited = tmp_path / "edited.py"
    edited.write_text(driver.read_text().replace("'spd'", "'diagdom'"))
    for folder, seed in (("a", 1), ("b", 2)):
        (tmp_path / folder).mkdir()
        a = np.random.default_rng(seed).random((64, 64))
        np.save(tmp_path / folder / "A.npy", a @ a.T + 64 * np.eye(64))
    rank_1 = tmp_path / "rank1.sh"  # rank 1 runs in folder b, with the driver given as $ALTERED if set
    rank_1.write_text('#!/bin/bash\nif [ "$PMI_RANK" = 1 ]; then cd ../b; [ -n "$ALTERED" ] && set -- "$1" "$ALTERED" '
                      '"${@:3}"; fi\nexec "$@"\n')
    rank_1.chmod(0o755)
    env = {**os.environ, "TILEDSL_NO_TUNE": "1"}

    def job(*args, **extra):
        return subprocess.run([MPIEXEC, "-n", "2", rank_1, sys.executable, driver, "--n", "64", "--nb", "16", *args],
                              cwd=tmp_path / "a", capture_output=True, text=True, timeout=150, env={**env, **extra})
    out = job("--input", "A=A.npy", "--check", "--output", "A=L.npy")
    assert out.returncode == 0, out.stderr
    a, lower = np.load(tmp_path / "a" / "A.npy"), np.tril(np.load(tmp_path / "a" / "L.npy"))
    assert np.linalg.norm(a - lower @ lower.T) < 1e-12 * np.linalg.norm(a)  # rank 0's A, on both ranks
    out = job(ALTERED=str(edited))
    assert out.returncode == 2 and out.stderr == (
        f"tiledsl: error: rank 1 runs another driver ({edited}) than rank 0 ({driver}): every rank of a job must run "
        f"the same compiled program (copy one file to every node)\n"), out.stderr
