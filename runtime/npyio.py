"""Matrices in ``.npy`` files (``run --input NAME=FILE.npy`` / ``--output NAME=FILE.npy``).

Files are read or written one tile at a time, so a matrix is never held in
memory twice: a rank touches only the tiles it owns. Inputs are read with
explicit reads (:class:`InputFile`), which turn a file cut short or changed
during the run into an error naming it; they may be float64, float32, float16 or
integers (converted per tile; 64-bit integers scanned before the run for values float64
does not hold), in C or Fortran order, of either byte order. Outputs are
memory-mapped, float64 in Fortran order, matching the column-major tiles of the
kernels.
"""
from __future__ import annotations

import contextlib
import errno
import math
import os
import stat
import tokenize

import numpy as np

_MAGIC = b"\x93NUMPY"  # how every .npy file begins

# Real floating point of either precision, any byte order.
_ACCEPTED_ITEMSIZES = (2, 4, 8)  # float16, float32 and float64: each value is exactly a float64 (tester a2)
#: the integers float64 holds exactly, all of them: an input file's integers up to this are taken, as run()'s
EXACT_INTEGERS = 2 ** 53


class InputFileError(ValueError):
    """An input ``.npy`` file is missing, unreadable, or of the wrong dtype or shape."""


class InputShapeError(InputFileError):
    """An input ``.npy`` file of another shape than its matrix (``shape``: the file's)."""

    def __init__(self, message: str, shape: tuple):
        super().__init__(message)
        self.shape = shape


class OutputFileError(ValueError):
    """An output ``.npy`` file cannot be created."""


class InputFile:
    """A ``.npy`` input read one block at a time by explicit reads at offsets computed from its
    header (no long-lived memory map: a file cut short under a map kills the reader with SIGBUS).

    Each read checks that the file is still the one opened (same inode, size and modification
    time), so a file removed, truncated or rewritten during the run is a clear error naming it.
    """

    def __init__(self, path: str, shape: tuple, dtype: np.dtype, fortran: bool, offset: int):
        self.path, self.shape, self.dtype, self.fortran, self.offset = path, shape, dtype, fortran, offset
        self.identity = None

    def read(self, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
        """A new Fortran float64 copy of rows ``r0:r1`` and columns ``c0:c1``."""
        return np.array(self._block(r0, r1, c0, c1), dtype=np.float64, order="F")

    def _block(self, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
        """Rows ``r0:r1`` and columns ``c0:c1`` as the file holds them (its dtype)."""
        # the file's contiguous lines: columns in Fortran order, rows in C order
        (first, last), (start, stop) = ((c0, c1), (r0, r1)) if self.fortran else ((r0, r1), (c0, c1))
        length = self.shape[0] if self.fortran else self.shape[1]
        lines = np.empty((last - first, stop - start), dtype=self.dtype)
        with self._opened() as handle:
            whole = start == 0 and stop == length  # the lines are one contiguous run of the file
            for k in range(1 if whole else last - first):
                buffer = lines if whole else lines[k]
                where = self.offset + ((first + k) * length + start) * self.dtype.itemsize
                if os.preadv(handle.fileno(), [buffer], where) != buffer.nbytes:
                    raise InputFileError(f"input file {self.path!r} is shorter than its header says "
                                         f"(cut short during the run?)")
        return lines.T if self.fortran else lines

    def check_exact(self) -> None:
        """Refuse (InputFileError) a 64-bit integer that float64 does not hold exactly (past 2**53, most), as
        run() refuses one in an array: before the run, by whole lines of the file (its tiles are read later, each by
        the rank that owns it, which would fail the run where the input is at fault)."""
        if self.dtype.kind not in "iu" or self.dtype.itemsize != 8:
            return
        m, n = self.shape
        per = max(1, (1 << 20) // max(1, m if self.fortran else n))  # lines of about 8 MiB at a time
        for first in range(0, n if self.fortran else m, per):
            last = min(first + per, n if self.fortran else m)
            r0, r1, c0, c1 = (0, m, first, last) if self.fortran else (first, last, 0, n)
            block = self._block(r0, r1, c0, c1)
            past = block > EXACT_INTEGERS
            if self.dtype.kind == "i":
                past |= block < -EXACT_INTEGERS
            if not past.any():
                continue
            # past 2**53 only some integers are float64s (2**60 is): those, as run() takes them in an array
            with np.errstate(invalid="ignore", over="ignore"):
                inexact = past & (block.astype(np.float64).astype(self.dtype) != block)
            if inexact.any():
                i, j = np.argwhere(inexact)[0]
                raise InputFileError(f"input file {self.path!r} holds {block[i, j]} at ({r0 + i}, {c0 + j}), an "
                                     f"integer float64 does not hold exactly (nearest {float(block[i, j])!r}; past "
                                     f"2**53 most integers are not float64s){_conversion(self.path, self.dtype)}")

    def _opened(self):
        """The file, open, checked to be the one first opened."""
        try:
            handle = _open_regular(self.path)
        except FileNotFoundError:
            raise InputFileError(f"input file {self.path!r} disappeared during the run") from None
        except OSError as exc:
            raise InputFileError(f"cannot read input file {self.path!r}: {exc.strerror or exc}") from None
        status = os.fstat(handle.fileno())
        identity = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
        if self.identity is None:
            self.identity = identity
        elif identity != self.identity:
            handle.close()
            raise InputFileError(f"input file {self.path!r} changed during the run (rewritten, replaced "
                                 f"or cut short): its tiles may not be the matrix the run started with")
        return handle


def _open_regular(path: str):
    """``path`` open for reading, refused (InputFileError) unless it is a regular file: reading a
    pipe (``mkfifo``) waits for ever for a writer, and a device never ends. Opened without blocking,
    so that a pipe is refused rather than waited for, then read as any file."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        what = "is a directory" if stat.S_ISDIR(mode) else "is not a regular file (a device, a pipe or a socket)"
        raise InputFileError(f"input file {path!r} {what}: name a .npy file")
    os.set_blocking(descriptor, True)
    return open(descriptor, "rb")


def _read_header(path: str) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """Shape, Fortran order, dtype and data offset from the header of the ``.npy`` file at ``path``."""
    try:
        with _open_regular(path) as f:
            version = np.lib.format.read_magic(f)
            if version not in ((1, 0), (2, 0), (3, 0)):
                raise ValueError(f"its format version, {version[0]}.{version[1]}, is none numpy writes")
            read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                    else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = read(f)
            if any(extent < 0 for extent in shape):
                raise ValueError(f"its header gives the shape {shape}")
            return shape, fortran, dtype, f.tell()
    except FileNotFoundError:
        raise InputFileError(f"input file {path!r} does not exist") from None
    except InputFileError:  # not a regular file: said as such, not as a .npy file that is not one
        raise
    except OSError as exc:
        raise InputFileError(f"cannot read input file {path!r}: {exc.strerror or exc}") from None
    except (ValueError, SyntaxError, tokenize.TokenError) as exc:  # numpy's header parser raises all three
        if _cut_in_header(path, exc):
            raise InputFileError(f"input file {path!r} is cut short inside its header (a .npy file of "
                                 f"{os.path.getsize(path)} bytes: saved again, or copied whole?)") from None
        raise InputFileError(f"input file {path!r} is not a .npy file ({_what_it_is(path) or _reason(exc)})") from None


def _cut_in_header(path: str, exc: Exception) -> bool:
    """Whether the file at ``path`` begins as a ``.npy`` file does and ends before its header does
    (numpy: "EOF: reading array header, expected 118 bytes got 50")."""
    with contextlib.suppress(OSError), open(path, "rb") as f:
        return f.read(len(_MAGIC)) == _MAGIC and str(exc).startswith("EOF")
    return False


def _reason(exc: Exception) -> str:
    """Why numpy could not read a header, in one line (its messages may quote the header)."""
    if isinstance(exc, (SyntaxError, tokenize.TokenError)):
        return "its header is not a Python dictionary"
    if str(exc).startswith("malformed node or string"):  # ast.literal_eval's, which quotes an object's repr
        return "its header holds an expression (such as 10**2) where numpy writes plain values"
    if str(exc).startswith("the magic string is not correct"):  # numpy's, which quotes the bytes found
        return "it does not begin as a .npy file does: write the matrix with np.save"
    return " ".join(str(exc).split())


def _what_it_is(path: str) -> str | None:
    """What a file that is not a ``.npy`` seems to be, where a user may have saved that instead."""
    with contextlib.suppress(OSError), open(path, "rb") as f:
        start = f.read(4)
        if start == b"PK\x03\x04":
            return "it is a zip archive, as np.savez writes: save each matrix alone with np.save"
        if not start:
            return "it is empty, 0 bytes: a file whose writing never began or was cut short"
    return None


def shape_of(path: str | os.PathLike) -> tuple[int, ...]:
    """The shape of the ``.npy`` file at ``path``, from its header, which its length must bear out
    (a file cut short is said to be, not to be of the wrong shape)."""
    path = os.fspath(path)
    shape, _, dtype, offset = _read_header(path)
    if not dtype.hasobject:
        _check_length(path, shape, dtype, offset)
    return tuple(shape)


def _check_length(path: str, shape: tuple, dtype: np.dtype, offset: int) -> None:
    """An :class:`InputFileError` if the file at ``path`` holds fewer bytes than its header says."""
    with contextlib.suppress(OSError):
        if os.path.getsize(path) < offset + math.prod(shape) * dtype.itemsize:
            raise InputFileError(f"input file {path!r} is shorter than its header says (cut short?)")


def not_a_matrix(path: str | os.PathLike) -> str | None:
    """What the ``.npy`` file at ``path`` holds when that is not a matrix (a 2-D array of numbers,
    which an output may replace), from its header alone; None for a matrix."""
    try:
        shape, _, dtype, _ = _read_header(os.fspath(path))
    except InputFileError:
        return "a file numpy cannot read (cut short, or not a .npy file)"
    if dtype.kind not in "iufc":
        return f"an array of {dtype} values"
    if len(shape) != 2:
        return f"an array of {len(shape)} dimension(s)"
    return None


def open_input(path: str | os.PathLike, expected_shape: tuple[int, int]) -> InputFile:
    """The ``.npy`` file at ``path``, ready to be read by blocks, after checking dtype, shape and size.

    Raises :class:`InputFileError` naming the file and what is wrong with it.
    """
    path = os.fspath(path)
    shape, fortran, dtype, offset = _read_header(path)
    if not (dtype.kind == "f" and dtype.itemsize in _ACCEPTED_ITEMSIZES or dtype.kind in "iu"):
        raise InputFileError(f"input file {path!r} has dtype {dtype}; expected float64 (also taken: 16- and 32-bit "
                             f"floats and any integers float64 holds exactly)"
                             f"{_conversion(path, dtype)}")
    _check_length(path, shape, dtype, offset)
    expected = tuple(int(x) for x in expected_shape)
    if tuple(shape) != expected:
        raise InputShapeError(f"input file {path!r} has shape {tuple(shape)} "
                              f"but the matrix needs shape {expected}", tuple(shape))
    source = InputFile(path, expected, dtype, fortran, offset)
    with source._opened():  # records what the file is now
        pass
    if source.identity[2] < offset + expected[0] * expected[1] * dtype.itemsize:  # shortened since
        raise InputFileError(f"input file {path!r} is shorter than its header says (cut short?)")
    source.check_exact()
    return source


def _conversion(path: str, dtype: np.dtype) -> str:
    """How to save the file at ``path``, of ``dtype``, as one tiledsl reads: into a new file beside
    it, as the conversion may lose what the file holds (float64 holds integers to 2**53 exactly)."""
    stem, _ = os.path.splitext(path)
    if dtype.kind == "O":  # numbers as Python objects, as run() takes them; not read here: loading unpickles
        return (f": it holds Python objects, which reading would unpickle (and a pickle may run code); if they "
                f"are numbers, save them as float64 in a new file, numpy.save({stem + '_float64.npy'!r}, "
                f"numpy.load({path!r}, allow_pickle=True).astype(numpy.float64))")
    if dtype.kind not in "iubfc":
        return ""
    saved = f"numpy.save({stem + '_float64.npy'!r}, numpy.load({path!r})"
    if dtype.kind == "c":
        return f": save its real parts in a new file (tiledsl computes in real arithmetic), {saved}.real)"
    rounds = "" if dtype.kind == "b" or dtype.kind in "iuf" and dtype.itemsize < 8 else (
        ", which rounds the values float64 does not hold exactly")
    return f": save it as float64 in a new file, {saved}.astype(numpy.float64)){rounds}"


def create_output(path: str | os.PathLike, shape: tuple[int, int]) -> np.memmap:
    """Create (or overwrite) a float64 Fortran-ordered ``.npy`` file and map it writable, its
    blocks reserved on the disk first: a mapped write into a sparse file on a full disk is a
    SIGBUS that kills the process, where a reservation is an error said in one line."""
    path = os.fspath(path)
    try:
        mapped = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64,
                                           shape=tuple(shape), fortran_order=True)
        _reserve(path)
        return mapped
    except OSError as exc:
        reason = exc.strerror or exc
        if exc.errno == errno.ENOMEM:  # the map takes the file's size of address space (ulimit -v)
            from .errors import shortage
            from .resources import bytes_text

            reason = shortage(MemoryError(f"mapping the file takes {bytes_text(8 * math.prod(shape))} of address "
                                          f"space"))
        raise OutputFileError(f"cannot create output file {path!r}: {reason}") from None


def _reserve(path: str) -> None:
    """Allocate every block of the file at ``path`` (OSError: no room); nothing where the
    system or the file system cannot (they then fail as before, if at all)."""
    if not hasattr(os, "posix_fallocate"):
        return
    with open(path, "r+b") as opened:
        try:
            os.posix_fallocate(opened.fileno(), 0, os.fstat(opened.fileno()).st_size)
        except OSError as error:
            if error.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                return
            raise


def open_output(path: str | os.PathLike) -> np.memmap:
    """An output file that :func:`create_output` made (on any rank), mapped writable."""
    return np.load(os.fspath(path), mmap_mode="r+")


def write_block(target: np.ndarray, r0: int, c0: int, tile: np.ndarray) -> None:
    """Store ``tile`` at rows ``r0..`` and columns ``c0..`` of a mapped output."""
    target[r0:r0 + tile.shape[0], c0:c0 + tile.shape[1]] = tile
