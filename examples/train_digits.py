"""Trains a small CNN on the 8x8 handwritten digits of UCI (1,797 images in
examples/data/digits.csv.gz, the copy scikit-learn ships as `load_digits`), data-parallel
over the ranks of the job.

    mxkv-launch -n 2 -- python examples/train_digits.py            # hybrid kvstore
    python examples/train_digits.py --kv-store local               # one process
    MXKV_MODE=lasgd mxkv-launch -n 4 -- python examples/train_digits.py
    MXKV_MODE=easgd mxkv-launch -n 4 --group-size 2 --servers 1 -- python examples/train_digits.py
    mxkv-launch -n 2 -- python examples/train_digits.py --classes split  # even / odd digits

Each rank trains on its own shard of the training set; with the default averaging of
the hybrid store this is the same training as one process with a batch of
(batch-size x ranks). Rank 0 prints one progress line per epoch (the accuracy of its
own model: in the averaging modes easgd and lasgd the ranks' models differ between
averagings) and, after mxkv_hybrid.consensus gave every rank the one final model, the
final accuracy. With --classes split the first half of the ranks trains on the even
digits only and the second half on the odd ones (--classes even / odd: one process on
those): the model learns all ten only if what the halves learn crosses between them.
"""

import argparse
import time
from pathlib import Path

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import mxkv_hybrid

from replica_check import replica_scope, replicas_identical

TEST_FRACTION = 0.2
LOSS_KEY = 10**6  # an int key like the Trainer's: MXNet's own stores take one key type
# Rows of 64 pixels (0..16, row by row) and the digit; E. Alpaydin and C. Kaynak, "Optical
# Recognition of Handwritten Digits", UCI Machine Learning Repository (CC BY 4.0).
DIGITS = Path(__file__).parent / "data" / "digits.csv.gz"


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kv-store", default="hybrid", help="kvstore name (default: hybrid)")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32, help="images per rank and step")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument(
        "--optimizer",
        choices=["sgd", "dcasgd"],
        default="sgd",
        help="dcasgd: MXNet's delay-compensated SGD (for MXKV_MODE=async, "
        "where the servers run it)",
    )
    parser.add_argument(
        "--classes",
        choices=["all", "even", "odd", "split"],
        default="all",
        help="train on every digit, the even or odd ones, or (split) the even "
        "ones on the first half of the ranks and the odd on the second",
    )
    parser.add_argument("--devices", type=int, default=1, help="CPU contexts per process")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--gc-type",
        choices=["none", "2bit", "1bit"],
        default="none",
        help="gradient compression, as MXNet's image-classification scripts "
        "take it (the Trainer's compression_params)",
    )
    parser.add_argument(
        "--gc-threshold", type=float, default=0.5, help="--gc-type 2bit's threshold (default 0.5)"
    )
    return parser.parse_args()


def load_data(seed: int):
    """(train images, train labels, test images, test labels), images N x 1 x 8 x 8 in [0, 1]."""
    table = np.loadtxt(DIGITS, delimiter=",", dtype=np.float32)
    images = (table[:, :64] / 16.0).reshape(-1, 1, 8, 8)
    labels = table[:, 64]
    order = np.random.RandomState(seed).permutation(len(labels))
    cut = int(len(labels) * (1 - TEST_FRACTION))
    return images[order[:cut]], labels[order[:cut]], images[order[cut:]], labels[order[cut:]]


def shard(images, labels, classes: str, rank: int, workers: int, batch_size: int):
    """This rank's images and labels, and the steps an epoch (the same on every rank): a
    slice of every `workers`-th image of its classes (--classes)."""
    if classes == "split":
        if workers % 2:
            raise SystemExit(f"--classes split needs an even number of ranks, not {workers}")
        per_half = workers // 2
        kept = np.flatnonzero(labels % 2 == rank // per_half)[rank % per_half :: per_half]
        smaller = min(int((labels % 2 == half).sum()) for half in (0, 1)) // per_half
        return images[kept], labels[kept], smaller // batch_size
    if classes in ("even", "odd"):
        keep = labels % 2 == (0 if classes == "even" else 1)
        images, labels = images[keep], labels[keep]
    return images[rank::workers], labels[rank::workers], len(images) // workers // batch_size


def build_network() -> gluon.nn.HybridSequential:
    net = gluon.nn.HybridSequential()
    net.add(
        gluon.nn.Conv2D(16, 3, padding=1, activation="relu"),
        gluon.nn.Conv2D(32, 3, padding=1, activation="relu"),
        gluon.nn.MaxPool2D(2),
        gluon.nn.Conv2D(64, 3, padding=1, activation="relu"),
        gluon.nn.Flatten(),
        gluon.nn.Dense(64, activation="relu"),
        gluon.nn.Dense(10),
    )
    return net


def accuracy(net, images, labels, ctx) -> float:
    predictions = net(mx.nd.array(images, ctx=ctx)).argmax(axis=1).asnumpy()
    return float((predictions == labels).mean())


def main() -> None:
    args = parse_arguments()
    kv = mx.kv.create(args.kv_store)
    rank, workers = kv.rank, kv.num_workers
    contexts = [mx.cpu(i) for i in range(args.devices)]
    train_x, train_y, test_x, test_y = load_data(args.seed)
    shard_x, shard_y, steps = shard(train_x, train_y, args.classes, rank, workers, args.batch_size)

    mx.random.seed(args.seed)
    net = build_network()
    net.initialize(mx.init.Xavier(magnitude=2.0), ctx=contexts)
    net.hybridize()
    compression = {
        "2bit": {"type": "2bit", "threshold": args.gc_threshold},
        "1bit": {"type": "1bit"},
    }.get(args.gc_type)
    trainer = gluon.Trainer(
        net.collect_params(),
        args.optimizer,
        {"learning_rate": args.lr, "momentum": args.momentum},
        kvstore=kv,
        compression_params=compression,
    )
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    mode = f" (MXKV_MODE={kv.config.mode})" if isinstance(kv, mxkv_hybrid.Hybrid) else ""
    if rank == 0:
        print(
            f"kvstore {kv.type}{mode}: {workers} rank(s) x {args.devices} device(s), "
            f"{steps} steps/epoch of {args.batch_size} images per rank",
            flush=True,
        )

    for epoch in range(1, args.epochs + 1):
        started = time.time()
        order = np.random.RandomState(args.seed + 1000 * epoch + rank).permutation(len(shard_y))
        loss_sum = mx.nd.zeros((1,))
        for step in range(steps):
            batch = order[step * args.batch_size : (step + 1) * args.batch_size]
            xs = gluon.utils.split_and_load(mx.nd.array(shard_x[batch]), contexts)
            ys = gluon.utils.split_and_load(mx.nd.array(shard_y[batch]), contexts)
            with autograd.record():
                losses = [loss_fn(net(x), y) for x, y in zip(xs, ys)]
            for loss in losses:
                loss.backward()
            trainer.step(len(batch))
            loss_sum += sum(loss.sum().as_in_context(mx.cpu()) for loss in losses)
        mean_loss = loss_sum / (steps * args.batch_size)
        if workers > 1:
            kv.pushpull(LOSS_KEY, mean_loss)  # the sum over ranks, as every MXNet store
            mean_loss /= workers
        if rank == 0:
            seconds = time.time() - started
            print(
                f"epoch {epoch:2d}/{args.epochs}  loss {mean_loss.asscalar():.4f}  "
                f"test accuracy {accuracy(net, test_x, test_y, contexts[0]):.4f}  "
                f"{steps * args.batch_size * workers / seconds:7.0f} images/s",
                flush=True,
            )

    if isinstance(kv, mxkv_hybrid.Hybrid):
        mxkv_hybrid.consensus(trainer)  # easgd: the centre; lasgd: the average
    identical = replicas_identical(net)
    if rank == 0:
        print(
            f"final test accuracy {accuracy(net, test_x, test_y, contexts[0]):.4f} "
            f"({len(test_y)} held-out images); weights identical on {replica_scope()}: "
            f"{identical}",
            flush=True,
        )
    if not identical:
        raise SystemExit(f"rank {rank}: the weights differ between the ranks ({replica_scope()})")


if __name__ == "__main__":
    main()
