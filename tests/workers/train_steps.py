"""A small Gluon training for failure rehearsals: --steps steps of a linear model
(MXKV_FAULT injects the failure); --short RANK:STEPS makes one rank stop early, the way
uneven data without even_batches would; --nan-at RANK:STEP feeds one rank NaN data at one
step and, on the NonFiniteError every rank should raise, prints the weight before that
step and after it; --compute-ms RANK:MS makes one rank compute MS longer each step.
Prints the steps taken and the final weight."""
import argparse
import time

import mxnet as mx
from mxnet import autograd, gluon

import mxkv_hybrid

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--short", default="", help="RANK:STEPS")
parser.add_argument("--nan-at", default="", help="RANK:STEP: that rank's data is NaN at that step")
parser.add_argument("--compute-ms", default="", help="RANK:MS: that rank sleeps MS a step")
args = parser.parse_args()

rank = mxkv_hybrid.world().rank
steps = args.steps
if args.short and int(args.short.split(":")[0]) == rank:
    steps = int(args.short.split(":")[1])
dense = gluon.nn.Dense(1, in_units=3)
dense.initialize(mx.init.Zero())
trainer = gluon.Trainer(dense.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="hybrid")
x, y = mx.nd.ones((8, 3)) * (rank + 1), mx.nd.ones((8, 1))
nan_rank, nan_step = map(int, args.nan_at.split(":")) if args.nan_at else (-1, -1)
slow_rank, slow_ms = map(int, args.compute_ms.split(":")) if args.compute_ms else (-1, 0)


def weight() -> list:
    return dense.weight.data().asnumpy().ravel().tolist()


for step in range(steps):
    before = weight()
    with autograd.record():
        loss = gluon.loss.L2Loss()(dense(x * float("nan") if (rank, step) == (nan_rank, nan_step)
                                             else x), y)
    loss.backward()
    if rank == slow_rank:
        time.sleep(slow_ms / 1e3)
    try:
        trainer.step(8)
    except mxkv_hybrid.NonFiniteError as err:
        print(f"rank {rank} step {step}: {err}")
        print(f"rank {rank} weight before {before} after {weight()}")
        steps = step
        break
print(f"rank {rank} took {steps} steps; weight {weight()}")
