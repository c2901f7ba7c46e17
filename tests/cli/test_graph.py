"""`tiledsl graph`: the task graph as DOT, its edges, and text that always parses."""
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

import tiledsl.commands.graph as graph
from tiledsl.commands.cli import main
from tiledsl.compiler import compile_path
from tiledsl.driverload import import_driver
from tiledsl.commands.explain import Plan, PlannedTask, plan
from tiledsl.runtime.options import Options
from tiledsl.runtime.program import Call

ROOT = Path(__file__).resolve().parents[2]
CHOLESKY = str(ROOT / "programs" / "cholesky.tile")
NODE = re.compile(r'^\s*"(t\d+)" \[label="((?:[^"\\]|\\.)*)"', re.M)
EDGE = re.compile(r'^\s*"(t\d+)" -> "(t\d+)" \[label="((?:[^"\\]|\\.)*)"', re.M)


def balanced(text: str) -> bool:
    """Braces and brackets balance outside strings, and every string is closed on its line."""
    depth, inside, escaped = [], False, False
    pairs = {"}": "{", "]": "["}
    for char in text:
        if inside:
            if char == "\n":
                return False
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                inside = False
        elif char == '"':
            inside = True
        elif char in "{[":
            depth.append(char)
        elif char in "}]":
            if not depth or depth.pop() != pairs[char]:
                return False
    return not inside and not depth


def assert_parses(text: str, tmp_path) -> None:
    assert balanced(text)
    if shutil.which("dot"):
        done = subprocess.run(["dot", "-Tsvg", "-o", str(tmp_path / "check.svg")], input=text, text=True,
                              capture_output=True, timeout=60)
        assert done.returncode == 0 and "syntax error" not in done.stderr, done.stderr


def dot_for(tmp_path, capsys, *args):
    out = tmp_path / "dag.dot"
    assert main(["graph", CHOLESKY, "--n", "300", "--nb", "100", *args, "-o", str(out)]) == 0, \
        capsys.readouterr().err
    text = out.read_text()
    nodes = {name: label.split("\\n")[0] for name, label in NODE.findall(text)}
    edges = {(nodes[a], nodes[b]): label for a, b, label in EDGE.findall(text)}
    return text, nodes, edges


@pytest.mark.timeout(60)
def test_cholesky_nodes_are_the_tasks_of_explain(tmp_path, capsys):
    text, nodes, _ = dot_for(tmp_path, capsys)
    result, driver_text = compile_path(CHOLESKY)
    (tmp_path / "driver.py").write_text(driver_text)
    driver = import_driver(tmp_path / "driver.py", "graph_test_cholesky")
    planned = plan(driver, Options(n=300, tiles={"nb": 100}), (1, 1))
    assert len(nodes) == len(planned.tasks) == 10  # 3 potrf, 3 trsm, 3 syrk, 1 gemm
    kernels = [label.split("(")[0] for label in nodes.values()]
    assert sorted(kernels) == sorted(["potrf"] * 3 + ["trsm"] * 3 + ["syrk"] * 3 + ["gemm"])
    assert "line 10" in text and "line 17" in text
    assert graph.count_tasks(driver, Options(n=300, tiles={"nb": 100}), (1, 1), 0) == 10
    assert graph.count_tasks(driver, Options(n=3000, tiles={"nb": 100}), (1, 1), 0, limit=50) == 51
    assert_parses(text, tmp_path)


@pytest.mark.timeout(60)
def test_cholesky_edges_are_its_read_after_write_dependencies(tmp_path, capsys):
    _, _, edges = dot_for(tmp_path, capsys)
    expected = {
        ("potrf(A[0, 0])", "trsm(A[0, 0], A[1, 0])"): "RAW A[0, 0]",
        ("potrf(A[0, 0])", "trsm(A[0, 0], A[2, 0])"): "RAW A[0, 0]",
        ("trsm(A[0, 0], A[1, 0])", "syrk(A[1, 0], A[1, 1])"): "RAW A[1, 0]",
        ("trsm(A[0, 0], A[1, 0])", "gemm(A[2, 0], A[1, 0], A[2, 1])"): "RAW A[1, 0]",
        ("trsm(A[0, 0], A[2, 0])", "gemm(A[2, 0], A[1, 0], A[2, 1])"): "RAW A[2, 0]",
        ("trsm(A[0, 0], A[2, 0])", "syrk(A[2, 0], A[2, 2])"): "RAW A[2, 0]",
        ("syrk(A[1, 0], A[1, 1])", "potrf(A[1, 1])"): "RAW A[1, 1]",
        ("gemm(A[2, 0], A[1, 0], A[2, 1])", "trsm(A[1, 1], A[2, 1])"): "RAW A[2, 1]",
        ("syrk(A[2, 0], A[2, 2])", "syrk(A[2, 1], A[2, 2])"): "RAW A[2, 2]",
        ("potrf(A[1, 1])", "trsm(A[1, 1], A[2, 1])"): "RAW A[1, 1]",
        ("trsm(A[1, 1], A[2, 1])", "syrk(A[2, 1], A[2, 2])"): "RAW A[2, 1]",
        ("syrk(A[2, 1], A[2, 2])", "potrf(A[2, 2])"): "RAW A[2, 2]",
    }
    assert edges == expected  # no WAR/WAW: Cholesky never overwrites a tile another task still reads


@pytest.mark.timeout(60)
def test_a_2x1_grid_has_inter_node_edges(tmp_path, capsys):
    text, _, local = dot_for(tmp_path, capsys)
    assert not any("node)" in label for label in local.values())
    text, _, edges = dot_for(tmp_path, capsys, "--grid", "2x1")
    inter = [pair for pair, label in edges.items() if label.endswith("(inter-node)")]
    assert inter and len(inter) < len(edges)
    assert ("potrf(A[0, 0])", "trsm(A[0, 0], A[1, 0])") in inter  # A[1, 0] lives on rank 1
    assert 'subgraph "cluster_rank_0"' in text and 'subgraph "cluster_rank_1"' in text
    assert_parses(text, tmp_path)
    text, _, edges = dot_for(tmp_path, capsys, "--grid", "2x1", "--gpus", "1")
    assert any(label.endswith("(intra-node)") for label in edges.values())
    assert_parses(text, tmp_path)


@pytest.mark.timeout(60)
def test_war_and_waw_edges():
    def task(index, kernel, modes, *tiles):
        call = Call(kernel, modes, modes.index(next(m for m in modes if m != "in")), index + 1, kernel)
        return PlannedTask(index, call, tuple(Tile(name) for name in tiles), ((0, 0),) * len(tiles))

    tasks = [task(0, "make", ("out",), "X"), task(1, "use", ("in", "out"), "X", "Y"),
             task(2, "redo", ("out",), "X"), task(3, "bump", ("inout",), "X")]
    found = {pair: dict(kinds) for pair, kinds in graph.edges(tasks).items()}
    assert found == {(0, 1): {"RAW": ["X[0, 0]"]}, (1, 2): {"WAR": ["X[0, 0]"]},
                     (0, 2): {"WAW": ["X[0, 0]"]}, (2, 3): {"RAW": ["X[0, 0]"]}}
    # tester f62: a reader on another rank reads the copy it was sent, which the write does not wait for
    tasks[1] = PlannedTask(1, tasks[1].call, tasks[1].tiles, ((0, 0), (1, 0)))  # `use` runs where Y lies: rank 1
    found = {pair: dict(kinds) for pair, kinds in graph.edges(tasks).items()}
    assert found == {(0, 1): {"RAW": ["X[0, 0]"]}, (0, 2): {"WAW": ["X[0, 0]"]}, (2, 3): {"RAW": ["X[0, 0]"]}}


class Tile:
    def __init__(self, name):
        self.matrix, self.i, self.j = SimpleNamespace(name=name), 0, 0

    def __str__(self):
        return f"{self.matrix.name}[{self.i}, {self.j}]"


@pytest.mark.timeout(60)
def test_quote_escapes_quotes_backslashes_and_line_ends():
    assert graph.quote('say "hi"') == r'"say \"hi\""'
    assert graph.quote("back\\slash") == r'"back\\slash"'
    assert graph.quote("two\nlines\r\nthree\rfour") == r'"two\nlines\nthree\nfour"'
    assert graph.quote("bell\x07") == '"bell "'
    assert graph.quote('\\"') == r'"\\\""'  # an escaped quote cannot close the string early
    assert balanced(graph.quote('x" ]; } digraph { "y'))


@pytest.mark.timeout(60)
def test_hostile_names_keep_the_dot_text_valid(tmp_path):
    hostile = 'k"}\\\n[x]'
    call = Call(hostile, ("in", "inout"), 1, 7, 'call "with" \\ text\n')
    tasks = [PlannedTask(0, call, (Tile('M"'), Tile("N\\")), ((0, 0), (1, 0))),
             PlannedTask(1, call, (Tile("N\\"), Tile('M"')), ((1, 0), (0, 0)))]
    fake = Plan('prog"\n}', {"n": 4, "nb": 2}, (2, 1), 0, tasks, len(tasks), {}, {}, {})
    text = graph.to_dot(fake, 'file "name".tile')
    assert_parses(text, tmp_path)
    assert text.count(" -> ") == 1 and len(NODE.findall(text)) == 2  # RAW on N\\, WAR on M"


@pytest.mark.timeout(60)
def test_svg_without_graphviz_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(graph.shutil, "which", lambda name: None)
    assert main(["graph", CHOLESKY, "--n", "300", "--nb", "100", "-o", str(tmp_path / "dag.svg")]) == 2
    err = capsys.readouterr().err
    assert "graphviz is not installed" in err and "-o dag.dot" in err and "Traceback" not in err
    assert not (tmp_path / "dag.svg").exists()


@pytest.mark.timeout(60)
@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz is not installed")
def test_svg_through_graphviz(tmp_path, capsys):
    assert main(["graph", CHOLESKY, "--n", "300", "--nb", "100", "--grid", "2x1",
                 "-o", str(tmp_path / "dag.svg")]) == 0, capsys.readouterr().err
    svg = (tmp_path / "dag.svg").read_text()
    assert "<svg" in svg and "potrf(A[0, 0])" in svg


@pytest.mark.timeout(60)
@pytest.mark.parametrize("args, message", [
    (("--n", "30000", "--nb", "100"), "more than 5000 tasks"),
    (("--n", "1500", "--nb", "80", "-o", "dag.svg"), "more than 1000 tasks (its largest matrix has 361 tiles): graph "
     "renders at most 1000 through graphviz, whose layout takes minutes past that (write .dot for up to 5000)"),
    (("--n", "300", "--nb", "100", "-o", "dag.txt"), "as .dot"),
    (("--n", "300", "--grid", "2y1"), "2y1"),
    (("--n", "300", "--gpus", "-1"), "--gpus must be from 0 to 1024, got -1"),
])
def test_usage_errors(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    assert main(["graph", CHOLESKY, *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.timeout(60)
def test_a_program_of_few_tasks_on_many_tiles_is_drawn(tmp_path, capsys):
    """One call on a matrix of 160,000 tiles was refused as 'more than 5000 tasks'."""
    (tmp_path / "one.tile").write_text("program one {\n  matrix A[n, n] = random spd\n  potrf(A[0, 0])\n}\n")
    assert main(["graph", str(tmp_path / "one.tile"), "--n", "400", "--nb", "1", "-o", str(tmp_path / "one.dot")]) == 0
    assert "n=400 nb=1, 1 tasks" in (tmp_path / "one.dot").read_text(), capsys.readouterr().err


@pytest.mark.timeout(60)
def test_without_output_the_dot_goes_to_stdout(capsys):
    assert main(["graph", "cholesky", "--n", "300", "--nb", "100"]) == 0
    out = capsys.readouterr().out
    assert out.startswith('digraph "cholesky" {') and balanced(out)


@pytest.mark.timeout(60)
def test_a_node_names_the_sub_ranges_its_task_reads_and_writes(tmp_path, capsys):
    (tmp_path / "halo.tile").write_text(
        "program halo {\n  tiling uniform(nb = 4)\n  matrix A[n, n] = random general\n"
        "  matrix B[n, n] = random general\n"
        "  for i in 1 .. A.mt { gemm(A[i - 1, 0][3 : 4, :], B[0, 0][:, 0 : 1], A[i, 0][0 : 1, 0 : 1]) }\n}\n")
    out = tmp_path / "dag.dot"
    assert main(["graph", str(tmp_path / "halo.tile"), "--n", "12", "-o", str(out)]) == 0, capsys.readouterr().err
    labels = [label.split("\\n")[0] for _, label in NODE.findall(out.read_text())]
    assert labels == ["gemm(A[0, 0][3:4, 0:4], B[0, 0][0:4, 0:1], A[1, 0][0:1, 0:1])",
                      "gemm(A[1, 0][3:4, 0:4], B[0, 0][0:4, 0:1], A[2, 0][0:1, 0:1])"]


@pytest.mark.timeout(60)
def test_a_node_names_a_panel_as_one_argument(tmp_path, capsys):
    """gemm(A[0 : A.mt, k], A[k, k], C[0 : C.mt, k], ...) was labelled gemm(A[0, 4], A[1, 4], ..., C[4, 4]):
    11 arguments of a 3-argument kernel."""
    (tmp_path / "panels.tile").write_text(
        "program panels {\n  tiling uniform(nb = 100)\n  matrix A[n, n] = random general\n"
        "  matrix C[n, n] = random general\n"
        "  for k in 0 .. A.nt { gemm(A[0 : A.mt, k], A[k, k], C[0 : C.mt, k], \"N\", \"N\", 0.5, 1.0) }\n}\n")
    out = tmp_path / "dag.dot"
    assert main(["graph", str(tmp_path / "panels.tile"), "--n", "450", "-o", str(out)]) == 0, capsys.readouterr().err
    labels = [label.split("\\n")[0] for _, label in NODE.findall(out.read_text())]
    assert labels == [f"gemm(A[0:5, {k}], A[{k}, {k}], C[0:5, {k}])" for k in range(5)]


@pytest.mark.timeout(60)
def test_an_input_file_of_another_shape_than_n_gives_is_refused_as_run_refuses_it(tmp_path, capsys):
    import numpy as np

    np.save(tmp_path / "a.npy", np.zeros((200, 300)))
    assert main(["graph", CHOLESKY, "--n", "300", "--input", f"A={tmp_path / 'a.npy'}"]) == 2
    assert capsys.readouterr().err.strip() == (f"tiledsl: error: input file '{tmp_path / 'a.npy'}' has shape "
                                               f"(200, 300) but the matrix needs shape (300, 300); the input files' "
                                               f"shapes disagree with cholesky, which makes A square; A is 200×300")


@pytest.mark.timeout(60)
def test_a_graph_replaces_only_a_drawing_never_a_file_of_another_kind(tmp_path, capsys):
    """-o checked only the suffix: another tool's .dot was replaced by the graph."""
    mine = tmp_path / "mine.dot"
    mine.write_text("my notes\n")
    args = ["graph", str(ROOT / "programs/cholesky.tile"), "--n", "300", "--nb", "100", "-o"]
    assert main([*args, str(mine)]) == 2
    assert capsys.readouterr().err == (f"tiledsl: error: -o {mine}: {mine} is there and is not a drawing tiledsl made "
                                       f"(a graph, a chart): it replaces only those; name another file, or remove "
                                       f"it first\n")
    assert mine.read_text() == "my notes\n"
    drawn = tmp_path / "g.dot"
    assert main([*args, str(drawn)]) == 0 and main([*args, str(drawn)]) == 0
    assert drawn.read_text().startswith('digraph "cholesky"')
    design = tmp_path / "design.dot"  # another tool's graph
    design.write_text("digraph mine { a -> b }\n")
    assert main([*args, str(design)]) == 2 and "is not a drawing" in capsys.readouterr().err
    assert design.read_text() == "digraph mine { a -> b }\n"


def test_a_png_graphviz_rendered_gets_the_mark_in_a_text_chunk(tmp_path):
    """graphviz's PNG keeps no comment: without the chunk a second graph -o g.png was refused."""
    from PIL import Image

    path = tmp_path / "g.png"
    Image.new("RGB", (4, 3), "white").save(path)
    graph._mark_png(path)
    with Image.open(path) as image:
        image.verify()  # the chunks' CRCs
    with Image.open(path) as image:
        assert image.text["Software"] == "drawn by tiledsl" and image.size == (4, 3)


@pytest.mark.timeout(60)
def test_the_caption_says_the_parameters_it_was_drawn_for(tmp_path, capsys):
    """Two drawings for other --set values were byte-identical: the caption gave n and the tiles only."""
    (tmp_path / "gp.tile").write_text("program gp {\n  param q = 2\n  param mode = \"L\"\n  tiling uniform(nb = 100)\n"
                                      "  matrix A[n, n] = random spd\n  for k in 0 .. q { potrf(A[k, k], mode) }\n}\n")
    out = tmp_path / "gp.dot"
    assert main(["graph", str(tmp_path / "gp.tile"), "--n", "300", "--set", "q=3", "-o", str(out)]) == 0
    text = out.read_text()
    assert 'graph [label="gp (gp.tile) n=300 nb=100 q=3 mode=L, 3 tasks, 1x1 grid' in text
    # and each node its values, as explain's table (tester v: the graph could not tell a solve's sides apart)
    assert [label.split("\\n")[:2] for _, label in NODE.findall(text)] == [
        [f"potrf(A[{k}, {k}])", 'uplo = \\"L\\"'] for k in range(3)]  # as the language writes it, quoted for DOT


@pytest.mark.timeout(60)
def test_the_caption_says_the_host_gpu_ratio_it_was_drawn_for(tmp_path):
    """2:1 and 0:1 placed tasks apart, yet the two captions read alike."""
    captions = []
    for ratio in ("2:1", "0:1"):
        out = tmp_path / f"g{ratio[0]}.dot"
        assert main(["graph", CHOLESKY, "--n", "300", "--nb", "100", "--gpus", "2", "--gpu-ratio", ratio, "--no-tune",
                     "-o", str(out)]) == 0
        captions.append(out.read_text().split("graph [label=", 1)[1].split("\\n", 1)[0])
    assert captions[0].endswith("2 GPU(s) per rank (host:GPU columns 2:1)")
    assert captions[1].endswith("2 GPU(s) per rank (host:GPU columns 0:1)")
