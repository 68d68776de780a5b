"""Ranks with different numbers of batches per epoch train a linear regression, first
with Module.fit(kvstore='hybrid') (its train_data wrapped by the plugin), then with a
Gluon loop over mxkv_hybrid.even_batches(loader) (--apis picks; one model per process in
the parameter-server modes). --batches gives every rank's count.
Prints the steps of each epoch and writes the weights to OUT/<api>-rank<r>.npz."""

import argparse
import os

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import mxkv_hybrid

from common import BATCH, REGRESSION_HALVES, regression_batches

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--batches", required=True, help="batches per rank, e.g. 3,4,4")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--apis", default="module,gluon")
parser.add_argument(
    "--halves",
    action="store_true",
    help="the features split between the two halves of the ranks "
    "(REGRESSION_HALVES); Module's model then saved after consensus too",
)
args = parser.parse_args()
apis = args.apis.split(",")

world = mxkv_hybrid.world()
rank = world.rank
counts = [int(c) for c in args.batches.split(",")]
features = REGRESSION_HALVES[rank >= world.size // 2] if args.halves else None
batches = regression_batches(rank, counts[rank], features)
x = np.concatenate([b[0] for b in batches])
y = np.concatenate([b[1] for b in batches])


def save(api: str, weights: dict) -> None:
    np.savez(os.path.join(args.out, f"{api}-rank{rank}.npz"), **weights)


def train_module() -> None:
    """Module.fit: the plugin wraps train_data in an EvenBatchesIter."""
    steps = {}

    def count_step(param: mx.model.BatchEndParam) -> None:
        steps[param.epoch] = param.nbatch + 1

    data = mx.io.NDArrayIter(x, y, batch_size=BATCH, shuffle=False, label_name="lin_reg_label")
    net = mx.sym.FullyConnected(mx.sym.Variable("data"), num_hidden=1, name="fc")
    net = mx.sym.LinearRegressionOutput(net, mx.sym.Variable("lin_reg_label"), name="lin_reg")
    module = mx.mod.Module(net, label_names=["lin_reg_label"], context=mx.cpu())
    module.fit(
        data,
        num_epoch=args.epochs,
        kvstore="hybrid",
        optimizer="sgd",
        optimizer_params={"learning_rate": args.lr},
        initializer=mx.init.Zero(),
        batch_end_callback=count_step,
    )
    print(f"module steps per epoch: {[steps[e] for e in range(args.epochs)]}")
    arg_params, _ = module.get_params()
    save(
        "module",
        {"weight": arg_params["fc_weight"].asnumpy(), "bias": arg_params["fc_bias"].asnumpy()},
    )
    if args.halves:  # the model the mode delivers (async: the servers', after every update)
        mxkv_hybrid.consensus(module)
        arg_params, _ = module.get_params()
        save(
            "module-consensus",
            {"weight": arg_params["fc_weight"].asnumpy(), "bias": arg_params["fc_bias"].asnumpy()},
        )


def train_gluon() -> None:
    """A Gluon loop over even_batches(loader)."""
    dense = gluon.nn.Dense(1, in_units=x.shape[1])
    dense.initialize(mx.init.Zero())
    trainer = gluon.Trainer(
        dense.collect_params(), "sgd", {"learning_rate": args.lr}, kvstore="hybrid"
    )
    loader = gluon.data.DataLoader(gluon.data.ArrayDataset(x, y), batch_size=BATCH, shuffle=False)
    loss_fn = gluon.loss.L2Loss()
    gluon_steps = []
    for _ in range(args.epochs):
        taken = 0
        for features, labels in mxkv_hybrid.even_batches(loader):
            with autograd.record():
                loss = loss_fn(dense(features), labels)
            loss.backward()
            trainer.step(BATCH)
            taken += 1
        gluon_steps.append(taken)
    print(f"gluon steps per epoch: {gluon_steps}")
    save("gluon", {"weight": dense.weight.data().asnumpy(), "bias": dense.bias.data().asnumpy()})


if "module" in apis:
    train_module()
if "gluon" in apis:
    train_gluon()
