"""The program's kernel module (``use "kernels.py"``): where it is, whether it reads as Python,
and whether it defines every user kernel the program calls (and a GPU body, where it gives
one) and its check function, each able to take its arguments.

The module is parsed, never run (``kernel_module.read_definitions``); what only running it
could tell is left to the run.
"""
from __future__ import annotations

import ast
import hashlib
import keyword
from pathlib import Path

from . import nodes as n
from .checks import CHECK_ARITY
from .diagnostics import DiagnosticBag, did_you_mean, suggestion_notes
from .expressions import param_text
from .kernel_module import UNKNOWN, Definitions, Function, gpu_body, read_definitions
from .source import Span, marked_encoding, unmarked_utf16


class ModuleUse:
    """The kernel module of one program: :meth:`locate` finds and reads it (``definitions``, None
    when there is none or it cannot be read; ``digest``, the SHA-256 of the bytes read), then
    :meth:`check_functions` checks it."""

    def __init__(self, file: n.File, bag: DiagnosticBag):
        self.file, self.bag = file, bag
        self.program = file.programs[0]
        self.definitions: Definitions | None = None
        self.digest: str | None = None

    def locate(self) -> str | None:
        uses = self.file.uses
        for extra in uses[1:]:
            self.bag.error(extra.span, "E209", "a program names at most one kernel module")
        if not uses:
            return None
        use = uses[0]
        path = Path(self.file.path).parent / use.path
        if not Path(use.path).name or use.path.endswith(("/", "\\")):  # "", ".", "/", "dir/": no file's name
            self.bag.error(use.span, "E209", f"kernel module {use.path!r} names no file",
                           hint='name the .py file that defines the program\'s kernels: use "kernels.py"')
        elif path.suffix != ".py":
            python_file = path.with_name(path.name + ".py")  # use "k" for use "k.py" (tester x)
            self.bag.error(use.span, "E209", f"kernel module {use.path!r} is not a Python file",
                           hint=f"did you mean \"{use.path}.py\"? ({python_file.name} is there)"
                           if python_file.is_file() else "name the .py file that defines the program's kernels")
        elif path.is_dir():
            self.bag.error(use.span, "E209", f"kernel module {use.path!r} is a directory",
                           hint="name the .py file that defines the program's kernels")
        elif not path.is_file():
            beside = {f.stem: f.name for f in path.parent.glob("*.py")} if path.parent.is_dir() else {}
            close = beside.get(did_you_mean(path.stem, beside))  # the names apart from '.py', which all share
            self.bag.error(use.span, "E209", f"kernel module {use.path!r} not found", f"looked for {path}",
                           hint=f"did you mean {str(Path(use.path).with_name(close))!r}?" if close else None)
        else:
            self.definitions = self._read(use, path)
        return use.path

    def _read(self, use: n.Use, path: Path) -> Definitions | None:
        """The kernel module's definitions, if it compiles (read and compiled, never run)."""
        try:
            data = path.read_bytes()
            tree = ast.parse(data, str(path))
            compile(tree, str(path), "exec", dont_inherit=True)  # what parsing alone lets through
        except SyntaxError as error:  # NUL bytes too, on recent Pythons: a SyntaxError of no line
            where = f"{use.path}:{error.lineno}" if error.lineno else use.path
            encoding = marked_encoding(data)
            encoding = f"{encoding} text" if encoding else \
                "UTF-16 text without a byte-order mark" if unmarked_utf16(data) else None
            self.bag.error(use.span, "E209", f"kernel module {use.path!r} is not valid Python",
                           f"{where}: SyntaxError: {error.msg}",
                           hint=f"it reads as {encoding}: save it as UTF-8, as Python reads it" if encoding else None)
        except (OSError, ValueError) as error:  # unreadable, or NUL bytes on older Pythons
            self.bag.error(use.span, "E209", f"kernel module {use.path!r} cannot be read: {error}")
        else:
            self.digest = hashlib.sha256(data).hexdigest()  # what a record of this check names (driverload)
            return read_definitions(tree)
        return None

    def check_functions(self, kernels: dict, kernel_used: dict) -> None:
        """Every user kernel the program calls is a function of the module taking its arguments;
        so is a check the module defines (it takes the matrices before and after the run)."""
        if self.definitions is None:
            return
        for name, decl in kernels.items():
            if not decl.prelude and kernel_used[name]:
                params = [p.name.text for p in decl.params]
                declared = f"declared as {name}({', '.join(param_text(p) for p in decl.params)})"
                advice = "give the function one positional parameter per argument, in declaration order"
                body = gpu_body(self.definitions, name)
                # a GPU body alone is no CPU body: said so, not suggested as the function meant (where the
                # module binds the kernel's name, its own fault is said alone: tester u83a)
                only_gpu = () if not body.functions or self.definitions.of(name) else (
                    f"{self.file.uses[0].path} defines {body.name}, the kernel's GPU body: a kernel needs a CPU "
                    f"body too, named '{name}', which runs on the host",)
                self._check_function(name, decl.name.span, params, f"kernel '{name}'", declared, advice,
                                     not_suggested=body.name, notes=only_gpu)
                if not body.absent and not body.unknown:  # a GPU body is optional; one that is there must fit
                    self._check_function(body.name, decl.name.span, params, f"kernel '{name}' (its GPU body)",
                                         declared, advice, not_suggested=name)
        for check in self.program.checks[:1]:
            if check.kind.text not in CHECK_ARITY:
                kernel = kernels.get(check.kind.text)
                where = "" if kernel is None else "the prelude's" if kernel.prelude else \
                    f"declared at line {kernel.name.span.line}"
                noted = () if kernel is None else (
                    f"'{check.kind.text}' is a kernel ({where}), which a call runs on tiles: a check is a built-in "
                    f"one ({', '.join(CHECK_ARITY)}) or another function of the module",)
                self._check_function(check.kind.text, check.kind.span, ["before", "after"],
                                     f"check '{check.kind.text}'", "a check function takes the dicts of the "
                                     "matrices before and after the run, name -> numpy array (and, as a third "
                                     "argument, the dict of the run's parameters)",
                                     "define it as def NAME(before, after): and return the residual",
                                     optional=1, builtin=did_you_mean(check.kind.text, CHECK_ARITY), notes=noted)

    def _check_function(self, name: str, span: Span, params: list, what: str, declared: str, advice: str,
                        not_suggested: str | None = None, optional: int = 0, builtin: str | None = None,
                        notes: tuple = ()):
        """``name`` is a function of the kernel module that can take ``len(params)`` positional arguments,
        or up to ``optional`` more (a missing one is not told to be ``not_suggested``: a GPU body is not
        its CPU body). ``builtin``: the built-in check a missing check function's name is close to;
        ``notes``: said after the others."""
        module, bindings = self.file.uses[0].path, self.definitions.of(name)
        if UNKNOWN in bindings or (not bindings and self.definitions.open):
            return  # only running the module could tell
        functions = [b for b in bindings if isinstance(b, Function)]
        if not functions:
            others = [f"{module}:{b.line} defines {b.what}" for b in bindings]
            # a name bound to something else is the mistake to mend: no other function to suggest
            close = () if others else suggestion_notes(name, set(self.definitions.functions()) - {not_suggested})
            # a misspelt built-in check (cholesky_, Cholesky) reads as a user check once a module is named
            close += (f"did you mean the built-in check '{builtin}'?",) if builtin else ()
            self.bag.error(span, "E212", f"kernel module {module!r} defines no function '{name}'", *others, *close,
                           *notes, hint=_definition_hint(module, name, params))
        elif not any(f.accepts(count) for f in functions for count in range(len(params), len(params) + optional + 1)):
            counts = f"{len(params)}" + "".join(f" or {len(params) + extra}" for extra in range(1, optional + 1))
            self.bag.error(span, "E213",
                           f"function '{name}' of {module!r} cannot take the {counts} argument(s) of {what}",
                           *(_function_note(module, f, name) for f in functions), declared, *notes, hint=advice)

    def check_reads_params(self) -> bool:
        """Whether the program's user check function may take the run's parameters (a third
        argument): then a param the loop nest does not use may still be the check's."""
        checks = [check for check in self.program.checks[:1] if check.kind.text not in CHECK_ARITY]
        if not checks or self.definitions is None:
            return False
        bindings = self.definitions.of(checks[0].kind.text)
        return any(not isinstance(b, Function) or b.accepts(3) for b in bindings)


def _definition_hint(module: str, name: str, params: list) -> str:
    """How to define the missing function ``name``, in Python that compiles: a parameter named as a
    word of Python's (``lambda``, ``in``) gets a ``_`` (arguments go by position), and a kernel so
    named has no ``def`` that can bear its name."""
    if keyword.iskeyword(name):
        return (f"'{name}' is a word of Python's, which no def can be named: rename the kernel, or bind the "
                f"function to that name in {module}: globals()[{name!r}] = a function")
    safe = [f"{param}_" if keyword.iskeyword(param) else param for param in params]
    return f"define it in {module}: def {name}({', '.join(safe)}):"


def _function_note(module: str, function: Function, name: str) -> str:
    """``k.py:3 defines scale(A, B): 2 positional argument(s)``, with what else stops a positional call; a
    function reached through ``name = scale`` says where ``name`` is bound."""
    alias = f" (bound to '{name}' at line {function.alias_line})" if function.alias_line else ""
    note = f"{module}:{function.line} defines {function.signature()}{alias}: {function.takes()} positional argument(s)"
    if function.required_keywords:
        note += f", and keyword-only {', '.join(function.required_keywords)} without a default"
    return note
