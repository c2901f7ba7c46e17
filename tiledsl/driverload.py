"""Turning driver text into a runnable module, and the compile cache behind ``tiledsl run``.

A ``.tile`` program is compiled once per content: the driver lands in
``$XDG_CACHE_HOME/tiledsl/drivers/<hash>.py`` (``~/.cache`` by default) and is
imported from there, so a traceback or a profiler points at a real file.
Drivers no run has used for 30 days, and all but the 2,000 most recently used, are removed
when a new one is written. Beside each driver, a record of the check that passed (its warnings,
and the digest of the kernel module it read) lets a later run of the same program skip the
compiler altogether (:func:`compile_cached`).

A ``.py`` file given to ``tiledsl`` is imported only once :func:`not_a_driver`
has recognised it, from its syntax tree alone, as a generated driver: a user's
script is never run by mistake.
"""
from __future__ import annotations

import ast
import contextlib
import difflib
import hashlib
import importlib.util
import json
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from . import __version__, usercache
from .drivercontract import program_folder
from .runtime.world import UsageError

#: the modules whose code shapes a driver: a change to any of them compiles programs anew
COMPILER_STAGES = ("pipeline", "grammar", "parser", "nodes", "analysis", "scope", "typer", "checks", "module_use",
                   "affine", "expressions", "dataflow", "kernel_module", "codegen")


def program_path(name: str, matrix_advice: str = "give it to the run as --input NAME={name}") -> str:
    """A path as given, or the shipped program of that name (``cholesky``) if there is one, even
    where a file of the current directory bears the name (``./cholesky`` names that one).

    A bare name that is neither a file nor a shipped program is a :class:`UsageError`
    naming the shipped programs, and the closest one if the name looks misspelled; so is
    a path that leads nowhere, or to a matrix file (said with ``matrix_advice``, the way the caller
    gives a matrix, ``{name}`` its file)."""
    if not name:
        raise UsageError("the file name is empty: give the path of a .tile file")
    if name.endswith(".npy"):
        raise UsageError(f"{name} is a matrix file, not a program: {matrix_advice.format(name=name)}")
    found = shipped_path(name)
    if found:  # a bare name no file bears (a folder of that name is no program)
        return found
    if name.endswith((".tile", ".py")) or "/" in name or Path(name).exists():
        if not os.path.lexists(name):
            also = shipped_name(name)
            if also is None and os.path.isfile(f"{name}.tile"):  # `tiledsl run ../programs/cholesky`
                raise UsageError(f"{name}: no such file (did you mean {name}.tile?)")
            raise UsageError(f"{name}: no such file" + (f" (a shipped program is called {also}: give its name, "
                                                          f"`{also}`, from any directory)" if also else ""))
        return name
    names = sorted(path.stem for path in shipped_programs().glob("*.tile"))
    close = difflib.get_close_matches(name, names, n=1)
    raise UsageError(f"{name}: no such file, nor a shipped program of that name"
                     + (f" (did you mean {close[0]}?)" if close else f" (shipped: {', '.join(names)})"))


def shadowing(name: str, doing: str = "run") -> str | None:
    """What to say when ``name`` runs (or is ``doing`` to) a shipped program while the current
    directory holds a ``NAME.tile`` of its own (which a user may have meant), or None."""
    found = shipped_path(name)
    local = next((Path(file) for file in (f"{name}.tile", name) if Path(file).is_file()), None)
    if found is None or local is None or local.resolve() == Path(found).resolve():
        return None
    try:
        text = local.read_bytes()
    except OSError:
        text = None
    if text == Path(found).read_bytes():  # a copy: the same program either way
        return None
    if local.suffix != ".tile" and text is not None and not _PROGRAM_HEADER.search(text[:1 << 16]):
        return None  # a file of that name that is no program (notes, data): nothing the user meant to run
    return (f"{name} is the shipped program ({found}); the {local} in this directory is another program: "
            f"give its path, ./{local}, to {doing} that one")


_PROGRAM_HEADER = re.compile(rb"(?m)^\s*program\s+[A-Za-z_]\w*\s*\{")  # how a .tile program opens its body


def shipped_programs() -> Path:
    """The folder of the shipped programs: ``tiledsl/programs`` in an installed package, the
    repository's ``programs`` in a checkout (or an editable install of one)."""
    package = Path(__file__).resolve().parent
    installed = package / "programs"
    return installed if installed.is_dir() else package.parent / "programs"


def shipped_path(name: str) -> str | None:
    """The shipped program called ``name`` (a bare name such as ``cholesky``, whatever file of the
    current directory bears it: :func:`shadowing` says so), or None."""
    if name.endswith((".tile", ".py")) or "/" in name:
        return None
    shipped = shipped_programs() / f"{name}.tile"
    return str(shipped) if shipped.exists() else None


def shipped_name(path: str) -> str | None:
    """The shipped program a path that leads nowhere names (``programs/cholesky.tile``, as the docs
    write it from a clone, or ``cholesky.tile``), or None."""
    stem = Path(path).name.removesuffix(".tile")
    return stem if path.endswith(".tile") and (shipped_programs() / f"{stem}.tile").exists() else None


def cache_dir() -> Path:
    return usercache.cache_dir("drivers")


def cache_key(source_text: str, path: str) -> str:
    """A hash of everything the driver depends on: tiledsl's version, grammar, prelude, the
    language's shared facts, the compiler's stages and template, the source, and the file's
    absolute directory (where a relative ``load`` path is found)."""
    digest = hashlib.sha256()
    stages = [_package_text("tiledsl.compiler", f"{stage}.py") for stage in COMPILER_STAGES]
    for part in (__version__, _package_text("tiledsl.grammars", "tile.lark"),
                 _package_text("tiledsl.compiler", "prelude.tile"), _package_text("tiledsl", "language.py"), *stages,
                 _package_text("tiledsl.compiler", "templates/driver.py.j2"),
                 path, program_folder(path), source_text):
        digest.update(part.encode(errors="surrogateescape"))  # a file name need not be UTF-8
        digest.update(b"\0")
    return digest.hexdigest()[:24]


@dataclass(frozen=True)
class Compiled:
    """A program compiled through the cache: its driver (None where the check found errors), the
    check's report (its diagnostics rendered; empty if none) and the first line of its first error."""

    driver: Path | None
    report: str
    first_error: str | None = None


def compile_cached(path: str) -> Compiled:
    """The cached driver of the ``.tile`` program at ``path``, compiled on a miss. A program that
    passed its check before, unchanged, as is its kernel module, is not checked again: its report
    comes from the record of that check, and the compiler is not even imported (lark and its
    tables, the analysis: a quarter of a second of every run's start)."""
    try:  # what the record of a passed check is keyed by; what is no file (a pipe would block), the check says
        data = Path(path).read_bytes() if Path(path).is_file() else None
    except OSError:  # the check says why
        data = None
    record = None if data is None else _check_record(path, data)
    recorded = None if record is None else recorded_check(*record)
    if recorded is not None:
        return Compiled(*recorded)
    from .compiler import check_path
    from .compiler.diagnostics import headline

    result = check_path(path, data)  # the bytes the record is keyed by
    if not result.ok:
        first = next(headline(d) for d in result.diagnostics if d.is_error)
        return Compiled(None, result.report(), first)

    def generate(target):
        from .compiler.codegen import generate  # jinja2 and the templates: a tenth of a second, on a miss only

        # generated for where it is cached: the driver records the .tile's folder relative to itself,
        # so the kernel module is found whatever the working directory is when it runs
        return generate(result.checked, target, cached=True, warnings=result.warnings())
    driver = cached_driver_path(result.source.text, path, generate)
    if record is not None:
        checked = result.checked
        record_check(*record, path, driver, result.report(), checked.kernel_module, checked.kernel_module_digest)
    return Compiled(driver, result.report())


#: the compiler's modules that word a check's report without shaping a driver
REPORT_MODULES = ("source", "diagnostics")


def _check_record(path: str, data: bytes) -> tuple[Path, str]:
    """Where the record of a passed check of the program ``data`` at ``path`` is kept, and its key:
    keyed as its driver is, and by the modules that word the report."""
    digest = hashlib.sha256(cache_key(data.decode("utf-8", errors="surrogateescape"), path).encode())
    for module in REPORT_MODULES:
        digest.update(b"\0" + _package_text("tiledsl.compiler", f"{module}.py").encode())
    key = digest.hexdigest()
    return cache_dir() / f"{Path(path).stem[:64]}-{key[:24]}.checked", key


def _file_digest(path: str) -> str | None:
    """The SHA-256 of a file's bytes; None where there is no regular file to read (a check reads the
    kernel module, or says it is missing; a fifo in its place would block the read for ever)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest() if Path(path).is_file() else None
    except OSError:
        return None


def recorded_check(record: Path, key: str) -> tuple[Path, str] | None:
    """The cached driver and the report (its warnings; empty if none) of the check a program passed,
    kept in ``record`` under ``key`` (:func:`_check_record`), where neither the program, the kernel
    module that check read nor tiledsl changed since; None where the program must be checked (a
    first run, an edit, a report with errors, a record or driver missing or damaged, another
    program's record copied in its place). ``tiledsl check`` never reads a record."""
    try:
        kept = json.loads(usercache.read_bytes(record).decode("utf-8"))
        driver = cache_dir() / kept["driver"]
        modules_unchanged = all(digest is not None and _file_digest(module) == digest
                                for module, digest in kept["modules"])
        report = kept["report"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):  # RecursionError: nested too deep
        return None
    if not (kept.get("key") == key and modules_unchanged and isinstance(report, str)
            and Path(kept["driver"]).name == kept["driver"] and _intact(driver)):
        return None
    _mark_used(driver)
    _mark_used(record)
    return driver, report


def record_check(record: Path, key: str, path: str, driver: Path, report: str, kernel_module: str | None,
                 module_digest: str | None) -> None:
    """Keep in ``record``, under ``key``, the passed check of the program at ``path``: its driver, its
    report, and the kernel module it read (named as the program's ``use`` names it) with the digest
    of the bytes the check read (a module saved again while the check ran is then a later miss),
    for :func:`recorded_check`. A record that cannot be written is only a later miss."""
    module = None if kernel_module is None else str(Path(path).parent / kernel_module)
    modules = [] if module is None else [[module, module_digest]]
    temporary = record.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    with contextlib.suppress(OSError):
        temporary.write_text(json.dumps({"key": key, "driver": driver.name, "modules": modules, "report": report}),
                             encoding="utf-8")
        temporary.replace(record)  # atomic, as the drivers
    with contextlib.suppress(OSError):
        temporary.unlink()


def _package_text(package: str, name: str) -> str:
    """A file of ``package``, read without importing it: a run whose check is recorded never imports
    the compiler (:func:`recorded_check`)."""
    folder = importlib.util.find_spec(package).submodule_search_locations[0]
    return Path(folder, name).read_text(encoding="utf-8")


DRIVER_DOCSTRING = "Driver of the tile program"  # how driver.py.j2 opens every driver
DRIVER_FUNCTIONS = {"resolve_params", "unmet", "shapes", "generate", "loop_bounds"}
# an affine loop nest's writes and releases; the helpers of a program that uses '**' or a computed step
OPTIONAL_FUNCTIONS = {"dataflow", "_power", "_step"}
OPTIONAL_TABLES = {"SOURCE_NAMES"}  # the .tile names the driver renames (a loop variable 'lambda')
OPTIONAL_TEXTS = {"NOT_AFFINE"}  # where a loop nest with no share plan leaves the affine class
FLOPS_PREFIX = "_flops_"  # how codegen names a user kernel's flop count: _flops_<kernel>


def not_a_driver(path: str | Path) -> str | None:
    """Why the Python file at ``path`` is not a driver ``tiledsl compile`` wrote; None if it is one.

    Judged without running it: its top level must be what the driver template
    writes, and only that (the docstring, ``from tiledsl.runtime import ...`` and the guard
    of its driver format, ``PROGRAM = Program(...)``, the functions, the ``__main__`` guard).
    """
    try:
        tree = ast.parse(Path(path).read_bytes(), str(path))
    except (SyntaxError, ValueError) as error:
        return f"it is not valid Python ({error.msg if isinstance(error, SyntaxError) else error})"
    except OSError as error:
        return f"it cannot be read ({error.strerror or error})"
    if not (ast.get_docstring(tree) or "").startswith(DRIVER_DOCSTRING):
        return "it does not open with a generated driver's docstring"
    defined = set()
    for statement in tree.body[1:]:
        name = _driver_statement(statement)
        if name is None:
            return f"line {statement.lineno} is not one a generated driver has"
        defined.add(name)
    missing = ({"import", "PROGRAM"} | DRIVER_FUNCTIONS) - defined
    return f"it lacks {', '.join(sorted(missing))}" if missing else None


def _driver_statement(statement) -> str | None:
    """What a top-level statement of a generated driver is ("import", "PROGRAM", a function's
    name, "main"); None for any other statement."""
    if isinstance(statement, ast.ImportFrom) and statement.module == "tiledsl.runtime" and not statement.level:
        return "import"
    if isinstance(statement, ast.Try) and any(_driver_statement(inner) == "import" for inner in statement.body):
        return "import"  # guarded: a Python whose runtime cannot run the driver (DRIVER_FORMAT) is told so
    if isinstance(statement, ast.If) and ast.unparse(statement.test) == "_unmet":
        return "guard"
    if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name) and statement.targets[0].id == "PROGRAM"
            and isinstance(statement.value, ast.Call) and isinstance(statement.value.func, ast.Name)
            and statement.value.func.id == "Program"):
        return "PROGRAM"
    if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name) and statement.targets[0].id in OPTIONAL_TABLES
            and isinstance(statement.value, ast.Dict)):
        return statement.targets[0].id
    if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name) and statement.targets[0].id in OPTIONAL_TEXTS
            and isinstance(statement.value, ast.Constant) and isinstance(statement.value.value, str)):
        return statement.targets[0].id
    if isinstance(statement, ast.FunctionDef) and not statement.decorator_list and (
            statement.name in DRIVER_FUNCTIONS | OPTIONAL_FUNCTIONS or statement.name.startswith(FLOPS_PREFIX)):
        return statement.name
    if isinstance(statement, ast.If) and ast.unparse(statement.test) == "__name__ == '__main__'":
        return "main"
    return None


def import_driver(path: str | Path, name: str = "tiledsl_driver"):
    """Import the driver module at ``path`` (without running its ``__main__`` block)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        raise ImportError(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    byte_code = Path(importlib.util.cache_from_source(os.fspath(path)))
    cached = Path(path).parent.resolve() == cache_dir().resolve()
    sealed = cached and _byte_code_sealed(byte_code)
    if cached and not sealed:
        with contextlib.suppress(OSError):
            byte_code.unlink()
    try:
        code = spec.loader.get_code(name)
    except (EOFError, ValueError, TypeError, ImportError):  # its byte code damaged: read anew
        with contextlib.suppress(OSError):
            byte_code.unlink()
        code = spec.loader.get_code(name)  # (a fault of the source itself raises again, as it is)
    if cached and not sealed:  # the byte code Python may have written just now
        _seal_byte_code(byte_code)
    exec(code, vars(module))
    return module


def _byte_code_sealed(byte_code: Path) -> bool:
    """Whether a cached driver has byte code as it was written: Python judges it by its source's time
    and size alone, and one whose body was overwritten (a disk's damage) ran another program with
    exit status 0. Beside it, its digest (:func:`_seal_byte_code`)."""
    try:
        data = usercache.read_bytes(byte_code)
        return usercache.read_bytes(_byte_code_seal(byte_code)).decode() == hashlib.sha256(data).hexdigest()
    except (OSError, ValueError):  # none, no file, no seal, or a seal that is no text
        return False


def _seal_byte_code(byte_code: Path) -> None:
    """Write the digest of the byte code Python wrote for a cached driver, if it wrote one."""
    with contextlib.suppress(OSError):
        digest = hashlib.sha256(usercache.read_bytes(byte_code)).hexdigest()
        seal = _byte_code_seal(byte_code)
        partial = seal.with_name(f"{seal.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        partial.write_text(digest)
        partial.replace(seal)


def _byte_code_seal(byte_code: Path) -> Path:
    return byte_code.with_name(byte_code.name + ".sha256")


def cached_driver_path(source_text: str, path: str, generate) -> Path:
    """The cached driver for ``source_text``, written with ``generate(target)`` on a miss
    (``target``: where the driver goes, which it finds the kernel module from)."""
    # the stem cut short: a long file name plus the key would pass the file system's 255 bytes
    target = cache_dir() / f"{Path(path).stem[:64]}-{cache_key(source_text, path)}.py"
    if not _intact(target):  # missing, or damaged (cut short, emptied, edited)
        temporary = target.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")  # processes and threads apart
        try:
            text = _sealed(generate(target), target)
            for attempt in (1, 2):  # the cache removed meanwhile (by another process, a cleaner): made again, once
                try:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    temporary.write_bytes(text)
                    temporary.replace(target)  # atomic: concurrent ranks never read half a file
                    break
                except FileNotFoundError:
                    if attempt == 2:
                        raise
        except OSError as error:
            with contextlib.suppress(OSError):  # a part written before a full disk failed it: it filled the disk
                temporary.unlink()
            if target.is_dir() and not target.is_symlink():
                raise UsageError(f"{target} is a folder, where tiledsl's driver cache keeps this program's driver: "
                                 f"remove it") from None
            raise UsageError(f"cannot write tiledsl's driver cache in {target.parent}: "
                             f"{_no_folder(target.parent) or error.strerror or error} "
                             f"(set XDG_CACHE_HOME to a writable directory)") from None
        _prune(target.parent)
    else:
        _mark_used(target)
    return target


def _mark_used(driver: Path) -> None:
    """Record that ``driver`` is used now, in its access time: the pruning keeps it. Its modification
    time stays: Python's byte code of the driver names it, and a newer one made every run compile the
    driver again (seconds and hundreds of MB for a program of thousands of calls)."""
    with contextlib.suppress(OSError):
        os.utime(driver, (time.time(), driver.stat().st_mtime))


def _last_used(entry: Path) -> float:
    """When a file of the cache was last written or marked used (:func:`_mark_used`)."""
    status = entry.stat()
    return max(status.st_atime, status.st_mtime)


def _no_folder(path: Path) -> str | None:
    """Why ``path``, or a folder above it, is there but no folder ("File exists" said only that something
    was); None where that is not the failure."""
    for place in (path, *path.parents):
        named = "it" if place == path else str(place)
        if place.is_symlink() and not place.exists():
            return f"{named} is a link that leads nowhere (to a missing place, or in a loop)"
        if place.exists() and not place.is_dir():
            return f"{named} is a file, not a folder"
    return None


#: the first line of a cached driver, before the SHA-256 of its file name and the rest (:func:`_intact`)
SEAL = b"# tiledsl's driver cache: the sha256 of this file's name and what follows is "


def _sealed(text: str, target: Path) -> bytes:
    """A driver as the cache keeps it at ``target``: its text after a first line holding the digest
    of that text and of the file's name (which holds the cache key of the program it was made from)."""
    body = text.encode("utf-8")
    return SEAL + _digest(target, body) + b"\n" + body


def _digest(target: Path, body: bytes) -> bytes:
    return hashlib.sha256(os.fsencode(target.name) + b"\0" + body).hexdigest().encode()


def _intact(path: Path) -> bool:
    """Whether the cached driver at ``path`` exists and is as it was written there: the digest on
    its first line is that of its name and the rest. The cache writes by atomic renames, so only
    damage from outside leaves one otherwise: a file cut short, emptied or edited (which ran as it
    was: a name changed by an edit was an internal error at every run), or another program's driver
    copied there (which ran in the asked one's place). A driver of megabytes is read and hashed in
    milliseconds, less than the parse of :func:`not_a_driver`; what is no regular file (a fifo,
    which would block the read) is no driver."""
    try:
        seal, _, body = usercache.read_bytes(path).partition(b"\n")
    except OSError:
        return False
    return seal == SEAL + _digest(path, body)


#: a cached driver no run has used for this long (seconds) goes, at the next driver written
UNUSED_SECONDS = 30 * 24 * 3600
#: the cache keeps at most this many drivers, the most recently used (a script that compiles
#: thousands of programs in a day would otherwise fill it faster than the month empties it)
MOST_DRIVERS = 2000


#: what Python adds to a module's name for its byte code: ``.cpython-312.pyc``, ``.cpython-312.opt-1.pyc``
_BYTE_CODE_SUFFIX = re.compile(r"\.[^.]+(\.opt-\d+)?\.pyc(\.sha256(\.\d+\.\d+\.tmp)?)?$")


def _prune(folder: Path) -> None:
    """Remove the drivers of ``folder`` unused for :data:`UNUSED_SECONDS` or beyond the
    :data:`MOST_DRIVERS` most recently used, and leftovers of writes that long ago: every edit
    of a program adds a driver, so a cache left alone only grows."""
    now = time.time()
    drivers = []  # (last used, path) of those kept for their age
    records = []  # the same for the records of checks (:func:`recorded_check`)
    for entry in [*folder.glob("*.py"), *folder.glob("*.checked"), *folder.glob("*.tmp")]:
        with contextlib.suppress(OSError):  # gone already, or another user's
            used = _last_used(entry)
            if now - used > UNUSED_SECONDS:
                entry.unlink()
            elif entry.suffix != ".tmp":
                (drivers if entry.suffix == ".py" else records).append((used, entry))
    drivers.sort(reverse=True)
    records.sort(reverse=True)
    for _, entry in drivers[MOST_DRIVERS:] + records[MOST_DRIVERS:]:
        with contextlib.suppress(OSError):
            entry.unlink()
    kept = {entry.stem for _, entry in drivers[:MOST_DRIVERS]}
    # Python's byte code of the drivers imported, and its digests (a digest's partial file: its own .tmp)
    for code in (folder / "__pycache__").glob("*.pyc*"):
        if _BYTE_CODE_SUFFIX.sub("", code.name) not in kept:  # its driver gone, now or before
            with contextlib.suppress(OSError):
                code.unlink()
