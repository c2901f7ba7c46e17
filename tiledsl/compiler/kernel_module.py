"""What a kernel module defines, read from its syntax tree without running it.

``tiledsl check`` must never execute user code, so it cannot know a module's names
for sure; it reads the module's top-level statements instead. Each name gets the
list of its possible bindings:

* a ``def`` (undecorated) or ``NAME = lambda ...`` is a :class:`Function` whose
  positional parameters can be counted; ``NAME = other`` where ``other`` is such a
  function binds the same function under a second name (an annotated ``NAME: T = ...``
  binds as the plain assignment does);
* a ``class``, ``NAME = 3`` (a literal), an ``async def`` or a generator (a ``def`` with
  ``yield``: a call runs neither's body) is a :class:`NotFunction` (the run wants a function);
* anything else (an import, a decorated ``def``, ``NAME = make_kernel()``, ``NAME += ...``,
  a loop or ``with`` target) is :data:`UNKNOWN`: only running the module could tell.

A binding directly in the module body replaces the earlier ones; one inside an
``if``, ``try``, ``for``, ``while``, ``with`` or ``match`` block may or may not
happen, so it joins them. A ``from m import *`` or a use of ``globals()`` may bind
any name: :attr:`Definitions.open` is then true. A name a function declares
``global``, or a walrus operator binds, is unknown too.

A kernel ``NAME``'s optional GPU body is the function ``NAME_gpu``: :func:`gpu_body`
says what the syntax tells of it. (The runtime, which never imports the compiler,
states the suffix too: ``tiledsl.runtime.userkernels.GPU_SUFFIX``, held equal by a test.)
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

#: ``NAME`` + GPU_SUFFIX names the GPU body of user kernel ``NAME``
GPU_SUFFIX = "_gpu"


@dataclass(frozen=True)
class Function:
    """A function the module defines: where, under which name, and its parameters."""

    line: int
    name: str
    arguments: ast.arguments
    alias_line: int | None = None  # the line of ``NAME = name`` when reached through another name

    @property
    def required_keywords(self) -> list[str]:
        """Keyword-only parameters without a default: a positional call cannot fill them."""
        return [arg.arg for arg, default in zip(self.arguments.kwonlyargs, self.arguments.kw_defaults)
                if default is None]

    @property
    def least(self) -> int:
        positional = self.arguments.posonlyargs + self.arguments.args
        return len(positional) - len(self.arguments.defaults)

    @property
    def most(self) -> int | None:
        """The most positional arguments it takes; None for any number (``*args``)."""
        if self.arguments.vararg:
            return None
        return len(self.arguments.posonlyargs + self.arguments.args)

    def accepts(self, count: int) -> bool:
        """Whether ``function(t1, ..., t_count)`` binds every parameter."""
        return not self.required_keywords and self.least <= count and (self.most is None or count <= self.most)

    def takes(self) -> str:
        """The positional argument counts it takes, in words: ``2``, ``1 to 3``, ``at least 2``."""
        if self.most is None:
            return f"at least {self.least}"
        return str(self.least) if self.least == self.most else f"{self.least} to {self.most}"

    def signature(self) -> str:
        parameters = ast.unparse(self.arguments)
        return f"lambda {parameters}" if self.name == "lambda" else f"{self.name}({parameters})"


@dataclass(frozen=True)
class NotFunction:
    """A name bound to something that is certainly not a function (a class)."""

    line: int
    what: str


UNKNOWN = object()  # a binding only running the module could tell
LITERALS = (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.JoinedStr)


@dataclass
class Definitions:
    """The possible top-level bindings of each name of one module."""

    bindings: dict[str, list]
    open: bool  # a star import or globals() may bind any name

    def of(self, name: str) -> list:
        return self.bindings.get(name, [])

    def functions(self) -> list[str]:
        """The names that may be bound to a function (for suggestions)."""
        return [name for name, found in self.bindings.items() if any(isinstance(b, Function) for b in found)]


def read_definitions(tree: ast.Module) -> Definitions:
    """The top-level bindings of a parsed module (see the module's docstring)."""
    definitions = Definitions({}, open=any(isinstance(node, ast.Name) and node.id == "globals"
                                           for node in ast.walk(tree)))
    _read_block(tree.body, definitions, conditional=False)
    # names a function declares global, or a walrus binds, may be bound anywhere: nothing to check
    for node in ast.walk(tree):
        names = node.names if isinstance(node, ast.Global) else [node.target.id] if isinstance(node, ast.NamedExpr) else []
        for name in names:
            definitions.bindings.setdefault(name, []).append(UNKNOWN)
    return definitions


def _read_block(statements, definitions: Definitions, conditional: bool):
    for statement in statements:
        for name, binding in _bindings(statement, definitions):
            if conditional:
                definitions.bindings.setdefault(name, []).append(binding)
            else:
                definitions.bindings[name] = [binding]
        if isinstance(statement, ast.Delete) and not conditional:
            for target in statement.targets:
                if isinstance(target, ast.Name):
                    definitions.bindings.pop(target.id, None)
        for block in _inner_blocks(statement):
            _read_block(block, definitions, conditional=True)


def _inner_blocks(statement) -> list[list]:
    """The statement lists nested in a module-level compound statement (not in defs or classes), but the
    body of ``if __name__ == "__main__":``, which never runs as the run imports the module (tester x: a
    kernel defined there passed check and failed at run time)."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return []
    if _as_a_script_only(statement):
        return [statement.orelse]
    blocks = [getattr(statement, field, []) for field in ("body", "orelse", "finalbody")]
    blocks += [handler.body for handler in getattr(statement, "handlers", [])]
    blocks += [case.body for case in getattr(statement, "cases", [])]
    return blocks


def _as_a_script_only(statement) -> bool:
    """Whether ``statement`` is ``if __name__ == "__main__":`` (either way round)."""
    test = getattr(statement, "test", None) if isinstance(statement, ast.If) else None
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = {ast.dump(side) for side in (test.left, test.comparators[0])}
    return sides == {ast.dump(ast.Name("__name__", ast.Load())), ast.dump(ast.Constant("__main__"))}


def _bindings(statement, definitions: Definitions):
    """(name, binding) for every module-level name ``statement`` itself binds."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [(statement.name, _function(statement))]
    if isinstance(statement, ast.ClassDef):
        return [(statement.name, NotFunction(statement.lineno, f"class {statement.name}"))]
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        if any(alias.name == "*" for alias in statement.names):
            definitions.open = True
        return [((alias.asname or alias.name).split(".")[0], UNKNOWN) for alias in statement.names]
    if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        return [binding for target in targets
                for binding in _assigned(target, statement.value, statement.lineno, definitions)]
    return [(name, UNKNOWN) for name in _statement_targets(statement)]


def _assigned(target, value, line: int, definitions: Definitions) -> list:
    """(name, binding) for ``target = value``; a tuple or list of names takes a literal one's items in
    turn (``a_gpu, b_gpu = a, b``); any other unpacking binds names to what only running tells."""
    if isinstance(target, ast.Name):
        return [(target.id, _value(target, value, line, definitions))]
    sequences = (ast.Tuple, ast.List)
    if isinstance(target, sequences) and isinstance(value, sequences) and len(target.elts) == len(value.elts) \
            and not any(isinstance(e, ast.Starred) for e in target.elts + value.elts):
        return [binding for t, v in zip(target.elts, value.elts) for binding in _assigned(t, v, line, definitions)]
    return [(name, UNKNOWN) for name in _target_names(target)]


def _function(statement):
    """What a ``def`` binds: unknown when decorated; not a function the run can call when a call would
    not run its body (an ``async def``, a generator)."""
    if statement.decorator_list:
        return UNKNOWN
    if isinstance(statement, ast.AsyncFunctionDef):
        return NotFunction(statement.lineno, f"async def {statement.name}, whose body a call does not run")
    if _yields(statement.body):
        return NotFunction(statement.lineno, f"def {statement.name} with 'yield', a generator whose body a call "
                                             f"does not run")
    return Function(statement.lineno, statement.name, statement.args)


def _yields(body: list) -> bool:
    """Whether a function body yields (not counting the functions and classes defined in it)."""
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    pending = list(body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(node, nested):
            pending.extend(ast.iter_child_nodes(node))
    return False


def _value(target: ast.Name, value, line: int, definitions: Definitions):
    """What ``NAME = value`` (at ``line``) binds: a lambda, the single function another name is bound to,
    not a function (a literal, or another name bound to a class or a literal only), else unknown."""
    if isinstance(value, ast.Lambda):
        return Function(line, "lambda", value.args)
    if isinstance(value, LITERALS):
        return NotFunction(line, f"{target.id} = {ast.unparse(value)[:40]}")
    bound = definitions.of(value.id) if isinstance(value, ast.Name) else []
    if len(bound) == 1 and isinstance(bound[0], Function):
        return Function(bound[0].line, bound[0].name, bound[0].arguments, alias_line=line)
    if len(bound) == 1 and isinstance(bound[0], NotFunction):
        return NotFunction(line, f"{target.id} = {value.id}, {bound[0].what} (line {bound[0].line})")
    return UNKNOWN


def _statement_targets(statement) -> list[str]:
    """Names bound by augmented assignments (``+=``), and by loop and ``with`` targets."""
    targets = []
    if isinstance(statement, ast.AugAssign):
        targets.append(statement.target)
    if isinstance(statement, (ast.For, ast.AsyncFor)):
        targets.append(statement.target)
    if isinstance(statement, (ast.With, ast.AsyncWith)):
        targets += [item.optional_vars for item in statement.items if item.optional_vars]
    return [name for target in targets for name in _target_names(target)]


def _target_names(target) -> list[str]:
    return [node.id for node in ast.walk(target) if isinstance(node, ast.Name)]


@dataclass(frozen=True)
class GpuBody:
    """What a module's syntax tells of the GPU body of one kernel, the function ``name``."""

    name: str  # NAME_gpu
    bindings: tuple  # its possible bindings (Function, NotFunction, UNKNOWN); none: a CPU-only kernel
    open: bool  # a star import or globals() may bind it all the same

    @property
    def unknown(self) -> bool:
        """Only running the module could tell whether there is one, or what it is."""
        return UNKNOWN in self.bindings or (not self.bindings and self.open)

    @property
    def absent(self) -> bool:
        """Certainly none: the kernel has a CPU body only (its tasks run on the host)."""
        return not self.bindings and not self.open

    @property
    def functions(self) -> list[Function]:
        return [b for b in self.bindings if isinstance(b, Function)]

    @property
    def others(self) -> list[NotFunction]:
        """Bindings to what is certainly not a function (``NAME_gpu = 3``, a class): a run refuses them."""
        return [b for b in self.bindings if isinstance(b, NotFunction)]

    def accepts(self, count: int) -> bool | None:
        """Whether the GPU body can take the kernel's ``count`` arguments: None when unknown or absent,
        else whether one of its possible functions can (False when it is certainly not a function)."""
        if self.unknown or self.absent:
            return None
        return any(f.accepts(count) for f in self.functions)


def gpu_body(definitions: Definitions, kernel: str) -> GpuBody:
    """The GPU body of kernel ``kernel`` as the module's syntax tree (read by :func:`read_definitions`)
    tells it: a pure function of the tree, which runs nothing."""
    name = kernel + GPU_SUFFIX
    return GpuBody(name, tuple(definitions.of(name)), definitions.open)
