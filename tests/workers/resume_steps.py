"""A small Gluon regression trained for STEPS steps that checkpoints every EVERY steps and,
started again by `mxkv-launch --restarts`, resumes from its last checkpoint with
mxkv_hybrid.checkpoint.load_latest. Batches depend only on the step and the rank, so a
resumed run follows the uninterrupted one. Writes OUT/rank<r>.npz (final weights).
argv: OUT CHECKPOINTS STEPS EVERY"""

import os
import sys

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import mxkv_hybrid

out, checkpoints, steps, every = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
FEATURES, BATCH = 8, 16

kv = mx.kv.create("hybrid")
rng = np.random.RandomState(0)
true_w = rng.randn(FEATURES).astype(np.float32)
mx.random.seed(0)
net = gluon.nn.Dense(1, in_units=FEATURES)
net.initialize(mx.init.Normal(0.5))
trainer = gluon.Trainer(
    net.collect_params(), "sgd", {"learning_rate": 0.05, "momentum": 0.9}, kvstore=kv
)
progress = mxkv_hybrid.checkpoint.load_latest(checkpoints, net, trainer)
first = progress["step"] if progress else 0
print(f"rank {kv.rank} attempt {kv.config.attempt} starts at step {first}", flush=True)
loss_fn = gluon.loss.L2Loss()
for step in range(first, steps):
    batch = np.random.RandomState(1000 * step + kv.rank).randn(BATCH, FEATURES).astype(np.float32)
    with autograd.record():
        loss = loss_fn(net(mx.nd.array(batch)), mx.nd.array(batch @ true_w))
    loss.backward()
    trainer.step(BATCH)
    if (step + 1) % every == 0:
        mxkv_hybrid.checkpoint.save(checkpoints, net, trainer, progress={"step": step + 1})
os.makedirs(out, exist_ok=True)
np.savez(
    os.path.join(out, f"rank{kv.rank}.npz"),
    **{name: p.data().asnumpy() for name, p in net.collect_params().items()},
)
