"""The tile language's Lark parser: LALR tables built from ``grammars/tile.lark`` once, saved in
the user's cache (sealed by a digest) for the next process, and a lexer that keeps keywords whole."""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import sys
from functools import lru_cache
from importlib import resources
from pathlib import Path

import lark
from lark import Lark, Token
from lark.lark import PostLex

from .. import usercache


@lru_cache(maxsize=1)
def lark_parser() -> Lark:
    """The language's LALR parser, one a process: loaded from the tables an earlier process saved, else
    built (and its tables saved)."""
    grammar = resources.files("tiledsl.grammars").joinpath("tile.lark").read_text(encoding="utf-8")
    path = tables_path(grammar)
    tables = path and _sealed_tables(Path(path))
    if tables:
        with contextlib.suppress(Exception):  # tables its loader refuses: built anew
            # Lark.load takes no options; its cache loads with _load and the options not saved
            return Lark.__new__(Lark)._load(io.BytesIO(tables), postlex=_WholeWords(), propagate_positions=True)
    parser = Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=True, postlex=_WholeWords())
    if path:
        publish_tables(parser, Path(path))
    return parser


def _sealed_tables(tables: Path) -> bytes | None:
    """The bytes of the saved parser at ``tables`` when they are as they were written (the digest
    beside them, ``.sha256``, is theirs); None where they are missing, damaged or no file (a fifo
    blocked the read). A byte changed in them parsed every program wrong, for good ('unexpected
    character A')."""
    with contextlib.suppress(OSError, ValueError):  # (ValueError: a digest that is no text)
        data = usercache.read_bytes(tables)
        if _seal(data) == usercache.read_bytes(_seal_path(tables)).decode().strip():
            return data
    return None


def publish_tables(parser: Lark, tables: Path) -> None:
    """Save ``parser``'s tables at ``tables``, their digest beside them, each written beside its
    place and moved there once whole (a full disk left a truncated file); on a failure, nothing is
    left. Lark's own cache would not do: its key holds the cache file's name, so tables written
    under one name and moved to another were never read."""
    buffer = io.BytesIO()
    parser.save(buffer)
    data = buffer.getvalue()
    seal_path = _seal_path(tables)
    partial_tables, partial_seal = (path.with_name(f"{path.name}.{os.getpid()}.tmp") for path in (tables, seal_path))
    try:
        partial_tables.write_bytes(data)
        partial_seal.write_text(_seal(data))
        partial_seal.replace(seal_path)
        partial_tables.replace(tables)
    except OSError:
        pass  # no cache: the next process builds the tables again
    finally:
        for partial in (partial_tables, partial_seal):
            with contextlib.suppress(OSError):
                partial.unlink()


def _seal(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _seal_path(tables: Path) -> Path:
    return tables.with_name(tables.name + ".sha256")


class GluedKeyword(Exception):
    """A keyword with letters glued after it, which Lark's lexer split in two."""

    def __init__(self, keyword: Token):
        super().__init__(str(keyword))
        self.keyword = keyword


class _WholeWords(PostLex):
    """Where only a keyword may come, Lark's contextual lexer takes it off the front of a longer
    word: ``for k inn .. A.nt`` read as ``in n`` (a loop that never ran), ``likeA`` as ``like A``.
    A keyword is a whole word: one that letters or digits follow touching it is refused."""

    always_accept = ()

    def process(self, stream):
        before = None
        for token in stream:
            if (before is not None and before.type != "NAME" and WORD.fullmatch(before)
                    and token.start_pos == before.end_pos and _WORD_CHARACTER.match(token)):
                raise GluedKeyword(before)
            before = token
            yield token


#: a name or keyword
WORD = re.compile(r"[A-Za-z_]\w*")
_WORD_CHARACTER = re.compile(r"\w")


def tables_path(grammar: str) -> str | bool:
    """Where the parser's LALR tables are saved once built (a fifth of a second a process to
    rebuild): the user's cache, its name a digest of the grammar and of Lark's and Python's
    versions; False, no cache, where that cannot be made."""
    folder = usercache.cache_dir("grammar")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    digest = hashlib.sha256(f"{grammar}{lark.__version__}{sys.version_info[:2]}".encode()).hexdigest()
    return str(folder / f"tile-{digest[:16]}.lark")


#: a token as the lexer would cut it, near enough to count them: a string, a comment, a word, a sign
TOKEN = re.compile(r'"[^"\n]*"|#[^\n]*|\w+|[^\s\w]')
