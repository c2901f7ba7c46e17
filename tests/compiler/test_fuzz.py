"""Fuzzing the compiler with generated and mutated programs (CI-sized; see scripts/fuzz_campaign.py).

Properties, judged by ``fuzz_strategies.judge``: (a) ``check_source`` never raises, every
outcome is a well-formed diagnostic; (b) every program it accepts has a driver that
``compile()`` accepts and that imports from ``tiledsl.runtime`` only (and, to say why the runtime
cannot be imported, ``sys`` and ``tiledsl.drivercontract``). The generators are
themselves tested: (c) most generated valid programs are accepted, together they use
every construct of the grammar, and mutants reach both the diagnostics and the generator.

The tests at the end are the compiler bugs the fuzzing found (all fixed), kept as
regressions.
"""
import re
import signal
import time
from contextlib import contextmanager

import pytest
from fuzz_strategies import (judge, mutants, prepare, programs, random_mutant,
                             random_program)
from hypothesis import HealthCheck, given, settings

FUZZ = settings(max_examples=50, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SAMPLE = 150  # seeded programs for the statistics of the generators


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    """Where fuzzed programs live: beside the module their user kernels ``use``."""
    return prepare(tmp_path_factory.mktemp("fuzz"))


@pytest.fixture(scope="module")
def valid_sample():
    return [random_program(f"test/{seed}") for seed in range(SAMPLE)]


# ---------------------------------------------------------------- properties (a) and (b)
@FUZZ
@given(text=programs())
def test_valid_programs_are_diagnosed_or_compiled(path, text):
    judge(text, path)


@FUZZ
@given(text=mutants())
def test_mutated_programs_are_diagnosed_or_compiled(path, text):
    judge(text, path)


# ---------------------------------------------------------------- (c) the generators are good
def test_generated_programs_are_accepted(path, valid_sample):
    accepted = sum(judge(text, path) for text in valid_sample)
    assert accepted >= 0.9 * SAMPLE, f"only {accepted} of {SAMPLE} generated programs were accepted"


CONSTRUCTS = {
    "use and user kernels": r'^use "[^"]+"\nkernel ', "kernel after the program": r"^}\n(#.*\n)?kernel ",
    "default tiling": r"^(?!(.|\n)*tiling)", "uniform settings": r"tiling uniform\(nb = ",
    "hybrid settings": r"tiling hybrid\(\w+ = ", "param": r"\n  param \w+ = ", "in matrix": r"\n  in matrix",
    "out matrix": r"\n  out matrix", "inout matrix": r"\n  inout matrix", "default mode": r"\n  matrix ",
    "random init": r"= random (spd|general|diagdom)", "named init": r"= (zeros|identity)",
    "load init": r'= load "', "workspace": r"workspace \w+ like \w+ rows ", "check": r"check (cholesky|lu)\(",
    "qr check": r"check qr\(\w+, \w+\)", "nested for": r"for .*\{\n\s+for ", "else if": r"\} else if ",
    "else": r"\} else \{", "let": r"\blet \w+ = ", "priority": r"\) priority ", "sub-range": r"\]\[[^\]]*:",
    "release": r"\brelease \w+\[", "comment": r"#", "geometry method": r"\.(height|width|offset)\(",
    "min/max": r"\b(min|max)\(", "boolean operators": r"\b(and|or|not) ",
    "hostile names": r"\b(class|lambda|None|_me|CALLS|__import__|print|rt)\b",
}


def test_generated_programs_cover_the_grammar(valid_sample):
    missing = [name for name, pattern in CONSTRUCTS.items()
               if not any(re.search(pattern, text, re.MULTILINE) for text in valid_sample)]
    assert not missing, f"no generated program has: {', '.join(missing)}"


def test_mutants_reach_diagnostics_and_drivers(path):
    accepted = sum(judge(random_mutant(f"test/{seed}"), path) for seed in range(SAMPLE))
    assert 0.02 * SAMPLE <= accepted <= 0.5 * SAMPLE, f"{accepted} of {SAMPLE} mutants were accepted"


# ---------------------------------------------------------------- bugs found
HUGE = "9" * 4301  # one digit past Python's limit on int <-> str conversions
BIG = "9" * 2200  # fine alone; the product of two has 4400 digits
HEADER = "program p {\n  matrix A[n, n] = random spd\n"


# Found by the campaign (python scripts/fuzz_campaign.py: seed 0, 100,000 inputs), shrunk:
def test_integer_literal_past_the_digit_limit_is_a_diagnostic(path):
    judge(f"program p {{\n  param q = {HUGE}\n}}\n", path)


def test_huge_folded_tiling_setting(path):
    judge(f"program p {{\n  tiling hybrid(B = 23 * {'9' * 4300})\n}}\n", path)


def test_unknown_string_escape_warns_nothing(path):
    judge('use "fuzz_kern\\els.py"\n', path)


# Found by reading the code while writing the fuzzer, not by the campaign:
def test_huge_folded_hybrid_setting(path):
    judge(f"program p {{\n  tiling hybrid(b = {BIG} * {BIG})\n  matrix A[n, n] = random spd\n}}\n", path)


def test_huge_folded_out_of_range_index(path):
    judge(HEADER + f"  potrf(A[-{BIG} * {BIG}, 0])\n}}\n", path)


def let_chain(length: int, step: str) -> str:
    """Lets each defined from the one before (``step`` with ``x`` for it), the last used as a bound."""
    lets = "".join(f"  let a{i} = {step.replace('x', f'a{i - 1}')}\n" for i in range(1, length + 1))
    return HEADER + f"  let a0 = 1\n{lets}  for k in 0 .. a{length} {{ potrf(A[0, 0]) }}\n}}\n"


def test_long_let_chain(path):
    judge(let_chain(600, "x + 1"), path)


@contextmanager
def time_limit(seconds: float):
    """Raise TimeoutError in the block after ``seconds``; any outer alarm (pytest-timeout) is resumed."""
    def stop(signum, frame):
        raise TimeoutError(f"over {seconds} s")
    began = time.monotonic()
    handler = signal.signal(signal.SIGALRM, stop)
    outer, interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, handler)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - began), 0.001), interval)


def test_doubling_let_chain_is_checked_quickly(path):
    with time_limit(2):
        judge(let_chain(40, "x + x"), path)
