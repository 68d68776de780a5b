"""A small Gluon training for failure rehearsals: --steps steps of a linear model
(MXKV_FAULT injects the failure); --short RANK:STEPS makes one rank stop early, the way
uneven data without even_batches would; --nan-at RANK:STEP feeds one rank NaN data at one
step and, on the NonFiniteError every rank should raise, prints the weight before that
step and after it; --compute-ms RANK:MS makes one rank compute MS longer each step;
--hang-in-backward RANK:STEP makes that rank's backward never end at that step (an engine
operation that hangs, so its gradient bucket never becomes ready); --hold-gil RANK:STEP
makes that rank sleep in C with Python's lock held before that step (its stall monitor
cannot answer). Prints the steps taken and the final weight."""

import argparse
import ctypes
import time

import mxnet as mx
from mxnet import autograd, gluon

import mxkv_hybrid

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--short", default="", help="RANK:STEPS")
parser.add_argument("--nan-at", default="", help="RANK:STEP: that rank's data is NaN at that step")
parser.add_argument("--compute-ms", default="", help="RANK:MS: that rank sleeps MS a step")
parser.add_argument("--hang-in-backward", default="", help="RANK:STEP")
parser.add_argument("--hold-gil", default="", help="RANK:STEP")
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
hang_rank, hang_step = (
    map(int, args.hang_in_backward.split(":")) if args.hang_in_backward else (-1, -1)
)
gil_rank, gil_step = map(int, args.hold_gil.split(":")) if args.hold_gil else (-1, -1)


class HangInBackward(mx.operator.CustomOp):
    """The identity, whose backward sleeps for ever."""

    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0])

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        while True:
            time.sleep(1)


@mx.operator.register("hang_in_backward")
class HangInBackwardProp(mx.operator.CustomOpProp):
    def __init__(self):
        super().__init__(need_top_grad=True)

    def infer_shape(self, in_shape):
        return in_shape, in_shape, []

    def create_operator(self, ctx, shapes, dtypes):
        return HangInBackward()


def weight() -> list:
    return dense.weight.data().asnumpy().ravel().tolist()


for step in range(steps):
    if (rank, step) == (gil_rank, gil_step):
        ctypes.PyDLL(None).sleep(3600)  # libc's sleep; a PyDLL call keeps the GIL
    before = weight()
    with autograd.record():
        out = dense(x * float("nan") if (rank, step) == (nan_rank, nan_step) else x)
        if (rank, step) == (hang_rank, hang_step):
            out = mx.nd.Custom(out, op_type="hang_in_backward")
        loss = gluon.loss.L2Loss()(out, y)
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
