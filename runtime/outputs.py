"""The files a run writes: output matrices (each rank its own tiles into one ``.npy``) and the
trace (every rank's events merged on rank 0, with the bounds computed from them).

Every file is checked before the run (:func:`check_output_paths`: one clear usage error
rather than a failure after it) and written beside its target under a temporary name
(:class:`Staging`); rank 0 renames it into place only once every rank wrote its part and
the run succeeded, so a failed or interrupted run leaves the previous file as it was.
"""
from __future__ import annotations

import contextlib
import glob
import json
import os
import secrets
import tempfile

import numpy as np

from . import npyio
from .matrix import TiledMatrix
from .options import Options
from .trace import area_bound, chrome_trace, communication, compute_lanes, critical_path, task_times, utilisation
from .world import UsageError, process_exists

NPY_MAGIC = np.lib.format.MAGIC_PREFIX  # what a .npy file begins with
TRACE_START = b'{"otherData": {"made_by": "tiledsl"'  # what a trace tiledsl writes begins with (chrome_trace)
PARTIAL_SUFFIX = ".tiledsl-partial"  # the temporary files of a run still writing (or killed while it did)


def remove_abandoned(targets) -> None:
    """Remove the temporary files beside ``targets`` of processes that no longer exist: a rank
    killed while the outputs were written (SIGKILL, the out-of-memory killer) left them, megabytes
    each, hidden. ``tiledsl run --np``, which outlives its ranks, calls it once its job ended."""
    for target in targets:
        folder, name = os.path.split(os.path.realpath(target))
        prefix = _partial_prefix(folder, name)
        for path in glob.glob(os.path.join(glob.escape(folder), f"{glob.escape(prefix)}*{PARTIAL_SUFFIX}")):
            pid = os.path.basename(path)[len(prefix):].partition("-")[0]  # .NAME.PID-TOKEN.tiledsl-partial
            if pid.isdigit() and not process_exists(int(pid)):
                with contextlib.suppress(OSError):
                    os.unlink(path)


def check_output_paths(options: Options, program_files=(), input_files=()) -> None:
    """A :class:`UsageError` for an ``--output`` or ``--trace`` file that cannot be written, one
    file named twice (the last written would replace the others), one of the
    ``program_files`` (its ``.tile``, kernel module, driver), or the input of another matrix
    (``input_files``: (matrix name, file, how it is given); a matrix may write back its own)."""
    files = {f"--output {name}={path}": path for name, path in options.outputs.items()}
    if options.trace is not None:
        files[f"--trace {options.trace}"] = options.trace
    own = {os.path.realpath(path): path for path in program_files}
    read: dict = {}  # file -> [(matrix, how)] of every matrix that reads it
    for name, path, given in input_files:
        read.setdefault(os.path.realpath(path), []).append((name, given))
    seen = {}
    for what, path in files.items():
        if os.path.realpath(path) in own:
            raise UsageError(f"{what}: that is {os.path.basename(own[os.path.realpath(path)])}, a file of the "
                             f"program itself, which the output would replace: name another file")
        others = [(reader, given) for reader, given in read.get(os.path.realpath(path), [])
                  if what != f"--output {reader}={path}"]
        if others:
            reader, given = others[0]
            raise UsageError(f"{what}: that is the input of {reader} ({given}), which the output would replace: "
                             f"name another file")
        check_writable(path, what)
        if what.startswith("--output"):
            check_replaceable(path, what, (NPY_MAGIC,), "a .npy file (a matrix, whoever saved it)")
            _check_matrix_file(path, what)
            _check_npy_name(path, what)  # after: a file there that is no matrix is said to be so first
        else:
            check_replaceable(path, what, (TRACE_START,), "a trace an earlier run wrote")
        same = seen.setdefault(os.path.realpath(path), what)
        if same != what:
            raise UsageError(f"{what}: the same file as {same}: give each output a file of its own")


def _check_npy_name(path: str, what: str) -> None:
    """A :class:`UsageError` for an output whose suffix names another format than ``.npy``: a ``.npz``,
    ``.txt`` or ``.csv`` holding a .npy file's bytes is none of those to what reads it (a name without
    a suffix says none, and is written as given)."""
    stem, suffix = os.path.splitext(path)
    if suffix and suffix.lower() != ".npy":
        raise UsageError(f"{what}: an output is written as a .npy file (numpy.save's format, which numpy.load "
                         f"reads), not as its {suffix} suffix says: name it {stem}.npy")


def check_replaceable(path: str, what: str, starts: tuple, kind: str, mark: bytes | None = None) -> None:
    """A :class:`UsageError` unless an output may replace what ``path`` holds: nothing, an empty
    file, or a file that opens with one of ``starts`` (by its contents: an earlier output of that
    ``kind``, whatever its name) and, with ``mark``, holds it within its first :data:`MARKED_BYTES`
    (a format others write too: a photo is a PNG); not a script, notes, data of another kind."""
    try:
        with open(path, "rb") as existing:
            found = existing.read(MARKED_BYTES if mark else max(map(len, starts)))
    except OSError:  # none there, or unreadable (check_writable said what it could)
        return
    if found and not (found.startswith(starts) and (mark is None or mark in found)):
        raise UsageError(f"{what}: {path} is there and is not {kind}: it replaces only those; name another "
                         f"file, or remove it first")


def _check_matrix_file(path: str, what: str) -> None:
    """A :class:`UsageError` for a ``.npy`` file there that holds no matrix (pickled objects, text,
    a vector): an output replaces a matrix only, whoever saved it."""
    if os.path.isfile(path) and os.path.getsize(path):
        held = npyio.not_a_matrix(path)
        if held is not None:
            raise UsageError(f"{what}: {path} is there and holds {held}, not a matrix (a 2-D array of numbers): "
                             f"an output replaces only those; name another file, or remove it first")


#: how far into a file its maker's mark is looked for (a chart's or a graph's is far less)
MARKED_BYTES = 2 ** 25


def check_writable(path: str, what: str) -> None:
    """The file is written as :meth:`Staging.temporary` does: beside what ``path`` names once its
    links are followed (a link stays a link), then renamed over it, which only a regular file
    may be (a device such as /dev/null would be replaced)."""
    if not path:
        raise UsageError(f"{what.strip()}: no file name given")
    if os.path.isdir(path):
        raise UsageError(f"{what}: is a directory")
    given = os.path.dirname(path) or "."
    if not os.path.isdir(given):  # as the system resolves it: 'nosuch/..' does not exist
        file = next((folder for folder in _folders(given) if os.path.exists(folder)), None)
        if file is not None and not os.path.isdir(file):
            raise UsageError(f"{what}: {file!r} is a file, not a directory")
        raise UsageError(f"{what}: directory {given!r} does not exist")
    real = os.path.realpath(path)
    _check_path_length(real, what)
    if os.path.exists(path) and not os.path.isfile(path):  # what the links lead to: /dev/stdout's pipe too
        shown = real if os.path.exists(real) else path
        raise UsageError(f"{what}: {shown!r} is not a regular file (a device, a pipe or a socket), "
                         f"which the written file would replace: name a file")
    folder = os.path.dirname(real)
    if not os.path.isdir(folder):
        raise UsageError(f"{what}: directory {folder!r} (where the link leads) does not exist")
    if _mounted_read_only(folder):  # no file in it is writable, whatever its mode says
        raise UsageError(f"{what}: directory {folder!r} is on a file system mounted read-only: name a file "
                         f"elsewhere")
    if os.path.isfile(real) and not os.access(real, os.W_OK):  # renaming over it would ignore its mode
        raise UsageError(f"{what}: {real!r} is read-only: make it writable to replace it, or name another file")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{what}: directory {folder!r} is not writable")
    # permissions do not tell everything (a read-only mount, /proc, root's access): try it, with a file
    # that has no name where the system allows (a signal between making and removing a named one left it)
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as error:
        raise UsageError(f"{what}: cannot create a file in {folder!r}: {error.strerror or error}") from None


def _mounted_read_only(folder: str) -> bool:
    """Whether ``folder`` is on a file system mounted read-only."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:  # not known: the probe of check_writable tells
        return False


def _check_path_length(real: str, what: str) -> None:
    """A :class:`UsageError` for a file name longer than its folder's file system takes, or a whole path
    longer than the system takes: else the run would compute everything, then fail to write."""
    folder, name = os.path.split(real)
    limit = _name_limit(folder)
    if len(os.fsencode(name)) > limit:
        raise UsageError(f"{what}: the file name is {len(os.fsencode(name))} bytes long, and the file system "
                         f"takes at most {limit}: name a shorter file")
    longest = _path_limit() - 1  # (PATH_MAX counts the final NUL)
    if len(os.fsencode(real)) > longest:  # a folder nested that deep was said not to exist
        raise UsageError(f"{what}: its whole path is {len(os.fsencode(real))} bytes long, and the system takes at "
                         f"most {longest}: name a file in a folder nearer the root")


def _path_limit() -> int:
    """PATH_MAX, the longest path in bytes the system takes (4096 where it does not say)."""
    try:
        return os.pathconf("/", "PC_PATH_MAX")
    except (OSError, ValueError):
        return 4096


def _name_limit(folder: str) -> int:
    """The longest file name, in bytes, that ``folder``'s file system takes (255 where it does not say)."""
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _partial_prefix(folder: str, name: str, after: str = "") -> str:
    """The start of a temporary file's name for target ``name``: ``.NAME.``, with NAME cut short
    where the whole temporary name (a pid, a token, :data:`PARTIAL_SUFFIX` and ``after`` follow)
    would be longer than the file system takes."""
    room = _name_limit(folder) - len(f"..{2 ** 22}-{'0' * 8}{PARTIAL_SUFFIX}{after}")
    encoded = os.fsencode(name)
    if len(encoded) > room:
        name = encoded[:room].decode("utf-8", "ignore")  # a character cut in two is dropped
    return f".{name}."


def _folders(path: str) -> list:
    """``path`` and the folders above it as written (``a/b/c``, ``a/b``, ``a``), nearest first."""
    found = []
    while path and path not in found:
        found.append(path)
        path = os.path.dirname(path)
    return found


class Staging:
    """The files of one run, written under temporary names beside their targets.

    :meth:`temporary` (rank 0) makes one; :meth:`commit` (every rank) renames them all into
    place when every rank wrote its part and the run succeeded, else removes them, but for those
    made ``whatever_the_run`` (a trace: what tells where a failed run went wrong), renamed when
    their parts were written; leaving the ``with`` block any other way (an error, a signal)
    removes them too.
    """

    def __init__(self, comm):
        self.comm = comm
        self.files: dict = {}  # temporary path -> target (rank 0)
        self.whatever_the_run: set = set()  # the temporary paths renamed into place though the run failed
        self.failures: list = []  # this rank's failures to write its part
        self.withheld: list = []  # the targets a failed run left as they were (rank 0)
        self.withheld_because = ""  # "the run failed" where it did (else writing failed, as said)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for temporary in self.files:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        self.files.clear()

    def temporary(self, target: str, whatever_the_run: bool = False) -> str:
        """A new empty file beside ``target`` (:func:`temporary_beside`), renamed to it by a
        successful :meth:`commit` (or, ``whatever_the_run``, by one whose run failed)."""
        path = temporary_beside(target)
        self.files[path] = os.path.realpath(target)
        if whatever_the_run:
            self.whatever_the_run.add(path)
        return path

    def attempt(self, write, what: str):
        """``write()``, a failure of which is kept (and the run failed) instead of raised."""
        try:
            return write()
        except (OSError, npyio.OutputFileError) as error:
            self.failures.append(f"cannot write {what}: {getattr(error, 'strerror', None) or error}")
            return None

    def commit(self, succeeded: bool, when_decided=None) -> list:
        """Rename the files into place if ``succeeded`` here and every rank wrote its part,
        else remove them; the failures to report (this rank's, and on rank 0 a count of others').
        ``when_decided()`` is called as the ranks come to agree which, before any file is renamed: before
        the agreement, for a signal that lands as it ends is handled after it, when another rank may
        have renamed the files already."""
        local = np.array([len(self.failures), not succeeded], dtype=np.float64)
        if when_decided is not None:
            when_decided()
        total = self.comm.allreduce_sum(local) if self.comm is not None else local
        if not total[0]:  # every part written: all files in place, or those kept whatever the run
            for temporary, target in list(self.files.items()):
                if total[1] and temporary not in self.whatever_the_run:
                    continue
                try:
                    os.replace(temporary, target)
                except OSError as error:  # an immutable file, a directory made meanwhile
                    self.failures.append(f"cannot write {target}: {error.strerror or error}")
                    continue
                del self.files[temporary]
        self.withheld = [target for temporary, target in self.files.items()
                         if total[0] or temporary not in self.whatever_the_run]
        self.withheld_because = "the run failed" if total[1] and self.withheld else ""  # else failures say why
        elsewhere = int(total[0]) - len(self.failures)
        return self.failures + ([f"{elsewhere} file part(s) could not be written on other ranks"]
                                if elsewhere >= 1 else [])


def temporary_beside(target, keep_suffix: bool = False) -> str:
    """A new empty file beside ``target`` (what a link leads to: the link is kept), with the mode
    ``target`` has (else as the umask says), for a writer to fill and rename over it; ending in
    ``target``'s suffix where ``keep_suffix`` (for writers that read the format from it)."""
    target = os.path.realpath(target)
    folder, name = os.path.split(target)
    after = os.path.splitext(name)[1] if keep_suffix else ""
    path = os.path.join(folder, f"{_partial_prefix(folder, name, after)}{os.getpid()}-{secrets.token_hex(4)}"
                                f"{PARTIAL_SUFFIX}{after}")
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    if os.path.isfile(target):  # it replaces a file: with that file's mode, as writing into it would
        os.chmod(path, os.stat(target).st_mode & 0o7777)
    return path


def write_trace(driver, params, matrices, events, result, options: Options, comm, staging: Staging) -> dict:
    """Merge every rank's events on rank 0, write the trace file, compute the bounds."""
    ranks = comm.gather(events) if comm is not None else [events]
    if ranks is None:  # not rank 0
        return {}
    about = {"program": driver.PROGRAM.name, "kernels": driver.PROGRAM.kernels,
             **{k: v for k, v in params.as_dict().items() if v is not None},
             "ranks": result.ranks, "workers": result.workers, "gpus": result.gpus,
             "seconds": result.seconds,  # the run's time: its last rank ends after its last task does
             "ok": result.ok}  # as run --json's: false where the run failed (its trace is written all the same)

    lanes = compute_lanes(result.workers, options.gpus)

    def write():  # (written though the run failed: a NaN left, a check failed; marked so)
        with open(staging.temporary(options.trace, whatever_the_run=True), "w") as target:
            json.dump(chrome_trace(ranks, about, lanes), target)
    staging.attempt(write, f"the trace {options.trace!r}")
    times = task_times(ranks)
    capacity = {"cpu": result.workers * result.ranks, "gpu": options.gpus * result.ranks}
    path = critical_path(driver, matrices, params, times)
    area = area_bound(times, capacity)
    summary = {"critical_path": path, "area_bound": area,  # no efficiency of a run in which no task ran
               "efficiency": max(path, area) / result.seconds if result.seconds > 0 and times else None}
    summary.update(utilisation(ranks, result.seconds, lanes))
    summary.update(communication(ranks, result.seconds))
    return summary


def write_output(matrix: TiledMatrix, path: str, comm, staging: Staging) -> None:
    """Every rank writes its own tiles into one temporary ``.npy`` file that rank 0 created."""
    what = f"output {matrix.name} to {path!r}"
    temporary = None
    if matrix.rank == 0:
        temporary = staging.attempt(lambda: staging.temporary(path), what)
        if temporary is not None and staging.attempt(
                lambda: npyio.create_output(temporary, (matrix.m, matrix.n)), what) is None:
            temporary = None
    if comm is not None:
        temporary = comm.broadcast(temporary)
    if temporary is None:
        return  # rank 0 could not create it, and said so
    staging.attempt(lambda: _write_tiles(matrix, temporary), what)


def _write_tiles(matrix: TiledMatrix, path: str) -> None:
    target = npyio.open_output(path)
    g = matrix.geometry
    for tile in matrix.local_tiles():
        npyio.write_block(target, g.row_range(tile.i)[0], g.col_range(tile.j)[0], matrix.block(tile))
    target.flush()
