"""A deliberately stale push in mode async (2 groups of 1, SGD lr 1 on the servers): both
groups read the weights w = 0; group 0 then pushes a gradient of ones 3 times, reading the
weights after each (so none of its pushes is stale); group 1, which has not read since,
pushes 10s: 3 updates of group 0 landed in between. Prints the weights each group sees
after its pushes (`weights <group> <value>`) and the leader's damping record. MOMENTUM
(0 unless set) is the SGD's momentum."""

import os

import mxnet as mx
import numpy as np

kv = mx.kv.create("hybrid")
group = kv.rank  # a group per rank
kv.init(0, mx.nd.zeros((4,)))
kv.set_optimizer(
    mx.optimizer.SGD(learning_rate=1.0, momentum=float(os.environ.get("MOMENTUM", "0")))
)
weights = mx.nd.zeros((4,))
kv.pull(0, out=weights)
kv.barrier()
if group == 0:
    for _ in range(3):
        kv.pushpull(0, mx.nd.ones((4,)), out=weights)
kv.barrier()
if group == 1:
    kv.pushpull(0, mx.nd.ones((4,)) * 10, out=weights)
print(f"weights {group} {np.unique(weights.asnumpy()).tolist()}", flush=True)
print(f"damped {group} {kv._weights.damped}", flush=True)
kv.close()
