"""`tiledsl plot`: Gantt charts of real traces, and clear errors for bad input."""
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from tiledsl.commands.cli import main  # noqa: E402
from tiledsl.commands.plot import lanes, load_trace, pack  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


def traced(path, *args):
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "programs/cholesky.tile", "--workers", "2",
                          "--trace", str(path), *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                         timeout=150)
    assert out.returncode == 0, out.stderr
    return path


# the tests of one trace share an xdist group: one worker runs them, and the trace's run once
ONE_RANK = pytest.mark.xdist_group("plot-one-rank-trace")


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    return traced(tmp_path_factory.mktemp("plot") / "one.json", "--n", 300, "--nb", 100)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    return traced(tmp_path_factory.mktemp("plot") / "two.json", "--np", 2, "--n", 600, "--nb", 100)


def assert_png(path):
    from matplotlib.image import imread

    assert path.read_bytes()[:8] == PNG
    image = imread(path)
    assert image.shape[0] > 150 and image.shape[1] > 600
    assert (image[..., :3] < 0.9).any(axis=2).mean() > 0.02  # bars, not a blank canvas


@pytest.mark.timeout(180)
@ONE_RANK
def test_a_png_from_a_one_rank_trace(one_rank, tmp_path, capsys):
    out = tmp_path / "gantt.png"
    assert main(["plot", str(one_rank), "-o", str(out)]) == 0, capsys.readouterr().err
    assert_png(out)
    found = lanes(load_trace(one_rank))
    # a lane per worker, one that ran none of the 10 small tasks too
    assert [lane.name for lane in found] == ["cpu-0", "cpu-1"]
    assert sum(len(lane.events) for lane in found) == 10  # the 10 tasks of 3x3 tiles


@pytest.mark.timeout(240)
def test_a_two_rank_trace_has_lanes_of_both_ranks(two_ranks, tmp_path, capsys):
    found = lanes(load_trace(two_ranks))
    assert {lane.rank for lane in found} == {0, 1}
    for rank in (0, 1):
        # a lane per worker (on a busy machine one worker of a rank may have run all its tasks)
        assert [lane.name for lane in found if lane.rank == rank] == ["cpu-0", "cpu-1", "mpi"]
    tasks = [e for lane in found if lane.name != "mpi" for e in lane.events]
    assert len(tasks) == 56  # 6 potrf, 15 trsm, 15 syrk, 20 gemm on 6x6 tiles, each run once on one rank
    transfers = [e for lane in found if lane.name == "mpi" for e in lane.events]
    assert transfers and all(e[3] == "transfer" for e in transfers)
    # the run's time, to its last rank's end, is recorded: the plot's, not its last event's end
    assert load_trace(two_ranks)["otherData"]["seconds"] >= max(e[0] + e[1] for lane in found for e in lane.events)
    out = tmp_path / "gantt.png"
    assert main(["plot", str(two_ranks), "-o", str(out), "--width", "14"]) == 0, capsys.readouterr().err
    assert_png(out)
    assert main(["plot", str(two_ranks), "-o", str(tmp_path / "gantt.svg")]) == 0
    assert "<svg" in (tmp_path / "gantt.svg").read_text()[:2000]
    assert main(["plot", str(two_ranks), "-o", str(tmp_path / "gantt.pdf")]) == 0
    assert (tmp_path / "gantt.pdf").read_bytes()[:5] == b"%PDF-"
    capsys.readouterr()
    # the narrowest, its title wrapped, without matplotlib's warning of a layout that collapsed (tester y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["plot", str(two_ranks), "-o", str(out), "--width", "4"]) == 0, capsys.readouterr().err
    assert main(["plot", str(two_ranks), "-o", str(out), "--width", "3"]) == 2
    assert "--width must be between 4 and 200 inches, got 3.0" in capsys.readouterr().err


@pytest.mark.timeout(180)
def test_a_run_in_which_no_task_ran_plots_its_empty_lanes(tmp_path, capsys):
    """A loop that never runs: the run's trace has its workers' lanes and no task; plot refused it."""
    (tmp_path / "none.tile").write_text("program none {\n  matrix A[n, n] = random spd\n"
                                        "  for k in 0 .. 0 { potrf(A[k, k]) }\n}\n")
    trace = tmp_path / "none.json"
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "run", "none.tile", "--n", "64", "--workers",
                          "2", "--trace", str(trace)], cwd=tmp_path, capture_output=True, text=True, timeout=150)
    assert out.returncode == 0 and "efficiency -, load imbalance - (no task ran)" in out.stdout, out.stderr
    assert main(["plot", str(trace), "-o", str(tmp_path / "g.png")]) == 0, capsys.readouterr().err
    assert [lane.name for lane in lanes(load_trace(trace))] == ["cpu-0", "cpu-1"]


@pytest.mark.timeout(60)
def test_the_lanes_of_messages_in_flight_together_are_drawn_as_one():
    document = {"traceEvents": [
        {"ph": "M", "pid": 0, "tid": 0, "name": "thread_name", "args": {"name": "cpu-0"}},
        {"ph": "M", "pid": 0, "tid": 1, "name": "thread_name", "args": {"name": "mpi"}},
        {"ph": "M", "pid": 0, "tid": 2, "name": "thread_name", "args": {"name": "mpi 2"}},
        {"ph": "X", "pid": 0, "tid": 1, "name": "receive", "cat": "transfer", "ts": 0, "dur": 3},
        {"ph": "X", "pid": 0, "tid": 2, "name": "receive", "cat": "transfer", "ts": 1, "dur": 3}]}
    drawn = lanes(document)
    assert [lane.name for lane in drawn] == ["cpu-0", "mpi"] and len(drawn[1].events) == 2


@pytest.mark.timeout(60)
def test_overlapping_transfers_get_rows_of_their_own():
    events = [(0.0, 2.0), (1.0, 2.0), (2.5, 1.0), (3.0, 1.0), (5.0, 1.0)]
    assert pack(events) == [0, 1, 0, 1, 0]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    ("{not json", "trace.json: not JSON (Expecting property name enclosed in double quotes, line 1, column 2)\n"),
    # a trace copied in part (a copy stopped): at a value, inside a string, before the last brace
    ('{"traceEvents": [{"ph": "X", "pid": 0, ', "trace.json: cut short: its JSON ends after 39 bytes, unfinished"),
    ('{"traceEvents": [{"ph": "X", "pid": 0, "na', "trace.json: cut short: its JSON ends after 42 bytes"),
    ('{"traceEvents": []\n', "trace.json: cut short: its JSON ends after 19 bytes"),
    ('{"traceEvents": ' + "[" * 5000 + "]" * 5000 + "}", "not a trace: nested too deep"),  # an internal error
    ('{"traceEvents": [{"ph": "X", "pid": 0, "tid": 0, "ts": ' + "1" * 5000 + ', "dur": 1}]}',
     "not a trace: an integer of 5000 digits"),  # Python's advice to call sys.set_int_max_str_digits()
    (b"\x93NUMPY\x01\x00", "not a trace: a trace is a JSON file"),  # a matrix given for a trace (it said 'utf-8' codec)
    (json.dumps({"a": 1}), "not a trace"),
    (json.dumps([1, 2, 3]), "not a trace"),
    (json.dumps({"traceEvents": [{"ph": "M", "pid": 0, "name": "process_name"}]}), "no lanes and no task"),
    (json.dumps({"traceEvents": [{"ph": "X", "pid": 0, "tid": 0, "ts": "soon", "dur": 1}]}), "not a number"),
    ('{"traceEvents": [{"ph": "X", "pid": 0, "tid": 0, "ts": NaN, "dur": 1}]}', "time nan is not a finite number"),
    (json.dumps({"traceEvents": [{"ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": -5}]}), "duration -5 is below 0"),
    # (tester n64) not drawn, where the title and the legend counted it
    (json.dumps({"traceEvents": [{"ph": "X", "pid": 0, "tid": 0, "ts": 3, "name": "potrf"}]}),
     "not a trace: the event 'potrf' at time 3 has no duration ('dur'), which every slice of a trace has"),
])
def test_a_bad_trace_is_one_clear_line(tmp_path, capsys, content, message):
    trace = tmp_path / "trace.json"
    if isinstance(content, bytes):
        trace.write_bytes(content)
    elif content is not None:
        trace.write_text(content)
    assert main(["plot", str(trace), "-o", str(tmp_path / "g.png")]) == 2  # a usage error, as a bad --input
    err = capsys.readouterr().err
    assert err.startswith("tiledsl: error: ") and message in err and "Traceback" not in err
    assert not (tmp_path / "g.png").exists()


@pytest.mark.timeout(60)
@ONE_RANK
def test_an_unknown_output_format_is_a_usage_error(one_rank, tmp_path, capsys):
    assert main(["plot", str(one_rank), "-o", str(tmp_path / "g.jpeg")]) == 2
    assert ".png, .svg or .pdf" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_without_matplotlib_the_message_says_what_to_install(tmp_path, capsys, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)  # import matplotlib... now raises ImportError
    assert main(["plot", str(tmp_path / "trace.json"), "-o", str(tmp_path / "g.png")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("tiledsl: error: plot needs matplotlib: pip install -e '.[plot]' in tiledsl's checkout "
                           "(or pip install matplotlib)")


@pytest.mark.timeout(60)
def test_the_command_line_exits_cleanly_on_a_missing_file(tmp_path):
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "plot", str(tmp_path / "nope.json"),
                          "-o", str(tmp_path / "g.png")], cwd=ROOT, capture_output=True, text=True, timeout=50)
    assert out.returncode == 2 and "no such file" in out.stderr and "Traceback" not in out.stderr


def busy_trace(ranks: int, tasks: int, transfers: int) -> dict:
    """A trace of ``ranks`` ranks, each with a CPU lane of ``tasks`` tasks and an MPI lane of
    ``transfers`` messages, two in flight at a time (a simulated cluster's, in the small)."""
    events = []
    for rank in range(ranks):
        events += [{"ph": "M", "pid": rank, "tid": 0, "name": "thread_name", "args": {"name": "cpu-0"}},
                   {"ph": "M", "pid": rank, "tid": 1, "name": "thread_name", "args": {"name": "mpi"}}]
        events += [{"ph": "X", "pid": rank, "tid": 0, "name": "gemm", "cat": "task", "ts": 10 * i, "dur": 9}
                   for i in range(tasks)]
        events += [{"ph": "X", "pid": rank, "tid": 1, "name": ("send", "receive")[i % 2], "cat": "transfer",
                    "ts": 5 * i, "dur": 9} for i in range(transfers)]
    return {"traceEvents": events}


@pytest.mark.timeout(120)
def test_many_transfers_are_drawn_as_few_collections(tmp_path, capsys, monkeypatch):
    """A 16-node simulation's trace (31,692 events) did not draw in 5 minutes: an artist per transfer.
    The figure checked is the one the command drew (drawing it once more took a second)."""
    from tiledsl.commands import plot

    draw, drawn = plot.draw, []
    monkeypatch.setattr(plot, "draw", lambda *args: drawn.append(draw(*args)) or drawn[-1])
    trace = tmp_path / "busy.json"
    trace.write_text(json.dumps(busy_trace(16, 700, 1300)))  # 32,000 events
    assert main(["plot", str(trace), "-o", str(tmp_path / "g.png")]) == 0
    assert capsys.readouterr().err == ""
    assert_png(tmp_path / "g.png")
    (figure, _, ranks), = drawn
    collections = figure.axes[0].collections
    assert ranks == 16 and len(collections) == 16 * 3  # per rank: gemm's bars, and two rows of sends and receives
    assert {c.get_hatch() for c in collections} == {None}  # 1,300 bars on a lane: colour alone
    figure, *_ = draw(busy_trace(1, 10, 20), "small.json")
    assert {c.get_hatch() for c in figure.axes[0].collections} == {None, "////", "\\\\\\\\"}  # few: hatched


@pytest.mark.timeout(60)
def test_the_busiest_16_ranks_of_a_larger_trace_are_drawn_and_named(tmp_path, capsys):
    """Of a simulated cluster's 1024 ranks, plot drew ranks 0-15 (most of them idle, the busy ones left out)
    and its title gave their end, not the run's."""
    from tiledsl.commands.plot import draw

    document = busy_trace(20, 0, 2)  # idle ranks whose transfers end at 14 µs
    document["traceEvents"] += [{"ph": "X", "pid": rank, "tid": 0, "name": "gemm", "cat": "task", "ts": 0, "dur": dur}
                                for rank, dur in ((3, 5), (17, 9), (18, 7))]
    document["traceEvents"].append({"ph": "X", "pid": 19, "tid": 1, "name": "send", "cat": "transfer", "ts": 20,
                                    "dur": 30})  # the run's end, on a rank not drawn
    figure, drawn, ranks = draw(document, "wide.json")
    assert (ranks, drawn) == (20, [*range(14), 17, 18]) and len(figure.axes[0].get_yticks()) == 16 * 2
    assert figure.axes[0].get_title() == "wide.json: 3 tasks on 20 rank(s), 5e-05 s (drawn: the 16 busiest, 3 tasks)"
    trace = tmp_path / "wide.json"
    trace.write_text(json.dumps(document))
    assert main(["plot", str(trace), "-o", str(tmp_path / "g.png")]) == 0
    assert capsys.readouterr().err.strip() == (f"tiledsl: warning: {trace} has 20 ranks: plot draws the 16 busiest "
                                               "(ranks 0-13, 17-18)")
    figure, drawn, _ = draw(busy_trace(16, 3, 2), "16.json")
    assert drawn == list(range(16)) and figure.axes[0].get_title() == "16.json: 48 tasks on 16 rank(s), 2.9e-05 s"


@pytest.mark.timeout(60)
def test_the_title_and_the_busy_fractions_are_of_the_run_s_recorded_time():
    """A run's last rank is done a little after its last task ends: plot said the last event's end
    (0.343 s for a run of 0.352 s) and lanes busier than the run's own busy fractions."""
    from tiledsl.commands.plot import draw

    document = {"otherData": {"made_by": "tiledsl", "program": "p", "seconds": 0.004},
                "traceEvents": [{"ph": "M", "pid": 0, "tid": 0, "name": "thread_name", "args": {"name": "cpu-0"}},
                                {"ph": "X", "pid": 0, "tid": 0, "name": "gemm", "cat": "task", "ts": 0, "dur": 3000}]}
    figure, *_ = draw(document, "t.json")
    assert figure.axes[0].get_title() == "p (t.json): 1 task on 1 rank(s), 0.004 s"
    assert [label.get_text() for label in figure.axes[0].get_yticklabels()] == ["cpu-0  75%"]
    document["otherData"]["seconds"] = "soon"  # a hand-made trace's: the last event's end
    assert draw(document, "t.json")[0].axes[0].get_title() == "p (t.json): 1 task on 1 rank(s), 0.003 s"


@pytest.mark.timeout(60)
def test_the_legend_counts_the_tasks_of_every_rank_as_the_title_does():
    """Of a simulated 20-rank Cholesky, the legend counted the 16 drawn ranks' tasks only (potrf (12) where
    the program has 15, 589 in all under a title of 680), with nothing saying so."""
    from tiledsl.commands.plot import draw

    document = busy_trace(20, 0, 0)
    document["traceEvents"] += [{"ph": "X", "pid": rank, "tid": 0, "name": name, "cat": "task", "ts": 0, "dur": 9}
                                for rank in range(20) for name in ("gemm",) * (rank + 1) + ("potrf",) * (rank < 2)]
    figure, drawn, _ = draw(document, "wide.json")
    assert drawn == list(range(4, 20))  # the busiest: ranks 0 and 1, the potrfs' ranks, are not drawn
    legend = figure.axes[0].get_legend()
    assert legend.get_title().get_text() == "kernels (tasks of all 20 ranks)"
    assert [text.get_text() for text in legend.get_texts()] == ["gemm (210)", "potrf (2)"]
    assert figure.axes[0].get_title() == ("wide.json: 212 tasks on 20 rank(s), 9e-06 s "
                                          "(drawn: the 16 busiest, 200 tasks)")
    figure, *_ = draw(busy_trace(2, 3, 0), "two.json")
    assert figure.axes[0].get_legend().get_title().get_text() == "kernels (tasks)"


@pytest.mark.timeout(60)
def test_a_kernel_has_the_colour_of_its_place_in_the_program_whatever_starts_first():
    """Colours went by each kernel's first start: gemm green in a real Cholesky's chart, red in the
    simulated one's, where syrk started first. The trace lists the program's kernels; others follow."""
    from tiledsl.commands.plot import draw

    def legend(starts, order):
        document = {"otherData": {"made_by": "tiledsl", "kernels": order},
                    "traceEvents": [{"ph": "M", "pid": 0, "tid": 0, "name": "thread_name", "args": {"name": "cpu-0"}}]
                    + [{"ph": "X", "pid": 0, "tid": 0, "name": name, "cat": "task", "ts": ts, "dur": 1}
                       for ts, name in enumerate(starts)]}
        axes = draw(document, "t.json")[0].axes[0]
        return [(text.get_text().split()[0], patch.get_facecolor())
                for text, patch in zip(axes.get_legend().get_texts(), axes.get_legend().get_patches())]

    order = ["potrf", "trsm", "syrk", "gemm"]
    real, simulated = legend(["potrf", "trsm", "gemm", "syrk"], order), legend(["potrf", "trsm", "syrk", "gemm"], order)
    assert real == simulated and [name for name, _ in real] == order
    assert [name for name, _ in legend(["mine", "gemm", "potrf"], ["potrf", "gemm"])] == ["potrf", "gemm", "mine"]
    assert [name for name, _ in legend(["gemm", "potrf"], "not a list")] == ["gemm", "potrf"]  # a hand-made trace


@pytest.mark.timeout(120)
@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf"])
@ONE_RANK
def test_a_chart_replaces_only_a_drawing_never_a_file_of_another_kind(one_rank, tmp_path, capsys, suffix):
    """-o checked only the suffix: notes saved as .svg were replaced by the chart."""
    mine = tmp_path / f"notes{suffix}"
    mine.write_text("my notes\n")
    assert main(["plot", str(one_rank), "-o", str(mine)]) == 2
    assert capsys.readouterr().err == (f"tiledsl: error: -o {mine}: {mine} is there and is not a drawing tiledsl made "
                                       f"(a graph, a chart): it replaces only those; name another file, or remove "
                                       f"it first\n")
    assert mine.read_text() == "my notes\n"
    chart = tmp_path / f"chart{suffix}"
    assert main(["plot", str(one_rank), "-o", str(chart)]) == 0 and main(["plot", str(one_rank), "-o", str(chart)]) == 0
    other = tmp_path / f"other{suffix}"  # a drawing of the same format another program made: a photo
    other.write_bytes(chart.read_bytes().replace(b"drawn by tiledsl", b"my holiday photo"))
    assert main(["plot", str(one_rank), "-o", str(other)]) == 2 and "is not a drawing" in capsys.readouterr().err
