"""The program's ``check`` declaration: a built-in check's arity, qualifiers and options, or the
words a user check (a function of the kernel module) cannot take.

What each built-in check takes is :mod:`tiledsl.language`'s table, which the runtime, checking a
driver's declarations again, reads as well.
"""
from __future__ import annotations

from ..language import CHECK_ARGUMENTS, CHECK_QUALIFIERS, QR_KERNELS
from . import nodes as n
from .diagnostics import DiagnosticBag, suggestion_notes
from .expressions import constant_of, expression_nodes, unparse
from .typer import ExpressionTyper

CHECK_ARITY = {kind: tuple(len(s) for s in signatures) for kind, signatures in CHECK_ARGUMENTS.items()}
CHECK_OPTIONS = {"product": ("alpha", "beta")}
#: how each built-in check is written (docs/language.md's table of checks), for an arity error
CHECK_FORMS = {"cholesky": ("A",), "lu": ("A", "A, P"), "qr": ("A, T",), "solve": ("A, X, B",),
               "inverse": ("A, X",), "product": ("C, A, B",)}
#: what each built-in check takes in each place: a matrix, or a workspace
CHECK_KINDS = {"qr": ("matrix", "workspace"), "lu": ("matrix", "workspace")}
#: the sizes of a built-in check's operands (as it reads them: op(A) is A transposed where it says so)
#: that must be equal, each (place, dimension), (place, dimension), why; a square operand is (p, 0), (p, 1)
CHECK_SHAPES = {
    "solve": (((0, 0), (0, 1), "{0} to be square"), ((1, 0), (0, 1), "{1} to have a row for each column of {0}"),
              ((2, 0), (0, 0), "{2} to have a row for each row of {0}"),
              ((1, 1), (2, 1), "{1} to have a column for each column of {2}")),
    "inverse": (((0, 0), (0, 1), "{0} to be square"), ((1, 0), (0, 0), "{1} to have {0}'s shape"),
                ((1, 1), (0, 1), "{1} to have {0}'s shape")),
    "product": (((0, 0), (1, 0), "{0} to have a row for each row of {1}"),
                ((0, 1), (2, 1), "{0} to have a column for each column of {2}"),
                ((1, 1), (2, 0), "{1} to have a column for each row of {2}")),
}


def check_declaration(check: n.CheckDecl, types: ExpressionTyper, has_module: bool) -> None:
    """A built-in check (its arity, qualifiers and options), or a function of the kernel module
    (``has_module``: the program names one)."""
    bag = types.bag
    kind = check.kind.text
    symbols = [types.matrix(arg.name) for arg in check.args]
    for arg in check.args:
        said = {}
        for word in arg.qualifiers:
            if word.text not in CHECK_QUALIFIERS:
                bag.error(word.span, "E209", f"unknown qualifier '{word.text}' of {arg.name.text}",
                          *suggestion_notes(word.text, CHECK_QUALIFIERS),
                          hint=f"'{word.text}' is a {types.scope.lookup(word.text).kind}: a comma is missing after it"
                          if _is_matrix(word.text, types) else f"qualifiers: {', '.join(CHECK_QUALIFIERS)}")
            elif word.text in said:  # `transposed transposed B` would read as one transpose, not as B
                bag.error(word.span, "E209", f"qualifier '{word.text}' of {arg.name.text} is given twice",
                          f"first given at column {said[word.text]}", hint="give each qualifier once")
            said.setdefault(word.text, word.span.column)
    if kind not in CHECK_ARITY:
        if not has_module:  # no module to hold a check of that name: a misspelt built-in one, said once
            bag.error(check.kind.span, "E209", f"unknown check '{kind}'", *suggestion_notes(kind, CHECK_ARITY),
                      hint=f"use one of {', '.join(CHECK_ARITY)}, or a function of the program's kernel "
                           f"module (use \"kernels.py\")")
            return
        _user_check_words(check, bag)
        return  # a user check: the module is read with the kernels
    arity = CHECK_ARITY[kind]
    if len(check.args) not in arity:
        counts = " or ".join(map(str, arity))
        bag.error(check.span, "E202", f"check {kind} takes {counts} argument(s), got {len(check.args)}",
                  hint=_arity_hint(kind, check.args, types))
    else:
        signature = next(s for s in CHECK_ARGUMENTS[kind] if len(s) == len(check.args))
        for arg, accepts in zip(check.args, signature):
            _check_qualifiers(kind, arg, accepts, bag)
    wanted = CHECK_KINDS.get(kind, ("matrix",) * 3)
    for arg, symbol, kind_wanted in zip(check.args, symbols, wanted):
        if symbol is not None and symbol.kind != kind_wanted:
            bag.error(arg.name.span, "E209", f"check {kind} needs a {kind_wanted} here, "
                                             f"'{arg.name.text}' is a {symbol.kind}")
    if len(check.args) in arity:
        _check_shapes(check, symbols, types)
    if kind == "cholesky" and symbols and symbols[0] is not None and symbols[0].kind == "matrix" \
            and types.never_square(symbols[0].node):
        decl = symbols[0].node
        bag.error(check.args[0].name.span, "E209",
                  f"check cholesky needs a square matrix, but '{decl.name.text}' is "
                  f"{unparse(decl.rows)} × {unparse(decl.cols)}",
                  "its numbers of rows and columns differ whatever the sizes")
    _upper_cholesky_tiling(check, types)
    given = {}
    for option in check.options:
        if option.name.text not in CHECK_OPTIONS.get(kind, ()):
            allowed = CHECK_OPTIONS.get(kind, ())
            bag.error(option.name.span, "E202", f"check {kind} has no option '{option.name.text}'",
                      hint=f"its options: {', '.join(allowed)}" if allowed else None)
        elif option.name.text in given:  # the run would take the last one
            bag.error(option.name.span, "E202", f"option '{option.name.text}' of check {kind} is given "
                                                f"twice", f"first given at column {given[option.name.text]}")
        else:
            _check_option_value(option, types)
        given.setdefault(option.name.text, option.name.span.column)


def _check_shapes(check: n.CheckDecl, symbols: list, types: ExpressionTyper) -> None:
    """The first of :data:`CHECK_SHAPES`' equalities that the operands' declared sizes break whatever
    the sizes are (the run says those that only turn out unequal), and a ``symmetric`` operand that
    is never square."""
    said = [("transposed " if _transposed(arg) else "") + arg.name.text for arg in check.args]
    sizes = [_read_sizes(arg, symbol) for arg, symbol in zip(check.args, symbols)]
    rules = [*CHECK_SHAPES.get(check.kind.text, ()),
             *(((p, 0), (p, 1), "{%d} to be square (it is symmetric)" % p) for p, arg in enumerate(check.args)
               if any(w.text == "symmetric" for w in arg.qualifiers))]
    for (place, dim), (other, other_dim), why in rules:
        if sizes[place] is None or sizes[other] is None:
            continue
        one, two = sizes[place][dim], sizes[other][other_dim]
        if types.never_equal(one, two):
            words = ("rows", "columns")
            second = "" if other == place else f"{said[other]} "
            types.bag.error(check.args[place].name.span, "E209",
                            f"check {check.kind.text} needs {why.format(*said)}",
                            f"{said[place]} has {unparse(one)} {words[dim]} and {second}{unparse(two)} "
                            f"{words[other_dim]}, unequal whatever the sizes")
            return


def _read_sizes(arg, symbol) -> tuple | None:
    """(rows, columns) of a check's operand as the check reads it (transposed where it says so);
    None for one that is not a declared matrix."""
    if symbol is None or symbol.kind != "matrix":
        return None
    rows, cols = symbol.node.rows, symbol.node.cols
    return (cols, rows) if _transposed(arg) else (rows, cols)


def _transposed(arg) -> bool:
    """Whether a check reads its operand ``arg`` transposed."""
    return any(word.text == "transposed" for word in arg.qualifiers)


def _upper_cholesky_tiling(check: n.CheckDecl, types: ExpressionTyper) -> None:
    """``check cholesky(upper A)`` under a hybrid tiling: the run checks an upper factor on tiles
    whose rows and columns are cut alike only, and refuses the check of every hybrid run."""
    if check.kind.text != "cholesky" or types.tiling != "hybrid" or len(check.args) != 1 \
            or [word.text for word in check.args[0].qualifiers] != ["upper"]:
        return  # (other qualifiers, or their number, are said wrong above)
    name = check.args[0].name.text
    types.bag.error(check.args[0].qualifiers[0].span, "E209",
                    f"check cholesky(upper {name}) needs a uniform tiling, and this program's is hybrid",
                    f"an upper factor is checked on tiles whose rows and columns are cut alike: hybrid tiles "
                    f"cut {name}'s rows in blocks of B, and each block column in s slices",
                    hint=f"use 'tiling uniform(nb = ...)', or check an upper Cholesky on hybrid tiles with a "
                         f"check of your own: check NAME({name}), NAME a function of the kernel module")


def _arity_hint(kind: str, args, types: ExpressionTyper) -> str:
    """The hint of a check given too few or too many matrices: the operands written, in order, split
    where a comma is missing between two of the program's matrices (``C A``); else the calls that
    keep them, or the check's forms where no call can be told."""
    operands = _operands(args, types)
    if len(operands) > len(args) and len(operands) in CHECK_ARITY[kind]:
        after = " and ".join(f"'{word}'" for word in _joined(args, types))
        return (f"a comma is missing after {after}: "
                f"write it {kind}({', '.join(text for text, _ in operands)})")
    calls = [call for form in CHECK_FORMS[kind] if (call := _written(kind, form, operands, types)) is not None]
    if calls:
        return "write it " + " or ".join(calls)
    return "name all it takes: " + " or ".join(f"{kind}({form})" for form in CHECK_FORMS[kind])


def _operands(args, types: ExpressionTyper) -> list:
    """``(text, name)`` of each operand written: an argument's words end one at each name of a
    matrix or workspace among them (``C A`` is two, a comma missing; ``transposed A`` is one)."""
    operands = []
    for arg in args:
        words = []
        for word in (*arg.qualifiers, arg.name):
            words.append(word.text)
            if word is arg.name or _is_matrix(word.text, types):
                operands.append((" ".join(words), word.text))
                words = []
    return operands


def _joined(args, types: ExpressionTyper) -> list:
    """The words of ``args`` that name a matrix or workspace and are followed by another in their
    argument, a comma missing after each."""
    return [word.text for arg in args for word in arg.qualifiers if _is_matrix(word.text, types)]


def _is_matrix(name: str, types: ExpressionTyper, kind: str | None = None) -> bool:
    """Whether ``name`` is a matrix or workspace of the program (of ``kind`` where given)."""
    symbol = types.scope.lookup(name)
    return symbol is not None and symbol.kind in ((kind,) if kind else ("matrix", "workspace"))


def _written(kind: str, form: str, operands, types: ExpressionTyper) -> str | None:
    """Check ``kind`` written in ``form`` with the ``operands`` in their places, in order, and the form's
    names in those left (``product(C, A)``: ``product(C, A, B)``); None where such a name is not of the
    program's matrices of that place's kind, or is written already (in ``product(A)``, A is C)."""
    names = form.split(", ")
    written = {name for _, name in operands}
    places = list(enumerate(names))[len(operands):]
    wanted = CHECK_KINDS.get(kind, ("matrix",) * 3)
    if any(name in written or not _is_matrix(name, types, wanted[place]) for place, name in places):
        return None
    return f"{kind}({', '.join([text for text, _ in operands][:len(names)] + [name for _, name in places])})"


def _check_option_value(option, types: ExpressionTyper) -> None:
    """A check option's value: a number, from constants and the program's parameters only (the
    check runs after the loop nest, with the run's parameters)."""
    value = option.value
    if constant_of(value, "float") is not None:
        return
    other = next((e for e in expression_nodes(value) if isinstance(e, (n.Attr, n.Method)) or isinstance(e, n.Name)
                  and getattr(types.scope.lookup(e.ident.text), "kind", "param") != "param"), None)
    if other is not None:
        types.bag.error(other.span, "E205", f"option {option.name.text} must be a number made of constants "
                                            f"and the program's parameters, found '{unparse(other)}'")
    else:
        types.number_expr(value)


def check_lu_pivots(checks, kernel_used: dict, bag: DiagnosticBag) -> None:
    """``check lu(A, P)`` reads the pivots the prelude's getrf records in P: a program that calls no getrf
    leaves P as it began, and its check failed only after the whole run ('no task wrote P[0, 0]')."""
    for check in checks:
        if check.kind.text == "lu" and len(check.args) == 2 and not kernel_used.get("getrf"):
            bag.error(check.kind.span, "E209", f"check lu({check.args[0].name.text}, {check.args[1].name.text}) reads "
                                               f"the pivots that getrf records in {check.args[1].name.text}, and this "
                                               f"program does not call getrf",
                      hint=f"an LU without pivoting is checked by lu({check.args[0].name.text})")


#: what a built-in check reads as the program's results: the place of each, and what it holds
CHECK_RESULTS = {"cholesky": {0: "the factor"}, "lu": {0: "the factors", 1: "the interchanges getrf records"},
                 "qr": {0: "the factors R and V", 1: "the T factors of the QR kernels"},
                 "solve": {1: "the solution"}, "inverse": {1: "the inverse"}, "product": {0: "the product"}}
_ORDINALS = ("1st", "2nd", "3rd")


def check_result_written(checks, calls, kernel_used: dict, declared: set, bag: DiagnosticBag) -> None:
    """Each matrix a built-in check reads as a result must be one the program writes (of the
    ``declared`` matrices and workspaces: an unknown name is said as such, once, and the caller
    leaves out those that a call refused names, which it may write): a
    ``product(A, B, C)`` written in numpy's order, its result last, compared an unchanged ``in`` A
    with itself and passed (residual 0) whatever the program computed; ``qr(A, W)`` with a W no call
    writes passed, the check reading the T tiles of the QR kernels' calls."""
    written = sorted(_written_matrices(calls))
    for check in checks:
        kind = check.kind.text
        if kind not in CHECK_RESULTS or len(check.args) not in CHECK_ARITY[kind]:
            continue  # a user check (see check_user_reads_results), or an arity said wrong already
        for place, role in CHECK_RESULTS[kind].items():
            name = check.args[place].name if place < len(check.args) else None
            if name is None or name.text in written or name.text not in declared \
                    or _said_already(kind, place, kernel_used):
                continue
            bag.error(name.span, "E209", f"check {kind} reads its {_ORDINALS[place]} argument, {name.text}, as "
                                         f"{role} the program computes, and no call of the program writes "
                                         f"{name.text}",
                      f"the program writes {', '.join(written)}" if written else "no call of the program writes a "
                                                                                   "matrix",
                      hint=f"name there the matrix that holds {role}"
                      + (": the product comes first, then its operands" if kind == "product" else ""))


def _written_matrices(calls) -> set:
    """The matrices and workspaces some call writes (a tile, a panel or a sub-range of one)."""
    return {access.matrix for call in calls for access in call.accesses if access.mode != "in"}


def _said_already(kind: str, place: int, kernel_used: dict) -> bool:
    """Whether the kernels the program calls make a check's result unwritten for a reason said on its
    own: no getrf for lu's interchanges (:func:`check_lu_pivots`), no QR kernel (:func:`check_qr_replay`)."""
    return (kind == "lu" and place == 1 and not kernel_used.get("getrf")) or \
        (kind == "qr" and not any(kernel_used.get(name) for name in QR_KERNELS))


def check_user_reads_results(checks, calls, has_module: bool, bag: DiagnosticBag, unjudged: set) -> None:
    """W304 for a user check none of whose matrices a call writes: it compares each with itself
    (before and after the run are the same) and verifies nothing the program computed (none said
    of one that a call refused names, which it may write: ``unjudged``)."""
    written = _written_matrices(calls)
    for check in checks:
        if check.kind.text in CHECK_RESULTS or not has_module or not check.args:
            continue
        if not any(arg.name.text in written or arg.name.text in unjudged for arg in check.args):
            names = ", ".join(arg.name.text for arg in check.args)
            bag.warning(check.kind.span, "W304", f"check {check.kind.text} reads no matrix the program writes",
                        f"{names} {'is' if len(check.args) == 1 else 'are'} the same before and after the run"
                        + (f"; the program writes {', '.join(sorted(written))}" if written else ""),
                        hint="name the matrices the program computes")


def check_product_start(checks, calls, matrices: dict, bag: DiagnosticBag, unjudged: set) -> None:
    """W306 for ``check product(C, A, B)`` at its default β = 1 where every call passes C as ``out``: the
    program's C cannot depend on C₀, and the check compares it with α·op(A)·op(B) + C₀ (it fails by
    ‖C₀‖ however right the product; none said where C starts as zeros, or a call refused names it).
    A kernel that takes C ``inout`` may or may not read it (gemm at beta = 0.0): not judged."""
    for check in checks:
        if check.kind.text != "product" or len(check.args) != 3 or any(o.name.text == "beta" for o in check.options):
            continue
        name = check.args[0].name
        decl = matrices.get(name.text)
        if decl is None or name.text in unjudged or (decl.init.kind == "named" and decl.init.what.text == "zeros"):
            continue
        modes = {access.mode for call in calls for access in call.accesses if access.matrix == name.text}
        if modes == {"out"}:
            bag.warning(name.span, "W306", f"check product compares {name.text} with α·op(A)·op(B) + β·{name.text}₀ "
                                           f"at β = 1, and no call reads {name.text}'s original values",
                        f"every call passes {name.text} as out: the product the program computes cannot hold "
                        f"{name.text}₀, and the check fails by its norm",
                        hint=f"write beta = 0.0 in the check (or declare {name.text} = zeros)")


def check_qr_replay(checks, kernel_used: dict, bag: DiagnosticBag) -> None:
    """``check qr`` rebuilds Q from the reflectors of the prelude's QR kernels: a program that
    calls none of them would have nothing replayed (Q = I), and its check would be meaningless."""
    for check in checks:
        if check.kind.text == "qr" and len(check.args) in CHECK_ARITY["qr"] \
                and not any(kernel_used.get(name) for name in QR_KERNELS):
            bag.error(check.kind.span, "E209", "check qr replays the reflectors of geqrt, tpqrt and ttqrt, "
                                               "which this program does not call",
                      hint="check a QR made of your own kernels with a check of your own: "
                           "check NAME(A, ...) with NAME a function of the kernel module")


def _check_qualifiers(kind: str, arg, accepts: str, bag: DiagnosticBag) -> None:
    """The qualifiers of one argument of built-in check ``kind`` (``accepts``: see
    :data:`CHECK_ARGUMENTS`) are ones it takes, and mean something together."""
    words = [w for w in arg.qualifiers if w.text in CHECK_QUALIFIERS]
    given = {w.text for w in words}
    if not words:
        return
    if accepts == "-":
        bag.error(words[0].span, "E209", f"check {kind} takes {arg.name.text} as it is, "
                                         f"without the qualifier '{words[0].text}'")
    elif accepts == "r" and (len(given) > 1 or given & {"unit", "transposed"}):
        bag.error(words[0].span, "E209", f"the result {arg.name.text} of check {kind} takes one of "
                                         f"lower, upper or symmetric, not '{' '.join(w.text for w in words)}'")
    elif accepts == "t" and (len(words) > 1 or not given <= {"lower", "upper"}):
        bag.error(words[0].span, "E209", f"check {kind} takes the triangle its factor is in: lower (the "
                                         f"default) or upper {arg.name.text}, not "
                                         f"'{' '.join(w.text for w in words)}'")
    elif accepts == "o" and not _operand_words(given):
        alone = len(words) == 1
        bag.error(words[0].span, "E209", f"the qualifier{'' if alone else 's'} "
                                         f"'{' '.join(w.text for w in words)}' of {arg.name.text} "
                                         f"{'means nothing alone' if alone else 'mean nothing together'}",
                  hint="one of lower or upper, with unit if its diagonal is 1; or symmetric, with "
                       "upper if the matrix stores its upper triangle; transposed with either")


def _user_check_words(check: n.CheckDecl, bag: DiagnosticBag) -> None:
    """A user check receives the named matrices as they are: qualifiers and options would be
    silently without effect, so they are errors."""
    for arg in check.args:
        for word in arg.qualifiers:
            bag.error(word.span, "E209", f"qualifier '{word.text}' of {arg.name.text} has no effect on "
                                         f"user check '{check.kind.text}'",
                      "a user check receives the whole matrices, before and after the run",
                      hint=f"drop it, and take what the check needs from before[\"{arg.name.text}\"] and "
                           f"after[\"{arg.name.text}\"] in {check.kind.text}")
    first = {}
    for arg in check.args:
        if arg.name.text in first:  # the function gets one entry per matrix: the second would be nothing
            bag.error(arg.name.span, "E209", f"user check '{check.kind.text}' names {arg.name.text} twice",
                      f"first at column {first[arg.name.text]}; the check receives each matrix once",
                      hint=f"name {arg.name.text} once")
        first.setdefault(arg.name.text, arg.name.span.column)
    for option in check.options:
        bag.error(option.name.span, "E202", f"user check '{check.kind.text}' takes no options",
                  hint=f"give {option.name.text} its value in the check function")


def _operand_words(given: set) -> bool:
    """Whether qualifiers ``given`` describe an operand: one triangle (``unit`` with it),
    or ``symmetric`` (with the triangle it is stored in); ``transposed`` with either."""
    triangles = given & {"lower", "upper"}
    if "symmetric" in given:  # with the triangle M stores (lower by default)
        return "unit" not in given and len(triangles) <= 1
    return len(triangles) <= 1 and ("unit" not in given or bool(triangles))
