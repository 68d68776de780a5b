"""Exercises the KVStore API the way scripts call it (string keys, init/push/pull/pushpull/
broadcast, optimizer states) and prints one CHECK line per verified fact."""
import os
import sys

import mxnet as mx
import numpy as np

from mxkv_hybrid.errors import MXKVError

kv = mx.kv.create("hybrid")
rank, size = kv.rank, kv.num_workers
expected_mean = np.mean(np.arange(1, size + 1))


def check(name, condition):
    print(f"CHECK {name} {'ok' if condition else 'FAILED'}", flush=True)


check("class", type(kv).__name__ == "Hybrid" and kv.type == "hybrid")
check("capable", kv.is_capable("optimizer") and not kv.is_capable("sparse"))
check("local_rank", kv.local_rank == rank)

kv.init("acc", mx.nd.ones((3,)) * (rank + 10))             # rank 0's value wins
out = mx.nd.zeros((3,))
kv.pull("acc", out=out)
check("init_from_rank0", np.all(out.asnumpy() == 10))

kv.push("acc", mx.nd.ones((3,)) * (rank + 1))               # averaged over ranks
kv.pull("acc", out=out)
check("push_pull_average", np.allclose(out.asnumpy(), expected_mean))

a = mx.nd.ones((2, 5)) * (rank + 1)
b = mx.nd.zeros((2, 5))
kv.pushpull("grad", a, out=b)
check("pushpull_out", np.allclose(b.asnumpy(), expected_mean) and np.all(a.asnumpy() == rank + 1))

keys = ["k0", "k1", "k2"]
values = [mx.nd.ones((n,)) * (rank + 1) for n in (1, 100, 3000)]
kv.pushpull(keys, values)
check("pushpull_many_keys", all(np.allclose(v.asnumpy(), expected_mean) for v in values))

target = [mx.nd.zeros((4,)), mx.nd.zeros((4,), ctx=mx.cpu(1))]
kv.broadcast("b", mx.nd.ones((4,)) * (rank + 7), out=target)
check("broadcast", all(np.all(t.asnumpy() == 7) for t in target))

kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.5, momentum=0.9))
kv.init("w", mx.nd.ones((4,)))
for _ in range(2):
    kv.push("w", mx.nd.ones((4,)) * (rank + 1))
out4 = mx.nd.zeros((4,))
kv.pull("w", out=out4)
# SGD momentum: m1 = -lr*g, w1 = 1 + m1; m2 = 0.9*m1 - lr*g, w2 = w1 + m2
g = expected_mean
m1 = -0.5 * g
check("optimizer_on_store", np.allclose(out4.asnumpy(), 1 + m1 + (0.9 * m1 - 0.5 * g)))

states = os.path.join(sys.argv[1], "states")
if os.environ.get("MXKV_MODE") == "sync":  # the optimizer runs on the servers
    try:
        kv.save_optimizer_states(states, dump_optimizer=True)
        check("optimizer_states_on_servers_refused", False)
    except MXKVError as err:
        print(err, flush=True)
        check("optimizer_states_on_servers_refused", not os.path.exists(states))
else:
    # saved: the momentum m2; one push moves it to m3 = 0.9 m2 - lr g (w3 = w2 + m3); loaded
    # back, the next push applies 0.9 m2 - lr g = m3 again: w = w2 + 2 m3. Were the states
    # not restored, it would apply 0.9 m3 - lr g instead.
    kv.save_optimizer_states(states, dump_optimizer=True)
    kv.push("w", mx.nd.ones((4,)) * (rank + 1))
    kv.load_optimizer_states(states)
    kv.push("w", mx.nd.ones((4,)) * (rank + 1))
    kv.pull("w", out=out4)
    m2 = 0.9 * m1 - 0.5 * g
    m3 = 0.9 * m2 - 0.5 * g
    check("optimizer_states_roundtrip", np.allclose(out4.asnumpy(), 1 + m1 + m2 + 2 * m3)
          and kv._updater.optimizer.lr == 0.5)
kv.close()
