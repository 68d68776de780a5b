"""A Conv1D network (3-D weights) trained 3 steps through the Trainer, then an inference
forward, then mxkv_hybrid.consensus: MXNet 1.9.1 leaves such weights in MKLDNN's layout
after inference and cannot copy into them (`Check failed: to.IsDefaultData()`), which
ended the consensus of the modes that pull the servers' weights into them. Saves each
rank's weights after consensus to OUT/rank<r>.npz.
argv: OUT"""

import sys

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import mxkv_hybrid

out = sys.argv[1]
kv = mx.kv.create("hybrid")
net = gluon.nn.HybridSequential()
net.add(gluon.nn.Conv1D(16, 3, activation="relu"), gluon.nn.Flatten(), gluon.nn.Dense(3))
net.initialize()
net.hybridize()
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore=kv)
x = mx.nd.array(np.random.RandomState(kv.rank).standard_normal((8, 1, 10)))
y = mx.nd.array(np.arange(8) % 3)
for _ in range(3):
    with autograd.record():
        loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
    loss.backward()
    trainer.step(8)
net(x).wait_to_read()  # inference: the weights in MKLDNN's layout
mxkv_hybrid.consensus(trainer)
np.savez(
    f"{out}/rank{kv.rank}.npz",
    **{name: p.data().asnumpy() for name, p in net.collect_params().items()},
)
