"""The planner (python -m mxkv_hybrid.plan) against measured steps on this machine.

For each model (a small CNN, ResNet-18; 32x32 inputs, 10 classes, --batch per rank),
rank count (2: 2 groups of 1, 3: 3 groups of 1, 4: 2 groups of 2) and emulated link
between the groups (--mbps; 0: none, the machine's own speed), every configuration that
runs here is trained for --steps steps after --warmup, and rank 0's mean step time
(forward, backward, trainer.step; a multiple of tau, so averaging steps count) is set
beside the planner's prediction for the same cluster. The planner is given what it would
be given on a real cluster, measured here first: the link between two ranks (an MPI
ping-pong: latency and bandwidth), each model's compute and update time on one rank
alone, and the store's own cost a step (a 1-rank job's step less those); all ranks share
this machine's cores (--cores), which the prediction stretches compute by, and the
servers are not behind the emulated link (it charges the leaders). Prints a table, the share of configurations within 20 %, whether
the predicted best is the measured best (or within 10 % of it); writes
planner_validation.json and .png (predicted against measured) to --out.

    python examples/benchmarks/planner_validation.py [--models cnn resnet18] [--ranks 2 3 4]
        [--mbps 0 1000 100] [--steps 20]
"""
import argparse
import json
import os
import subprocess
import sys
import time
from typing import Dict, List, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from job_output import json_lines  # noqa: E402

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
    net.add(gluon.nn.Conv2D(32, 3, padding=1, activation="relu"), gluon.nn.MaxPool2D(),
            gluon.nn.Conv2D(64, 3, padding=1, activation="relu"), gluon.nn.MaxPool2D(),
            gluon.nn.Flatten(), gluon.nn.Dense(256, activation="relu"), gluon.nn.Dense(CLASSES))
    return net


def train(model: str, batch: int, steps: int, warmup: int, kvstore) -> Tuple[float, float, float]:
    """(mean whole step, median forward + backward, median update) in seconds, this rank."""
    import mxnet as mx
    from mxnet import autograd, gluon

    net = network(model)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01, "momentum": 0.9},
                            kvstore=kvstore)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    x = mx.nd.random.uniform(shape=(batch, 3, 32, 32))
    y = mx.nd.array(np.arange(batch) % CLASSES)
    compute, update = [], []
    for step in range(warmup + steps):
        if step == warmup:
            mx.nd.waitall()
            began = time.perf_counter()
        started = time.perf_counter()
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        if kvstore is None:  # alone: compute and update apart
            mx.nd.waitall()
        middle = time.perf_counter()
        trainer.step(batch)
        if kvstore is None:
            mx.nd.waitall()
            if step >= warmup:
                compute.append(middle - started)
                update.append(time.perf_counter() - middle)
    mx.nd.waitall()
    whole = (time.perf_counter() - began) / steps
    return whole, float(np.median(compute or [0.0])), float(np.median(update or [0.0]))


def array_sizes(model: str) -> List[int]:
    """Bytes of the model's trainable arrays (float32)."""
    import mxnet as mx

    net = network(model)
    net.initialize()
    net(mx.nd.zeros((1, 3, 32, 32)))
    return [4 * int(np.prod(p.shape)) for p in net.collect_params().values() if p.grad_req != "null"]


def step_worker(args: argparse.Namespace) -> None:
    import mxnet as mx

    import mxkv_hybrid  # noqa: F401  (registers 'hybrid')

    kv = mx.kv.create("hybrid")
    whole, _, _ = train(args.model, args.batch, args.steps, args.warmup, kv)
    if kv.rank == 0:
        print(json.dumps({"step_seconds": whole}), flush=True)
    kv.close()


def alone_worker(args: argparse.Namespace) -> None:
    _, compute, update = train(args.model, args.batch, args.steps, args.warmup, None)
    print(json.dumps({"compute_seconds": compute, "update_seconds": update}), flush=True)


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
        latency = times[1024]
        print(json.dumps({"latency": latency,
                          "bandwidth": (32 << 20) / max(times[32 << 20] - latency, 1e-9)}),
              flush=True)


def launch(ranks: int, options: List[str], worker_args: List[str], env: dict) -> List[dict]:
    done = subprocess.run([sys.executable, "-m", "mxkv_hybrid.launch", "-n", str(ranks),
                           "--timeout", "900", *options, "--", "python", __file__, *worker_args],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"job failed ({options} {worker_args}):\n{done.stdout}\n{done.stderr}")
    return json_lines(done.stdout)


def layout(ranks: int) -> Tuple[int, int]:
    """(groups, ranks per group): groups of 1 for 2 and 3 ranks, of 2 for 4."""
    size = 2 if ranks % 2 == 0 and ranks > 2 else 1
    return ranks // size, size


def measure_step(name: str, model: str, ranks: int, mbps: float, args, env: dict) -> float:
    mode, knobs = CONFIGURATIONS[name]
    groups, size = layout(ranks)
    options: List[str] = []
    if mode in ("sync", "async") or (mode == "easgd" and knobs.get("MXKV_TRANSPORT") != "rma"):
        options = ["--group-size", str(size), "--servers", "1"]
        options += ["--one-job"] if mode in ("async", "easgd") else []
    environment = dict(env, MXKV_MODE=mode, MXKV_GROUP_SIZE=str(size), **knobs,
                       MXKV_THROTTLE_MBPS=str(mbps))
    rows = launch(ranks, options, ["--worker", "step", "--model", model, "--batch", str(args.batch),
                                   "--steps", str(args.steps), "--warmup", str(args.warmup)],
                  environment)
    return rows[0]["step_seconds"]


def predict(model_bytes: List[int], alone: dict, link: dict, ranks: int, mbps: float,
            cores: int) -> Dict[str, float]:
    from mxkv_hybrid.comm import algorithm_table
    from mxkv_hybrid.plan.cluster import Cluster, Link
    from mxkv_hybrid.plan.mode_costs import Planner, Workload

    groups, size = layout(ranks)
    inside = Link(link["latency"], link["bandwidth"])
    between = Link(0.0, mbps * 1e6 / 8) if mbps else inside
    cluster = Cluster(groups, size, inside, between, servers=1, shared_nic=False,
                      server_link=inside, cores_per_host=cores * size / ranks)
    workload = Workload(model_bytes, alone["compute_seconds"], alone["update_seconds"],
                        overhead_seconds=alone["overhead_seconds"])
    table = algorithm_table.load(algorithm_table.default_path())
    return {r.configuration: r.step_seconds
            for r in Planner(workload, cluster, table).predictions(taus=(TAU,))}


def plot(rows: List[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 6))
    for model in sorted({r["model"] for r in rows}):
        mine = [r for r in rows if r["model"] == model]
        ax.scatter([1e3 * r["measured"] for r in mine], [1e3 * r["predicted"] for r in mine],
                   label=model, s=18)
    top = 1e3 * max(max(r["measured"], r["predicted"]) for r in rows) * 1.05
    ax.plot([0, top], [0, top], color="grey", linewidth=0.8)
    ax.fill_between([0, top], [0, 0.8 * top], [0, 1.2 * top], color="grey", alpha=0.12,
                    label="within 20 %")
    ax.set_xlabel("measured ms per step")
    ax.set_ylabel("predicted ms per step")
    ax.set_title("the planner against measured steps (this machine)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["cnn", "resnet18"])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--mbps", type=float, nargs="+", default=[0, 1000, 100])
    parser.add_argument("--configurations", nargs="+", default=list(CONFIGURATIONS))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=5 * TAU)
    parser.add_argument("--warmup", type=int, default=TAU)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS everywhere")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--worker", choices=["step", "alone", "ping-pong"], help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "step":
        return step_worker(args)
    if args.worker == "alone":
        return alone_worker(args)
    if args.worker == "ping-pong":
        return ping_pong_worker()

    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    link = launch(2, [], ["--worker", "ping-pong"], env)[0]
    print(f"link between two ranks: latency {1e6 * link['latency']:.1f} us, bandwidth "
          f"{link['bandwidth'] / 1e9:.2f} GB/s", flush=True)
    rows = []
    for model in args.models:
        done = subprocess.run([sys.executable, __file__, "--worker", "alone", "--model", model,
                               "--batch", str(args.batch), "--steps", "10", "--warmup", "3"],
                              capture_output=True, text=True, env=env, check=True)
        alone = json_lines(done.stdout)[0]
        one_rank = launch(1, [], ["--worker", "step", "--model", model, "--batch", str(args.batch),
                                  "--steps", str(args.steps), "--warmup", str(args.warmup)],
                          dict(env, MXKV_MODE="allreduce"))[0]["step_seconds"]
        alone["overhead_seconds"] = max(0.0, one_rank - alone["compute_seconds"]
                                        - alone["update_seconds"])
        sizes = array_sizes(model)
        print(f"{model}: {sum(sizes) / 2 ** 20:.1f} MiB, compute {1e3 * alone['compute_seconds']:.1f} "
              f"ms, update {1e3 * alone['update_seconds']:.1f} ms on one rank alone; the store's "
              f"own cost {1e3 * alone['overhead_seconds']:.1f} ms a step (one rank)", flush=True)
        for ranks in args.ranks:
            for mbps in args.mbps:
                predicted = predict(sizes, alone, link, ranks, mbps, args.cores)
                for name in args.configurations:
                    if name not in predicted:  # (hierarchical needs groups of 2 or more)
                        continue
                    print(f"-- {model}, {ranks} ranks, link {mbps:g} Mbit/s, {name} ...", flush=True)
                    measured = measure_step(name, model, ranks, mbps, args, env)
                    rows.append({"model": model, "ranks": ranks, "mbps": mbps, "configuration": name,
                                 "predicted": predicted[name], "measured": measured,
                                 "error": predicted[name] / measured - 1})
    report(rows, args, link)


def report(rows: List[dict], args: argparse.Namespace, link: dict) -> None:
    print(f"\n{'model':>8} {'ranks':>5} {'link':>9} {'configuration':>24} {'predicted ms':>13} "
          f"{'measured ms':>12} {'error':>7}")
    for r in rows:
        print(f"{r['model']:>8} {r['ranks']:>5} {r['mbps']:>9g} {r['configuration']:>24} "
              f"{1e3 * r['predicted']:13.1f} {1e3 * r['measured']:12.1f} {100 * r['error']:6.0f}%")
    within = np.mean([abs(r["error"]) <= 0.2 for r in rows])
    settings = sorted({(r["model"], r["ranks"], r["mbps"]) for r in rows})
    best_ok = 0
    for setting in settings:
        mine = [r for r in rows if (r["model"], r["ranks"], r["mbps"]) == setting]
        chosen = min(mine, key=lambda r: r["predicted"])
        best = min(mine, key=lambda r: r["measured"])
        best_ok += chosen["measured"] <= 1.1 * best["measured"]
    print(f"\nwithin 20 %: {100 * within:.0f}% of {len(rows)} configurations; the predicted best "
          f"is the measured best or within 10 % of it in {best_ok} of {len(settings)} settings")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "planner_validation.json"), "w") as f:
        json.dump({"settings": {k: v for k, v in vars(args).items() if k not in ("worker", "model")},
                   "link": link, "within_20_percent": within, "best_within_10_percent": best_ok,
                   "settings_compared": len(settings), "results": rows}, f, indent=1)
    plot(rows, os.path.join(args.out, "planner_validation.png"))
    print(f"wrote {args.out}/planner_validation.json and planner_validation.png")


if __name__ == "__main__":
    main()
