"""Inferring ``n`` and a program's parameters from the shapes of its input matrices.

The Python API fits them to the arrays it is given (``run(A=...)``), the command line
to its ``--input`` files and the files its ``load`` matrices read, when ``--n`` is not
given. Every assignment of the unknowns to a dimension of some input (or, for a
parameter, its default) is tried against the driver's ``shapes(p)``; of those that fit
every input, the ones keeping the most defaults win, and must agree. An inferred value
that could change and still fit is undetermined: an error asks for it. The messages
name the caller's own ways of giving a value (:class:`Spelling`).
"""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import npyio
from .layout import make_params, matrix_shapes
from .options import Options
from .world import UsageError

MAX_TRIALS = 100_000  # assignments of n and the params tried against the inputs' shapes


@dataclass(frozen=True)
class Spelling:
    """How the caller gives the size and the parameters, for the messages."""

    n: str  # "n=" or "--n"
    params: str  # "params=" or "--set"
    inputs: str  # "the arrays" or "the input files"
    one_input: str  # "input array" or "input file"
    param_form: str  # how one parameter is given, with {name}
    input_form: str  # how the input matrices are given, with {names}

    def param(self, name: str) -> str:
        return self.param_form.format(name=name)


API = Spelling("n=", "params=", "the arrays", "input array", "params={{{name!r}: ...}}", "an input array ({names})")
COMMAND_LINE = Spelling("--n", "--set", "the input files", "input file", "--set {name}=...",
                        "--input NAME=FILE.npy for one of {names}")


def fit(driver, shapes: dict, n: int | None, tiles: dict, params: dict, spelling: Spelling) -> tuple[int, dict]:
    """``n`` and the params (those given, and those the inputs' ``shapes``, name -> (rows, cols),
    determine) of a run; a :class:`UsageError` when they cannot be told."""
    unknown = [name for name in driver.PROGRAM.params if name not in params]
    dims = sorted({d for shape in shapes.values() for d in shape})
    if n is None and not dims:
        names = ", ".join(d.name for d in driver.PROGRAM.matrices)
        raise UsageError(f"give {spelling.n} (the matrix order) or {spelling.input_form.format(names=names)}")
    choices = [[n] if n is not None else dims] + [[None] + dims] * len(unknown)
    if np.prod([len(c) for c in choices], dtype=float) > MAX_TRIALS:
        raise UsageError(f"too many ways to fit n and {', '.join(unknown)} to {spelling.inputs}' shapes: "
                         f"give {spelling.n} and {spelling.params} explicitly")
    fits = {}  # (n, every param's value) -> the fewest params set (given or inferred) that give it
    closest = None  # ((dimensions matched, −params set), n, params) of the trial nearest to fitting
    for n_value, *values in itertools.product(*choices):
        chosen = {**params, **{k: v for k, v in zip(unknown, values) if v is not None}}
        expected = shapes_for(driver, n_value, tiles, chosen)
        if expected is None:
            continue
        matched = sum(got == wanted for name, shape in shapes.items() for got, wanted in zip(shape, expected[name]))
        if matched == 2 * len(shapes):
            key = (n_value, tuple(sorted(resolved(driver, n_value, tiles, chosen).items())))
            fits[key] = min(fits.get(key, len(chosen)), len(chosen))
        elif closest is None or (matched, -len(chosen)) > closest[0]:
            closest = ((matched, -len(chosen)), n_value, chosen)
    if not fits:
        raise UsageError(_misfit(driver, shapes, n, tiles, params, closest, spelling))
    fewest = min(fits.values())
    best = [key for key, count in fits.items() if count == fewest]
    inferred = lambda key: {k: v for k, v in key[1]
                            if k in params or v != resolved(driver, key[0], tiles, {})[k]}
    for key in best:  # the fits differ where a value is left free by every input: say which
        _check_determined(driver, shapes, n is None, key[0], tiles, inferred(key), set(inferred(key)) - set(params),
                          spelling)
    if len(best) > 1:
        options = " or ".join(assignment(key[0], dict(key[1])) for key in best[:4])
        raise UsageError(f"{spelling.inputs}' shapes fit several sizes ({options}): give {spelling.n} or "
                         f"{spelling.params} to choose")
    return best[0][0], inferred(best[0])


def fit_files(driver, options: Options) -> None:
    """The command line without ``--n``: ``options.n`` and the params the shapes of the
    ``--input`` files and of the ``load`` matrices' files tell."""
    if options.n is not None:
        return
    loads = {decl.name: load_path(decl, driver) for decl in driver.PROGRAM.matrices if decl.init == "load"}
    files = {**loads, **options.inputs}
    shapes = {}
    for name, path in files.items():
        try:
            shapes[name] = npyio.shape_of(path)
        except (npyio.InputFileError, OSError) as error:
            raise UsageError(f"--n is not given and the size cannot be read from {name}'s file: {error}") from None
        if len(shapes[name]) != 2:
            raise UsageError(f"input file {path!r} of matrix {name} holds {len(shapes[name])} dimension(s), not 2")
    options.n, inferred = fit(driver, shapes, None, options.tiles, options.sets, COMMAND_LINE)
    options.sets = {**options.sets, **inferred}


def load_path(decl, driver) -> str:
    """The file of ``matrix NAME = load "PATH"``: PATH when absolute, else PATH relative to
    the ``.tile`` file's directory (as recorded when the driver was compiled, then as the
    program's source path names it from here), else next to the driver; the first of
    these that exists (the first if none does, for the message)."""
    if os.path.isabs(decl.load):
        return decl.load
    bases = [Path(decl.base)] if decl.base else []
    bases.append(Path(driver.PROGRAM.source).parent)
    if getattr(driver, "__file__", None):
        bases.append(Path(driver.__file__).parent)
    candidates = [str(base / decl.load) for base in bases]
    return next((c for c in candidates if os.path.isfile(c)), candidates[0])


def _check_determined(driver, shapes, n_inferred: bool, n: int, tiles: dict, chosen: dict, inferred,
                      spelling: Spelling) -> None:
    """A usage error when an inferred value could be another and the inputs still fit."""
    if n_inferred and _fits(driver, shapes, n + 1, tiles, chosen):
        raise UsageError(f"n cannot be inferred: no {spelling.one_input}'s shape depends on it; give {spelling.n}")
    for name in sorted(inferred):
        if _fits(driver, shapes, n, tiles, {**chosen, name: chosen[name] + 1}):
            raise UsageError(f"param {name} cannot be inferred from {spelling.inputs}' shapes: "
                             f"give {spelling.param(name)}")


def _fits(driver, shapes: dict, n: int, tiles: dict, params: dict) -> bool:
    expected = shapes_for(driver, n, tiles, params)
    return expected is not None and all(expected[name] == shape for name, shape in shapes.items())


def shapes_for(driver, n: int, tiles: dict, params: dict) -> dict | None:
    """Each matrix's (rows, cols) for these values; None where the program has no such size."""
    try:
        shapes = driver.shapes(make_params(driver, Options(n=n, tiles=tiles, sets=params)))[0]
    except (UsageError, ArithmeticError):  # e.g. n < 1, or a shape dividing by a param of 0
        return None
    return {name: (int(rows), int(cols)) for name, (rows, cols) in shapes.items()}


def resolved(driver, n: int, tiles: dict, params: dict) -> dict:
    """The program's params with their defaults filled in."""
    values = make_params(driver, Options(n=n, tiles=tiles, sets=params))
    return {name: values[name] for name in driver.PROGRAM.params}


def _misfit(driver, shapes: dict, n: int | None, tiles: dict, params: dict, closest, spelling: Spelling) -> str:
    """Why no size fits: the inputs' shapes against those the program expects with the values
    of ``closest``, the trial that matched the most dimensions (so that the inputs named
    are the ones at odds with the others)."""
    name = driver.PROGRAM.name
    if closest is None:  # no trial had a size at all: say why the first did not (a require)
        first_n = n if n is not None else min(d for shape in shapes.values() for d in shape)
        try:
            matrix_shapes(driver, make_params(driver, Options(n=first_n, tiles=tiles, sets=params)))
        except UsageError as error:
            return str(error)
        found = ", ".join(f"{matrix} {shape}" for matrix, shape in shapes.items())
        return f"{spelling.inputs}' shapes ({found}) fit no size of {name}: give {spelling.n} and {spelling.params}"
    _, reference_n, chosen = closest
    expected = shapes_for(driver, reference_n, tiles, chosen)
    wrong = "; ".join(f"{matrix} has shape {shape}, expected {expected[matrix]}"
                      for matrix, shape in shapes.items() if expected[matrix] != shape)
    values = assignment(reference_n, resolved(driver, reference_n, tiles, chosen))
    inferred = n is None or len(params) < len(driver.PROGRAM.params)
    return (f"{spelling.inputs}' shapes fit no size of {name}: with {values}, {wrong}"
            + (f"; give {spelling.n} and {spelling.params} for the size you mean" if inferred else ""))


def assignment(n: int, params: dict) -> str:
    return ", ".join(f"{name}={value}" for name, value in {"n": n, **params}.items())
