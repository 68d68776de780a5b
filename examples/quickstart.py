"""The README's example: linear regression on 2+ ranks with the hybrid store."""

import mxnet as mx
from mxnet import autograd, gluon

import mxkv_hybrid  # registers the store 'hybrid'

net = gluon.nn.Dense(1)
net.initialize(mx.init.Normal(1.0))
kv = mx.kv.create("hybrid")  # or kvstore="hybrid" below
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore=kv)
mx.random.seed(kv.rank)  # every rank its own batches of y = 3 x0 - 2 x1 + 1
for _step in range(200):
    x = mx.nd.random.normal(shape=(32, 2))
    y = 3 * x[:, 0:1] - 2 * x[:, 1:2] + 1
    with autograd.record():
        loss = gluon.loss.L2Loss()(net(x), y)
    loss.backward()
    trainer.step(32)  # gradients averaged over every rank
mxkv_hybrid.consensus(trainer)  # one final model (easgd / lasgd: the centre / the average)
print(
    f"rank {kv.rank} of {kv.num_workers}: weight {net.weight.data().asnumpy().round(3)}, "
    f"bias {net.bias.data().asnumpy().round(3)}"
)
