"""The small gluon.Trainer run the compression workers end with: compression_params reach
the store through the Trainer, as they do for dist_sync."""

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon


def train_with_compression(kvstore, params: dict, rank: int):
    """A Dense(3) trained 3 steps on this rank's own data by a gluon.Trainer given
    compression_params=`params` (which it sets on its store, as for dist_sync); different
    initial weights per rank, which the store's broadcast makes one. Returns the net and
    its Trainer."""
    mx.random.seed(rank)
    net = gluon.nn.Dense(3, in_units=5)
    net.initialize()
    trainer = gluon.Trainer(
        net.collect_params(),
        "sgd",
        {"learning_rate": 0.1},
        kvstore=kvstore,
        compression_params=params,
    )
    data = np.random.RandomState(rank)
    for _ in range(3):
        x, y = mx.nd.array(data.randn(8, 5)), mx.nd.array(data.randint(0, 3, 8))
        with autograd.record():
            loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
        loss.backward()
        trainer.step(8)
    return net, trainer
