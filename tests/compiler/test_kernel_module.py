"""What check reads of a kernel module: bindings found in its syntax tree, never by running it."""
import ast

import pytest

from tiledsl.compiler.kernel_module import GPU_SUFFIX, UNKNOWN, Function, NotFunction, gpu_body, read_definitions


def bindings(text: str, name: str) -> list:
    return read_definitions(ast.parse(text)).of(name)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("parameters, accepted", [
    ("A, B", [2]), ("A, B=1, C=2", [1, 2, 3]), ("A, *rest", list(range(1, 10))), ("*tiles", list(range(10))),
    ("A, /, B", [2]), ("A, *, key=1", [1]), ("A, *, key", []), ("", [0])])
def test_a_function_accepts_the_positional_counts_its_parameters_allow(parameters, accepted):
    (function,) = bindings(f"def k({parameters}):\n    pass\n", "k")
    assert [count for count in range(10) if function.accepts(count)] == accepted


@pytest.mark.timeout(30)
def test_later_top_level_bindings_replace_earlier_ones_and_del_removes_them():
    assert bindings("def k(A): pass\nk = 3\n", "k") == [NotFunction(2, "k = 3")]
    assert bindings("def k(A): pass\ndel k\n", "k") == []
    (function,) = bindings("def k(A): pass\ndef k(A, B): pass\n", "k")
    assert (function.line, function.least) == (2, 2)


@pytest.mark.timeout(30)
def test_a_conditional_binding_joins_the_others():
    text = "try:\n    from fast import k\nexcept ImportError:\n    def k(A): pass\n"
    assert [b if b is UNKNOWN else type(b) for b in bindings(text, "k")] == [UNKNOWN, Function]
    text = "def k(A): pass\nif X:\n    def k(A, B): pass\n"
    assert [b.least for b in bindings(text, "k")] == [1, 2]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("text", ["from kernels import *\n", "globals()['k'] = print\n",
                                  "def make():\n    global k\n    k = print\n"])
def test_dynamic_definitions_leave_names_unchecked(text):
    definitions = read_definitions(ast.parse(text))
    assert definitions.open or UNKNOWN in definitions.of("k")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("text", ["import k\n", "import k.sub\n", "from m import j as k\n",
                                  "@decorate\ndef k(A): pass\n", "k = make()\n", "for k in x: pass\n",
                                  "with x as k: pass\n", "k = other\n"])
def test_bindings_only_running_could_tell_are_unknown(text):
    assert bindings(text, "k") == [UNKNOWN]


@pytest.mark.timeout(30)
def test_names_unpacked_from_a_literal_take_its_items_in_turn():
    """``a_gpu, b_gpu = a, b`` binds each name to its function (it bound both to the tuple, which
    check then refused as not a function)."""
    text = "def a(A): pass\ndef b(A, B): pass\n\na_gpu, [b_gpu, c] = a, (b, 3)\n"
    assert [f.signature() for f in bindings(text, "a_gpu") + bindings(text, "b_gpu")] == ["a(A)", "b(A, B)"]
    assert bindings(text, "c") == [NotFunction(4, "c = 3")]
    for unpacked in ("k, j = make()\n", "k, *j = a, b, c\n", "k, j = a, b, c\n"):
        assert bindings(unpacked, "k") == [UNKNOWN], unpacked
    assert bindings("k = j = (1, 2)\n", "k") == [NotFunction(1, "k = (1, 2)")]


@pytest.mark.timeout(30)
def test_an_annotated_assignment_binds_as_a_plain_one():
    """``k: int = 3`` is a literal, as ``k = 3`` is (check let it through, and the run refused it);
    ``k: T = base`` an alias; a bare annotation binds nothing, ``k += ...`` what only running tells."""
    assert bindings("k: int = 3\n", "k") == [NotFunction(1, "k = 3")]
    (function,) = bindings("def base(A): pass\nk: object = base\n", "k")
    assert (function.signature(), function.alias_line) == ("base(A)", 2)
    assert bindings("def k(A): pass\nk: int\n", "k")[0].signature() == "k(A)"
    assert bindings("def k(A): pass\nk += 1\n", "k") == [UNKNOWN]


@pytest.mark.timeout(30)
def test_an_alias_keeps_the_signature_and_notes_where_it_was_bound():
    (function,) = bindings("def base(A, B):\n    pass\n\nk = base\n", "k")
    assert (function.signature(), function.line, function.alias_line) == ("base(A, B)", 1, 4)


def gpu(text: str, kernel: str = "k"):
    return gpu_body(read_definitions(ast.parse(text)), kernel)


@pytest.mark.timeout(30)
def test_a_kernels_gpu_body_is_the_function_name_gpu_with_its_arity():
    body = gpu("def k(A, B): pass\ndef k_gpu(A, B, alpha=1.0): pass\n")
    assert (body.name, body.absent, body.unknown) == ("k_gpu", False, False)
    assert [f.line for f in body.functions] == [2] and body.others == []
    assert [count for count in range(5) if body.accepts(count)] == [2, 3]
    assert gpu("def k(A): pass\nk_gpu = lambda A: None\n").accepts(1)


@pytest.mark.timeout(30)
def test_a_cpu_only_kernel_has_no_gpu_body_and_a_non_function_is_not_one():
    absent = gpu("def k(A): pass\ndef other_gpu(A): pass\n")
    assert absent.absent and not absent.unknown and absent.accepts(1) is None
    constant = gpu("def k(A): pass\nk_gpu = 3\n")
    assert constant.others == [NotFunction(2, "k_gpu = 3")] and constant.accepts(1) is False


@pytest.mark.timeout(30)
@pytest.mark.parametrize("text", ["from fast import k_gpu\n", "from fast import *\n", "@jit\ndef k_gpu(A): pass\n"])
def test_a_gpu_body_only_running_could_tell_is_unknown(text):
    body = gpu(text)
    assert body.unknown and not body.absent and body.accepts(1) is None


@pytest.mark.timeout(30)
def test_the_compiler_and_the_runtime_name_gpu_bodies_alike():
    from tiledsl.runtime import userkernels

    assert GPU_SUFFIX == userkernels.GPU_SUFFIX == "_gpu"


def test_a_kernel_module_named_by_a_directory_is_said_to_be_one(tmp_path):
    """use "dir.py" on a folder of that name said 'not found', though it is there."""
    from tiledsl.compiler import compile_path

    (tmp_path / "dir.py").mkdir()
    (tmp_path / "p.tile").write_text('use "dir.py"\nkernel k(inout A)\nprogram p {\n  matrix A[n, n] = zeros\n'
                                     "  k(A[0, 0])\n}\n")
    result, _ = compile_path(tmp_path / "p.tile")
    [error] = [d for d in result.diagnostics if d.is_error]
    assert (error.code, error.message, error.hint) == ("E209", "kernel module 'dir.py' is a directory",
                                                       "name the .py file that defines the program's kernels")
    assert (error.span.line, error.span.column) == (1, 1)


@pytest.mark.parametrize("named", ["", ".", "/", "./", "kernels/"])
def test_a_kernel_module_path_that_names_no_file_is_an_error_not_a_crash(tmp_path, named):
    """Tester v82b: use "" (or ".", "/") was an internal error, `PosixPath('.') has an empty name`."""
    from tiledsl.compiler import compile_path

    (tmp_path / "p.tile").write_text(f'use "{named}"\nkernel k(inout A)\nprogram p {{\n  matrix A[n, n] = zeros\n'
                                     "  k(A[0, 0])\n}\n")
    result, _ = compile_path(tmp_path / "p.tile")
    [error] = [d for d in result.diagnostics if d.is_error]
    assert (error.code, error.message, error.hint) == (
        "E209", f"kernel module {named!r} names no file",
        "name the .py file that defines the program's kernels: use \"kernels.py\"")
    assert (error.span.line, error.span.column) == (1, 1)
