"""What a compiled driver and the runtime that runs it agree on.

:data:`DRIVER_FORMAT` numbers the drivers' dealings with the runtime: a driver states the
format it was generated for and stops with a message on a runtime of an older one (a driver
compiled on one machine, run by an older tiledsl on a cluster). Raise it whenever generated
drivers come to need what older runtimes lack: a new keyword of ``Program`` or ``Call``, a
new name imported from ``tiledsl.runtime``.

:func:`source_digest` is how a driver knows whether its ``.tile`` file changed since: the
compiler records it in the driver (``Program.source_digest``), the runtime computes it again
from the file. It is of the text as the compiler reads it (a byte-order mark dropped, CRLF and
CR line ends as LF), so that a checkout that rewrites line ends changes nothing.

:func:`hiding` is what a driver, or ``tiledsl run DRIVER.py``, says of a file beside a script
that is named as a module a run may import: Python imports it in that module's place. Such a
module is one of Python's (``copy.py``, ``json.py``), tiledsl itself (``tiledsl.py``), or one of
an installed package that tiledsl requires, directly or not (``numpy.py``, ``mpi4py.py``): every
one, not only those imported so far, for a module imported lazily fails only when it is used, in
the middle of a run (``json.dumps``). :func:`stop_if_hiding` is a driver's stop on such a file.

Only os and sys, which Python has loaded before any script, are imported at the top: a driver
whose runtime failed to import reads this module then.
"""
import os
import sys

DRIVER_FORMAT = 6  # 6: a read's share term may carry its call's main tile; 5: a panel's single index has no stop (None); 4: WorkspaceDecl's inner_block; 3: main takes the program alone; 2: a loop's share terms are a function

#: where launchers give a process its rank (MPICH's and Open MPI's mpiexec, PMIx, srun)
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")
#: where launchers state how many ranks they started, in the order they are believed: an
#: MPI's own (Open MPI, MPICH's hydra and the MPIs built on it) before Slurm's, which an
#: mpiexec inside a Slurm step inherits from the step
SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS")
#: the modules besides Python's that a run imports itself: hidden by a file of their name even where
#: the installed packages' records, which name the rest (:func:`required_modules`), are not found
RUNTIME_MODULES = ("tiledsl", "numpy", "scipy", "mpi4py", "threadpoolctl", "cupy", "nvmath")
#: tiledsl's extras whose packages no run imports (a run may plot, or use a GPU)
_NOT_RUN_EXTRAS = ("test",)


def source_digest(data: bytes) -> str:
    """The first 16 hex digits of the SHA-256 of ``data``, a ``.tile`` file's bytes, read as text."""
    import hashlib  # here: a hashlib.py beside a driver must not stop its message (hiding)

    text = data.removeprefix(b"\xef\xbb\xbf").replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return hashlib.sha256(text).hexdigest()[:16]


def program_folder(path) -> str:
    """The absolute folder of the ``.tile`` file named by ``path``, where its kernel module and the files it
    loads are: the folder the operating system reads the file from. Taken as written (a symlinked file's
    folder is the link's), but for a ``..``, which follows a symlinked folder to its target's parent as the
    system does (``L/../p/x.tile`` where L links to a/b/c is a/b/p/x.tile, not p/x.tile)."""
    folder = os.path.dirname(os.path.join(os.getcwd(), os.fspath(path)))
    return os.path.realpath(folder) if ".." in folder.split(os.sep) else os.path.normpath(folder)


def launcher_rank() -> int:
    """This process's rank as its launcher numbered it (0 without a launcher)."""
    value = next((os.environ[v] for v in RANK_VARIABLES if os.environ.get(v, "").isdigit()), "0")
    return int(value)


def launcher_size() -> tuple | None:
    """``(variable, ranks)``: the number of ranks the launcher says it started; None where none says.
    Slurm's count is believed only by a task other than its first, which cannot be a shell that
    ``srun --pty`` started (a plain ``python DRIVER.py`` there inherits the step's count)."""
    for name in SIZE_VARIABLES:
        value = os.environ.get(name, "")
        trusted = name != "SLURM_STEP_NUM_TASKS" or os.environ.get("SLURM_PROCID", "0") not in ("", "0")
        if value.isdigit() and trusted:
            return name, int(value)
    return None


def json_asked() -> bool:
    """Whether the command line asks for ``--json`` (before a ``--``, after which are the program's)."""
    given = sys.argv[1:sys.argv.index("--") if "--" in sys.argv else None]
    return "--json" in given


def early_failure_json(program: str | None, error: str) -> str:
    """The line ``--json`` prints for a driver stopped before it read its options (a module hidden, a
    package missing), as a run's failure object: the program, the ``--n`` given, the ranks. Written
    here by hand: the module hidden may be ``json``."""
    size = launcher_size()
    fields = {"program": program, "n": _given_order(), "np": size[1] if size else 1, "ok": False,
              "passed": None, "error": error}
    return "{" + ", ".join(f"{_json_value(key)}: {_json_value(value)}" for key, value in fields.items()) + "}"


def _given_order() -> int | None:
    """The ``--n N`` (or ``--n=N``) of the command line, where it is a number; else None."""
    given = sys.argv[1:sys.argv.index("--") if "--" in sys.argv else None]
    values = [word.removeprefix("--n=") for word in given if word.startswith("--n=")]
    values += [after for word, after in zip(given, given[1:]) if word == "--n"]
    return int(values[0]) if values and values[0].isdigit() else None


def _json_value(value) -> str:
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int):
        return str(value)
    return '"' + "".join(f"\\u{ord(c):04x}" if c in '"\\' or ord(c) < 32 else c for c in value) + '"'


def hiding(folder: str, modules=()) -> str | None:
    """What to say of a file in ``folder`` (a script's, first on the import path) that an import of a
    module a run may import would load in that module's place (:func:`hidden_modules`); None when
    there is none. Of several, one of ``modules`` (those imported so far: the likely cause of a
    failure) is named first."""
    hidden = hidden_modules(folder)
    if not hidden:
        return None
    imported = set(modules)
    name = min(hidden, key=lambda n: (n not in imported, n))
    kind = "Python's module" if name in sys.stdlib_module_names else "the module"
    return (f"{hidden[name]} hides {kind} {name}, which a run may import (a script's folder comes first on the "
            f"import path): rename it, or move it out of {folder or '.'}")


def blas_on_one_thread_unless_set() -> None:
    """In a process of tiledsl's own (a command, a driver run as a script, and so each rank), OpenBLAS
    loads with one thread unless ``OPENBLAS_NUM_THREADS`` says otherwise. A run holds BLAS to one thread
    anyway, its workers being the parallelism (and raises it where it wants more: bench's reference),
    while OpenBLAS starts a thread per core as it loads, which spin a while: cores times ranks of them
    on a node of many ranks, and 0.2 s of CPU in each process on two cores. Called before numpy loads."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def stop_quietly_while_loading(program: str | None = None) -> None:
    """Until its run sets its own handlers (``runtime.entry``), a stopping signal (Ctrl-C, a batch
    scheduler's SIGTERM, SIGHUP) ends a driver (of ``program``) run as a script at once, in one line
    (with ``--json`` the failure object): a Ctrl-C raised inside numpy's or SciPy's import came out as
    their traceback, a SIGTERM killed it without a word. A rank of ``tiledsl run --np`` has its own
    (``runtime/__init__``): that command says the stop. A signal the driver was started ignoring
    (``nohup``'s SIGHUP) stays ignored."""
    import signal  # built in: no file can hide it

    def stopped(signum, frame):
        name = signal.Signals(signum).name
        size = launcher_size()
        # a rank of several, as a rank stopped later says it (or its start-up watcher, MPI starting)
        said = f"tiledsl: rank {launcher_rank()}: stopped by {name} (while it was starting)" \
            if size is not None and size[1] > 1 else f"{sys.argv[0]}: stopped by {name}"
        try:
            os.write(2, f"{said}\n".encode())
            if json_asked() and launcher_rank() == 0:
                os.write(1, f"{early_failure_json(program, f'stopped by {name}')}\n".encode())
        except OSError:  # a closed stream: the driver ends all the same
            pass
        os._exit(128 + signum)

    if os.environ.get("TILEDSL_JOB_DIR"):  # a rank of a job (runtime.world.JOB_DIR_VARIABLE)
        return
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) in (signal.default_int_handler, signal.SIG_DFL):
            signal.signal(signum, stopped)


def stop_if_hiding(folder: str, program: str | None = None) -> None:
    """End a driver (of ``program``) whose ``folder`` holds a file named as a module a run may import
    (:func:`hiding`): one line from the launcher's rank 0 (every rank meets it alike), with ``--json``
    the failure object too, exit status 2; return where there is none."""
    said = hiding(folder, list(sys.modules))
    if said is None:
        return
    if launcher_rank() == 0:
        print(f"{sys.argv[0]}: error: {said}", file=sys.stderr)
        if json_asked():
            print(early_failure_json(program, said), flush=True)
    forget_hiding(folder)
    raise SystemExit(2)


def forget_hiding(folder: str) -> None:
    """Drop from ``sys.modules`` what was imported from files in ``folder`` in place of the modules
    they hide: Python, ending, calls the ``_shutdown`` of whatever is imported as threading, and a
    threading.py without one printed "Exception ignored in: <module 'threading' ...>"."""
    for name, shown in hidden_modules(folder).items():
        file = getattr(sys.modules.get(name), "__file__", None)
        place = os.path.realpath(shown)
        if file and os.path.realpath(file) in (place, os.path.join(place, "__init__.py")):
            del sys.modules[name]


def hidden_modules(folder: str) -> dict:
    """The modules a run may import that files in ``folder`` would be imported in place of, name ->
    the file (or package folder): Python's own (not those built in or frozen, which no file
    replaces), tiledsl (not the one running: a checkout's tiledsl/), and those of the packages
    it requires, directly or not."""
    files = _module_files(folder)
    pythons = [name for name in files if name in sys.stdlib_module_names and name not in sys.builtin_module_names
               and not _frozen(name)]
    # of Python's, those imported so far or that tiledsl imports (lazily, as json): not a kernel module
    # named statistics.py, which no run imports as statistics
    imported = {name for name in pythons if name in sys.modules}
    if len(imported) < len(pythons):
        imported |= set(pythons) & tiledsl_imports()
    hidden = {name: shown for name, shown in files.items()
              if name == "tiledsl" and not _is_this_tiledsl(shown)
              or name in imported
              or name != "tiledsl" and name in RUNTIME_MODULES}
    if any(name in sys.stdlib_module_names for name in hidden):
        return hidden  # said as it is: the records of the installed packages are read with modules of Python's
    others = [name for name in files if name not in hidden and name not in RUNTIME_MODULES
              and name not in sys.stdlib_module_names and _found_past(name, folder)]
    if others:
        required = required_modules()
        hidden.update((name, files[name]) for name in others if name in required)
    return hidden


def tiledsl_imports() -> frozenset:
    """The top-level modules that tiledsl's own files import, anywhere in them (a module imported
    lazily, in a function, included): read from its sources, once."""
    global _TILEDSL_IMPORTS
    if _TILEDSL_IMPORTS is None:
        found = set()
        for folder in _tiledsl_folders():
            for root, _, names in os.walk(folder):
                for name in (n for n in names if n.endswith(".py")):
                    try:
                        with open(os.path.join(root, name), encoding="utf-8") as source:
                            found.update(_imported_by(source.read()))
                    except (OSError, UnicodeDecodeError):
                        continue
        _TILEDSL_IMPORTS = frozenset(found)
    return _TILEDSL_IMPORTS


def _imported_by(text: str):
    """The top-level modules that the import statements of Python source ``text`` name (read line by
    line, not with re, which a file beside the script may hide too)."""
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "import":
            yield from (part.strip().split(".")[0] for part in " ".join(words[1:]).split(" as ")[0].split(","))
        elif len(words) >= 4 and words[0] == "from" and words[2] == "import" and not words[1].startswith("."):
            yield words[1].split(".")[0]


_TILEDSL_IMPORTS: frozenset | None = None


def _tiledsl_folders() -> list:
    """The folders of tiledsl's package and of its runtime (a checkout installed in place keeps the
    runtime beside the package)."""
    package = os.path.dirname(os.path.abspath(__file__))
    runtime = os.path.join(os.path.dirname(package), "runtime")
    return [package] + ([runtime] if not os.path.isdir(os.path.join(package, "runtime")) and os.path.isdir(runtime)
                        else [])


def _module_files(folder: str) -> dict:
    """The top-level modules that files in ``folder`` would be imported as, name -> the file
    (``name.py``, a sourceless ``name.pyc``, an extension module ``name.*.so``) or the package folder
    (``name/__init__.py``), which Python takes first."""
    from importlib.machinery import all_suffixes  # (frozen with the import system: no file replaces it)

    suffixes = sorted(all_suffixes(), key=len, reverse=True)  # .cpython-311-x86_64-linux-gnu.so before .so
    files = {}
    try:
        with os.scandir(folder or ".") as entries:
            for entry in entries:
                suffix = next((s for s in suffixes if entry.name.endswith(s)), None)
                if suffix is not None and entry.is_file():
                    files.setdefault(entry.name[:-len(suffix)], os.path.join(folder, entry.name))
                elif entry.is_dir() and os.path.isfile(os.path.join(entry.path, "__init__.py")):
                    files[entry.name] = os.path.join(folder, entry.name)
    except OSError:  # no such folder (the import path's first entry may be a zip file, or gone)
        return {}
    return {name: shown for name, shown in files.items() if name.isidentifier()}


def _is_this_tiledsl(shown: str) -> bool:
    """Whether ``shown``, a tiledsl.py or tiledsl/ beside a script, is the tiledsl running (a checkout's)."""
    try:
        return os.path.samefile(shown, os.path.dirname(os.path.abspath(__file__)))
    except OSError:
        return False


def _frozen(name: str) -> bool:
    """Whether Python has module ``name`` frozen in (os, io, ...), which it takes before any file."""
    import _imp  # built in

    return _imp.is_frozen(name)


def _found_past(name: str, folder: str) -> bool:
    """Whether a module ``name`` is on the import path other than in ``folder``: one a file there would hide."""
    import importlib.machinery  # loaded with Python, before any script: no file beside one replaces it

    here = os.path.realpath(folder or ".")
    places = [place for place in sys.path if os.path.realpath(place or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec(name, places)
    return spec is not None and spec.has_location  # not a namespace package: a plain folder of that name


_required = None


def required_modules() -> frozenset:
    """The top-level modules of the installed packages that tiledsl requires, directly or not (its
    extras but the tests' too), as their records list them; empty where tiledsl's is not found."""
    global _required
    if _required is None:
        import re
        from importlib import metadata

        names, seen, todo = set(), set(), [("tiledsl", True)]
        while todo:
            project, own = todo.pop()
            key = re.sub(r"[-_.]+", "-", project).lower()
            if key in seen:
                continue
            seen.add(key)
            try:
                distribution = metadata.distribution(project)
            except metadata.PackageNotFoundError:  # an extra not installed
                continue
            if not own:  # tiledsl's records list the folders its install maps (runtime/, ...), not modules of its own
                names.update(_top_level(distribution))
            for requirement in distribution.requires or ():
                project, _, marker = requirement.partition(";")
                extra = re.search(r"""extra\s*==\s*["']([^"']+)""", marker)
                # the extras of the packages it requires are not installed with them, tiledsl's may be
                if extra is None or own and extra.group(1) not in _NOT_RUN_EXTRAS:
                    todo.append((re.match(r"\s*([A-Za-z0-9._-]+)", project).group(1), False))
        _required = frozenset(names)
    return _required


def _top_level(distribution) -> set:
    """The top-level modules of an installed ``distribution``: its top_level.txt (setuptools), and the
    first parts of the paths of its files (numpy's records have no top_level.txt)."""
    names = set((distribution.read_text("top_level.txt") or "").split())
    for file in distribution.files or ():
        first = file.parts[0]
        if len(file.parts) > 1 or first.endswith((".py", ".so", ".pyd")):
            names.add(first.partition(".")[0])
    return {name for name in names if name.isidentifier() and not name.startswith("__")}  # not __pycache__
