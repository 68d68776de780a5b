"""Shard parallelism against model parallelism, in the same run: K MLPs, each too large
for one rank's --budget-mb (so cut into >= 2 shards), trained for --epochs of --batches
batches by
  shard parallel   2 ranks, idle ranks take the ready shard task of the model with the
                   longest remaining work (lrtf), the next shard loaded beside the running
                   one; and the same with the oldest ready task first (fifo)
  model parallel   2 ranks, one model at a time, shard s on rank s mod 2 and resident
  one rank         1 rank, every model's shards spilled and loaded in turn (lrtf)
Each configuration is the median of --repeats jobs (shuffled order). Prints samples/s over
all models and each rank's utilisation (time computing / wall), writes shard_parallel.json
and shard_parallel.png (each rank's tasks over time, K = the first --models, and
utilisation per rank) to --out.

    python examples/benchmarks/shard_parallel.py [--models 4 8] [--repeats 3]
"""

import argparse
import json
import os
import subprocess
import sys
from typing import Dict, List

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

CONFIGURATIONS = {  # name -> (ranks, schedule)
    "shard parallel (lrtf)": (2, "lrtf"),
    "shard parallel (fifo)": (2, "fifo"),
    "model parallel": (2, "model-parallel"),
    "one rank, spilling": (1, "lrtf"),
}


def worker(args: argparse.Namespace) -> None:
    import mxnet as mx
    from mxnet import gluon

    from mxkv_hybrid.shard import ModelTask, ShardOrchestrator

    tasks = []
    for k in range(args.k):
        mx.random.seed(k)
        net = gluon.nn.HybridSequential()
        for _ in range(args.depth):
            net.add(gluon.nn.Dense(args.width, activation="relu"))
        net.add(gluon.nn.Dense(10))
        net.initialize(mx.init.Xavier())
        net(mx.nd.zeros((1, args.width)))
        rng = np.random.default_rng(k)
        batches = [
            (
                mx.nd.array(rng.normal(size=(args.batch, args.width))),
                mx.nd.array(rng.integers(0, 10, args.batch)),
            )
            for _ in range(args.batches)
        ]
        tasks.append(
            ModelTask(
                net,
                gluon.loss.SoftmaxCrossEntropyLoss(),
                batches,
                "sgd",
                {"learning_rate": 0.01 * (k + 1), "momentum": 0.9},
                epochs=args.epochs,
                name=f"mlp{k}",
            )
        )
    orchestrator = ShardOrchestrator(tasks, args.budget_mb, schedule=args.schedule, progress=False)
    report = orchestrator.run()
    orchestrator.close()
    if orchestrator.rank == 0:
        with open(args.report, "w") as f:
            json.dump(report.as_dict(), f)


def run_job(name: str, k: int, args: argparse.Namespace) -> dict:
    ranks, schedule = CONFIGURATIONS[name]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    report = os.path.join(args.out, "shard_parallel_job.json")
    command = [
        sys.executable,
        "-m",
        "mxkv_hybrid.launch",
        "-n",
        str(ranks),
        "--timeout",
        "900",
        "--",
        "python",
        __file__,
        "--worker",
        "--k",
        str(k),
        "--schedule",
        schedule,
        "--report",
        report,
        *(
            f"--{o.replace('_', '-')}={getattr(args, o)}"
            for o in ("width", "depth", "batch", "batches", "epochs", "budget_mb")
        ),
    ]
    done = subprocess.run(command, capture_output=True, check=False, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"{name}, K={k} failed:\n{done.stdout}\n{done.stderr}")
    with open(report) as f:
        result = json.load(f)
    os.remove(report)
    return result


def plot(results: Dict[int, Dict[str, List[dict]]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = min(results)
    shown = ["shard parallel (lrtf)", "model parallel"]
    fig, axes = plt.subplots(len(shown) + 1, 1, figsize=(9, 2.2 * len(shown) + 3))
    colours = plt.get_cmap("tab10")
    for ax, name in zip(axes, shown):
        report = sorted(results[first][name], key=lambda r: r["throughput"])[
            len(results[first][name]) // 2
        ]
        for device in report["devices"]:
            for start, end, model, kind in device["timeline"]:
                ax.barh(
                    device["rank"],
                    end - start,
                    left=start,
                    color=colours(model % 10),
                    alpha=0.45 if kind == "forward" else 0.9,
                    edgecolor="none",
                )
        ax.set_yticks([d["rank"] for d in report["devices"]])
        ax.set_yticklabels([f"rank {d['rank']}" for d in report["devices"]])
        ax.set_title(
            f"{name}, K = {first}: {report['throughput']:.0f} samples/s (colour: model;"
            " pale: forward)",
            fontsize=9,
        )
        ax.set_xlabel("seconds")
    ax = axes[-1]
    names = list(CONFIGURATIONS)
    slots = [(k, rank) for k in sorted(results) for rank in range(2)]
    width = 0.8 / len(slots)
    for j, name in enumerate(names):
        for i, (k, rank) in enumerate(slots):
            reports = results[k][name]
            report = sorted(reports, key=lambda r: r["throughput"])[len(reports) // 2]
            if rank < len(report["utilisation"]):
                ax.bar(
                    j - 0.4 + (i + 0.5) * width,
                    100 * report["utilisation"][rank],
                    width,
                    color=colours(sorted(results).index(k)),
                    alpha=1.0 if rank == 0 else 0.6,
                    label=f"K = {k}" if j == 0 and rank == 0 else None,
                )
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, fontsize=8)
    ax.set_ylabel("utilisation, % (paler: rank 1)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", type=int, nargs="+", default=[4, 8], help="K values")
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--depth", type=int, default=4, help="hidden layers of each MLP")
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument(
        "--budget-mb",
        type=float,
        default=176.0,
        help="per rank; each model must need at least 2 shards",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS")
    parser.add_argument("--seed", type=int, default=0, help="of the shuffled order")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--k", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--schedule", help=argparse.SUPPRESS)
    parser.add_argument("--report", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    os.makedirs(args.out, exist_ok=True)
    random = np.random.default_rng(args.seed)
    jobs = [(k, name) for k in args.models for name in CONFIGURATIONS] * args.repeats
    results: Dict[int, Dict[str, List[dict]]] = {
        k: {n: [] for n in CONFIGURATIONS} for k in args.models
    }
    for number, index in enumerate(random.permutation(len(jobs))):
        k, name = jobs[index]
        report = run_job(name, k, args)
        results[k][name].append(report)
        print(
            f"[{number + 1}/{len(jobs)}] K={k} {name}: {report['throughput']:.1f} samples/s, "
            f"shards {sorted(set(report['shards'].values()))}, utilisation "
            + " ".join(f"{100 * u:.0f}%" for u in report["utilisation"]),
            flush=True,
        )

    rows = []
    print(
        f"\n{'K':>3} {'configuration':>24} {'samples/s':>10} {'vs model parallel':>18} "
        f"{'utilisation per rank':>22} {'peak/budget MiB':>16}"
    )
    for k in args.models:
        base = float(np.median([r["throughput"] for r in results[k]["model parallel"]]))
        for name in CONFIGURATIONS:
            reports = results[k][name]
            throughput = float(np.median([r["throughput"] for r in reports]))
            median = sorted(reports, key=lambda r: r["throughput"])[len(reports) // 2]
            peak = max(d["peak_bytes"] for r in reports for d in r["devices"])
            rows.append(
                {
                    "models": k,
                    "configuration": name,
                    "throughput": throughput,
                    "speedup_over_model_parallel": throughput / base,
                    "throughputs": [r["throughput"] for r in reports],
                    "utilisation": median["utilisation"],
                    "peak_bytes": peak,
                    "budget_bytes": median["devices"][0]["budget_bytes"],
                    "shards": median["shards"],
                }
            )
            print(
                f"{k:>3} {name:>24} {throughput:>10.1f} {throughput / base:>17.2f}x "
                f"{' '.join(f'{100 * u:.0f}%' for u in median['utilisation']):>22} "
                f"{peak / 2**20:>7.1f}/{median['devices'][0]['budget_bytes'] / 2**20:.0f}"
            )
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "shard_parallel.json"), "w") as f:
        json.dump(
            {
                "settings": {
                    k: v
                    for k, v in vars(args).items()
                    if k not in ("worker", "k", "schedule", "report")
                },
                "results": rows,
                "reports": {k: dict(by_name) for k, by_name in results.items()},
            },
            f,
        )
    plot(results, os.path.join(args.out, "shard_parallel.png"))
    print(f"wrote {args.out}/shard_parallel.json and shard_parallel.png")


if __name__ == "__main__":
    main()
