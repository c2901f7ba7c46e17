"""Inferring ``n`` and a program's parameters from the shapes of its input matrices.

The Python API fits them to the arrays it is given (``run(A=...)``) and to the files its
``load`` matrices read, the command line to its ``--input`` files and those ``load`` files,
when ``--n`` is not given. The unknowns are ``n`` and the integer parameters left unset (a
char or float parameter is never a size: it keeps its default). Each is tried at its default
(``n`` has none), at each dimension of the inputs, and at the values that solve a dimension's
equation, the others at a trial's values: exactly where the program's formula is affine in
the unknown, give or take a floor division's rounding (:meth:`_Search.solve`). Solutions are
sought round after round, so that a chain is followed: ``n`` from ``B[n * q, n]``'s columns,
then ``q`` from its rows. Of the trials that fit every input and meet the program's
``require``\\ s, the ones keeping the most defaults win, and must be one: several are
ambiguous, and the error lists them; an inferred value that no input's shape depends on is
an error too, and so is a requirement that every fit breaks. The messages name the caller's
own ways of giving a value (:class:`.options.Spelling`).
"""
from __future__ import annotations

import itertools
import math
import os
from pathlib import Path

from . import npyio
from .layout import make_params, matrix_shapes
from .options import COMMAND_LINE, Options, Spelling, check_file_names
from .world import UsageError

MAX_TRIALS = 100_000  # assignments of n and the params tried against the inputs' shapes
SECANT_STEPS = 4  # steps towards a value solving a dimension's equation (one where it is affine)
SOLVE_WINDOW = 64  # most integers tried on each side of that value (a floor division rounds it)


def fit(driver, shapes: dict, n: int | None, tiles: dict, params: dict, spelling: Spelling) -> tuple[int, dict]:
    """``n`` and the params (those given, and those the inputs' ``shapes``, name -> (rows, cols),
    determine) of a run; a :class:`UsageError` when they cannot be told."""
    dims = sorted({d for shape in shapes.values() for d in shape})
    if n is None and not dims:
        names = ", ".join(d.name for d in driver.PROGRAM.matrices)
        raise UsageError(f"give {spelling.n} (the matrix order) or {spelling.input_form.format(names=names)}")
    search = _Search(driver, shapes, n, tiles, params, spelling)
    search.run(dims)
    if not search.fits:
        raise UsageError(_misfit(search))
    unmet = {key: search.unmet(key[0], chosen) for key, chosen in search.fits.items()}
    fits = {key: chosen for key, chosen in search.fits.items() if unmet[key] is None}
    if not fits:  # the shapes tell the values, which the program refuses: say why
        raise UsageError(unmet[min(search.fits, key=lambda key: len(search.fits[key]))])
    fewest = min(len(chosen) for chosen in fits.values())
    best = {key: chosen for key, chosen in fits.items() if len(chosen) == fewest}
    for key, chosen in list(best.items()):
        best.update(search.alternatives(key[0], chosen))
    if len(best) > 1:
        options = " or ".join(assignment(key[0], dict(key[1])) for key in sorted(best)[:4])
        raise UsageError(f"{spelling.inputs}' shapes fit several sizes ({options}): give {spelling.n} or "
                         f"{spelling.params} to choose")
    (n_value, values), chosen = next(iter(best.items()))
    return n_value, {name: dict(values)[name] for name in chosen}


class _Search:
    """Trials of values of the unknowns against the inputs' shapes: ``fits`` maps each fit,
    ``(n, ((param, value), ...))``, to the fewest params set (given or inferred) that give it;
    ``closest`` is ``((dimensions matched, −params set), n, params set)`` of the trial nearest
    to fitting, for the message when none fits."""

    def __init__(self, driver, shapes: dict, n: int | None, tiles: dict, params: dict, spelling: Spelling):
        self.driver, self.shapes, self.n, self.tiles, self.params = driver, shapes, n, tiles, params
        self.spelling = spelling
        self.fits, self.closest = {}, None
        self._evaluated, self._solved = {}, set()

    def run(self, dims: list) -> None:
        """Try the unknowns at their defaults and the dimensions, then at the solutions found
        while trying, until no new one is found (one round per unknown at most: a chain)."""
        unknowns = (["n"] if self.n is None else []) + self._sizing_params(dims)
        values = {name: ([] if name == "n" else [None]) + dims for name in unknowns}
        tried = set()
        for rounds_left in range(len(unknowns), -1, -1):
            if math.prod(len(v) for v in values.values()) > MAX_TRIALS:
                raise UsageError(f"too many ways to fit {', '.join(unknowns)} to "
                                 f"{self.spelling.inputs}' shapes: give {self.spelling.n} and "
                                 f"{self.spelling.params} explicitly")
            found = {name: set() for name in unknowns}
            for trial in itertools.product(*values.values()):
                if trial not in tried:
                    tried.add(trial)
                    self._try(dict(zip(unknowns, trial)), found if rounds_left else None)
            new = {name: sorted(found[name] - set(values[name])) for name in unknowns}
            if not any(new.values()):
                return
            for name in unknowns:
                values[name] += new[name]

    def _sizing_params(self, dims: list) -> list:
        """The params left unset that some input's shape depends on (at n, else the largest
        dimension; the others at their defaults): a char or float one sizes nothing, and one
        no input involves (a QR's inner block) keeps its default."""
        unset = [name for name in self.driver.PROGRAM.params if name not in self.params]
        n = self.n if self.n is not None else max(dims)
        evaluated = self.evaluate(n, self.params)
        if evaluated is None:  # no size here to probe: every one is tried
            return unset
        return [name for name in unset if isinstance(evaluated[0][name], int)
                and self._depends(n, self.params, name, evaluated[0][name])]

    def _try(self, trial: dict, found: dict | None) -> None:
        """Note whether ``trial`` (unknown -> value, None for a default) fits; where it does not, the
        values that would give each wrong dimension are added to ``found`` (when given)."""
        n, chosen = self.assigned(trial)
        evaluated = self.evaluate(n, chosen)
        if evaluated is None:
            return
        values, expected = evaluated
        wrong = [(name, axis) for name, shape in self.shapes.items() for axis in (0, 1)
                 if expected[name][axis] != shape[axis]]
        if not wrong:
            key = self._key(n, values)
            if key not in self.fits or len(chosen) < len(self.fits[key]):
                self.fits[key] = chosen
            return
        nearness = (2 * len(self.shapes) - len(wrong), -len(chosen))
        if self.closest is None or nearness > self.closest[0]:
            self.closest = (nearness, n, chosen)
        for position, name in itertools.product(wrong if found is not None else (), trial):
            found[name] |= self.solve(trial, values[name], name, position)

    def assigned(self, trial: dict) -> tuple[int, dict]:
        """``n`` and the params set (those given, and the trial's that are not left to their default)."""
        return trial.get("n", self.n), {**self.params, **{k: v for k, v in trial.items()
                                                          if k != "n" and v is not None}}

    def evaluate(self, n: int, chosen: dict) -> tuple[dict, dict] | None:
        """(every param's value, each matrix's (rows, cols)) for these values, the requirements not
        checked; None where the program has no such size (n < 1, a division by a param of 0)."""
        key = (n, tuple(sorted(chosen.items())))
        if key not in self._evaluated:
            try:
                params = make_params(self.driver, Options(n=n, tiles=self.tiles, sets=chosen, spelling=self.spelling),
                                     requirements=False)
                shapes = self.driver.shapes(params)[0]
                self._evaluated[key] = (params.as_dict(),
                                        {name: (int(rows), int(cols)) for name, (rows, cols) in shapes.items()})
            except (UsageError, ArithmeticError):
                self._evaluated[key] = None
        return self._evaluated[key]

    def solve(self, trial: dict, value: int, name: str, position: tuple) -> set:
        """The values of unknown ``name`` (at ``value`` in ``trial``, the others as there) that give
        ``position``, (matrix, axis), the input's dimension: secant steps from ``value``, which
        reach the solution at once where the program's formula is affine in ``name``, then the
        integers around it that a floor division's rounding leaves (a slope of 1/2: two)."""
        solved = (name, position, tuple((k, v) for k, v in trial.items() if k != name))
        if solved in self._solved:
            return set()
        self._solved.add(solved)
        wanted = self.shapes[position[0]][position[1]]
        dimension = lambda x: self._dimension({**trial, name: x}, position)
        x0, x1 = value, value + max(abs(value), wanted, 1)
        f0 = dimension(x0)
        for _ in range(SECANT_STEPS):
            f1 = dimension(x1)
            if f0 is None or f1 is None or f1 == f0:
                return set()
            slope = (f1 - f0) / (x1 - x0)
            x0, f0, x1 = x1, f1, round(x1 + (wanted - f1) / slope)
            if x1 == x0:
                break
        spread = min(SOLVE_WINDOW, math.ceil(1 / abs(slope)) + 1)
        return {x for x in range(x1 - spread, x1 + spread + 1) if dimension(x) == wanted}

    def _dimension(self, trial: dict, position: tuple) -> int | None:
        evaluated = self.evaluate(*self.assigned(trial))
        return None if evaluated is None else evaluated[1][position[0]][position[1]]

    def unmet(self, n: int, chosen: dict) -> str | None:
        """Why these values break the program's requirements (its message), or None."""
        try:
            make_params(self.driver, Options(n=n, tiles=self.tiles, sets=chosen, spelling=self.spelling))
        except UsageError as error:
            return str(error)
        return None

    def alternatives(self, n: int, chosen: dict) -> dict:
        """The fits, key -> params set, that differ from ``n`` and ``chosen``'s by one inferred value
        being one more or one less (the inputs' shapes tell it only within a range); a
        :class:`UsageError` for an inferred value no input's shape depends on."""
        found = {}
        for name in (["n"] if self.n is None else []) + [k for k in chosen if k not in self.params]:
            value = n if name == "n" else chosen[name]
            if not self._depends(n, chosen, name, value):
                how = self.spelling.n if name == "n" else self.spelling.param(name)
                raise UsageError(f"{name} cannot be inferred: no {self.spelling.one_input}'s shape depends on it; "
                                 f"give {how}")
            for other in (value - 1, value + 1):
                other_n, other_chosen = (other, chosen) if name == "n" else (n, {**chosen, name: other})
                if self._fits(other_n, other_chosen) and self.unmet(other_n, other_chosen) is None:
                    found[self._key(other_n, self.evaluate(other_n, other_chosen)[0])] = other_chosen
        return found

    def _key(self, n: int, values: dict) -> tuple:
        """A fit's key: ``n`` and every param's value."""
        return n, tuple((name, values[name]) for name in sorted(self.driver.PROGRAM.params))

    def _depends(self, n: int, chosen: dict, name: str, value: int) -> bool:
        """Whether some input's shape changes with unknown ``name`` (at ``value``; the others as they are)."""
        base = self._input_shapes(n, chosen)
        for other in (value + 1, 2 * value + 1, value + 10_000):  # a floor division may wait for a large change
            changed = (self._input_shapes(other, chosen) if name == "n"
                       else self._input_shapes(n, {**chosen, name: other}))
            if changed is not None and changed != base:
                return True
        return False

    def _input_shapes(self, n: int, chosen: dict) -> dict | None:
        evaluated = self.evaluate(n, chosen)
        return None if evaluated is None else {name: evaluated[1][name] for name in self.shapes}

    def _fits(self, n: int, chosen: dict) -> bool:
        return self._input_shapes(n, chosen) == {name: tuple(shape) for name, shape in self.shapes.items()}


def fit_files(driver, options: Options) -> None:
    """The command line without ``--n``: ``options.n`` and the params the shapes of the
    ``--input`` files and of the ``load`` matrices' files tell (their matrix names checked in
    any case)."""
    program = driver.PROGRAM
    check_file_names([d.name for d in program.matrices], [d.name for d in program.workspaces], options.inputs, {})
    if options.n is not None:
        return
    shapes = file_shapes({**load_files(driver), **options.inputs})
    options.n, inferred = fit(driver, shapes, None, options.tiles, options.sets, COMMAND_LINE)
    options.sets = {**options.sets, **inferred}


def load_files(driver) -> dict:
    """Matrix name -> the file of each of the program's ``load`` matrices."""
    return {decl.name: load_path(decl, driver) for decl in driver.PROGRAM.matrices if decl.init == "load"}


def file_shapes(files: dict) -> dict:
    """Matrix name -> (rows, cols) of the ``.npy`` file of each of ``files`` (name -> path), from its header."""
    shapes = {}
    for name, path in files.items():
        try:
            shapes[name] = npyio.shape_of(path)
        except (npyio.InputFileError, OSError) as error:
            raise UsageError(f"the size cannot be read from {name}'s file: {error}") from None
        if len(shapes[name]) != 2:
            raise UsageError(f"input file {path!r} of matrix {name} holds {len(shapes[name])} dimension(s), not 2")
    return shapes


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


def _misfit(search: _Search) -> str:
    """Why no size fits: the inputs' shapes against those the program expects with the values
    of the trial that matched the most dimensions (so that the inputs named are the ones at
    odds with the others)."""
    driver, shapes, n, spelling = search.driver, search.shapes, search.n, search.spelling
    name = driver.PROGRAM.name
    if search.closest is None:  # no trial had a size at all: say why the first did not
        first_n = n if n is not None else min(d for shape in shapes.values() for d in shape)
        try:
            matrix_shapes(driver, make_params(driver, Options(n=first_n, tiles=search.tiles, sets=search.params,
                                                              spelling=spelling)))
        except UsageError as error:
            return str(error)
        found = ", ".join(f"{matrix} {shape}" for matrix, shape in shapes.items())
        return f"{spelling.inputs}' shapes ({found}) fit no size of {name}: give {spelling.n} and {spelling.params}"
    _, reference_n, chosen = search.closest
    values, expected = search.evaluate(reference_n, chosen)
    wrong = "; ".join(f"{matrix} has shape {shape}, expected {expected[matrix]}"
                      for matrix, shape in shapes.items() if expected[matrix] != tuple(shape))
    inferred = n is None or len(search.params) < len(driver.PROGRAM.params)
    return (f"{spelling.inputs}' shapes fit no size of {name}: with "
            f"{assignment(reference_n, {k: values[k] for k in driver.PROGRAM.params})}, {wrong}"
            + (f"; give {spelling.n} and {spelling.params} for the size you mean" if inferred else ""))


def assignment(n: int, params: dict) -> str:
    return ", ".join(f"{name}={value}" for name, value in {"n": n, **params}.items())
