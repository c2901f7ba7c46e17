"""Project tiledsl's Cholesky on today's GPU clusters with `tiledsl simulate` (issue 15).

    python benchmarks/h100_projection.py [--runs 16:327680,64:655360,256:1310720,1024:1310720] [--nb 8192]
                                         [--broadcast auto|direct|tree] [--out rows.jsonl]

Runs of ``NODES:N`` on the ``h100`` machine file (4 H100 and 64 cores per node,
200 Gb/s links), uniform tiles of ``--nb`` all on the GPUs (the ratio of the rates
gives the host no column). The default: weak scaling from 16 to 256 nodes (the
order growing with the square root of the nodes: 53 GB of matrix per node), then
the same order on 1,024 nodes (strong scaling: a quarter of the work per node,
and 700,000 tasks rather than the 5.5 million of the weak-scaling order, which
would take this simulator hours). Each row says where the time goes
and so why scaling stops: the generation thread's walk (each rank walks its share
of the loop nest), the busiest link (bytes a rank sends over the bandwidth),
the busiest copy stream of a GPU (PCIe to and from the host, NVLink between GPUs),
the critical path, and the area bound (the machine's compute).
"""
import argparse
import json
import subprocess
import sys

def project(nodes: int, n: int, nb: int, broadcast: str = "auto") -> dict:
    out = subprocess.run([sys.executable, "-m", "tiledsl.commands.cli", "simulate", "cholesky", "--n", str(n),
                          "--nb", str(nb), "--nodes", str(nodes), "--machine", "h100", "--broadcast", broadcast,
                          "--json"],
                         capture_output=True, text=True)
    if out.returncode:
        sys.exit(out.stderr.strip())
    r = json.loads(out.stdout.strip().splitlines()[-1])
    limits = {"walk": r["walk"]["seconds"], "links": r["busiest"]["link_seconds"],
              "GPU copies": r["busiest"]["gpu_stream_seconds"], "critical path": r["critical_path"],
              "compute": r["area_bound"]}
    return {"nodes": nodes, "n": n, "broadcast": r["broadcast"], "tasks": r["tasks"], "seconds": round(r["seconds"], 2),
            "pflops": round(r["gflops"] / 1e6, 2), "tflops_per_node": round(r["gflops"] / 1e3 / nodes, 1),
            **{k.replace(" ", "_"): round(v, 2) for k, v in limits.items()},
            "messages_per_rank": round(r["totals"]["messages_sent"] / nodes),
            "bound_by": max(limits, key=limits.get), "simulation_seconds": round(r["simulation_seconds"], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default="16:327680,64:655360,256:1310720,1024:1310720")
    parser.add_argument("--nb", type=int, default=8192)
    parser.add_argument("--broadcast", choices=["auto", "direct", "tree"], default="auto",
                        help="how tile versions reach their readers (as run: auto is a tree from 8 nodes)")
    parser.add_argument("--out", help="append each row to this file as one JSON line")
    args = parser.parse_args()
    for run in args.runs.split(","):
        nodes, n = map(int, run.split(":"))
        row = project(nodes, n, args.nb, args.broadcast)
        print(json.dumps(row), flush=True)
        if args.out:
            with open(args.out, "a") as target:
                target.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
