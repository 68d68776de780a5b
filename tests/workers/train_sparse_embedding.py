"""Trains a bag-of-words classifier whose Embedding has sparse gradients (row_sparse:
only the rows of the batch's words) with gluon.Trainer, then writes the weights to
OUT/rank<r>.npz. Each rank draws different words; the words of a rank's batches cover a
small part of the vocabulary, so its gradients alone move only some rows.
--reference N: one process on the union of N ranks' batches. --sparse-weight: the
embedding's weight itself is row_sparse (updated on the store; each step pulls the rows
of its batch by row_sparse_pull)."""

import argparse
import os

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from leaders_in_reverse import number_the_leaders_in_reverse

VOCABULARY, WIDTH, WORDS, BATCH, CLASSES = 5000, 16, 6, 8, 3

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--reference", type=int, default=0, help="number of ranks to emulate")
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--update-on-kvstore", choices=["default", "0", "1"], default="default")
parser.add_argument("--sparse-weight", action="store_true")
parser.add_argument("--dtype", default="float32")
parser.add_argument("--momentum", type=float, default=0.9)
args = parser.parse_args()


def rank_batch(rank: int, step: int):
    rng = np.random.RandomState(1000 * rank + step)
    words = rng.randint(0, VOCABULARY, (BATCH, WORDS))
    return words.astype(np.float32), (words.sum(axis=1) % CLASSES).astype(np.float32)


def union_batch(num_ranks: int, step: int):
    parts = [rank_batch(r, step) for r in range(num_ranks)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


class SparseWeightEmbedding(gluon.Block):
    """An embedding whose weight is row_sparse: each batch pulls only its rows."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.weight = self.params.get(
            "weight",
            shape=(VOCABULARY, WIDTH),
            stype="row_sparse",
            grad_stype="row_sparse",
            dtype=args.dtype,
        )

    def forward(self, words):
        rows = self.weight.row_sparse_data(words)
        return mx.nd.Embedding(words, rows, VOCABULARY, WIDTH, sparse_grad=True)


if args.reference:  # MXNet keeps row_sparse weights in a store: its own 'local' one
    rank, kvstore = 0, "local" if args.sparse_weight else None
else:
    number_the_leaders_in_reverse()
    kvstore = mx.kv.create("hybrid")
    rank = kvstore.rank

mx.random.seed(rank)  # each rank initialises differently: equal results prove the broadcast
embedding = (
    SparseWeightEmbedding()
    if args.sparse_weight
    else gluon.nn.Embedding(VOCABULARY, WIDTH, sparse_grad=True, dtype=args.dtype)
)
head = gluon.nn.Dense(CLASSES, in_units=WIDTH, dtype=args.dtype)
for block in (embedding, head):
    block.initialize(mx.init.Uniform(0.5))
params = {**embedding.collect_params(), **head.collect_params()}
update_on_kvstore = None if args.update_on_kvstore == "default" else args.update_on_kvstore == "1"
trainer = gluon.Trainer(
    params,
    "sgd",
    {"learning_rate": 0.5, "momentum": args.momentum, "wd": 0.0},
    kvstore=kvstore,
    update_on_kvstore=update_on_kvstore,
)
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

for step in range(args.steps):
    words, labels = union_batch(args.reference, step) if args.reference else rank_batch(rank, step)
    words, labels = mx.nd.array(words, dtype=args.dtype), mx.nd.array(labels)
    with autograd.record():
        loss = loss_fn(head(embedding(words).mean(axis=1)), labels)
    loss.backward()
    trainer.step(len(words))

if args.sparse_weight:
    weight = mx.nd.sparse.zeros("row_sparse", (VOCABULARY, WIDTH), dtype=args.dtype)
    trainer._row_sparse_pull(embedding.weight, weight, mx.nd.arange(VOCABULARY, dtype="int64"))
else:
    weight = embedding.weight.data()
os.makedirs(args.out, exist_ok=True)
np.savez(
    os.path.join(args.out, f"rank{rank}.npz"),
    embedding=weight.asnumpy(),
    **{name: p.data().asnumpy() for name, p in head.collect_params().items()},
)
print(
    f"rank {rank}: trained {args.steps} steps, update_on_kvstore={trainer._update_on_kvstore}",
    flush=True,
)
