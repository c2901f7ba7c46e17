"""``tiledsl plot``: a Gantt chart of a run's trace, one lane per worker of every rank.

Reads the Chrome trace-event file that ``tiledsl run --trace`` writes
(:func:`tiledsl.runtime.trace.chrome_trace`: ``pid`` = rank, ``tid`` = lane,
named by ``thread_name`` metadata such as ``cpu-0``, ``gpu-1``, ``mpi``,
``copy``; complete ``"X"`` events of category ``task`` or ``transfer``) and
draws it like the execution traces of the StarPU and PaRSEC papers: lanes
grouped by rank, one colour per kernel, idle time as white gaps, transfers as
hatched bars on their lanes (overlapping transfers stacked in thin rows).

Its cost grows with the events drawn: the bars of a lane are one collection per
kernel or per transfer row and kind, and a lane of more than :data:`FEW_BARS` bars
draws them without edges or hatching (each bar a pixel or two wide there). At most
:data:`MOST_RANKS` ranks are drawn, the longest at tasks (a simulated cluster's trace
has hundreds, most of them idle): a warning names them; the title gives the tasks and time
of all the ranks and the drawn ranks' tasks, the legend each kernel's tasks on all the ranks.

Drawing uses matplotlib's object API (a :class:`~matplotlib.figure.Figure`
saved through the Agg, SVG or PDF canvas): it never opens a window and never
changes the process-wide pyplot backend. matplotlib is an optional dependency
(``pip install -e '.[plot]'`` in tiledsl's checkout).
"""
from __future__ import annotations

import json
import math
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .. import userjson
from .files import replacing

FORMATS = (".png", ".svg", ".pdf")
#: the mark of a drawing tiledsl made, in its metadata: -o replaces only a file that holds it
DRAWN_BY = "drawn by tiledsl"
#: the metadata field each format keeps it in (matplotlib's names)
MARK_FIELDS = {".png": "Software", ".svg": "Creator", ".pdf": "Creator"}
TRANSFER_STYLES = {  # event name -> (face colour, hatch)
    "send": ("#fbe3c8", "////"),
    "receive": ("#d5e8f7", "\\\\\\\\"),
    "copy": ("#e4e4e4", "xxxx"),
}
OTHER_TRANSFER = ("#eeeeee", "....")
MOST_RANKS = 16  # ranks drawn: a lane is a few pixels high, a figure of more is too tall to draw or read
FEW_BARS = 200  # a lane of more bars draws them without edges or hatching (at a pixel or two each, unseen)


class TraceError(ValueError):
    """The file is missing, unreadable, or not a tiledsl/Chrome trace."""


class MissingMatplotlib(ImportError):
    """matplotlib is not installed."""


@dataclass
class Lane:
    """One (rank, lane) row of the chart and the events drawn on it."""

    rank: int
    tid: int
    name: str
    events: list = field(default_factory=list)  # (start s, duration s, name, category, args)

    @property
    def transfers(self) -> bool:
        return self.name.startswith(("mpi", "copy")) or any(e[3] == "transfer" for e in self.events)


# ---------------------------------------------------------------- reading
def load_trace(path) -> dict:
    """The trace document at ``path``; a :class:`TraceError` naming what is wrong."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not a trace: a trace is a JSON file, as tiledsl run --trace writes it") from None
    except OSError as error:
        raise TraceError(f"{path}: cannot read it ({error.strerror or error})") from None
    try:
        document = userjson.loads(text)
    except json.JSONDecodeError as error:
        if userjson.cut_short(text, error):
            raise TraceError(f"{path}: cut short: its JSON ends after {len(text.encode())} bytes, unfinished (a "
                             f"trace is written whole as its run ends: run it again with --trace)") from None
        raise TraceError(f"{path}: not JSON ({error.msg}, line {error.lineno}, column {error.colno})") from None
    except ValueError as error:
        raise TraceError(f"{path}: not a trace: {error}") from None
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise TraceError(f"{path}: not a trace (expected a 'traceEvents' list, as tiledsl run --trace writes)")
    if not any(e.get("ph") == "X" or (e.get("ph") == "M" and e.get("name") == "thread_name") for e in events):
        raise TraceError(f"{path}: the trace has no lanes and no task or transfer events")
    return document if isinstance(document, dict) else {"traceEvents": events}


def lanes(document: dict) -> list[Lane]:
    """Every (rank, lane) with its events, ordered by rank then lane number: a lane the trace names
    and no task ran on too (a worker of a rank that had nothing to do)."""
    names, found = {}, {}
    for event in document["traceEvents"]:
        pid, tid = _int(event.get("pid", 0)), _int(event.get("tid", 0))
        if event.get("ph") == "M" and event.get("name") == "thread_name":
            names[pid, tid] = str((event.get("args") or {}).get("name", f"lane {tid}"))
            found.setdefault((pid, tid), Lane(pid, tid, ""))
        elif event.get("ph") == "X" and event.get("cat") != "idle":  # idle shows as the gaps
            if "dur" not in event:  # (not drawn, where the title and the legend counted it)
                raise TraceError(f"not a trace: the event {str(event.get('name', '?'))[:40]!r} at time "
                                 f"{event.get('ts')!r} has no duration ('dur'), which every slice of a trace has")
            start, duration = _seconds(event.get("ts")), _seconds(event.get("dur"))
            if duration < -1e-6:  # a hand-made trace's; a rounding's (-1e-12) is 0
                raise TraceError(f"not a trace: duration {event.get('dur')!r} is below 0")
            lane = found.setdefault((pid, tid), Lane(pid, tid, ""))
            lane.events.append((start, max(duration, 0.0), str(event.get("name", "?")),
                                event.get("cat", "task"), event.get("args") or {}))
    for (pid, tid), lane in found.items():
        lane.name = names.get((pid, tid), f"lane {tid}")
    merged = {}  # the trace's lanes mpi, mpi 2, ... (messages in flight together) drawn as one row, packed
    for key in sorted(found):
        lane = found[key]
        row = (lane.rank, lane.name.partition(" ")[0] if lane.name.startswith(("mpi", "copy")) else lane.tid)
        if row in merged:
            merged[row].events += lane.events
        else:
            merged[row] = lane
    for lane in merged.values():
        lane.events.sort(key=lambda e: e[0])
    return sorted(merged.values(), key=lambda lane: (lane.rank, lane.tid))


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise TraceError(f"not a trace: pid/tid {value!r} is not a number") from None


def _seconds(value) -> float:
    """A trace's time (µs) in seconds; a TraceError for one that is no finite number (NaN drew a
    chart titled 'nan s')."""
    try:
        seconds = float(value) / 1e6
    except (TypeError, ValueError):
        raise TraceError(f"not a trace: time {value!r} is not a number") from None
    if not math.isfinite(seconds):
        raise TraceError(f"not a trace: time {value!r} is not a finite number")
    return seconds


def pack(events: list) -> list[int]:
    """A row for each event so that events in one row do not overlap (greedy, by start)."""
    ends: list[float] = []
    rows = []
    for start, duration, *_ in events:
        row = next((r for r, end in enumerate(ends) if end <= start), len(ends))
        if row == len(ends):
            ends.append(0.0)
        ends[row] = start + duration
        rows.append(row)
    return rows


def kernels(all_lanes: list[Lane], order: list = ()) -> list[str]:
    """Kernel names in the program's ``order`` (its calls', as its trace lists them: one kernel has one
    colour in every chart of the program, a run's or a simulation's), the others after them in order
    of their first start."""
    first = {}
    for lane in all_lanes:
        for start, _, name, category, _ in lane.events:
            if category != "transfer":
                first[name] = min(start, first.get(name, start))
    ranked = {name: index for index, name in enumerate(order) if isinstance(name, str)}
    return sorted(first, key=lambda name: (ranked.get(name, len(ranked)), first[name], name))


def drawn_ranks(all_lanes: list[Lane]) -> list[int]:
    """The ranks drawn: all of a trace of at most :data:`MOST_RANKS`, else the :data:`MOST_RANKS`
    longest at tasks (the lower rank first among equals), in rank order."""
    busy: dict = {}
    for lane in all_lanes:
        busy[lane.rank] = busy.get(lane.rank, 0.0) + sum(e[1] for e in lane.events if e[3] != "transfer")
    return sorted(sorted(busy, key=lambda rank: (-busy[rank], rank))[:MOST_RANKS])


def rank_list(ranks: list[int]) -> str:
    """``0-3, 32, 64-65``: sorted ranks, each run of consecutive ones as its ends."""
    runs: list[list[int]] = []  # [first, last] of each run
    for rank in ranks:
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return ", ".join(str(first) if first == last else f"{first}-{last}" for first, last in runs)


def end_time(document: dict, all_lanes: list[Lane]) -> float:
    """The run's time in seconds: the ``seconds`` its trace records (its last rank is done a little
    after its last task ends), else when the last event of ``all_lanes`` ends."""
    last = max((e[0] + e[1] for lane in all_lanes for e in lane.events), default=0.0)
    recorded = _about(document).get("seconds")
    if isinstance(recorded, (int, float)) and not isinstance(recorded, bool) and math.isfinite(recorded):
        return max(float(recorded), last)
    return last


def _about(document: dict) -> dict:
    """What the trace says of its run (the program, its sizes, its time), {} if nothing."""
    info = document.get("otherData") or document.get("metadata") or {}
    return info if isinstance(info, dict) else {}


def title(document: dict, path, all_lanes: list[Lane], drawn: list[int]) -> str:
    """The chart's title: the program's description when the trace has one, and the totals of
    every rank (``drawn``: the ranks drawn, said with their tasks when some are not)."""
    info = _about(document)
    head = Path(str(path)).name
    if info.get("program"):
        sizes = " ".join(f"{k}={info[k]}" for k in ("n", "nb", "B", "b", "s") if info.get(k) is not None)
        head = f"{info['program']} {sizes}".strip() + f" ({head})"
    tasks = _tasks(all_lanes)
    ranks = len({lane.rank for lane in all_lanes})
    kept = set(drawn)
    shown = (f" (drawn: the {len(drawn)} busiest, {_tasks([lane for lane in all_lanes if lane.rank in kept])} tasks)"
             if ranks > len(drawn) else "")
    failed = ", a run that failed" if info.get("ok") is False else ""  # (its trace is written all the same)
    return (f"{head}: {tasks} task{'s' * (tasks != 1)} on {ranks} rank(s), {end_time(document, all_lanes):.4g} s"
            f"{shown}{failed}")


def _tasks(some_lanes: list[Lane]) -> int:
    return sum(e[3] != "transfer" for lane in some_lanes for e in lane.events)


# ---------------------------------------------------------------- drawing
def _figure_class():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingMatplotlib("plot needs matplotlib: pip install -e '.[plot]' in tiledsl's checkout "
                               "(or pip install matplotlib)") from None
    return Figure


def _colours(names: list[str]) -> dict:
    from matplotlib import colormaps

    palette = colormaps["tab10" if len(names) <= 10 else "tab20"].colors
    return {name: palette[index % len(palette)] for index, name in enumerate(names)}


def _rows(all_lanes: list[Lane]) -> list[tuple]:
    """(lane, y of its top, height, sub-rows of its events) top to bottom; a gap between ranks."""
    rows, y, previous = [], 0.0, None
    for lane in all_lanes:
        if previous is not None and lane.rank != previous:
            y += 0.6
        sub = pack(lane.events) if lane.transfers else [0] * len(lane.events)
        height = 1.0 if not lane.transfers else min(1.0 + 0.25 * max(sub, default=0), 2.5)
        rows.append((lane, y, height, sub))
        y += height
        previous = lane.rank
    return rows


def _draw_lane(axes, lane: Lane, top: float, height: float, sub: list, colours: dict) -> None:
    if not lane.transfers:
        for kernel in {e[2] for e in lane.events}:
            spans = [(e[0], e[1]) for e in lane.events if e[2] == kernel]
            axes.broken_barh(spans, (top + 0.1, 0.8), facecolors=colours.get(kernel, "#999999"),
                             edgecolors="white", linewidths=0.4 if len(lane.events) <= FEW_BARS else 0.0)
        return
    count = max(sub, default=0) + 1
    step = (height - 0.2) / count
    bars: dict = {}  # one collection per sub-row and style: an artist per transfer took ~2 ms each to draw
    for (start, duration, name, *_), row in zip(lane.events, sub):
        bars.setdefault((row, TRANSFER_STYLES.get(name, OTHER_TRANSFER)), []).append((start, duration))
    few = len(lane.events) <= FEW_BARS  # hatching and edges cost Agg ~1 ms a bar: many bars show by colour alone
    for (row, (face, hatch)), spans in bars.items():
        axes.broken_barh(spans, (top + 0.1 + row * step, step * 0.85), facecolors=face,
                         edgecolors="#555555", linewidths=0.4 if few else 0.0, hatch=hatch if few else None)


def _lane_label(lane: Lane, span: float) -> str:
    if lane.transfers or span <= 0:
        return lane.name
    busy = sum(e[1] for e in lane.events) / span
    return f"{lane.name}  {100 * busy:.0f}%"


def _legend(axes, names: list[str], colours: dict, every_lane: list[Lane], drawn: list[Lane]) -> None:
    """Each kernel of ``names`` with its tasks on every rank, as the title's total counts them (with
    some ranks not drawn, the drawn ranks' counts summed to less with nothing saying so), then
    the kinds of transfers drawn."""
    from matplotlib.patches import Patch

    counts = Counter(e[2] for lane in every_lane for e in lane.events if e[3] != "transfer")
    handles = [Patch(facecolor=colours[n], edgecolor="white", label=f"{n} ({counts[n]})") for n in names]
    moved = sorted({e[2] for lane in drawn if lane.transfers for e in lane.events})
    for name in moved:
        face, hatch = TRANSFER_STYLES.get(name, OTHER_TRANSFER)
        handles.append(Patch(facecolor=face, edgecolor="#555555", hatch=hatch, label=name))
    ranks = len({lane.rank for lane in every_lane})
    every = f" of all {ranks} ranks" if ranks > len({lane.rank for lane in drawn}) else ""
    axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
                title=f"kernels (tasks{every})" + (" / transfers" if moved else ""), fontsize=9, title_fontsize=9)


#: the narrowest chart, in inches, whose lanes, labels and legend fit (at 2, matplotlib's layout collapsed)
MIN_WIDTH = 4
#: characters of the 10-point title a line holds per inch of the figure, its axes' labels left of it
TITLE_CHARACTERS_PER_INCH = 11


def draw(document: dict, source, width: float | None = None) -> tuple:
    """A matplotlib Figure with the Gantt chart of ``document`` (read from ``source``), the ranks
    it draws (:func:`drawn_ranks`) and how many the trace has."""
    Figure = _figure_class()
    every_lane = lanes(document)
    drawn = drawn_ranks(every_lane)
    kept = set(drawn)
    all_lanes = [lane for lane in every_lane if lane.rank in kept]
    rows = _rows(all_lanes)
    total = rows[-1][1] + rows[-1][2]
    span = end_time(document, every_lane)  # the run's, though the rank that ends it be not drawn
    figure = Figure(figsize=(width or 12.0, 1.6 + 0.32 * total), layout="constrained")
    axes = figure.add_subplot()
    order = _about(document).get("kernels")
    names = kernels(every_lane, order if isinstance(order, list) else ())  # the legend's: every rank's, drawn or not
    colours = _colours(names)
    for lane, top, height, sub in rows:
        _draw_lane(axes, lane, top, height, sub, colours)
    axes.set_yticks([top + height / 2 for _, top, height, _ in rows],
                    [_lane_label(lane, span) for lane, *_ in rows], fontsize=8)
    _rank_labels(axes, rows, max(len(_lane_label(lane, span)) for lane, *_ in rows))
    axes.set_ylim(total + 0.1, -0.1)
    axes.set_xlim(0.0, span * 1.01 if span > 0 else 1.0)
    axes.set_xlabel("time (s)")
    axes.grid(axis="x", color="#dddddd", linewidth=0.5)
    axes.set_axisbelow(True)
    axes.tick_params(axis="y", length=0)
    # wrapped to the figure: a 4-inch chart cut its title at both ends
    axes.set_title(textwrap.fill(title(document, source, every_lane, drawn), int(TITLE_CHARACTERS_PER_INCH *
                                                                                 (width or 12.0))), fontsize=10)
    _legend(axes, names, colours, every_lane, all_lanes)
    return figure, drawn, len({lane.rank for lane in every_lane})


def _rank_labels(axes, rows: list, widest: int) -> None:
    """Each rank's name left of its lanes (``widest``: the longest lane label), a line between ranks."""
    ranks: dict = {}
    for lane, top, height, _ in rows:
        low, high = ranks.get(lane.rank, (top, top + height))
        ranks[lane.rank] = (min(low, top), max(high, top + height))
    if len(ranks) < 2:
        return
    transform = axes.get_yaxis_transform()  # x in axes fraction, y in data
    for rank, (low, high) in ranks.items():
        axes.annotate(f"rank {rank}", xy=(0, (low + high) / 2), xycoords=transform, xytext=(-5.2 * widest - 16, 0),
                      textcoords="offset points", rotation=90, va="center", ha="center",
                      fontsize=9, fontweight="bold", annotation_clip=False)
        if low > 0:
            axes.axhline(low - 0.3, color="#888888", linewidth=0.8)


def plot(trace_path, output, width: float | None = None) -> str | None:
    """Draw the trace at ``trace_path`` into ``output`` (.png, .svg or .pdf); a warning to give
    when its ranks were too many to draw them all."""
    suffix = Path(str(output)).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"-o {output}: the chart is written as .png, .svg or .pdf")
    if width is not None and not MIN_WIDTH <= width <= 200:
        raise ValueError(f"--width must be between {MIN_WIDTH} and 200 inches, got {width}")
    _figure_class()  # the missing-matplotlib message before reading anything
    document = load_trace(trace_path)
    try:
        figure, drawn, traced = draw(document, trace_path, width)
    except TraceError as error:
        raise TraceError(f"{trace_path}: {error}") from None
    with replacing(output) as temporary:
        figure.savefig(temporary, dpi=150, metadata={MARK_FIELDS[suffix]: DRAWN_BY})
    if traced > len(drawn):
        return f"{trace_path} has {traced} ranks: plot draws the {len(drawn)} busiest (ranks {rank_list(drawn)})"
    return None
