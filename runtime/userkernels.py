"""The kernel table of a run: the prelude's kernels and the user's, loaded from the Python
module a program names with ``use``.

A user kernel is a Python function the module itself defines (looked up in the
module's own namespace, never among the attributes every module object has, such as
``__eq__`` or ``__class__``). Its CPU body is the function ``NAME``; a function
``NAME_gpu`` (same parameters), if the module defines one, is its GPU body, which the
GPU backend runs on the task's device (CuPy arrays, or host arrays on the emulated
backend: :func:`.panels.array_module` serves both). A kernel without one runs on the
host of the rank that owns its main output (:func:`.protocol.runs_at`).

The module is looked for next to the ``.tile`` file, which a driver compiled with ``-o``
(or through the cache) records relative to itself, so that it runs from any directory;
then next to the driver and in the working directory. A module that is missing or not a
``.py`` file is a usage error, as is a ``NAME`` or ``NAME_gpu`` that is not callable (or is a
class: any other callable, such as a ``functools.partial``, serves; a ``NAME_gpu`` of None is no
GPU body);
one whose own code fails as it loads (a syntax error, an import that fails, a
``SystemExit``) is this rank's failure (:class:`~.world.RankError`: the job is aborted),
naming the file, the line and the cause, never a traceback; one that does not finish
loading (it blocks) ends the job after the watchdog's limit.
"""
from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import reprlib
import types
import shlex
import sys
import threading
import traceback
from pathlib import Path

from .. import usercache
from ..drivercontract import program_folder, source_digest
from .crash import NOT_USERS, KernelExit, fatal_signals_traced, user_code
from .errors import TaskFailure
from .kernels import CPU_KERNELS
from .watchdog import FLOOR_SECONDS, CodeLimit, deadline
from .world import RankError, UsageError, launcher_rank

#: ``NAME`` + GPU_SUFFIX names the GPU body of user kernel ``NAME``
GPU_SUFFIX = "_gpu"
#: how long a module may take to load without ``--watchdog`` (libraries it imports included)
IMPORT_SECONDS = 5 * FLOOR_SECONDS


#: how long a kernel module may take to load (a run sets its --watchdog limit here; None: no limit)
import_limit: CodeLimit | None = CodeLimit(IMPORT_SECONDS)


def kernels(program, driver, devices=None) -> dict:
    """The CPU bodies of the program's kernels by name; the user's GPU bodies go to the GPU
    backend ``devices`` (if any), beside the prelude's."""
    table = dict(CPU_KERNELS)
    for name, (body, gpu_body) in _user_kernels(program, driver).items():
        table[name] = body
        if gpu_body is not None and devices is not None:
            devices.add_kernel(name, gpu_body)
    return table


def gpu_kernels(program, driver) -> frozenset:
    """The names of the program's kernels that have a GPU body: the prelude's, and the user's
    that define ``NAME_gpu`` (the module is loaded, as a run loads it)."""
    return frozenset(CPU_KERNELS) | {name for name, (_, gpu_body) in _user_kernels(program, driver).items()
                                     if gpu_body is not None}


def _user_kernels(program, driver) -> dict:
    """name -> (CPU body, GPU body or None) of every user kernel the program calls."""
    if not program.kernel_module:
        return {}
    module = load_kernel_module(program, driver)
    found = {}
    for call in program.calls:
        if call.kernel not in CPU_KERNELS and call.kernel not in found:
            body = vars(module).get(call.kernel, UNBOUND)
            # the program's mistake (check reads the module without running it: a function defined
            # under an 'if' escapes it), said at the call's line as a failed loop nest is
            if body is UNBOUND or (call.kernel.startswith("__") and not is_body(body)):  # __loader__, __doc__
                raise TaskFailure(f"kernel module {_module_named(program, driver, module)} defines no function "
                                  f"{call.kernel} (for the call {call.text})", launcher_rank(), call.line)
            if not is_body(body):
                raise TaskFailure(f"kernel module {_module_named(program, driver, module)}: {call.kernel} must be a "
                                  f"function (for the call {call.text}), {what_is(body)}", launcher_rank(), call.line)
            found[call.kernel] = (body, _gpu_body(module, _module_named(program, driver, module), call))
    return found


UNBOUND = object()  # a name the module does not bind (one bound to None is a body that is not one)


def _module_named(program, driver, module) -> str:
    """The kernel module as a message names it: as the program does where it was found beside the
    ``.tile`` file, else by the path it was loaded from (a stray module of the name where a driver
    moved alone runs is not the program's)."""
    loaded = Path(module.__file__)
    beside = program_places(program, driver)[0] / program.kernel_module
    if loaded.absolute() == beside:
        return program.kernel_module
    return f"{program.kernel_module} (loaded from {loaded.absolute()}, as {beside} is not there)"


def is_body(body) -> bool:
    """A kernel's body is a function, or any other callable but a class: a functools.partial, an
    object with ``__call__``, a numpy.vectorize (a class would build an object and write nothing)."""
    return callable(body) and not isinstance(body, type)


def what_is(body) -> str:
    """``not str 'fast'``: what a name that should be a kernel's body is instead."""
    if isinstance(body, type):
        return "not a class"
    if isinstance(body, types.ModuleType):  # its repr names its file, which reprlib would cut in the middle
        return f"not the module {body.__name__} (an import): name a function of it, or define one"
    return f"not {type(body).__name__} {reprlib.repr(body)}"


def _gpu_body(module, module_name: str, call):
    """The GPU body NAME_gpu of ``call``'s kernel in ``module``, None if it has none (or binds the name to
    None: ``NAME_gpu = fast if cupy_found else None``); a failure at the call's line, as a CPU body's, if it
    is not callable (with GPUs or without: the module is wrong)."""
    name = call.kernel + GPU_SUFFIX
    body = vars(module).get(name)
    if body is None or is_body(body):
        return body
    raise TaskFailure(f"kernel module {module_name}: {name} must be a function (the GPU body of kernel "
                      f"{call.kernel}, for the call {call.text}), {what_is(body)}", launcher_rank(), call.line)


class KernelModuleNotFound(UsageError):
    """The program's kernel module is in none of the places a run looks (:func:`program_places`)."""


def load_kernel_module(program, driver):
    """The program's kernel module, found in the first of :func:`program_places` that has it."""
    places = program_places(program, driver)
    for base in places:
        path = base / program.kernel_module
        if _is_file(path):
            return _import(_shown(path))
    if _of_the_cache(driver):  # `tiledsl run X.tile`, `tiledsl.load`: the .tile's folder alone
        raise KernelModuleNotFound(f"kernel module {program.kernel_module} not found next to {program.source} "
                                   f"(looked in {places[0]}): it belongs beside the .tile file")
    raise KernelModuleNotFound(f"kernel module {program.kernel_module} not found next to {program.source} "
                     f"(looked in {', '.join(str(base) for base in places)}: the .tile's directory as the driver "
                     f"recorded it or as its path reads from here, the driver's and the current one; a driver "
                     f"moved elsewhere needs the kernel module beside it or in the directory it runs from)")


def _shown(path: Path) -> Path:
    """``path`` relative to the working directory when it is inside it: messages name
    ``kernels.py:2`` rather than a long absolute path."""
    try:
        return path.relative_to(Path.cwd().absolute())
    except ValueError:
        return path


def program_places(program, driver, working_directory: bool = True) -> list:
    """Where the program's own files (its kernel module, the files it loads) may be, in order,
    each once: the ``.tile``'s directory as the
    driver recorded it relative to itself (found from any working directory), the
    ``.tile``'s directory as its path was given (relative to the working directory, where the
    ``.tile`` file is), the driver's own directory, and (``working_directory``) the working directory. A driver of
    tiledsl's cache (``tiledsl run X.tile``, ``tiledsl.load``) has the first only: the cache key holds
    the program's directory, so it is exact, and the others named the folder a Python process had
    moved to since it loaded the program (its stray files taken for the program's)."""
    here = Path(getattr(driver, "__file__", None) or ".").resolve().parent
    recorded = [here / program.source_dir] if program.source_dir else []
    if recorded and _of_the_cache(driver):
        return [Path(os.path.normpath(recorded[0].absolute()))]
    given = Path(program_folder(program.source))
    # a relative path reads from wherever the run starts: that folder is the program's only where the program is
    as_given = [given] if os.path.isabs(program.source) or _is_file(given / Path(program.source).name) else []
    places = {}
    for base in [*recorded, *as_given, here, *[Path.cwd()] * working_directory]:
        places.setdefault(Path(os.path.normpath(base.absolute())), None)
    return list(places)


def _of_the_cache(driver) -> bool:
    """Whether ``driver`` is one of tiledsl's cache (``tiledsl run X.tile``, ``tiledsl.load``)."""
    here = Path(getattr(driver, "__file__", None) or ".").resolve().parent
    return here == usercache.cache_dir("drivers").resolve()


def changed_source(program, driver) -> str | None:
    """A warning when the ``.tile`` file the driver was compiled from, found where its kernel module
    would be, has changed since (its digest differs): the driver runs the program as it was."""
    if program.source_digest is None:
        return None
    name = Path(program.source).name
    found = next((base / name for base in program_places(program, driver, working_directory=False)
                  if _is_file(base / name)), None)
    try:
        if found is None or source_digest(found.read_bytes()) == program.source_digest:
            return None
    except OSError:  # unreadable now: nothing to compare
        return None
    driver_file = Path(getattr(driver, "__file__", None) or "DRIVER.py")
    # a driver of tiledsl's cache was compiled by the command itself, as the run began: run it again
    again = ("run it again" if driver_file.resolve().parent == usercache.cache_dir("drivers").resolve()
             else f"compile it again: tiledsl compile {shlex.quote(str(_shown(found)))} -o "
                  f"{shlex.quote(str(_shown(driver_file)))}")
    return (f"{_shown(found)} has changed since this driver was compiled from it: the driver holds the program "
            f"as it was then ({again})")


def kernel_module_digest(program, driver, helpers=()) -> str | None:
    """The digest (:func:`source_digest`) of the program's kernel module where a run would load it, and of
    the ``helpers`` beside it (:func:`loaded_helpers`: names relative to its folder; one gone counts as
    changed); None without a module, or where none is found or read. ``tiledsl tune`` records it with its
    measurements, and a run whose module or helpers differ from it is warned (:func:`~.layout.use_tuned`)."""
    path = _kernel_module_path(program, driver)
    if path is None:
        return None
    try:
        text = path.read_bytes()
        for name in helpers:  # (each after a separator: a helper's text cannot pass for the module's end)
            helper = path.parent / name
            text += b"\0" + name.encode() + b"\0" + (helper.read_bytes() if _is_file(helper) else b"\0gone")
        return source_digest(text)
    except OSError:
        return None


def loaded_helpers(program, driver) -> tuple:
    """The Python files beside the kernel module that its latest load in this process imported (its own
    helpers, :func:`_files_beside`), relative to its folder, sorted; the module is loaded first where
    this process has not loaded it. None without a kernel module."""
    path = _kernel_module_path(program, driver)
    if path is None:
        return None
    if path.resolve() not in _HELPERS:
        load_kernel_module(program, driver)
    return _HELPERS.get(path.resolve(), ())


def _kernel_module_path(program, driver) -> Path | None:
    """The program's kernel module where a run would load it (the first of :func:`program_places`)."""
    if not program.kernel_module:
        return None
    return next((base / program.kernel_module for base in program_places(program, driver)
                 if _is_file(base / program.kernel_module)), None)


#: kernel module (resolved path) -> the helper files its latest load imported, relative to its folder
_HELPERS: dict = {}


def program_files(program, driver) -> list:
    """The files a run of ``program`` is made of, which its outputs must not replace: the
    ``.tile``, its kernel module and the driver, wherever they are found."""
    names = [Path(program.source).name] + ([program.kernel_module] if program.kernel_module else [])
    found = [base / name for base in program_places(program, driver) for name in names]
    driver_file = getattr(driver, "__file__", None)
    return [path for path in found + ([Path(driver_file)] if driver_file else []) if _is_file(path)]


def _is_file(path: Path) -> bool:
    """Whether ``path`` is a file; False where it cannot be looked at, as a path of more than PATH_MAX
    bytes (a working directory nested that deep: 'File name too long' was an internal error)."""
    try:
        return path.is_file()
    except OSError:
        return False


def _import(path: Path):
    """Execute the kernel module at ``path``; its failures are this rank's, naming the file and
    line; one that does not finish loading within :data:`import_limit` ends the job."""
    if path.suffix != ".py":
        raise UsageError(f"kernel module {path} is not a Python file (its name must end in .py)")
    name = f"tiledsl_kernels_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path, loader=FromSource(name, str(path)))
    module = importlib.util.module_from_spec(spec)
    with _LOADING, _files_beside(path.resolve().parent) as helpers:
        try:
            # a crash while it loads (a C extension's) is reported with its stack, as one in a kernel is
            with fatal_signals_traced(), user_code(), \
                    deadline(import_limit, f"kernel module {path} has not finished loading", launcher_rank()):
                spec.loader.exec_module(module)
        except SyntaxError as error:  # NUL bytes too, on recent Pythons: a SyntaxError of no line
            raise RankError(f"kernel module {_syntax_error_place(path, error)}: SyntaxError: {error.msg}") from error
        except (RankError, *NOT_USERS):  # the deadline's (past it), a stop
            raise
        except BaseException as error:  # a failing import, an exit (a GeneratorExit too): the module's mistake
            where = _place(path, _module_line(path, error))
            what = (f"called sys.exit({error.code!r}) while being loaded" if isinstance(error, SystemExit)
                    else f"{error} while being loaded" if isinstance(error, KernelExit)
                    else f"{type(error).__name__}: {error}")
            raise RankError(f"kernel module {where}: {what}") from error  # (the API's error keeps it)
    _HELPERS[path.resolve()] = tuple(sorted(helpers))
    return module


def _module_line(path: Path, error: BaseException) -> int | None:
    """The line of the module at ``path`` that ``error`` came through (an import of a failing helper), if known."""
    return next((frame.lineno for frame in reversed(traceback.extract_tb(error.__traceback__))
                 if Path(frame.filename).resolve() == path.resolve()), None)


def _syntax_error_place(path: Path, error: SyntaxError) -> str:
    """Where the module at ``path`` failed to compile: its line, or the line importing the helper file that
    failed and that file's (a helper's line was said as the module's)."""
    if error.filename is None or not Path(error.filename).exists() or Path(error.filename).resolve() == path.resolve():
        return _place(path, error.lineno)
    helper = path.parent / os.path.relpath(error.filename, path.resolve().parent)  # named as the module is
    return f"{_place(path, _module_line(path, error))} (importing {_place(helper, error.lineno)})"


def _place(path: Path, line: int | None) -> str:
    """``path:line``, or the path alone where the line is not known."""
    return f"{path}:{line}" if line else str(path)


#: one kernel module loads at a time: a load changes the process's import path and module table
_LOADING = threading.Lock()


@contextlib.contextmanager
def _files_beside(folder: Path):
    """The imports of a kernel module in ``folder`` while it loads, as a script's: the Python files
    beside it come first (not the caller's working directory, nor a module of the caller's of the
    same name, which steps aside meanwhile), except where an installed package has that name (a
    stray numpy.py there must not hide numpy). Once it has loaded, the files it imported from the
    folder are forgotten again. So each load imports its own helper files, as they are now: two
    programs of one process (two threads, even) may each have a ``helpers.py``, and the caller's
    imports resolve afterwards as before. Yields a list that then holds those files, relative to the
    folder (what tune's record of the module covers: :func:`kernel_module_digest`)."""
    names = [name for name in _module_names(folder) if not _installed(name)]
    helpers: list = []
    finder = _FolderFirst(folder, names)
    tops = frozenset(names)  # the caller's modules of those names step aside, their submodules too (helpers.h)
    stepped_aside = {name: sys.modules.pop(name) for name in list(sys.modules) if name.partition(".")[0] in tops}
    before = set(sys.modules)
    sys.meta_path.insert(0, finder)
    try:
        yield helpers
    finally:
        sys.meta_path.remove(finder)
        # a new submodule of a package imported before (tiledsl's own, numpy's) is not the user's
        for name in [name for name, imported in list(sys.modules.items())
                     if name.partition(".")[0] not in before and _is_helper(imported, folder)]:
            file = _user_file(sys.modules.pop(name))
            if file is not None:
                helpers.append(file.relative_to(folder).as_posix())
        sys.modules.update(stepped_aside)


class FromSource(importlib.machinery.SourceFileLoader):
    """Loads the user's Python file from its text as it is now, never from the byte code Python
    cached beside it, which it judges current by the file's time and size alone: an edit keeping
    both (``cp -p``, ``rsync -a``, a script rewriting it within the second) ran the old kernel."""

    def path_stats(self, path):
        raise OSError("read from the source")  # (get_code then compiles the text, and caches nothing)


class _FolderFirst(importlib.abc.MetaPathFinder):
    """Finds the top-level modules ``names`` in ``folder``, and their submodules, each read from
    its text (:class:`FromSource`)."""

    def __init__(self, folder: Path, names: list):
        self.folder, self.names = str(folder), frozenset(names)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] not in self.names or (path is None) != ("." not in fullname):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, [self.folder] if path is None else path)
        if spec is not None and type(spec.loader) is importlib.machinery.SourceFileLoader:
            spec.loader = FromSource(spec.loader.name, spec.loader.path)
        return spec


def _module_names(folder: Path) -> list:
    """The top-level modules that files in ``folder`` would be imported as."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    return [entry.name[:-3] if entry.name.endswith(".py") else entry.name for entry in entries
            if entry.name.endswith(".py") or _package_folder(entry)]


def _package_folder(entry: os.DirEntry) -> bool:
    """Whether ``entry`` is a folder Python imports as a package, with an ``__init__.py`` or without
    (a namespace package, as a script imports one beside it); not for an entry that cannot be
    followed (a link in a loop, a folder not to be read): no module of the user's is there."""
    try:
        return entry.name.isidentifier() and entry.is_dir()
    except OSError:
        return False


def _installed(name: str) -> bool:
    """Whether ``name`` is a module of Python's or of an installed package."""
    if name in sys.builtin_module_names or name in sys.stdlib_module_names:
        return True
    places = [entry for entry in sys.path if entry and _is_installed(Path(entry).resolve())]
    return importlib.machinery.PathFinder.find_spec(name, places) is not None


def _is_helper(module, folder: Path) -> bool:
    """Whether ``module`` is a Python file of the user's in ``folder`` (or below it), or a namespace
    package (a folder without ``__init__.py``) there."""
    spec = getattr(module, "__spec__", None)
    if spec is not None and spec.origin is None and spec.submodule_search_locations is not None:
        return all(Path(place).resolve().is_relative_to(folder) for place in spec.submodule_search_locations)
    file = _user_file(module)
    return file is not None and file.is_relative_to(folder)


def _user_file(module) -> Path | None:
    """The Python file of ``module`` when it is the user's: not an installed package (a virtual
    environment may live in a kernel module's folder) nor a compiled extension, which cannot be
    imported twice; else None."""
    file = getattr(module, "__file__", None)
    if not file or not file.endswith(".py"):
        return None
    file = Path(file).resolve()
    return None if _is_installed(file) else file


def _is_installed(path: Path) -> bool:
    """Whether ``path`` lies in Python's installation or in a folder of installed packages."""
    installed = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    return any(path.is_relative_to(p) for p in installed) or bool({"site-packages", "dist-packages"} & set(path.parts))
