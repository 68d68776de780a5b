"""Trains a sparse linear classifier with MXNet's Module API, as example/sparse/'s
scripts do: csr features, a row_sparse weight updated on the store, each batch pulling
the rows of its features (Module.prepare with sparse_row_id_fn). Writes the weights to
OUT/rank<r>.npz. Each rank's batches touch different features.
--reference N: one process on the union of N ranks' batches, with MXNet's 'local' store."""

import argparse
import os

import mxnet as mx
import numpy as np

FEATURES, PER_SAMPLE, BATCH = 2000, 8, 8

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--reference", type=int, default=0, help="number of ranks to emulate")
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--momentum", type=float, default=0.9)
args = parser.parse_args()


def rank_batch(rank: int, step: int):
    """(csr features, labels) of a rank's batch: PER_SAMPLE features a sample, in the
    rank's own quarter of the feature space, and a label from a fixed linear rule."""
    rng = np.random.RandomState(1000 * rank + step)
    first = (rank % 4) * FEATURES // 4
    columns = np.sort(rng.choice(FEATURES // 4, (BATCH, PER_SAMPLE)) + first, axis=1)
    values = rng.rand(BATCH, PER_SAMPLE).astype(np.float32)
    labels = (np.sin(columns).sum(axis=1) > 0).astype(np.float32)
    return columns, values, labels


def batch_of(parts):
    columns = np.concatenate([p[0] for p in parts])
    values = np.concatenate([p[1] for p in parts])
    labels = np.concatenate([p[2] for p in parts])
    indptr = np.arange(0, columns.size + 1, PER_SAMPLE)
    data = mx.nd.sparse.csr_matrix(
        (values.ravel(), columns.ravel(), indptr), shape=(len(labels), FEATURES)
    )
    return mx.io.DataBatch([data], [mx.nd.array(labels)])


data = mx.sym.var("data", stype="csr")
weight = mx.sym.var("weight", shape=(FEATURES, 1), stype="row_sparse", init=mx.init.Uniform(0.5))
bias = mx.sym.var("bias", shape=(1,), init=mx.init.Zero())
label = mx.sym.var("softmax_label")
prediction = mx.sym.broadcast_add(mx.sym.sparse.dot(data, weight), bias)
network = mx.sym.LogisticRegressionOutput(prediction, label)

if args.reference:
    rank, kvstore, batch_size = 0, mx.kv.create("local"), BATCH * args.reference
else:
    kvstore = mx.kv.create("hybrid")
    rank, batch_size = kvstore.rank, BATCH
mx.random.seed(rank)  # each rank initialises differently: equal results prove the broadcast

module = mx.mod.Module(network, data_names=["data"], label_names=["softmax_label"])
module.bind(
    data_shapes=[mx.io.DataDesc("data", (batch_size, FEATURES))],
    label_shapes=[mx.io.DataDesc("softmax_label", (batch_size,))],
)
module.init_params()
module.init_optimizer(
    kvstore=kvstore,
    optimizer="sgd",
    optimizer_params={"learning_rate": 0.5, "momentum": args.momentum},
)


def rows_of_batch(batch):
    return {"weight": batch.data[0].indices}


for step in range(args.steps):
    batch = batch_of(
        [rank_batch(r, step) for r in range(args.reference)]
        if args.reference
        else [rank_batch(rank, step)]
    )
    module.prepare(batch, sparse_row_id_fn=rows_of_batch)
    module.forward_backward(batch)
    module.update()

kept = mx.nd.sparse.zeros("row_sparse", (FEATURES, 1))
module._kvstore.row_sparse_pull("weight", out=kept, row_ids=mx.nd.arange(FEATURES, dtype="int64"))
params, _ = module.get_params()
os.makedirs(args.out, exist_ok=True)
np.savez(
    os.path.join(args.out, f"rank{rank}.npz"), weight=kept.asnumpy(), bias=params["bias"].asnumpy()
)
print(f"rank {rank}: trained {args.steps} steps with Module", flush=True)
