"""Gradient compression between hosts: the ResNet-50 v1 gradient set (193 arrays, 97.6 MiB)
reduced as Hybrid.pushpull reduces it, on emulated hosts (one rank each by default) whose
links are shaped to --mbps, with
  none   float32 on the wire (the tensor collectives, MXKV_ALGO=auto),
  fp16   MXKV_COMPRESS=fp16 (values travel in 16 bits, summed in float32),
  2bit   MXNet's 2-bit compression (set_gradient_compression, threshold 0.5): each rank's
         values quantised with error feedback, the ranks' codes allgathered (comm/compression.py),
  1bit   the same with 1-bit SGD's quantiser (a sign a value, each sign's mean per 256
         values: 1.25 bits a value),
and with more than one rank a host (--group-size) the hierarchical allreduce (MXKV_HIERARCHY=on)
  hier       float32: reduce-scatter inside each host, slices allreduced across hosts,
             allgather inside,
  hier-2bit  2-bit of each host's sum: its slices quantised with error feedback by the
             ranks that hold them, only their codes cross between hosts (csrc/quantiser.h),
  hier-1bit  the same with 1-bit SGD's quantiser.
All run in one MPI job over TCP between the hosts, interleaved repetition by repetition in
shuffled order (OMP_NUM_THREADS=--threads); a repetition's time is the slowest rank's;
medians. Beside each: the bytes the busiest rank sent across hosts, and fp32's limit (each
host must send 2 (H-1)/H of the float32 gradient through its link). Needs root.
Prints a table and writes compression_hosts_<H>x<R>.json and .png to --out.

    python examples/benchmarks/compression.py [--hosts 2] [--group-size 1] [--mbps 1000]
"""

import argparse
import dataclasses
import json
import os
import sys
from typing import Dict, List

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from emulated_hosts import (  # noqa: E402
    add_cluster_option,
    allreduce_limit_seconds,
    hosts_of,
    launch_on_hosts,
)
from job_output import json_lines  # noqa: E402
from model_shapes import resnet50_shapes  # noqa: E402
from timing import interleaved, seconds  # noqa: E402

THRESHOLD = 0.5


def worker(group_size: int, reps: int) -> None:
    """One rank of the MPI job; rank 0 prints one JSON line per method."""
    import mxnet as mx
    from mpi4py import MPI

    import mxkv_hybrid  # noqa: F401
    from mxkv_hybrid.comm.collectives import TensorCollectives
    from mxkv_hybrid.comm.compression import QuantisedReducer
    from mxkv_hybrid.comm.compression_params import Compression
    from mxkv_hybrid.comm.topology import groups
    from mxkv_hybrid.config import Config

    comm = MPI.COMM_WORLD
    base = Config.from_environment()
    this_group = groups(group_size)
    shapes = resnet50_shapes()
    rng = np.random.default_rng(comm.rank)
    arrays = [[mx.nd.array(rng.standard_normal(s).astype(np.float32) * 0.1)] for s in shapes]
    outs = [[mx.nd.zeros(s)] for s in shapes]
    keys = list(range(len(arrays)))
    plain = TensorCollectives(comm, base, this_group)
    two_bit, one_bit = Compression("2bit", THRESHOLD), Compression("1bit", THRESHOLD)
    runs = {
        "none": (plain, plain),
        "fp16": (TensorCollectives(comm, dataclasses.replace(base, compress="fp16"), this_group),)
        * 2,
        "2bit": (QuantisedReducer(plain, two_bit), plain),
        "1bit": (QuantisedReducer(plain, one_bit), plain),
    }
    if group_size > 1:
        hierarchical = TensorCollectives(comm, base, this_group, hierarchy="on")
        runs.update(
            {
                "hier": (hierarchical, hierarchical),
                "hier-2bit": (QuantisedReducer(hierarchical, two_bit), hierarchical),
                "hier-1bit": (QuantisedReducer(hierarchical, one_bit), hierarchical),
            }
        )

    def once(method: str) -> tuple:
        """(seconds of the slowest rank, bytes sent across hosts by each rank)."""
        reducer, counted = runs[method]
        before = counted.bytes_sent_across
        comm.Barrier()
        elapsed = seconds(
            lambda: (reducer.allreduce("allreduce", keys, arrays, outs, True), mx.nd.waitall())
        )
        return comm.allreduce(elapsed, op=MPI.MAX), comm.allgather(
            counted.bytes_sent_across - before
        )

    across: Dict[str, List[int]] = {}

    def timed(run) -> float:
        elapsed, across[run] = once(run)
        return elapsed

    times = interleaved(runs, reps, timed)
    if comm.rank == 0:
        for method, values in times.items():
            print(
                json.dumps(
                    {
                        "method": method,
                        "times": values,
                        "bytes_across_per_rank": across[method],
                        "ranks": comm.size,
                        "hosts": this_group.num_groups,
                        "gradient_bytes": 4 * sum(int(np.prod(s)) for s in shapes),
                    }
                ),
                flush=True,
            )


def plot(rows: List[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar([r["method"] for r in rows], [r["median_ms"] for r in rows])
    ax.axhline(
        rows[0]["limit_ms"],
        color="gray",
        linestyle="--",
        label="float32's least time over the link",
    )
    ax.set_ylabel("median ms per allreduce of the ResNet-50 set")
    ax.set_title(f"{rows[0]['hosts']} emulated hosts, {rows[0]['mbps']:g} Mbit/s links")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=1, help="ranks per host")
    parser.add_argument("--mbps", type=float, default=1000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every rank")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    add_cluster_option(parser)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.group_size, args.reps)

    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    print(
        f"-- {args.hosts} {args.cluster} hosts x {args.group_size} ranks, links {args.mbps:g} "
        f"Mbit/s, {args.reps} repetitions, OMP_NUM_THREADS={args.threads} ...",
        flush=True,
    )
    with hosts_of(args.cluster, args.hosts, args.mbps) as cluster:
        done = launch_on_hosts(
            cluster,
            args.group_size,
            [
                "python",
                __file__,
                "--worker",
                "--group-size",
                str(args.group_size),
                "--reps",
                str(args.reps),
            ],
            env,
        )
    if done.returncode != 0:
        sys.exit(f"benchmark job on emulated hosts failed:\n{done.stdout}\n{done.stderr}")
    rows = [dict(row, mbps=args.mbps) for row in json_lines(done.stdout)]
    for r in rows:
        r["median_ms"] = 1e3 * float(np.median(r["times"]))
        r["across_max_mb"] = max(r["bytes_across_per_rank"]) / 2**20
        r["limit_ms"] = 1e3 * allreduce_limit_seconds(r["gradient_bytes"], r["hosts"], args.mbps)
    none = next(r for r in rows if r["method"] == "none")
    print(
        f"\nResNet-50 gradient set ({none['gradient_bytes'] / 2**20:.1f} MiB), {args.hosts} "
        f"hosts x {args.group_size} ranks, {args.mbps:g} Mbit/s; median of {args.reps}, "
        "slowest rank; limit: float32's least time over the link"
    )
    print(
        f"{'method':>9} {'ms':>9} {'/ limit':>8} {'MiB across (busiest rank)':>26} "
        f"{'none / this':>12}"
    )
    for r in rows:
        print(
            f"{r['method']:>9} {r['median_ms']:9.1f} {r['median_ms'] / r['limit_ms']:7.2f}x "
            f"{r['across_max_mb']:26.1f} {none['median_ms'] / r['median_ms']:11.2f}x"
        )
    os.makedirs(args.out, exist_ok=True)
    name = f"compression_hosts_{args.hosts}x{args.group_size}"
    with open(os.path.join(args.out, f"{name}.json"), "w") as f:
        json.dump(
            {
                "omp_num_threads": args.threads,
                "reps": args.reps,
                "threshold": THRESHOLD,
                "results": rows,
            },
            f,
            indent=1,
        )
    plot(rows, os.path.join(args.out, f"{name}.png"))
    print(f"\nwrote {args.out}/{name}.json and {name}.png")


if __name__ == "__main__":
    main()
