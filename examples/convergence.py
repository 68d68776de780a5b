"""Convergence study: the modes against each other on one task, with the same budget
(epochs, batch per rank, learning rate, momentum 0.9) and the same seeds in every
configuration, on the plain machine and behind emulated slow links between the groups.

    python examples/convergence.py [--task digits|mnist1d] [--groups 2] [--seeds 42 1 2]
        [--links 0 50] [--configurations allreduce "lasgd tau=100 outer=nesterov" ...]
    python examples/convergence.py --task mnist1d --merge plain.json slow.json  # together

A configuration is a mode and its settings, `MODE [tau=T] [transport=rma]
[outer=nesterov|sgd] [outer_lr=L] [outer_momentum=M] [damping=staleness|momentum]
[overlap=0|1] [fragments=P] [compress=fp16|bf16] [algo=ring|...] [warmup=S]
[lr_scale=S] [alpha=A] [sync=1]` (MXKV_TAU, MXKV_TRANSPORT, MXKV_OUTER, MXKV_OUTER_LR,
MXKV_OUTER_MOMENTUM, MXKV_ASYNC_DAMPING, MXKV_LASGD_OVERLAP, MXKV_FRAGMENTS,
MXKV_COMPRESS, MXKV_ALGO, MXKV_WARMUP_STEPS, MXKV_LOCAL_LR_SCALE, MXKV_EASGD_ALPHA,
MXKV_EASGD_SYNC; a knob not named keeps the package's default), and [lr=L] [momentum=M]
its own learning rate and the script's SGD momentum
(0.9 unless given; where the servers run the optimizer, sync and async, theirs):

  allreduce      one allreduce over all ranks per step (hierarchical: MXKV_HIERARCHY=auto)
  sync           group allreduce + dist_sync servers (1 server)
  async          group allreduce + dist_async servers holding the weights
  easgd tau=T    group-synchronous SGD, elastic exchange with the centre every T steps
  lasgd tau=T    local steps on every rank, model average every T steps
  ... outer=nesterov   DiLoCo: the average's change is the outer gradient of Nesterov SGD
  ... fragments=P      Streaming DiLoCo: one 1/P fragment averaged every T/P steps

Tasks (examples/study_tasks.py): `digits` (UCI's 8x8 digits) and `mnist1d` (MNIST-1D,
generated offline; `pip install -e '.[study]'`), each with its budget.

Per epoch: the test accuracy of rank 0's model (in easgd/lasgd the ranks' models differ
between averagings), the bytes sent across groups so far, and the wall time; at the end
the accuracy of the one model mxkv_hybrid.consensus gives every rank (easgd: the
centre; lasgd: the average; the others: the common weights).

Peak bytes: the most bytes one rank sent across groups in one training step after the
first (which also broadcasts the initial weights): the largest exchange, where averages
block; an overlapped average's bytes spread over the steps it overlaps. They are what
the allreduce's algorithm sent (MXKV_ALGO=auto picks recursive doubling for small
messages, which sends more than a ring), not the size of what was averaged.

Bytes across groups: what the collectives' algorithms sent to ranks of other groups
(counted at every exchange step in the C++) plus what the leaders pushed to and pulled
from the servers, or read from and accumulated into another leader's window (rma),
summed over the ranks. A slow link (MXKV_THROTTLE_MBPS / MXKV_THROTTLE_LATENCY_MS: every
cross-group transfer step takes at least latency + bytes / bandwidth, per rank; see
mxkv_hybrid/comm/link_throttle.py) is the setting the averaging modes exist for. With
--hosts (root) every group runs on an emulated host of its own instead
(mxkv_hybrid.testing.cluster: a network namespace, MPI over TCP, one tbf-shaped link per
host at the --links rate, 0 unlimited; --cluster external: on hosts someone else set up,
examples/benchmarks/external_hosts.py), and nothing is throttled in the process.

Prints a table (means over the seeds), writes convergence_<task>.json and .txt to --out,
and one figure per question (means over the seeds, one legend below the panels):
convergence_<task>_bytes.png, accuracy against the bytes sent across groups, and
convergence_<task>_time.png, accuracy against wall time on each link; and for every
configuration the bytes and the time it took to reach the final
accuracy of allreduce less --within, against allreduce's own.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List, NamedTuple, Optional, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "benchmarks"))

from figure_legend import legend_below  # noqa: E402
from job_output import json_lines  # noqa: E402

SETTINGS = {
    "tau": "MXKV_TAU",
    "transport": "MXKV_TRANSPORT",
    "outer": "MXKV_OUTER",
    "outer_lr": "MXKV_OUTER_LR",
    "outer_momentum": "MXKV_OUTER_MOMENTUM",
    "damping": "MXKV_ASYNC_DAMPING",
    "overlap": "MXKV_LASGD_OVERLAP",
    "fragments": "MXKV_FRAGMENTS",
    "compress": "MXKV_COMPRESS",
    "algo": "MXKV_ALGO",
    "warmup": "MXKV_WARMUP_STEPS",
    "lr_scale": "MXKV_LOCAL_LR_SCALE",
    "alpha": "MXKV_EASGD_ALPHA",
    "sync": "MXKV_EASGD_SYNC",
}
MODES = ("allreduce", "sync", "async", "easgd", "lasgd")
DEFAULT_CONFIGURATIONS = {
    "digits": [
        "allreduce",
        "sync",
        "async",
        "easgd tau=1",
        "easgd tau=4",
        "easgd tau=16",
        "easgd tau=4 transport=rma",
        "lasgd tau=4",
    ],
    # the local-step methods at lr 0.05: at the task's 0.1, with 4x the gradient noise of
    # the allreduce's batch, lasgd tau=100 ended at 0.53 and DiLoCo's at 0.10 (seed 42)
    "mnist1d": [
        "allreduce",
        "sync",
        "sync lr=0.05",
        "async lr=0.05",
        "async damping=momentum lr=0.05",
        "easgd tau=16 lr=0.05",
        "lasgd tau=128 lr=0.05",
        "lasgd tau=128 outer=nesterov outer_momentum=0.9 lr=0.05",
        "lasgd tau=128 outer=nesterov outer_momentum=0.5 lr=0.05",
    ],
}


class Configuration(NamedTuple):
    mode: str
    env: Dict[str, str]
    lr: Optional[float]  # the configuration's own learning rate (lr=...), else --lr
    momentum: float  # the script's SGD momentum (momentum=...), else 0.9


def parse_configuration(text: str) -> Configuration:
    """'lasgd tau=100 outer=nesterov lr=0.05' -> its mode, environment, learning rate and
    momentum."""
    mode, *settings = text.split()
    if mode not in MODES:
        raise argparse.ArgumentTypeError(f"{text!r}: the mode is one of {', '.join(MODES)}")
    env, own = {}, {"lr": None, "momentum": 0.9}
    for setting in settings:
        name, _, value = setting.partition("=")
        if name in own and value:
            own[name] = float(value)
            continue
        if name not in SETTINGS or not value:
            raise argparse.ArgumentTypeError(
                f"{text!r}: {setting!r} is not NAME=VALUE with NAME one of "
                f"{', '.join([*SETTINGS, *own])}"
            )
        env[SETTINGS[name]] = value
    return Configuration(mode, env, own["lr"], own["momentum"])


def worker(args: argparse.Namespace) -> None:
    """One rank: trains, prints one JSON line per epoch (rank 0) and a final one."""
    import mxnet as mx
    from mpi4py import MPI
    from mxnet import autograd, gluon

    import mxkv_hybrid
    from mxkv_hybrid.comm import remote_memory
    from mxkv_hybrid.comm.collectives import live_collectives
    from mxkv_hybrid.ps.client import traffic

    from study_tasks import TASKS
    from train_digits import accuracy

    task = TASKS[args.task]
    comm = MPI.COMM_WORLD
    kv = mx.kv.create("hybrid")
    train_x, train_y, test_x, test_y = task.load_data(args.seed)
    shard_x, shard_y = train_x[kv.rank :: kv.num_workers], train_y[kv.rank :: kv.num_workers]
    steps = len(train_x) // kv.num_workers // args.batch_size
    mx.random.seed(args.seed)
    net = task.build_network()
    net.initialize(mx.init.Xavier(magnitude=2.0))
    net.hybridize()
    trainer = gluon.Trainer(
        net.collect_params(),
        "sgd",
        {"learning_rate": args.lr, "momentum": args.momentum},
        kvstore=kv,
    )
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    model_bytes = None

    def bytes_sent_here() -> float:
        """Bytes this rank sent across the groups so far."""
        pushed, pulled = traffic()
        sent = sum(c.bytes_sent_across for c in live_collectives())
        return pushed + pulled + sent + remote_memory.traffic()

    def cross_group_bytes() -> float:
        """Bytes across the groups so far, over every rank (collective)."""
        return comm.allreduce(bytes_sent_here())

    peak_step_bytes, last = 0.0, None  # the first step also broadcasts the initial weights

    started, evaluating = time.perf_counter(), 0.0  # the evaluations' time is not training
    for epoch in range(1, args.epochs + 1):
        order = np.random.RandomState(args.seed + 1000 * epoch + kv.rank).permutation(len(shard_y))
        for step in range(steps):
            batch = order[step * args.batch_size : (step + 1) * args.batch_size]
            with autograd.record():
                loss = loss_fn(net(mx.nd.array(shard_x[batch])), mx.nd.array(shard_y[batch]))
            loss.backward()
            trainer.step(len(batch))
            now = bytes_sent_here()
            if last is not None:
                peak_step_bytes = max(peak_step_bytes, now - last)
            last = now
        if model_bytes is None:
            model_bytes = 4 * sum(p.data().size for p in net.collect_params().values())
        mx.nd.waitall()
        seconds = time.perf_counter() - started - evaluating
        paused = time.perf_counter()
        sent = cross_group_bytes()
        own = accuracy(net, test_x, test_y, mx.cpu()) if kv.rank == 0 else None
        average = average_model_accuracy(comm, net, lambda: accuracy(net, test_x, test_y, mx.cpu()))
        evaluating += comm.allreduce(time.perf_counter() - paused, op=MPI.MAX)
        if kv.rank == 0:
            print(
                json.dumps(
                    {
                        "epoch": epoch,
                        "accuracy": own,
                        "average_accuracy": average,
                        "seconds": seconds,
                        "cross_group_bytes": sent,
                    }
                ),
                flush=True,
            )
    peak_step_bytes = comm.allreduce(peak_step_bytes, op=MPI.MAX)
    mxkv_hybrid.consensus(trainer)
    sent = cross_group_bytes()
    if kv.rank == 0:
        print(
            json.dumps(
                {
                    "final_accuracy": accuracy(net, test_x, test_y, mx.cpu()),
                    "cross_group_bytes": sent,
                    "steps_per_epoch": steps,
                    "model_bytes": model_bytes,
                    "peak_step_bytes": peak_step_bytes,
                }
            ),
            flush=True,
        )
    kv.close()


def average_model_accuracy(comm, net, evaluate) -> Optional[float]:
    """Rank 0's evaluation of the average of every rank's model, for the study only:
    summed with mpi4py (neither the store's traffic nor its time), then every rank's own
    weights are put back (written by an operator: an inference forward may have left them
    in MKLDNN's layout, which MXNet cannot copy into). Collective."""
    import mxnet as mx

    weights = [p.data() for p in net.collect_params().values()]
    own = [w.asnumpy() for w in weights]
    for weight, mine in zip(weights, own):
        total = np.empty_like(mine)
        comm.Allreduce(mine, total)
        mx.nd.identity(mx.nd.array(total / comm.size, dtype=mine.dtype), out=weight)
    found = evaluate() if comm.rank == 0 else None
    for weight, mine in zip(weights, own):
        mx.nd.identity(mx.nd.array(mine, dtype=mine.dtype), out=weight)
    mx.nd.waitall()
    return found


def run(configuration: str, seed: int, link: float, args: argparse.Namespace, cluster=None) -> dict:
    """One job (on `cluster`'s emulated hosts, one group each, if given); its rows and
    totals."""
    mode, env, lr, momentum = parse_configuration(configuration)
    size = args.ranks // args.groups
    print(
        f"-- {configuration}, seed {seed}{f', link {link:g} Mbit/s' if link else ''} ...",
        flush=True,
    )
    options = []
    if env.get("MXKV_TRANSPORT") == "rma":  # the centre in the leaders' windows: no servers
        options += ["--group-size", str(size)]
    elif mode in ("sync", "async", "easgd"):
        options += ["--group-size", str(size), "--servers", "1"]
        if mode in ("async", "easgd"):  # one MPI job: the byte counts are summed over all ranks
            options += ["--one-job"]
    throttle = 0 if cluster is not None else link  # emulated hosts: their links are the limit
    environment = dict(
        os.environ,
        MXKV_MODE=mode,
        MXKV_GROUP_SIZE=str(size),
        **env,
        OMP_NUM_THREADS="1",
        MXKV_THROTTLE_MBPS=str(throttle),
        MXKV_THROTTLE_LATENCY_MS=str(args.latency_ms if throttle else 0),
    )
    worker = [
        "python",
        __file__,
        "--worker",
        "--task",
        args.task,
        "--epochs",
        str(args.epochs),
        "--batch-size",
        str(args.batch_size),
        "--lr",
        str(lr or args.lr),
        "--momentum",
        str(momentum),
        "--seed",
        str(seed),
    ]
    begun = time.perf_counter()
    if cluster is None:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "mxkv_hybrid.launch",
                "-n",
                str(args.ranks),
                "--timeout",
                "1800",
                *options,
                "--",
                *worker,
            ],
            capture_output=True,
            check=False,
            text=True,
            env=environment,
        )
    else:
        from emulated_hosts import launch_on_hosts

        done = launch_on_hosts(cluster, size, worker, environment, options)
    if done.returncode != 0:
        sys.exit(f"{configuration} (seed {seed}) failed:\n{done.stdout}\n{done.stderr}")
    rows = json_lines(done.stdout)
    final = rows[-1]
    print(
        f"   final accuracy {final['final_accuracy']:.4f}, {rows[-2]['seconds']:.1f} s, "
        f"{final['cross_group_bytes'] / 1e6:.2f} MB across",
        flush=True,
    )
    return {
        "configuration": configuration,
        "mode": mode,
        "seed": seed,
        "link_mbps": link,
        "epochs": rows[:-1],
        "final_accuracy": final["final_accuracy"],
        "cross_group_bytes": final["cross_group_bytes"],
        "model_bytes": final["model_bytes"],
        "steps_per_epoch": final["steps_per_epoch"],
        "peak_step_bytes": final["peak_step_bytes"],
        "job_seconds": time.perf_counter() - begun,
    }


def mean_curve(runs: List[dict]) -> List[dict]:
    """Per epoch, the mean over the seeds' runs of accuracy (rank 0's model, and the
    average model's where every run measured it), seconds and bytes."""
    keys = ["epoch", "accuracy", "seconds", "cross_group_bytes"]
    keys += ["average_accuracy"] if measures_the_average(runs) else []
    return [
        {key: statistics.mean(run["epochs"][i][key] for run in runs) for key in keys}
        for i in range(len(runs[0]["epochs"]))
    ]


def measures_the_average(runs: List[dict]) -> bool:
    """Whether every run evaluated the average of the ranks' models at each epoch's end
    (runs of the study before it did not)."""
    return all("average_accuracy" in run["epochs"][0] for run in runs)


def reached(curve: List[dict], target: float, key: str) -> Optional[dict]:
    """The first epoch of `curve` whose (mean) `key` reaches `target`, or None."""
    return next((row for row in curve if row[key] >= target), None)


def summarise(results: List[dict], within: float) -> List[dict]:
    """One row per (link, configuration): means over the seeds, and the bytes and seconds
    to reach allreduce's final accuracy less `within` on the same link, with the ratios."""
    rows = []
    for link in sorted({r["link_mbps"] for r in results}):
        on_link = [r for r in results if r["link_mbps"] == link]
        configurations = list(dict.fromkeys(r["configuration"] for r in on_link))
        runs = {c: [r for r in on_link if r["configuration"] == c] for c in configurations}
        reference = runs.get("allreduce")
        target = (
            statistics.mean(r["final_accuracy"] for r in reference) - within if reference else None
        )
        key = "average_accuracy" if measures_the_average(on_link) else "accuracy"
        baseline = reached(mean_curve(reference), target, key) if reference else None
        for configuration in configurations:
            mine = runs[configuration]
            curve = mean_curve(mine)
            there = reached(curve, target, key) if target is not None else None
            row = {
                "link_mbps": link,
                "configuration": configuration,
                "seeds": [r["seed"] for r in mine],
                "final_accuracy": [r["final_accuracy"] for r in mine],
                "mean_final_accuracy": statistics.mean(r["final_accuracy"] for r in mine),
                "train_seconds": statistics.mean(r["epochs"][-1]["seconds"] for r in mine),
                "cross_group_bytes": statistics.mean(r["cross_group_bytes"] for r in mine),
                "peak_step_bytes": (
                    None
                    if any("peak_step_bytes" not in r for r in mine)
                    else max(r["peak_step_bytes"] for r in mine)
                ),
                "target": target,
                "measured": key,
                "epoch_at_target": there and there["epoch"],
                "seconds_to_target": there and there["seconds"],
                "bytes_to_target": there and there["cross_group_bytes"],
                "curve": curve,
            }
            if reference:
                allreduce_bytes = statistics.mean(r["cross_group_bytes"] for r in reference)
                row["bytes_ratio"] = allreduce_bytes / max(row["cross_group_bytes"], 1.0)
                if there and baseline:
                    row["sooner"] = baseline["seconds"] / there["seconds"]
            rows.append(row)
    return rows


def table(rows: List[dict], within: float) -> str:
    lines = [
        (
            f"{'configuration':>30} {'link':>9} {'final acc (per seed)':>28} {'mean':>6} "
            f"{'train s':>8} {'MB across':>10} {'fewer bytes':>11} {'peak MB':>8} "
            f"{'s to target':>11} {'sooner':>7}"
        )
    ]
    for row in rows:
        link = f"{row['link_mbps']:g} Mb/s" if row["link_mbps"] else "-"
        seeds = " ".join(f"{a:.3f}" for a in row["final_accuracy"])
        to_target = (
            f"{row['seconds_to_target']:.1f}" if row["seconds_to_target"] is not None else "never"
        )
        peak = (
            f"{row['peak_step_bytes'] / 1e6:8.3f}"
            if row.get("peak_step_bytes") is not None
            else f"{'-':>8}"
        )
        lines.append(
            f"{row['configuration']:>30} {link:>9} {seeds:>28} "
            f"{row['mean_final_accuracy']:6.3f} {row['train_seconds']:8.1f} "
            f"{row['cross_group_bytes'] / 1e6:10.2f} "
            f"{row.get('bytes_ratio', float('nan')):10.1f}x {peak} {to_target:>11} "
            f"{row.get('sooner', float('nan')):6.1f}x"
        )
    models = {"accuracy": "rank 0's model", "average_accuracy": "the average of the ranks' models"}
    measured = ", ".join(sorted({models[row["measured"]] for row in rows}))
    lines.append(
        f"target: allreduce's mean final accuracy on the same link less {within}; "
        f"'s to target': the first epoch whose mean accuracy ({measured}) reaches "
        "it; 'sooner' and 'fewer bytes': allreduce's over the configuration's; "
        "'peak MB': the most one rank sent across groups in one step (max over seeds)"
    )
    return "\n".join(lines)


PLOT_QUESTIONS = {  # figure suffix: (what accuracy is plotted against, its axis label)
    "bytes": ("cross_group_bytes", "MB sent across groups (log)"),
    "time": ("seconds", "wall time, s"),
}


def plot(rows: List[dict], stem: str, title: str) -> List[str]:
    """One figure per question, each written to `stem`_<question>.png: accuracy against
    the bytes sent across groups (on the plain machine: bytes do not depend on the link)
    and against wall time (one panel per link). Panels of equal size, one legend below
    them; a configuration has the same colour everywhere. Returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    links = sorted({row["link_mbps"] for row in rows})
    configurations = list(dict.fromkeys(row["configuration"] for row in rows))
    palette = plt.get_cmap("tab10" if len(configurations) <= 10 else "tab20")
    colours = {c: palette(i % palette.N) for i, c in enumerate(configurations)}
    measured = (
        "the average model" if rows[0]["measured"] == "average_accuracy" else "rank 0's model"
    )
    paths = []
    for question, (x_key, x_label) in PLOT_QUESTIONS.items():
        panels = links[:1] if question == "bytes" else links
        columns = 1 if max(map(len, configurations)) > 50 else 2
        figure, axes = plt.subplots(1, len(panels), figsize=(12, 4.5), squeeze=False)
        for axis, link in zip(axes[0], panels):
            for row in (r for r in rows if r["link_mbps"] == link):
                curve = row["curve"]
                x = [point[x_key] for point in curve]
                if question == "bytes":
                    x = [max(value, 1) / 1e6 for value in x]
                axis.plot(
                    x,
                    [point[row["measured"]] for point in curve],
                    color=colours[row["configuration"]],
                    label=row["configuration"],
                )
            place = f"behind {link:g} Mbit/s" if link else "no throttle"
            axis.set(xlabel=x_label, title=place, ylim=(0.5, 1.0))
            if question == "bytes":
                axis.set_xscale("log")
            axis.grid(alpha=0.3)
        axes[0][0].set_ylabel(f"test accuracy ({measured}, mean of seeds)")
        figure.suptitle(title)
        legend_below(figure, axes[0], columns)
        path = f"{stem}_{question}.png"
        figure.savefig(path, dpi=100, bbox_inches="tight")  # the canvas grows to the legend
        plt.close(figure)
        paths.append(path)
    return paths


def merged(paths: List[str], args: argparse.Namespace) -> Tuple[List[dict], argparse.Namespace]:
    """The runs of earlier studies (their JSON), which must share the task, ranks, groups
    and budget; and the settings, with every seed and link they ran."""
    studies = []
    for path in paths:
        with open(path) as f:
            studies.append(json.load(f))
    shared = ("task", "ranks", "groups", "epochs", "batch_size", "lr", "latency_ms", "hosts")
    first = studies[0]["settings"]
    for path, study in zip(paths, studies):
        differing = [k for k in shared if study["settings"].get(k) != first.get(k)]
        if differing:
            sys.exit(f"--merge: {path} differs from {paths[0]} in {', '.join(differing)}")
    results = [run for study in studies for run in study["runs"]]
    settings = dict(
        vars(args),
        **{k: first.get(k) for k in shared},
        seeds=list(dict.fromkeys(r["seed"] for r in results)),
        links=sorted({r["link_mbps"] for r in results}),
    )
    return results, argparse.Namespace(**settings)


def links(args: argparse.Namespace):
    """(link rate, the emulated cluster whose hosts' links run at it, or None) for each of
    --links; a cluster lives while its link's jobs run."""
    if not args.hosts:
        yield from ((link, None) for link in args.links)
        return
    from emulated_hosts import hosts_of

    for link in args.links:
        with hosts_of(args.cluster, args.groups, link or None) as cluster:
            yield link, cluster


def main() -> None:
    from study_tasks import TASKS

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task", choices=sorted(TASKS), default="digits")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--groups", type=int, default=2, help="groups of ranks // groups each")
    parser.add_argument("--epochs", type=int, help="the task's budget unless given")
    parser.add_argument("--batch-size", type=int, help="per rank and step (the task's)")
    parser.add_argument("--lr", type=float, help="the task's unless given")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42])
    parser.add_argument(
        "--links",
        type=float,
        nargs="+",
        default=[0.0, 50.0],
        help="Mbit/s between the groups, 0: no throttle",
    )
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=2.0,
        help="the throttle's latency a transfer (not with --hosts)",
    )
    parser.add_argument(
        "--hosts",
        action="store_true",
        help="every group on an emulated host of its own (root; network "
        "namespaces, MPI over TCP) whose link runs at --links Mbit/s "
        "(tbf; 0: unlimited), instead of the in-process throttle",
    )
    from emulated_hosts import add_cluster_option

    add_cluster_option(parser)
    parser.add_argument("--configurations", nargs="+", help="the task's set unless given")
    parser.add_argument(
        "--within",
        type=float,
        default=0.005,
        help="the target: allreduce's final accuracy less this much",
    )
    parser.add_argument("--out", default=os.path.join(HERE, "benchmarks", "results"))
    parser.add_argument(
        "--label", help="written as convergence_<task>_<label>.* (default: convergence_<task>.*)"
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        metavar="JSON",
        help="train nothing: summarise the runs of these earlier studies' "
        "convergence_<task>.json together (say, one per link)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)  # a worker's
    parser.add_argument("--momentum", type=float, default=0.9, help=argparse.SUPPRESS)
    args = parser.parse_args()
    task = TASKS[args.task]
    args.epochs = args.epochs or task.epochs
    args.batch_size = args.batch_size or task.batch_size
    args.lr = args.lr or task.lr
    if args.worker:
        return worker(args)
    if args.ranks % args.groups:
        parser.error(f"--ranks {args.ranks} do not split into --groups {args.groups}")
    if args.merge:
        results, args = merged(args.merge, args)
    else:
        configurations = args.configurations or DEFAULT_CONFIGURATIONS[args.task]
        for configuration in configurations:
            try:
                parse_configuration(configuration)
            except argparse.ArgumentTypeError as err:
                parser.error(str(err))
        results = [
            run(configuration, seed, link, args, cluster)
            for link, cluster in links(args)
            for seed in args.seeds
            for configuration in configurations
        ]
    rows = summarise(results, args.within)
    where = (
        "one emulated host per group, links of the rate shown (0: unlimited)"
        if args.hosts
        else f"slow links + {args.latency_ms:g} ms a transfer"
    )
    title = (
        f"{args.task}, {args.ranks} ranks in {args.groups} groups, {args.epochs} epochs, "
        f"batch {args.batch_size}/rank, lr {args.lr}, momentum 0.9 (unless the "
        f"configuration names others), seeds {' '.join(map(str, args.seeds))}; {where}"
    )
    text = f"{title}\n{table(rows, args.within)}"
    print(f"\n{text}")
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(
        args.out, "_".join(["convergence", args.task] + ([args.label] if args.label else []))
    )
    with open(f"{stem}.json", "w") as f:
        summary = [{k: v for k, v in row.items() if k != "curve"} for row in rows]
        json.dump({"settings": vars(args), "summary": summary, "runs": results}, f)
    with open(f"{stem}.txt", "w") as f:
        f.write(text + "\n")
    figures = plot(rows, stem, f"{args.task}, {args.groups} groups")
    print(f"\nwrote {stem}.json, .txt and {', '.join(figures)}")


if __name__ == "__main__":
    main()
