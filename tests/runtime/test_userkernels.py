"""The user's kernel module: only its own Python functions are kernels, and a module
that cannot be loaded is a clean error naming the file and the cause (issue 17.11).
Real files, real ``tiledsl run`` processes (and a module loaded in-process)."""
import subprocess
import sys

import numpy as np
import pytest

from tiledsl.compiler import compile_path
from tiledsl.runtime.userkernels import _import
from tiledsl.runtime.world import RankError

PROGRAM = 'use "{module}"\nkernel {kernel}(inout A)\nprogram p {{\n  matrix A[n, n] = random spd\n  {kernel}(A[0, 0])\n}}\n'
MODULES = {
    # module text, exit status, the error the run prints (after "tiledsl: error: "): a module whose
    # own code fails is this rank's failure (1); one without the function fails at the call's line (1)
    "syntax error": ("def scale(A):\n    x = = 1\n", 1, "rank 0: kernel module kernels.py:2: SyntaxError: invalid syntax"),
    "failing import": ("import no_such_module_here\n\ndef scale(A):\n    A *= 2\n", 1,
                       "rank 0: kernel module kernels.py:1: ModuleNotFoundError: No module named 'no_such_module_here'"),
    "SystemExit": ("import sys\nsys.exit(3)\n", 1, "rank 0: kernel module kernels.py:2: called sys.exit(3) while being loaded"),
    "a BaseException": ("class Odd(BaseException):\n    pass\n\n\nraise Odd('not an Exception')\n", 1,
                        "rank 0: kernel module kernels.py:5: Odd: not an Exception"),  # it was a traceback
    "a value, not a function": ("scale = 3\n", 1,
                                "rank 0 (t.tile:5): kernel module kernels.py: scale must be a function (for the call "
                                "scale(A[0, 0])), not int 3"),
    "None": ("scale = None\n", 1, "rank 0 (t.tile:5): kernel module kernels.py: scale must be a function (for the "
                                  "call scale(A[0, 0])), not NoneType None"),  # it "defined no function scale"
    "a class": ("class scale:\n    def __init__(self, A):\n        pass\n", 1,
                "rank 0 (t.tile:5): kernel module kernels.py: scale must be a function (for the call scale(A[0, 0])), "
                "not a class"),
    "a module": ("import numpy as scale\n", 1,  # its repr, its file's path, was cut in the middle by reprlib
                 "rank 0 (t.tile:5): kernel module kernels.py: scale must be a function (for the call scale(A[0, 0])), "
                 "not the module numpy (an import): name a function of it, or define one"),
}


def tiledsl(*args, cwd):
    return subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def compile_to(program, driver):
    """Write the driver of ``program`` at ``driver``, as `tiledsl compile PROGRAM -o DRIVER` does (its
    setup, in this process: the runs after it are the tests)."""
    result, text = compile_path(program, driver)
    assert text is not None, result.report()
    driver.write_text(text)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("case", list(MODULES))
def test_a_module_that_cannot_be_loaded_is_a_clean_error_naming_it(tmp_path, case):
    text, status, error = MODULES[case]
    (tmp_path / "kernels.py").write_text("def scale(A):\n    A *= 2\n")
    (tmp_path / "t.tile").write_text(PROGRAM.format(module="kernels.py", kernel="scale"))
    compile_to(tmp_path / "t.tile", tmp_path / "driver.py")
    (tmp_path / "kernels.py").write_text(text)  # broken after compiling (check finds a syntax error)
    out = tiledsl("run", "driver.py", "--n", 32, "--nb", 32, cwd=tmp_path)
    assert (out.returncode, out.stderr.strip()) == (status, f"tiledsl: error: {error}")


def test_a_module_with_a_nul_byte_is_named_without_a_line_it_does_not_have(tmp_path):
    """Python says of NUL bytes a SyntaxError of no line: 'kernels.py:None:' was written."""
    path = tmp_path / "kernels.py"
    path.write_bytes(b"def scale(A):\n    A *= 2\x00\n")
    with pytest.raises(RankError) as raised:
        _import(path)
    assert str(raised.value).startswith(f"kernel module {path}: "), raised.value
    assert ":None" not in str(raised.value)


def test_a_helper_files_syntax_error_names_the_helper_and_the_line_importing_it(tmp_path):
    """Tester w81b: `kernel module mk.py:4: SyntaxError`, line 4 being the helper's, mk.py's a valid one."""
    (tmp_path / "helper_w81b.py").write_text("x = 1\n\n\ndef h(:\n")
    path = tmp_path / "kernels.py"
    path.write_text("import os\n\nfrom helper_w81b import h\n\n\ndef scale(A):\n    A *= 2\n")
    with pytest.raises(RankError) as raised:
        _import(path)
    assert str(raised.value) == (f"kernel module {path}:3 (importing {tmp_path / 'helper_w81b.py'}:4): "
                                 f"SyntaxError: invalid syntax"), raised.value


@pytest.mark.timeout(150)
@pytest.mark.parametrize("kernel", ["__eq__", "__class__", "__init__", "__dict__", "__loader__"])
def test_a_kernel_is_a_function_the_module_defines_not_an_attribute_of_every_module(tmp_path, kernel):
    (tmp_path / "kernels.py").write_text(f"def {kernel}(A):\n    A *= 2\n")
    (tmp_path / "t.tile").write_text(PROGRAM.format(module="kernels.py", kernel=kernel))
    compile_to(tmp_path / "t.tile", tmp_path / "driver.py")
    (tmp_path / "kernels.py").write_text("def scale(A):\n    A *= 2\n")  # check would find it missing (E212)
    out = tiledsl("run", "driver.py", "--n", 32, "--nb", 32, cwd=tmp_path)
    assert out.returncode == 1, out.stderr  # the program's mistake, at its call's line
    assert out.stderr.strip() == (f"tiledsl: error: rank 0 (t.tile:5): kernel module kernels.py defines no function "
                                  f"{kernel} (for the call {kernel}(A[0, 0]))")


@pytest.mark.timeout(150)
def test_a_dunder_kernel_the_module_defines_runs(tmp_path):
    (tmp_path / "kernels.py").write_text("def __eq__(A):\n    A *= 2\n")
    (tmp_path / "t.tile").write_text(PROGRAM.format(module="kernels.py", kernel="__eq__"))
    out = tiledsl("run", "t.tile", "--n", 32, "--nb", 32, "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert '"tasks": 1' in out.stdout


@pytest.mark.timeout(150)
def test_a_failure_names_the_integer_values_that_tell_its_task_from_the_others(tmp_path):
    """The float literal 0.5 is in the call's text: not said again."""
    (tmp_path / "kernels.py").write_text("def poison(A, k, scale):\n    if k == 2:\n        raise ValueError('bad')\n")
    (tmp_path / "t.tile").write_text('use "kernels.py"\nkernel poison(inout A, int k, float scale)\n'
                                     'program p {\n  matrix A[n, n] = zeros\n'
                                     '  for k in 0 .. 4 { poison(A[0, 0], k, 0.5) }\n}\n')
    out = tiledsl("run", "t.tile", "--n", 8, cwd=tmp_path)
    assert out.returncode == 1 and "(poison(A[0, 0], k, 0.5); argument k = 2): ValueError at kernels.py:3: bad" \
        in out.stderr, out.stderr



@pytest.mark.timeout(150)
def test_a_failure_names_the_float_and_char_values_its_call_computes(tmp_path):
    """A float or char argument given by a parameter or an expression is not in the call's text: the
    failure says its value; a literal or a default it does not repeat (tester z80d)."""
    (tmp_path / "kernels.py").write_text("def boom(A, i, x, c, y, d):\n    raise ValueError('boom')\n")
    (tmp_path / "t.tile").write_text('use "kernels.py"\n'
                                     'kernel boom(inout A, int i, float x, char c, float y = 2.0, char d = "D")\n'
                                     'program p {\n  param fl = 0.5\n  param side = "R"\n  matrix A[n, n] = zeros\n'
                                     '  for k in 0 .. 2 { if k == 1 { boom(A[0, 0], k, fl * k, side) } }\n}\n')
    (tmp_path / "p.tile").write_text('use "kernels.py"\nkernel pan(inout P, float x)\nprogram p {\n'
                                     '  param fl = 0.25\n  tiling uniform(nb = 4)\n  matrix A[n, n] = zeros\n'
                                     '  pan(A[0 : A.mt, 0], fl)\n}\n')  # a panel's call too
    (tmp_path / "kernels.py").write_text("def boom(A, i, x, c, y, d):\n    raise ValueError('boom')\n\n\n"
                                         "def pan(P, x):\n    raise ValueError('pan')\n")
    out = tiledsl("run", "p.tile", "--n", 8, cwd=tmp_path)
    assert out.returncode == 1 and "(pan(A[0 : A.mt, 0], fl); argument x = 0.25): ValueError" in out.stderr, out.stderr
    out = tiledsl("run", "t.tile", "--n", 8, "--set", 'side="', cwd=tmp_path)
    assert out.returncode == 1 and ('(boom(A[0, 0], k, fl * k, side); arguments i = 1, x = 0.5, c = "\\""): '
                                    "ValueError at kernels.py:2: boom") in out.stderr, out.stderr


@pytest.mark.timeout(150)
def test_a_failure_says_value_arguments_as_arguments_not_as_loop_values(tmp_path):
    """"(f(A[k, k]) with k = 7)" read as the loop's k (which was 2): 7 was the kernel's default argument k."""
    (tmp_path / "kernels.py").write_text("def f(A, k, side):\n    if A.shape == (10, 10) and A[0, 0] == 2:\n"
                                         "        raise ValueError('bad')\n    A[0, 0] = 1\n")
    (tmp_path / "t.tile").write_text('use "kernels.py"\nkernel f(inout A, int k = 7, char side = "L")\n'
                                     'program p {\n  tiling uniform(nb = 10)\n  matrix A[n, n] = zeros\n'
                                     '  for k in 0 .. A.nt { f(A[k, k]) }\n}\n')
    np.save(tmp_path / "a.npy", np.diag([0.0] * 20 + [2.0] * 10))
    out = tiledsl("run", "t.tile", "--input", "A=a.npy", cwd=tmp_path)
    assert out.returncode == 1 and "kernel f failed on A[2, 2] (f(A[k, k]); argument k = 7): ValueError at " \
                                   "kernels.py:3: bad" in out.stderr, out.stderr


@pytest.mark.timeout(150)
def test_a_kernel_body_may_be_any_callable_but_a_class(tmp_path):
    """A functools.partial and an object with __call__ run (check accepts them: only running tells)."""
    (tmp_path / "kernels.py").write_text(
        "import functools\n\ndef _add(A, amount):\n    A += amount\n\n"
        "class Twice:\n    def __call__(self, A):\n        A *= 2\n\n"
        "scale = functools.partial(_add, amount=1.0)\ndouble = Twice()\nscale_gpu = scale\ndouble_gpu = double\n")
    (tmp_path / "t.tile").write_text('use "kernels.py"\nkernel scale(inout A)\nkernel double(inout A)\n'
                                     "program p {\n  matrix A[n, n] = zeros\n  scale(A[0, 0])\n  double(A[0, 0])\n}\n")
    for gpus in ([], ["--gpus", "1", "--gpu-ratio", "0:1"]):  # as GPU bodies too (a partial has no __name__)
        out = tiledsl("run", "t.tile", "--n", 8, "--output", "A=a.npy", *gpus, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert (np.load(tmp_path / "a.npy") == 2.0).all()


HELPER_KERNELS = "from helper import AMOUNT\n\ndef bump(A):\n    A += AMOUNT\n"


def _two_programs_with_helpers(folder):
    """Programs a/t.tile and b/t.tile whose kernel bumps A by AMOUNT from the helper.py beside it:
    1 and 100."""
    for name, amount in (("a", 1), ("b", 100)):
        (folder / name).mkdir()
        (folder / name / "kernels.py").write_text(HELPER_KERNELS)
        (folder / name / "helper.py").write_text(f"AMOUNT = {amount}\n")
        (folder / name / "t.tile").write_text(PROGRAM.format(module="kernels.py", kernel="bump")
                                              .replace("random spd", "zeros"))


@pytest.mark.timeout(150)
def test_each_program_imports_its_own_helper_files_afresh(tmp_path):
    """Two programs of one process whose folders both hold a helper.py each get their own, and an
    edited one is seen by the next run (the Python API)."""
    _two_programs_with_helpers(tmp_path)
    script = ("import pathlib, sys, tiledsl\n"
              "path = list(sys.path)\n"
              "a, b = tiledsl.load('a/t.tile'), tiledsl.load('b/t.tile')\n"
              "first = [float(p.run(n=4)['A'][0, 0]) for p in (a, b, a)]\n"
              "pathlib.Path('a/helper.py').write_text('AMOUNT = 50.5\\n')\n"
              "print(first, float(a.run(n=4)['A'][0, 0]), 'helper' in sys.modules, sys.path == path)\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # and the caller's import path and modules are as they were
    assert out.stdout.split() == ["[1.0,", "100.0,", "1.0]", "50.5", "False", "True"]


@pytest.mark.timeout(150)
def test_a_folder_without_init_beside_the_module_is_imported_as_a_script_imports_it(tmp_path):
    """``from parts.amount import AMOUNT`` with no parts/__init__.py: a namespace package, as for a script;
    each program's own, forgotten once its module has loaded."""
    import tiledsl

    for name, amount in (("a", 1), ("b", 100)):
        (tmp_path / name / "parts").mkdir(parents=True)
        (tmp_path / name / "parts" / "amount.py").write_text(f"AMOUNT = {amount}\n")
        (tmp_path / name / "kernels.py").write_text(HELPER_KERNELS.replace("from helper", "from parts.amount"))
        (tmp_path / name / "t.tile").write_text(PROGRAM.format(module="kernels.py", kernel="bump")
                                                .replace("random spd", "zeros"))
    script = ("import sys, tiledsl\n"
              "print([float(tiledsl.load(f'{f}/t.tile').run(n=4)['A'][0, 0]) for f in 'aba'],\n"
              "      'parts' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[1.0,", "100.0,", "1.0]", "False"]
    # a failure in such a file is named from the module's folder, not as amount.py alone (tester r55)
    (tmp_path / "a" / "parts" / "amount.py").write_text("AMOUNT = 1\n\n\ndef failing():\n    raise ValueError('no')\n")
    (tmp_path / "a" / "kernels.py").write_text("from parts.amount import failing\n\ndef bump(A):\n    failing()\n")
    with pytest.raises(tiledsl.TiledslError, match=r"ValueError at parts/amount\.py:5: no$"):
        tiledsl.load(tmp_path / "a" / "t.tile").run(n=4)


@pytest.mark.timeout(150)
def test_a_helper_package_s_submodule_is_the_program_s_not_the_caller_s_of_the_same_name(tmp_path):
    """Tester h63: the caller had imported its own parts.amount: the kernel module's `from parts.amount import
    AMOUNT` found the caller's submodule (the caller's package alone stepped aside), and ran its value."""
    (tmp_path / "p" / "parts").mkdir(parents=True)
    (tmp_path / "p" / "parts" / "amount.py").write_text("AMOUNT = 2\n")
    (tmp_path / "p" / "kernels.py").write_text(HELPER_KERNELS.replace("from helper", "from parts.amount"))
    (tmp_path / "p" / "t.tile").write_text(PROGRAM.format(module="kernels.py", kernel="bump")
                                           .replace("random spd", "zeros"))
    (tmp_path / "caller" / "parts").mkdir(parents=True)
    (tmp_path / "caller" / "parts" / "amount.py").write_text("AMOUNT = 3\n")
    script = ("import sys, parts.amount, tiledsl\n"
              "mine = sys.modules['parts.amount']\n"
              "print(float(tiledsl.load('../p/t.tile').run(n=4)['A'][0, 0]), sys.modules['parts.amount'] is mine,\n"
              "      parts.amount.AMOUNT)\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path / "caller", capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2.0", "True", "3"]


@pytest.mark.timeout(120)
def test_an_edit_keeping_the_file_s_time_and_size_is_run_not_the_byte_code_cached_before(tmp_path):
    """Python judges a module's cached byte code current by the file's time and size alone: a
    kernel module (or a helper package beside it) rewritten keeping both (cp -p, rsync -a, within
    the second) ran the old kernel, exit 0."""
    import os
    import py_compile

    import tiledsl

    (tmp_path / "t.tile").write_text('use "k.py"\nkernel setv(inout C) flops 0\nprogram t {\n  tiling uniform(nb = 2)\n'
                                     '  matrix C[n, n] = zeros\n  setv(C[0, 0])\n}\n')
    (tmp_path / "parts").mkdir()
    files = {tmp_path / "k.py": "from parts.values import V\n\n\ndef setv(C):\n    C[:] = V + {}.0\n",
             tmp_path / "parts" / "__init__.py": "",
             tmp_path / "parts" / "values.py": "V = {}0.0\n"}
    for version in (1, 2):
        for path, text in files.items():
            path.write_text(text.format(version))
            os.utime(path, (1_700_000_000, 1_700_000_000))
            if version == 1:
                py_compile.compile(str(path), doraise=True)  # as an import leaves it
        assert tiledsl.load(tmp_path / "t.tile").run(n=2)["C"][0, 0] == 11.0 * version


@pytest.mark.timeout(200)
def test_programs_run_from_two_threads_each_import_their_own_helper(tmp_path):
    """Loads from two threads at once do not trade helper files (each run loads its kernel module),
    and a module of the caller's own named like a helper file is neither used nor lost."""
    _two_programs_with_helpers(tmp_path)
    (tmp_path / "helper.py").write_text("AMOUNT = 'the caller'\n")
    script = ("import sys, threading, tiledsl\n"
              "sys.path.insert(0, '.')\n"
              "import helper\n"
              "wrong = []\n"
              "def runs(program, amount):\n"
              "    for _ in range(12):\n"
              "        try:\n"
              "            got = float(program.run(n=4, workers=1)['A'][0, 0])\n"
              "        except Exception as error:\n"
              "            got = repr(error)\n"
              "        if got != amount: wrong.append(got)\n"
              "threads = [threading.Thread(target=runs, args=(tiledsl.load(f'{f}/t.tile'), x))\n"
              "           for f, x in (('a', 1.0), ('b', 100.0))]\n"
              "[t.start() for t in threads]; [t.join() for t in threads]\n"
              "print(wrong, sys.modules['helper'] is helper, helper.AMOUNT)\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "True", "the", "caller"]


@pytest.mark.timeout(150)
def test_files_beside_a_kernel_module_never_hide_installed_packages(tmp_path):
    """A stray numpy.py beside the module is not numpy; a helper package and its submodules are found."""
    folder = tmp_path / "program"  # not the working directory, which Python itself puts first
    (folder / "tools").mkdir(parents=True)
    (folder / "numpy.py").write_text("raise ImportError('the stray numpy.py was imported')\n")
    (folder / "tools" / "__init__.py").write_text("")
    (folder / "tools" / "amounts.py").write_text("AMOUNT = 7.0\n")
    (folder / "kernels.py").write_text("import numpy\nfrom tools.amounts import AMOUNT\n\n"
                                       "def bump(A):\n    A += numpy.float64(AMOUNT)\n")
    (folder / "t.tile").write_text(PROGRAM.format(module="kernels.py", kernel="bump").replace("random spd", "zeros"))
    out = tiledsl("run", "program/t.tile", "--n", 8, "--output", "A=a.npy", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert np.load(tmp_path / "a.npy")[0, 0] == 7.0


@pytest.mark.timeout(60)
def test_an_int_argument_beyond_64_bits_fails_its_task_rather_than_reach_the_kernel(tmp_path):
    """q * q with q = 4e9 reached the kernel as 16000000000000000000 (a C kernel takes it wrapped)."""
    import tiledsl

    (tmp_path / "k.py").write_text("def put(A, v):\n    A[:] = float(v)\n")
    (tmp_path / "t.tile").write_text('use "k.py"\nkernel put(out A, int v) flops 0\nprogram ov {\n'
                                     "  tiling uniform(nb = 1)\n  param q = 2\n  matrix R[1, 1] = zeros\n"
                                     "  put(R[0, 0], q * q)\n}\n")
    program = tiledsl.load(tmp_path / "t.tile")
    assert program.run(n=1, params={"q": 3037000499})["R"][0, 0] == float(3037000499 ** 2)  # the largest square in range
    with pytest.raises(tiledsl.TiledslError) as error:
        program.run(n=1, params={"q": 4000000000})
    assert str(error.value) == (  # said at the call with the loop's values, as the loop nest's other mistakes
        "rank 0 (t.tile:7): kernel put's int argument v = 16000000000000000000 is beyond the 64-bit range "
        "(±9223372036854775807, 2**63 - 1), which a kernel's int argument stays within (C takes 64 bits): check its "
        "formula (in `put(R[0, 0], q * q)`, with q = 4000000000)"), str(error.value)


@pytest.mark.timeout(60)
def test_a_float_argument_that_overflowed_fails_its_task_and_so_does_a_default_beyond_float64(tmp_path):
    """1.0e308 * s reached the kernel as inf (and a difference of two as nan), and the run
    passed; a param whose default came out inf did the same, though --set refuses inf."""
    import tiledsl

    (tmp_path / "k.py").write_text("def put(A, f):\n    A[:] = 1.0\n")
    (tmp_path / "t.tile").write_text('use "k.py"\nkernel put(out A, float f) flops 0\nprogram ov {\n'
                                     "  tiling uniform(nb = 1)\n  param s = 1.0\n  param big = n * 1.0e306\n"
                                     "  matrix R[1, 1] = zeros\n  put(R[0, 0], 1.0e308 * s - 1.0e308 * s + big)\n}\n")
    program = tiledsl.load(tmp_path / "t.tile")
    assert program.run(n=1)["R"][0, 0] == 1.0
    with pytest.raises(tiledsl.TiledslError) as error:
        program.run(n=1, params={"s": 10.0})
    assert str(error.value).startswith("rank 0 (t.tile:8): kernel put's float argument f = nan is not a finite "
                                       "number (float64 reaches about ±1.8e308)"), str(error.value)
    assert "task" not in str(error.value)  # no task or input made it: no "an earlier task wrote it" (tester p55)
    with pytest.raises(tiledsl.TiledslError) as error:
        program.run(n=1000)
    assert str(error.value).startswith("the default of param big is inf, beyond float64's range (about ±1.8e308) "
                                       "with n = 1000, nb = 1, s = 1.0: give it with params={'big': ...}"), str(error.value)
    assert program.run(n=1000, params={"big": 1.0})["R"][0, 0] == 1.0  # set: its default is not used


@pytest.mark.timeout(60)
def test_an_integer_default_beyond_64_bits_or_a_nan_default_is_refused_naming_what_it_came_from(tmp_path):
    """k = n * 461168601842738790 * 100 ran with k=9223372036854775800000 (--set refuses it); a
    nan default was said 'beyond float64's range'; the params it came from went unnamed."""
    import tiledsl

    (tmp_path / "k.py").write_text("def put(A, v):\n    A[:] = 1.0\n")
    (tmp_path / "t.tile").write_text('use "k.py"\nkernel put(out A, float v) flops 0\nprogram ov {\n'
                                     "  tiling uniform(nb = 1)\n  param s = 1.0\n  param k = n * 461168601842738790 * 100\n"
                                     "  param z = s * 1.0e300 * 1.0e300 - s * 1.0e300 * 1.0e300\n"
                                     "  matrix R[1, 1] = zeros\n  put(R[0, 0], k + z)\n}\n")
    program = tiledsl.load(tmp_path / "t.tile")
    with pytest.raises(tiledsl.TiledslError) as error:
        program.run(n=200)
    assert str(error.value) == ("the default of param k is 9223372036854775800000, beyond the 64-bit range "
                                "(±9223372036854775807, 2**63 - 1) with n = 200, nb = 1, s = 1.0: give it with "
                                "params={'k': ...}, or check its formula")
    with pytest.raises(tiledsl.TiledslError) as error:
        program.run(n=1, params={"s": 2.0, "k": 3})
    assert str(error.value).startswith("the default of param z is not a number (nan) with n = 1, nb = 1, s = 2.0, "
                                       "k = 3: give it with params={'z': ...}"), str(error.value)


@pytest.mark.timeout(150)
def test_a_stray_module_of_the_name_found_elsewhere_is_named_by_its_path(tmp_path):
    """A driver copied alone, run where an unrelated kernels.py lies: 'kernel module kernels.py defines
    no function scale' did not say that the file loaded was not the program's."""
    (tmp_path / "prog").mkdir()
    (tmp_path / "alone").mkdir()
    (tmp_path / "prog" / "kernels.py").write_text("def scale(A):\n    A *= 2\n")
    (tmp_path / "prog" / "t.tile").write_text(PROGRAM.format(module="kernels.py", kernel="scale"))
    compile_to(tmp_path / "prog" / "t.tile", tmp_path / "alone" / "driver.py")
    (tmp_path / "prog" / "kernels.py").unlink()  # the program's folder is gone, or the driver was sent alone
    (tmp_path / "kernels.py").write_text("def unrelated(A):\n    pass\n")
    out = tiledsl("run", "alone/driver.py", "--n", 32, "--nb", 32, cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert (f"kernel module kernels.py (loaded from {tmp_path / 'kernels.py'}, as {tmp_path / 'prog' / 'kernels.py'} "
            f"is not there) defines no function scale (for the call scale(A[0, 0]))") in out.stderr, out.stderr


@pytest.mark.timeout(60)
def test_a_link_in_a_loop_beside_the_kernel_module_is_passed_over(tmp_path):
    """The run looks through the module's folder for the user's own modules: a pair of links to
    each other there was an internal error (OSError: too many levels of symbolic links), exit 3."""
    import tiledsl

    (tmp_path / "k.py").write_text("def f(A):\n    A[:] += 1\n")
    (tmp_path / "t.tile").write_text('use "k.py"\nkernel f(inout A)\nprogram p {\n  tiling uniform(nb = 4)\n'
                                     "  matrix A[n, n] = zeros\n  f(A[0, 0])\n}\n")
    (tmp_path / "loopx").symlink_to("loopy")
    (tmp_path / "loopy").symlink_to("loopx")
    out = tiledsl.load(tmp_path / "t.tile").run(n=8)
    assert out["A"][:4, :4].tolist() == np.ones((4, 4)).tolist() and out["A"][4:, :].sum() == 0
