"""Tests of the prelude's flop counts (runtime/flops.py): the leading terms of LAPACK's counts on known shapes,
every kernel counted with the kernel's own arguments, and whole tile factorizations
adding up to the factorization's count."""
from __future__ import annotations

import inspect

import pytest

from tiledsl.runtime.flops import PRELUDE_FLOPS
from tiledsl.runtime.kernels import CPU_KERNELS

NB = 256


def test_every_prelude_kernel_is_counted_from_its_own_arguments():
    assert set(PRELUDE_FLOPS) == set(CPU_KERNELS)
    for name, kernel in CPU_KERNELS.items():
        count = inspect.signature(PRELUDE_FLOPS[name])
        arguments = [(3, 2) if p.default is inspect.Parameter.empty else p.default
                     for p in inspect.signature(kernel).parameters.values()]
        count.bind(*arguments)  # every argument, defaults given as values
        count.bind(*arguments[:len([p for p in count.parameters.values() if p.default is inspect.Parameter.empty
                                    and p.kind is p.POSITIONAL_OR_KEYWORD])])  # and the tiles alone
        assert isinstance(PRELUDE_FLOPS[name](*arguments), float), name


@pytest.mark.parametrize("name,args,expected", [
    ("gemm", [(NB, NB), (NB, NB), (NB, NB)], 2 * NB ** 3),
    ("gemm", [(30, 10), (30, 20), (10, 20), "T", "N", 1.0, 0.0], 2 * 10 * 20 * 30),
    ("gemm", [(10, 30), (20, 30), (10, 20), "N", "T"], 2 * 10 * 20 * 30),
    ("gemm_nn", [(10, 30), (30, 20), (10, 20)], 2 * 10 * 20 * 30),
    ("symm", [(10, 10), (10, 20), (10, 20), "L"], 2 * 10 * 10 * 20),
    ("symm", [(20, 20), (10, 20), (10, 20), "R", "U"], 2 * 10 * 20 * 20),
    ("syrk", [(NB, NB), (NB, NB)], NB ** 3),
    ("syrk", [(30, 10), (10, 10), "L", "T"], 30 * 10 * 10),
    ("syr2k", [(10, 30), (10, 30), (10, 10)], 2 * 30 * 10 * 10),
    ("trsm", [(NB, NB), (NB, NB)], NB ** 3),
    ("trsm", [(10, 10), (10, 30), "L"], 10 * 10 * 30),
    ("trsm", [(30, 30), (10, 30)], 10 * 30 * 30),
    ("trmm", [(10, 10), (10, 30)], 10 * 10 * 30),
    ("trmm", [(30, 30), (10, 30), "R"], 10 * 30 * 30),
    ("trsm_l", [(10, 10), (10, 30)], 10 * 10 * 30),
    ("trsm_u", [(30, 30), (10, 30)], 10 * 30 * 30),
    ("potrf", [(NB, NB)], NB ** 3 / 3),
    ("potrf", [(3 * NB, NB)], NB ** 3 / 3 + 2 * NB * NB * NB),  # the tall part: a trsm
    ("potrf", [(NB, NB), "U"], NB ** 3 / 3),
    ("trtri", [(NB, NB), "U", "U"], NB ** 3 / 3),
    ("lauum", [(NB, NB)], NB ** 3 / 3),
    ("getrf_nopiv", [(NB, NB)], 2 * NB ** 3 / 3),
    ("getrf", [(4 * NB, NB), (1, NB)], 4 * NB * NB * NB - NB ** 3 / 3),
    ("getrf", [(NB, 4 * NB), (1, NB)], 4 * NB * NB * NB - NB ** 3 / 3),
    ("laswp", [(1, NB), (4 * NB, NB), 0, "F"], 0),
    ("geqrt", [(NB, NB), (32, NB)], 4 * NB ** 3 / 3),
    ("geqrt", [(3 * NB, NB), (32, NB)], 2 * 3 * NB * NB * NB - 2 * NB ** 3 / 3),
    ("geqrt", [(NB, 3 * NB), (32, 3 * NB)], 2 * 3 * NB * NB * NB - 2 * NB ** 3 / 3),
    ("gemqrt", [(NB, NB), (32, NB), (NB, NB)], 2 * NB ** 3),
    ("gemqrt", [(30, 10), (4, 10), (30, 20), "L", "N"], 4 * 30 * 20 * 10 - 2 * 20 * 10 * 10),
    ("gemqrt", [(30, 10), (4, 10), (20, 30), "R", "T"], 4 * 20 * 30 * 10 - 2 * 20 * 10 * 10),
    ("tpqrt", [(NB, NB), (NB, NB), (32, NB)], 2 * NB ** 3),
    ("tpmqrt", [(NB, NB), (32, NB), (NB, NB), (NB, NB)], 4 * NB ** 3),
    ("tpmqrt", [(30, 10), (4, 10), (20, 10), (20, 30), "R"], 4 * 20 * 30 * 10),
    ("ttqrt", [(NB, NB), (NB, NB), (32, NB)], 4 * NB * (NB + 1) * (NB + 2) / 6),  # 2n³/3 and lower terms
    ("ttqrt", [(4, 4), (2, 4), (2, 4)], 4 * (1 * 4 + 2 * 3) + 4 * 2 * (2 + 1)),  # reflectors of 1, 2, 2, 2 rows
    ("ttmqrt", [(NB, NB), (32, NB), (NB, NB), (NB, 30)], 4 * 30 * NB * (NB + 1) / 2),
    ("ttmqrt", [(2, 4), (2, 4), (4, 30), (20, 2), "R"], 4 * 20 * (1 + 2 + 2 + 2)),
    ("lassq", [(10, 20), (1, 2)], 400),
    ("lassq_merge", [(1, 2), (1, 2)], 0),
    ("amax", [(10, 20), (1, 1)], 200),
    ("asum", [(10, 20), (1, 20), "N"], 200),
])
def test_known_counts(name, args, expected):
    assert PRELUDE_FLOPS[name](*args) == pytest.approx(expected, rel=1e-15)


def test_empty_tiles_count_nothing():
    assert PRELUDE_FLOPS["gemm"]((0, 5), (4, 5), (0, 4)) == 0
    assert PRELUDE_FLOPS["potrf"]((5, 0)) == 0
    assert PRELUDE_FLOPS["getrf"]((0, 5), (1, 5)) == 0
    assert PRELUDE_FLOPS["geqrt"]((5, 0), (4, 0)) == 0


T = 12  # tiles per side: the lower-order terms of a tile factorization are then within 1/T of its count


def shape():
    return (NB, NB)


def test_tile_cholesky_adds_up_to_n_cubed_over_3():
    total = 0.0
    for k in range(T):
        total += PRELUDE_FLOPS["potrf"](shape())
        total += (T - k - 1) * PRELUDE_FLOPS["trsm"](shape(), shape())
        for n in range(k + 1, T):
            total += PRELUDE_FLOPS["syrk"](shape(), shape())
            total += (T - n - 1) * PRELUDE_FLOPS["gemm"](shape(), shape(), shape())
    assert total == pytest.approx((T * NB) ** 3 / 3, rel=1e-12)  # leading terms add up exactly


def test_tile_lu_adds_up_to_two_n_cubed_over_3():
    total = 0.0
    for k in range(T):
        rest = T - k - 1
        total += PRELUDE_FLOPS["getrf_nopiv"](shape())
        total += rest * (PRELUDE_FLOPS["trsm_l"](shape(), shape()) + PRELUDE_FLOPS["trsm_u"](shape(), shape()))
        total += rest * rest * PRELUDE_FLOPS["gemm_nn"](shape(), shape(), shape())
    assert total == pytest.approx(2 * (T * NB) ** 3 / 3, rel=1 / T)


def test_tile_qr_adds_up_to_four_n_cubed_over_3():
    t = (32, NB)
    total = 0.0
    for k in range(T):
        rest = T - k - 1
        total += PRELUDE_FLOPS["geqrt"](shape(), t) + rest * PRELUDE_FLOPS["gemqrt"](shape(), t, shape())
        total += rest * PRELUDE_FLOPS["tpqrt"](shape(), shape(), t)
        total += rest * rest * PRELUDE_FLOPS["tpmqrt"](shape(), t, shape(), shape())
    assert total == pytest.approx(4 * (T * NB) ** 3 / 3, rel=1 / T)


def test_a_two_level_tree_does_the_flat_trees_flops():
    """geqrt + ttqrt cost a tpqrt, gemqrt + ttmqrt a tpmqrt (programs/hqr.tile)."""
    t = (32, NB)
    assert (PRELUDE_FLOPS["geqrt"](shape(), t) + PRELUDE_FLOPS["ttqrt"](shape(), shape(), t)
            == pytest.approx(PRELUDE_FLOPS["tpqrt"](shape(), shape(), t), rel=3 / NB))
    assert (PRELUDE_FLOPS["gemqrt"](shape(), t, shape()) + PRELUDE_FLOPS["ttmqrt"](shape(), t, shape(), shape())
            == pytest.approx(PRELUDE_FLOPS["tpmqrt"](shape(), t, shape(), shape()), rel=3 / NB))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("rows, said", [("0 : 50", "potrf: A is 50x100; it needs at least as many rows as columns"),
                                        ("10 : 10", "potrf: A is 0x100; it needs at least as many rows as columns")])
def test_a_prelude_kernel_given_shapes_it_refuses_says_so_not_its_flop_count(tmp_path, rows, said):
    """potrf's count goes below zero on a wide tile: the kernel's own message is the one to read."""
    import tiledsl
    from tiledsl.api import TiledslError

    path = tmp_path / "wide.tile"
    path.write_text(f"program wide {{\n  tiling uniform(nb = 100)\n  matrix A[n, n] = random spd\n"
                    f"  potrf(A[0, 0][{rows}])\n}}\n")
    with pytest.raises(TiledslError) as error:
        tiledsl.load(path).run(n=300)
    assert said in str(error.value) and "flop count" not in str(error.value)
