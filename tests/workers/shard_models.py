"""K small MLPs (different learning rates; SGD with momentum and Adam) trained by the
ShardOrchestrator on every rank of the job, or alone in one process (--reference).
Writes each rank's trained weights (rank{r}.npz, or reference.npz) and its report
(rank{r}.json)."""

import argparse
import json
import os

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

FEATURES, CLASSES, BATCH, BATCHES = 32, 10, 16, 4


def model(k: int, width: int) -> gluon.nn.HybridSequential:
    mx.random.seed(100 + k)
    net = gluon.nn.HybridSequential(prefix=f"model{k}_")
    with net.name_scope():
        for _ in range(4):
            net.add(gluon.nn.Dense(width, activation="relu"))
        net.add(gluon.nn.Dense(CLASSES))
    net.initialize(mx.init.Xavier())
    net(mx.nd.zeros((1, FEATURES)))
    return net


def batches(k: int) -> list:
    rng = np.random.default_rng(k)
    return [
        (
            mx.nd.array(rng.normal(size=(BATCH, FEATURES))),
            mx.nd.array(rng.integers(0, CLASSES, BATCH)),
        )
        for _ in range(BATCHES)
    ]


def optimizer(k: int):
    if k % 2:
        return "adam", {"learning_rate": 0.001 * (k + 1)}
    return "sgd", {"learning_rate": 0.05 * (k + 1), "momentum": 0.9, "wd": 1e-4}


def weights(nets) -> dict:
    return {
        f"{k}/{p.name}": p.data().asnumpy()
        for k, net in enumerate(nets)
        for p in net.collect_params().values()
    }


def reference(args) -> None:
    nets = [model(k, args.width) for k in range(args.models)]
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    for k, net in enumerate(nets):
        name, params = optimizer(k)
        trainer = gluon.Trainer(net.collect_params(), name, params, kvstore=None)
        for _ in range(args.epochs):
            for x, y in batches(k):
                with autograd.record():
                    value = loss(net(x), y)
                value.backward()
                trainer.step(BATCH)
    np.savez(os.path.join(args.out, "reference.npz"), **weights(nets))


def sharded(args) -> None:
    from mpi4py import MPI

    from mxkv_hybrid.shard import ModelTask, ShardOrchestrator

    widths = [
        args.width + (8 if args.mismatch and k == 2 and MPI.COMM_WORLD.rank == 1 else 0)
        for k in range(args.models)
    ]
    nets = [model(k, width) for k, width in enumerate(widths)]
    tasks = [
        ModelTask(
            net,
            gluon.loss.SoftmaxCrossEntropyLoss(),
            batches(k),
            *optimizer(k),
            epochs=args.epochs,
            name=f"mlp{k}",
        )
        for k, net in enumerate(nets)
    ]
    orchestrator = ShardOrchestrator(
        tasks,
        device_memory_mb=args.budget_mb,
        schedule=args.schedule,
        prefetch=not args.no_prefetch,
    )
    report = orchestrator.run()
    orchestrator.close()
    rank = orchestrator.rank
    np.savez(os.path.join(args.out, f"rank{rank}.npz"), **weights(nets))
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
        json.dump(report.as_dict(), f)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--models", type=int, default=4)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--budget-mb", type=float, default=1.0)
    parser.add_argument("--schedule", default="lrtf")
    parser.add_argument("--no-prefetch", action="store_true")
    parser.add_argument("--reference", action="store_true")
    parser.add_argument("--mismatch", action="store_true", help="rank 1's model 2 is wider")
    arguments = parser.parse_args()
    (reference if arguments.reference else sharded)(arguments)
