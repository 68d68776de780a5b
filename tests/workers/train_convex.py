"""Least-squares linear regression (a convex problem with a known optimum) trained with
gluon.Trainer(kvstore='hybrid'); each rank has its own shard of the data. Prints the
final loss on the full data set (and the seconds its steps took) and writes the weights to
OUT/rank<r>.npz. With --consensus (modes easgd/lasgd) the ranks then agree on the one
model the mode delivers (mxkv_hybrid.consensus), whose loss is printed and whose weights
are written. With --halves the features (even, odd) are split between the first and the
second half of the ranks (a rank's samples carry only its half's features, and its targets
follow from them; the weights start at 0): a half alone learns nothing of the other half's
weights, so the model fits the whole data set only through the exchange; --alone H is its
control: one process, kvstore 'local', on half H's features.
argv: OUT STEPS [--consensus] [--halves | --alone H]"""

import os
import sys
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import mxkv_hybrid

out, steps, options = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
agree, halves = "--consensus" in options, "--halves" in options
alone = int(options[options.index("--alone") + 1]) if "--alone" in options else None
FEATURES, SAMPLES, BATCH = 10, 2048, 32

rng = np.random.RandomState(0)  # the same data set on every rank
true_w = rng.randn(FEATURES).astype(np.float32)
x_all = rng.randn(SAMPLES, FEATURES).astype(np.float32)
y_all = x_all @ true_w + 0.01 * rng.randn(SAMPLES).astype(np.float32)

kv = mx.kv.create("hybrid" if alone is None else "local")
x = x_all[kv.rank :: kv.num_workers].copy()
if halves or alone is not None:  # this rank's half of the features; targets follow from them
    half = alone if alone is not None else int(kv.rank >= kv.num_workers // 2)
    x[:, np.arange(FEATURES) % 2 != half] = 0  # half 0: the even features; 1: the odd
    y = x @ true_w + 0.01 * np.random.RandomState(1 + kv.rank).randn(len(x)).astype(np.float32)
else:
    y = y_all[kv.rank :: kv.num_workers]
mx.random.seed(kv.rank)
net = gluon.nn.Dense(1, in_units=FEATURES)
# from zero with --halves: a half alone leaves the other half's weights at 0 (its loss is
# 0.42 and 0.57 of the zero-weight loss, the odd and the even half missing)
net.initialize(mx.init.Zero() if halves or alone is not None else mx.init.Normal(1.0))
trainer = gluon.Trainer(
    net.collect_params(), "sgd", {"learning_rate": 0.05, "momentum": 0.5}, kvstore=kv
)
loss_fn = gluon.loss.L2Loss()
order = np.random.RandomState(kv.rank).permutation(len(y))
started = time.monotonic()
for step in range(steps):
    batch = order[(step * BATCH) % len(y) :][:BATCH]
    with autograd.record():
        loss = loss_fn(net(mx.nd.array(x[batch])), mx.nd.array(y[batch]))
    loss.backward()
    trainer.step(len(batch))

trained = time.monotonic() - started


def full_loss() -> float:
    return float(loss_fn(net(mx.nd.array(x_all)), mx.nd.array(y_all)).mean().asscalar())


initial_scale = float(np.mean(y_all**2) / 2)
print(
    f"rank {kv.rank} group-final loss {full_loss():.6f} (zero-weight loss {initial_scale:.3f}) "
    f"after {steps} steps in {trained:.2f} s",
    flush=True,
)
if alone is None and kv.config.mode == "easgd":
    print(
        f"rank {kv.rank} elastic exchanges {kv.averaging.rounds} (alpha {kv.averaging.alpha:g})",
        flush=True,
    )
if agree:
    mxkv_hybrid.consensus(trainer)
    print(f"rank {kv.rank} consensus loss {full_loss():.6f}", flush=True)
os.makedirs(out, exist_ok=True)
np.savez(
    os.path.join(out, f"rank{kv.rank}.npz"),
    **{f"{i:02d}": p.data().asnumpy() for i, p in enumerate(net.collect_params().values())},
)
if alone is None:
    kv.close()
