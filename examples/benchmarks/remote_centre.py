"""One elastic exchange (mode easgd) of the ResNet-50 v1 weight set (193 arrays, 97.6 MiB)
with the centre variable over ps-lite (MXKV_TRANSPORT=ps, 1 and 2 servers) and over
remote memory (MXKV_TRANSPORT=rma: MPI windows on the group leaders, one-sided reads and
accumulates), for 2 and 4 groups of 1 rank, each configuration its own job (the ps ones
with --one-job, so all groups are in one MPI job and start together):
  alone     one group exchanges while the others wait (latency of one exchange),
  together  every group exchanges at once (the slowest group's time: contention).
Ranks done with their part sleep in a polled barrier instead of spinning in MPI.
An exchange is what the Trainer hook runs every MXKV_TAU steps: read c, e = alpha (x - c),
x -= e, c += e. Rounds of all configurations in shuffled order (--rounds), --reps
exchanges per job and kind; OMP_NUM_THREADS=--threads everywhere; medians over all.
Prints a table and writes remote_centre.json and remote_centre.png to --out.

    python examples/benchmarks/remote_centre.py [--groups 2 4] [--rounds 2] [--reps 5]
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
            exchanges = kind == "together" or comm.rank == 0
            mine = seconds(exchange) if exchanges else 0.0
            # ranks without an exchange left sleep (2 cores: spinning ones would slow the rest)
            wait_for_leader(comm, is_leader=False)
            times[kind].append(comm.allreduce(mine, op=MPI.MAX))
    if comm.rank == 0:
        for kind, values in times.items():
            print(json.dumps({"kind": kind, "times": values, "groups": comm.size,
                              "weight_bytes": 4 * sum(int(np.prod(s)) for s in shapes)}),
                  flush=True)
    kv.close()


def run_job(transport: str, servers: int, groups: int, reps: int, env: dict) -> List[dict]:
    options = ["--group-size", "1"]
    if transport == "ps":
        options += ["--servers", str(servers), "--one-job"]
    done = subprocess.run(
        [sys.executable, "-m", "mxkv_hybrid.launch", "-n", str(groups), "--timeout", "1200",
         *options, "--", "python", __file__, "--worker", "--reps", str(reps)],
        capture_output=True, text=True,
        env=dict(env, MXKV_MODE="easgd", MXKV_TRANSPORT=transport, MXKV_EASGD_ALPHA="0.1"))
    if done.returncode != 0:
        sys.exit(f"{transport} job with {groups} groups failed:\n{done.stdout}\n{done.stderr}")
    return json_lines(done.stdout)


def plot(rows: List[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({r["groups"] for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / len(TRANSPORTS)
    for ax, kind in zip(axes, ("alone", "together")):
        for i, name in enumerate(TRANSPORTS):
            mine = [next(r for r in rows if r["groups"] == g and r["transport"] == name
                         and r["kind"] == kind) for g in groups]
            ax.bar([j + i * width for j in range(len(groups))], [r["median_ms"] for r in mine],
                   width, label=name)
        ax.set_xticks([j + width for j in range(len(groups))])
        ax.set_xticklabels([f"{g} groups" for g in groups])
        ax.set_ylabel("ms per elastic exchange (median)")
        ax.set_title("one group exchanges" if kind == "alone" else "every group at once (slowest)")
        ax.legend(fontsize=8)
    fig.suptitle("easgd: one exchange of the ResNet-50 weights (97.6 MiB), centre over ps-lite "
                 "or remote memory")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5, help="exchanges per job and kind")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS everywhere")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
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
            for row in run_job(transport, servers, groups, args.reps, env):
                times.setdefault((name, groups, row["kind"]), []).extend(row["times"])
                weight_bytes = row["weight_bytes"]
    rows = [{"transport": name, "groups": groups, "kind": kind, "times": values,
             "median_ms": 1e3 * float(np.median(values))}
            for (name, groups, kind), values in sorted(times.items())]
    print(f"\nResNet-50 weights ({weight_bytes / 2 ** 20:.1f} MiB), one elastic exchange, groups "
          f"of 1 rank, OMP_NUM_THREADS={args.threads}; medians of {args.rounds} x {args.reps}")
    print(f"{'groups':>6} {'kind':>9} {'transport':>14} {'ms':>9} {'best ps / this':>15}")
    for r in sorted(rows, key=lambda r: (r["groups"], r["kind"], r["transport"])):
        best_ps = min(o["median_ms"] for o in rows if o["groups"] == r["groups"]
                      and o["kind"] == r["kind"] and o["transport"].startswith("ps"))
        print(f"{r['groups']:>6} {r['kind']:>9} {r['transport']:>14} {r['median_ms']:9.1f} "
              f"{best_ps / r['median_ms']:14.2f}x")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "remote_centre.json"), "w") as f:
        json.dump({"omp_num_threads": args.threads, "rounds": args.rounds, "reps": args.reps,
                   "weight_bytes": weight_bytes, "results": rows}, f, indent=1)
    plot(rows, os.path.join(args.out, "remote_centre.png"))
    print(f"\nwrote {args.out}/remote_centre.json and remote_centre.png")


if __name__ == "__main__":
    main()
