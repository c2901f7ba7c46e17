"""The Python API: ``tiledsl.load("programs/cholesky.tile").run(A=array)``.

Usable from a notebook: compile once, run many times on numpy arrays, get numpy
arrays back. Problems surface as :class:`TiledslError` with the same messages
the command line prints.

Matrices and settings never share a name: :meth:`Loaded.run` takes the input
matrices by keyword (``run(A=a, B=b)``) or, for any name at all, in a mapping
given first (``run({"n": a, "check": c})``), and the settings as keyword-only
parameters (``n=``, ``tiles={"nb": 256}``, ``params={"ib": 32}``, ``check=``,
``workers=``, ``seed=``, ``gpus=`` and the GPU settings). ``n`` and the program's
``param`` values the arrays' shapes determine are inferred from them.
"""
from __future__ import annotations

import difflib
import inspect
import os
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from numbers import Integral, Real
from pathlib import Path

import numpy as np

from .drivercontract import source_digest
from .driverload import compile_cached, import_driver, program_path, shadowing
from .runtime.fitting import file_shapes, fit, load_files, load_notes, refuse_missing_loads
from .runtime.options import API, WATCHDOG_RANGE, valid_watchdog
from .runtime.world import UsageError


class TiledslWarning(UserWarning):
    """What the command line would print as a warning: a compiler warning of a loaded program,
    a setting that does nothing."""


class TiledslError(Exception):
    """A program that does not compile, a bad option, or a failed run.

    ``output`` is the :class:`Output` of a run that completed but failed (a check that
    gave no residual, NaN or infinite values left in a matrix), so that its matrices can
    still be inspected; None otherwise.
    """

    def __init__(self, message: str, output: Output | None = None):
        super().__init__(message)
        self.output = output


@dataclass(eq=False)
class Output(Mapping):
    """The matrices a run produced, by name (``output["A"]``, ``"A" in output``, ``dict(output)``),
    with what the run was and how it went.

    ``n``, ``tiles`` and ``params`` are the values it ran with (tuned or default ones
    included); ``seconds`` its wall time (the factorization only), ``gflops`` its rate
    (None without a flop count, ``no_gflops`` then saying why, as the summary line does: "kernel
    fill declares no flop count") and ``tasks`` its task count. ``residuals`` maps each
    checked quantity to its backward error (empty without ``check=True``), ``residual``
    is the largest of them, ``passed`` the check's verdict (None when no check ran).
    ``nonfinite`` counts the NaN and infinite values left in each matrix that has any,
    ``input_nonfinite`` those its input array or file held. ``gpus`` (None without) says
    how a run with GPUs went: its ``streams`` per GPU, ``tasks_by_device``, the GPU tasks
    the host took (``host_took``) and the GPU caches of a run out of core (``out_of_core``,
    as ``--json`` gives them; None in memory). ``notes`` holds what the run said besides
    (also warned as :class:`TiledslWarning`): kernels a GPU ran on the host, a getrf that
    found its matrix exactly singular. ``sources`` says where each tile setting and tuned
    parameter came from (``given``, ``tuned (<cache file>)``, ``program default``), as
    ``--json``'s ``sources`` does; ``workers`` the CPU worker threads. ``program``, ``flops_source``,
    ``check_seconds``, ``total_seconds`` and ``phases`` are ``--json``'s (the program's name, where the
    flop count came from, the check's, the whole call's and each phase's wall seconds). ``errors`` says, one line
    each, why the run failed, as ``--json``'s ``errors`` does (a user check that raised or returned
    no number, residuals not below the threshold; NaN or infinite values left in a matrix, unless
    ``allow_nonfinite``); ``ok`` says the run succeeded as the command line's exit status and
    ``--json``'s ``ok`` do: no error, no check failed. :meth:`Loaded.run` raises a :class:`TiledslError` carrying the output where
    the command line fails such a run for another reason than a residual too large (``passed`` False). :meth:`summary` is all but the matrices, for JSON.
    An output equals only itself (and can be a set's member or a dict's key): its matrices' ``==`` is numpy's, element
    by element, and compare them with ``numpy.array_equal``.
    """

    matrices: dict
    seconds: float
    residual: float | None
    tasks: int
    residuals: dict
    passed: bool | None
    nonfinite: dict
    errors: list = field(default_factory=list)
    input_nonfinite: dict = field(default_factory=dict)
    n: int | None = None
    tiles: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    gflops: float | None = None
    no_gflops: str | None = None
    gpus: dict | None = None
    notes: list = field(default_factory=list)
    sources: dict = field(default_factory=dict)
    workers: int | None = None
    program: str | None = None
    flops_source: str | None = None
    check_seconds: float | None = None
    total_seconds: float | None = None
    phases: dict = field(default_factory=dict)

    # Mapping's == compares the values, arrays whose == has no single truth value: it raised
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self.matrices[name]
        except (KeyError, TypeError):  # an unhashable key too: the same message
            close = difflib.get_close_matches(str(name), self.matrices, n=1) or [
                m for m in self.matrices if m.casefold() == str(name).casefold()]
            raise KeyError(f"the output has no matrix {name!r} (its matrices: {', '.join(self.matrices)})"
                           + (f"; did you mean {close[0]!r}?" if close else "")) from None

    @property
    def ok(self) -> bool:
        """The run succeeded: no error (a check that raised, NaN left in a matrix) and no check failed."""
        return self.passed is not False and not self.errors

    def __iter__(self):
        return iter(self.matrices)

    def __len__(self) -> int:
        return len(self.matrices)

    def summary(self) -> dict:
        """Everything but the matrices, as JSON takes it (a NaN or infinite residual is None)."""
        from .runtime.reporting import finite_or_none

        return finite_or_none({key: getattr(self, key) for key in (
            "program", "n", "tiles", "params", "seconds", "gflops", "no_gflops", "flops_source", "check_seconds",
            "total_seconds", "phases", "tasks", "residual", "residuals", "passed", "ok", "nonfinite", "input_nonfinite", "errors", "gpus",
            "notes", "sources", "workers")})


class Loaded:
    """A compiled ``.tile`` program, ready to run on arrays."""

    def __init__(self, path: str, driver):
        self.path = path
        self.where = Path(path).absolute()  # the file itself, after the process moves to another folder
        self.driver = driver
        self.program = driver.PROGRAM

    def __reduce__(self):
        # by its path, loaded again where it is unpickled (a multiprocessing pool's worker): a driver is a module
        return load, (str(self.where),)

    def __repr__(self) -> str:
        return f"<tiledsl program {self.program.name} from {self.path}>"

    @property
    def matrices(self) -> list[str]:
        return [d.name for d in self.program.matrices]

    def run(self, arrays=None, /, *more, n: int | None = None, tiles: dict | None = None, params: dict | None = None,
            check: bool = False, workers: int | None = None, seed: int | None = None, gpus: int = 0,
            gpu_backend: str | None = None, gpu_memory: int | str | None = None, gpu_ratio=None,
            gpu_streams: int = 1, host_takes: bool | None = None, allow_nonfinite: bool = False,
            check_finite: bool = False, watchdog: float | None = None, tuned: bool = True, **matrices) -> Output:
        """Run the program; matrices given as arrays are copied in, every matrix comes back.

        ``arrays`` (a mapping, positional) and the keywords not listed here give the
        input matrices by name; a matrix named like a setting (``n``, ``check``...)
        goes in the mapping. ``tiles`` sets the tiling (``{"nb": 256}`` or
        ``{"B": ..., "b": ..., "s": ...}``), ``params`` the program's own parameters.
        ``n`` and the params left out are inferred from the arrays' shapes, and those of
        the files the program's ``load`` matrices read, where these determine them
        (:mod:`.runtime.fitting`); a param they do not determine keeps its default.
        Numpy numbers are taken as the Python numbers they hold.
        ``gpus`` GPUs of ``gpu_backend`` ('emulated', the default, or 'cupy') take their
        share of the tiles, as ``--gpus`` does; ``gpu_memory`` (bytes, or ``"512M"``),
        ``gpu_ratio`` (``"1:2"`` or ``(1, 2)``), ``gpu_streams`` and ``host_takes`` are
        ``--gpu-memory``, ``--gpu-ratio``, ``--gpu-streams`` and ``--host-takes on|off``.
        ``watchdog`` is ``--watchdog`` (seconds without a task completing before the run is
        stopped; 0 turns it off; default automatic). The run is one rank (several ranks are
        ``tiledsl run --np`` or a compiled driver under MPI). ``allow_nonfinite`` takes NaN
        or infinite values left in a matrix for results rather than a failure
        (``--allow-nonfinite``); ``check_finite`` stops the run at the first task that writes one, naming
        it (``--check-finite``: each task's outputs are scanned). As ``tiledsl run`` does, the run takes this machine's tuned
        tile sizes (``tiledsl tune``) where ``tiles`` gives none, and its tuned GPU ratio and
        inner blocks; ``tuned=False`` ignores them (``--no-tune``).
        """
        if more:  # run(A, B): Python's own TypeError named no fix
            raise TiledslError(f"run() takes the matrices by name, got {1 + len(more)} positional arguments: "
                               f"run(A=..., B=...), or one mapping, run({{'A': ...}})")
        n, workers, seed, gpus, gpu_memory, gpu_streams, host_takes, watchdog = (
            _plain(value) for value in (n, workers, seed, gpus, gpu_memory, gpu_streams, host_takes, watchdog))
        gpu_settings = dict(gpu_memory=gpu_memory, gpu_ratio=gpu_ratio, gpu_streams=gpu_streams,
                            host_takes=host_takes)
        given = self._inputs(arrays, matrices, dict(n=n, tiles=tiles, params=params, check=check, workers=workers,
                                                    seed=seed, gpus=gpus, gpu_backend=gpu_backend,
                                                    allow_nonfinite=allow_nonfinite, check_finite=check_finite,
                                                    watchdog=watchdog, tuned=tuned, **gpu_settings))
        tiles, params = self._tiles(tiles), self._params(params)
        self._check_settings(n, workers, seed)
        for name, flag in (("check", check), ("allow_nonfinite", allow_nonfinite), ("check_finite", check_finite),
                           ("tuned", tuned)):
            if not isinstance(flag, (bool, np.bool_)):
                raise TiledslError(f"{name} must be True or False, got {_shown(flag)}")
        if allow_nonfinite and check_finite:
            raise TiledslError("allow_nonfinite=True and check_finite=True contradict each other: give one")
        _check_gpus(gpus, gpu_backend)
        gpu_settings = _gpu_settings(gpus, **gpu_settings)
        _check_watchdog(watchdog)
        if check and self.program.check is None:
            _warn(f"program {self.program.name} declares no check: check=True has nothing to verify")
        settings = dict(n=n, tiles=tiles, sets=params, workers=workers, seed=seed, check=bool(check), gpus=gpus,
                        gpu_backend=gpu_backend or "emulated", allow_nonfinite=bool(allow_nonfinite),
                        check_finite=bool(check_finite), watchdog=watchdog, **gpu_settings)
        changed = self._changed_source()
        if changed:
            _warn(changed)
        result, notes = self._execute(given, settings, bool(tuned))
        try:
            return self._output(result, notes, bool(allow_nonfinite))
        except MemoryError as error:  # the result's arrays, assembled from its tiles
            raise TiledslError(f"rank 0: {_shortage(error, settings, given)}") from None

    def _changed_source(self) -> str | None:
        """A warning when the ``.tile`` file has changed, or is gone, since it was loaded (as a compiled driver
        warns when its own has changed): the run is of the program as it was then."""
        try:
            if self.program.source_digest in (None, source_digest(self.where.read_bytes())):
                return None
        except FileNotFoundError:
            module = self.program.kernel_module
            if module and not (self.where.parent / module).exists():  # the run fails, saying both are gone
                return None
            return (f"{self.path} is no longer there (moved or removed since it was loaded): the run is of the "
                    f"program as it was then")
        except OSError:  # unreadable now: nothing to compare
            return None
        return (f"{self.path} has changed since it was loaded: the run is of the program as it was then (load it "
                f"again: tiledsl.load({self._named_from_here()!r}))")

    def _named_from_here(self) -> str:
        """The program's path as given to load, or its absolute path where the process has moved to
        another folder since (the path given names another file from there)."""
        return self.path if Path(self.path).absolute() == self.where else str(self.where)

    def _execute(self, given: dict, settings: dict, tuned: bool) -> tuple:
        """The run of the driver with ``settings`` (Options' fields) on the ``given`` arrays, and its
        notes (each also a warning); its failures as :class:`TiledslError`."""
        from .runtime import Options, execute
        from .runtime.launch import run_notes
        from .runtime.engine import TaskFailure
        from .runtime.layout import check_settings, use_tuned
        from .runtime.userkernels import KernelModuleNotFound
        from .runtime.world import RankError

        try:
            check_settings(self.driver, Options(n=settings["n"], tiles=settings["tiles"], sets=settings["sets"],
                                                spelling=API))
            options = Options(**settings, spelling=API)
            use_tuned(self.driver, options, tuned, warn=_warn)
            # after the tuned values: the arrays are fitted at the tiles the run will use
            options.n, options.sets = fit(self.driver, self._shapes(given, options.n is not None), options)
            result = execute(self.driver, options, given, warn=_warn)
        except KernelModuleNotFound as error:
            raise TiledslError(self._module_not_found(error)) from None
        except UsageError as error:
            raise TiledslError(str(error)) from None
        except TaskFailure as failure:
            where = f" ({Path(self.program.source).name}:{failure.line})" if failure.line else ""
            raise TiledslError(f"rank {failure.rank}{where}: {failure}") from failure.__cause__  # a kernel's
        except RankError as error:  # the user's exception where it has one (a kernel module's, as it loaded)
            raise TiledslError(f"rank 0: {error}") from error.__cause__
        except (MemoryError, RuntimeError) as error:  # as the command line says them: out of memory, no thread
            said = _shortage(error, settings, given)
            if said is None:
                raise
            raise TiledslError(f"rank 0: {said}") from None
        notes = run_notes(self.driver, options, result, [result.stats])
        for note in notes:
            _warn(note)
        return result, notes

    def _module_not_found(self, error: Exception) -> str:
        """Why the kernel module was not found, said to a user of the API, who made no driver: where the
        ``.tile`` file is gone since it was loaded, the program was moved (or removed)."""
        if self.where.exists():
            return str(error)
        return (f"{self._named_from_here()} is no longer there (moved or removed since the program was loaded), nor is "
                f"its kernel module {self.program.kernel_module} beside it: load the program again from where it is now")

    def _output(self, result, notes: list, allow_nonfinite: bool) -> Output:
        """The :class:`Output` of a completed run; a :class:`TiledslError` carrying it where the
        command line would fail the run."""
        matrices = {name: m.assemble() for name, m in result.matrices.items()}
        from .runtime.reporting import check_reasons, nonfinite_lines

        nonfinite = [] if allow_nonfinite else nonfinite_lines(
            result.nonfinite, " (check_finite=True stops at the first task that writes one)",
            from_inputs=result.input_nonfinite, allow="; allow_nonfinite=True takes them for results")
        output = Output(matrices, result.seconds, result.residual, result.tasks, dict(result.residuals),
                        result.passed, dict(result.nonfinite), check_reasons(result) + nonfinite,
                        dict(result.input_nonfinite), notes=notes, **self._ran_with(result))
        for matrix in result.matrices.values():
            matrix.discard()
        # the command line fails this run for more than a residual too large (the check's verdict, passed
        # False): so does the API, the output kept on the error
        if result.errors or nonfinite:
            raise TiledslError("; ".join(output.errors), output)
        return output

    def _shapes(self, given: dict, sized: bool) -> dict:
        """Each input's (rows, cols): the arrays', and those of the files the program's ``load``
        matrices read (as the command line fits them); with ``n`` given (``sized``), a file that
        cannot be read is left out, for the run to say against its matrix."""
        files = {name: path for name, path in load_files(self.driver).items() if name not in given}
        try:
            refuse_missing_loads(self.driver, given)
            shapes = file_shapes(files, load_notes(self.driver, given))
        except UsageError:
            if not sized:
                raise
            shapes = {}
        return {**shapes, **{name: array.shape for name, array in given.items()}}

    def _ran_with(self, result) -> dict:
        """Output's n, tiles, params and gflops of a run's ``result``."""
        from .runtime.options import tile_values
        from .runtime.reporting import gflops, no_rate_reason

        values, stats = result.params, result.stats
        gpus = None if not result.gpus else {
            "streams": result.gpu_streams, "tasks_by_device": stats["tasks_by_device"], "host_took": stats["host_took"],
            "out_of_core": stats["out_of_core"]}
        rate, source = gflops(self.program, result.matrices, [stats], result.seconds)
        return dict(program=result.program, n=values["n"], tiles=tile_values(values, self.program.tiling.kind),
                    params={name: values[name] for name in self.program.params if name in values},
                    gflops=rate, no_gflops=no_rate_reason([stats]) if rate is None else None,
                    flops_source=source, gpus=gpus, sources=dict(result.sources), workers=result.workers,
                    check_seconds=result.check_seconds, total_seconds=result.total_seconds, phases=dict(result.phases))

    # ------------------------------------------------------------ the arguments

    def _inputs(self, arrays, keywords: dict, settings: dict) -> dict:
        """The input matrices by name, as 2-D float arrays, from the mapping and the keywords."""
        if arrays is not None and not hasattr(arrays, "keys"):
            raise TiledslError(f"run()'s positional argument is a mapping of matrices by name, got "
                               f"{type(arrays).__name__}; the size is a keyword: run(n=...)")
        arrays = dict(arrays or {})
        twice = sorted(set(arrays) & set(keywords))
        if twice:
            raise TiledslError(f"matrix {twice[0]} is given twice (in the mapping and as {twice[0]}=)")
        for name, value in settings.items():  # a matrix named like a setting, given as that setting
            if name in self.matrices and np.ndim(value) == 2:
                raise TiledslError(f"{name}= is a setting of run(); give matrix {name} in the mapping: "
                                   f"run({{{name!r}: array}})")
        given = {**arrays, **keywords}
        for name in given:
            self._check_matrix_name(name)
        return {name: self._array(name, value) for name, value in given.items()}

    def _check_matrix_name(self, name: str) -> None:
        from .runtime.options import TILE_SETTINGS, TILING_SETTINGS

        program, workspaces = self.program, [d.name for d in self.program.workspaces]
        if name in self.matrices:
            return
        if not isinstance(name, str):  # 3 or None: no name, nor a close one
            raise TiledslError(f"{program.name} has no matrix {name!r}: matrices are named by strings "
                               f"(its matrices: {', '.join(self.matrices)})")
        if name in workspaces:
            raise TiledslError(f"{name} is a workspace of {program.name}, which starts as zeros; only its "
                               f"matrices ({', '.join(self.matrices)}) take arrays")
        settings = TILING_SETTINGS[program.tiling.kind]
        if name in settings:
            raise TiledslError(f"{program.name} has no matrix {name}: tile settings go in tiles=, "
                               f"e.g. run(..., tiles={{{name!r}: ...}})")
        if name in program.params:
            raise TiledslError(f"{program.name} has no matrix {name}: it is a parameter, set with "
                               f"params={{{name!r}: ...}}")
        if name in COMMAND_LINE_ONLY:
            raise TiledslError(f"{program.name} has no matrix {name}: {COMMAND_LINE_ONLY[name]}")
        close = difflib.get_close_matches(name, RUN_SETTINGS, n=1)
        shown = name if name.isidentifier() else repr(name)  # '' or 'A ' would read as no name, or as A
        raise TiledslError(f"{program.name} has no matrix {shown} (its matrices: {', '.join(self.matrices)})"
                           + (f"; its {program.tiling.kind} tiling takes tiles={{{settings[0]!r}: ...}}"
                              if name in TILE_SETTINGS else
                              f": {name} is a setting of run(), given as run(..., {name}=...)" if name in RUN_SETTINGS
                              else f", and run() has no setting {name}: did you mean {close[0]}=?" if close else ""))

    @staticmethod
    def _array(name: str, value) -> np.ndarray:
        """``value`` as a float64 array, refused where the conversion would change a value."""
        if value is None:
            raise TiledslError(f"matrix {name}: expected a 2-D array, got None")
        if isinstance(value, np.ma.MaskedArray):
            raise TiledslError(f"matrix {name}: a masked array, whose masked entries would be taken as they "
                               f"are: pass {name}.filled(value) to say what they are")
        if isinstance(value, (str, Path)):
            raise TiledslError(f"matrix {name}: expected a 2-D array, got the text {str(value)!r}; for a "
                               f".npy file, pass np.load(...) (or use --input on the command line)")
        if not isinstance(value, np.ndarray) and hasattr(value, "toarray"):
            raise TiledslError(f"matrix {name}: a sparse matrix ({type(value).__name__}); tiledsl takes dense "
                               f"arrays: pass {name}.toarray()")
        try:
            given = np.asarray(value)
        except (TypeError, ValueError) as error:  # e.g. ragged nested lists
            raise TiledslError(f"matrix {name}: not an array of numbers ({error})") from None
        _check_kind(name, given)
        try:
            with np.errstate(over="ignore"):  # a value float64 cannot hold is refused just below
                array = given.astype(np.float64)
        except (TypeError, ValueError) as error:
            complex_at = next((where for where in np.ndindex(given.shape) if isinstance(given[where], complex)), None) \
                if given.dtype.kind == "O" else None
            if complex_at is not None:  # as an array of complex128 is refused
                raise TiledslError(f"matrix {name}: element {tuple(map(int, complex_at))} = {given[complex_at]} is "
                                   f"complex; tiledsl computes in float64: pass the real parts") from None
            raise TiledslError(f"matrix {name}: not an array of numbers ({error})") from None
        except OverflowError:  # a Python integer past float64's range, in an object array
            raise TiledslError(f"matrix {name}: {_beyond_float64(given)}") from None
        if given.dtype.kind in "iuO" or given.dtype.itemsize > 8:  # may round: compare exactly
            _check_exact(name, given, array)
        if array.ndim != 2:
            hint = f" (a vector is a matrix of one column: {name}.reshape(-1, 1))" if array.ndim == 1 else ""
            raise TiledslError(f"matrix {name}: expected a 2-D array, got "
                               f"{'shape ' + str(array.shape) if array.ndim else repr(value)}{hint}")
        if 0 in array.shape:  # as an empty --input file is
            raise TiledslError(f"matrix {name}: the array is empty ({array.shape[0]}×{array.shape[1]}): a matrix has "
                               f"at least one row and one column")
        return array

    def _tiles(self, tiles) -> dict:
        from .runtime.options import TILING_SETTINGS

        tiles = _mapping("tiles", tiles, "{'nb': 256}")
        kind = self.program.tiling.kind
        takes = TILING_SETTINGS[kind]
        for name, value in tiles.items():
            if name not in takes:
                param = (f"{name} is a parameter of {self.program.name}: give params={{{name!r}: ...}}; "
                         if name in self.program.params else "")
                raise TiledslError(f"tiles={{{name!r}: ...}}: {param}{self.program.name}'s {kind} tiling takes "
                                   f"{', '.join(takes)}")
            _check_int(f"tiles[{name!r}]", value, 1)
        return {name: _plain(value) for name, value in tiles.items()}

    def _params(self, params) -> dict:
        params = _mapping("params", params, "{'ib': 32}")
        for name, value in params.items():
            if name not in self.program.params:
                from .runtime.layout import setting_advice
                from .runtime.options import API, TILE_SETTINGS

                if name == "n" or name in TILE_SETTINGS:
                    raise TiledslError(f"params={{{name!r}: ...}}: {name} is not a parameter of the program: "
                                       + setting_advice(self.program, name, API))
                if name in {decl.name for decl in self.program.matrices}:
                    raise TiledslError(f"params={{{name!r}: ...}}: {name} is a matrix of {self.program.name}, "
                                       f"not a parameter: give it as run({name}=array)")
                has = f" (it has {', '.join(self.program.params)})" if self.program.params else ""
                raise TiledslError(f"params={{{name!r}: ...}}: {self.program.name} has no parameter {name}{has}")
            if isinstance(value, bool) or not isinstance(value, (Integral, Real, str)):
                raise TiledslError(f"params[{name!r}] must be a number (or one character, for a char parameter), "
                                   f"got {_shown(value)}")
        return {name: _number(name, value) for name, value in params.items()}

    @staticmethod
    def _check_settings(n, workers, seed) -> None:
        if n is not None:
            _check_int("n", n, 1)
        from .runtime.options import MAX_WORKERS, SEEDS

        if workers is not None:
            _check_int("workers", workers, 1)
            if workers > MAX_WORKERS:
                raise TiledslError(f"workers must be at most {MAX_WORKERS}, got {workers}")

        if seed is None:  # the default seed
            return
        _check_int("seed", seed, 0)
        if seed >= SEEDS:
            raise TiledslError(f"seed must be below 2^64, got {seed}")


def _check_kind(name: str, array: np.ndarray) -> None:
    """Refuse the dtypes whose conversion to float64 loses what they say (complex, bool,
    text, dates): tiledsl computes in float64, and a silent cast would compute on other values."""
    kind = array.dtype.kind
    if kind == "c":
        raise TiledslError(f"matrix {name}: complex values (dtype {array.dtype}); tiledsl computes in float64: "
                           f"pass {name}.real to drop the imaginary part")
    if kind not in "fiuO":
        hint = f": pass {name}.astype(float) for 0 and 1" if kind == "b" else ""
        raise TiledslError(f"matrix {name}: dtype {array.dtype} is not a number type; tiledsl takes arrays "
                           f"of floats or integers{hint}")


def _beyond_float64(given: np.ndarray) -> str:
    """Which element of an object array float64 cannot hold (an integer of 309 digits or more)."""
    for where in np.ndindex(given.shape):
        try:
            float(given[where])
        except OverflowError:
            from .runtime.options import long_number

            return (f"element {tuple(int(i) for i in where)} = {long_number(given[where])} is beyond float64's "
                    f"range (about ±1.8e308)")
    return "a value is beyond float64's range (about ±1.8e308)"


def _check_exact(name: str, given: np.ndarray, array: np.ndarray) -> None:
    """Refuse integers (or other values) that float64 does not hold exactly, and text."""
    if given.dtype.kind == "O":  # each element by its own kind: an integer of any width compared as a Python int
        exact = np.asarray(_exact_object(given, array), dtype=bool)
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            exact = np.asarray(array.astype(given.dtype) == given, dtype=bool)
    if not exact.all():
        where = tuple(int(i) for i in np.argwhere(~exact)[0])
        value, nearest = given[where], str(array[where])
        if value is None:
            raise TiledslError(f"matrix {name}: element {where} is None, not a number")
        if isinstance(value, (str, bytes, bool, np.bool_)):  # refused as arrays of them are
            kind = "bytes" if isinstance(value, bytes) else "text" if isinstance(value, str) else "a bool"
            raise TiledslError(f"matrix {name}: element {where} = {value!r} is {kind}, not a number")
        shown = str(value) if str(value) != nearest else repr(value)  # a long double prints as its nearest double
        raise TiledslError(f"matrix {name}: element {where} = {shown} is not exactly a float64 (nearest {nearest})")


def _exact(value, nearest: float) -> bool:
    """Whether float64 ``nearest`` is exactly ``value``, an element of an object array: an integer
    (numpy's too) as a Python int, which compares with a float exactly; a NaN as NaN; never text, nor
    a bool (which an array of bools is not either)."""
    if isinstance(value, (str, bytes, bool, np.bool_)):
        return False
    if isinstance(value, Integral):
        return int(value) == nearest
    return bool(value == nearest) or (value != value and nearest != nearest)


_exact_object = np.frompyfunc(_exact, 2, 1)  # elementwise, for any Python object


def _check_gpus(gpus, gpu_backend) -> None:
    _check_int("gpus", gpus, 0)
    if gpu_backend not in (None, "emulated", "cupy"):
        raise TiledslError(f"gpu_backend must be 'emulated' or 'cupy', got {gpu_backend!r}")
    if gpu_backend is not None and not gpus:  # as the command line's warning: kept for scripts varying gpus=
        _warn(f"gpu_backend={gpu_backend!r} does nothing without gpus=: the run uses no GPU")


def _check_watchdog(watchdog) -> None:
    if watchdog is not None and (isinstance(watchdog, bool) or not isinstance(watchdog, Real)
                                 or not valid_watchdog(watchdog)):
        raise TiledslError(f"watchdog {WATCHDOG_RANGE}, got {watchdog!r}")


def _gpu_settings(gpus: int, gpu_memory, gpu_ratio, gpu_streams, host_takes) -> dict:
    """Options' GPU settings from run()'s, each checked as the command line checks its option."""
    from .runtime.distribution import parse_ratio
    from .runtime.options import byte_size

    gpu_streams = 1 if gpu_streams is None else gpu_streams  # None: the default, as for the other settings
    _check_int("gpu_streams", gpu_streams, 1)
    host_takes = {"on": True, "off": False}.get(host_takes, host_takes) if isinstance(host_takes, str) else host_takes
    if host_takes not in (None, True, False):
        raise TiledslError(f"host_takes must be True ('on'), False ('off') or None (as tuned), got {host_takes!r}")
    given = [name for name, value in (("gpu_memory", gpu_memory), ("gpu_ratio", gpu_ratio),
                                      ("host_takes", host_takes or None)) if value is not None]
    given += ["gpu_streams"] if gpu_streams != 1 else []
    if given and not gpus:
        raise TiledslError(f"{given[0]}= needs gpus= (at least 1 GPU)")
    if host_takes is False and not gpus:  # as the command line's warning: the host takes every task anyway
        _warn("host_takes=False does nothing without gpus=: the run uses no GPU")
    if isinstance(gpu_memory, str):
        try:
            gpu_memory = byte_size(gpu_memory, "gpu_memory")
        except UsageError as error:
            raise TiledslError(str(error)) from None
    elif gpu_memory is not None:
        _check_int("gpu_memory", gpu_memory, 1)
    if gpu_ratio is not None:
        if isinstance(gpu_ratio, (tuple, list)) and len(gpu_ratio) == 2:
            for part in gpu_ratio:
                _check_int("each of gpu_ratio's two numbers", part, 0)
            gpu_ratio = f"{gpu_ratio[0]}:{gpu_ratio[1]}"
        if not isinstance(gpu_ratio, str):
            raise TiledslError(f"gpu_ratio must be 'H:G' or (H, G), got {gpu_ratio!r}")
        try:
            gpu_ratio = parse_ratio(gpu_ratio, keep_on_host="leave out gpus=")
        except ValueError as error:
            raise TiledslError(str(error)) from None
    return dict(gpu_memory=gpu_memory, gpu_ratio=gpu_ratio, gpu_streams=gpu_streams, host_takes=host_takes)


def _plain(value):
    """A numpy scalar as the Python int, float, str or bool it holds (what JSON takes, as
    :meth:`Output.summary` gives the settings back); any other value as it is."""
    return value.item() if isinstance(value, np.generic) else value


def _shown(value) -> str:
    """``value`` for a message: an array by its shape (its repr runs to many lines), any other value
    by its repr, cut short."""
    if isinstance(value, np.ndarray) and value.ndim:
        return f"an array of shape {value.shape}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _number(name: str, value):
    """A param's value as the Python int or float it stands for (a numpy number, a
    ``Fraction``: what a kernel receives, and JSON takes), or its text."""
    if isinstance(value, str):
        return str(value)  # (numpy's str_ as Python's: what a char parameter's kernel receives)
    if isinstance(value, Integral):
        return int(value)
    try:
        return float(value)
    except OverflowError:
        raise TiledslError(f"params[{name!r}] = {value!r} is beyond float64's range (about ±1.8e308)") from None


def _mapping(name: str, value, example: str) -> dict:
    """``value`` (a mapping of names, or None for none) as a dict."""
    if value is None:
        return {}
    if not hasattr(value, "keys"):
        raise TiledslError(f"{name}= is a mapping of names to values, e.g. {name}={example}, got {_shown(value)}")
    return dict(value)


def _check_int(name: str, value, least: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TiledslError(f"{name} must be an integer, got {_shown(_plain(value))}")
    if least is not None and value < least:
        raise TiledslError(f"{name} must be at least {least}, got {value}")


def load(path) -> Loaded:
    """Compile the ``.tile`` program at ``path`` (or the shipped program of that name, as the
    commands take it: ``load("cholesky")``; cached by content) and load its driver."""
    if isinstance(path, (bytes, os.PathLike)):
        path = os.fsdecode(os.fspath(path))
    if not isinstance(path, str):
        raise TiledslError(f"load takes a .tile file's path (a str or a pathlib.Path) or a shipped program's name, "
                           f"got {type(path).__name__} {path!r}")
    note = shadowing(path)
    if note:  # from the user's call of tiledsl.load
        _warn(note)
    try:
        path = program_path(path, "give its matrix to run(), as run(NAME=numpy.load({name!r}))")
        compiled = compile_cached(path)
    except UsageError as error:  # no such program, no cache to write the driver in
        raise TiledslError(str(error)) from None
    if compiled.driver is None:
        raise TiledslError(compiled.report)
    if compiled.report:  # warnings only: errors gave no driver
        _warn(compiled.report)
    return Loaded(str(path), import_driver(compiled.driver, f"tiledsl_driver_{Path(path).stem}"))


#: Options of ``tiledsl run`` that run() has no setting for, and what to do instead
_RANKS = "a run from Python is one rank: several ranks are `tiledsl run --np P` or a compiled driver under MPI"
COMMAND_LINE_ONLY = {
    "ranks": _RANKS, "np": _RANKS, "grid": _RANKS,
    **{name: f"--{name.replace('_', '-')} is an option of `tiledsl run` that run() does not take"
       for name in ("trace", "priorities", "broadcast", "window", "input", "output")}}

#: run()'s settings: every other keyword names a matrix
RUN_SETTINGS = [name for name, parameter in inspect.signature(Loaded.run).parameters.items()
                if parameter.kind is inspect.Parameter.KEYWORD_ONLY]


def _shortage(error: BaseException, settings: dict, given: dict) -> str | None:
    """Memory (or a thread) that ran out, said with what helps a run of these ``settings`` on the
    ``given`` arrays (see :func:`.runtime.errors.shortage`); None for another error."""
    from .runtime.errors import shortage
    from .runtime.resources import shortage_remedies

    return shortage(error, shortage_remedies(False, settings["check"], bool(given), API))


def _warn(text: str) -> None:
    """A :class:`TiledslWarning` shown at the line of the caller's code that called tiledsl, however
    deep in tiledsl (the runtime's tuning cache, a run's notes) it is said."""
    from . import runtime

    own = tuple(os.path.dirname(os.path.abspath(file)) + os.sep for file in (runtime.__file__, __file__))
    level, frame = 2, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(own):
        level, frame = level + 1, frame.f_back
    warnings.warn(text, TiledslWarning, stacklevel=level)
