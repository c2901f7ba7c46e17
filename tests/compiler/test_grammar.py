"""The grammar's Lark parser: its tables saved in the user's cache, read back by the next process, and
built anew where the cache is damaged or cannot be made."""
from pathlib import Path

import pytest

from tiledsl.compiler import grammar


def test_the_parser_tables_are_kept_in_the_users_cache_and_a_bad_copy_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    text = "program p {\n  matrix A[n, n] = zeros\n  potrf(A[0, 0])\n}\n"
    expected = grammar.lark_parser().parse(text)
    grammar.lark_parser.__wrapped__()
    (tables,) = (tmp_path / "tiledsl" / "grammar").glob("tile-*.lark")
    for damaged in (None, b"", tables.read_bytes()[:500], b"not a pickle\n"):
        if damaged is not None:
            tables.write_bytes(damaged)
        tree = grammar.lark_parser.__wrapped__().parse(text)  # from the tables, or rebuilt
        assert tree == expected and tree.children[-1].meta.line == expected.children[-1].meta.line == 1
        assert tables.stat().st_size > 10_000  # written again whole


def test_saved_tables_are_read_by_the_next_process_without_building_anew(tmp_path, monkeypatch):
    """Lark's own cache keyed its tables by the cache file's name, so tables written beside their
    place and moved there were never read: every command built them again (a fifth of a second)."""
    import lark

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    built = grammar.lark_parser.__wrapped__()
    (tables,) = (tmp_path / "tiledsl" / "grammar").glob("tile-*.lark")
    saved = tables.read_bytes()

    def no_build(*args, **kwargs):
        raise AssertionError("the tables were built again")

    monkeypatch.setattr(lark.Lark, "__init__", no_build)
    text = "program p {\n  matrix A[n, n] = zeros\n  potrf(A[0, 0])\n}\n"
    assert grammar.lark_parser.__wrapped__().parse(text) == built.parse(text)
    assert tables.read_bytes() == saved


def test_tables_that_could_not_be_written_whole_are_never_published(tmp_path, monkeypatch):
    """A full disk left a truncated table file, with a digest file half written beside it."""
    import errno

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    built = grammar.lark_parser.__wrapped__()
    folder = tmp_path / "tiledsl" / "grammar"
    for left in folder.iterdir():
        left.unlink()
    write_bytes = Path.write_bytes

    def disk_full(path, data):
        write_bytes(path, data[:28672])
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(Path, "write_bytes", disk_full)
    grammar.publish_tables(built, Path(grammar.tables_path(built.source_grammar)))
    assert list(folder.iterdir()) == []
    monkeypatch.setattr(Path, "write_bytes", write_bytes)
    grammar.publish_tables(built, Path(grammar.tables_path(built.source_grammar)))
    assert sorted(p.suffix for p in folder.iterdir()) == [".lark", ".sha256"]


def test_a_cache_that_cannot_be_made_only_costs_the_tables_build(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))
    assert grammar.lark_parser.__wrapped__().parse("program p {\n}\n") == grammar.lark_parser().parse("program p {\n}\n")


@pytest.mark.timeout(120)
def test_a_damaged_grammar_cache_is_built_anew(tmp_path, monkeypatch):
    """Lark's hash covers the grammar, not its tables: `[A-Za-z_]` edited to `[B-Za-z_]` in them made every
    later `check` say "unexpected character 'A'", and a fifo there blocked it. (Each load here is a new
    process's: the parser is built from the cache, not the one this process holds.)"""
    import os

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    source = (Path(__file__).resolve().parents[2] / "programs" / "cholesky.tile").read_text()
    expected = grammar.lark_parser.__wrapped__().parse(source)  # builds the tables and caches them
    (tables,) = (tmp_path / "tiledsl" / "grammar").glob("tile-*.lark")
    whole = tables.read_bytes()
    assert b"[A-Za-z_]" in whole
    tables.write_bytes(whole.replace(b"[A-Za-z_]", b"[B-Za-z_]", 1))
    for _ in range(2):  # and the cache written anew serves the next one
        assert grammar.lark_parser.__wrapped__().parse(source) == expected
    assert b"[B-Za-z_]" not in tables.read_bytes()
    tables.unlink()
    os.mkfifo(tables)
    assert grammar.lark_parser.__wrapped__().parse(source) == expected
    tables.unlink()  # a fifo, or bytes that are no text, where the tables' digest goes: built anew too
    for damage in (os.mkfifo, lambda path: path.write_bytes(b"\xff\xfe\x00")):
        grammar.lark_parser.__wrapped__()
        (seal,) = (tmp_path / "tiledsl" / "grammar").glob("tile-*.sha256")
        seal.unlink()
        damage(seal)
        assert grammar.lark_parser.__wrapped__().parse(source) == expected
