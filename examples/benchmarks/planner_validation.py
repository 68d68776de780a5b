"""The planner (python -m mxkv_hybrid.plan) against measured steps on this machine.

For each model (a small CNN, ResNet-18; 32x32 inputs, 10 classes, --batch per rank),
rank count (2: 2 groups of 1, 3: 3 groups of 1, 4: 2 groups of 2) and emulated link
between the groups (--mbps; 0: none, the machine's own speed), every configuration that
runs here is trained in --rounds jobs (shuffled order): a warm-up window, then windows
of tau steps (forward, backward, trainer.step, so averaging steps count) for about
--seconds; a rank's step is its median window over tau, a job's the harmonic mean of its
ranks' (its steps a second per rank: ranks that do not wait for each other progress at
their own rates on unevenly shared cores), a configuration's the median job. It is set
beside the planner's prediction for the same cluster, given what it would be given for a
real one, measured here first: the link between two ranks (an MPI ping-pong); ps-lite
(push and pull of 1 KiB and of the model's arrays): one worker's connection to a server,
and a server's own throughput serving two workers at once; one rank alone: compute,
update and the store's own cost a step (a 1-rank job's step less those); each group's
share of the machine's cores (the planner's cores per host); per rank count, with all
the job's ranks computing at once without a store, how much longer the slowest rank's
step is than compute and update stretched by that share when it ends with a 1-float
allreduce over every rank or over its group (the wait terms: stragglers and spinning on
shared cores), and when every rank meets only once every tau steps (the drift: the share
of the wait that adds up between meetings, as ranks progress at unequal rates). Each of
those is the median of 3 jobs. The servers are not behind the emulated link (it charges
the leaders). With --hosts (root), the jobs of each setting run instead on emulated hosts
(--cluster external: on hosts someone else set up, external_hosts.py; one per group, its
ranks sharing one tbf-shaped link of --mbps, MPI over TCP, the servers and scheduler on
h1) and the planner is given what a real cluster's user would give it: a host's link
shared by its ranks (as the throttle's is) as an MPI ping-pong between two such hosts
measured it, and the servers behind h1's link (servers_beside); compute and ps-lite's own
throughput are calibrated on loopback as without --hosts, so no term is fitted on these
runs. A configuration whose first job took longer than --long runs once. Prints
a table, the share of configurations within 20 %, whether the predicted best is the
measured best (or within 10 % of it); writes planner_validation.json and .png (predicted
against measured) to --out.

    python examples/benchmarks/planner_validation.py [--models cnn resnet18] [--ranks 2 3 4]
        [--mbps 0 1000 100] [--rounds 3] [--seconds 2] [--hosts]
"""

import argparse
import json
import os
import subprocess
import sys
import time
from contextlib import nullcontext
from functools import lru_cache
from typing import Dict, List, Optional, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


from emulated_hosts import add_cluster_option, hosts_of, launch_on_hosts  # noqa: E402
from job_output import json_lines  # noqa: E402
from ps_job import run_ps_job  # noqa: E402

CLASSES, TAU = 10, 4
# configuration (the planner's name) -> (MXKV_MODE, extra knobs)
CONFIGURATIONS = {
    "allreduce, flat": ("allreduce", {"MXKV_HIERARCHY": "off"}),
    "allreduce, hierarchical": ("allreduce", {"MXKV_HIERARCHY": "on"}),
    "sync": ("sync", {}),
    "async": ("async", {}),
    f"easgd tau={TAU} (ps)": ("easgd", {"MXKV_TAU": str(TAU)}),
    f"easgd tau={TAU} (rma)": ("easgd", {"MXKV_TAU": str(TAU), "MXKV_TRANSPORT": "rma"}),
    f"lasgd tau={TAU}": ("lasgd", {"MXKV_TAU": str(TAU)}),
}


def network(model: str):
    from mxnet import gluon

    if model == "resnet18":
        return gluon.model_zoo.vision.resnet18_v1(classes=CLASSES)
    net = gluon.nn.HybridSequential()
    net.add(
        gluon.nn.Conv2D(32, 3, padding=1, activation="relu"),
        gluon.nn.MaxPool2D(),
        gluon.nn.Conv2D(64, 3, padding=1, activation="relu"),
        gluon.nn.MaxPool2D(),
        gluon.nn.Flatten(),
        gluon.nn.Dense(256, activation="relu"),
        gluon.nn.Dense(CLASSES),
    )
    return net


def train(
    model: str, batch: int, windows: int, kvstore=None, wait_for_others=None, wait_every: int = 1
) -> Tuple[float, float, float]:
    """(median step, median forward + backward, median update) in seconds, this rank.
    One warm-up window then `windows` windows of TAU steps (so averaging steps count);
    each window ends by waiting for the weights the next step reads (not for lasgd's
    average in flight) and the step is the median window over TAU. Without a store
    (kvstore None), every step is timed in parts, then every `wait_every` steps
    `wait_for_others()` if given (a collective of no size: what waiting for the other
    ranks costs)."""
    import mxnet as mx
    from mxnet import autograd, gluon

    net = network(model)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    trainer = gluon.Trainer(
        net.collect_params(), "sgd", {"learning_rate": 0.01, "momentum": 0.9}, kvstore=kvstore
    )
    weights = [p for p in net.collect_params().values() if p.grad_req != "null"]
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    x = mx.nd.random.uniform(shape=(batch, 3, 32, 32))
    y = mx.nd.array(np.arange(batch) % CLASSES)
    window_times, compute, update = [], [], []
    for window in range(1 + windows):
        began = time.perf_counter()
        for step in range(TAU):
            started = time.perf_counter()
            with autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            if kvstore is None:
                mx.nd.waitall()
            middle = time.perf_counter()
            trainer.step(batch)
            if kvstore is None:
                mx.nd.waitall()
                ended = time.perf_counter()
                if wait_for_others and (step + 1) % wait_every == 0:
                    wait_for_others()
                if window:
                    compute.append(middle - started)
                    update.append(ended - middle)
        for p in weights:
            p.data().wait_to_read()
        if window:
            window_times.append((time.perf_counter() - began) / TAU)
    if kvstore is None:
        return float(np.median(window_times)), float(np.median(compute)), float(np.median(update))
    return float(np.median(window_times)), 0.0, 0.0


@lru_cache(maxsize=None)
def array_sizes(model: str) -> List[int]:
    """Bytes of the model's trainable arrays (the net built once per model)."""
    from mxkv_hybrid.plan.model_sizes import trainable_bytes

    return trainable_bytes(network(model), (1, 3, 32, 32))


def step_worker(args: argparse.Namespace) -> None:
    import mxnet as mx

    import mxkv_hybrid  # noqa: F401  (registers 'hybrid')

    kv = mx.kv.create("hybrid")
    step, _, _ = train(args.model, args.batch, args.windows, kv)
    print(json.dumps({"rank": kv.rank, "step_seconds": step}), flush=True)
    kv.close()


def alone_worker(args: argparse.Namespace) -> None:
    """Compute and update with no store, alone or beside the other ranks of a job doing the
    same (what they cost each other on shared cores); with --wait group|world, every
    --wait-every steps end with a 1-float allreduce over this rank's group (--group-size)
    or all ranks."""
    wait = None
    if args.wait != "none":
        from mpi4py import MPI

        world = MPI.COMM_WORLD
        comm = world if args.wait == "world" else world.Split(world.rank // args.group_size)
        one = np.zeros(1)
        wait = lambda: comm.Allreduce(MPI.IN_PLACE, one)  # noqa: E731
    step, compute, update = train(args.model, args.batch, args.windows, None, wait, args.wait_every)
    print(
        json.dumps({"step_seconds": step, "compute_seconds": compute, "update_seconds": update}),
        flush=True,
    )


def ping_pong_worker() -> None:
    """Rank 0 and 1: the round trip of 1 KiB (latency) and of 32 MiB (bandwidth)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    times = {}
    for nbytes, reps in ((1024, 200), (32 << 20, 10)):
        buffer = np.zeros(nbytes, np.uint8)
        comm.Barrier()
        started = time.perf_counter()
        for _ in range(reps):
            if comm.rank == 0:
                comm.Send(buffer, dest=1)
                comm.Recv(buffer, source=1)
            else:
                comm.Recv(buffer, source=0)
                comm.Send(buffer, dest=0)
        times[nbytes] = (time.perf_counter() - started) / reps / 2  # one way
    if comm.rank == 0:
        print(json.dumps(link_of(times[1024], times[32 << 20], 32 << 20)), flush=True)


def ps_link_worker(model: str) -> None:
    """A dist_sync worker (of one or more, one server), as a leader moves its group's
    gradients and weights: 1 KiB pushed then pulled (latency), and every array of the
    model pushed, then every one pulled (bandwidth); with several workers at once, what
    the server moves for all of them."""
    import mxnet as mx

    kv = mx.kv.create("dist_sync")
    small = [mx.nd.ones((256,))]
    model = [mx.nd.ones((nbytes // 4,)) for nbytes in array_sizes(model)]
    times = {}
    for name, arrays, reps in (("small", small, 100), ("model", model, 8)):
        keys = list(range(len(times) * 1000, len(times) * 1000 + len(arrays)))
        kv.init(keys, arrays)
        kv._barrier()
        started = time.perf_counter()
        for _ in range(reps):
            kv.push(keys, arrays)
            kv.pull(keys, out=arrays)
            mx.nd.waitall()
        times[name] = (time.perf_counter() - started) / reps / 2  # one way
    print(
        json.dumps(link_of(times["small"], times["model"], sum(a.size * 4 for a in model))),
        flush=True,
    )


def link_of(small_seconds: float, large_seconds: float, large_bytes: int) -> dict:
    """Latency and bandwidth from the one-way times of a small and a large message."""
    return {
        "latency": small_seconds,
        "bandwidth": large_bytes / max(large_seconds - small_seconds, 1e-9),
    }


def launch(
    ranks: int, options: List[str], worker_args: List[str], env: dict, cluster=None
) -> List[dict]:
    """The JSON lines of a job of this script's workers: on this machine, or on every host
    of an emulated `cluster` (ranks / its size on each)."""
    if cluster is not None:
        done = launch_on_hosts(
            cluster,
            ranks // cluster.size,
            ["python", __file__, *worker_args],
            env,
            options,
            timeout=900,
        )
    else:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "mxkv_hybrid.launch",
                "-n",
                str(ranks),
                "--timeout",
                "900",
                *options,
                "--",
                "python",
                __file__,
                *worker_args,
            ],
            capture_output=True,
            check=False,
            text=True,
            env=env,
        )
    if done.returncode != 0:
        sys.exit(f"job failed ({options} {worker_args}):\n{done.stdout}\n{done.stderr}")
    return json_lines(done.stdout)


def layout(ranks: int) -> Tuple[int, int]:
    """(groups, ranks per group): groups of 1 for 2 and 3 ranks, of 2 for 4."""
    size = 2 if ranks % 2 == 0 and ranks > 2 else 1
    return ranks // size, size


def measure_step(
    name: str, model: str, ranks: int, mbps: float, windows: int, args, env: dict, cluster=None
) -> float:
    mode, knobs = CONFIGURATIONS[name]
    size = layout(ranks)[1]
    options: List[str] = []
    if mode in ("sync", "async") or (mode == "easgd" and knobs.get("MXKV_TRANSPORT") != "rma"):
        options = ["--group-size", str(size), "--servers", "1"]
        options += ["--one-job"] if mode in ("async", "easgd") else []
    environment = dict(
        env,
        MXKV_MODE=mode,
        MXKV_GROUP_SIZE=str(size),
        **knobs,
        MXKV_THROTTLE_MBPS=str(0 if cluster else mbps),
    )
    rows = launch(
        ranks,
        options,
        [
            "--worker",
            "step",
            "--model",
            model,
            "--batch",
            str(args.batch),
            "--windows",
            str(windows),
        ],
        environment,
        cluster,
    )
    return job_step(rows, ranks)


def job_step(rows: List[dict], ranks: int) -> float:
    """A job's step: its ranks' steps a second, per rank (their harmonic mean). Ranks that
    do not wait for each other progress at their own rates when the cores are shared
    unevenly (3 ranks on 2 cores: one may have a core to itself); ranks in lockstep end
    their windows together, so for them it is any rank's step."""
    steps = [r["step_seconds"] for r in rows]
    if len(steps) != ranks:
        sys.exit(f"expected a step from each of {ranks} ranks, got {len(steps)}: {rows}")
    return len(steps) / sum(1 / s for s in steps)


def share_of_cores(ranks: int) -> float:
    """Each group's share of this machine's cores (the planner's cores per host)."""
    return (os.cpu_count() or 1) / layout(ranks)[0]


def calibrate(model: str, ranks_counts: List[int], args, env: dict) -> Dict[int, dict]:
    """One rank alone: compute and update (the planner's workload) and the store's own cost
    a step (a 1-rank job's step less those). Per rank count, with every rank computing at
    once and no store, the slowest rank's step when it ends waiting for every rank, or
    for its group, beyond compute and update stretched by the cores' sharing (the world
    and group wait: what ranks in lockstep lose to stragglers and spinning); and the same
    when every rank meets once every TAU steps, from which the drift (the part of the
    world wait that adds up between meetings: w_tau = drift + (w_world - drift) / TAU)."""

    def at_once(n: int, wait: str, every: int = 1) -> dict:
        """The slowest rank's medians; of 3 jobs, the median one (by step)."""
        jobs = [
            max(
                launch(
                    n,
                    [],
                    [
                        "--worker",
                        "alone",
                        "--model",
                        model,
                        "--batch",
                        str(args.batch),
                        "--windows",
                        "6",
                        "--wait",
                        wait,
                        "--wait-every",
                        str(every),
                        "--group-size",
                        str(layout(n)[1]),
                    ],
                    env,
                ),
                key=lambda r: r["step_seconds"],
            )
            for _ in range(3)
        ]
        return sorted(jobs, key=lambda r: r["step_seconds"])[1]

    one_rank = float(
        np.median(
            [
                launch(
                    1,
                    [],
                    [
                        "--worker",
                        "step",
                        "--model",
                        model,
                        "--batch",
                        str(args.batch),
                        "--windows",
                        "6",
                    ],
                    dict(env, MXKV_MODE="allreduce"),
                )[0]["step_seconds"]
                for _ in range(3)
            ]
        )
    )
    alone = at_once(1, "none")
    alone_step = alone["compute_seconds"] + alone["update_seconds"]
    calibration = {}
    for n in ranks_counts:
        stretched = alone_step * max(1.0, layout(n)[1] / share_of_cores(n))
        scopes = ("world", "group") if layout(n)[1] > 1 else ("world",)  # (groups of 1: none)
        waits = {
            f"{scope}_wait_seconds": max(0.0, at_once(n, scope)["step_seconds"] - stretched)
            for scope in scopes
        }
        every_tau = max(0.0, at_once(n, "world", TAU)["step_seconds"] - stretched)
        world = waits["world_wait_seconds"]
        drift = min(world, max(0.0, (TAU * every_tau - world) / (TAU - 1)))
        calibration[n] = dict(
            compute_seconds=alone["compute_seconds"],
            update_seconds=alone["update_seconds"],
            overhead_seconds=max(0.0, one_rank - alone_step),
            drift_seconds=drift,
            **waits,
        )
    return calibration


def ps_links(model: str) -> dict:
    """ps-lite moving the model's arrays: one worker's connection to a server (leader), and
    a server's own throughput serving two workers at once (server)."""
    links = {}
    for workers in (1, 2):
        outputs = run_ps_job(
            [sys.executable, __file__, "--worker", "ps-link", "--model", model], workers, 1
        )
        slowest = min((json_lines(o)[0] for o in outputs), key=lambda r: r["bandwidth"])
        links["leader" if workers == 1 else "server"] = dict(
            slowest, bandwidth=workers * slowest["bandwidth"]
        )
    print(
        f"{model} through ps-lite: a worker to a server {1e6 * links['leader']['latency']:.0f} "
        f"us, {links['leader']['bandwidth'] / 1e9:.2f} GB/s; a server serving 2 workers "
        f"{links['server']['bandwidth'] / 1e9:.2f} GB/s",
        flush=True,
    )
    return links


def predict(
    model_bytes: List[int],
    measured: dict,
    link: dict,
    ps_link: dict,
    ranks: int,
    mbps: float,
    host_link: Optional[dict] = None,
) -> Dict[str, float]:
    """The planner's step of every configuration; `host_link`: on emulated hosts, their
    link as measured (shared by a host's ranks, and in front of the servers on h1)."""
    from mxkv_hybrid.comm import algorithm_table
    from mxkv_hybrid.plan.cluster import Cluster, Link
    from mxkv_hybrid.plan.mode_costs import Planner, Workload

    groups, size = layout(ranks)
    inside = Link(link["latency"], link["bandwidth"])
    if host_link:
        between = Link(**host_link)
    else:
        between = Link(0.0, mbps * 1e6 / 8) if mbps else inside
    cluster = Cluster(
        groups,
        size,
        inside,
        between,
        servers=1,
        servers_beside=bool(host_link),
        server_link=Link(**ps_link["server"]),
        connection=Link(**ps_link["leader"]),
        cores_per_host=share_of_cores(ranks),
    )
    workload = Workload(model_bytes, **measured)
    table = algorithm_table.load(algorithm_table.default_path())
    return {
        r.configuration: r.step_seconds
        for r in Planner(workload, cluster, table).predictions(taus=(TAU,))
    }


def plot(rows: List[dict], path: str, where: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 6))
    markers = dict(zip(sorted({CONFIGURATIONS[r["configuration"]][0] for r in rows}), "osD^v<>"))
    colours = dict(zip(sorted({r["model"] for r in rows}), ("tab:blue", "tab:orange", "tab:green")))
    for r in rows:
        mode = CONFIGURATIONS[r["configuration"]][0]
        ax.scatter(
            1e3 * r["measured"],
            1e3 * r["predicted"],
            s=20,
            marker=markers[mode],
            color=colours[r["model"]],
            alpha=0.8,
        )
    low = 1e3 * min(min(r["measured"], r["predicted"]) for r in rows) * 0.8
    top = 1e3 * max(max(r["measured"], r["predicted"]) for r in rows) * 1.25
    ax.plot([low, top], [low, top], color="grey", linewidth=0.8)
    ax.fill_between(
        [low, top], [0.8 * low, 0.8 * top], [1.2 * low, 1.2 * top], color="grey", alpha=0.15
    )
    for mode, marker in markers.items():
        ax.scatter([], [], marker=marker, color="black", label=mode, s=20)
    for model, colour in colours.items():
        ax.scatter([], [], marker="s", color=colour, label=model, s=20)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, top)
    ax.set_ylim(low, top)
    ax.set_xlabel("measured ms per step")
    ax.set_ylabel("predicted ms per step (shaded: within 20 %)")
    ax.set_title(f"the planner against measured steps ({where})")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def measure_setting(
    model: str,
    ranks: int,
    mbps: float,
    names: List[str],
    predicted: Dict[str, float],
    args: argparse.Namespace,
    env: dict,
    random: np.random.Generator,
    cluster=None,
) -> Dict[str, List[float]]:
    """The steps of each configuration of `names` in --rounds jobs, in shuffled order (one
    job only for a configuration whose first took longer than --long)."""
    measured: Dict[str, List[float]] = {n: [] for n in names}
    once = set()
    for round_ in range(args.rounds):
        for name in random.permutation(names):
            if name in once:
                continue
            print(
                f"-- {model}, {ranks} ranks, link {mbps:g} Mbit/s"
                f"{' (emulated hosts)' if cluster else ''}, {name}, round "
                f"{round_ + 1}/{args.rounds} ...",
                flush=True,
            )
            started = time.perf_counter()
            measured[name].append(
                measure_step(
                    name, model, ranks, mbps, windows_for(predicted[name], args), args, env, cluster
                )
            )
            if time.perf_counter() - started > args.long:
                once.add(name)
    return measured


def measure_host_links(args: argparse.Namespace, env: dict) -> Dict[float, dict]:
    """{mbps: the link between two hosts (emulated, shaped at mbps; or external), by MPI
    ping-pong."""
    if 0 in args.mbps:
        sys.exit("--hosts: every --mbps must be a rate (0, no link, means loopback)")
    links = {}
    for mbps in args.mbps:
        with hosts_of(args.cluster, 2, mbps) as cluster:
            links[mbps] = launch(2, [], ["--worker", "ping-pong"], env, cluster)[0]
        print(
            f"link between two {args.cluster} hosts at {mbps:g} Mbit/s: latency "
            f"{1e6 * links[mbps]['latency']:.1f} us, bandwidth "
            f"{8 * links[mbps]['bandwidth'] / 1e6:.0f} Mbit/s",
            flush=True,
        )
    return links


def windows_for(predicted: float, args: argparse.Namespace) -> int:
    """Windows of TAU steps for about --seconds of measured steps (at least 2)."""
    return int(min(args.max_windows, max(2, round(args.seconds / (TAU * predicted)))))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", default=["cnn", "resnet18"])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--mbps", type=float, nargs="+", default=[0, 1000, 100])
    parser.add_argument("--configurations", nargs="+", default=list(CONFIGURATIONS))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument(
        "--seconds", type=float, default=2.0, help="measured steps a job, about (by the prediction)"
    )
    parser.add_argument("--max-windows", type=int, default=15)
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="jobs per configuration, in shuffled order; the median counts",
    )
    parser.add_argument(
        "--long",
        type=float,
        default=60.0,
        help="a configuration whose first job took longer (s) runs once",
    )
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS everywhere")
    parser.add_argument("--seed", type=int, default=0, help="of the shuffled order")
    parser.add_argument(
        "--hosts",
        action="store_true",
        help="run the jobs on emulated hosts (root), one per group, each behind "
        "a link of --mbps that its ranks share",
    )
    add_cluster_option(parser)
    parser.add_argument(
        "--merge",
        help="an earlier planner_validation.json: its rows for "
        "the configurations not measured now are kept, "
        "predicted with this run's calibration",
    )
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument(
        "--worker", choices=["step", "alone", "ping-pong", "ps-link"], help=argparse.SUPPRESS
    )
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--windows", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--wait", choices=["none", "group", "world"], help=argparse.SUPPRESS)
    parser.add_argument("--group-size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--wait-every", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    workers = {
        "step": lambda: step_worker(args),
        "alone": lambda: alone_worker(args),
        "ping-pong": ping_pong_worker,
        "ps-link": lambda: ps_link_worker(args.model),
    }
    if args.worker:
        return workers[args.worker]()

    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    link = launch(2, [], ["--worker", "ping-pong"], env)[0]
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    print(
        f"link between two ranks: latency {1e6 * link['latency']:.1f} us, bandwidth "
        f"{link['bandwidth'] / 1e9:.2f} GB/s",
        flush=True,
    )
    if args.hosts and args.merge:
        sys.exit("--merge re-predicts rows on one machine: not with --hosts")
    host_links = measure_host_links(args, env) if args.hosts else {}
    random = np.random.default_rng(args.seed)
    rows, calibrations = [], {}
    for model in args.models:
        ps_link = ps_links(model)
        calibration = calibrate(model, args.ranks, args, env)
        calibrations[model] = dict(calibration, ps_link=ps_link)
        sizes = array_sizes(model)
        alone = calibration[args.ranks[0]]
        print(
            f"{model}: {sum(sizes) / 2**20:.1f} MiB; one rank alone: compute "
            f"{1e3 * alone['compute_seconds']:.1f} ms, update {1e3 * alone['update_seconds']:.1f}"
            f", the store's own cost {1e3 * alone['overhead_seconds']:.1f}; world / group wait: "
            + "; ".join(
                f"{n} ranks {1e3 * c['world_wait_seconds']:.1f} / "
                f"{1e3 * c.get('group_wait_seconds', 0):.1f} (drift "
                f"{1e3 * c['drift_seconds']:.1f})"
                for n, c in calibration.items()
            ),
            flush=True,
        )
        for ranks in args.ranks:
            for mbps in args.mbps:
                predicted = predict(
                    sizes, calibration[ranks], link, ps_link, ranks, mbps, host_links.get(mbps)
                )
                # (hierarchical needs groups of 2)
                names = [n for n in args.configurations if n in predicted]
                hosts = hosts_of(args.cluster, layout(ranks)[0], mbps) if args.hosts else None
                with hosts if hosts is not None else nullcontext() as cluster:
                    measured = measure_setting(
                        model, ranks, mbps, names, predicted, args, env, random, cluster
                    )
                for name in names:
                    median = float(np.median(measured[name]))
                    rows.append(
                        {
                            "model": model,
                            "ranks": ranks,
                            "mbps": mbps,
                            "configuration": name,
                            "predicted": predicted[name],
                            "measured": median,
                            "jobs": measured[name],
                            "error": predicted[name] / median - 1,
                        }
                    )
    earlier = None
    if args.merge:
        with open(args.merge) as f:
            earlier = json.load(f)
        measured_now = {(r["model"], r["ranks"], r["mbps"], r["configuration"]) for r in rows}
        kept = [
            r
            for r in earlier["results"]
            if (r["model"], r["ranks"], r["mbps"], r["configuration"]) not in measured_now
        ]
        rows = [predicted_again(r, calibrations, link) for r in kept] + [
            dict(r, run="this") for r in rows
        ]
        rows.sort(key=lambda r: (r["model"], r["ranks"], r["mbps"]))
    report(rows, args, link, host_links, calibrations, earlier)


def predicted_again(row: dict, calibrations: dict, link: dict) -> dict:
    """An earlier run's measured row, predicted with this run's calibration when it has one
    for the row's model and rank count (else the earlier prediction stays)."""
    calibration = calibrations.get(row["model"], {})
    if row["ranks"] not in calibration:
        return dict(row, run="earlier")
    predicted = predict(
        array_sizes(row["model"]),
        calibration[row["ranks"]],
        link,
        calibration["ps_link"],
        row["ranks"],
        row["mbps"],
    )[row["configuration"]]
    return dict(
        row,
        run="earlier, predicted now",
        predicted=predicted,
        error=predicted / row["measured"] - 1,
    )


def report(
    rows: List[dict],
    args: argparse.Namespace,
    link: dict,
    host_links: dict,
    calibrations: dict,
    earlier: Optional[dict] = None,
) -> None:
    print(
        f"\n{'model':>8} {'ranks':>5} {'link':>5} {'configuration':>24} {'predicted':>10} "
        f"{'measured':>9} {'error':>6}  jobs (ms)"
    )
    for r in rows:
        print(
            f"{r['model']:>8} {r['ranks']:>5} {r['mbps']:>5g} {r['configuration']:>24} "
            f"{1e3 * r['predicted']:10.1f} {1e3 * r['measured']:9.1f} {100 * r['error']:5.0f}%  "
            + " ".join(f"{1e3 * t:.1f}" for t in r["jobs"])
        )
    within = float(np.mean([abs(r["error"]) <= 0.2 for r in rows]))
    settings = sorted({(r["model"], r["ranks"], r["mbps"]) for r in rows})
    best_ok = 0
    for setting in settings:
        mine = [r for r in rows if (r["model"], r["ranks"], r["mbps"]) == setting]
        chosen = min(mine, key=lambda r: r["predicted"])
        best = min(mine, key=lambda r: r["measured"])
        best_ok += chosen["measured"] <= 1.1 * best["measured"]
        if chosen is not best:
            print(
                f"{setting}: predicted best {chosen['configuration']} measured "
                f"{1e3 * chosen['measured']:.1f} ms, measured best {best['configuration']} "
                f"{1e3 * best['measured']:.1f} ms"
            )
    print(
        f"\nwithin 20 %: {100 * within:.0f}% of {len(rows)} configurations; the predicted best "
        f"is the measured best or within 10 % of it in {best_ok} of {len(settings)} settings"
    )
    os.makedirs(args.out, exist_ok=True)
    name = "planner_validation_hosts" if args.hosts else "planner_validation"
    with open(os.path.join(args.out, f"{name}.json"), "w") as f:
        json.dump(
            {
                "settings": {
                    k: v for k, v in vars(args).items() if k not in ("worker", "model", "windows")
                },
                "link": link,
                "host_links": host_links,
                "calibration": calibrations,
                "within_20_percent": within,
                "best_within_10_percent": best_ok,
                "settings_compared": len(settings),
                "results": rows,
                "merged_with": earlier and {k: v for k, v in earlier.items() if k != "results"},
            },
            f,
            indent=1,
        )
    plot(
        rows,
        os.path.join(args.out, f"{name}.png"),
        "emulated hosts" if args.hosts else "2-4 ranks, one machine",
    )
    print(f"wrote {args.out}/{name}.json and {name}.png")


if __name__ == "__main__":
    main()
