"""A small Gluon training for failure rehearsals: --steps steps of a linear model
(MXKV_FAULT injects the failure); --short RANK:STEPS makes one rank stop early, the way
uneven data without even_batches would. Prints the steps taken and the final weight."""
import argparse

import mxnet as mx
from mxnet import autograd, gluon

import mxkv_hybrid

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--short", default="", help="RANK:STEPS")
args = parser.parse_args()

rank = mxkv_hybrid.world().rank
steps = args.steps
if args.short and int(args.short.split(":")[0]) == rank:
    steps = int(args.short.split(":")[1])
dense = gluon.nn.Dense(1, in_units=3)
dense.initialize(mx.init.Zero())
trainer = gluon.Trainer(dense.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="hybrid")
x, y = mx.nd.ones((8, 3)) * (rank + 1), mx.nd.ones((8, 1))
for step in range(steps):
    with autograd.record():
        loss = gluon.loss.L2Loss()(dense(x), y)
    loss.backward()
    trainer.step(8)
print(f"rank {rank} took {steps} steps; weight {dense.weight.data().asnumpy().ravel().tolist()}")
