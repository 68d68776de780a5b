"""A worker of MXNet's own dist_sync store (no optimizer: the servers keep each step's sum
of the workers' pushes), for the relay test: each step every worker pushes (rank + 1) and
pulls the sum, slowly, so that strangers have time to try the job's ports. One CHECK line."""

import sys
import time

import mxnet as mx
import numpy as np

STEPS, SHAPE = int(sys.argv[1]), (1000,)

kv = mx.kv.create("dist_sync")
kv.init(3, mx.nd.zeros(SHAPE))
expected = sum(r + 1 for r in range(kv.num_workers))
out, sums = mx.nd.zeros(SHAPE), []
for _ in range(STEPS):
    kv.push(3, mx.nd.ones(SHAPE) * (kv.rank + 1))
    kv.pull(3, out=out)
    sums.append(float(out.asnumpy().mean()))
    time.sleep(0.25)
ok = all(np.isclose(s, expected) for s in sums) and np.allclose(out.asnumpy(), expected)
print(
    f"CHECK rank {kv.rank} of {kv.num_workers}: sums {sorted(set(sums))} "
    f"{'ok' if ok else 'FAILED'}",
    flush=True,
)
