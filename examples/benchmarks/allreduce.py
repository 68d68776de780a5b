"""Allreduce benchmark: this package's algorithms and Hybrid.pushpull vs plain
MPI_Allreduce vs MXNet's dist_sync.

    python examples/benchmarks/allreduce.py                  # 2 and 4 ranks, writes results/
    python examples/benchmarks/allreduce.py --ranks 2 --quick

For each rank count, float32 vectors from 1 KB to 100 MB and the gradient set of ResNet-50
v1 (MXNet model zoo: 193 arrays, 25.6 M floats) are reduced by
  mpi        one MPI_Allreduce (mpi4py, in place) of a flat buffer: the honest baseline,
  auto       this package's algorithm chosen by MXKV_ALGO=auto for that size (the table),
  ring, rhd, rd   each algorithm forced (rd only up to 16 MB),
  hybrid     Hybrid.pushpull over all arrays (fused buckets, engine sync, signature check,
             averaging): what a training step pays; hybrid_fp16 / hybrid_bf16 the same with
             MXKV_COMPRESS (ResNet-50 set only),
  dist_sync  MXNet's native ps-lite kvstore, push + pull, 2 servers, every rank a worker,
  horovod    when Horovod's MXNet binding is installed (optional; skipped with a note
             otherwise): hvd.allreduce_ of every array of the ResNet-50 set (Horovod's own
             tensor fusion), in the same MPI job, interleaved with the others. Horovod's
             background thread then runs beside every method of that job.
Everything but dist_sync runs in one MPI job, interleaved repetition by repetition in
shuffled order. A repetition's time is the slowest rank's; the table shows medians. The
machine's memory-copy bandwidth is measured in the same job and drawn as the physical
limit. Prints a table and writes allreduce.json and allreduce.png to --out.
"""

import argparse
import functools
import json
import os
import random
import subprocess
import sys
from typing import Callable, Dict, List

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from job_output import json_lines  # noqa: E402
from model_shapes import resnet50_shapes  # noqa: E402
from timing import seconds, time_calls  # noqa: E402

SIZES = [1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 100 << 20]
RESNET50 = "resnet50"


def repetitions(nbytes: int, quick: bool) -> int:
    reps = 100 if nbytes <= (1 << 20) else 40 if nbytes <= (16 << 20) else 12
    return max(3, reps // 4) if quick else reps


def workloads(quick: bool) -> List[tuple]:
    """[(name, list of array shapes, repetitions)]."""
    sizes = SIZES[::2] + SIZES[-1:] if quick else SIZES
    return [(str(n), [(n // 4,)], repetitions(n, quick)) for n in sizes] + [
        (RESNET50, resnet50_shapes(), repetitions(100 << 20, quick))
    ]


# ---- workers -------------------------------------------------------------------------
ALGORITHMS = ["auto", "ring", "rhd", "rd"]
RD_LIMIT = 16 << 20


def memory_copy_bandwidth() -> float:
    """Bytes per second numpy copies 64 MiB (best of 5): the limit a reduction on one host
    cannot beat, since every byte is at least read and written once."""
    source = np.ones(16 << 20, dtype=np.float32)
    target = np.empty_like(source)
    best = min(seconds(lambda: np.copyto(target, source)) for _ in range(5))
    return source.nbytes / best


def horovod_binding():
    """horovod.mxnet, initialised on the MPI world mpi4py started, or None (with a note)
    when Horovod is not installed."""
    try:
        import horovod.mxnet as hvd
    except ImportError:
        from mpi4py import MPI

        if MPI.COMM_WORLD.rank == 0:
            print(
                "note: Horovod's MXNet binding is not installed: the horovod column is "
                "skipped (docs/performance/index.md says how to build it)",
                flush=True,
            )
        return None
    hvd.init()
    return hvd


def worker_mpi(quick: bool) -> None:
    """Runs under mxkv-launch; rank 0 prints JSON lines."""
    import mxnet as mx
    from mpi4py import MPI

    import mxkv_hybrid  # noqa: F401
    from mxkv_hybrid.comm.collectives import TensorCollectives
    from mxkv_hybrid.config import Config

    comm = MPI.COMM_WORLD
    config = Config.from_environment()
    vectors = TensorCollectives(comm, config)
    horovod = horovod_binding()
    stores = {"hybrid": mx.kv.create("hybrid")}
    for wire in ("fp16", "bf16"):
        os.environ["MXKV_COMPRESS"] = wire
        stores[f"hybrid_{wire}"] = mx.kv.create("hybrid")
    del os.environ["MXKV_COMPRESS"]

    def timed(fn) -> float:
        comm.Barrier()
        elapsed = seconds(fn)
        return comm.allreduce(elapsed, op=MPI.MAX)

    def emit(**row) -> None:
        if comm.rank == 0:
            print(json.dumps(dict(row, ranks=comm.size)), flush=True)

    copy_bandwidth = comm.allreduce(memory_copy_bandwidth(), op=MPI.MIN)
    emit(
        workload="memcpy",
        method="memcpy",
        bytes=64 << 20,
        arrays=1,
        times=[(64 << 20) / copy_bandwidth],
    )

    def methods_of(
        name: str,
        keys: List[int],
        arrays: list,
        flat: np.ndarray,
    ) -> Dict[str, Callable[[], object]]:
        """{method: a call that reduces the workload's arrays (or `flat`) once}."""
        methods = {"mpi": lambda: comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)}
        if name == RESNET50:
            for store_name, kv in stores.items():
                methods[store_name] = lambda kv=kv: kv.pushpull(keys, arrays)
            if horovod is not None:

                def horovod_allreduce() -> None:  # queued on MXNet's engine: wait for it
                    for k, a in zip(keys, arrays):
                        horovod.allreduce_(a, average=False, name=f"g{k}")
                    mx.nd.waitall()

                methods["horovod"] = horovod_allreduce
        else:
            methods["hybrid"] = lambda: stores["hybrid"].pushpull(keys, arrays)
            for algorithm in ALGORITHMS:
                if algorithm != "rd" or flat.nbytes <= RD_LIMIT:
                    methods[algorithm] = lambda a=algorithm: vectors.allreduce_vector(
                        flat, a, 1.0 / comm.size
                    )
        return methods

    for name, shapes, reps in workloads(quick):
        arrays = [mx.nd.ones(s) for s in shapes]
        keys = list(range(len(arrays)))
        flat = np.ones(sum(int(np.prod(s)) for s in shapes), dtype=np.float32)
        methods = methods_of(name, keys, arrays, flat)
        mx.nd.waitall()
        for run in methods.values():
            run()  # warm-up: buffers, plan, page faults
        times: Dict[str, List[float]] = {method: [] for method in methods}
        for rep in range(reps):  # shuffled alike on every rank: no method always follows another
            order = list(methods)
            random.Random(rep).shuffle(order)
            for method in order:
                times[method].append(timed(methods[method]))
        for method, values in times.items():
            emit(
                workload=name,
                bytes=flat.nbytes,
                arrays=len(arrays),
                method=method,
                times=values,
                algorithm=vectors.algorithm_for("float32", flat.nbytes)
                if method == "auto"
                else None,
            )


def push_then_pull(kv, keys: List[str], arrays: list, outs: list) -> None:
    kv.push(keys, arrays)
    kv.pull(keys, out=outs)


def worker_dist_sync(quick: bool) -> None:
    """Runs as a native ps-lite worker: push + pull of the same workloads."""
    import mxnet as mx

    kv = mx.kv.create("dist_sync")
    for index, (name, shapes, reps) in enumerate(workloads(quick)):
        keys = [f"{index}_{i}" for i in range(len(shapes))]
        arrays = [mx.nd.ones(s) for s in shapes]
        outs = [mx.nd.zeros(s) for s in shapes]
        kv.init(keys, arrays)
        push_pull = functools.partial(push_then_pull, kv, keys, arrays, outs)
        push_pull()  # warm-up
        mx.nd.waitall()
        values = time_calls(reps, kv._barrier, push_pull)
        if kv.rank == 0:
            print(
                json.dumps(
                    {
                        "workload": name,
                        "bytes": sum(a.size * 4 for a in arrays),
                        "arrays": len(arrays),
                        "method": "dist_sync",
                        "ranks": kv.num_workers,
                        "times": values,
                    }
                ),
                flush=True,
            )
    kv._barrier()


# ---- driver --------------------------------------------------------------------------
def measure(ranks: int, quick: bool, skip_dist_sync: bool) -> List[dict]:
    flag = ["--quick"] if quick else []
    print(f"-- {ranks} ranks: MPI_Allreduce, the algorithms and Hybrid.pushpull ...", flush=True)
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
            "mpi",
            *flag,
        ],
        capture_output=True,
        check=False,
        text=True,
    )
    if done.returncode != 0:
        sys.exit(f"benchmark job failed:\n{done.stdout}\n{done.stderr}")
    rows = json_lines(done.stdout)
    for line in done.stdout.splitlines():
        if line.startswith("[0] note: "):
            print(line[len("[0] ") :], flush=True)
    if not skip_dist_sync:
        from ps_job import run_ps_job

        print(f"-- {ranks} ranks: dist_sync with 2 servers ...", flush=True)
        outputs = run_ps_job(
            [sys.executable, __file__, "--worker", "dist_sync", *flag],
            num_workers=ranks,
            num_servers=2,
        )
        rows += [r for out in outputs for r in json_lines(out)]
    for row in rows:
        row["median_s"] = float(np.median(row["times"]))
    return rows


def label(workload: str) -> str:
    if workload == RESNET50:
        return "ResNet-50 set"
    n = int(workload)
    return f"{n >> 20} MB" if n >= 1 << 20 else f"{n >> 10} KB"


SIZE_COLUMNS = ["mpi", "auto", "ring", "rhd", "rd", "hybrid", "dist_sync"]
RESNET_COLUMNS = ["mpi", "hybrid", "hybrid_fp16", "hybrid_bf16", "horovod", "dist_sync"]


def medians_ms(rows: List[dict], ranks: int, workload: str) -> Dict[str, float]:
    return {
        r["method"]: r["median_s"] * 1e3
        for r in rows
        if r["ranks"] == ranks and r["workload"] == workload
    }


def summarise(rows: List[dict]) -> Dict[str, dict]:
    """Per rank count: `auto`'s worst and best time as a share of MPI_Allreduce's over the
    sizes (and at which), and each store method's speed-up over one flat MPI_Allreduce of
    the ResNet-50 set: the figures the docs quote, computed from the rows, not picked."""
    summary: Dict[str, dict] = {}
    for ranks in sorted({r["ranks"] for r in rows}):
        sizes = {r["workload"] for r in rows if r["ranks"] == ranks and r["method"] == "auto"}
        ratios = sorted(
            (ms["auto"] / ms["mpi"], int(size))
            for size in sizes
            for ms in [medians_ms(rows, ranks, size)]
        )
        resnet = medians_ms(rows, ranks, RESNET50)
        summary[str(ranks)] = {
            "auto_vs_mpi_best": ratios[0][0],
            "auto_vs_mpi_best_bytes": ratios[0][1],
            "auto_vs_mpi_worst": ratios[-1][0],
            "auto_vs_mpi_worst_bytes": ratios[-1][1],
            "resnet50_speedup": {m: resnet["mpi"] / t for m, t in resnet.items() if m != "mpi"},
        }
    return summary


def print_table(rows: List[dict]) -> None:
    for ranks in sorted({r["ranks"] for r in rows}):
        chosen = {
            r["workload"]: r["algorithm"]
            for r in rows
            if r["ranks"] == ranks and r["method"] == "auto"
        }
        print(
            f"\n{ranks} ranks, median ms; auto/mpi and hybrid/mpi: ratio of times "
            "(below 1: faster than MPI_Allreduce)"
        )
        print(
            f"{'size':>8} "
            + " ".join(f"{m:>9}" for m in SIZE_COLUMNS)
            + f" {'auto is':>8} {'auto/mpi':>8} {'hyb/mpi':>8}"
        )
        for workload in chosen:
            ms = medians_ms(rows, ranks, workload)
            cells = " ".join(f"{ms[m]:9.3f}" if m in ms else f"{'-':>9}" for m in SIZE_COLUMNS)
            print(
                f"{label(workload):>8} {cells} {chosen[workload]:>8} "
                f"{ms['auto'] / ms['mpi']:8.3f} {ms['hybrid'] / ms['mpi']:8.3f}"
            )
        ms = medians_ms(rows, ranks, RESNET50)
        if ms:
            print(
                f"\nResNet-50 gradient set (193 arrays), {ranks} ranks, median ms; "
                "speed-up = mpi / method"
            )
            for method in RESNET_COLUMNS:
                if method in ms:
                    print(
                        f"{method:>12} {ms[method]:9.3f}  speed-up vs one flat MPI_Allreduce "
                        f"{ms['mpi'] / ms[method]:5.2f}x"
                    )


def plot(rows: List[dict], path: str) -> None:
    """Algorithm bandwidth (bytes / time) and bus bandwidth (x 2(p-1)/p, the bytes each
    rank must send and receive) per rank count, with the memory-copy bandwidth as limit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rank_counts = sorted({r["ranks"] for r in rows})
    fig, axes = plt.subplots(
        2, len(rank_counts), figsize=(6.5 * len(rank_counts), 9), squeeze=False
    )
    styles = {
        "mpi": "s--",
        "auto": "o-",
        "ring": "v:",
        "rhd": "^:",
        "rd": "<:",
        "hybrid": "D-",
        "dist_sync": "x-.",
    }
    for column, ranks in enumerate(rank_counts):
        bus_factor = 2 * (ranks - 1) / ranks
        copy = [r for r in rows if r["ranks"] == ranks and r["method"] == "memcpy"]
        for row_index, (kind, factor) in enumerate((("algorithm", 1.0), ("bus", bus_factor))):
            ax = axes[row_index][column]
            for method, style in styles.items():
                pts = sorted(
                    (r["bytes"], r["median_s"])
                    for r in rows
                    if r["ranks"] == ranks
                    and r["method"] == method
                    and r["workload"] not in (RESNET50, "memcpy")
                )
                if pts:
                    x, t = (np.array(v) for v in zip(*pts))
                    ax.loglog(x, factor * x / t / 1e9, style, label=method, markersize=4)
            for method, marker in (("mpi", "s"), ("hybrid", "D"), ("hybrid_fp16", "*")):
                resnet = [
                    r
                    for r in rows
                    if r["ranks"] == ranks and r["method"] == method and r["workload"] == RESNET50
                ]
                if resnet:
                    ax.plot(
                        resnet[0]["bytes"],
                        factor * resnet[0]["bytes"] / resnet[0]["median_s"] / 1e9,
                        marker,
                        markersize=12,
                        label=f"ResNet-50 set: {method}",
                    )
            if copy:
                ax.axhline(
                    copy[0]["bytes"] / copy[0]["median_s"] / 1e9,
                    color="gray",
                    linewidth=2,
                    alpha=0.6,
                    label="memory copy per rank, all ranks at once",
                )
            ax.set_title(f"{ranks} ranks: {kind} bandwidth (median)")
            ax.set_xlabel("bytes reduced")
            ax.set_ylabel("GB/s" + (" x 2(p-1)/p" if kind == "bus" else " = bytes / time"))
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument(
        "--out",
        default=os.path.join(HERE, "results"),
        help="folder for allreduce.json/.png (default: examples/benchmarks/results)",
    )
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    parser.add_argument("--skip-dist-sync", action="store_true")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="OMP_NUM_THREADS of every rank and server (default 1: with MXNet's "
        "default, two Horovod ranks on 2 cores crawl)",
    )
    parser.add_argument("--worker", choices=["mpi", "dist_sync"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "mpi":
        return worker_mpi(args.quick)
    if args.worker == "dist_sync":
        return worker_dist_sync(args.quick)

    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # every job below inherits it
    rows = [row for ranks in args.ranks for row in measure(ranks, args.quick, args.skip_dist_sync)]
    print_table(rows)
    summary = summarise(rows)
    print(json.dumps(summary, indent=1))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "allreduce.json"), "w") as f:
        settings = {k: v for k, v in os.environ.items() if k.startswith("MXKV_")}
        json.dump(
            {
                "settings": dict(settings, cpus=os.cpu_count(), omp_num_threads=args.threads),
                "summary": summary,
                "rows": rows,
            },
            f,
            indent=1,
        )
    plot(rows, os.path.join(args.out, "allreduce.png"))
    print(f"\nwrote {args.out}/allreduce.json and {args.out}/allreduce.png")


if __name__ == "__main__":
    main()
