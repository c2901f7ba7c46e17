"""Fuzz the compiler at scale: generated valid programs and mutants, on several processes.

Run from anywhere:

    python scripts/fuzz_campaign.py                      # 100,000 inputs, half of each kind
    python scripts/fuzz_campaign.py -n 2000 --workers 1  # measure throughput first

Input ``index`` of ``kind`` is made from the seed string ``"SEED/KIND/INDEX"`` by
``tests/compiler/fuzz_strategies.py`` (``random_program`` or ``random_mutant``), so any
input can be regenerated. Each is judged by the same oracle as ``tests/compiler/test_fuzz.py``
(checking never raises, diagnostics are well formed, an accepted program's driver
compiles and imports only from ``tiledsl.runtime``); an input that takes longer than
``--timeout`` seconds is a failure too. Failures are grouped by signature (stage,
exception, innermost compiler frame); the first input of each group is shrunk (lines,
then tokens) to a minimal reproducer written under ``--out`` with its traceback.
Exit status 1 when anything failed.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "compiler"))
import fuzz_strategies as fs  # noqa: E402

KINDS = {"valid": fs.random_program, "mutant": fs.random_mutant}
CHUNK = 250  # inputs per job handed to a worker
COUNTERS = ("inputs", "accepted", "compiled", "failed", "seconds")
ACCEPTED_STAGES = ("generate", "compile", "imports")  # failures after the checker accepted the program
SHRINK_SECONDS = 120  # per failure signature


class Timeout(BaseException):
    """An input ran past the time limit (a BaseException: no ``except Exception`` swallows it)."""


def _alarm(signum, frame):
    raise Timeout


def attempt(text: str, path: Path, timeout: float):
    """Judge one input: (accepted, compiled, failure), failure being (signature, traceback) or None."""
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        compiled = fs.judge(text, path)
        return compiled, compiled, None
    except fs.PropertyBroken as broken:
        detail = "".join(traceback.format_exception(broken.__cause__))
        accepted = broken.stage in ACCEPTED_STAGES or broken.compiled
        return accepted, broken.compiled, (broken.signature, detail)
    except Timeout:
        return False, False, (("timeout", f"over {timeout:g} s", ""), "")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def run_chunk(job) -> dict:
    """Worker: judge inputs ``start..stop`` of one kind; counts and first failure of each signature."""
    seed, kind, start, stop, timeout, path = job
    tally = {"kind": kind, "inputs": 0, "accepted": 0, "compiled": 0, "failed": 0, "seconds": 0.0, "failures": {}}
    for index in range(start, stop):
        began = time.perf_counter()
        text = KINDS[kind](f"{seed}/{kind}/{index}")
        accepted, compiled, failure = attempt(text, path, timeout)
        tally["seconds"] += time.perf_counter() - began
        tally["inputs"] += 1
        tally["accepted"] += accepted
        tally["compiled"] += compiled
        tally["failed"] += failure is not None
        if failure:
            signature, detail = failure
            count, first = tally["failures"].get(signature, (0, (kind, index, text, detail)))
            tally["failures"][signature] = (count + 1, first)
    return tally


def _worker_setup():
    """Make SIGALRM (the per-input time limit) raise :class:`Timeout`."""
    signal.signal(signal.SIGALRM, _alarm)


def jobs(args, path: Path) -> list[tuple]:
    """The campaign cut into chunks of one kind: (seed, kind, start, stop, timeout, program path)."""
    mutants = round(args.inputs * args.mutant_share)
    counts = {"valid": args.inputs - mutants, "mutant": mutants}
    return [(args.seed, kind, start, min(start + CHUNK, count), args.timeout, path)
            for kind, count in counts.items() for start in range(0, count, CHUNK)]


def campaign(args, path: Path) -> tuple[dict, dict, float]:
    """Run every job on ``args.workers`` processes; per-kind counters, failures, wall seconds."""
    totals = {kind: Counter() for kind in KINDS}
    failures: dict = {}
    work = jobs(args, path)
    began, done = time.monotonic(), 0
    with multiprocessing.Pool(args.workers, initializer=_worker_setup) as pool:
        for number, tally in enumerate(pool.imap_unordered(run_chunk, work), start=1):
            totals[tally["kind"]].update({k: tally[k] for k in COUNTERS})
            for signature, (count, first) in tally["failures"].items():
                known, first = failures.get(signature, (0, first))
                failures[signature] = (known + count, first)
            done += tally["inputs"]
            if number % max(1, len(work) // 10) == 0:
                rate = done / (time.monotonic() - began)
                print(f"  {done:>7} / {args.inputs} inputs, {rate:.0f}/s, {len(failures)} failure signature(s)",
                      flush=True)
    return totals, failures, time.monotonic() - began


# ---------------------------------------------------------------- shrinking
def _units(text: str, by: str) -> list[str]:
    """``text`` cut into lines, or into tokens each with the blanks after it."""
    if by == "lines":
        return [line + "\n" for line in text.split("\n")]
    units: list[str] = []
    for token in fs.TOKENS.findall(text):
        if token.isspace() and units:
            units[-1] += token
        else:
            units.append(token)
    return units


def shrink(text: str, fails, deadline: float) -> str:
    """Remove chunks of lines, then of tokens, while ``fails(text)`` stays true (ddmin-like);
    then every run of lines (a loop with its closing brace is one) that can go."""
    for by in ("lines", "tokens"):
        units = _units(text, by)
        size = max(1, len(units) // 2)
        while size >= 1 and time.monotonic() < deadline:
            units = _remove_runs(units, size, size, fails, deadline)
            size //= 2
        text = "".join(units)
    units = _units(text, "lines")
    for size in range(len(units) - 1, 0, -1):
        units = _remove_runs(units, size, 1, fails, deadline)
    return "".join(units)


def _remove_runs(units: list[str], size: int, step: int, fails, deadline: float) -> list[str]:
    """Drop each run of ``size`` units (runs start every ``step``) whose removal still fails."""
    start = 0
    while start + size <= len(units) and time.monotonic() < deadline:
        candidate = units[:start] + units[start + size:]
        if candidate and fails("".join(candidate)):
            units = candidate
        else:
            start += step
    return units


def write_reproducers(failures: dict, args, path: Path) -> list[str]:
    """Shrink the first input of each failure signature; write it and its traceback under ``args.out``."""
    args.out.mkdir(parents=True, exist_ok=True)
    lines = []
    for number, (signature, (count, (kind, index, text, detail))) in enumerate(sorted(failures.items()), start=1):
        def fails(candidate, signature=signature):
            failure = attempt(candidate, path, args.timeout)[2]
            return failure is not None and failure[0] == signature
        quick = signature[0] != "timeout"  # shrinking a hang costs the time limit per try
        small = shrink(text, fails, time.monotonic() + SHRINK_SECONDS) if quick else text
        stem = args.out / f"{number}-{'-'.join(signature[:2])}"
        stem.with_suffix(".tile").write_text(small)
        stem.with_suffix(".txt").write_text(
            f"signature: {signature}\ninputs: {count}\nfirst: {kind} input, seed string "
            f"'{args.seed}/{kind}/{index}'\n\n{detail}\n--- original input ---\n{text}")
        lines.append(f"  {' '.join(signature)}: {count} input(s), first {kind} #{index}; reproducer "
                     f"{stem.with_suffix('.tile')} ({len(small)} characters, {len(small.splitlines())} lines)")
    return lines


# ---------------------------------------------------------------- report
def report(totals: dict, failures: dict, seconds: float, args) -> str:
    """The summary table: per kind, inputs, programs accepted, drivers compiled, failures, CPU time."""
    rows = [f"{'kind':<8}{'inputs':>9}{'accepted':>10}{'drivers':>9}{'failures':>10}{'ms/input':>10}"]
    for kind, t in list(totals.items()) + [("total", sum(totals.values(), Counter()))]:
        per_input = 1000 * t["seconds"] / max(1, t["inputs"])
        rows.append(f"{kind:<8}{t['inputs']:>9}{t['accepted']:>10}{t['compiled']:>9}{t['failed']:>10}"
                    f"{per_input:>10.1f}")
    inputs = sum(t["inputs"] for t in totals.values())
    head = (f"fuzz campaign: seed {args.seed}, {args.workers} worker(s), {inputs} inputs in {seconds:.1f} s "
            f"wall ({inputs / seconds:.0f} inputs/s)")
    return "\n".join([head] + rows + [f"failure signatures: {len(failures)}"])


def parse_args(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", "--inputs", type=int, default=100_000, help="inputs in all (default 100000)")
    parser.add_argument("--mutant-share", type=float, default=0.5, help="share of mutants (default 0.5)")
    parser.add_argument("--workers", type=int, default=os.cpu_count(), help="processes (default: all cores)")
    parser.add_argument("--seed", default="0", help="campaign seed (default 0)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds one input may take (default 10)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "tiledsl-fuzz",
                        help="folder for reproducers (default: TMPDIR/tiledsl-fuzz)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        path = fs.prepare(Path(folder))
        totals, failures, seconds = campaign(args, path)
        print(report(totals, failures, seconds, args))
        _worker_setup()
        for line in write_reproducers(failures, args, path):
            print(line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
