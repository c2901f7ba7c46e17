"""A failed task's message names its tile arguments as the kernel declares them: a panel is
one argument, written as the ``.tile`` range it came from, and value arguments count."""
from types import SimpleNamespace

import pytest

from tiledsl.runtime import Options, execute
from tiledsl.runtime.engine import TaskFailure
from tiledsl.runtime.program import Call, tiles_text


class FakeTile(SimpleNamespace):
    def __str__(self):
        return f"{self.matrix.name}[{self.i}, {self.j}]"


U, V = SimpleNamespace(name="U"), SimpleNamespace(name="V")


def tiles(matrix, *places):
    return tuple(FakeTile(matrix=matrix, i=i, j=j) for i, j in places)


@pytest.mark.timeout(10)
def test_a_panel_is_written_as_its_range_and_other_tiles_one_by_one():
    assert tiles_text(tiles(U, (0, 2), (1, 2), (2, 2))) == "U[0:3, 2]"
    assert tiles_text(tiles(U, (4, 1), (4, 2))) == "U[4, 1:3]"
    assert tiles_text(tiles(U, (5, 0))) == "U[5, 0]"
    assert tiles_text(tiles(U, (0, 0), (2, 0))) == "U[0, 0], U[2, 0]"  # not consecutive
    assert tiles_text(tiles(U, (0, 0)) + tiles(V, (1, 0))) == "U[0, 0], V[1, 0]"  # two matrices


@pytest.mark.timeout(10)
def test_declared_arguments_count_values_and_keep_a_panel_whole():
    call = Call("smooth", ("in", "out", "in"), 1, 13, "smooth(...)", ("center",), "vttt", (0,))
    flat = tiles(U, (0, 0), (1, 0)) + tiles(V, (0, 0)) + tiles(U, (0, 1))
    declared = [(number, mode, tiles_text(group), panel) for number, mode, group, panel
                in call.expanded((2,)).declared(flat)]
    assert declared == [(2, "in", "U[0:2, 0]", True), (3, "out", "V[0, 0]", False), (4, "in", "U[0, 1]", False)]


@pytest.mark.timeout(60)
def test_writing_an_in_panel_names_it_as_one_argument_numbered_as_declared(compiled):
    """smooth(int center, in P, out D, in S): the panel P is argument 2 and S argument 4."""
    driver = compiled("tests/runtime/programs/writein.tile")
    with pytest.raises(TaskFailure) as failure:
        execute(driver, Options(n=30, workers=1))
    assert str(failure.value) == (
        "kernel smooth failed on U[0:2, 0], V[0, 0], U[0, 1] (smooth(i - lo, U[lo : hi, 0], V[i, 0], U[i, 1])"
        "; argument center = 0): "
        "ValueError at writein_kernels.py:6: assignment destination is read-only: "
        "a kernel may not write its `in` arguments: U[0:2, 0] (argument 2, a panel), U[0, 1] (argument 4)")
    assert failure.value.line == 13 and failure.value.rank == 0
