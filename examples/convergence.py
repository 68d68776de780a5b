"""Convergence study: the digits CNN of train_digits.py on 4 workers in 2 groups of 2,
trained with the same hyper-parameters (epochs, batch per rank, learning rate, momentum)
in every mode:

  allreduce      one allreduce over all 4 ranks per step (hierarchical: MXKV_HIERARCHY=auto)
  sync           group allreduce + dist_sync servers (1 server)
  async          group allreduce + dist_async servers holding the weights
  easgd tau=T    group-synchronous SGD, elastic exchange with the centre every T steps
  ... rma        the same with the centre in the leaders' MPI windows (MXKV_TRANSPORT=rma)
  lasgd tau=T    local steps on every rank, model average every T steps, overlapped

Per epoch: the test accuracy of rank 0's model (in easgd/lasgd the ranks' models differ
between averagings), the bytes sent across groups so far, and the wall time; at the end
the accuracy of the one model mxkv_hybrid.consensus gives every rank (easgd: the
centre; lasgd: the average; the others: the common weights).

Bytes across groups (every mode runs with MXKV_GROUP_SIZE=2): what the collectives' algorithms
sent to ranks of the other group (counted at every exchange step in the C++) plus what the
leaders pushed to and pulled from the servers, or read from and accumulated into the other
leader's window (rma), summed over the ranks.

The study runs once on the plain machine and once behind an emulated slow link between
the groups (MXKV_THROTTLE_MBPS / MXKV_THROTTLE_LATENCY_MS: every cross-group transfer
step takes at least latency + bytes / bandwidth, per rank; see
mxkv_hybrid/comm/link_throttle.py), the
setting the averaging algorithms exist for. Prints a table, writes convergence.json and
convergence.png to --out.

    python examples/convergence.py [--epochs 12] [--throttle-mbps 50] [--latency-ms 2]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "benchmarks"))

from job_output import json_lines  # noqa: E402

RANKS = 4
CONFIGURATIONS = [("allreduce", {}), ("sync", {}), ("async", {}),
                  ("easgd", {"MXKV_TAU": "1"}), ("easgd", {"MXKV_TAU": "4"}),
                  ("easgd", {"MXKV_TAU": "16"}), ("easgd", {"MXKV_TAU": "4", "MXKV_TRANSPORT": "rma"}),
                  ("lasgd", {"MXKV_TAU": "4"})]


def label(mode: str, env: dict) -> str:
    name = f"{mode} tau={env['MXKV_TAU']}" if "MXKV_TAU" in env else mode
    return name + (" rma" if env.get("MXKV_TRANSPORT") == "rma" else "")


def worker(args: argparse.Namespace) -> None:
    """One rank: trains, prints one JSON line per epoch (rank 0) and a final one."""
    import mxnet as mx
    from mpi4py import MPI
    from mxnet import autograd, gluon

    import mxkv_hybrid
    from mxkv_hybrid.comm.collectives import live_collectives
    from mxkv_hybrid.comm import remote_memory
    from mxkv_hybrid.ps.client import traffic
    from train_digits import accuracy, build_network, load_data

    comm = MPI.COMM_WORLD
    kv = mx.kv.create("hybrid")
    train_x, train_y, test_x, test_y = load_data(args.seed)
    shard_x, shard_y = train_x[kv.rank::kv.num_workers], train_y[kv.rank::kv.num_workers]
    steps = len(train_x) // kv.num_workers // args.batch_size
    mx.random.seed(args.seed)
    net = build_network()
    net.initialize(mx.init.Xavier(magnitude=2.0))
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": args.lr, "momentum": 0.9}, kvstore=kv)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    model_bytes = None

    def cross_group_bytes() -> float:
        """Bytes across the groups so far (every rank calls it: collective)."""
        pushed, pulled = traffic()
        sent = sum(c.bytes_sent_across for c in live_collectives())
        return comm.allreduce(pushed + pulled + sent + remote_memory.traffic())

    started = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        order = np.random.RandomState(args.seed + 1000 * epoch + kv.rank).permutation(len(shard_y))
        for step in range(steps):
            batch = order[step * args.batch_size:(step + 1) * args.batch_size]
            with autograd.record():
                loss = loss_fn(net(mx.nd.array(shard_x[batch])), mx.nd.array(shard_y[batch]))
            loss.backward()
            trainer.step(len(batch))
        if model_bytes is None:
            model_bytes = 4 * sum(p.data().size for p in net.collect_params().values())
        mx.nd.waitall()
        seconds = time.perf_counter() - started
        sent = cross_group_bytes()
        if kv.rank == 0:
            print(json.dumps({"epoch": epoch, "accuracy": accuracy(net, test_x, test_y, mx.cpu()),
                              "seconds": seconds, "cross_group_bytes": sent}), flush=True)
    mxkv_hybrid.consensus(trainer)
    if kv.rank == 0:
        print(json.dumps({"final_accuracy": accuracy(net, test_x, test_y, mx.cpu()),
                          "steps_per_epoch": steps, "model_bytes": model_bytes}), flush=True)
    kv.close()


def run(mode: str, env: dict, args: argparse.Namespace, throttle: float) -> dict:
    name = label(mode, env)
    print(f"-- {name}{f', link {throttle:g} Mbit/s' if throttle else ''} ...", flush=True)
    launcher = [sys.executable, "-m", "mxkv_hybrid.launch", "-n", str(RANKS), "--timeout", "900"]
    if env.get("MXKV_TRANSPORT") == "rma":  # the centre in the leaders' windows: no servers
        launcher += ["--group-size", str(RANKS // 2)]
    elif mode in ("sync", "async", "easgd"):
        launcher += ["--group-size", str(RANKS // 2), "--servers", "1"]
        if mode in ("async", "easgd"):  # one MPI job: the byte counts are summed over all ranks
            launcher += ["--one-job"]
    environment = dict(os.environ, MXKV_MODE=mode, MXKV_GROUP_SIZE=str(RANKS // 2), **env,
                       MXKV_THROTTLE_MBPS=str(throttle),
                       MXKV_THROTTLE_LATENCY_MS=str(args.latency_ms if throttle else 0))
    worker_args = ["--worker", "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
                   "--lr", str(args.lr), "--seed", str(args.seed)]
    begun = time.perf_counter()
    done = subprocess.run([*launcher, "--", "python", __file__, *worker_args],
                          capture_output=True, text=True, env=environment)
    if done.returncode != 0:
        sys.exit(f"{name} failed:\n{done.stdout}\n{done.stderr}")
    rows = json_lines(done.stdout)
    final = rows[-1]
    return {"configuration": name, "mode": mode, "throttle_mbps": throttle,
            "epochs": rows[:-1], "final_accuracy": final["final_accuracy"],
            "model_bytes": final["model_bytes"], "steps_per_epoch": final["steps_per_epoch"],
            "job_seconds": time.perf_counter() - begun}


def epochs_to(result: dict, target: float):
    """First epoch whose rank-0 accuracy reaches `target` (None if never)."""
    return next((e["epoch"] for e in result["epochs"] if e["accuracy"] >= target), None)


def print_table(results: list, target: float) -> None:
    print(f"\n{'configuration':>15} {'link':>9} {'final acc':>9} {'train s':>8} "
          f"{'MB across':>10} {'epochs to ' + format(target, '.0%'):>12}")
    for r in results:
        last = r["epochs"][-1]
        reached = epochs_to(r, target)
        link = f"{r['throttle_mbps']:g} Mb/s" if r["throttle_mbps"] else "-"
        print(f"{r['configuration']:>15} {link:>9} {r['final_accuracy']:9.4f} "
              f"{last['seconds']:8.1f} {last['cross_group_bytes'] / 1e6:10.1f} "
              f"{reached if reached else '-':>12}")


def plot(results: list, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    links = sorted({r["throttle_mbps"] for r in results})
    fig, axes = plt.subplots(len(links), 3, figsize=(15, 4.2 * len(links)), squeeze=False)
    for row, link in zip(axes, links):
        for r in (r for r in results if r["throttle_mbps"] == link):
            accuracy = [e["accuracy"] for e in r["epochs"]]
            row[0].plot([e["epoch"] for e in r["epochs"]], accuracy, marker=".",
                        label=r["configuration"])
            row[1].plot([max(e["cross_group_bytes"], 1) / 1e6 for e in r["epochs"]], accuracy,
                        marker=".")
            row[2].plot([e["seconds"] for e in r["epochs"]], accuracy, marker=".")
        title = f"link {link:g} Mbit/s" if link else "no throttle"
        row[0].set(xlabel="epoch", ylabel="test accuracy (rank 0's model)", title=title)
        row[1].set(xlabel="MB sent across groups (log)", xscale="log", title=title)
        row[2].set(xlabel="wall time, s", title=title)
        for axis in row:
            axis.set_ylim(0.5, 1.0)
            axis.grid(alpha=0.3)
        row[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=16, help="images per rank and step")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--throttle-mbps", type=float, default=50,
                        help="the slow link of the second run (0: only the plain run)")
    parser.add_argument("--latency-ms", type=float, default=2.0)
    parser.add_argument("--target", type=float, default=0.95, help="accuracy for 'epochs to'")
    parser.add_argument("--out", default=os.path.join(HERE, "benchmarks", "results"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    links = [0.0] + ([args.throttle_mbps] if args.throttle_mbps else [])
    results = [run(mode, env, args, link) for link in links for mode, env in CONFIGURATIONS]
    print(f"\ndigits CNN, {RANKS} ranks in 2 groups, {args.epochs} epochs, batch "
          f"{args.batch_size}/rank, lr {args.lr}, momentum 0.9; slow link: "
          f"{args.throttle_mbps:g} Mbit/s + {args.latency_ms:g} ms per transfer")
    print_table(results, args.target)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "convergence.json"), "w") as f:
        json.dump({"settings": vars(args), "results": results}, f, indent=1)
    plot(results, os.path.join(args.out, "convergence.png"))
    print(f"\nwrote {args.out}/convergence.json and convergence.png")


if __name__ == "__main__":
    main()
