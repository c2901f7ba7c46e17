"""Compute streams per GPU (``--gpu-streams``) against cuSOLVER, alternated in one job.

    python benchmarks/gpu_streams.py --backend cupy --n 8192 16384 --streams 1 2 4
    python benchmarks/gpu_streams.py --n 1024 --nb 128          # emulated: the plumbing, not speed

For each program (cholesky, qr, getrf by default) and order n, one round runs the
reference once and then tiledsl on one GPU (every tile on it: host:GPU columns 0:1)
once per stream count; the best of ``--rounds`` rounds counts, after one untimed run of each. The reference is
cuSOLVER through CuPy (``cupy.linalg.cholesky``, ``cupy.linalg.qr(mode="r")``,
``cupyx.scipy.linalg.lu_factor``) on a matrix already on the GPU, or LAPACK through
numpy/scipy for the emulated backend (:mod:`gpu_references`). Prints one markdown table: seconds, GFLOP/s
and the ratio to the reference (above 1: tiledsl is faster).
"""
import argparse
import sys
from pathlib import Path

import tiledsl
from tiledsl.runtime import Options, execute
from tiledsl.runtime.world import UsageError

from gpu_references import FLOPS, KIND, Reference

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"
MEASURED = ("cholesky", "qr", "getrf")


def tiledsl_seconds(driver, args, n: int, streams: int) -> float:
    tiles = {"nb": args.nb} if args.nb else {}
    result = execute(driver, Options(n=n, tiles=tiles, gpus=1, gpu_backend=args.backend, gpu_streams=streams,
                                     gpu_ratio=(0, 1), workers=args.workers, watchdog=600))
    return result.seconds


def measure(program: str, n: int, args) -> dict:
    """Best seconds of the reference and of each stream count over the rounds, alternated."""
    driver = tiledsl.load(PROGRAMS / f"{program}.tile").driver
    reference = Reference(KIND[program], args.backend)
    reference.seconds(n)  # untimed first runs: libraries loaded, handles made
    tiledsl_seconds(driver, args, n, args.streams[0])
    best: dict = {}
    for _ in range(args.rounds):
        timings = {"reference": reference.seconds(n)}
        timings.update({streams: tiledsl_seconds(driver, args, n, streams) for streams in args.streams})
        for key, seconds in timings.items():
            best[key] = min(best.get(key, seconds), seconds)
    reference.release()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[8192], help="matrix orders (default 8192)")
    parser.add_argument("--nb", type=int, help="tile size (default: tuned, else the program's)")
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 2, 4], help="stream counts (default 1 2 4)")
    parser.add_argument("--programs", nargs="+", default=list(MEASURED), choices=list(MEASURED))
    parser.add_argument("--backend", default="emulated", choices=["emulated", "cupy"])
    parser.add_argument("--workers", type=int, default=1, help="CPU workers (default 1: the GPU does the work)")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds; the best counts (default 3)")
    args = parser.parse_args()
    print("| program | n | reference (s) | " + " | ".join(f"{s} stream(s): s, GFLOP/s, ratio" for s in args.streams)
          + " |")
    print("|---|---:|---:|" + "---|" * len(args.streams))
    for program in args.programs:
        for n in args.n:
            try:
                best = measure(program, n, args)
            except (UsageError, ValueError) as error:  # no GPU for CuPy, or sizes the program refuses
                sys.exit(f"gpu_streams: error: {error}")
            flops = FLOPS[KIND[program]](n)
            cells = [f"{best[s]:.3f}, {flops / best[s] / 1e9:.0f}, {best['reference'] / best[s]:.2f}x"
                     for s in args.streams]
            print(f"| {program} | {n} | {best['reference']:.3f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
