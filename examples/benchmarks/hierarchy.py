"""Hierarchical vs flat allreduce across groups: the ResNet-50 v1 gradient set (193 arrays,
97.6 MiB) reduced by the tensor collectives (fused buckets, as Hybrid.pushpull) on --ranks
ranks in groups of --group-size, with the emulated link between groups (MXKV_THROTTLE_MBPS,
one per group shared by its ranks, charged for the bytes each algorithm really sends
across) at each --mbps (0: no
emulation, the machine's own speed), and flat with MXKV_ALGO=ring as well as auto:
  flat           one allreduce over all ranks (MXKV_HIERARCHY=off; auto: the algorithm table),
  flat_ring      the same, forced ring (what a ring over hosts sends across),
  hierarchical   reduce-scatter inside each group, slices allreduced across groups,
                 allgather inside (MXKV_HIERARCHY=on), bucket after bucket in a pipeline:
                 one bucket crosses while the next is reduced inside the group;
                 across groups auto takes the ring,
  hierarchical_rhd  the same with MXKV_ALGO=rhd (what the algorithm table, measured on
                 one machine, chose across groups before: not in the default --methods).
All run in one MPI job, interleaved repetition by repetition in shuffled order
(OMP_NUM_THREADS=--threads); a repetition's time is the slowest rank's; medians. Bytes
across groups per allreduce: the sum over ranks and the largest rank's (the busiest link).
With --hosts H [H ...] (root): also on H emulated hosts of --group-size ranks each, one
group per host, every host's link shaped to each --mbps (its ranks share it, as a NIC;
no throttle), and each figure beside the link's limit (emulated_hosts.py: each host must
send 2 (H-1)/H of the gradient through its link; halved with --compress fp16), and
beside the most of the link one TCP stream can carry (tcp_stream.py: the frames' headers
take 4.4 % at MTU 1500; one stream h1 -> h2 measured before each job).
Each figure also as nccl-tests gives it (the bus bandwidth: the vector's bytes over the
time, times 2 (n-1)/n for n ranks). Prints a table and writes hierarchy.json and
hierarchy.png to --out.

    python examples/benchmarks/hierarchy.py [--ranks 4] [--group-size 2] [--mbps 0 1000]
    python examples/benchmarks/hierarchy.py --hosts 2 3 4 --group-size 2 --mbps 1000
"""

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from typing import Dict, List

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import tcp_stream  # noqa: E402

from mxkv_hybrid.testing.cluster import MTU  # noqa: E402

from emulated_hosts import (  # noqa: E402
    add_cluster_option,
    allreduce_limit_seconds,
    hosts_of,
    launch_on_hosts,
    require_emulated_hosts,
)
from job_output import json_lines  # noqa: E402
from model_shapes import resnet50_shapes  # noqa: E402
from timing import interleaved, seconds  # noqa: E402

METHODS = {
    "flat": ("off", "auto"),
    "flat_ring": ("off", "ring"),
    "hierarchical": ("on", "auto"),
    "hierarchical_rhd": ("on", "rhd"),
}
DEFAULT_METHODS = ["flat", "flat_ring", "hierarchical"]


def worker(group_size: int, link_speeds: List[float], reps: int, methods: List[str]) -> None:
    """One rank of the MPI job; rank 0 prints one JSON line per (link, method)."""
    import mxnet as mx
    from mpi4py import MPI

    import mxkv_hybrid  # noqa: F401
    from mxkv_hybrid.comm.collectives import TensorCollectives
    from mxkv_hybrid.comm.topology import groups
    from mxkv_hybrid.config import Config

    comm = MPI.COMM_WORLD
    base = Config.from_environment()
    this_group = groups(group_size)
    shapes = resnet50_shapes()
    arrays = [[mx.nd.ones(s)] for s in shapes]
    keys = list(range(len(arrays)))
    runs = {}
    for mbps in link_speeds:
        for method in methods:
            hierarchy, algorithm = METHODS[method]
            config = dataclasses.replace(base, throttle_mbps=mbps, algorithm=algorithm)
            runs[(mbps, method)] = TensorCollectives(comm, config, this_group, hierarchy=hierarchy)

    def once(collectives) -> tuple:
        """(seconds of the slowest rank, bytes sent across groups by each rank)."""
        before = collectives.bytes_sent_across
        comm.Barrier()
        elapsed = seconds(lambda: collectives.allreduce("allreduce", keys, arrays, arrays, True))
        return comm.allreduce(elapsed, op=MPI.MAX), comm.allgather(
            collectives.bytes_sent_across - before
        )

    across: Dict[tuple, List[int]] = {}

    def timed(run) -> float:
        elapsed, across[run] = once(runs[run])
        return elapsed

    times = interleaved(runs, reps, timed)
    if comm.rank == 0:
        for (mbps, method), values in times.items():
            print(
                json.dumps(
                    {
                        "mbps": mbps,
                        "method": method,
                        "times": values,
                        "bytes_across_per_rank": across[(mbps, method)],
                        "ranks": comm.size,
                        "group_size": this_group.group_comm.size,
                        "groups": this_group.num_groups,
                        "gradient_bytes": 4 * sum(int(np.prod(s)) for s in shapes),
                    }
                ),
                flush=True,
            )


def plot(rows: List[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = list(
        dict.fromkeys((r["where"], r["groups"], r["group_size"], r["mbps"]) for r in rows)
    )
    fig, (left, right) = plt.subplots(1, 2, figsize=(max(11, 2.2 * len(settings)), 4.2))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    width = 0.8 / len(methods)
    for i, method in enumerate(methods):
        ours = [
            next(
                r
                for r in rows
                if (r["where"], r["groups"], r["group_size"], r["mbps"]) == setting
                and r["method"] == method
            )
            for setting in settings
        ]
        positions = [j + i * width for j in range(len(settings))]
        left.bar(positions, [r["median_ms"] for r in ours], width, label=method)
        right.bar(positions, [r["across_max_mb"] for r in ours], width, label=method)
    limits = {
        "limit_ms": ("black", "link limit"),
        "payload_limit_ms": ("grey", "TCP payload limit"),
    }
    for j, setting in enumerate(settings):
        row = next(
            r for r in rows if (r["where"], r["groups"], r["group_size"], r["mbps"]) == setting
        )
        for key, (color, label) in limits.items():
            if row[key] and (key == "limit_ms" or row[key] != row["limit_ms"]):
                left.hlines(
                    row[key],
                    j - width / 2,
                    j + (len(methods) - 0.5) * width,
                    colors=color,
                    label=label if label not in left.get_legend_handles_labels()[1] else None,
                )
    for ax in (left, right):
        ax.set_xticks([j + (len(methods) - 1) * width / 2 for j in range(len(settings))])
        ax.set_xticklabels(
            [
                f"{where}\n{groups}x{size}, " + ("no link" if mbps == 0 else f"{mbps:g} Mbit/s")
                for where, groups, size, mbps in settings
            ],
            fontsize=8,
        )
        ax.legend(fontsize=8)
    left.set_ylabel("ms per allreduce (median, slowest rank)")
    right.set_ylabel("MiB sent across groups by the busiest rank")
    fig.suptitle(
        "ResNet-50 gradient set; groups x ranks; throttle: one link per rank, "
        "hosts: emulated hosts sharing one link each"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def run_on_this_machine(args: argparse.Namespace, env: dict) -> List[dict]:
    """Every rank here, the link between groups emulated by the throttle (per rank)."""
    print(
        f"-- {args.ranks} ranks in groups of {args.group_size}, links {args.mbps} Mbit/s "
        f"(throttle), {args.reps} repetitions, OMP_NUM_THREADS={args.threads} ...",
        flush=True,
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mxkv_hybrid.launch",
            "-n",
            str(args.ranks),
            "--timeout",
            "1800",
            "--",
            "python",
            __file__,
            "--worker",
            "--group-size",
            str(args.group_size),
            "--reps",
            str(args.reps),
            "--methods",
            *args.methods,
            "--mbps",
            *map(str, args.mbps),
        ],
        capture_output=True,
        check=False,
        text=True,
        env=env,
    )
    if done.returncode != 0:
        sys.exit(f"benchmark job failed:\n{done.stdout}\n{done.stderr}")
    return [dict(row, where="throttle") for row in json_lines(done.stdout)]


def run_on_hosts(args: argparse.Namespace, env: dict, hosts: int, mbps: float) -> List[dict]:
    """One group per host (emulated, their links shaped to `mbps`, or external), no
    throttle."""
    print(
        f"-- {hosts} {args.cluster} hosts x {args.group_size} ranks, host links {mbps:g} Mbit/s, "
        f"{args.reps} repetitions, OMP_NUM_THREADS={args.threads} ...",
        flush=True,
    )
    with hosts_of(args.cluster, hosts, mbps) as cluster:
        stream_mbps = tcp_stream.measure(cluster)
        print(
            f"   one TCP stream h1 -> h2: {stream_mbps:.1f} Mbit/s of payload "
            f"(the most through {mbps:g} Mbit/s at MTU {MTU}: {tcp_stream.payload_mbps(mbps):.1f})",
            flush=True,
        )
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
                "--methods",
                *args.methods,
                "--mbps",
                "0",
            ],
            env,
        )
    if done.returncode != 0:
        sys.exit(f"benchmark job on emulated hosts failed:\n{done.stdout}\n{done.stderr}")
    return [
        dict(row, mbps=mbps, where="hosts", stream_mbps=stream_mbps)
        for row in json_lines(done.stdout)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument(
        "--mbps",
        type=float,
        nargs="+",
        default=[0, 1000],
        help="emulated link speeds between groups (0: none)",
    )
    parser.add_argument(
        "--hosts",
        type=int,
        nargs="*",
        default=[],
        help="also on this many emulated hosts (each; needs root), one group "
        "of --group-size ranks per host, at each non-zero --mbps",
    )
    parser.add_argument(
        "--compress",
        choices=["none", "fp16", "bf16"],
        default="none",
        help="MXKV_COMPRESS: the wire format between groups",
    )
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every rank")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    add_cluster_option(parser)
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=list(METHODS),
        default=DEFAULT_METHODS,
        help="what to run beside flat (always run: the other figures' baseline)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.group_size, args.mbps, args.reps, args.methods)
    args.methods = ["flat"] + [m for m in args.methods if m != "flat"]
    if args.hosts and args.cluster == "emulated":
        require_emulated_hosts()

    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MXKV_COMPRESS=args.compress)
    rows = run_on_this_machine(args, env) if args.ranks else []
    for hosts in args.hosts:
        for mbps in [m for m in args.mbps if m]:
            rows += run_on_hosts(args, env, hosts, mbps)
    wire = 0.5 if args.compress != "none" else 1.0
    for r in rows:
        r["median_ms"] = 1e3 * float(np.median(r["times"]))
        r["across_total_mb"] = sum(r["bytes_across_per_rank"]) / 2**20
        r["across_max_mb"] = max(r["bytes_across_per_rank"]) / 2**20
        r["limit_ms"] = (
            1e3 * allreduce_limit_seconds(int(r["gradient_bytes"] * wire), r["groups"], r["mbps"])
            if r["mbps"]
            else None
        )
        # on hosts, TCP's payload shares the link with every frame's headers
        r["payload_limit_ms"] = (
            r["limit_ms"] * r["mbps"] / tcp_stream.payload_mbps(r["mbps"])
            if r["limit_ms"] and r["where"] == "hosts"
            else r["limit_ms"]
        )
        # nccl-tests' figures (doc/PERFORMANCE.md there): the algorithm bandwidth, the
        # vector's bytes over the time, and the bus bandwidth, that times 2 (n-1)/n for n
        # ranks; with one rank per host it reads as the link's speed at the limit
        r["algbw_gbps"] = r["gradient_bytes"] / (r["median_ms"] / 1e3) / 1e9
        r["busbw_gbps"] = r["algbw_gbps"] * 2 * (r["ranks"] - 1) / r["ranks"]
    first = rows[0]
    print(
        f"\nResNet-50 gradient set ({first['gradient_bytes'] / 2**20:.1f} MiB, wire "
        f"{args.compress}); median of {args.reps}, slowest rank; limit: the bytes each host "
        "(group) must send at the least over the link's rate; payload: over the most of it a TCP "
        "stream can carry (tcp_stream.py)"
    )
    print(
        f"{'where':>9} {'groups':>9} {'link':>12} {'method':>13} {'ms':>9} {'limit ms':>9} "
        f"{'/ limit':>8} {'/ payload':>9} {'busbw GB/s':>11} {'MiB across (busiest rank)':>26} "
        f"{'flat / this':>12}"
    )
    for r in rows:
        flat = next(
            f
            for f in rows
            if f["mbps"] == r["mbps"]
            and f["method"] == "flat"
            and f["where"] == r["where"]
            and f["groups"] == r["groups"]
        )
        link = "none" if r["mbps"] == 0 else f"{r['mbps']:g} Mbit/s"
        limit = (
            f"{r['limit_ms']:9.0f} {r['median_ms'] / r['limit_ms']:7.2f}x "
            f"{r['median_ms'] / r['payload_limit_ms']:8.3f}x"
            if r["limit_ms"]
            else f"{'':>9} {'':>8} {'':>9}"
        )
        print(
            f"{r['where']:>9} {r['groups']:>3} x {r['group_size']:<3} {link:>12} "
            f"{r['method']:>13} {r['median_ms']:9.1f} {limit} {r['busbw_gbps']:11.3f} "
            f"{r['across_max_mb']:26.1f} "
            f"{flat['median_ms'] / r['median_ms']:11.2f}x"
        )
    os.makedirs(args.out, exist_ok=True)
    name = ("hierarchy_hosts" if args.hosts else "hierarchy") + (
        "" if args.compress == "none" else f"_{args.compress}"
    )
    with open(os.path.join(args.out, f"{name}.json"), "w") as f:
        json.dump(
            {
                "omp_num_threads": args.threads,
                "reps": args.reps,
                "compress": args.compress,
                "results": rows,
            },
            f,
            indent=1,
        )
    plot(rows, os.path.join(args.out, f"{name}.png"))
    print(f"\nwrote {args.out}/{name}.json and {name}.png")


if __name__ == "__main__":
    main()
