"""Output files of the commands are written whole or not at all (tiledsl.commands.files)."""
import os

import pytest

from tiledsl.commands.files import replacing


def test_a_failed_write_leaves_the_old_file_and_no_partial_one(tmp_path):
    """`compile -o`, `graph -o` and `plot -o` onto a full disk truncated the file that was there."""
    target = tmp_path / "drv.py"
    target.write_text("old")
    with pytest.raises(OSError):
        with replacing(target) as temporary:
            temporary.write_text("half")
            raise OSError(28, "No space left on device")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["drv.py"]


def test_a_complete_write_replaces_the_file_with_its_mode_and_keeps_a_link(tmp_path):
    real = tmp_path / "real.dot"
    real.write_text("old")
    real.chmod(0o640)
    link = tmp_path / "g.dot"
    link.symlink_to(real)
    with replacing(link) as temporary:
        assert temporary.suffix == ".dot" and temporary.parent == tmp_path  # writers read the format from it
        temporary.write_text("new")
    assert link.is_symlink() and real.read_text() == "new" and real.stat().st_mode & 0o777 == 0o640
    assert sorted(os.listdir(tmp_path)) == ["g.dot", "real.dot"]
