"""Mode lasgd behind a link of 1 s latency (MXKV_THROTTLE_LATENCY_MS): the average
started at step 2 (tau 2) must still be travelling after step 3's local step, gradients
reduced and weights updated; prints the buckets in flight then, and after close."""

import json

import mxnet as mx
from mxnet import autograd, gluon

import mxkv_hybrid  # noqa: F401  (registers 'hybrid')

kv = mx.kv.create("hybrid")
net = gluon.nn.Dense(4, in_units=8)
net.initialize(mx.init.One())
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore=kv)
x = mx.nd.ones((2, 8)) * (kv.rank + 1)
for _ in range(3):
    with autograd.record():
        loss = net(x).sum()
    loss.backward()
    trainer.step(2)
for param in net.collect_params().values():
    param.data().wait_to_read()
during = kv.averaging.buckets_in_flight
kv.averaging.close()
print(
    json.dumps(
        {
            "rank": kv.rank,
            "in_flight_after_step_3": during,
            "in_flight_after_close": kv.averaging.buckets_in_flight,
        }
    ),
    flush=True,
)
