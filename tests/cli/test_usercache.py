"""Where the caches live (tiledsl.usercache), and the parser's tables cache that lives there:
XDG_CACHE_HOME when absolute, else the home's .cache, never the file system's root; a
cache folder whose name the locale cannot encode is no cache, not a failure."""
import os
import pwd
from pathlib import Path

from tiledsl.compiler import grammar
from tiledsl.usercache import cache_dir


def test_the_cache_is_in_xdg_cache_home_when_absolute_else_in_the_homes(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir("tune") == tmp_path / "tiledsl" / "tune"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_dir("tune") == tmp_path / ".cache" / "tiledsl" / "tune"


def test_an_empty_home_is_the_password_databases_not_the_file_systems_root(monkeypatch):
    """HOME= made '~' the root: the cache went to /.cache/tiledsl."""
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", "")
    assert cache_dir("tune") == Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "tiledsl" / "tune"


def test_a_cache_folder_the_locale_cannot_encode_keeps_the_parser_tables(monkeypatch, tmp_path):
    """Lark's own cache hashed its file's name, which failed on a name the locale cannot encode."""
    undecodable = os.fsdecode(os.fsencode(str(tmp_path)) + b"/cache-\xe4")  # as LC_ALL=C reads an 'ä'
    monkeypatch.setenv("XDG_CACHE_HOME", undecodable)
    built = grammar.lark_parser.__wrapped__()
    assert grammar.tables_path("grammar").startswith(undecodable)
    assert len(list((tmp_path / os.fsdecode(b"cache-\xe4") / "tiledsl" / "grammar").glob("tile-*"))) == 2
    assert grammar.lark_parser.__wrapped__().parse("program p {\n}\n") == built.parse("program p {\n}\n")
