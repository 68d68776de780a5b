"""Training-step benchmark: ResNet-18 (32x32 inputs, batch 16 per rank) on 4 ranks with
  allreduce   the hybrid store over one MPI world,
  overlap     the same with MXKV_OVERLAP=1 (buckets reduced while backward runs),
  sync        the hybrid store, 2 groups of 2 joined by 2 dist_sync servers,
  sync-2bit   the same with the Trainer's compression_params 2bit (threshold 0.5): each
              group's sum crosses as 2-bit codes the servers sum, the optimizer on the
              workers (not in the default list; name it in --configurations),
  sync-1bit   the same with 1bit (1-bit SGD's quantiser),
  async       the hybrid store, 2 groups of 2, 2 dist_async servers holding the weights,
  async-2bit  the same with compression_params 2bit: each group's gradients cross as codes
              the servers decode and apply (weights pulled in float32); async-1bit: 1bit,
  dist_sync   MXNet's native ps-lite store, every rank a worker, 2 servers,
  NAME+trusted  any hybrid configuration with mxkv-launch --trusted-network: with --hosts,
              ps-lite on the hosts' addresses, connected directly instead of through the
              relays (the default between hosts); e.g. sync, sync+trusted, easgd,
              easgd+trusted measure what the relays cost,
  NAME+one-group  on one machine, a hybrid configuration's ranks in one group (what
              mxkv-launch gives by default: one group per host) instead of two,
  horovod     Horovod's MXNet binding (hvd.DistributedTrainer, its own tensor fusion) when it
              is installed (optional; skipped with a note otherwise),
all in one run, on generated data, every rank and server with OMP_NUM_THREADS=--threads.
Per step: compute (forward + backward) and the trainer step (communication + update),
measured apart (a wait for the engine in between), and the whole step measured in
separate steps without that wait (where overlap can help), medians over the measured
steps of rank 0; bytes through the parameter server per step (sum over the processes that
talk to it); CPU per whole step, of every rank's process and of the servers (found in
/proc by a tag in their environment; not on --cluster external hosts), and how busy that
kept the machine's cores: where it is near 100 %, the step takes as long as its CPU does.
Prints a table and writes training_step.json and training_step.png to --out.
With --hosts H (root): on H emulated hosts instead (emulated_hosts.py; --cluster external:
on hosts someone else set up, external_hosts.py), --ranks / H ranks
each, one group per host, every host's link shaped to --mbps, the scheduler and servers on
h1 (dist_sync: its workers spread the same way); each step beside its link limit: what
h1's link must carry each way per step (a hybrid group's leader pushes and pulls the model
once; dist_sync, every worker) over the rate.

    python examples/benchmarks/training_step.py [--steps 20] [--ranks 4] [--threads 1]
    python examples/benchmarks/training_step.py --hosts 2 --mbps 1000 \
        --configurations sync dist_sync
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Dict, List, Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from emulated_hosts import (  # noqa: E402
    add_cluster_option,
    allreduce_limit_seconds,
    hosts_of,
    launch_on_hosts,
    servers_limit_seconds,
)
from job_output import json_lines  # noqa: E402
from process_cpu import cpu_seconds  # noqa: E402

BATCH = 16
CLASSES = 10
SERVERS = 2
# set for each job: its parameter servers carry it in their environment, so that rank 0
# can find them in /proc and count their CPU (cpu_seconds_of_servers)
RUN_TAG = "TRAINING_STEP_RUN"


class HorovodRank:
    """What the worker needs of a store (rank, workers, close), from Horovod."""

    def __init__(self, hvd):
        self._hvd = hvd
        self.rank, self.num_workers = hvd.rank(), hvd.size()

    def close(self) -> None:
        """Ends Horovod's background thread before exit (left running, the ranks hung at
        exit here, spinning, after their last step)."""
        self._hvd.shutdown()


def horovod_trainer(net, optimizer_params: dict):
    """(Horovod's DistributedTrainer with rank 0's parameters everywhere, its rank)."""
    import horovod.mxnet as hvd

    hvd.init()
    net(_one_image())  # the parameters' shapes, before they are broadcast
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    return hvd.DistributedTrainer(net.collect_params(), "sgd", optimizer_params), HorovodRank(hvd)


def _one_image():
    import mxnet as mx

    return mx.nd.zeros((1, 3, 32, 32))


def worker(kvstore_name: str, steps: int, warmup: int, compression: Optional[str]) -> None:
    """One rank: trains ResNet-18 on random data, prints a JSON line with its timings."""
    import mxnet as mx
    from mxnet import autograd, gluon

    net = gluon.model_zoo.vision.resnet18_v1(classes=CLASSES)
    optimizer_params = {"learning_rate": 0.01, "momentum": 0.9}
    if kvstore_name == "horovod":
        mx.random.seed(0)
        net.initialize(mx.init.Xavier())
        trainer, kv = horovod_trainer(net, optimizer_params)
    else:
        kv = mx.kv.create(kvstore_name)
        mx.random.seed(kv.rank)
        net.initialize(mx.init.Xavier())
        trainer = gluon.Trainer(
            net.collect_params(),
            "sgd",
            optimizer_params,
            kvstore=kv,
            compression_params=compression_params(compression),
        )
    net.hybridize()
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    rng = np.random.RandomState(kv.rank)
    x = mx.nd.array(rng.rand(BATCH, 3, 32, 32))
    y = mx.nd.array(rng.randint(0, CLASSES, BATCH))
    compute, update, whole = [], [], []
    traffic_before = (0, 0)
    counts_servers = kv.rank == 0 and RUN_TAG in os.environ
    for step in range(warmup + 2 * steps):
        if step == warmup:
            traffic_before = ps_traffic()
        if step == warmup + steps:  # the whole steps: CPU of this process, and the servers'
            cpu_before = time.process_time()
            servers_before = cpu_seconds_of_servers() if counts_servers else None
        apart = step < warmup + steps
        started = time.perf_counter()
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        if apart:
            mx.nd.waitall()
        middle = time.perf_counter()
        trainer.step(BATCH)
        mx.nd.waitall()
        if warmup <= step and apart:
            compute.append(middle - started)
            update.append(time.perf_counter() - middle)
        elif not apart:
            whole.append(time.perf_counter() - started)
    cpu = time.process_time() - cpu_before
    servers_after = cpu_seconds_of_servers() if counts_servers else None
    servers_cpu = (
        servers_after - servers_before
        if servers_before is not None and servers_after is not None
        else None
    )
    pushed, pulled = (a - b for a, b in zip(ps_traffic(), traffic_before))
    size = sum(p.data().size for p in net.collect_params().values() if p.grad_req != "null")
    print(
        json.dumps(
            {
                "rank": kv.rank,
                "workers": kv.num_workers,
                "compute": compute,
                "step": update,
                "whole": whole,
                "ps_bytes_per_step": (pushed + pulled) / (2 * steps),
                "gradient_bytes": size * 4,
                "cpu_ms_per_step": 1e3 * cpu / steps,
                "servers_cpu_ms_per_step": None
                if servers_cpu is None
                else 1e3 * servers_cpu / steps,
            }
        ),
        flush=True,
    )
    if hasattr(kv, "close"):
        kv.close()


def cpu_seconds_of_servers() -> Optional[float]:
    """CPU seconds (user and system, every thread) this job's parameter servers have used so
    far: the processes with DMLC_ROLE=server and this job's RUN_TAG in their environment
    (None when none is in this machine's /proc: servers on another machine)."""
    marks = (b"DMLC_ROLE=server", f"{RUN_TAG}={os.environ[RUN_TAG]}".encode())
    seconds, found = 0.0, False
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environment = f.read().split(b"\0")
            if not all(mark in environment for mark in marks):
                continue
            seconds += cpu_seconds(int(pid))
        except OSError:  # ended meanwhile, or not ours to read
            continue
        found = True
    return seconds if found else None


def compression_params(compression: Optional[str]) -> Optional[dict]:
    """The Trainer's compression_params for --gc 2bit (threshold 0.5) or 1bit."""
    if not compression:
        return None
    return {"type": "2bit", "threshold": 0.5} if compression == "2bit" else {"type": compression}


def ps_traffic():
    """Bytes this process pushed and pulled through the parameter server (hybrid modes)."""
    try:
        from mxkv_hybrid.ps.client import traffic
    except ImportError:
        return (0, 0)
    return traffic()


def run_configuration(
    name: str, ranks: int, steps: int, warmup: int, cluster=None
) -> Optional[dict]:
    """Medians of one configuration's job (on `cluster`'s emulated hosts, if given), or None
    (with a note) for horovod when it is not installed."""
    args = ["--worker", "--steps", str(steps), "--warmup", str(warmup)]
    if name == "horovod" and importlib.util.find_spec("horovod") is None:
        print(
            "note: Horovod's MXNet binding is not installed: the horovod configuration is "
            "skipped (docs/performance/index.md says how to build it)",
            flush=True,
        )
        return None
    if name == "horovod" and ranks > (os.cpu_count() or 1):
        print(
            f"note: horovod is skipped with {ranks} ranks on {os.cpu_count()} cores: measured "
            "here, 4 Horovod ranks on 2 cores did not finish 3 steps in 90 s (its threads "
            "spin); use --ranks 2",
            flush=True,
        )
        return None
    print(f"-- {name} ...", flush=True)
    os.environ[RUN_TAG] = uuid.uuid4().hex  # every process of the job inherits it
    if name == "dist_sync":
        from ps_job import run_ps_job

        outputs = run_ps_job(
            [sys.executable, __file__, *args, "--kvstore", "dist_sync"],
            num_workers=ranks,
            num_servers=SERVERS,
            cluster=cluster,
        )
        rows = [r for out in outputs for r in json_lines(out)]
        # every worker pushes and pulls every gradient once per step
        for r in rows:
            r["ps_bytes_per_step"] = 2 * r["gradient_bytes"]
    else:
        base, *flags = name.split("+")
        mode, _, compression = base.partition("-")
        env = dict(
            os.environ,
            MXKV_MODE="allreduce" if name == "overlap" else mode,
            MXKV_OVERLAP="1" if name == "overlap" else "0",
        )
        groups = cluster.size if cluster else 1 if "one-group" in flags else 2
        options = (
            []
            if base in ("allreduce", "overlap", "horovod")
            else ["--group-size", str(ranks // groups), "--servers", str(SERVERS)]
        )
        options += ["--trusted-network"] if "trusted" in flags else []
        store = "horovod" if name == "horovod" else "hybrid"
        command = [
            "python",
            __file__,
            *args,
            "--kvstore",
            store,
            *(["--gc", compression] if compression else []),
        ]
        if cluster is None:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "mxkv_hybrid.launch",
                    "-n",
                    str(ranks),
                    "--timeout",
                    "1500",
                    *options,
                    "--",
                    *command,
                ],
                capture_output=True,
                check=False,
                text=True,
                env=env,
            )
        else:
            done = launch_on_hosts(cluster, ranks // cluster.size, command, env, options)
        if done.returncode != 0:
            sys.exit(f"{name} failed:\n{done.stdout}\n{done.stderr}")
        rows = json_lines(done.stdout)
    first = min(rows, key=lambda r: r["rank"])
    last = max(rows, key=lambda r: r["rank"])  # on the last host: async's groups differ
    limit = link_limit_ms(name, first["gradient_bytes"], ranks, cluster) if cluster else None
    return {
        "configuration": name,
        "ranks": ranks,
        "limit_ms": limit,
        "compute_ms": 1e3 * np.median(first["compute"]),
        "step_ms": 1e3 * np.median(first["step"]),
        "total_ms": 1e3 * np.median(first["whole"]),
        "last_rank_total_ms": 1e3 * np.median(last["whole"]),
        "total_mean_ms": 1e3 * np.mean(first["whole"]),  # easgd: every tau-th step exchanges
        "ps_mb_per_step": sum(r["ps_bytes_per_step"] for r in rows) / 2**20,
        "gradient_mb": first["gradient_bytes"] / 2**20,
        # CPU per whole step, every rank's process and (where this machine sees them) the
        # servers': beside os.cpu_count() x the step, how busy the machine was
        "workers_cpu_ms": sum(r["cpu_ms_per_step"] for r in rows),
        "servers_cpu_ms": first["servers_cpu_ms_per_step"],
    }


def over_rounds(rounds: List[List[Optional[dict]]]) -> List[dict]:
    """Each configuration's results over the rounds (each round ran every configuration
    once, in turn): the medians of its rounds' medians, and each round's whole step."""
    combined = []
    for runs in zip(*rounds):
        done = [r for r in runs if r is not None]
        if not done:
            continue
        result = dict(done[0])
        for key, value in done[0].items():
            if key.endswith("_ms") and value is not None:
                result[key] = float(np.median([r[key] for r in done]))
        result["round_total_ms"] = [r["total_ms"] for r in done]
        combined.append(result)
    return combined


def pair_ratios(by_name: Dict[str, dict], name: str, baseline: str) -> List[float]:
    """`name`'s whole step over `baseline`'s, round by round (each pair ran side by side)."""
    return [
        a / b for a, b in zip(by_name[name]["round_total_ms"], by_name[baseline]["round_total_ms"])
    ]


def link_limit_ms(name: str, gradient_bytes: int, ranks: int, cluster) -> Optional[float]:
    """The least time one step's communication can take behind the hosts' links (None for
    the averaging modes, which exchange every tau-th step)."""
    name = name.partition("+")[0]
    if name in ("easgd", "lasgd"):
        return None
    if name in ("allreduce", "overlap", "horovod"):
        seconds = allreduce_limit_seconds(gradient_bytes, cluster.size, cluster.rate_mbit)
    else:
        talkers = ranks // cluster.size if name == "dist_sync" else 1
        if name == "sync-2bit":  # a float32 word per digits_per_word values
            from mxkv_hybrid.comm import _C

            gradient_bytes /= _C.digits_per_word(cluster.size)
        if name == "sync-1bit":  # every group's slot: 40 bytes per 256 values, 3 a word
            gradient_bytes *= cluster.size * 40 / 256 / 3
        seconds = servers_limit_seconds(gradient_bytes, talkers, cluster.size, cluster.rate_mbit)
    return 1e3 * seconds


def plot(results: list, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["configuration"] for r in results]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.bar(names, [r["compute_ms"] for r in results], label="forward + backward")
    left.bar(
        names,
        [r["step_ms"] for r in results],
        bottom=[r["compute_ms"] for r in results],
        label="trainer.step (communication + update)",
    )
    left.set_ylabel("ms per step (median, rank 0)")
    left.set_title(f"ResNet-18, 32x32, batch {BATCH}/rank, {results[0]['ranks']} ranks")
    left.legend(fontsize=8)
    right.bar(names, [r["ps_mb_per_step"] for r in results], color="tab:green")
    right.set_ylabel("MiB through the parameter server per step")
    right.set_title("parameter-server traffic (all processes)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, default=4, help="ranks (even: two groups)")
    parser.add_argument("--steps", type=int, default=20, help="measured steps")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every configuration once a round, in turn, this many times (medians "
        "over the rounds; pairs side by side)",
    )
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument(
        "--configurations",
        nargs="+",
        default=["allreduce", "overlap", "sync", "async", "dist_sync", "horovod"],
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="OMP_NUM_THREADS of every rank and server (default 1: with MXNet's "
        "default, two Horovod ranks on 2 cores crawled)",
    )
    parser.add_argument(
        "--hosts",
        type=int,
        default=0,
        help="on this many emulated hosts (needs root), --ranks / H each",
    )
    parser.add_argument(
        "--mbps", type=float, default=1000, help="with --hosts: the rate of every host's link"
    )
    add_cluster_option(parser)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kvstore", help=argparse.SUPPRESS)
    parser.add_argument("--gc", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.kvstore, args.steps, args.warmup, args.gc)

    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # every job below inherits it
    links = None
    if args.hosts:
        with hosts_of(args.cluster, args.hosts, args.mbps) as cluster:
            links = cluster.links()
            rounds = [
                [
                    run_configuration(c, args.ranks, args.steps, args.warmup, cluster)
                    for c in args.configurations
                ]
                for _ in range(args.rounds)
            ]
    else:
        rounds = [
            [run_configuration(c, args.ranks, args.steps, args.warmup) for c in args.configurations]
            for _ in range(args.rounds)
        ]
    results = over_rounds(rounds)
    where = (
        f"{args.hosts} {args.cluster} hosts, links {args.mbps:g} Mbit/s, servers on the first"
        if args.hosts
        else "one machine"
    )
    print(
        f"\nResNet-18, 32x32, batch {BATCH} per rank, {args.ranks} ranks, {SERVERS} servers "
        f"({where}), OMP_NUM_THREADS={args.threads}; medians of {args.steps} steps, rank 0, "
        f"and over {args.rounds} round(s)"
    )
    cores = None if args.hosts and args.cluster == "external" else os.cpu_count()
    for r in results:
        r["cores_busy"] = cores and (r["workers_cpu_ms"] + (r["servers_cpu_ms"] or 0)) / (
            cores * r["total_ms"]
        )
    print(
        f"{'configuration':>14} {'compute ms':>11} {'step ms':>9} {'whole ms':>9} "
        f"{'last rank':>10} {'PS MiB/step':>12} {'CPU ms':>13} {'busy':>5} "
        f"{'limit ms':>9} {'step / limit':>13}"
    )
    for r in results:
        limit = (
            f"{r['limit_ms']:9.0f} {r['step_ms'] / r['limit_ms']:12.2f}x" if r["limit_ms"] else ""
        )
        servers = f"+{r['servers_cpu_ms']:.0f}" if r["servers_cpu_ms"] is not None else ""
        busy = f"{r['cores_busy']:5.0%}" if r["cores_busy"] else f"{'':5}"
        print(
            f"{r['configuration']:>14} {r['compute_ms']:11.1f} {r['step_ms']:9.1f} "
            f"{r['total_ms']:9.1f} {r['last_rank_total_ms']:10.1f} "
            f"{r['ps_mb_per_step']:12.1f} {r['workers_cpu_ms']:6.0f}{servers:>7} {busy} {limit}"
        )
    print(
        "(times of rank 0, on h1 with the servers; 'last rank': the whole step of the "
        "highest rank, on the last host: in async its group alone crosses a link; "
        "'CPU ms': every rank's process + the servers', per whole step; 'busy': that "
        f"CPU over {cores} cores x the whole step)"
    )
    by_name = {r["configuration"]: r for r in results}
    if "allreduce" in by_name and "overlap" in by_name:
        print(
            f"\noverlap on / off, whole step: "
            f"{by_name['overlap']['total_ms'] / by_name['allreduce']['total_ms']:.3f}"
        )
    to_dist_sync = {}  # whole step over dist_sync's in the same round
    for name in [n for n in by_name if n.startswith("sync")]:
        if "dist_sync" in by_name:
            ratios = pair_ratios(by_name, name, "dist_sync")
            to_dist_sync[name] = {"rounds": ratios, "median": float(np.median(ratios))}
            print(
                f"{name} / dist_sync, whole step, round by round: "
                f"{', '.join(f'{r:.3f}' for r in ratios)}; median {np.median(ratios):.3f}"
            )
    for name, r in by_name.items():
        direct = by_name.get(f"{name}+trusted")
        if direct:
            print(
                f"{name} through the relays / {name}+trusted (direct), whole step: median "
                f"{r['total_ms'] / direct['total_ms']:.3f}, mean "
                f"{r['total_mean_ms'] / direct['total_mean_ms']:.3f}"
            )
    for coded in ("sync-2bit", "sync-1bit", "async-2bit", "async-1bit"):
        plain = coded.partition("-")[0]
        if plain in by_name and coded in by_name:
            print(
                f"{coded} / {plain}, whole step: "
                f"{by_name[coded]['total_ms'] / by_name[plain]['total_ms']:.3f}"
            )
    os.makedirs(args.out, exist_ok=True)
    name = f"training_step_{args.hosts}_hosts" if args.hosts else "training_step"
    with open(os.path.join(args.out, f"{name}.json"), "w") as f:
        json.dump(
            {
                "batch_per_rank": BATCH,
                "servers": SERVERS,
                "omp_num_threads": args.threads,
                "cores": cores,
                "rounds": args.rounds,
                "hosts": args.hosts,
                "cluster": args.cluster if args.hosts else None,
                "links": links,
                "mbps": args.mbps if args.hosts else None,
                "results": results,
                "to_dist_sync": to_dist_sync,
            },
            f,
            indent=1,
        )
    plot(results, os.path.join(args.out, f"{name}.png"))
    print(f"\nwrote {args.out}/{name}.json and {name}.png")


if __name__ == "__main__":
    main()
