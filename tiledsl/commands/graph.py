"""``tiledsl graph``: the task graph of a program for a small size, as Graphviz DOT.

Tasks come from :func:`tiledsl.commands.explain.plan` (the program's own driver run with
a rank that takes part in every task), so nodes and owners are exactly the ones
``tiledsl explain`` shows. Edges are rebuilt in program order from every task's
accesses at tile granularity, as the runtime orders them:

* RAW: a task reading a tile depends on the tile's last writer;
* WAR: a task writing a tile depends on the tile's readers since that write on its
  own rank (a reader on another rank reads the copy it was sent: the write does not wait for it);
* WAW: a task that only writes (``out``) a tile depends on its last writer
  (an ``inout`` access is already ordered by its RAW edge).

Each edge is drawn by where its two tasks run: local (same rank and device),
intra-node (same rank, another device) or inter-node (another rank). Every
identifier and label of the DOT text goes through :func:`quote`, so names from
user programs cannot break its syntax.
"""
from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from collections import defaultdict
from pathlib import Path

from .explain import call_text, tiling_text, values_text
from .files import replacing
from .plot import DRAWN_BY

LIMIT = 5000  # tasks; a larger graph is unreadable and slow to lay out
#: tasks graph renders through graphviz (.svg, .png, .pdf): its layout took 7 s at 680 tasks, over 300 s at 4,960
RENDER_LIMIT = 1000
KINDS = ("RAW", "WAR", "WAW")
RENDERED = (".svg", ".png", ".pdf")
FILLS = ("#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
         "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f")
RANK_LINES = ("#1f4e79", "#7f2704", "#00441b", "#3f007d", "#67000d", "#252525", "#543005", "#004c4c")
LOCALITY = {  # locality -> (colour, pen width)
    "local": ("#333333", 1.0),
    "intra-node": ("#1f77b4", 1.5),
    "inter-node": ("#d62728", 2.0),
}


class GraphError(ValueError):
    """A graph that cannot be made or written (too large, no graphviz, dot failed)."""


def quote(text) -> str:
    """``text`` as a DOT double-quoted string: quotes and backslashes escaped, line ends as ``\\n``."""
    text = str(text).replace("\\", "\\\\").replace('"', '\\"')
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\\n")
    return '"' + "".join(c if c >= " " or c == "\t" else " " for c in text) + '"'


def _label(*lines) -> str:
    """A quoted label of several lines (each escaped, joined by DOT's ``\\n``)."""
    return quote("\n".join(str(line) for line in lines))


def _key(tile) -> tuple:
    return (tile.matrix.name, tile.i, tile.j)


# ---------------------------------------------------------------- the graph
def task_limit(output) -> tuple[int, str]:
    """The most tasks graph takes for ``output`` (None: DOT text on stdout), and the refusal that says it."""
    if output is not None and Path(str(output)).suffix.lower() in RENDERED:
        return RENDER_LIMIT, (f"graph renders at most {RENDER_LIMIT} through graphviz, whose layout takes minutes "
                              f"past that (write .dot for up to {LIMIT})")
    return LIMIT, f"graph draws at most {LIMIT}"


#: loop iterations a count of tasks walks whatever the matrices' tiles (a second or two)
WALKED_ITERATIONS = 10 ** 6


def count_tasks(driver, options, grid, gpus, limit: int = LIMIT) -> int:
    """The program's task count for ``options``, stopping (at ``limit + 1``) once over ``limit``."""
    from ..runtime.iterations import iteration_bound
    from ..runtime.layout import make_distribution, make_matrices, make_params
    from ..runtime.recording import record

    class Enough(Exception):
        pass

    seen = [0]

    def keep(call):
        seen[0] += 1
        if seen[0] > limit:
            raise Enough
        return False

    params = make_params(driver, options)
    matrices = make_matrices(driver, params, make_distribution(driver.PROGRAM, params, grid, gpus), 0)
    bound = iteration_bound(driver, matrices, params)
    # a walk of many iterations may find its calls late: taken as over the limit where the tiles are
    # as many too (a program of one call on a matrix of 160,000 tiles was "more than 5000 tasks")
    if (bound is None or bound.total > WALKED_ITERATIONS) and largest_tile_count(driver, params) > 20 * limit:
        return limit + 1
    try:
        record(driver, matrices, params, None, keep)
    except Enough:
        pass
    return seen[0]


def too_many_tasks(driver, options, limit: int, refusal: str):
    """The :class:`UsageError` for a program with more than ``limit`` tasks at ``options``'
    size: the numbers, what the command refuses, and what to change."""
    from ..runtime.layout import make_params
    from ..runtime.world import UsageError

    params = make_params(driver, options)
    tiles = tiling_text(params.as_dict(), driver.PROGRAM.tiling.kind)
    return UsageError(f"{driver.PROGRAM.name} at n={params.n} {tiles} has more than "
                      f"{limit} tasks (its largest matrix has {largest_tile_count(driver, params)} tiles): "
                      f"{refusal}; use a smaller --n or larger tiles")


def largest_tile_count(driver, params) -> int:
    """The tile count of the program's largest matrix (its geometry only: no tiles made)."""
    from ..runtime.geometry import Geometry
    from ..runtime.layout import matrix_shapes

    most = 0
    for m, n in matrix_shapes(driver, params)[0].values():
        try:
            geometry = (Geometry.hybrid(m, n, params.B, params.b, params.s)
                        if driver.PROGRAM.tiling.kind == "hybrid" else Geometry.uniform(m, n, params.nb))
        except ValueError:
            return 0  # make_matrices reports it
        most = max(most, geometry.mt * geometry.nt)
    return most


def edges(tasks) -> dict:
    """``(source, target) -> {kind: [tile names]}`` over the planned tasks, in program order."""
    found: dict = defaultdict(lambda: defaultdict(list))
    writer: dict = {}
    readers: dict = defaultdict(list)
    ranks = {task.index: task.owner[0] for task in tasks}
    for task in tasks:
        call, tiles, index = task.call, task.tiles, task.index
        for position in call.reads:
            key = _key(tiles[position])
            if key in writer and writer[key] != index:
                _add(found, writer[key], index, "RAW", tiles[position])
        for position in call.writes:
            key = _key(tiles[position])
            for reader in readers.get(key, ()):
                if reader != index and ranks[reader] == ranks[index]:  # (another rank's reads its copy)
                    _add(found, reader, index, "WAR", tiles[position])
            if call.modes[position] == "out" and key in writer and writer[key] != index:
                _add(found, writer[key], index, "WAW", tiles[position])
        for position in call.reads:
            if position not in call.writes:
                readers[_key(tiles[position])].append(index)
        for position in call.writes:
            key = _key(tiles[position])
            writer[key], readers[key] = index, []
    return found


def _add(found, source, target, kind, tile) -> None:
    names = found[source, target][kind]
    if str(tile) not in names:
        names.append(str(tile))


def locality(source_place, target_place) -> str:
    """local (same rank and device), intra-node (same rank) or inter-node."""
    if source_place == target_place:
        return "local"
    return "intra-node" if source_place[0] == target_place[0] else "inter-node"


def _device(device: int) -> str:
    return "host" if device == 0 else f"gpu{device}"


# ---------------------------------------------------------------- DOT text
def to_dot(plan, source_name: str) -> str:
    """The DOT text of the plan's task graph."""
    nranks = plan.grid[0] * plan.grid[1]
    fills = {}
    for task in plan.tasks:
        fills.setdefault(task.call.kernel, FILLS[len(fills) % len(FILLS)])
    lines = [f"digraph {quote(plan.program)} {{",
             f"  graph [label={_label(_caption(plan, source_name))}, labelloc=t, fontname=Helvetica, "
             f"rankdir=TB, newrank=true, comment={quote(DRAWN_BY)}];",  # graphviz keeps it in an SVG
             "  node [shape=box, style=\"rounded,filled\", fontname=Helvetica, fontsize=10];",
             "  edge [fontname=Helvetica, fontsize=8];"]
    places = defaultdict(list)
    for task in plan.tasks:
        places[task.owner].append(task)
    clustered = nranks > 1 or plan.gpus > 0
    for rank in sorted({place[0] for place in places}):
        indent = "  "
        if clustered:
            lines.append(f"  subgraph {quote(f'cluster_rank_{rank}')} {{")
            lines.append(f"    label={quote(f'rank {rank}')}; style=rounded; color={quote(_rank_line(rank))};")
            indent = "    "
        for place in sorted(p for p in places if p[0] == rank):
            if plan.gpus > 0:
                lines.append(f"{indent}subgraph {quote(f'cluster_rank_{rank}_{_device(place[1])}')} {{")
                lines.append(f"{indent}  label={quote(_device(place[1]))}; style=dashed; color=\"#999999\";")
            for task in places[place]:
                lines.append(indent + ("  " if plan.gpus > 0 else "") + _node(task, fills, nranks, plan.gpus))
            if plan.gpus > 0:
                lines.append(f"{indent}}}")
        if clustered:
            lines.append("  }")
    owners = {task.index: task.owner for task in plan.tasks}
    for (source, target), kinds in sorted(edges(plan.tasks).items()):
        lines.append("  " + _edge(source, target, kinds, locality(owners[source], owners[target])))
    lines.append("}")
    return "\n".join(lines) + "\n"


def _caption(plan, source_name: str) -> str:
    return (f"{plan.program} ({source_name}) n={plan.params['n']} {tiling_text(plan.params, plan.tiling)}"
            + "".join(f" {name}={plan.params[name]}" for name in plan.own_params)  # what it was drawn for
            + f", {plan.task_count} tasks, "
            f"{plan.grid[0]}x{plan.grid[1]} grid, {plan.gpus} GPU(s) per rank"
            + (f" (host:GPU columns {plan.gpu_ratio[0]}:{plan.gpu_ratio[1]})" if plan.gpu_ratio else "") + "\n"
            "edges: RAW solid, WAR dashed, WAW dotted; black local, blue intra-node, red inter-node")


def _rank_line(rank: int) -> str:
    return RANK_LINES[rank % len(RANK_LINES)]


def _node(task, fills: dict, nranks: int, gpus: int) -> str:
    call = task.call
    # sub-ranges after their tiles; the values on a line of their own (what tells apart a solve's sides)
    text = [call_text(task, with_values=False), *filter(None, [values_text(task)]), f"line {call.line}"]
    rank, device = task.owner
    if nranks > 1 or gpus > 0:
        text.append(f"rank {rank} {_device(device)}")
    return (f"{quote(f't{task.index}')} [label={_label(*text)}, fillcolor={quote(fills[call.kernel])}, "
            f"color={quote(_rank_line(rank))}, penwidth={2 if nranks > 1 else 1}, "
            f"tooltip={_label(f'task {task.index}: {call.text}')}];")


def _edge(source: int, target: int, kinds: dict, where: str) -> str:
    ordered = [k for k in KINDS if k in kinds]
    colour, width = LOCALITY[where]
    style = {"RAW": "solid", "WAR": "dashed", "WAW": "dotted"}[ordered[0]]
    label = ", ".join(f"{kind} {' '.join(kinds[kind])}" for kind in ordered)
    if where != "local":
        label += f" ({where})"
    return (f"{quote(f't{source}')} -> {quote(f't{target}')} [label={quote(label)}, style={style}, "
            f"color={quote(colour)}, fontcolor={quote(colour)}, penwidth={width}];")


# ---------------------------------------------------------------- writing
def write(text: str, output) -> None:
    """Write the DOT ``text`` to ``output``: as is for .dot/.gv, through graphviz for .svg/.png/.pdf."""
    path = Path(str(output))
    suffix = path.suffix.lower()
    if suffix in (".dot", ".gv"):
        with replacing(path) as temporary:
            temporary.write_text(text, encoding="utf-8")
        return
    if suffix not in RENDERED:
        raise GraphError(f"-o {output}: write the graph as .dot (or .gv), or render it as .svg, .png or .pdf")
    dot = shutil.which("dot")
    if dot is None:
        raise GraphError(f"cannot render {output}: graphviz is not installed (no 'dot' on PATH); "
                         f"install graphviz, or write the DOT text with -o {path.with_suffix('.dot').name}")
    with replacing(path) as temporary:
        try:
            done = subprocess.run([dot, f"-T{suffix[1:]}", "-o", str(temporary)], input=text, capture_output=True,
                                  text=True, timeout=300)
        except subprocess.TimeoutExpired:
            raise GraphError(f"graphviz took over 300 s to lay out {output}: try a smaller size") from None
        if done.returncode != 0:
            raise GraphError(f"graphviz failed on {output}: {done.stderr.strip() or f'exit {done.returncode}'}")
        if suffix == ".png":  # graphviz's PNG keeps no comment: the mark goes in a text chunk of its own
            _mark_png(temporary)


def _mark_png(path: Path) -> None:
    """Add a ``Software`` text chunk holding :data:`DRAWN_BY` after the PNG's header chunk."""
    data = path.read_bytes()
    header_end = 8 + 4 + 4 + 13 + 4  # the signature, then IHDR: length, type, 13 bytes, CRC
    chunk = b"tEXt" + b"Software\0" + DRAWN_BY.encode("latin-1")
    marked = (data[:header_end] + struct.pack(">I", len(chunk) - 4) + chunk
              + struct.pack(">I", zlib.crc32(chunk)) + data[header_end:])
    path.write_bytes(marked)
