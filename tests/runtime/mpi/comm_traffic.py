"""Every rank exchanges many messages with every other rank, all in flight at once.

    mpiexec -n N python comm_traffic.py MESSAGES_PER_TAG TAGS

Per peer and tag, the sends go in sequence order, but interleaved across tags in
a random order, from two posting threads; the receives are posted (from the main
thread) in another random interleaving. Each message's content encodes
(source, destination, tag, sequence), its size and memory order vary with the
sequence (0 bytes up to a 256x256 tile, past the eager limit), so the check
proves data integrity and that the j-th receive of a (source, tag) got the j-th
send. Tags are taken from the top of the valid range. Prints "ok" on success.
"""
from __future__ import annotations

import random
import sys
import threading

import numpy as np

from tiledsl.runtime.comm import Communicator

SHAPES = [(0,), (1,), (7, 3), (64, 64), (256, 256)]


def message(source: int, dest: int, tag: int, seq: int, fill: bool = True) -> np.ndarray:
    """The seq-th message from source to dest on tag (or an empty buffer shaped like it)."""
    shape = SHAPES[seq % len(SHAPES)]
    order = "F" if (seq + tag) % 2 else "C"
    if not fill:
        return np.full(shape, np.nan, order=order)
    base = ((source * 100 + dest) * 1000 + tag % 1000) * 1000 + seq
    return np.asarray(base + np.arange(int(np.prod(shape))).reshape(shape) / 1e6, order=order)


class Tally:
    """Counts completions; sets ``done`` when the expected number was reached."""

    def __init__(self, expected: int):
        self.expected = expected
        self.count = 0
        self.lock = threading.Lock()
        self.done = threading.Event()

    def __call__(self) -> None:
        with self.lock:
            self.count += 1
            if self.count == self.expected:
                self.done.set()


def interleaved(streams: list, rng: random.Random) -> list:
    """Merge lists into one random interleaving that keeps each list's own order."""
    cursors = [iter(s) for s in streams]
    slots = [i for i, s in enumerate(streams) for _ in s]
    rng.shuffle(slots)
    return [next(cursors[i]) for i in slots]


def main(per_tag: int, tags: int) -> int:
    """Run the exchange and check it; the exit status (0 when every check held)."""
    comm = Communicator()
    comm.start()
    rank, size = comm.rank, comm.size
    tag_values = [comm.max_tag - t for t in range(tags)]
    peers = [p for p in range(size) if p != rank]
    rng = random.Random(rank)
    total = len(peers) * tags * per_tag
    tally = Tally(2 * total)

    streams = [[(peer, tag, seq) for seq in range(per_tag)] for peer in peers for tag in tag_values]
    received = {}
    receives = interleaved(streams, rng)
    for source, tag, seq in receives:
        buffer = received[source, tag, seq] = message(source, rank, tag, seq, fill=False)
        comm.receive(buffer, source, tag, tally)

    sends = interleaved(streams, rng)

    def post(parity: int) -> None:
        for dest, tag, seq in sends:
            if tag % 2 == parity:
                comm.send(message(rank, dest, tag, seq), dest, tag, tally)

    posters = [threading.Thread(target=post, args=(parity,)) for parity in (0, 1)]
    for thread in posters:
        thread.start()
    for thread in posters:
        thread.join()

    if not tally.done.wait(30):
        print(f"rank {rank}: only {tally.count} of {2 * total} completions", flush=True)
        return 1
    bad = [key for key, buffer in received.items()
           if not np.array_equal(buffer, message(key[0], rank, key[1], key[2]))]
    comm.barrier()
    comm.stop()
    stats = comm.stats
    sent_bytes = sum(message(rank, dest, tag, seq).nbytes for dest, tag, seq in sends)
    received_bytes = sum(buffer.nbytes for buffer in received.values())
    problems = []
    if bad:
        problems.append(f"{len(bad)} wrong buffer(s), e.g. (source, tag, seq) {bad[:3]}")
    if (stats.sends, stats.receives) != (total, total):
        problems.append(f"stats {stats} for {total} sends and receives")
    if (stats.bytes_sent, stats.bytes_received) != (sent_bytes, received_bytes):
        problems.append(f"bytes {stats.bytes_sent}/{stats.bytes_received}, "
                        f"expected {sent_bytes}/{received_bytes}")
    if comm.error is not None:
        problems.append(f"error {comm.error!r}")
    for problem in problems:
        print(f"rank {rank}: {problem}", flush=True)
    if not problems and rank == 0:
        print("ok", flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2])))
