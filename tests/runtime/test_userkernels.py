"""The user's kernel module: only its own Python functions are kernels, and a module
that cannot be loaded is a clean error naming the file and the cause (issue 17.11).
Real files, real ``tiledsl run`` processes."""
import subprocess
import sys

import pytest

PROGRAM = 'use "{module}"\nkernel {kernel}(inout A)\nprogram p {{\n  matrix A[n, n] = random spd\n  {kernel}(A[0, 0])\n}}\n'
MODULES = {
    # module text, exit status, the error the run prints (after "tiledsl: error: "): a module whose
    # own code fails is this rank's failure (1); one without the function is a usage error (2)
    "syntax error": ("def scale(A):\n    x = = 1\n", 1, "rank 0: kernel module kernels.py:2: SyntaxError: invalid syntax"),
    "failing import": ("import no_such_module_here\n\ndef scale(A):\n    A *= 2\n", 1,
                       "rank 0: kernel module kernels.py:1: ModuleNotFoundError: No module named 'no_such_module_here'"),
    "SystemExit": ("import sys\nsys.exit(3)\n", 1, "rank 0: kernel module kernels.py:2: called sys.exit(3) while being loaded"),
    "a value, not a function": ("scale = 3\n", 2,
                                "kernel module kernels.py defines no function scale (for the call scale(A[0, 0]) at line 5)"),
}


def tiledsl(*args, cwd):
    return subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("case", list(MODULES))
def test_a_module_that_cannot_be_loaded_is_a_clean_error_naming_it(tmp_path, case):
    text, status, error = MODULES[case]
    (tmp_path / "kernels.py").write_text("def scale(A):\n    A *= 2\n")
    (tmp_path / "t.tile").write_text(PROGRAM.format(module="kernels.py", kernel="scale"))
    assert tiledsl("compile", "t.tile", "-o", "driver.py", cwd=tmp_path).returncode == 0
    (tmp_path / "kernels.py").write_text(text)  # broken after compiling (check finds a syntax error)
    out = tiledsl("run", "driver.py", "--n", 32, "--nb", 32, cwd=tmp_path)
    assert (out.returncode, out.stderr.strip()) == (status, f"tiledsl: error: {error}")


@pytest.mark.timeout(150)
@pytest.mark.parametrize("kernel", ["__eq__", "__class__", "__init__", "__dict__", "__loader__"])
def test_a_kernel_is_a_function_the_module_defines_not_an_attribute_of_every_module(tmp_path, kernel):
    (tmp_path / "kernels.py").write_text(f"def {kernel}(A):\n    A *= 2\n")
    (tmp_path / "t.tile").write_text(PROGRAM.format(module="kernels.py", kernel=kernel))
    assert tiledsl("compile", "t.tile", "-o", "driver.py", cwd=tmp_path).returncode == 0
    (tmp_path / "kernels.py").write_text("def scale(A):\n    A *= 2\n")  # check would find it missing (E212)
    out = tiledsl("run", "driver.py", "--n", 32, "--nb", 32, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == (f"tiledsl: error: kernel module kernels.py defines no function {kernel} "
                                  f"(for the call {kernel}(A[0, 0]) at line 5)")


@pytest.mark.timeout(150)
def test_a_dunder_kernel_the_module_defines_runs(tmp_path):
    (tmp_path / "kernels.py").write_text("def __eq__(A):\n    A *= 2\n")
    (tmp_path / "t.tile").write_text(PROGRAM.format(module="kernels.py", kernel="__eq__"))
    out = tiledsl("run", "t.tile", "--n", 32, "--nb", 32, "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert '"tasks": 1' in out.stdout


@pytest.mark.timeout(150)
def test_a_failure_names_the_integer_values_that_tell_its_task_from_the_others(tmp_path):
    (tmp_path / "kernels.py").write_text("def poison(A, k, scale):\n    if k == 2:\n        raise ValueError('bad')\n")
    (tmp_path / "t.tile").write_text('use "kernels.py"\nkernel poison(inout A, int k, float scale)\n'
                                     'program p {\n  matrix A[n, n] = zeros\n'
                                     '  for k in 0 .. 4 { poison(A[0, 0], k, 0.5) }\n}\n')
    out = tiledsl("run", "t.tile", "--n", 8, cwd=tmp_path)
    assert out.returncode == 1 and "(poison(A[0, 0], k, 0.5) with k = 2): ValueError at kernels.py:3: bad" \
        in out.stderr, out.stderr
