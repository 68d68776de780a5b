"""Trains a small conv net with gluon.Trainer for a few SGD-momentum steps, then writes
the weights to OUT/rank<r>.npz. Each rank initialises with a different seed, so equal
results prove the initial broadcast. --reference N: one process, the union of N ranks' batches."""

import argparse
import os
import sys
from pathlib import Path

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from common import (
    CLASSES,
    LEARNING_RATE,
    MOMENTUM,
    STEPS,
    overlapped_buckets,
    rank_batch,
    staged_bytes,
    union_batch,
)

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument(
    "--kvstore",
    choices=["string", "instance", "dist_sync"],
    default="string",
    help="dist_sync: MXNet's own store (run as a worker of a ps-lite job)",
)
parser.add_argument("--devices", type=int, default=1)
parser.add_argument("--context", choices=["cpu", "cpu_pinned"], default="cpu")
parser.add_argument("--update-on-kvstore", choices=["default", "0", "1"], default="default")
parser.add_argument("--reference", type=int, default=0, help="number of ranks to emulate")
parser.add_argument("--steps", type=int, default=STEPS)
parser.add_argument(
    "--optimizer",
    choices=["sgd", "own"],
    default="sgd",
    help="own: HalfMomentumSGD, a class of this script, with version_checked's scheduler "
    "(tests/libraries: a library that checks MXNet's version at import)",
)
parser.add_argument("--init", choices=["xavier", "zero"], default="xavier")
parser.add_argument(
    "--change-settings",
    action="store_true",
    help="halve the learning rate after step 2 and step(2 x batch) after step 4",
)
parser.add_argument(
    "--consensus",
    action="store_true",
    help="modes easgd/lasgd: end on the one model (mxkv_hybrid.consensus)",
)
args = parser.parse_args()


class HalfMomentumSGD(mx.optimizer.SGD):
    """SGD at half the momentum: a class of this script (__main__), which a parameter
    server can only have if it is sent by value."""

    def __init__(self, **kwargs):
        super().__init__(momentum=MOMENTUM / 2, **kwargs)


def optimizer_and_settings():
    """What the Trainer is given: 'sgd' and its settings, or an instance of HalfMomentumSGD."""
    if args.optimizer == "sgd":
        return "sgd", {"learning_rate": LEARNING_RATE, "momentum": MOMENTUM}
    sys.path.append(str(Path(__file__).resolve().parents[1] / "libraries"))  # (servers: PYTHONPATH)
    from version_checked import HalvingScheduler

    scheduler = HalvingScheduler(every=3, base_lr=LEARNING_RATE)
    return HalfMomentumSGD(lr_scheduler=scheduler), None  # no learning_rate, as gluoncv


if args.reference:
    rank, kvstore = 0, None
elif args.kvstore == "dist_sync":
    kvstore = mx.kv.create("dist_sync")
    rank = kvstore.rank
else:
    kvstore = "hybrid" if args.kvstore == "string" else mx.kv.create("hybrid")
    rank = mx.kv.create("hybrid").rank if args.kvstore == "string" else kvstore.rank

# each rank initialises differently: equal results prove the broadcast. MXNet's dist_sync
# sends rank 0's weights only at the first step, after the first backward ran on each
# worker's own deferred-initialised ones: its workers all start from rank 0's seed
mx.random.seed(0 if args.kvstore == "dist_sync" else rank)
contexts = [getattr(mx, args.context)(i) for i in range(args.devices)]
net = gluon.nn.HybridSequential()
net.add(
    gluon.nn.Conv2D(6, 3, activation="relu"),  # in_channels unknown: deferred init
    gluon.nn.Conv2D(4, 3, activation="relu"),
    gluon.nn.Dense(16, activation="relu"),
    gluon.nn.Dense(CLASSES),
)
net.initialize(
    mx.init.Zero() if args.init == "zero" else mx.init.Xavier(magnitude=2.0), ctx=contexts
)
update_on_kvstore = None if args.update_on_kvstore == "default" else args.update_on_kvstore == "1"
trainer = gluon.Trainer(
    net.collect_params(),
    *optimizer_and_settings(),
    kvstore=kvstore,
    update_on_kvstore=update_on_kvstore,
)
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

for step in range(args.steps):
    x, y = union_batch(args.reference, step) if args.reference else rank_batch(rank, step)
    xs = gluon.utils.split_and_load(mx.nd.array(x), contexts)
    ys = gluon.utils.split_and_load(mx.nd.array(y), contexts)
    with autograd.record():
        losses = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
    for loss in losses:
        loss.backward()
    if args.change_settings and step == 2:
        trainer.set_learning_rate(LEARNING_RATE / 2)
    trainer.step(len(x) * (2 if args.change_settings and step >= 4 else 1))

if args.consensus:
    import mxkv_hybrid

    mxkv_hybrid.consensus(trainer)
params = list(net.collect_params().values())
for p in params:  # every device copy holds the same weights
    copies = [d.asnumpy() for d in p.list_data()]
    assert all(np.array_equal(c, copies[0]) for c in copies), p.name
os.makedirs(args.out, exist_ok=True)
np.savez(
    os.path.join(args.out, f"rank{rank}.npz"),
    **{f"{i:02d}": p.data(contexts[0]).asnumpy() for i, p in enumerate(params)},
)
print(
    f"rank {rank}: trained {args.steps} steps, "
    f"kvstore={trainer._kvstore.type if trainer._kvstore else None}",
    f"update_on_kvstore={trainer._update_on_kvstore}",
    f"overlapped_buckets={overlapped_buckets(trainer._kvstore)}",
    f"staged_bytes={staged_bytes()}",
)
