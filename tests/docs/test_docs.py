"""The documentation, run: every example of docs/*.md, the diagnostics table, the links.

Conventions of the pages. A fenced
block's language says what it is; HTML comments on the lines right above the
fence are directives for this file:

``tile``
    A complete program (unless an excerpt-of). It is checked as if saved in ``docs/examples/`` (so
    ``use "ldlt_kernels.py"`` finds that module) and must give no diagnostic
    at all, or exactly those named by ``<!-- expect: CODE at LINE:COL -->``
    lines.
``console``
    ``$ COMMAND`` lines (a trailing ``\\`` continues one) are run with bash in
    the page's session directory, in order; the lines after a command are its
    expected output, stdout and stderr together. They must appear in the
    output in that order, other lines may come between. Runs of whitespace
    compare equal, ``...`` inside a line matches any text, and a line holding
    only ``...`` stands for lines left out. ``<!-- compare: loose -->`` lets
    every number match any number too (timings). ``<!-- exit: N -->``: every
    command of the block exits with status N (default 0).
``python``
    Run with ``python`` in the session directory.
Any block:
    ``<!-- same-as: PATH -->``: the block is the repository file PATH, byte
    for byte (the page shows the real file). ``<!-- excerpt-of: PATH -->``: the
    block's lines are lines of PATH (in the session directory, so it may be a
    file an earlier command wrote), consecutive between lines ``...``.
    ``<!-- write: PATH -->``: the block is saved as PATH in the session
    directory instead of being run. ``<!-- norun -->``: shown, never run.
Blocks of other languages (bash, text, lark, ...) are shown, not run.

A page runs in its own session directory, holding a copy of ``docs/`` and a
link to ``programs/``: commands written for the repository root work there and
nothing is written into the repository. ``tiledsl`` and ``python`` are this
interpreter's; the compile cache is private to the test run.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

import tiledsl
from tiledsl.compiler import check_path
from tiledsl.compiler.diagnostics import CODES, render
from tiledsl.runtime import Options, execute

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = ("language.md", "tutorial.md", "cluster.md", "architecture.md")
RUNNABLE = ("tile", "console", "python")


# ---------------------------------------------------------------- reading the pages
@dataclass
class Block:
    page: str
    line: int  # of the opening fence
    language: str
    text: str
    directives: list = field(default_factory=list)  # (name, value)

    def directive(self, name: str):
        return next((value for key, value in self.directives if key == name), None)

    def all(self, name: str) -> list:
        return [value for key, value in self.directives if key == name]

    def __str__(self):
        return f"{self.page}:{self.line} ({self.language} block)"


DIRECTIVE = re.compile(r"^<!--\s*([a-z-]+)\s*(?::\s*(.*?))?\s*-->$")
FENCE = re.compile(r"^(`{3,})([\w+-]*)\s*$")


def blocks(page: str) -> list[Block]:
    """The fenced blocks of ``docs/page`` with the directives right above each."""
    lines = (DOCS / page).read_text().split("\n")
    found, index = [], 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if not match:
            index += 1
            continue
        fence, language, start = match[1], match[2], index
        end = next(i for i in range(start + 1, len(lines)) if lines[i].strip() == fence)
        directives, above = [], start - 1
        while above >= 0 and (d := DIRECTIVE.match(lines[above].strip())):
            directives.insert(0, (d[1], d[2] or ""))
            above -= 1
        text = "\n".join(lines[start + 1:end]) + "\n"
        found.append(Block(page, start + 1, language, text, directives))
        index = end + 1
    return found


# ---------------------------------------------------------------- sessions
@dataclass
class Session:
    directory: Path
    env: dict
    outputs: list = field(default_factory=list)  # (command, exit status, output)


def tool_environment(root: Path) -> dict:
    """An environment where ``tiledsl`` and ``python`` are this interpreter's, with a
    private cache (no compiled drivers or tuned tile sizes from elsewhere)."""
    tools = root / "bin"
    tools.mkdir()
    for name, target in (("tiledsl", f'"{sys.executable}" -m tiledsl.commands.cli "$@"'),
                         ("python", f'"{sys.executable}" "$@"')):
        (tools / name).write_text(f"#!/bin/sh\nexec {target}\n")
        (tools / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEDSL_")}
    env["PATH"] = os.pathsep.join([str(tools), str(Path(sys.executable).parent), env.get("PATH", "")])
    env["XDG_CACHE_HOME"] = str(root / "cache")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def new_session(root: Path) -> Session:
    directory = root / "session"
    shutil.copytree(DOCS, directory / "docs", ignore=shutil.ignore_patterns("__pycache__", "*.npy"))
    (directory / "programs").symlink_to(ROOT / "programs")
    return Session(directory, tool_environment(root))


def run_block(block: Block, session: Session) -> None:
    """Run (or compare, or save) one block; an AssertionError names the block."""
    if block.directive("norun") is not None:
        return
    same, excerpt, write = block.directive("same-as"), block.directive("excerpt-of"), block.directive("write")
    if same is not None:
        assert (ROOT / same).read_text() == block.text, f"{block} differs from {same}"
    if excerpt is not None:
        assert_excerpt(block, (session.directory / excerpt).read_text())
    if write is not None:
        target = session.directory / write
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.text)
    if block.language == "tile" and excerpt is None:
        if write is None:
            target = session.directory / "docs/examples/_example.tile"
            target.write_text(block.text)
        assert_diagnostics(block, target)
    elif write is not None or excerpt is not None:
        return
    elif block.language == "console":
        run_console(block, session)
    elif block.language == "python":
        script = session.directory / "_example.py"
        script.write_text(block.text)
        done = subprocess.run([sys.executable, str(script)], cwd=session.directory, env=session.env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{block} failed:\n{done.stdout}\n{done.stderr}"


def assert_diagnostics(block: Block, path: Path) -> None:
    wanted = set()
    for value in block.all("expect"):
        match = re.fullmatch(r"([EW]\d{3}) at (\d+):(\d+)", value)
        assert match, f"{block}: bad expect directive {value!r}"
        wanted.add((match[1], int(match[2]), int(match[3])))
    result = check_path(path)
    got = {(d.code, d.span.line, d.span.column) for d in result.diagnostics}
    assert got == wanted, f"{block}: expected {sorted(wanted)}, got:\n{result.report()}"


def assert_excerpt(block: Block, text: str) -> None:
    """The block's lines are lines of ``text``, consecutive between '...' lines, in order."""
    source = [line.rstrip() for line in text.split("\n")]
    position = 0
    for chunk in re.split(r"\n\s*(?:#\s*)?\.\.\.\s*\n", "\n" + block.text.rstrip("\n") + "\n"):
        lines = [line.rstrip() for line in chunk.strip("\n").split("\n")]
        if lines == [""]:
            continue
        starts = [i for i in range(position, len(source) - len(lines) + 1) if source[i:i + len(lines)] == lines]
        assert starts, f"{block}: these lines are not in the file (in this order):\n" + "\n".join(lines)
        position = starts[0] + len(lines)


def commands(block: Block) -> list[tuple[str, list[str]]]:
    """[(command, expected output lines)] of a console block."""
    found = []
    lines = block.text.rstrip("\n").split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        assert line.startswith("$ "), f"{block}: output before any command: {line!r}"
        command = line[2:]
        while command.endswith("\\"):
            index += 1
            command = command[:-1] + " " + lines[index].strip()
        index += 1
        expected = []
        while index < len(lines) and not lines[index].startswith("$ "):
            expected.append(lines[index])
            index += 1
        found.append((command, expected))
    return found


NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


def line_pattern(line: str, loose: bool) -> re.Pattern:
    parts = []
    for piece in re.split(r"(\.\.\.|\s+)", line.strip()):
        if piece == "...":
            parts.append(".*")
        elif piece.isspace():
            parts.append(r"\s+")
        elif loose:
            words = re.split(f"({NUMBER})", piece)
            parts.append("".join(NUMBER if i % 2 else re.escape(w) for i, w in enumerate(words)))
        else:
            parts.append(re.escape(piece))
    return re.compile("".join(parts))


def assert_output(block: Block, command: str, expected: list[str], output: str, loose: bool) -> None:
    got = [line.strip() for line in output.split("\n") if line.strip()]
    position, skipping = 0, True  # lines before the first shown, and where '...' stands, may be left out
    for line in expected:
        if not line.strip():
            continue
        if line.strip() == "...":
            skipping = True
            continue
        pattern = line_pattern(line, loose)
        found = next((i for i in range(position, len(got)) if pattern.fullmatch(got[i])), None)
        assert found is not None, (f"{block}: `{command}` printed no line like\n  {line.strip()}\n"
                                   f"after line {position} of its output:\n{output}")
        assert skipping or found == position, (f"{block}: `{command}` printed lines the page leaves out without "
                                               f"'...' before\n  {line.strip()}\n:\n{output}")
        position, skipping = found + 1, False
    shown = [line for line in expected if line.strip()]
    assert not shown or shown[-1].strip() == "..." or position == len(got), (
        f"{block}: `{command}` printed lines after the last the page shows, without '...':\n{output}")


def run_console(block: Block, session: Session) -> None:
    status = int(block.directive("exit") or 0)
    loose = block.directive("compare") == "loose"
    for command, expected in commands(block):
        done = subprocess.run(["bash", "-c", command], cwd=session.directory, env=session.env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        session.outputs.append((command, done.returncode, done.stdout))
        assert done.returncode == status, (f"{block}: `{command}` exited with {done.returncode}, "
                                           f"not {status}:\n{done.stdout}")
        assert_output(block, command, expected, done.stdout, loose)


_SESSIONS: dict = {}


def session_of(page: str, tmp_path_factory) -> Session:
    """Run every block of ``page`` once per test run, in order; the session it left."""
    if page not in _SESSIONS:
        session = new_session(tmp_path_factory.mktemp(page.replace(".", "_")))
        try:
            for block in blocks(page):
                run_block(block, session)
        except AssertionError as error:
            _SESSIONS[page] = error
            raise
        _SESSIONS[page] = session
    if isinstance(_SESSIONS[page], AssertionError):
        raise AssertionError(f"the session of {page} failed earlier: {_SESSIONS[page]}")
    return _SESSIONS[page]


# ---------------------------------------------------------------- the pages' examples
def on_the_pages_worker(page: str):
    """One xdist worker per page runs its session (``session_of`` keeps it per process), so that
    the tests reading a page's session do not run the page again on another worker."""
    return pytest.param(page, marks=pytest.mark.xdist_group(f"docs-session-{page}"), id=page)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("page", [on_the_pages_worker(page) for page in PAGES])
def test_every_example_of_the_page_runs(page, tmp_path_factory):
    session_of(page, tmp_path_factory)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("page", PAGES)
def test_the_page_has_runnable_examples_and_well_formed_directives(page):
    known = {"expect", "compare", "exit", "same-as", "excerpt-of", "write", "norun"}
    found = blocks(page)
    assert any(b.language in RUNNABLE for b in found), f"{page} runs nothing"
    for block in found:
        for name, value in block.directives:
            assert name in known, f"{block}: unknown directive {name!r}"
            if name in ("same-as",):
                assert (ROOT / value).is_file(), f"{block}: no file {value}"
        if block.directive("expect") is not None:
            assert block.language == "tile", f"{block}: expect directives are for tile blocks"


@pytest.mark.timeout(120)
@pytest.mark.xdist_group("docs-session-tutorial.md")
def test_tutorial_end_to_end_on_four_ranks(tmp_path_factory):
    """The tutorial's 4-rank run really factored A: ‖A − L·D·Lᵀ‖₁/(‖A‖₁·n·ε) is small."""
    from tiledsl.runtime.checks import EPS, THRESHOLD, scaled

    session = session_of("tutorial.md", tmp_path_factory)
    runs = [(c, s, o) for c, s, o in session.outputs
            if c.startswith("tiledsl run docs/examples/ldlt.tile") and "--np 4" in c]
    assert len(runs) == 1, [c for c, _, _ in session.outputs]
    command, status, output = runs[0]
    assert status == 0 and "4 rank(s) on a 2x2 grid" in output and "56 tasks" in output, output
    a = np.load(session.directory / "a.npy")
    factored = np.load(session.directory / "out.npy")
    n = a.shape[0]
    assert n == 600 and np.array_equal(a, a.T)
    lower = np.tril(factored, -1) + np.eye(n)
    d = np.diag(factored)
    assert (d < 0).any() and (d > 0).any(), "the tutorial's matrix is meant to be indefinite"
    difference = np.linalg.norm(a - (lower * d) @ lower.T, 1)
    assert scaled(difference, np.linalg.norm(a, 1), n) < THRESHOLD
    assert difference / np.linalg.norm(a, 1) < 100 * n * EPS
    trace = json.loads((session.directory / "ldlt.json").read_text())
    tasks = [e for e in trace["traceEvents"] if e.get("cat") == "task"]
    assert len(tasks) == 56 and {e["pid"] for e in tasks} == {0, 1, 2, 3}
    assert {e["name"] for e in tasks} == {"ldlt_factor", "ldlt_solve", "ldlt_update"}


# ---------------------------------------------------------------- the diagnostics tables
@dataclass
class Row:
    line: int
    cells: dict


def tables(page: str) -> list[list[Row]]:
    """Every markdown table of the page, as rows keyed by header cell."""
    lines = (DOCS / page).read_text().split("\n")
    found, index = [], 0
    while index < len(lines):
        if lines[index].startswith("|") and index + 1 < len(lines) and re.match(r"^\|[\s:|-]+\|$", lines[index + 1]):
            header = split_row(lines[index])
            rows, index = [], index + 2
            while index < len(lines) and lines[index].startswith("|"):
                rows.append(Row(index + 1, dict(zip(header, split_row(lines[index])))))
                index += 1
            found.append(rows)
        else:
            index += 1
    return found


def split_row(line: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [cell.strip().replace("\\|", "|") for cell in cells]


def code_spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]*)`", cell)


def diagnostic_rows() -> list[Row]:
    return [row for table in tables("language.md") for row in table
            if {"Code", "Trigger", "At", "Message"} <= set(row.cells)]


@pytest.mark.timeout(30)
def test_the_diagnostics_table_lists_every_code_once_with_its_meaning():
    rows = [row for row in diagnostic_rows() if "Meaning" in row.cells]
    listed = [code_spans(row.cells["Code"])[0] for row in rows]
    assert sorted(listed) == sorted(CODES), "the table of codes must list every code of diagnostics.CODES once"
    for row in rows:
        code = code_spans(row.cells["Code"])[0]
        assert row.cells["Meaning"] == CODES[code], f"language.md:{row.line}: meaning of {code}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("row", diagnostic_rows(), ids=lambda row: f"line{row.line}")
def test_each_trigger_gives_its_diagnostic_where_stated(row, tmp_path, monkeypatch):
    code = code_spans(row.cells["Code"])[0]
    (trigger,) = code_spans(row.cells["Trigger"])
    monkeypatch.chdir(tmp_path)
    if trigger.startswith("$ "):
        env = tool_environment(tmp_path)
        subprocess.run(["bash", "-c", trigger[2:]], cwd=tmp_path, env=env, check=True, timeout=60)
    else:
        (tmp_path / "t.tile").write_text(trigger + "\n")
    result = check_path("t.tile")
    at = row.cells["At"]
    if at == "file":
        line, column = 0, 0
    else:
        line, column = map(int, at.split(":"))
    found = [d for d in result.diagnostics if (d.code, d.span.line, d.span.column) == (code, line, column)]
    assert found, f"language.md:{row.line}: no {code} at {at}:\n{result.report()}"
    others = {d.code for d in result.diagnostics if d.is_error} - {code}
    assert not others, f"language.md:{row.line}: the trigger also gives {sorted(others)}:\n{result.report()}"
    d = found[0]
    rendered = [render(d, result.source).split("\n")[0]]
    rendered += [f"= note: {note}" for note in d.notes] + ([f"= hint: {d.hint}"] if d.hint else [])
    assert code_spans(row.cells["Message"]) == rendered, f"language.md:{row.line}"


# ---------------------------------------------------------------- links
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, fenced = set(), False
    for line in path.read_text().split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"^#{1,6}\s+(.*)", line)):
            found.add(slug(match[1]))
    return found


def link_sources() -> list[Path]:
    return [ROOT / "README.md"] + sorted(DOCS.glob("*.md"))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("source", link_sources(), ids=lambda p: p.name)
def test_relative_links_resolve(source):
    text = re.sub(r"```.*?```", "", source.read_text(), flags=re.S)
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (source.parent / path).resolve() if path else source
        assert resolved.exists(), f"{source.name}: broken link {target}"
        if anchor and resolved.suffix == ".md":
            assert anchor in anchors(resolved), f"{source.name}: no heading #{anchor} in {resolved.name}"


@pytest.mark.timeout(30)
def test_the_readme_links_every_page():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Documentation", 1)[1].split("\n## ", 1)[0]
    for page in PAGES:
        assert f"](docs/{page})" in section, f"README's Documentation section does not link docs/{page}"


@pytest.mark.timeout(30)
def test_the_repository_stands_alone():
    """Issue 16.12: no file points outside the repository, to the design notes beside it."""
    outside = "../" + "shared/"  # spelt in two parts so that this file does not match itself
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    pointing = [name for name in tracked.splitlines()
                if (ROOT / name).is_file() and outside in (ROOT / name).read_text(errors="replace")]
    assert pointing == []


@pytest.mark.timeout(120)
def test_gpu_task_cost_states_the_task_count_gemm_tile_makes():
    """README points to benchmarks/gpu_task_cost.py: its help said 13824 tasks ((n/nb)³) at its default
    n = 24, nb = 1, but programs/gemm.tile makes one task per column panel of C and inner tile."""
    script = ROOT / "benchmarks" / "gpu_task_cost.py"
    shown = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                           timeout=60, check=True).stdout
    stated = int(re.search(r"default 24: (\d+) tasks at nb = 1", shown).group(1))
    driver = tiledsl.load(ROOT / "programs" / "gemm.tile").driver
    assert execute(driver, Options(n=24, tiles={"nb": 1}, workers=1)).tasks == stated
    assert "(n/nb)²" in shown
