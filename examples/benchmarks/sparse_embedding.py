"""Sparse embedding benchmark: one training step's store work for an embedding table whose
gradients touch few rows, row_sparse vs dense, and vs MXNet's dist_sync with row_sparse.

    python examples/benchmarks/sparse_embedding.py              # 2 and 4 ranks, writes results/
    python examples/benchmarks/sparse_embedding.py --ranks 2 --quick

The table is --rows x --width float32 (default 1M x 64: 256 MB); at each step every rank
touches --touched of the rows (default 1 %, different rows on every rank). The optimizer
(plain SGD) runs on the store in every method, as Gluon's Trainer does with
update_on_kvstore, and each step is
  hybrid_sparse  Hybrid.push of the row_sparse gradient (the sparse collective, then SGD on
                 the rows it returns) + row_sparse_pull of the next batch's rows,
  hybrid_dense   Hybrid.pushpull of the same gradient as a dense array (one 256 MB
                 allreduce, SGD over the whole table, the weight copied out): what the
                 store did before it took row_sparse,
  sync_sparse    hybrid_sparse's step in mode sync, the ranks in 2 groups joined by 2
                 servers: the sparse collective in each group, the leaders push the
                 group's rows (SGD on the servers) and pull the rows the group asks for,
  dist_sync      MXNet's native ps-lite store, 2 servers, every rank a worker: push of the
                 row_sparse gradient (SGD on the servers) + row_sparse_pull of the rows.
The two allreduce-mode methods run in one MPI job, alternating repetition by repetition;
sync_sparse and dist_sync run in their own jobs right after. A repetition's time is the
slowest rank's; the table shows medians and the bytes each rank sent per step (hybrid:
counted by the collectives, plus a leader's pushes to the servers in sync_sparse;
dist_sync: not counted). Prints a table and writes sparse_embedding.json and
sparse_embedding.png to --out.
"""

import argparse
import json
import os
import subprocess
import sys
from typing import Dict, List

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from job_output import json_lines  # noqa: E402
from timing import time_calls  # noqa: E402

LEARNING_RATE = 0.1
METHODS = ("hybrid_sparse", "hybrid_dense", "sync_sparse", "dist_sync")


def batch_rows(rank: int, step: int, rows: int, touched: float) -> np.ndarray:
    """The sorted row ids rank `rank` touches at `step`."""
    rng = np.random.default_rng([rank, step])
    return np.sort(rng.choice(rows, max(1, int(touched * rows)), replace=False)).astype(np.int64)


def sparse_gradient(mx, rank: int, step: int, shape, touched: float):
    ids = batch_rows(rank, step, shape[0], touched)
    values = np.random.default_rng([rank, step, 1]).standard_normal((len(ids), shape[1]))
    return mx.nd.sparse.row_sparse_array((values.astype(np.float32), ids), shape=shape)


def initial_weight(mx, shape):
    """The table as an embedding starts: every row set (dist_sync refuses an empty init)."""
    values = np.random.default_rng(0).uniform(-0.05, 0.05, shape).astype(np.float32)
    return mx.nd.sparse.row_sparse_array((values, np.arange(shape[0])), shape=shape)


def emit(**row) -> None:
    print(json.dumps(row), flush=True)


# ---- workers -------------------------------------------------------------------------
def worker_hybrid(args) -> None:
    import mxnet as mx

    import mxkv_hybrid  # noqa: F401  (registers the store)
    from mxkv_hybrid.ps.client import traffic

    shape = (args.rows, args.width)
    kv = mx.kv.create("hybrid")
    sync = kv.config.mode == "sync"
    kv.set_optimizer(mx.optimizer.SGD(learning_rate=LEARNING_RATE))
    kv.init("sparse", initial_weight(mx, shape))
    if not sync:
        kv.init("dense", initial_weight(mx, shape).tostype("default"))
    barrier = kv._collectives.comm.Barrier
    steps = {"hybrid_sparse": 0, "hybrid_dense": 0}
    dense_weight = mx.nd.zeros(shape)
    pulled = mx.nd.sparse.zeros("row_sparse", shape)

    def hybrid_sparse() -> None:
        step = steps["hybrid_sparse"] = steps["hybrid_sparse"] + 1
        kv.push("sparse", sparse_gradient(mx, kv.rank, step, shape, args.touched))
        next_rows = mx.nd.array(
            batch_rows(kv.rank, step + 1, shape[0], args.touched), dtype="int64"
        )
        kv.row_sparse_pull("sparse", out=pulled, row_ids=next_rows)

    def hybrid_dense() -> None:
        step = steps["hybrid_dense"] = steps["hybrid_dense"] + 1
        gradient = sparse_gradient(mx, kv.rank, step, shape, args.touched).tostype("default")
        kv.pushpull("dense", gradient, out=dense_weight)

    methods = (
        {"sync_sparse": hybrid_sparse}
        if sync
        else {"hybrid_sparse": hybrid_sparse, "hybrid_dense": hybrid_dense}
    )
    collectives = kv._collectives

    def bytes_sent() -> int:
        return collectives.bytes_sent_inside + collectives.bytes_sent_across + traffic()[0]

    for call in methods.values():
        call()  # warm-up: buffers, page faults
    mx.nd.waitall()
    for rep in range(args.reps):
        for name in list(methods) if rep % 2 == 0 else list(methods)[::-1]:
            sent = bytes_sent()
            seconds = time_calls(1, barrier, methods[name])[0]
            sent = bytes_sent() - sent
            slowest = collectives.comm.allreduce(seconds, op=_max())
            most = collectives.comm.allreduce(sent, op=_max())
            if kv.rank == 0:
                emit(method=name, ranks=kv.num_workers, seconds=slowest, bytes_sent=most)
    kv.close()


def _max():
    from mpi4py import MPI

    return MPI.MAX


def worker_dist_sync(args) -> None:
    import mxnet as mx

    shape = (args.rows, args.width)
    kv = mx.kv.create("dist_sync")
    kv.set_optimizer(mx.optimizer.SGD(learning_rate=LEARNING_RATE))
    kv.init("sparse", initial_weight(mx, shape))
    pulled = mx.nd.sparse.zeros("row_sparse", shape)
    step = [0]

    def dist_sync_step() -> None:
        step[0] += 1
        kv.push("sparse", sparse_gradient(mx, kv.rank, step[0], shape, args.touched))
        next_rows = mx.nd.array(
            batch_rows(kv.rank, step[0] + 1, shape[0], args.touched), dtype="int64"
        )
        kv.row_sparse_pull("sparse", out=pulled, row_ids=next_rows)

    dist_sync_step()  # warm-up
    mx.nd.waitall()
    for seconds in time_calls(args.reps, kv._barrier, dist_sync_step):
        emit(method="dist_sync", ranks=kv.num_workers, rank=kv.rank, seconds=seconds)
    kv._barrier()


# ---- driver --------------------------------------------------------------------------
def worker_arguments(args) -> List[str]:
    return [
        "--rows",
        str(args.rows),
        "--width",
        str(args.width),
        "--touched",
        str(args.touched),
        "--reps",
        str(args.reps),
    ]


def hybrid_job(ranks: int, mode: str, options: List[str], args) -> List[dict]:
    """worker_hybrid's rows, from an mxkv-launch job of `ranks` in MXKV_MODE=`mode`."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mxkv_hybrid.launch",
            "-n",
            str(ranks),
            *options,
            "--timeout",
            "1500",
            "--",
            "python",
            __file__,
            "--worker",
            "hybrid",
            *worker_arguments(args),
        ],
        capture_output=True,
        check=False,
        text=True,
        env=dict(os.environ, MXKV_MODE=mode),
    )
    if done.returncode != 0:
        sys.exit(f"benchmark job failed:\n{done.stdout}\n{done.stderr}")
    return json_lines(done.stdout)


def measure(ranks: int, args) -> List[dict]:
    print(f"-- {ranks} ranks: hybrid, row_sparse and dense ...", flush=True)
    rows = hybrid_job(ranks, "allreduce", [], args)
    if ranks % 2 == 0:
        print(f"-- {ranks} ranks: hybrid mode sync, 2 groups, 2 servers ...", flush=True)
        rows += hybrid_job(ranks, "sync", ["--group-size", str(ranks // 2), "--servers", "2"], args)
    if not args.skip_dist_sync:
        from ps_job import run_ps_job

        print(f"-- {ranks} ranks: dist_sync with 2 servers ...", flush=True)
        outputs = run_ps_job(
            [sys.executable, __file__, "--worker", "dist_sync", *worker_arguments(args)],
            num_workers=ranks,
            num_servers=2,
        )
        per_rank = [json_lines(out) for out in outputs]
        for rep in range(args.reps):  # the slowest worker's time of each repetition
            rows.append(
                {
                    "method": "dist_sync",
                    "ranks": ranks,
                    "seconds": max(worker[rep]["seconds"] for worker in per_rank),
                }
            )
    return rows


def summary(rows: List[dict]) -> Dict[int, Dict[str, dict]]:
    """{ranks: {method: {median_ms, bytes_sent (median, None for dist_sync)}}}."""
    table: Dict[int, Dict[str, dict]] = {}
    for ranks in sorted({r["ranks"] for r in rows}):
        for method in METHODS:
            mine = [r for r in rows if r["ranks"] == ranks and r["method"] == method]
            if mine:
                sent = [r["bytes_sent"] for r in mine if "bytes_sent" in r]
                table.setdefault(ranks, {})[method] = {
                    "median_ms": float(np.median([r["seconds"] for r in mine])) * 1e3,
                    "bytes_sent": float(np.median(sent)) if sent else None,
                }
    return table


def print_table(table: Dict[int, Dict[str, dict]], args) -> None:
    print(
        f"\nembedding {args.rows} x {args.width} float32, {args.touched:.1%} of the rows per "
        "rank and step; median ms per step (push + pull), MB each rank sent"
    )
    for ranks, methods in table.items():
        sparse = methods["hybrid_sparse"]["median_ms"]
        for method, cell in methods.items():
            sent = "-" if cell["bytes_sent"] is None else f"{cell['bytes_sent'] / 1e6:.2f}"
            print(
                f"{ranks} ranks {method:>14} {cell['median_ms']:9.1f} ms  {sent:>8} MB  "
                f"{cell['median_ms'] / sparse:6.2f}x hybrid_sparse"
            )


def plot(table: Dict[int, Dict[str, dict]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    methods = list(METHODS)
    width = 0.8 / len(table)
    for i, (ranks, cells) in enumerate(table.items()):
        x = np.arange(len(methods)) + i * width
        ax.bar(
            x,
            [cells.get(m, {}).get("median_ms", 0) for m in methods],
            width,
            label=f"{ranks} ranks",
        )
    ax.set_xticks(np.arange(len(methods)) + width * (len(table) - 1) / 2)
    ax.set_xticklabels(methods)
    ax.set_yscale("log")
    ax.set_ylabel("median ms per step (push + pull)")
    ax.set_title("sparse embedding step: row_sparse (allreduce, sync) vs dense vs dist_sync")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--touched", type=float, default=0.01, help="fraction of rows per step")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="3 repetitions")
    parser.add_argument("--skip-dist-sync", action="store_true")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS (default 1)")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--worker", choices=["hybrid", "dist_sync"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "hybrid":
        return worker_hybrid(args)
    if args.worker == "dist_sync":
        return worker_dist_sync(args)

    if args.quick:
        args.reps = 3
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # every job below inherits it
    rows = [row for ranks in args.ranks for row in measure(ranks, args)]
    table = summary(rows)
    print_table(table, args)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "sparse_embedding.json"), "w") as f:
        json.dump(
            {
                "settings": {
                    "rows": args.rows,
                    "width": args.width,
                    "touched": args.touched,
                    "reps": args.reps,
                    "cpus": os.cpu_count(),
                    "omp_num_threads": args.threads,
                },
                "summary": {str(k): v for k, v in table.items()},
                "rows": rows,
            },
            f,
            indent=1,
        )
    plot(table, os.path.join(args.out, "sparse_embedding.png"))
    print(f"\nwrote {args.out}/sparse_embedding.json and {args.out}/sparse_embedding.png")


if __name__ == "__main__":
    main()
