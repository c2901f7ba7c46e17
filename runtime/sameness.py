"""The ranks of a job run one program on one set of inputs: checked as the job starts.

Each rank runs its own process of the driver, started by a launcher that may give them other
files than the user meant: a driver edited or recompiled on one node, other options, another
working directory (a relative ``--input`` then named another file), a stale copy of an input on
a node's local disk. Each rank reads only its own tiles, so the run mixed them and its check,
computed on each rank's own copy of the input, passed a wrong result. :func:`check_same_job`
has rank 0's input paths taken by every rank (as its output paths are) and compares, across
ranks, the driver's bytes, the options as given and a fingerprint of each input file, and of each file
the program loads (each rank finds those in the program's folder: it must find rank 0's): a
difference is one usage error naming the rank.
"""
from __future__ import annotations

import hashlib
import os
import sys

from .fitting import load_path
from .world import UsageError

#: bytes read at each of :data:`SAMPLES` places of an input file for its fingerprint
SAMPLE_BYTES = 1 << 16
SAMPLES = 17


def check_same_job(comm, driver, options) -> None:
    """Make every rank read rank 0's input files, and raise :class:`UsageError` on every rank where one
    runs another driver, with other options or sees other input files (or other files the program loads).
    A rank in rank 0's working directory keeps the paths as given, so that its messages name them as a run on
    one rank does; one elsewhere reads them joined to rank 0's directory."""
    given, where = comm.broadcast((options.inputs, os.getcwd()))
    here = os.getcwd()
    options.inputs = {name: path if here == where else os.path.join(where, path) for name, path in given.items()}
    loads = {decl.name: decl for decl in driver.PROGRAM.matrices
             if decl.init == "load" and decl.name not in options.inputs}
    found = {name: os.path.abspath(load_path(decl, driver)) for name, decl in loads.items()}
    mine = {"driver": _digest_of(getattr(driver, "__file__", None)), "path": getattr(driver, "__file__", None),
            "argv": sys.argv[1:], "inputs": {name: fingerprint(path) for name, path in options.inputs.items()},
            "loads": {name: (path, fingerprint(path)) for name, path in found.items()}}
    seen = comm.gather(mine)
    verdict = None if seen is None else _difference(seen, options.inputs) or _load_difference(seen, loads, driver)
    verdict = comm.broadcast(verdict)
    if verdict:
        raise UsageError(verdict)


def _difference(seen: list, inputs: dict) -> str | None:
    """What the first rank differing from rank 0 differs in, said; None where none does."""
    first = seen[0]
    for rank, other in enumerate(seen[1:], 1):
        if other["driver"] != first["driver"]:
            return (f"rank {rank} runs another driver ({other['path']}) than rank 0 ({first['path']}): every rank of "
                    f"a job must run the same compiled program (copy one file to every node)")
        if other["argv"] != first["argv"]:
            return (f"rank {rank} was given other options than rank 0 ({' '.join(other['argv']) or 'none'}, against "
                    f"{' '.join(first['argv']) or 'none'}): every rank of a job must be given the same")
        for name, path in inputs.items():
            if other["inputs"][name] != first["inputs"][name]:
                what = ("missing there" if other["inputs"][name] is None else "missing on rank 0"
                        if first["inputs"][name] is None else "another file of that name")
                return (f"rank {rank} sees --input {name} {path} other than rank 0 does ({what}): every rank must "
                        f"read the same file (on a node's own disk, an identical copy)")
    return None


def _load_difference(seen: list, loads: dict, driver) -> str | None:
    """What the first rank whose ``load`` files differ from rank 0's differs in, said; None where none does.
    Each rank finds a relative ``load`` in its program's folder: started elsewhere, or beside another copy of
    the driver, it may find another file."""
    first, source = seen[0]["loads"], os.path.basename(driver.PROGRAM.source)
    for rank, other in enumerate(seen[1:], 1):
        for name, decl in loads.items():
            (path, print_), (first_path, first_print) = other["loads"][name], first[name]
            said = f'rank {rank} reads load "{decl.load}" of matrix {name} ({source}:{decl.line})'
            if path != first_path:
                return (f"{said} from {path}, rank 0 from {first_path}: every rank must read the same file: "
                        f"run one driver, at one path on every node, where its program's folder is as compiled")
            if print_ != first_print:
                what = ("missing there" if print_ is None else "missing on rank 0" if first_print is None
                        else "another file of that name")
                return (f"{said}, {path}, other than rank 0 does ({what}): every rank must read the same file "
                        f"(on a node's own disk, an identical copy)")
    return None


def fingerprint(path: str) -> tuple | None:
    """A file's size and the digest of :data:`SAMPLES` samples spread over it (all of a small file): it
    tells a stale or regenerated copy from the file, reading little of a large one; None where it is
    unreadable (the run says why itself)."""
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            digest = hashlib.sha256()
            step = max(SAMPLE_BYTES, (size - SAMPLE_BYTES) // (SAMPLES - 1)) if size > SAMPLE_BYTES else size or 1
            for offset in range(0, max(size, 1), step):
                file.seek(min(offset, max(size - SAMPLE_BYTES, 0)))
                digest.update(file.read(SAMPLE_BYTES))
    except OSError:
        return None
    return size, digest.hexdigest()


def _digest_of(path: str | None) -> str | None:
    try:
        with open(path, "rb") as file:
            return hashlib.sha256(file.read()).hexdigest()
    except (OSError, TypeError):
        return None
