"""One elastic exchange (mode easgd) of the ResNet-50 v1 weight set (193 arrays, 97.6 MiB)
with the centre variable over ps-lite (MXKV_TRANSPORT=ps, 1 and 2 servers) and over
remote memory (MXKV_TRANSPORT=rma: MPI windows on the group leaders, one-sided reads and
accumulates), for 2 and 4 groups of 1 rank, each configuration its own job (the ps ones
with --one-job, so all groups are in one MPI job and start together):
  alone     the last group exchanges while the others wait (latency of one exchange;
            with --hosts its link to the servers on h1 is crossed),
  together  every group exchanges at once (the slowest group's time: contention).
Ranks done with their part sleep in a polled barrier instead of spinning in MPI.
An exchange is what the Trainer hook runs every MXKV_TAU steps: read c, e = alpha (x - c),
x -= e, c += e. Rounds of all configurations in shuffled order (--rounds), --reps
exchanges per job and kind; OMP_NUM_THREADS=--threads everywhere; medians over all.
With --hosts (root): each group on an emulated host of its own (emulated_hosts.py; with
--cluster external on hosts someone else set up, external_hosts.py), every host's link
shaped to --mbps, the ps-lite servers on h1; each figure beside the link's
limit: the bytes the busiest link carries each way over the rate (limit_bytes: the centre
read one way and the elastic difference sent the other, at once on a full-duplex link).
Prints a table and writes remote_centre.json and remote_centre.png to --out.

    python examples/benchmarks/remote_centre.py [--groups 2 4] [--rounds 2] [--reps 5]
    python examples/benchmarks/remote_centre.py --hosts --groups 2 --mbps 1000
"""

import argparse
import json
import os
import random
import subprocess
import sys
from typing import Dict, List, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from emulated_hosts import add_cluster_option, hosts_of, launch_on_hosts  # noqa: E402
from job_output import json_lines  # noqa: E402
from model_shapes import resnet50_shapes  # noqa: E402
from timing import seconds  # noqa: E402

TRANSPORTS = {"ps, 1 server": ("ps", 1), "ps, 2 servers": ("ps", 2), "rma": ("rma", 0)}


def worker(reps: int) -> None:
    """One rank (= one group) of a job; rank 0 prints one JSON line per kind."""
    import mxnet as mx
    from mpi4py import MPI

    import mxkv_hybrid  # noqa: F401
    from mxkv_hybrid.comm.topology import wait_for_leader

    comm = MPI.COMM_WORLD
    kv = mx.kv.create("hybrid")
    shapes = resnet50_shapes()
    keys = list(range(len(shapes)))
    weights = [mx.nd.ones(s) for s in shapes]
    kv.broadcast_weights(keys, [w.copy() for w in weights], out=weights)
    arrays = [[w] for w in weights]

    def exchange() -> None:
        kv.averaging.exchange(keys, arrays)
        mx.nd.waitall()

    times: Dict[str, List[float]] = {"alone": [], "together": []}
    exchange()  # warm-up: buffers, first messages
    for _ in range(reps):
        for kind in ("alone", "together"):
            comm.Barrier()
            # alone: the last group, whose host (--hosts) is not the servers' (h1)
            exchanges = kind == "together" or comm.rank == comm.size - 1
            mine = seconds(exchange) if exchanges else 0.0
            # ranks without an exchange left sleep (2 cores: spinning ones would slow the rest)
            wait_for_leader(comm, is_leader=False)
            times[kind].append(comm.allreduce(mine, op=MPI.MAX))
    if comm.rank == 0:
        for kind, values in times.items():
            print(
                json.dumps(
                    {
                        "kind": kind,
                        "times": values,
                        "groups": comm.size,
                        "weight_bytes": 4 * sum(int(np.prod(s)) for s in shapes),
                    }
                ),
                flush=True,
            )
    kv.close()


def run_job(
    transport: str,
    servers: int,
    groups: int,
    reps: int,
    env: dict,
    mbps: float = 0,
    cluster: str = "emulated",
) -> List[dict]:
    """One job of `groups` groups of 1 rank (with `mbps`: on as many hosts, emulated or
    external, hosts_of's `cluster`)."""
    options = ["--group-size", "1"]
    if transport == "ps":
        options += ["--servers", str(servers), "--one-job"]
    command = ["python", __file__, "--worker", "--reps", str(reps)]
    env = dict(env, MXKV_MODE="easgd", MXKV_TRANSPORT=transport, MXKV_EASGD_ALPHA="0.1")
    if mbps:
        with hosts_of(cluster, groups, mbps) as hosts:
            done = launch_on_hosts(hosts, 1, command, env, options)
    else:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "mxkv_hybrid.launch",
                "-n",
                str(groups),
                "--timeout",
                "1200",
                *options,
                "--",
                *command,
            ],
            capture_output=True,
            check=False,
            text=True,
            env=env,
        )
    if done.returncode != 0:
        sys.exit(f"{transport} job with {groups} groups failed:\n{done.stdout}\n{done.stderr}")
    return json_lines(done.stdout)


def limit_bytes(transport: str, groups: int, kind: str, weight_bytes: int) -> float:
    """The bytes the busiest host link carries each way in one exchange (--hosts).
    ps-lite, servers on h1: a group elsewhere pulls the weights and pushes as much; with
    every group at once, h1's link carries every other group's. rma: a group reads and
    adds the (groups - 1) / groups of the centre that other hosts hold; at once, each host
    also serves the others' reads of its share and receives their adds: twice that."""
    if transport == "rma":
        return weight_bytes * (groups - 1) / groups * (2 if kind == "together" else 1)
    return weight_bytes * ((groups - 1) if kind == "together" else 1)


def plot(rows: List[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({r["groups"] for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / len(TRANSPORTS)
    for ax, kind in zip(axes, ("alone", "together")):
        for i, name in enumerate(TRANSPORTS):
            mine = [
                next(
                    r
                    for r in rows
                    if r["groups"] == g and r["transport"] == name and r["kind"] == kind
                )
                for g in groups
            ]
            ax.bar(
                [j + i * width for j in range(len(groups))],
                [r["median_ms"] for r in mine],
                width,
                label=name,
            )
        ax.set_xticks([j + width for j in range(len(groups))])
        ax.set_xticklabels([f"{g} groups" for g in groups])
        ax.set_ylabel("ms per elastic exchange (median)")
        ax.set_title("one group exchanges" if kind == "alone" else "every group at once (slowest)")
        ax.legend(fontsize=8)
    fig.suptitle(
        "easgd: one exchange of the ResNet-50 weights (97.6 MiB), centre over ps-lite "
        "or remote memory"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--groups", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5, help="exchanges per job and kind")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS everywhere")
    parser.add_argument(
        "--hosts",
        action="store_true",
        help="each group on an emulated host of its own (needs root)",
    )
    parser.add_argument(
        "--mbps", type=float, default=1000, help="with --hosts: the rate of every host's link"
    )
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    add_cluster_option(parser)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.reps)

    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    runs: List[Tuple[str, int]] = [(name, g) for g in args.groups for name in TRANSPORTS]
    times: Dict[Tuple[str, int, str], List[float]] = {}
    for round_ in range(args.rounds):
        random.Random(round_).shuffle(runs)
        for name, groups in runs:
            print(f"-- round {round_ + 1}/{args.rounds}: {name}, {groups} groups ...", flush=True)
            transport, servers = TRANSPORTS[name]
            for row in run_job(
                transport,
                servers,
                groups,
                args.reps,
                env,
                args.mbps if args.hosts else 0,
                args.cluster,
            ):
                times.setdefault((name, groups, row["kind"]), []).extend(row["times"])
                weight_bytes = row["weight_bytes"]
    rows = [
        {
            "transport": name,
            "groups": groups,
            "kind": kind,
            "times": values,
            "median_ms": 1e3 * float(np.median(values)),
            "limit_ms": (
                1e3
                * limit_bytes(TRANSPORTS[name][0], groups, kind, weight_bytes)
                * 8
                / (args.mbps * 1e6)
                if args.hosts
                else None
            ),
        }
        for (name, groups, kind), values in sorted(times.items())
    ]
    where = (
        f"each group on an emulated host, links {args.mbps:g} Mbit/s, servers on h1"
        if args.hosts
        else "one machine"
    )
    print(
        f"\nResNet-50 weights ({weight_bytes / 2**20:.1f} MiB), one elastic exchange, groups "
        f"of 1 rank ({where}), OMP_NUM_THREADS={args.threads}; medians of {args.rounds} x "
        f"{args.reps}"
    )
    print(
        f"{'groups':>6} {'kind':>9} {'transport':>14} {'ms':>9} {'best ps / this':>15}"
        + (f" {'limit ms':>9} {'/ limit':>8}" if args.hosts else "")
    )
    for r in sorted(rows, key=lambda r: (r["groups"], r["kind"], r["transport"])):
        best_ps = min(
            o["median_ms"]
            for o in rows
            if o["groups"] == r["groups"]
            and o["kind"] == r["kind"]
            and o["transport"].startswith("ps")
        )
        print(
            f"{r['groups']:>6} {r['kind']:>9} {r['transport']:>14} {r['median_ms']:9.1f} "
            f"{best_ps / r['median_ms']:14.2f}x"
            + (
                f" {r['limit_ms']:9.0f} {r['median_ms'] / r['limit_ms']:7.2f}x"
                if args.hosts
                else ""
            )
        )
    os.makedirs(args.out, exist_ok=True)
    name = "remote_centre_hosts" if args.hosts else "remote_centre"
    with open(os.path.join(args.out, f"{name}.json"), "w") as f:
        json.dump(
            {
                "omp_num_threads": args.threads,
                "rounds": args.rounds,
                "reps": args.reps,
                "weight_bytes": weight_bytes,
                "hosts": args.hosts,
                "mbps": args.mbps if args.hosts else None,
                "results": rows,
            },
            f,
            indent=1,
        )
    plot(rows, os.path.join(args.out, f"{name}.png"))
    print(f"\nwrote {args.out}/{name}.json and {name}.png")


if __name__ == "__main__":
    main()
