"""Inferring ``n`` and a program's parameters from the shapes of its input matrices.

The Python API fits them to the arrays it is given (``run(A=...)``) and to the files its
``load`` matrices read, the command line to its ``--input`` files and those ``load`` files,
when ``--n`` is not given: at the tile settings and tuned parameters the run will use (the
tuned values are taken first, :func:`.layout.use_tuned`). The unknowns are ``n`` and the
integer parameters left unset (a char or float parameter is never a size: it keeps its
default). Each is tried at its default (``n`` has none), at each dimension of the inputs, and
at the values that solve a dimension's equation, the others at a trial's values: exactly where
the program's formula is affine in the unknown, give or take a floor division's rounding
(:meth:`_Search.solve`). Solutions are sought round after round, so that a chain is followed:
``n`` from ``B[n * q, n]``'s columns, then ``q`` from its rows. Unknowns that set the
dimensions together (``A[n + r, n - r]``) are solved for at once, by Newton steps on them all
from several starts (:meth:`_Search.solve_jointly`): one at a time, they would circle round.

A fit may leave its inferred unknowns free to move together (``A[n * q, n * q]``: the changes
of the inputs' dimensions with each unknown are dependent, :meth:`_Search.free`); then each free
one is swept over the divisors of the inputs' dimensions, the others solved for, to find the
other fits (:meth:`_Search.widen`). Of the fits that meet the program's ``require``\\ s, the ones
keeping the most defaults win, then those overriding the fewest params whose default follows
another value (``lev`` inferred rather than ``w = 2 ** lev`` overridden); the winner must be one,
and pinned down by the shapes: otherwise the error lists the fits. An inferred value that no
input's shape depends on is an error too, and so is a requirement that every fit breaks; inputs
giving different sizes to dimensions the program makes equal are said to disagree, and so are
inputs that each fit a size alone, sizes that give ``n`` or a param different values. The
messages name the caller's own ways of giving a value (:class:`.options.Spelling`).
"""
from __future__ import annotations

import contextlib
import itertools
import math
import os
import re
from dataclasses import replace
from pathlib import Path

import numpy as np

from . import npyio
from .layout import (FORMULA_ERRORS, check_set_names, make_params, matrix_shapes, settings_giving, tuned_note,
                     untuned)
from .options import TILE_SETTINGS, Options, SetText, check_file_names, read_setting
from .userkernels import program_places
from .world import UsageError

MAX_TRIALS = 100_000  # assignments of n and the params tried against the inputs' shapes
SECANT_STEPS = 4  # steps towards a value solving a dimension's equation (one where it is affine)
SOLVE_WINDOW = 64  # most integers tried on each side of that value (a floor division rounds it)
NEWTON_STEPS = 16  # steps on all the unknowns at once (a product's, rounded each time, takes a dozen)
JOINT_STARTS = 32  # most first-round trials Newton steps on all the unknowns start from
DIVISOR_STARTS = 8  # and the most small divisors of the dimensions each unknown starts from
SWEEP_VALUES = 32  # most values a free unknown is swept over: the smallest divisors of the dimensions
SHOWN = 4  # fits an ambiguity error lists


def misfit_hint(driver, options: Options, name: str, shape: tuple) -> str:
    """The end of the message that matrix ``name``'s input file, of ``shape``, does not fit the
    matrix at ``options``' size: the changes that give the matrix that shape (each single change
    of ``n`` or of a parameter that does, else the parameters that do together at this ``n``,
    ``--set m=30 --set k=50``, else with another ``n`` too, ``--n 50 --set q=7``), those alone that
    let every input file fit too (one file at a time, following them would fail on the next
    file); else the size the files fit together once the user's own settings are left out, or
    why they fit none (:func:`_leaving_out`)."""
    spelling = options.spelling
    shapes = {**_readable_shapes(driver, options), name: shape}
    for group in _changes_giving(driver, options, name, shape):
        hints = [_settings_text(spelling, changed) for changed in group if _follows(driver, shapes, options, changed)]
        if hints:
            return f" ({' or '.join(hints[:3])} gives the matrix the file's shape)"
    return _leaving_out(driver, shapes, options)


def _changes_giving(driver, options: Options, name: str, shape: tuple):
    """Groups, in turn, of the changes of ``n`` and the params (setting -> value) that give matrix
    ``name`` the ``shape`` of its input file (:func:`misfit_hint`)."""
    yield [{setting: value} for setting, value in settings_giving(driver, options, name, shape)]
    for free_n in (False, True):  # each size the file fits (h=14 or h=15 of B[h // 2, n]'s 7 rows)
        yield [changed for changed in _settings_that_fit(driver, {name: shape}, options, free_n) if changed]


def _follows(driver, shapes: dict, options: Options, changed: dict) -> bool:
    """Whether the inputs' ``shapes`` fit once ``options`` take the ``changed`` settings (as a run
    then fits them)."""
    sets = {**options.sets, **{key: value for key, value in changed.items() if key != "n"}}
    try:
        fit(driver, shapes, replace(options, n=changed.get("n", options.n), sets=sets))
    except UsageError:
        return False
    return True


def _leaving_out(driver, shapes: dict, options: Options) -> str:
    """`` (the input files fit n=131, m=129, k=37: leave --n out)``: the size the inputs' ``shapes``
    fit once the fewest of the user's own settings are left out (``--n`` and the ``--set``\\ s that
    size an input; tuned values are not the user's); where they fit several sizes then, those to
    leave out and the choice to make (B[h // 2, n] of 7×40 at --n 30: h=14 or 15, both n=40); where
    none, ``; `` and why the shapes fit no size even then (the inputs disagree with each other)."""
    spelling, tuned = options.spelling, untuned(options)[0]
    sizing = [] if options.n is None else [
        param for param in _given_sizing(_Search(driver, shapes, options), options.n, options.sets, list(shapes))
        if param not in tuned]
    given = (["n"] if options.n is not None else []) + sizing
    failure = choice = None
    for count in range(1, len(given) + 1):
        for left in itertools.combinations(given, count):
            kept = {key: value for key, value in options.sets.items() if key not in left}
            said = _and([spelling.n if key == "n" else spelling.param(key, options.sets[key]) for key in left])
            try:
                n, params = fit(driver, shapes, replace(options, n=None if "n" in left else options.n, sets=kept))
            except _Ambiguous as error:  # said with what to leave out: its choice alone keeps --n 30
                choice = choice or f" (leave {said} out: {error})"
                continue
            except UsageError as error:
                failure = error  # the last: every one left out
                continue
            values = {key: params[key] for key in driver.PROGRAM.params if key in params}
            return f" ({spelling.inputs} fit {assignment(n, values)}: leave {said} out)"
    return choice or (f"; {failure}" if failure is not None else "")


def _readable_shapes(driver, options: Options) -> dict:
    """Matrix name -> (rows, cols) of the input files a run reads (``--input``, ``load``) that can be
    read as matrices; the others are said by the run, each against its own."""
    shapes = {}
    for name, path in {**load_files(driver), **options.inputs}.items():
        with contextlib.suppress(UsageError):
            shapes.update(file_shapes({name: path}))
    return shapes


def _at_another_n(driver, shapes: dict, options: Options) -> str:
    """`` (n=56, params={'r': 8} fits)`` where the shapes fit no params at the ``n`` given but do at
    another one (the params given kept); nothing otherwise."""
    changes = _settings_that_fit(driver, shapes, options, free_n=True) if options.n is not None else []
    return f" ({_settings_text(options.spelling, changes[0])} fits)" if len(changes) == 1 and changes[0] else ""


def _settings_that_fit(driver, shapes: dict, options: Options, free_n: bool) -> list[dict]:
    """The settings that give the inputs their ``shapes`` (``free_n``: ``n`` too), those given left
    out: one for each size they fit (:func:`_fits`); none where they fit none."""
    try:
        found = _fits(driver, shapes, replace(options, n=None) if free_n else options)
    except UsageError:
        return []
    return [{**({"n": n} if free_n and n != options.n else {}),
             **{key: value for key, value in params.items() if not _given_as(options, key, value)}}
            for n, params in found]


def _settings_text(spelling, settings: dict) -> str:
    """``--n 50 --set q=7 --set r=2`` (``n=50, params={'q': 7, 'r': 2}`` for the API: one dict, as
    Python takes a keyword once)."""
    if not spelling.api:
        return " ".join(_setting_text(spelling, key, value) for key, value in settings.items())
    params = {key: value for key, value in settings.items() if key != "n"}
    parts = [f"n={settings['n']}"] if "n" in settings else []
    return ", ".join(parts + ([f"params={params!r}"] if params else []))


def _given_as(options: Options, param: str, value) -> bool:
    """Whether ``options`` set ``param`` to ``value`` (``--set``'s text read as a number)."""
    if param not in options.sets:
        return False
    given = options.sets[param]
    return (read_setting(given, value) if isinstance(given, SetText) else given) == value


def _setting_text(spelling, setting: str, value) -> str:
    """``--n 50`` or ``--set q=7`` (``n=50``, ``params={'q': 7}`` for the API)."""
    return f"{spelling.n}{'' if spelling.api else ' '}{value}" if setting == "n" else spelling.param(setting, value)


def fit(driver, shapes: dict, options: Options) -> tuple[int, dict]:
    """``n`` and the params (those of ``options.sets``, and those the inputs' ``shapes``, name ->
    (rows, cols), determine) of a run at ``options``' tile settings; a :class:`UsageError` when they
    cannot be told."""
    search, best = _best(driver, shapes, options)
    if len(best) > 1:
        raise _Ambiguous(_ambiguity(search, best))
    return _values(*next(iter(best.items())))


def _fits(driver, shapes: dict, options: Options) -> list[tuple[int, dict]]:
    """Each size, ``(n, params)`` as :func:`fit` gives it, that the inputs' ``shapes`` fit: one, or
    those found where they fit several; a :class:`UsageError` where they fit none, or leave the
    values free to move together."""
    return [_values(*item) for item in sorted(_best(driver, shapes, options)[1].items())]


def _values(key: tuple, chosen: dict) -> tuple[int, dict]:
    """``n`` and the params set (given or inferred) of a fit."""
    n, values = key
    return n, {name: dict(values)[name] for name in chosen}


def _best(driver, shapes: dict, options: Options) -> tuple["_Search", dict]:
    """The search of the inputs' ``shapes`` and its preferred fits, key -> params set (:func:`fit`:
    a :class:`UsageError` where there is none, or one that the shapes do not pin down)."""
    spelling = options.spelling
    check_set_names(driver.PROGRAM, options)  # --set n=79: said as such, not as n missing (it was given)
    dims = sorted({d for shape in shapes.values() for d in shape})
    if options.n is None and not dims:
        names = ", ".join(d.name for d in driver.PROGRAM.matrices)
        raise UsageError(f"give {spelling.n} (the matrix order) or {spelling.input_form.format(names=names)}")
    search = _searched(driver, shapes, options, dims)
    if not search.fits:
        raise _Misfit(_misfit(search, _tuned_misfit(driver, shapes, options)) + _at_another_n(driver, shapes, options))
    unmet = {key: search.unmet(key[0], chosen) for key, chosen in search.fits.items()}
    fits = {key: chosen for key, chosen in search.fits.items() if unmet[key] is None}
    if not fits:  # the shapes tell the values, which the program refuses: say why
        raise UsageError(unmet[min(search.fits, key=lambda key: len(search.fits[key]))])
    best = search.preferred(fits)
    for key, chosen in list(best.items()):
        best.update(search.alternatives(key[0], chosen))
    if any(search.free(key[0], chosen) for key, chosen in best.items()):
        raise _Ambiguous(_ambiguity(search, best))
    return search, best


class _Misfit(UsageError):
    """The inputs' shapes fit no size: said of the shapes, each of which a file may have given."""


class _Ambiguous(UsageError):
    """The inputs' shapes fit several sizes, or leave values free: the user is to choose."""


class _TooManyWays(UsageError):
    """The unknowns take too many values together to try them all."""


def _searched(driver, shapes: dict, options: Options, dims: list) -> "_Search":
    """The search of the fits of the inputs' ``shapes``. Where the unknowns are too many to try
    together (three unknowns and two dimensions), a default that fits is kept: the fits with the
    fewest params at their defaults (those of every choice of that many, when several give one)."""
    search = _Search(driver, shapes, options)
    try:
        search.run(dims)
    except _TooManyWays:
        params = [name for name in search.unknowns if name != "n"]
        for count in range(1, len(params)):
            found = []
            for kept in itertools.combinations(params, count):
                trial = _Search(driver, shapes, options, search._evaluated, frozenset(kept))
                with contextlib.suppress(_TooManyWays):
                    trial.run(dims)
                    found += [trial] if trial.fits else []
            if found:
                for other in found[1:]:
                    for key, chosen in other.fits.items():
                        found[0]._note_fit(key, chosen)
                return found[0]
        raise
    search.widen(dims)
    return search


class _Search:
    """Trials of values of the unknowns against the inputs' shapes: ``fits`` maps each fit,
    ``(n, ((param, value), ...))``, to the fewest params set (given or inferred) that give it;
    ``closest`` is ``((dimensions matched, −params set), n, params set)`` of the trial nearest
    to fitting, for the message when none fits. ``evaluated`` is a cache of :meth:`evaluate`
    to share with another search of the same program and tiles; the params ``kept`` stay at their
    defaults."""

    def __init__(self, driver, shapes: dict, options: Options, evaluated: dict | None = None,
                 kept: frozenset = frozenset()):
        self.driver, self.shapes, self.options, self.kept = driver, shapes, options, kept
        self.n, self.params, self.spelling = options.n, options.sets, options.spelling
        self.fits, self.closest, self.unknowns = {}, None, []
        self._evaluated = {} if evaluated is None else evaluated
        self._solved = set()

    def run(self, dims: list) -> None:
        """Try the unknowns at their defaults and the dimensions, then at the solutions found
        while trying, until no new one is found (one round per unknown at most: a chain)."""
        self.unknowns = (["n"] if self.n is None else []) + [p for p in self._sizing_params(dims) if p not in self.kept]
        values = {name: ([] if name == "n" else [None]) + dims for name in self.unknowns}
        tried = set()
        for rounds_left in range(len(self.unknowns), -1, -1):
            if math.prod(len(v) for v in values.values()) > MAX_TRIALS:
                raise _TooManyWays(f"too many ways to fit {', '.join(self.unknowns)} to "
                                 f"{self.spelling.inputs}' shapes: give {self.spelling.n} and "
                                 f"{self.spelling.params} explicitly")
            found = {name: set() for name in self.unknowns}
            for trial in itertools.product(*values.values()):
                if trial not in tried:
                    tried.add(trial)
                    self._try(dict(zip(self.unknowns, trial)), found if rounds_left else None)
            if rounds_left == len(self.unknowns) > 1:
                self._try_jointly(list(tried)[:JOINT_STARTS] + self._divisor_starts(dims), tried)
            new = {name: sorted(found[name] - set(values[name])) for name in self.unknowns}
            if not any(new.values()):
                return
            for name in self.unknowns:
                values[name] += new[name]

    def widen(self, dims: list) -> None:
        """The other fits of the fits found whose inferred unknowns are free to move together
        (:meth:`free`): each free unknown pinned in turn at each of :func:`_sweep_values`, a
        search of its own infers the others."""
        swept = set()
        while True:
            free = {name for key, chosen in self.fits.items()
                    for name in self.free(key[0], chosen) + self.entangled(key[0], chosen)} - swept
            if not free:
                return
            for name in sorted(free):
                swept.add(name)
                for value in _sweep_values(dims):
                    pinned = (replace(self.options, n=value) if name == "n"
                              else replace(self.options, sets={**self.params, name: value}))
                    other = _Search(self.driver, self.shapes, pinned, self._evaluated)
                    other.run(dims)
                    for key, chosen in other.fits.items():
                        self._note_fit(key, chosen)

    def _try_jointly(self, starts: list, tried: set) -> None:
        """Try the values of all the unknowns together that :meth:`solve_jointly` finds from each
        trial of ``starts`` (a product has several solutions, reached from different ones), and
        the integers next to them (a floor division's rounding)."""
        points = {tuple(point.items()) for start in starts
                  for point in [self.solve_jointly(start)] if point is not None}
        for point in points:
            for values in itertools.product(*(range(value - 1, value + 2) for _, value in point)):
                trial = self._trial_of(*self.assigned(dict(zip(self.unknowns, values))))
                if trial not in tried:
                    tried.add(trial)
                    self._try(dict(zip(self.unknowns, trial)), None)

    def _divisor_starts(self, dims: list) -> list:
        """Trials with one unknown at one of the smallest divisors of the inputs' dimensions (the
        others at their defaults, ``n`` at the largest dimension): near the solutions where that
        unknown is a small factor of a product (``A[n * q, n + q]`` of 300×103: n=3, q=100)."""
        base = {name: max(dims) if name == "n" else None for name in self.unknowns}
        return [tuple({**base, name: value}.values()) for name in self.unknowns
                for value in _sweep_values(dims)[:DIVISOR_STARTS]]

    def _trial_of(self, n: int, chosen: dict) -> tuple:
        """The trial (a value per unknown, None for a param at its default) of ``n`` and ``chosen``."""
        def value(name):
            if name == "n":
                return n
            rest = {k: v for k, v in chosen.items() if k != name}
            default = self.evaluate(n, rest)
            return None if default is not None and default[0][name] == chosen.get(name) else chosen.get(name)
        return tuple(value(name) for name in self.unknowns)

    def solve_jointly(self, start: tuple) -> dict | None:
        """The values of all the unknowns together, from trial ``start``, that give every input
        dimension: Newton steps on them all at once, each unknown's slopes taken over the shortest
        doubling step that moves a dimension. Where two unknowns set two dimensions together
        (``A[n + r, n - r]``), :meth:`solve`, one unknown at a time with the others held, circles
        round the solution; a step on both reaches it at once where the formulas are affine."""
        n, chosen = self.assigned(dict(zip(self.unknowns, start)))
        evaluated = self.evaluate(n, chosen)
        if evaluated is None:
            return None
        values = evaluated[0]
        point = {name: n if name == "n" else values[name] for name in self.unknowns}
        wanted = np.array([shape[axis] for shape in self.shapes.values() for axis in (0, 1)], float)
        for _ in range(NEWTON_STEPS):
            here = self._input_dims(*self.assigned(point))
            if here is None:
                break
            slopes = np.array([self._slopes(point, name, here) for name in point]).T
            step = np.linalg.lstsq(slopes, wanted - here, rcond=None)[0]
            moved = {name: value + round(change) for (name, value), change in zip(point.items(), step)}
            if moved == point:
                break
            point = moved
        return point

    def _slopes(self, point: dict, name: str, here: list) -> list:
        """The change per unit of the input dimensions with unknown ``name`` at ``point``, over the
        shortest doubling step that changes one (zeros where none does)."""
        value = point[name]
        for step in (2 ** k for k in range(max(abs(value), *here, 1).bit_length() + 1)):
            moved = self._input_dims(*self.assigned({**point, name: value + step}))
            if moved is not None and moved != here:
                return [(after - before) / step for before, after in zip(here, moved)]
        return [0.0] * len(here)

    def entangled(self, n: int, chosen: dict) -> list:
        """The inferred unknowns of a fit of two unknowns whose dimensions are not affine in them
        (``A[n * q, n + q]``): such shapes may fit other, far values too (n=20, q=30 and n=30,
        q=20 of 600×50), which only a sweep finds; none where the formulas are affine (one fit)."""
        names = self.inferred(chosen)
        if len(names) != 2:
            return []
        a, b = names
        corners = [self._stepped(n, chosen, steps) for steps in ({}, {a: 1}, {b: 1}, {a: 1, b: 1})]
        if any(corner is None for corner in corners):
            return names
        base, moved_a, moved_b, both = corners  # a product moves with both more than with each alone
        return names if [x + y - z for x, y, z in zip(moved_a, moved_b, base)] != both else []

    def _stepped(self, n: int, chosen: dict, steps: dict) -> list | None:
        """The inputs' dimensions with each unknown of ``steps`` moved by its step."""
        for name, step in steps.items():
            n, chosen = self.moved(n, chosen, name, (n if name == "n" else chosen[name]) + step)
        return self._input_dims(n, chosen)

    def _sizing_params(self, dims: list) -> list:
        """The params left unset that some input's shape depends on (at n, else the largest
        dimension; the others at their defaults): a char or float one sizes nothing, and one
        no input involves (a QR's inner block) keeps its default."""
        unset = [name for name in self.driver.PROGRAM.params if name not in self.params]
        n = self.n if self.n is not None else max(dims)
        evaluated = self.evaluate(n, self.params)
        if evaluated is None:  # no size here to probe: every one is tried
            return unset
        return [name for name in unset if _is_int(evaluated[0][name])
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
            self._note_fit(self._key(n, values), chosen)
            return
        nearness = (2 * len(self.shapes) - len(wrong), -len(chosen))
        if self.closest is None or nearness > self.closest[0]:
            self.closest = (nearness, n, chosen)
        for position, name in itertools.product(wrong if found is not None else (), trial):
            found[name] |= self.solve(trial, values[name], name, position)

    def _note_fit(self, key: tuple, chosen: dict) -> None:
        if key not in self.fits or len(chosen) < len(self.fits[key]):
            self.fits[key] = chosen

    def assigned(self, trial: dict) -> tuple[int, dict]:
        """``n`` and the params set (those given, and the trial's that are not left to their default)."""
        return trial.get("n", self.n), {**self.params, **{k: v for k, v in trial.items()
                                                          if k != "n" and v is not None}}

    @staticmethod
    def moved(n: int, chosen: dict, name: str, value) -> tuple[int, dict]:
        """``n`` and ``chosen`` with unknown ``name`` (``n`` or a param) at ``value``."""
        return (value, chosen) if name == "n" else (n, {**chosen, name: value})

    def inferred(self, chosen: dict) -> list:
        """The unknowns a fit's values were inferred for: ``n`` unless given, and the params set but not given."""
        return (["n"] if self.n is None else []) + [name for name in chosen if name not in self.params]

    def evaluate(self, n: int, chosen: dict) -> tuple[dict, dict] | None:
        """(every param's value, each matrix's (rows, cols)) for these values, the requirements not
        checked; None where the program has no such size (n < 1, a division by a param of 0)."""
        key = (n, tuple(sorted(chosen.items())))
        if key not in self._evaluated:
            try:
                params = make_params(self.driver, replace(self.options, n=n, sets=chosen), requirements=False)
                shapes = matrix_shapes(self.driver, params)[0]
                self._evaluated[key] = (params.as_dict(),
                                        {name: (int(rows), int(cols)) for name, (rows, cols) in shapes.items()})
            except UsageError:
                self._evaluated[key] = None
        return self._evaluated[key]

    def solve(self, trial: dict, value: int, name: str, position: tuple) -> set:
        """The values of unknown ``name`` (at ``value`` in ``trial``, the others as there) that give
        ``position``, (matrix, axis), the input's dimension: secant steps from ``value``, which
        reach the solution at once where the program's formula is affine in ``name``, then the
        integers around it that a floor division's rounding leaves (a slope of 1/2: two). The
        first step is the shortest that changes the dimension (a power of ``name`` overflows at a
        long one; ``n // 100`` does not change at a short one)."""
        solved = (name, position, tuple((k, v) for k, v in trial.items() if k != name))
        if solved in self._solved:
            return set()
        self._solved.add(solved)
        wanted = self.shapes[position[0]][position[1]]
        dimension = lambda x: self._dimension({**trial, name: x}, position)
        x0, f0 = value, dimension(value)
        steps = (2 ** k for k in range(max(abs(value), wanted, 1).bit_length() + 1))
        x1 = None if f0 is None else next((x0 + s for s in steps if dimension(x0 + s) not in (None, f0)), None)
        if x1 is None:
            return set()
        for _ in range(SECANT_STEPS):
            f1 = dimension(x1)
            if f1 is None or f1 == f0:
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
            make_params(self.driver, replace(self.options, n=n, sets=chosen))
        except UsageError as error:
            return str(error)
        return None

    def preferred(self, fits: dict) -> dict:
        """The ``fits`` (key -> params set) keeping the most defaults, and of those, the ones
        overriding the fewest params whose default follows another value (:meth:`_derived`):
        inferring ``lev`` keeps ``w = 2 ** lev`` true, overriding ``w`` does not."""
        cost = {key: (len(chosen), sum(self._derived(key[0], chosen, name) for name in self.inferred(chosen)
                                       if name != "n")) for key, chosen in fits.items()}
        least = min(cost.values())
        return {key: chosen for key, chosen in fits.items() if cost[key] == least}

    def _derived(self, n: int, chosen: dict, name: str) -> bool:
        """Whether param ``name``'s default, at these values, changes with ``n`` or another param."""
        rest = {k: v for k, v in chosen.items() if k != name}
        evaluated = self.evaluate(n, rest)
        if evaluated is None:
            return False
        values = evaluated[0]
        probes = [(n + 1, rest), (2 * n + 1, rest)] + [
            (n, {**rest, other: values[other] + 1}) for other in self.driver.PROGRAM.params
            if other != name and _is_int(values[other])]
        return any(moved is not None and moved[0][name] != values[name]
                   for moved in (self.evaluate(*probe) for probe in probes))

    def alternatives(self, n: int, chosen: dict) -> dict:
        """The fits, key -> params set, that differ from ``n`` and ``chosen``'s by one inferred value
        being one more or one less (the inputs' shapes tell it only within a range); a
        :class:`UsageError` for an inferred value no input's shape depends on."""
        found = {}
        for name in self.inferred(chosen):
            value = n if name == "n" else chosen[name]
            moves = [self.moved(n, chosen, name, other) for other in (value - 1, value + 1)]
            if not self._depends(n, chosen, name, value):
                if all(self.unmet(*move) is not None for move in moves):
                    continue  # a requirement pins it (require rows == r, rows from a shape): r is that value
                how = self.spelling.n if name == "n" else self.spelling.param(name)
                raise UsageError(f"nothing in {self.spelling.inputs}' shapes depends on {name}: give {how}")
            for other_n, other_chosen in moves:
                if self._fits(other_n, other_chosen) and self.unmet(other_n, other_chosen) is None:
                    found[self._key(other_n, self.evaluate(other_n, other_chosen)[0])] = other_chosen
        return found

    def free(self, n: int, chosen: dict) -> list:
        """The inferred unknowns of a fit that the shapes leave free to move with the others: those
        whose change of the inputs' dimensions (:meth:`_change`) depends on the earlier ones'. An
        unknown nothing depends on is not one (:meth:`alternatives` says so)."""
        kept, free = [], []
        for name in self.inferred(chosen):
            change = self._change(n, chosen, name)
            if _rank(kept + [change]) > len(kept):
                kept.append(change)
            elif any(change):
                free.append(name)
        return free

    def _change(self, n: int, chosen: dict, name: str) -> list:
        """The change per unit of the inputs' dimensions when unknown ``name`` doubles (one more where
        the program has no size at double): the same doubling for each unknown, so that the
        factors of a product change it alike."""
        value = n if name == "n" else chosen[name]
        base = self._input_dims(n, chosen)
        for step in (max(1, abs(value)), 1):
            moved = self._input_dims(*self.moved(n, chosen, name, value + step))
            if moved is not None:
                return [(after - before) / step for before, after in zip(base, moved)]
        return [0.0] * len(base)

    def _key(self, n: int, values: dict) -> tuple:
        """A fit's key: ``n`` and every param's value."""
        return n, tuple((name, values[name]) for name in sorted(self.driver.PROGRAM.params))

    def _depends(self, n: int, chosen: dict, name: str, value: int) -> bool:
        """Whether some input's shape changes with unknown ``name`` (at ``value``; the others as they are)."""
        base = self._input_shapes(n, chosen)
        for other in (value + 1, 2 * value + 1, value + 10_000):  # a floor division may wait for a large change
            changed = self._input_shapes(*self.moved(n, chosen, name, other))
            if changed is not None and changed != base:
                return True
        return False

    def _input_shapes(self, n: int, chosen: dict) -> dict | None:
        evaluated = self.evaluate(n, chosen)
        return None if evaluated is None else {name: evaluated[1][name] for name in self.shapes}

    def _input_dims(self, n: int, chosen: dict) -> list | None:
        shapes = self._input_shapes(n, chosen)
        return None if shapes is None else [d for shape in shapes.values() for d in shape]

    def _fits(self, n: int, chosen: dict) -> bool:
        return self._input_shapes(n, chosen) == {name: tuple(shape) for name, shape in self.shapes.items()}

    def samples(self) -> list:
        """Each input dimension, (matrix, axis) -> size, at the unknowns' defaults (n: the largest
        dimension) and with each unknown moved alone; the program's sizes that do not exist left out."""
        n = self.n if self.n is not None else max(d for shape in self.shapes.values() for d in shape)
        base = self.evaluate(n, self.params)
        if base is None:
            return []
        evaluated = [base]
        for name in self.unknowns:
            start = n if name == "n" else base[0][name]
            evaluated += [self.evaluate(*self.moved(n, self.params, name, value))
                          for value in (start + 1, 2 * start + 3)]
        return [{(name, axis): shapes[name][axis] for name in self.shapes for axis in (0, 1)}
                for _, shapes in filter(None, evaluated)]


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _rank(vectors: list) -> int:
    """The rank of ``vectors``, each scaled to length 1 (an unknown's unit is its own: a product's
    factors change it by amounts as far apart as the factors)."""
    scaled = [np.divide(v, np.linalg.norm(v)) for v in vectors if any(v)]
    return int(np.linalg.matrix_rank(np.array(scaled))) if scaled else 0


def _sweep_values(dims: list) -> list:
    """The values a free unknown is swept over: the divisors of the inputs' dimensions (a product's
    factors), the smallest :data:`SWEEP_VALUES` of them."""
    divisors = {k for d in dims for i in range(1, math.isqrt(d) + 1) if d % i == 0 for k in (i, d // i)}
    return sorted(divisors)[:SWEEP_VALUES]


def fit_files(driver, options: Options) -> None:
    """``options.n`` (without ``--n``) and the params (those ``--set`` leaves out) that the shapes
    of the ``--input`` files and of the ``load`` matrices' files tell, at the tile settings and
    tuned params the run will use, as the Python API fits its arrays (their matrix names checked
    in any case). With ``--n``, shapes that fit no params (or files that cannot be read) leave
    them as they are: the run then says each file against its matrix, with the setting that
    would give it its shape."""
    program = driver.PROGRAM
    check_file_names([d.name for d in program.matrices], [d.name for d in program.workspaces], options.inputs, {},
                     program.params)
    files = {**load_files(driver), **options.inputs}
    refuse_missing_loads(driver, options.inputs)
    if options.n is not None and (not files or set(program.params) <= set(options.sets)):
        return
    try:
        shapes = file_shapes(files, load_notes(driver, options.inputs))
    except UsageError:
        if options.n is None:
            raise
        return
    try:
        options.n, options.sets = fit(driver, shapes, options)
    except _Misfit as error:  # the shapes said: which file gave each
        if options.n is None:
            raise UsageError(f"{error} ({_files_text(driver, files, options.inputs)})") from None
        _fit_all_but_one(driver, shapes, options)
    except UsageError:
        if options.n is None:
            raise
        _fit_all_but_one(driver, shapes, options)


def _files_text(driver, files: dict, given: dict) -> str:
    """Where each matrix's shape came from: ``A: r.npy, load at p.tile:6; B: --input B=b.npy``."""
    lines = {decl.name: decl.line for decl in driver.PROGRAM.matrices}
    source = Path(driver.PROGRAM.source).name
    return "; ".join(f"{name}: --input {name}={path}" if name in given else f"{name}: {path}, load at {source}:"
                     f"{lines[name]}" for name, path in files.items())


def _fit_all_but_one(driver, shapes: dict, options: Options) -> None:
    """The params (those ``--set`` leaves out) that all the files but one fit at ``--n``, the first
    such file in the program's order: the run then names that file, not one that fits (A, read
    first at the params' defaults, was named where B disagreed with --n). As they were if none."""
    for name in shapes:
        try:
            options.n, options.sets = fit(driver, {key: shape for key, shape in shapes.items() if key != name},
                                          options)
            return
        except UsageError:
            continue


def check_files(driver, options: Options) -> None:
    """The ``--input`` files and the ``load`` matrices' files against their matrices' shapes at
    ``options``' size, from their headers, as a run checks them and in its words (explain, graph
    and simulate read no matrix)."""
    from .launch import source  # here, not above: launch imports this module

    shapes = matrix_shapes(driver, make_params(driver, options))[0]
    for index, decl in enumerate(driver.PROGRAM.matrices):
        if decl.name in options.inputs or decl.init == "load":
            source(decl, index, tuple(int(d) for d in shapes[decl.name]), options, {}, driver, {})


def load_files(driver) -> dict:
    """Matrix name -> the file of each of the program's ``load`` matrices."""
    return {decl.name: load_path(decl, driver) for decl in driver.PROGRAM.matrices if decl.init == "load"}


def load_notes(driver, given) -> dict:
    """Matrix name -> :func:`load_note` of each ``load`` matrix not ``given`` otherwise."""
    return {decl.name: load_note(decl, driver) for decl in driver.PROGRAM.matrices
            if decl.init == "load" and decl.name not in given}


def load_note(decl, driver) -> str:
    """Which ``load`` a message about its file is about: the matrix and the ``.tile`` line (a file
    found, unfit, said by the message itself; one not found is :func:`missing_load`'s)."""
    return f" (load {decl.load!r} of matrix {decl.name}, {Path(driver.PROGRAM.source).name}:{decl.line})"


def refuse_missing_loads(driver, given) -> None:
    """A :class:`UsageError` for the first ``load`` matrix not ``given`` otherwise whose file is missing."""
    for decl in driver.PROGRAM.matrices:
        missing = missing_load(decl, driver) if decl.init == "load" and decl.name not in given else None
        if missing is not None:
            raise UsageError(missing)


def missing_load(decl, driver) -> str | None:
    """The error for a relative ``load`` whose file none of the places it is looked for has (said
    without a path of its own: each place is one), or None."""
    if os.path.isabs(decl.load) or os.path.isfile(load_path(decl, driver)):
        return None
    searched = program_places(driver.PROGRAM, driver, working_directory=False)
    program = Path(driver.PROGRAM.source).name
    # the .tile nowhere either: the driver was copied away from its program's folder
    moved = "" if any((place / program).is_file() for place in searched) else (
        f"; {program} is in none of them either: a driver finds its program's folder relative to itself, so keep "
        f"the two together, or compile the driver with -o where it will live")
    return (f"the file of load {decl.load!r} of matrix {decl.name} ({program}:{decl.line}) does not exist: a "
            f"relative path is relative to the directory of the .tile file; looked for in "
            f"{', '.join(map(str, searched))}{moved}")


#: said of a 1-D input file: how it becomes a matrix
VECTOR_HINT = " (a vector is a matrix of one column: save it as numpy.save(FILE, vector.reshape(-1, 1)))"


def file_shapes(files: dict, notes: dict | None = None) -> dict:
    """Matrix name -> (rows, cols) of the ``.npy`` file of each of ``files`` (name -> path), from its
    header; a file that cannot be read is said with its ``notes`` (name -> text, :func:`load_notes`)."""
    shapes = {}
    for name, path in files.items():
        try:
            shapes[name] = npyio.shape_of(path)
        except (npyio.InputFileError, OSError) as error:
            raise UsageError(f"the size cannot be read from {name}'s file: {error}"
                             f"{(notes or {}).get(name, '')}") from None
        note = (notes or {}).get(name, "")
        if len(shapes[name]) != 2:
            raise UsageError(f"input file {path!r} of matrix {name}: expected a 2-D array, got shape {shapes[name]}"
                             f"{VECTOR_HINT if len(shapes[name]) == 1 else ''}{note}")
        refuse_empty(path, name, shapes[name], note)
    return shapes


def refuse_empty(path, name: str, shape: tuple, note: str = "") -> None:
    """UsageError where matrix ``name``'s input file holds no entry: said as that, not as a shape
    that some other size (of 0) would fit; ``note``: which ``load`` it is (:func:`load_note`)."""
    if 0 in shape:
        raise UsageError(f"input file {path!r} of matrix {name} is empty ({shape[0]}×{shape[1]}): "
                         f"a matrix has at least one row and one column{note}")


def load_path(decl, driver) -> str:
    """The file of ``matrix NAME = load "PATH"``: PATH when absolute, else PATH relative to
    the first of the places the kernel module is looked for (:func:`.userkernels.program_places`:
    the ``.tile`` file's directory as the driver recorded it, ...) that has it, the working
    directory aside: a file of the same name where the run starts is not the program's (the
    first place if none has it, for the message). The module and the data come from one
    folder: a copy of a project with its driver reads the copy's."""
    if os.path.isabs(decl.load):
        return decl.load
    candidates = [str(base / decl.load) for base in program_places(driver.PROGRAM, driver, working_directory=False)]
    return next((c for c in candidates if os.path.isfile(c)), candidates[0])


def _misfit(search: _Search, tuned: str) -> str:
    """Why no size fits: inputs that disagree (:func:`_disagreement`), else the inputs' shapes
    against those the program expects with the values of the trial that matched the most
    dimensions (so that the inputs named are the ones at odds with the others); ``tuned``: the
    end of the message where the tuned values are why (:func:`_tuned_misfit`), else empty."""
    driver, shapes, n, spelling = search.driver, search.shapes, search.n, search.spelling
    name = driver.PROGRAM.name
    if search.closest is None:  # no trial had a size at all: say why the first did not
        first_n = n if n is not None else min(d for shape in shapes.values() for d in shape)
        try:
            matrix_shapes(driver, make_params(driver, replace(search.options, n=first_n)))
        except UsageError as error:
            return str(error)
        found = ", ".join(f"{matrix} {shape}" for matrix, shape in shapes.items())
        return f"{spelling.inputs}' shapes ({found}) fit no size of {name}: give {spelling.n} and {spelling.params}"
    disagreement = _disagreement(search) or _fit_apart(search)
    if disagreement is not None:
        return disagreement
    _, reference_n, chosen = search.closest
    broken = _broken_whatever_n(search, reference_n)
    if broken is not None:  # the settings given break a requirement at any size: the shapes are not why
        return broken
    values, expected = search.evaluate(reference_n, chosen)
    wrong = "; ".join(f"{matrix} has shape {shape}, expected {expected[matrix]}"
                      for matrix, shape in shapes.items() if expected[matrix] != tuple(shape))
    inferred = bool(search.unknowns)  # (none left: n and every param that sizes an input were given)
    mismatched = [m for m in shapes if expected[m] != tuple(shapes[m])]
    tiles = tile_settings_sizing(search.driver, replace(search.options, n=reference_n, sets=chosen), mismatched)
    if tiles and _sized_by_tiles_only(search, reference_n, chosen, mismatched):  # B[nb, nb]: n=40 would mislead
        return (f"{spelling.inputs}' shapes fit no size of {name}: {wrong}, a shape that only "
                f"{' and '.join(tiles)} change{'s' if len(tiles) == 1 else ''}: give "
                f"{' or '.join(spelling.tile(t) for t in tiles)} for the size you mean" + (tuned or ""))
    advice = (f"; give {spelling.n} and {spelling.params}{''.join(f' or {spelling.tile(t)}' for t in tiles)} "
              f"for the size you mean" if inferred else "")
    leave_out = _fit_without(search, _given_sizing(search, reference_n, chosen, mismatched))
    if leave_out:  # the user's own setting makes the shape the files do not have
        sizing, fitted, several = leave_out
        one = len(sizing) == 1
        advice = (f"; {' and '.join(spelling.param(k, values[k]) for k in sizing)} size{'s' if one else ''}"
                  f" {' and '.join(mismatched)}: leave {'it' if one else 'them'} out to take "
                  f"{', '.join(f'{k}={v}' for k, v in fitted.items()) or ' and '.join(sizing)} from "
                  f"{spelling.inputs}' shapes")
        if several:  # which then fit several sizes, which n (or a param) chooses among
            advice += f", and give {spelling.n} or {spelling.params} to choose among the sizes they fit"
    return (f"{spelling.inputs}' shapes fit no size of {name}: with "
            f"{assignment(reference_n, {k: values[k] for k in driver.PROGRAM.params})}, {wrong}" + (tuned or advice))


def _broken_whatever_n(search: _Search, n: int) -> str | None:
    """The requirement that the settings given (``--set``) break whatever the size (``require q >= 1``
    with ``--set q=-1``: it names only parameters given), as the run would say it; None where none is
    (one naming a size, a tile setting or a parameter left to its default is the shapes' to tell:
    ``n % nb == 0``)."""
    given = dict(search.options.sets)
    try:
        params = make_params(search.driver, replace(search.options, n=n, sets=given), requirements=False)
        found = search.driver.unmet(params) if hasattr(search.driver, "unmet") else None
    except (UsageError, *FORMULA_ERRORS):
        return None
    if found is None:
        return None
    named = set(re.findall(r"[A-Za-z_]\w*", re.sub(r'"[^"]*"', "", found[1]))) - {"and", "or", "not", "in"}
    return search.unmet(n, given) if named and named <= set(given) else None


def _given_sizing(search: _Search, n: int, chosen: dict, mismatched: list) -> list:
    """The integer params the user gave (``--set``) that size a ``mismatched`` input at these values:
    one more changes its expected shape."""
    base = search.evaluate(n, chosen)
    if base is None:
        return []
    sizing = []
    for name in search.params:
        value = base[0].get(name)  # (--set's values are text until read)
        if type(value) is not int:
            continue
        moved = search.evaluate(n, {**chosen, name: value + 1})
        if moved and any(moved[1][m] != base[1][m] for m in mismatched):
            sizing.append(name)
    return sizing


def _fit_without(search: _Search, sizing: list) -> tuple[list, dict, bool] | None:
    """``(sizing, their values, several)`` where the inputs fit once the params ``sizing`` are left out (the
    files then give them, and n), n not given: at one size, or (``several``) at several that all give
    ``sizing`` those values (A alone of gemm gives m and k, not n); else None."""
    if not sizing or search.n is not None:  # with n given, other params may fit as nonsense (r = -8)
        return None
    kept = replace(search.options, sets={name: value for name, value in search.params.items() if name not in sizing})
    try:
        fit(search.driver, search.shapes, kept)
        several = False
    except _Ambiguous:
        several = True
    except UsageError:
        return None
    dims = sorted({d for shape in search.shapes.values() for d in shape})
    taken = {tuple((name, dict(values).get(name)) for name in sizing)
             for _, values in _searched(search.driver, search.shapes, kept, dims).fits}
    if len(taken) != 1:
        return None
    return sizing, {name: value for name, value in taken.pop() if value is not None}, several


def tile_settings_sizing(driver, options: Options, names) -> list:
    """The tile settings (``nb``, or ``B``, ``b``, ``s``) that matrices ``names``' shapes change
    with at ``options``' values (``A[n, nb]``): no ``n`` or param gives such a matrix another width."""
    params = make_params(driver, options, requirements=False)
    base = matrix_shapes(driver, params)[0]
    moving = []
    for setting, value in params.as_dict().items():
        if setting not in TILE_SETTINGS or not _is_int(value):
            continue
        try:
            moved = matrix_shapes(driver, make_params(driver, replace(
                options, tiles={**options.tiles, setting: value + 1}), requirements=False))[0]
        except UsageError:
            continue
        if any(tuple(moved[name]) != tuple(base[name]) for name in names):
            moving.append(setting)
    return moving


def _sized_by_tiles_only(search: _Search, n: int, chosen: dict, names: list) -> bool:
    """Whether matrices ``names`` keep their shapes when ``n`` or any of the program's params changes."""
    driver, options = search.driver, replace(search.options, n=n, sets=chosen)
    base = matrix_shapes(driver, make_params(driver, options, requirements=False))[0]
    changes = [{"n": n + 1}] + [{"sets": {**chosen, name: value + 1}} for name, value in chosen.items()
                                if _is_int(value)]
    for change in changes:
        try:
            moved = matrix_shapes(driver, make_params(driver, replace(options, **change), requirements=False))[0]
        except UsageError:
            return False
        if any(tuple(moved[name]) != tuple(base[name]) for name in names):
            return False
    return True


def _tuned_misfit(driver, shapes: dict, options: Options) -> str:
    """The end of the message that no size fits where values from the tune cache are why: the
    program's own defaults in their place fit (:func:`.layout.tuned_note`); else empty."""
    tuned, own = untuned(options)
    if not tuned:
        return ""
    try:
        fit(driver, shapes, own)
    except UsageError:
        return ""
    return tuned_note(options, tuned)


def _disagreement(search: _Search) -> str | None:
    """The inputs' dimensions that the program makes the same size whatever the unknowns are
    (the same at every one of :meth:`_Search.samples`) and that the inputs give different sizes
    (``A[m, n]`` and ``B[n, m]`` both 400×250); None where there are none, or no unknowns."""
    samples = search.samples() if search.unknowns else []
    tied = {}
    for position in samples[0] if samples else ():
        tied.setdefault(tuple(sample[position] for sample in samples), []).append(position)
    given = {(matrix, axis): shape[axis] for matrix, shape in search.shapes.items() for axis in (0, 1)}
    # a size no unknown moves (S[m, 1] and T[1, n]: 1 both) ties nothing: a wrong one is said against
    # the shape expected
    groups = [group for sizes, group in tied.items()
              if len(set(sizes)) > 1 and len({given[position] for position in group}) > 1]
    if not groups:
        return None
    said = [_tied(group, given) for group in groups]
    shapes = ", ".join(f"{matrix} is {shape[0]}×{shape[1]}" for matrix, shape in search.shapes.items()
                       if any(matrix == m for group in groups for m, _ in group))
    return (f"{search.spelling.inputs}' shapes disagree with {search.driver.PROGRAM.name}, which makes "
            + ", and ".join(said) + f"; {shapes}")


def _fit_apart(search: _Search) -> str | None:
    """Two inputs that each fit a size alone, sizes that give ``n`` or a param set in both different
    values (``A[n + r, n - r]`` of 105×95 fits n=100, r=5, ``B[n * q, n]`` of 900×300 n=300, q=3):
    said so, rather than against the trial nearest to fitting them all, which takes values no input
    means (n=300, r=-195); None where no two do."""
    alone = {}
    for matrix, shape in search.shapes.items() if len(search.shapes) > 1 else ():
        with contextlib.suppress(UsageError):
            alone[matrix] = fit(search.driver, {matrix: shape}, search.options)
    for (first, (first_n, first_params)), (second, (second_n, second_params)) in itertools.combinations(
            alone.items(), 2):
        differing = (["n"] if first_n != second_n else []) + [
            name for name, value in first_params.items() if second_params.get(name, value) != value]
        if differing:
            shapes = ", ".join(f"{matrix} is {search.shapes[matrix][0]}×{search.shapes[matrix][1]}"
                               for matrix in (first, second))
            return (f"{search.spelling.inputs}' shapes disagree with {search.driver.PROGRAM.name}: {first} alone fits "
                    f"{assignment(first_n, first_params)} and {second} alone {assignment(second_n, second_params)}, "
                    f"a different {_and(differing)}; {shapes}")
    return None


def _tied(group: list, given: dict) -> str:
    """What the program makes the same size, and the sizes the inputs give them."""
    if len(group) == 2 and group[0][0] == group[1][0]:
        return f"{group[0][0]} square"
    names = _and([f"{matrix}'s {('rows', 'columns')[axis]}" for matrix, axis in group])
    return f"{names} the same size (here {_and([str(given[position]) for position in group])})"


def _ambiguity(search: _Search, best: dict) -> str:
    """The error for several fits (listed), or one that the shapes do not pin down."""
    spelling = search.spelling
    fits = [(n, dict(values)) for n, values in sorted(best)[:SHOWN]]
    # a char or float param, never a size, the same in every fit, is left out of each (it tells none apart)
    same = {name for name, value in fits[0][1].items() if isinstance(value, (str, float))
            and all(other.get(name) == value for _, other in fits[1:])} if len(fits) > 1 else set()
    listed = " or ".join(assignment(n, {k: v for k, v in values.items() if k not in same}) for n, values in fits)
    choose = f"give {spelling.n} or {spelling.params} to choose"
    if len(best) > 1:
        # more unknowns than the inputs have dimensions (some kept at their defaults, or not): the
        # search finds some of their fits, not all, and what tells those apart may not tell the others
        some = len(search.unknowns) + len(search.kept) > 2 * len(search.shapes)
        more = " or ..." if len(best) > SHOWN or some else ""
        choose = choose if some else _choice(search, best)
        return f"{spelling.inputs}' shapes fit several sizes ({listed}{more}): {choose}"
    chosen = next(iter(best.values()))
    return (f"{spelling.inputs}' shapes do not pin down {_and(search.inferred(chosen))}: {listed} fits, and so "
            f"may other values; {choose}")


def _choice(search: _Search, best: dict) -> str:
    """``give --set h=... to choose``: what tells the fits ``best`` apart, named alone (``n`` is the
    same in every fit of ``B[h // 2, n]`` of 7×40, h=14 or 15): each unknown with another value in
    every fit, one of which chooses; else all those whose values differ, together."""
    spelling = search.spelling
    names = ["n", *search.driver.PROGRAM.params]
    values = {name: {n if name == "n" else dict(params)[name] for n, params in best} for name in names}
    alone = [name for name in names if len(values[name]) == len(best)]
    if alone:
        return f"give {' or '.join(spelling.n if name == 'n' else spelling.param(name) for name in alone)} to choose"
    differing = [name for name in names if name != "n" and len(values[name]) > 1]
    params = ("params={" + ", ".join(f"{name!r}: ..." for name in differing) + "}" if spelling.api
              else " ".join(spelling.param(name) for name in differing))
    return f"give {_and(([spelling.n] if len(values['n']) > 1 else []) + [params])} to choose"


def _and(items: list) -> str:
    return " and ".join(filter(None, [", ".join(items[:-1]), items[-1]]))


def assignment(n: int, params: dict) -> str:
    return ", ".join(f"{name}={value}" for name, value in {"n": n, **params}.items())
