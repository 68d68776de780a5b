"""What staging through pinned host buffers costs: Hybrid.pushpull of the ResNet-50
gradient set with the arrays on `cpu` (used in place) vs on `cpu_pinned` (a device that is
not `cpu`: copied into pinned buffers, reduced, copied back, exactly as a GPU's arrays are),
with one and two devices per rank, in one MPI job, interleaved in shuffled order.

    python examples/benchmarks/device_staging.py              # 2 ranks, writes results/
    python examples/benchmarks/device_staging.py --ranks 2 --reps 5

Methods (per rank: the gradient arrays of ResNet-50 v1 from MXNet's model zoo, 25.6 M floats):
  cpu, cpu_pinned          one device per rank,
  cpu x2, cpu_pinned x2    two devices per rank ([cpu(0), cpu(1)] / [cpu_pinned(0), cpu_pinned(1)]),
  copies x2                only the staging copies of `cpu_pinned x2` (in, and back to both
                           devices), no reduction: what staging adds at most.
A repetition's time is the slowest rank's, ended when MXNet's engine is idle; the table shows
medians and the ratio to `cpu` with the same number of devices. OMP_NUM_THREADS is set (1 by
default) for every rank. Prints a table and writes device_staging.json and .png to --out.
"""

import argparse
import json
import os
import random
import subprocess
import sys
from typing import Dict, List

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from job_output import json_lines  # noqa: E402
from model_shapes import resnet50_shapes  # noqa: E402
from timing import seconds  # noqa: E402

METHODS = ["cpu", "cpu_pinned", "cpu x2", "cpu_pinned x2", "copies x2"]
BASELINE = {
    "cpu": "cpu",
    "cpu_pinned": "cpu",
    "cpu x2": "cpu x2",
    "cpu_pinned x2": "cpu x2",
    "copies x2": "cpu x2",
}


def worker(reps: int) -> None:
    """Runs under mxkv-launch; rank 0 prints one JSON line per method."""
    import mxnet as mx
    from mpi4py import MPI

    import mxkv_hybrid  # noqa: F401

    comm = MPI.COMM_WORLD
    kv = mx.kv.create("hybrid")
    shapes = resnet50_shapes()
    keys = list(range(len(shapes)))

    def arrays(context: str, devices: int) -> List[List[mx.nd.NDArray]]:
        make = getattr(mx, context)
        return [[mx.nd.ones(s, ctx=make(d)) for d in range(devices)] for s in shapes]

    sets = {
        "cpu": arrays("cpu", 1),
        "cpu_pinned": arrays("cpu_pinned", 1),
        "cpu x2": arrays("cpu", 2),
        "cpu_pinned x2": arrays("cpu_pinned", 2),
    }
    buffers = [mx.nd.empty(s, ctx=mx.cpu_pinned(0)) for s in shapes]

    def copies_only() -> None:
        for copies, buffer in zip(sets["cpu_pinned x2"], buffers):
            for copy in copies:
                copy.copyto(buffer)
            for copy in copies:
                buffer.copyto(copy)

    methods = {name: (lambda name=name: kv.pushpull(keys, sets[name])) for name in sets}
    methods["copies x2"] = copies_only

    def timed(call) -> float:
        comm.Barrier()
        elapsed = seconds(lambda: (call(), mx.nd.waitall()))
        return comm.allreduce(elapsed, op=MPI.MAX)

    for call in methods.values():
        timed(call)  # warm-up: buffers, bucket plans, page faults
    times: Dict[str, List[float]] = {name: [] for name in methods}
    for rep in range(reps):  # shuffled alike on every rank
        order = list(methods)
        random.Random(rep).shuffle(order)
        for name in order:
            times[name].append(timed(methods[name]))
    if comm.rank == 0:
        nbytes = sum(int(np.prod(s)) * 4 for s in shapes)
        for name, values in times.items():
            print(
                json.dumps(
                    {
                        "method": name,
                        "ranks": comm.size,
                        "bytes": nbytes,
                        "arrays": len(shapes),
                        "times": values,
                    }
                ),
                flush=True,
            )


def measure(ranks: int, reps: int, threads: int) -> List[dict]:
    print(f"-- {ranks} ranks, {reps} repetitions, OMP_NUM_THREADS={threads} ...", flush=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mxkv_hybrid.launch",
            "-n",
            str(ranks),
            "--timeout",
            "1200",
            "--",
            "python",
            __file__,
            "--worker",
            "--reps",
            str(reps),
        ],
        capture_output=True,
        check=False,
        text=True,
        env=env,
    )
    if done.returncode != 0:
        sys.exit(f"benchmark job failed:\n{done.stdout}\n{done.stderr}")
    rows = json_lines(done.stdout)
    for row in rows:
        row["median_ms"] = float(np.median(row["times"])) * 1e3
    return rows


def print_table(rows: List[dict]) -> None:
    for ranks in sorted({r["ranks"] for r in rows}):
        medians = {r["method"]: r["median_ms"] for r in rows if r["ranks"] == ranks}
        print(
            f"\n{ranks} ranks, ResNet-50 gradient set ({rows[0]['bytes'] / 2**20:.1f} MiB per "
            "device copy), median ms; ratio: to cpu with the same devices per rank"
        )
        print(f"{'method':>15} {'median ms':>10} {'ratio':>7}")
        for name in METHODS:
            ratio = medians[name] / medians[BASELINE[name]]
            print(f"{name:>15} {medians[name]:>10.1f} {ratio:>7.2f}")


def plot(rows: List[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 3.5))
    for offset, ranks in enumerate(sorted({r["ranks"] for r in rows})):
        medians = {r["method"]: r["median_ms"] for r in rows if r["ranks"] == ranks}
        positions = np.arange(len(METHODS)) + 0.4 * offset
        axes.bar(positions, [medians[m] for m in METHODS], width=0.4, label=f"{ranks} ranks")
    axes.set_xticks(np.arange(len(METHODS)))
    axes.set_xticklabels(METHODS)
    axes.set_ylabel("median ms per pushpull")
    axes.set_title("ResNet-50 gradient set: cpu arrays vs staged (cpu_pinned)")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, nargs="+", default=[2])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every rank")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.reps)
        return
    rows = [row for ranks in args.ranks for row in measure(ranks, args.reps, args.threads)]
    print_table(rows)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "device_staging.json"), "w") as f:
        json.dump({"threads": args.threads, "rows": rows}, f, indent=1)
    plot(rows, os.path.join(args.out, "device_staging.png"))
    print(f"\nwrote {args.out}/device_staging.json and device_staging.png")


if __name__ == "__main__":
    main()
