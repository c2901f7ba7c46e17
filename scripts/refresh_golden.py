"""Regenerate the golden drivers in tests/golden/ from the shipped programs.

Run from the repository root after a deliberate change to code generation:

    python scripts/refresh_golden.py          # rewrite tests/golden/<program>.py
    python scripts/refresh_golden.py --check  # only report stale files (exit 1 if any)

Each golden file is exactly what ``tiledsl compile programs/<program>.tile`` prints;
the program is compiled through the relative path ``programs/<program>.tile`` so the
text (which names its source) does not depend on where the checkout lives.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path("tests") / "golden"


def expected_drivers() -> dict[str, str]:
    """program name -> driver text, compiled from the current working directory."""
    from tiledsl.compiler import compile_path

    drivers = {}
    for source in sorted(Path("programs").glob("*.tile")):
        relative = f"programs/{source.name}"
        result, text = compile_path(relative, GOLDEN / f"{source.stem}.py")  # as compile -o writes it there
        if text is None:
            raise SystemExit(f"{relative} does not compile:\n{result.report()}")
        drivers[source.stem] = text
    return drivers


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report stale golden files, write nothing")
    args = parser.parse_args(argv)
    if Path.cwd().resolve() != ROOT:
        print(f"run this from the repository root ({ROOT})", file=sys.stderr)
        return 2
    drivers = expected_drivers()
    stale = []
    for name, text in drivers.items():
        target = GOLDEN / f"{name}.py"
        if not target.is_file() or target.read_text() != text:
            stale.append(target)
            if not args.check:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
    extra = sorted(p for p in GOLDEN.glob("*.py") if p.stem not in drivers)
    for path in extra:
        stale.append(path)
        if not args.check:
            path.unlink()
    verb = "stale" if args.check else "rewrote"
    for path in stale:
        print(f"{verb}: {path}")
    if not stale:
        print(f"golden drivers up to date ({len(drivers)} programs)")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
