"""Allreduce benchmark: Hybrid.pushpull vs one flat MPI_Allreduce vs MXNet's dist_sync.

    python examples/benchmarks/allreduce.py                  # 2 and 4 ranks, writes results/
    python examples/benchmarks/allreduce.py --ranks 2 --quick

For each rank count, message sizes from 1 KB to 100 MB (float32, one array) and the
gradient set of ResNet-50 v1 (MXNet model zoo: 193 arrays, 25.6 M floats) are reduced by
  hybrid     Hybrid.pushpull over all arrays (fused buckets, C++ kernels, averaged),
  mpi_flat   one MPI_Allreduce (mpi4py) of a single flat buffer of the same bytes,
  dist_sync  MXNet's native ps-lite kvstore, push + pull, 2 servers, every rank a worker.
hybrid and mpi_flat run in the same MPI job, interleaved repetition by repetition. A
repetition's time is the slowest rank's; the table shows medians. Prints a table and
writes allreduce.json and allreduce.png to --out.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from typing import Dict, List

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from job_output import json_lines  # noqa: E402

SIZES = [1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 100 << 20]
RESNET50 = "resnet50"


def repetitions(nbytes: int, quick: bool) -> int:
    reps = 50 if nbytes <= (1 << 20) else 20 if nbytes <= (16 << 20) else 8
    return max(3, reps // 4) if quick else reps


def workloads(quick: bool) -> List[tuple]:
    """[(name, list of array shapes, repetitions)]."""
    sizes = SIZES[::2] + SIZES[-1:] if quick else SIZES
    return [(str(n), [(n // 4,)], repetitions(n, quick)) for n in sizes] + \
           [(RESNET50, resnet50_shapes(), repetitions(100 << 20, quick))]


def resnet50_shapes() -> List[tuple]:
    import mxnet as mx
    net = mx.gluon.model_zoo.vision.resnet50_v1()
    net.initialize()
    net(mx.nd.zeros((1, 3, 32, 32)))
    return [p.shape for p in net.collect_params().values() if p.grad_req != "null"]


# ---- workers -------------------------------------------------------------------------
def worker_mpi(quick: bool) -> None:
    """Runs under mxkv-launch: hybrid and mpi_flat, interleaved; rank 0 prints JSON lines."""
    import mxnet as mx
    from mpi4py import MPI

    import mxkv_hybrid  # noqa: F401

    kv = mx.kv.create("hybrid")
    comm = MPI.COMM_WORLD

    def timed(fn) -> float:
        comm.Barrier()
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start
        return comm.allreduce(elapsed, op=MPI.MAX)

    for name, shapes, reps in workloads(quick):
        arrays = [mx.nd.ones(s) for s in shapes]
        keys = list(range(len(arrays)))
        flat = np.ones(sum(int(np.prod(s)) for s in shapes), dtype=np.float32)
        mx.nd.waitall()
        kv.pushpull(keys, arrays)  # warm-up: buffers, plan, page faults
        comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)
        times: Dict[str, List[float]] = {"hybrid": [], "mpi_flat": []}
        for _ in range(reps):
            times["hybrid"].append(timed(lambda: kv.pushpull(keys, arrays)))
            times["mpi_flat"].append(timed(lambda: comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)))
        if comm.rank == 0:
            for method, values in times.items():
                print(json.dumps({"workload": name, "bytes": flat.nbytes, "arrays": len(arrays),
                                  "method": method, "ranks": comm.size, "times": values}), flush=True)


def worker_dist_sync(quick: bool) -> None:
    """Runs as a native ps-lite worker: push + pull of the same workloads."""
    import mxnet as mx

    kv = mx.kv.create("dist_sync")
    for index, (name, shapes, reps) in enumerate(workloads(quick)):
        keys = [f"{index}_{i}" for i in range(len(shapes))]
        arrays = [mx.nd.ones(s) for s in shapes]
        outs = [mx.nd.zeros(s) for s in shapes]
        kv.init(keys, arrays)
        kv.push(keys, arrays)
        kv.pull(keys, out=outs)
        mx.nd.waitall()
        values = []
        for _ in range(reps):
            kv._barrier()
            start = time.perf_counter()
            kv.push(keys, arrays)
            kv.pull(keys, out=outs)
            mx.nd.waitall()
            values.append(time.perf_counter() - start)
        if kv.rank == 0:
            print(json.dumps({"workload": name, "bytes": sum(a.size * 4 for a in arrays),
                              "arrays": len(arrays), "method": "dist_sync",
                              "ranks": kv.num_workers, "times": values}), flush=True)
    kv._barrier()


# ---- driver --------------------------------------------------------------------------
def measure(ranks: int, quick: bool, skip_dist_sync: bool) -> List[dict]:
    flag = ["--quick"] if quick else []
    print(f"-- {ranks} ranks: hybrid and mpi_flat ...", flush=True)
    done = subprocess.run([sys.executable, "-m", "mxkv_hybrid.launch", "-n", str(ranks),
                           "--timeout", "1200", "--", "python", __file__, "--worker", "mpi", *flag],
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"benchmark job failed:\n{done.stdout}\n{done.stderr}")
    rows = json_lines(done.stdout)
    if not skip_dist_sync:
        from ps_job import run_ps_job
        print(f"-- {ranks} ranks: dist_sync with 2 servers ...", flush=True)
        outputs = run_ps_job([sys.executable, __file__, "--worker", "dist_sync", *flag],
                             num_workers=ranks, num_servers=2)
        rows += [r for out in outputs for r in json_lines(out)]
    for row in rows:
        row["median_s"] = float(np.median(row["times"]))
    return rows


def label(workload: str) -> str:
    if workload == RESNET50:
        return "ResNet-50 set"
    n = int(workload)
    return f"{n >> 20} MB" if n >= 1 << 20 else f"{n >> 10} KB"


def print_table(rows: List[dict]) -> None:
    methods = ["hybrid", "mpi_flat", "dist_sync"]
    for ranks in sorted({r["ranks"] for r in rows}):
        print(f"\n{ranks} ranks, median ms (ratio = hybrid / other)")
        print(f"{'workload':>14} {'arrays':>6} " + " ".join(f"{m:>10}" for m in methods) +
              f" {'vs mpi':>7} {'vs dist':>8}")
        for workload in dict.fromkeys(r["workload"] for r in rows):
            got = {r["method"]: r for r in rows if r["ranks"] == ranks and r["workload"] == workload}
            if "hybrid" not in got:
                continue
            ms = {m: got[m]["median_s"] * 1e3 for m in methods if m in got}
            cells = " ".join(f"{ms[m]:10.3f}" if m in ms else f"{'-':>10}" for m in methods)
            vs_mpi = ms["hybrid"] / ms["mpi_flat"]
            vs_dist = f"{ms['hybrid'] / ms['dist_sync']:8.3f}" if "dist_sync" in ms else f"{'-':>8}"
            print(f"{label(workload):>14} {got['hybrid']['arrays']:>6} {cells} {vs_mpi:7.3f} {vs_dist}")


def plot(rows: List[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rank_counts = sorted({r["ranks"] for r in rows})
    fig, axes = plt.subplots(1, len(rank_counts), figsize=(6 * len(rank_counts), 4.5), squeeze=False)
    for ax, ranks in zip(axes[0], rank_counts):
        for method, style in (("hybrid", "o-"), ("mpi_flat", "s--"), ("dist_sync", "^:")):
            pts = sorted((r["bytes"], r["median_s"]) for r in rows if r["ranks"] == ranks
                         and r["method"] == method and r["workload"] != RESNET50)
            if pts:
                x, t = zip(*pts)
                ax.loglog(x, np.array(x) / np.array(t) / 1e9, style, label=method)
            resnet = [r for r in rows if r["ranks"] == ranks and r["method"] == method
                      and r["workload"] == RESNET50]
            if resnet:
                ax.plot(resnet[0]["bytes"], resnet[0]["bytes"] / resnet[0]["median_s"] / 1e9,
                        "*", markersize=14, color=ax.lines[-1].get_color(),
                        label=f"{method}, ResNet-50 set")
        ax.set_title(f"{ranks} ranks (algorithm bandwidth, median)")
        ax.set_xlabel("bytes reduced")
        ax.set_ylabel("GB/s = bytes / time")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--out", default=os.path.join(HERE, "results"),
                        help="folder for allreduce.json/.png (default: examples/benchmarks/results)")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    parser.add_argument("--skip-dist-sync", action="store_true")
    parser.add_argument("--worker", choices=["mpi", "dist_sync"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "mpi":
        return worker_mpi(args.quick)
    if args.worker == "dist_sync":
        return worker_dist_sync(args.quick)

    rows = [row for ranks in args.ranks for row in measure(ranks, args.quick, args.skip_dist_sync)]
    print_table(rows)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "allreduce.json"), "w") as f:
        json.dump({"settings": {"MXKV_BUCKET_MB": os.environ.get("MXKV_BUCKET_MB", "default"),
                                "cpus": os.cpu_count()}, "rows": rows}, f, indent=1)
    plot(rows, os.path.join(args.out, "allreduce.png"))
    print(f"\nwrote {args.out}/allreduce.json and {args.out}/allreduce.png")


if __name__ == "__main__":
    main()
