"""Names a store the way a script would, then takes one step: `create NAME` (mx.kv.create),
`trainer NAME` (gluon.Trainer(kvstore=NAME), one device) or `module NAME` (Module.fit)."""

import sys

import mxnet as mx
from mxnet import autograd, gluon

how, name = sys.argv[1], sys.argv[2]
x, y = mx.nd.ones((4, 3)), mx.nd.ones((4, 1))
if how == "create":
    kv = mx.kv.create(name)
    kv.init(0, mx.nd.zeros((3,)))
elif how == "trainer":
    net = gluon.nn.Dense(1, in_units=3)
    net.initialize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore=name)
    with autograd.record():
        loss = gluon.loss.L2Loss()(net(x), y)
    loss.backward()
    trainer.step(4)
else:
    symbol = mx.sym.LinearRegressionOutput(
        mx.sym.FullyConnected(mx.sym.Variable("data"), num_hidden=1), name="lin"
    )
    module = mx.mod.Module(symbol, label_names=["lin_label"])
    module.fit(
        mx.io.NDArrayIter(x, y, batch_size=4, label_name="lin_label"),
        num_epoch=1,
        kvstore=name,
        optimizer="sgd",
    )
print("stepped", flush=True)
