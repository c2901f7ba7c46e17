"""``.npy`` inputs and outputs: round trips per tile and clear errors for bad files."""
import numpy as np
import pytest

from tiledsl.runtime.npyio import (
    InputFileError, OutputFileError, create_output, open_input, read_block, write_block)


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, ">f8"])
def test_input_read_per_tile(tmp_path, order, dtype):
    data = np.asarray(np.arange(35.0).reshape(5, 7), dtype=dtype, order=order)
    path = tmp_path / "a.npy"
    np.save(path, data)
    mapped = open_input(path, (5, 7))
    tile = read_block(mapped, 1, 4, 2, 7)
    assert tile.dtype == np.float64 and tile.flags.f_contiguous and tile.flags.writeable
    assert np.array_equal(tile, data[1:4, 2:7])
    tile[0, 0] = -1  # a private copy: the mapped file is untouched
    assert mapped[1, 2] == data[1, 2]


def test_input_is_read_only(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((2, 2)))
    mapped = open_input(str(tmp_path / "a.npy"), (2, 2))
    with pytest.raises(ValueError):
        mapped[0, 0] = 1.0


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
    assert np.array_equal(open_input(path, (6, 4)), full)


def test_missing_file(tmp_path):
    with pytest.raises(InputFileError, match=r"'.*nothere\.npy' does not exist"):
        open_input(tmp_path / "nothere.npy", (2, 2))


def test_not_a_npy_file(tmp_path):
    path = tmp_path / "a.npy"
    path.write_text("1 2\n3 4\n")
    with pytest.raises(InputFileError, match="is not a .npy file"):
        open_input(path, (2, 2))


def test_directory_is_not_readable(tmp_path):
    with pytest.raises(InputFileError, match="cannot read input file"):
        open_input(tmp_path, (2, 2))


@pytest.mark.parametrize("dtype", ["int64", "complex128", "float16", "bool"])
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
    with pytest.raises(InputFileError, match="cannot map input file"):
        open_input(path, (100, 100))


def test_input_errors_are_value_errors():
    assert issubclass(InputFileError, ValueError) and issubclass(OutputFileError, ValueError)


def test_output_in_missing_directory(tmp_path):
    with pytest.raises(OutputFileError, match="cannot create output file"):
        create_output(tmp_path / "no" / "out.npy", (2, 2))
