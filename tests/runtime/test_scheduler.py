"""The scheduling state machine, driven by events with no threads."""
from types import SimpleNamespace

from tiledsl.runtime.notes import arguments_text
from tiledsl.runtime.program import Call
from tiledsl.runtime.scheduler import Scheduler, Task, TileState

READ = Call("read", ("in", "inout"), main=1, line=1, text="read(X, Y)")
WRITE = Call("write", ("inout",), main=0, line=2, text="write(X)")


class Tile(TileState):
    __slots__ = ("name",)

    def __init__(self, name):
        super().__init__()
        self.name = name

    def __str__(self):
        return self.name


class Cell(Tile):
    """A tile of a matrix, as a panel's tiles are named together (``A[0:3, 0]``)."""

    __slots__ = ("matrix", "i", "j")

    def __init__(self, matrix, i: int, j: int):
        super().__init__(f"{matrix.name}[{i}, {j}]")
        self.matrix, self.i, self.j = matrix, i, j


def task(call, *tiles, priority=0):
    return Task(call, tiles, None, priority)


def drain(scheduler):
    order = []
    while (t := scheduler.pop()) is not None:
        order.append(t)
        scheduler.finish(t)
    return order


def test_independent_tasks_are_ready_at_once():
    s = Scheduler(window=10)
    a, b = Tile("a"), Tile("b")
    assert s.submit(task(WRITE, a)) and s.submit(task(WRITE, b))
    assert s.in_flight == 2


def test_read_after_write_waits_for_the_writer():
    s = Scheduler(window=10)
    x, y = Tile("x"), Tile("y")
    writer, reader = task(WRITE, x), task(READ, x, y)
    assert s.submit(writer)
    assert not s.submit(reader)
    assert s.pop() is writer and s.pop() is None
    assert s.finish(writer) == [reader]
    assert s.pop() is reader


def test_write_after_read_waits_for_every_reader():
    s = Scheduler(window=10)
    x = Tile("x")
    readers = [task(READ, x, Tile(f"y{i}")) for i in range(3)]
    for r in readers:
        assert s.submit(r)
    writer = task(WRITE, x)
    assert not s.submit(writer)
    for r in readers[:2]:
        assert s.finish(r) == []
    assert s.finish(readers[2]) == [writer]


def test_write_after_write_is_serialised():
    s = Scheduler(window=10)
    x = Tile("x")
    first, second = task(WRITE, x), task(WRITE, x)
    assert s.submit(first) and not s.submit(second)
    assert s.finish(first) == [second]


def test_ready_queue_orders_by_priority_then_submission():
    s = Scheduler(window=10)
    tasks = [task(WRITE, Tile(str(i)), priority=p) for i, p in enumerate([1, 5, 5, 0])]
    for t in tasks:
        s.submit(t)
    assert drain(s) == [tasks[1], tasks[2], tasks[0], tasks[3]]


def test_a_transfer_goes_before_any_task_whatever_its_priority():
    """Transfers had priority 2**40, which a program's `priority 2 ** 50 * k` passed (tester x68)."""
    from tiledsl.runtime.exchange import SEND, TRANSFER_PRIORITY

    s = Scheduler(window=10)
    tasks = [task(WRITE, Tile("a"), priority=2 ** 70), Task(SEND, (Tile("b"),), None, TRANSFER_PRIORITY),
             task(WRITE, Tile("c"), priority=-(2 ** 70))]
    for t in tasks:
        s.submit(t)
    assert drain(s) == [tasks[1], tasks[0], tasks[2]]


def test_finished_tasks_leave_no_references_behind():
    s = Scheduler(window=10)
    x, y = Tile("x"), Tile("y")
    s.submit(task(WRITE, x))
    s.submit(task(READ, x, y))
    drain(s)
    assert x.writer is None and y.writer is None and not x.readers and s.idle


def test_window_reports_full():
    s = Scheduler(window=2)
    s.submit(task(WRITE, Tile("a")))
    assert not s.window_full()
    s.submit(task(WRITE, Tile("b")))
    assert s.window_full()
    s.finish(s.pop())
    assert not s.window_full()


def test_a_chain_of_one_tile_runs_in_program_order():
    s = Scheduler(window=100)
    x, y = Tile("x"), Tile("y")
    chain = [task(WRITE, x) if i % 3 else task(READ, x, y) for i in range(30)]
    for t in chain:
        s.submit(t)
    assert drain(s) == chain


def test_a_stall_report_names_the_tiles_a_task_waits_through():
    """#1 waits for #0 on y only: the report listed every tile of #0 (x too, which #1 never reads)."""
    s = Scheduler(window=10)
    x, y, z = Tile("x"), Tile("y"), Tile("z")
    s.submit(task(READ, x, y))  # reads x, writes y
    s.submit(task(READ, z, y))
    assert "  blocked #1 read(z, y), line 1: waits for #0 read on y (queued)" in s.describe().splitlines()


def test_a_stall_report_names_a_panel_as_one_argument():
    """A blocked task of gemm(A[0 : 3, 0], C[0, 0]) was listed as gemm(A[0, 0], A[1, 0], A[2, 0], C[0, 0]),
    the panel's tiles as that many arguments."""
    panel = Call("gemm", ("in", "inout"), main=1, line=3, text="gemm(A[0 : 3, 0], C[0, 0])", panels=(0,))
    s = Scheduler(window=10)
    a, c = SimpleNamespace(name="A"), SimpleNamespace(name="C")
    column = [Cell(a, i, 0) for i in range(3)]
    s.submit(task(WRITE, column[1]))
    s.submit(task(panel.expanded((3,)), *column, Cell(c, 0, 0)))
    assert "  blocked #1 gemm(A[0:3, 0], C[0, 0]), line 3: waits for #0 write on A[1, 0] (queued)" in \
        s.describe(arguments_text=arguments_text).splitlines()  # as the engine names them


def test_a_stall_report_counts_the_programs_tasks_and_names_transfers_as_such():
    """Transfers were counted as tasks ('12 of 15 submitted done' for a program of 12) and listed as if
    the program's (blocked #2 send(A[1, 1])): the counts are now the program's, the transfers' apart."""
    s = Scheduler(window=10)
    x, y = Tile("x"), Tile("y")
    send = Call("send", ("in",), main=0, line=0, text="send", role="transfer")
    for submitted in (task(WRITE, x), task(WRITE, y), task(send, x), task(READ, y, x)):
        s.submit(submitted)
    s.finish(s.pop())  # the first write of x, which the send waits for
    s.pop()  # the write of y, running
    lines = s.describe().splitlines()
    assert lines[0] == ("2 task(s) in the window, 0 ready, 1 of 3 submitted done; "
                        "1 transfer(s) in the window, 1 ready, 0 of 1 submitted done")
    assert lines[1:] == ["  ready #2 send(x), a transfer: waits for a free CPU worker",
                         "  blocked #3 read(y, x), line 1: waits for #1 write on y (running); #2 send on x "
                         "(a transfer, queued)"]
    blocked, z = Scheduler(window=10), Tile("z")
    blocked.submit(task(WRITE, z))
    blocked.submit(task(send, z))
    assert blocked.describe().splitlines()[2] == "  blocked #1 send(z), a transfer: waits for #0 write on z (queued)"


def test_a_stall_report_names_the_ready_tasks_each_waiting_for_its_device():
    """'4 task(s) in the window, 1 ready' named the running and blocked ones but not the ready one, which waited
    for the rank's only worker, held by the stuck kernel: what starved the rank went unsaid."""
    s = Scheduler(window=10, devices=3)
    x, y, z = Tile("x"), Tile("y"), Tile("z")
    s.submit(task(WRITE, x))
    s.submit(Task(WRITE, (y,), None, 5, device=2))
    s.submit(task(WRITE, z, priority=9))
    assert s.describe().splitlines()[1:] == ["  ready #2 write(z), line 2: waits for a free CPU worker",
                                             "  ready #0 write(x), line 2: waits for a free CPU worker",
                                             "  ready #1 write(y), line 2: waits for GPU 2"]


def test_a_stall_report_says_how_many_ready_and_blocked_tasks_it_leaves_out():
    """'14 ready' with five listed (#2, #4, #5, #6, #8: the queue's first by priority) and no word of the nine
    others: the lowest numbers missing looked like tasks lost."""
    s = Scheduler(window=20)
    tiles = [Tile(f"t{i}") for i in range(8)]
    for i, tile in enumerate(tiles):
        s.submit(task(WRITE, tile, priority=i % 3))
    for tile in tiles[:7]:
        s.submit(task(READ, tile, Tile("sink")))
    lines = s.describe(limit=3).splitlines()
    assert [line for line in lines if "ready #" in line] == [
        f"  ready #{seq} write(t{seq}), line 2: waits for a free CPU worker" for seq in (2, 5, 1)]
    assert "  and 5 more ready for the CPU workers (those listed are the first 3 of its queue, by priority)" in lines
    assert lines[-1] == "  and 4 more blocked"
