"""A run's shape: its parameters, the placement of tiles on ranks and devices, the
tiled matrices, and the tile sizes taken from this machine's ``tiledsl tune`` cache."""
from __future__ import annotations

import difflib
import math
from pathlib import Path
from dataclasses import replace

from ..language import INT64_MAX, TILING_SETTINGS, hybrid_slices_advice, hybrid_slices_fit, tiling_of
from . import tuning
from .distribution import BlockCyclic, Hybrid
from .errors import value_text
from .geometry import Geometry
from .matrix import TiledMatrix
from .options import TILE_SETTINGS, Options, Params, SetText, Spelling, long_number, read_number, read_setting
from .resources import every_rank_has_tiles
from .userkernels import kernel_module_digest
from .world import UsageError, environment_switch, grid_for


def make_params(driver, options: Options, requirements: bool = True) -> Params:
    """The program's parameters: run options over tiling defaults, then the driver's defaults;
    a usage error when they break one of the program's ``require``s (unless ``requirements`` is
    False: a probe of the program's formulas, not a run)."""
    program = driver.PROGRAM
    settings = TILING_SETTINGS[program.tiling.kind]
    extra = set(options.tiles) - set(settings)
    if extra:
        raise UsageError(f"--{sorted(extra)[0]} does not apply to {program.tiling.kind} tiling "
                         f"(it takes {', '.join('--' + s for s in settings)})")
    values = {"n": options.n, "nb": None, "B": None, "b": None, "s": None}
    values.update(program.tiling.defaults)
    values.update(options.tiles)
    check_set_names(program, options)
    if options.n < 1:
        raise UsageError(f"{options.spelling.setting('n')} must be at least 1, got {options.n}")
    if options.n > INT64_MAX:
        raise UsageError(f"{options.spelling.setting('n')} must be at most 2**63 - 1 (the 64-bit range of every "
                         f"integer a program computes), got {long_number(options.n)}")
    for name, value in options.tiles.items():  # else said as a matrix's tiles, at the program's line
        if isinstance(value, int) and not 1 <= value <= INT64_MAX:
            raise UsageError(f"{options.spelling.tile(name)} must be from 1 to 2**63 - 1, got {long_number(value)}")
    defaults = _resolved(driver, {**values, **dict.fromkeys(program.params)})
    sets = {name: _setting(name, value, defaults[name], options.spelling) for name, value in options.sets.items()}
    values.update({name: sets.get(name) for name in program.params})
    _check_hybrid_slices(program, values, options)
    params = _resolved(driver, values)
    _check_defaults_in_range(driver.PROGRAM, params, set(sets), options.spelling)
    if requirements:
        _check_requirements(driver, params, options)
    return params


def _check_hybrid_slices(program, values: dict, options: Options) -> None:
    """A hybrid tiling's last slice of a block is not empty: (s-1)·b < B, said of the settings as
    they were given (an option, or the program's default), before any matrix is made (it was said
    as the first matrix's error, at its line)."""
    B, b, s = (values.get(name) for name in ("B", "b", "s"))
    if program.tiling.kind != "hybrid" or not all(isinstance(v, int) and v >= 1 for v in (B, b, s)) \
            or hybrid_slices_fit(B, b, s):
        return
    given = [name for name in ("B", "b", "s") if name in options.tiles]
    defaults = [name for name in ("B", "b", "s") if name not in given]

    def named(names):  # "B, b and s"
        return " and ".join(filter(None, [", ".join(names[:-1]), names[-1]]))
    plural = "s" * (len(defaults) > 1)
    whence = "; ".join(filter(None, [f"{named(given)} given" if given else "",
                                     f"{named(defaults)} the program's default{plural}" if defaults else ""]))
    raise UsageError(f"hybrid tiling needs (s-1)*b < B, so that the last slice of a block is not empty: "
                     f"({s}-1)*{b} = {(s - 1) * b} with B={B} ({whence}); use {hybrid_slices_advice(B, b, s)}")


def setting_advice(program, name: str, spelling: Spelling) -> str:
    """How to give ``name`` (the size, or a tile setting) to a run of ``program``: as its option or
    argument, or, for a setting of the other tiling (b of a uniform one), the settings its own takes."""
    if name == "n":
        return f"give it as {spelling.n}" if not spelling.api else "give run(n=...)"
    kind = program.tiling.kind
    own = TILING_SETTINGS[kind]
    if name in own:
        return f"give {spelling.tile(name)}" if spelling.api else f"give it as {spelling.tile(name)}"
    other = tiling_of(name)
    if spelling.api:
        takes = "tiles={" + ", ".join(f"{setting!r}: ..." for setting in own) + "}"
    else:
        options = [spelling.tile(setting) for setting in own]
        takes = options[0] if len(options) == 1 else ", ".join(options[:-1]) + " and " + options[-1]
    return f"{name} is a setting of {other} tiling, and {program.name}'s tiling is {kind}, which takes {takes}"


def check_set_names(program, options: Options) -> None:
    """A usage error for a ``--set`` that names no parameter of the program: the size or a tile
    setting (an option of its own), or a name it lacks (said with the nearest one it has)."""
    unknown = set(options.sets) - set(program.params)
    if not unknown:
        return
    name = sorted(unknown)[0]
    if name == "n" or name in TILE_SETTINGS:
        raise UsageError(f"--set {name}: {name} is not a parameter of {program.name}: "
                         f"{setting_advice(program, name, options.spelling)}")
    if name in {decl.name for decl in program.matrices}:
        raise UsageError(f"--set {name}: {name} is a matrix of {program.name}, not a parameter: "
                         f"give its values as --input {name}=FILE.npy")
    if name in {decl.name for decl in program.workspaces}:
        raise UsageError(f"--set {name}: {name} is a workspace of {program.name}, not a parameter "
                         f"(a workspace starts as zeros)")
    # names differing in case only (PF for pf) are close whatever their length
    close = [p for p in program.params if p.lower() == name.lower()] or \
        difflib.get_close_matches(name, program.params, n=1, cutoff=0.6)
    raise UsageError(f"--set {name}: {program.name} has no parameter of that name"
                     + (f" (did you mean {close[0]}?)" if close else
                        f" (it has {', '.join(program.params)})" if program.params else ""))


def _check_defaults_in_range(program, params: Params, given: set, spelling: Spelling) -> None:
    """A :class:`UsageError` for a param whose default came out of range with these values: a
    float's inf or nan (``n * 1.0e306`` at n = 1000), an integer's beyond 64 bits: values ``--set``
    refuses would reach the kernels unsaid."""
    for position, name in enumerate(program.params):
        value = params[name]
        if name in given:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            problem = ("not a number (nan)" if math.isnan(value) else f"{value}, beyond float64's range "
                                                                      f"(about ±1.8e308)")
        elif isinstance(value, int) and not -INT64_MAX <= value <= INT64_MAX:
            problem = f"{long_number(value)}, beyond the 64-bit range (±{INT64_MAX}, 2**63 - 1)"
        else:
            continue
        known = ", ".join(f"{key} = {params[key]}" for key in ("n", *TILING_SETTINGS[program.tiling.kind],
                                                             *program.params[:position]) if params[key] is not None)
        raise UsageError(f"the default of param {name} is {problem} with {known}: give it with "
                         f"{spelling.param(name)}, or check its formula")


#: what the program's formulas raise for values they cannot take: a division by 0 (ArithmeticError),
#: a negative exponent of '**' (ValueError, the driver's _power), a result beyond 64 bits (OverflowError)
FORMULA_ERRORS = (ArithmeticError, ValueError)


def _resolved(driver, values: dict) -> Params:
    """``driver.resolve_params``: the program's params left None given their defaults; a
    :class:`UsageError` naming the param whose default cannot be computed with these values."""
    params = Params(values)
    try:
        return driver.resolve_params(params)
    except FORMULA_ERRORS as error:
        # resolve_params fills the params in place, in their order: the first still None failed
        program = driver.PROGRAM
        name = next(name for name in program.params if params[name] is None)
        before = program.params[:program.params.index(name)]
        known = ", ".join(f"{key} = {params[key]}" for key in ("n", *TILING_SETTINGS[program.tiling.kind], *before)
                          if params[key] is not None)
        raise UsageError(f"the default of param {name} cannot be computed with {known}: {error}") from None


def check_settings(driver, options: Options) -> None:
    """A usage error for a value of ``options.sets`` of another type than its parameter's, before
    anything is sized. With ``options.n`` None (not known yet), the defaults are those of two probe
    sizes, and one that changes with n is said as ``n``, or as computed from it."""
    sizes = PROBE_SIZES if options.n is None else (options.n,)
    try:
        probes = [make_params(driver, replace(options, n=n, sets={}), requirements=False) for n in sizes]
    except UsageError:  # no such size: the run's own checks will speak
        return
    for name, value in options.sets.items():
        defaults = [probe[name] for probe in probes]
        shown = defaults[0] if len(set(defaults)) == 1 else "n" if defaults == list(sizes) else "computed from n"
        _setting(name, value, defaults[0], options.spelling, shown)


PROBE_SIZES = (1000, 2000)  # where check_settings reads the defaults, and whether they follow n (n // 8 too)


def _setting(name: str, given, default, spelling: Spelling, shown=None):
    """A parameter's value as set (``--set`` text read as the type of its ``default``, or a value
    given from Python), refused by name when of another type: an integer, a number, or one
    character. ``shown``: the default as the message says it (default: ``default``)."""
    value = read_setting(given, default) if isinstance(given, SetText) else given
    said, shown = spelling.param(name, given), default if shown is None else shown
    if isinstance(default, str):
        if isinstance(value, str) and len(value) == 3 and value[0] == value[-1] and value[0] in "'\"":
            raise UsageError(f"{said}: {name} is a char parameter (its default is {shown!r}): give the character "
                             f"without its quotes, {value[1]}")  # as the language writes it: --set uplo="U"
        if not isinstance(value, str) or len(value) != 1:
            raise UsageError(f"{said}: {name} is a char parameter (its default is {shown!r}): give one character")
    elif isinstance(value, str) and not isinstance(given, SetText) and read_number(value) is not None \
            and math.isfinite(float(value)):
        kind = "an integer" if isinstance(default, int) else "a number"  # from Python: params={"ib": "3"}
        raise UsageError(f"{said}: {name} is {kind} parameter: give {value.strip()} without quotes, not the string "
                         f"{value!r}")
    elif isinstance(value, str):
        what = "is not a finite number" if read_number(value) is not None else "is not a number"  # inf, nan, 1e400
        raise UsageError(f"{said}: {value!r} {what} ({name}'s default is {shown})")
    elif isinstance(value, float) and isinstance(default, int):
        raise UsageError(f"{said}: {name} is an integer parameter (its default is {shown})")
    elif isinstance(value, int) and isinstance(default, float):  # 3 is 3.0: -(x - x) is -0.0, 2**53 + 1 rounds
        try:  # the text as a float: -0 is -0.0
            number = float(str(given)) if isinstance(given, SetText) else float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise UsageError(f"{said}: {long_number(value)} is beyond float64's range (about ±1.8e308)")
        return number
    elif isinstance(value, float) and not math.isfinite(value):  # from Python: --set refuses the text
        raise UsageError(f"{said}: {value!r} is not a finite number ({name}'s default is {shown})")
    elif isinstance(value, int) and not -INT64_MAX <= value <= INT64_MAX:
        raise UsageError(f"{said}: {long_number(value)} is beyond the 64-bit range: an integer parameter stays within "
                         f"±{INT64_MAX} (2**63 - 1)")
    return value


def _check_requirements(driver, params: Params, options: Options) -> None:
    """A usage error naming the first of the program's ``require``s that ``params`` break (and the
    tuned values among them that break it, :func:`_tuned_culprits`)."""
    program = driver.PROGRAM
    settings = _size_settings(driver, params, tiles=True)
    unmet = _unmet(driver, params, settings)
    if unmet is not None:
        line, condition, why = unmet
        why = "".join(c if c.isprintable() else repr(c)[1:-1] for c in why or "")  # "\n" kept on one line
        raise UsageError(f"{program.name} requires {condition}{f' ({why})' if why else ''}, which {settings} "
                         f"break ({Path(program.source).name}:{line})" + _tuned_culprits(driver, options, line))


def _unmet(driver, params: Params, settings: str) -> tuple | None:
    """``driver.unmet(params)``: (line, condition, why) of the first requirement broken, or None."""
    try:
        return driver.unmet(params) if hasattr(driver, "unmet") else None  # drivers compiled before `require`
    except FORMULA_ERRORS as error:
        raise UsageError(f"{driver.PROGRAM.name}'s requirements cannot be checked with {settings}: {error}") from None


def _tuned_culprits(driver, options: Options, line: int) -> str:
    """The message's end for a requirement (at ``line``) broken by values from the tune cache
    (:func:`tuned_note`); empty when the program's own defaults in their place break it too."""
    tuned, own = untuned(options)
    if not tuned:
        return ""
    try:
        if (_unmet(driver, make_params(driver, own, requirements=False), "") or (None,))[0] == line:
            return ""
    except UsageError:  # the defaults have no such size: the tuned values are what the run has
        pass
    return tuned_note(options, tuned)


def untuned(options: Options) -> tuple[list, Options]:
    """The names of ``options``' tile settings and params taken from the tune cache
    (:func:`use_tuned`), and ``options`` without them (the program's defaults in their place)."""
    tuned = [name for name in (*options.tiles, *options.sets) if options.sources.get(name, "").startswith("tuned")]
    return tuned, replace(options, tiles={k: v for k, v in options.tiles.items() if k not in tuned},
                          sets={k: v for k, v in options.sets.items() if k not in tuned}, sources={})


def tuned_note(options: Options, tuned: list) -> str:
    """``; nb = 256 is tuned (...): give --nb, or --no-tune``: the end of a message about values
    that the ``tuned`` ones, from this machine's tune cache, are among."""
    spelling, values = options.spelling, {**options.tiles, **options.sets}
    ways = [spelling.tile(name) if name in options.tiles else spelling.param(name) for name in tuned]
    return (f"; {', '.join(f'{name} = {values[name]}' for name in tuned)} {'is' if len(tuned) == 1 else 'are'} "
            f"tuned (tiledsl tune's cache): give {' and '.join(ways)}, or {spelling.untuned}")


def matrix_shapes(driver, params: Params) -> tuple[dict, dict]:
    """``driver.shapes(params)``: each matrix's (rows, cols) and each workspace's (like, rows);
    a :class:`UsageError` when the program's size formulas fail for these values (a division
    by a parameter set to 0)."""
    try:
        return driver.shapes(params)
    except FORMULA_ERRORS as error:
        raise UsageError(f"the sizes of {driver.PROGRAM.name}'s matrices cannot be computed with "
                         f"{_size_settings(driver, params)}: {error}") from None


def _size_settings(driver, params: Params, tiles: bool = False) -> str:
    """``n = 3, cols = 0``: the values the program's formulas were given (with ``tiles``, the tile
    settings too)."""
    program = driver.PROGRAM
    names = ["n", *(TILING_SETTINGS[program.tiling.kind] if tiles else ()), *program.params]
    return ", ".join(f"{name} = {value_text(params[name])}" for name in names if params[name] is not None)


def settings_giving(driver, options: Options, name: str, shape: tuple) -> list[tuple[str, int]]:
    """The single changes of ``n`` or of one program parameter, ``(name, value)``, to one of ``shape``'s
    dimensions, that give matrix ``name`` that shape: for an input that does not fit."""
    found = []
    for setting in ["n", *driver.PROGRAM.params]:
        for value in sorted(set(shape)):
            changed = (replace(options, n=value) if setting == "n"
                       else replace(options, sets={**options.sets, setting: value}))
            try:
                shapes = matrix_shapes(driver, make_params(driver, changed))[0]
            except UsageError:
                continue
            if tuple(int(x) for x in shapes[name]) == tuple(shape):
                found.append((setting, value))
    return found


def make_distribution(program, params: Params, grid: tuple[int, int], gpus: int, ratio: tuple | None = None):
    """The default placement: multi-level hybrid for hybrid tiles, else 2-D block cyclic
    with ``ratio = (H, G)`` host/GPU block columns per cycle (default 1:1)."""
    pr, pc = grid
    try:
        if program.tiling.kind == "hybrid":
            if ratio is not None and gpus:
                raise UsageError("a host:GPU ratio applies to uniform tiling; hybrid tiles balance host and "
                                 "GPUs with b (the host slices' width), see tiledsl tune")
            return Hybrid(pr, pc, max(params.s, 1), gpus)  # s < 1: said by the matrices, with the .tile line
        host, gpu = ratio if ratio is not None and gpus else (1, 1)
        return BlockCyclic(pr, pc, gpus, host, gpu)
    except ValueError as error:
        raise UsageError(str(error)) from None


def ratio_of(distribution) -> tuple | None:
    """``(H, G)`` of a block-cyclic distribution over GPUs, else None."""
    if isinstance(distribution, BlockCyclic) and distribution.gpus:
        return distribution.host_columns, distribution.gpu_columns
    return None


def inner_block_params(driver) -> tuple[str, ...]:
    """The program's integer parameters that are the tile height of a workspace that is only ever a
    prelude QR kernel's ``T`` (``workspace T like A rows ib``, ``WorkspaceDecl.inner_block``) and
    size nothing else: inner blocks, as QR's ``ib``, which ``tiledsl tune`` searches with the tiles
    and a run takes from its cache. A parameter that sizes a matrix or a workspace that the user's
    kernels use means something (a number of pooled rows): it is the user's, never tuned.

    Asked of the compiled program: each integer parameter in turn is set to a value
    no other formula makes, and is an inner block if only such workspaces' rows change, to it.
    """
    program = driver.PROGRAM
    blocking = {decl.name for decl in program.workspaces if decl.inner_block}
    if not blocking:
        return ()
    defaults = make_params(driver, Options(n=_PROBE_N), requirements=False)
    try:
        shapes = matrix_shapes(driver, defaults)
    except UsageError:  # the defaults give no size: nothing to compare with
        return ()
    found = []
    for name in program.params:
        value = defaults.as_dict()[name]
        if isinstance(value, bool) or not isinstance(value, int):
            continue
        try:
            probed = matrix_shapes(driver, make_params(driver, Options(n=_PROBE_N, sets={name: _PROBE}),
                                                       requirements=False))
        except UsageError:  # no size at the probe (`w = 2 ** lev` overflows): a workspace's rows it is not
            continue
        matrices, workspaces = probed
        changed = {m for m, shape in matrices.items() if shape != shapes[0][m]} | {
            w for w, shape in workspaces.items() if shape != shapes[1][w]}
        if changed and changed <= blocking and all(workspaces[w][1] == _PROBE for w in changed):
            found.append(name)
    return tuple(found)


_PROBE = 7919  # a prime: a workspace's rows equal it only when they are the probed parameter
_PROBE_N = 64


def use_tuned(driver, options: Options, enabled: bool = True, comm=None, warn=None) -> None:
    """Fill what the command line left out from this machine's ``tiledsl tune`` cache.

    The tuned tile settings are used when no tile setting was given, the tuned
    host/GPU ratio when no ``--gpu-ratio`` was (uniform tiles with GPUs), and the
    parameters tuned with the tiles (a QR's ``ib``) where no ``--set`` gives them and
    those tiles are the run's; explicit options always win. Where each tuned value
    came from is noted in ``options.sources``. Where tune found CPU workers taking GPU
    tasks fastest, the run takes them at 0:1 unless ``--host-takes off``, which keeps the
    tuned ratio. Rank 0 reads the cache and every rank uses what it read
    (``TILEDSL_NO_TUNE=1`` or ``enabled=False``: the cache is not read). A run with
    ``--host-takes on`` gets the kernel rates tune measured (``options.host_speeds``), from the
    cache in any case; a tuned run gets them too, for the summary's kernel upper bound
    (``options.bound_rates``: none where the cache is ignored, whatever ``--host-takes`` says).
    A tuned parameter that is no longer an inner block of the program (:func:`inner_block_params`:
    the program was edited since, keeping its name) is not used, with a warning.
    """
    program = driver.PROGRAM
    found = None
    if enabled and not environment_switch("TILEDSL_NO_TUNE"):
        found = _read_on_rank_zero(comm, lambda: tuning.lookup(tuning.program_key(program), program.tiling.kind, options.gpus,
                                                               options.gpu_backend, warn))
    if found is not None:
        _use_tuned_entry(driver, options, found, warn)
        if found.kernel_module is not None and warn is not None:
            edited = tuning.edited_module(program, found.kernel_module, found.path, _read_on_rank_zero(
                comm, lambda: kernel_module_digest(program, driver, found.kernel_helpers)))
            if edited:
                warn(edited)
    if (options.host_takes or found is not None) and options.host_speeds is None:
        entry = _read_on_rank_zero(comm, lambda: tuning.entry(tuning.program_key(program), options.gpus, options.gpu_backend))
        options.host_speeds = (entry or {}).get("speeds") or {}
        options.bound_rates = options.host_speeds if found is not None else None


def _read_on_rank_zero(comm, read):
    """What ``read()`` returns on rank 0, on every rank (one cache read, one answer for all)."""
    found = read() if comm is None or comm.rank == 0 else None
    return comm.broadcast(found) if comm is not None else found


def _use_tuned_entry(driver, options: Options, found: tuning.Tuned, warn) -> None:
    program = driver.PROGRAM
    tiles, ratio, params, path, host_takes, *_ = found
    source = f"tuned ({path})"
    merged = {**program.tiling.defaults, **tiles}
    if program.tiling.kind == "hybrid" and not (merged.get("s", 1) - 1) * merged.get("b", 0) < merged.get("B", 1):
        if warn is not None:
            warn(f"ignoring the tuned tiles {tiles} of {path}: they no longer fit {program.name}'s tiling")
        tiles = {}
    if tiles and not options.tiles:
        options.tiles = dict(tiles)
        options.sources.update({name: source for name in tiles})
    if host_takes and options.host_takes is not False and options.gpus:  # as tuned, or --host-takes on said again
        if options.host_takes is None:
            options.host_takes = True
            options.sources["host_takes"] = source
        ratio = (0, 1)  # the GPUs hold every column, the host's cores take tasks from them
    if ratio is not None and options.gpu_ratio is None and options.gpus and program.tiling.kind == "uniform":
        options.gpu_ratio = tuple(ratio)
        options.sources["gpu_ratio"] = source
    if params:
        blocks = inner_block_params(driver)
        if warn is not None and set(params) - set(blocks):
            warn(f"ignoring the tuned {', '.join(f'{n} = {v}' for n, v in params.items() if n not in blocks)} of "
                 f"{path}: not an inner block (a workspace's rows) of {program.name} as it is now; "
                 f"run tiledsl tune again")
        params = {name: value for name, value in params.items() if name in blocks}
    _use_tuned_params(program, options, params if tiles and options.tiles == tiles else {}, params, source)


def _use_tuned_params(program, options: Options, usable: dict, tuned: dict, source: str) -> None:
    """Take the ``usable`` tuned parameters the command line leaves unset; note where each
    parameter ``tuned`` names came from (it was tuned for other tiles: the program default)."""
    for name in program.params:
        if name not in tuned:
            continue
        if name in options.sets:
            options.sources[name] = given_source(options)
        elif name in usable:
            options.sets[name] = usable[name]
            options.sources[name] = source
        else:
            options.sources[name] = "program default"


def given_source(options: Options) -> str:
    """The source of a setting the user gave: ``command line``, or ``given`` to the Python API."""
    return "given" if options.spelling.api else "command line"


def tiling_sources(program, params: Params, options: Options) -> dict:
    """Where each tile setting (the GPU ratio of uniform tiles on GPUs, the parameters the
    tuning cache has values for, and ``--host-takes on`` where it was tuned) came from: ``command line``
    (``given`` to the Python API), ``tuned (<cache file>)`` or ``program default`` (``default`` for a ratio)."""
    values, given = params.as_dict(), given_source(options)
    sources = {name: options.sources.get(name, given if name in options.tiles else "program default")
               for name in TILING_SETTINGS[program.tiling.kind] if values.get(name) is not None}
    sources.update({name: options.sources[name] for name in program.params if name in options.sources})
    if options.gpus and program.tiling.kind == "uniform":
        sources["gpu_ratio"] = options.sources.get("gpu_ratio", given if options.gpu_ratio is not None else "default")
    if options.host_takes:
        sources["host_takes"] = options.sources.get("host_takes", given)
    return sources


def make_matrices(driver, params: Params, distribution, rank: int) -> dict:
    """Every matrix and workspace of the program, tiled and placed, as seen by ``rank``."""
    program = driver.PROGRAM
    shapes, workspaces = matrix_shapes(driver, params)
    geometries, name = {}, None
    try:
        for name, (m, n) in shapes.items():
            geometries[name] = (Geometry.hybrid(m, n, params.B, params.b, params.s)
                                if program.tiling.kind == "hybrid" else Geometry.uniform(m, n, params.nb))
        for name, (like, rows) in workspaces.items():
            geometries[name] = Geometry.workspace(geometries[like], rows)
    except ValueError as error:
        kind, decl = next((kind, d) for kind, decls in (("workspace", program.workspaces), ("matrix", program.matrices))
                          for d in decls if d.name == name)
        # a workspace's height may come from a tile setting (rows nb // 64): said with them
        raise UsageError(f"{kind} {name} ({Path(program.source).name}:{decl.line}): {error} "
                         f"(with {_size_settings(driver, params, tiles=kind == 'workspace')})") from None
    matrices, first_tag = {}, 0
    for name, geometry in geometries.items():
        matrices[name] = TiledMatrix(name, geometry, distribution, rank, first_tag, workspace=name in workspaces)
        first_tag += geometry.mt * geometry.nt
    return matrices



def placement(driver, params: Params, grid_text: str | None, ranks: int, rank: int, gpus: int,
              ratio: tuple | None = None) -> tuple:
    """(grid, distribution, ``rank``'s matrices): ``--grid`` if given, else the first grid that
    gives every rank tiles among the program's preferred one (:func:`.world.preferred_grid`),
    the squarest, then the others from the squarest on (3 ranks on a matrix of one tile
    column: 3x1); the preferred one when none does (a program writing rows of tiles keeps
    P×1, where their tasks stay on one rank each; the run then warns of the idle ranks).

    A program writing panels along one axis (columns of tiles: 1×P preferred) may leave ranks
    without a task on any grid: the grid on which most ranks run tasks (walking the loop nest,
    :func:`.gridadvice.computing_ranks`) comes first, and then one that gives every rank tiles
    (gemm on 12×12 tiles and 16 ranks: 1x16, 12 ranks computing, not 4x4, 4 of them and twice
    the messages; getrf on 3×3 tiles and 4 ranks: 2x2, not 1x4, which leaves a rank no tile)."""
    program = driver.PROGRAM
    grids = [grid_for(grid_text, ranks, program)]
    if grid_text is None:
        grids += [grid for grid in grids_by_squareness(ranks) if grid != grids[0]]
    tried = {}

    def placed(grid):
        if grid not in tried:
            distribution = make_distribution(program, params, grid, gpus, ratio)
            tried[grid] = grid, distribution, make_matrices(driver, params, distribution, rank)
        return tried[grid]
    if grid_text is None and len(program.written_panel_axes) == 1 and ranks > 1:
        from .gridadvice import computing_ranks  # here: it walks the loop nest, with this module's matrices

        return placed(max(grids, key=lambda grid: (computing_ranks(driver, params, placed(grid)[2], ranks),
                                                   every_rank_has_tiles(program, placed(grid)[2], ranks))))
    for grid in grids:
        if grid_text is not None or every_rank_has_tiles(program, placed(grid)[2], ranks):
            return placed(grid)
    return placed(grids[0])


def grids_by_squareness(ranks: int) -> list:
    """Every grid P×Q of ``ranks``, the squarest first (P ≤ Q before P > Q at equal distance)."""
    grids = [(p, ranks // p) for p in range(1, ranks + 1) if ranks % p == 0]
    return sorted(grids, key=lambda grid: (abs(grid[0] - grid[1]), grid[0] > grid[1]))
