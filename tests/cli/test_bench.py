"""tiledsl bench's references (tiledsl.commands.bench): the chunk sizes dask is compared at."""
from tiledsl.commands.bench import dask_chunks


def test_dask_is_timed_at_square_chunks_that_divide_n():
    """dask's Cholesky and LU refuse a ragged last chunk: at n = 1000, chunks of 512 were an
    internal error of bench wherever dask is installed."""
    assert dask_chunks(1000) == [500]
    assert dask_chunks(1536) == [512, 768]
    assert dask_chunks(4096) == [512, 1024, 2048]
    assert dask_chunks(997) == [] and dask_chunks(256) == []  # a prime order; an order below every chunk
    assert all(n % chunk == 0 and chunk < n for n in range(64, 3000, 37) for chunk in dask_chunks(n))
