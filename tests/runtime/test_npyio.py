"""``.npy`` inputs and outputs: round trips per tile and clear errors for bad files."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tiledsl
from tiledsl.runtime import npyio
from tiledsl.runtime.npyio import InputFileError, OutputFileError, create_output, open_input, write_block

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, ">f8", "<f4", ">f4"])
@pytest.mark.parametrize("block", [(1, 4, 2, 7), (0, 5, 0, 7), (0, 5, 3, 4), (2, 3, 0, 7), (4, 4, 1, 3)])
def test_input_read_per_tile(tmp_path, order, dtype, block):
    data = np.asarray(np.arange(35.0).reshape(5, 7) - 17.25, dtype=dtype, order=order)
    path = tmp_path / "a.npy"
    np.save(path, data)
    source = open_input(path, (5, 7))
    r0, r1, c0, c1 = block
    tile = source.read(r0, r1, c0, c1)
    assert tile.dtype == np.float64 and tile.flags.f_contiguous and tile.flags.writeable
    assert np.array_equal(tile, data[r0:r1, c0:c1].astype(np.float64))
    if tile.size:
        tile[0, 0] = -1  # a private copy: the file is untouched
        assert source.read(r0, r1, c0, c1)[0, 0] == data[r0, c0]


def test_output_round_trip(tmp_path):
    path = tmp_path / "out.npy"
    out = create_output(path, (6, 4))
    full = np.arange(24.0).reshape(6, 4)
    for r0 in (0, 3):
        for c0 in (0, 2):
            write_block(out, r0, c0, full[r0:r0 + 3, c0:c0 + 2])
    out.flush()
    del out
    back = np.load(path)
    assert back.dtype == np.float64 and np.isfortran(back)
    assert np.array_equal(back, full)
    assert np.array_equal(open_input(path, (6, 4)).read(0, 6, 0, 4), full)


def test_missing_file(tmp_path):
    with pytest.raises(InputFileError, match=r"'.*nothere\.npy' does not exist"):
        open_input(tmp_path / "nothere.npy", (2, 2))


def test_not_a_npy_file(tmp_path):
    path = tmp_path / "a.npy"
    path.write_text("1 2\n3 4\n")
    with pytest.raises(InputFileError, match="is not a .npy file"):
        open_input(path, (2, 2))
    path.write_bytes(b"")  # numpy's words were "EOF: reading magic string, expected 8 bytes got 0"
    with pytest.raises(InputFileError, match=r"is not a .npy file \(it is empty, 0 bytes: a file whose writing never "
                                             r"began or was cut short\)$"):
        open_input(path, (2, 2))


@pytest.mark.parametrize("change, reason", [
    ((b"'shape': (3, 3)", b"'shape': (3, -3)"), "its header gives the shape (3, -3)"),
    ((b"{'descr'", b"{{'descr'"), "its header is not a Python dictionary"),  # numpy: TokenError
    ((b"'fortran_order': False", b"'fortran_order': Fals)"), "its header is not a Python dictionary"),
    ((b"\x93NUMPY\x01", b"\x93NUMPY\x09"), "its format version, 9.0, is none numpy writes"),
    # ast.literal_eval's message quoted an object's repr: '<ast.BinOp object at 0x7f0d05e9c580>'
    ((b"'shape': (3, 3)", b"'shape': (3*1, 3)"), "its header holds an expression (such as 10**2) where numpy "
                                                   "writes plain values")])
def test_a_damaged_header_is_said_to_be_one(tmp_path, change, reason):
    """numpy's header reader raises SyntaxError and tokenize's TokenError too: an internal error."""
    path = tmp_path / "a.npy"
    np.save(path, np.eye(3))
    data = path.read_bytes()
    assert change[0] in data
    path.write_bytes(data.replace(*change))
    message = f"input file '{path}' is not a .npy file ({reason})"
    for read in (npyio.shape_of, lambda path: open_input(path, (3, 3))):
        with pytest.raises(InputFileError) as error:
            read(path)
        assert str(error.value) == message


def test_directory_is_not_readable(tmp_path):
    with pytest.raises(InputFileError, match=r"input file '.*' is a directory: name a \.npy file"):
        open_input(tmp_path, (2, 2))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("read", [lambda path: open_input(path, (2, 2)), npyio.shape_of])
def test_a_pipe_or_a_device_is_refused_not_waited_for(tmp_path, read):
    """Reading a pipe (mkfifo) without a writer waited for ever, with or without --n."""
    fifo = tmp_path / "ff.npy"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero"):
        with pytest.raises(InputFileError, match=r"is not a regular file \(a device, a pipe or a socket\)"):
            read(path)


@pytest.mark.timeout(30)
def test_an_input_replaced_by_a_pipe_during_the_run_is_refused(tmp_path):
    path = tmp_path / "a.npy"
    np.save(path, np.ones((2, 2)))
    source = open_input(path, (2, 2))
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(InputFileError, match="is not a regular file"):
        source.read(0, 2, 0, 2)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("size", [["--n", "100"], []])
def test_the_command_line_refuses_a_pipe_as_input(tmp_path, size):
    os.mkfifo(tmp_path / "ff.npy")
    run = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", str(ROOT / "programs/cholesky.tile"),
                          "--input", "A=ff.npy", *size], cwd=tmp_path, capture_output=True, text=True, timeout=100)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert "input file 'ff.npy' is not a regular file (a device, a pipe or a socket): name a .npy file" in run.stderr


@pytest.mark.parametrize("dtype", ["complex128", "bool"])
def test_wrong_dtype_is_named(tmp_path, dtype):
    path = tmp_path / "a.npy"
    np.save(path, np.zeros((2, 2), dtype=dtype))
    with pytest.raises(InputFileError, match=f"has dtype {dtype}; expected float64"):
        open_input(path, (2, 2))


def test_wrong_shape_names_both_shapes(tmp_path):
    path = tmp_path / "a.npy"
    np.save(path, np.zeros((3, 4)))
    with pytest.raises(InputFileError,
                       match=r"has shape \(3, 4\) but the matrix needs shape \(4, 4\)"):
        open_input(path, (4, 4))


def test_truncated_file(tmp_path):
    path = tmp_path / "a.npy"
    np.save(path, np.zeros((100, 100)))
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(InputFileError, match="is shorter than its header says"):
        open_input(path, (100, 100))
    # said so before its shape is judged, and where the size is read from it: it was 'the input
    # files' shapes disagree' where the header's shape was another than the program's
    with pytest.raises(InputFileError, match="is shorter than its header says"):
        open_input(path, (100, 90))
    with pytest.raises(InputFileError, match="is shorter than its header says"):
        npyio.shape_of(path)


def test_a_file_cut_short_inside_its_header_is_said_to_be(tmp_path):
    """It was 'not a .npy file (EOF: reading array header, expected 118 bytes got 50)'."""
    path = tmp_path / "a.npy"
    np.save(path, np.zeros((3, 3)))
    path.write_bytes(path.read_bytes()[:60])
    message = (f"input file '{path}' is cut short inside its header (a .npy file of 60 bytes: saved again, or copied "
               f"whole?)")
    for read in (npyio.shape_of, lambda path: open_input(path, (3, 3))):
        with pytest.raises(InputFileError) as error:
            read(path)
        assert str(error.value) == message


@pytest.mark.parametrize("order", ["C", "F"])
def test_a_file_cut_short_after_it_was_opened_is_an_error_naming_it(tmp_path, order):
    """Issue 17.6: a mapped input cut short killed the rank with SIGBUS; now a clear error."""
    path = tmp_path / "a.npy"
    np.save(path, np.asarray(np.ones((100, 100)), order=order))
    source = open_input(path, (100, 100))
    with open(path, "r+b") as f:
        f.truncate(2000)
    with pytest.raises(InputFileError, match=r"'.*a\.npy' changed during the run"):
        source.read(50, 100, 50, 100)


def test_a_file_rewritten_or_removed_after_it_was_opened_is_an_error(tmp_path):
    path = tmp_path / "a.npy"
    np.save(path, np.ones((10, 10)))
    source = open_input(path, (10, 10))
    assert source.read(0, 10, 0, 10).sum() == 100
    np.save(tmp_path / "b.npy", np.zeros((10, 10)))
    os.replace(tmp_path / "b.npy", path)
    with pytest.raises(InputFileError, match="changed during the run"):
        source.read(0, 10, 0, 10)
    path.unlink()
    with pytest.raises(InputFileError, match="disappeared during the run"):
        source.read(0, 10, 0, 10)


def test_input_errors_are_value_errors():
    assert issubclass(InputFileError, ValueError) and issubclass(OutputFileError, ValueError)


def test_output_in_missing_directory(tmp_path):
    with pytest.raises(OutputFileError, match="cannot create output file"):
        create_output(tmp_path / "no" / "out.npy", (2, 2))


def test_an_output_the_disk_has_no_room_for_is_refused_when_created_not_by_a_crash(tmp_path, monkeypatch):
    """The file's blocks are reserved first: a mapped write into a sparse file on a full disk
    would kill the process with SIGBUS."""
    import errno as errors

    def full(fd, offset, length):
        raise OSError(errors.ENOSPC, "No space left on device")
    monkeypatch.setattr(npyio.os, "posix_fallocate", full, raising=False)
    with pytest.raises(npyio.OutputFileError, match="cannot create output file .*: No space left on device"):
        npyio.create_output(tmp_path / "o.npy", (100, 100))


def test_an_output_the_address_space_limit_cannot_map_is_said_as_out_of_memory(tmp_path, monkeypatch):
    """Under `ulimit -v` an output was refused as a bare 'Cannot allocate memory', no limit named."""
    import errno as errors

    def unmappable(*args, **kwargs):
        raise OSError(errors.ENOMEM, "Cannot allocate memory")
    monkeypatch.setattr(npyio.np.lib.format, "open_memmap", unmappable)
    with pytest.raises(npyio.OutputFileError, match=r"cannot create output file .*: out of memory: mapping the file "
                                                     r"takes 78.12 KiB of address space; "):
        npyio.create_output(tmp_path / "o.npy", (100, 100))


def test_a_file_system_that_cannot_reserve_blocks_still_gets_its_output(tmp_path, monkeypatch):
    import errno as errors

    def unsupported(fd, offset, length):
        raise OSError(errors.EOPNOTSUPP, "Operation not supported")
    monkeypatch.setattr(npyio.os, "posix_fallocate", unsupported, raising=False)
    mapped = npyio.create_output(tmp_path / "o.npy", (3, 2))
    mapped[:] = 1.0
    mapped.flush()
    assert np.load(tmp_path / "o.npy").sum() == 6.0


CONVERTED = "numpy.save({q!r}, numpy.load({p!r})"


@pytest.mark.parametrize("dtype, advice", [
    (np.longdouble, "save it as float64 in a new file, " + CONVERTED + ".astype(numpy.float64)), which rounds the "
                    "values float64 does not hold exactly"),
    (bool, "save it as float64 in a new file, " + CONVERTED + ".astype(numpy.float64))"),
    (np.complex128, "save its real parts in a new file (tiledsl computes in real arithmetic), " + CONVERTED + ".real)"),
])
def test_a_file_of_another_dtype_is_refused_with_the_conversion_to_make(tmp_path, dtype, advice):
    """The refusal named the dtypes expected, not how to get one; the advice, followed, gives a file
    that opens. It wrote over the user's file, rounding integers past 2**53 without a word."""
    path, converted = str(tmp_path / "a.npy"), str(tmp_path / "a_float64.npy")
    np.save(path, np.eye(3, dtype=dtype))
    with pytest.raises(npyio.InputFileError) as refused:
        npyio.open_input(path, (3, 3))
    assert str(refused.value).endswith("; expected float64 (also taken: 16- and 32-bit floats and any integers "
                                       "float64 holds exactly): " + advice.format(p=path, q=converted))
    statement = str(refused.value).split(", ", 1)[1].removesuffix(", which rounds the values float64 does not hold "
                                                                  "exactly")
    exec(statement.replace("numpy", "np"))
    npyio.open_input(converted, (3, 3))
    assert np.load(path).dtype == dtype  # the user's file as it was


def test_a_load_file_that_is_no_npy_names_its_matrix_and_line(tmp_path):
    """numpy's words ("the magic string is not correct; expected b'\\x93NUMPY', got b'not nu'") named
    neither the matrix nor the .tile line that loads the file."""
    (tmp_path / "a.npy").write_text("not numpy at all\n")
    (tmp_path / "ld.tile").write_text('program p {\n  matrix A[n, n] = load "a.npy"\n'
                                      "  for k in 0 .. A.nt { potrf(A[k, k]) }\n}\n")
    with pytest.raises(tiledsl.TiledslError) as error:
        tiledsl.load(tmp_path / "ld.tile").run(n=100)
    assert str(error.value) == (f"input file {str(tmp_path / 'a.npy')!r} is not a .npy file (it does not begin as a "
                                f".npy file does: write the matrix with np.save) (load 'a.npy' of matrix A, ld.tile:2)")


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint16, np.int64, np.uint64, np.float16])
def test_a_file_of_integers_is_taken_as_run_takes_an_array_of_them(tmp_path, dtype):
    """Tester y: `--input A=i.npy` of int64 was refused where run(A=array) takes the same integers (tester a2:
    and float16, each value exactly a float64); those float64 does not hold exactly (past 2**53, most) are
    refused as run() refuses them, where they are."""
    path = str(tmp_path / "i.npy")
    values = np.arange(12, dtype=dtype).reshape(3, 4)
    np.save(path, values)
    assert np.array_equal(npyio.open_input(path, (3, 4)).read(0, 3, 0, 4), values.astype(np.float64))
    if np.dtype(dtype).itemsize == 8:  # refused on opening (tester y60: the rank reading its tile failed the run)
        for order in "CF":
            values[2, 1] = 2 ** 53 + 1
            np.save(path, np.array(values, order=order))
            with pytest.raises(npyio.InputFileError, match=r"holds 9007199254740993 at \(2, 1\), an integer float64 "
                                                           r"does not hold exactly \(nearest 9007199254740992\.0; "
                                                           r"past 2\*\*53 most integers are not float64s\): save it "
                                                           r"as float64"):
                npyio.open_input(path, (3, 4))
            values[2, 1] = 2 ** 60  # (tester l64) a float64, as run() takes it in an array
            np.save(path, np.array(values, order=order))
            assert npyio.open_input(path, (3, 4)).read(2, 3, 1, 2)[0, 0] == 2.0 ** 60
        if dtype == np.uint64:  # the largest, whose nearest float64 is 2**64: no uint64
            values[2, 1] = 2 ** 64 - 1
            np.save(path, values)
            with pytest.raises(npyio.InputFileError, match=r"holds 18446744073709551615 at \(2, 1\)"):
                npyio.open_input(path, (3, 4))


@pytest.mark.parametrize("order", "CF")
def test_an_integer_past_2_53_is_found_in_any_block_of_a_large_file(tmp_path, order):
    """The file is scanned by blocks of lines before the run: the value is found in a later block, where it is."""
    path = str(tmp_path / "i.npy")
    values = np.zeros((300, 5000), dtype=np.int64, order=order)
    values[299, 4998] = -(2 ** 53) - 1
    np.save(path, values)
    with pytest.raises(npyio.InputFileError, match=r"holds -9007199254740993 at \(299, 4998\)"):
        npyio.open_input(path, (300, 5000))
    values[299, 4998] = -(2 ** 53)
    np.save(path, values)
    assert npyio.open_input(path, (300, 5000)).read(299, 300, 4998, 4999)[0, 0] == -(2.0 ** 53)


def test_a_file_of_python_objects_is_refused_with_the_conversion_to_make(tmp_path):
    """Tester y60: a file of numbers as Python objects (which run() takes in an array) was refused with no
    advice; reading it would unpickle it, so it is refused, saying how to save its numbers."""
    path, converted = str(tmp_path / "a.npy"), str(tmp_path / "a_float64.npy")
    np.save(path, np.eye(3, dtype=object), allow_pickle=True)
    with pytest.raises(npyio.InputFileError) as refused:
        npyio.open_input(path, (3, 3))
    said = str(refused.value)
    assert said.endswith(f"has dtype object; expected float64 (also taken: 16- and 32-bit floats and any "
                         f"integers float64 holds exactly): "
                         f"it holds Python objects, which reading would unpickle (and a pickle may run code); if they "
                         f"are numbers, save them as float64 in a new file, numpy.save({converted!r}, "
                         f"numpy.load({path!r}, allow_pickle=True).astype(numpy.float64))"), said
    exec(said.split("a new file, ", 1)[1].replace("numpy", "np"))
    assert np.array_equal(npyio.open_input(converted, (3, 3)).read(0, 3, 0, 3), np.eye(3))
