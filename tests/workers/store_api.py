"""Exercises the KVStore API the way scripts call it (string keys, init/push/pull/pushpull/
broadcast, optimizer states) in any mode and prints one CHECK line per verified fact:
what every mode does alike, and where modes differ, what each does
(docs/guides/kvstore-api.md, "The KVStore API in every mode")."""

import itertools
import os
import sys

import mxnet as mx
import numpy as np

from mxkv_hybrid.errors import MXKVError

kv = mx.kv.create("hybrid")
rank, size = kv.rank, kv.num_workers
mode = kv.config.mode
expected_sum = np.sum(np.arange(1, size + 1))  # the store sums, as every MXNet store


def check(name, condition):
    print(f"CHECK {name} {'ok' if condition else 'FAILED'}", flush=True)


check("class", type(kv).__name__ == "Hybrid" and kv.type == "hybrid")
# the averaging modes update every rank's (group's) weights apart: no updates on the store
check(
    "capable",
    kv.is_capable("optimizer") == (mode not in ("easgd", "lasgd")) and not kv.is_capable("sparse"),
)
check("local_rank", kv.local_rank == rank)

kv.init("acc", mx.nd.ones((3,)) * (rank + 10))  # rank 0's value wins
out = mx.nd.zeros((3,))
kv.pull("acc", out=out)
check("init_from_rank0", np.all(out.asnumpy() == 10))

if mode == "async":  # the servers apply every push as an update: it needs an optimizer
    try:
        kv.push("acc", mx.nd.ones((3,)) * (rank + 1))
        check("push_without_optimizer_refused", False)
    except MXKVError as err:
        print(err, flush=True)
        check("push_without_optimizer_refused", "call set_optimizer first" in str(err))
else:
    kv.push("acc", mx.nd.ones((3,)) * (rank + 1))  # summed over ranks
    kv.pull("acc", out=out)
    check("push_pull_sum", np.allclose(out.asnumpy(), expected_sum))

a = mx.nd.ones((2, 5)) * (rank + 1)
b = mx.nd.zeros((2, 5))
kv.pushpull("grad", a, out=b)
check("pushpull_out", np.allclose(b.asnumpy(), expected_sum) and np.all(a.asnumpy() == rank + 1))

keys = ["k0", "k1", "k2"]
values = [mx.nd.ones((n,)) * (rank + 1) for n in (1, 100, 3000)]
kv.pushpull(keys, values)
check("pushpull_many_keys", all(np.allclose(v.asnumpy(), expected_sum) for v in values))

target = [mx.nd.zeros((4,)), mx.nd.zeros((4,), ctx=mx.cpu(1))]
kv.broadcast("b", mx.nd.ones((4,)) * (rank + 7), out=target)
check("broadcast", all(np.all(t.asnumpy() == 7) for t in target))

kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.5, momentum=0.9))
kv.init("w", mx.nd.ones((4,)))
for _ in range(2):
    kv.push("w", mx.nd.ones((4,)) * (rank + 1))
kv.barrier()  # async: every group's pushes applied
out4 = mx.nd.zeros((4,))
kv.pull("w", out=out4)


def momentum_sgd(gradients, mu=0.9):
    """w after SGD with momentum mu, lr 0.5 from w = 1 over `gradients` in turn."""
    weight, momentum = 1.0, 0.0
    for gradient in gradients:
        momentum = mu * momentum - 0.5 * gradient
        weight += momentum
    return weight


g = expected_sum
if mode == "async":  # each group's sum applied alone, the groups' pushes in any order
    group_size = kv.config.group_size
    sums = [np.sum(np.arange(1, size + 1)[i : i + group_size]) for i in range(0, size, group_size)]
    pushes = [a for a in sums for _ in range(2)]
    # MXKV_ASYNC_DAMPING=auto (the default, rate): 1 - mu = groups (1 - 0.9), under 10 groups
    mu = 1 - len(sums) * (1 - 0.9)
    possible = {momentum_sgd(order, mu) for order in itertools.permutations(pushes)}
    check("optimizer_on_store", any(np.allclose(out4.asnumpy(), w) for w in possible))
else:
    check("optimizer_on_store", np.allclose(out4.asnumpy(), momentum_sgd([g, g])))
m1 = -0.5 * g

states = os.path.join(sys.argv[1], "states")
if mode == "async":  # on the servers, the groups' pushes applied in any order: the servers
    # write their shares (and read them back) when group 0's leader asks
    kv.save_optimizer_states(states, dump_optimizer=True)
    kv.load_optimizer_states(states)
    shares = [f"{states}.server{n}" for n in range(int(os.environ["DMLC_NUM_SERVER"]))]
    check("optimizer_states_saved_by_the_servers", rank != 0 or all(map(os.path.exists, shares)))
else:
    # saved: the momentum m2; one push moves it to m3 = 0.9 m2 - lr g (w3 = w2 + m3); loaded
    # back, the next push applies 0.9 m2 - lr g = m3 again: w = w2 + 2 m3. Were the states
    # not restored, it would apply 0.9 m3 - lr g instead. (sync: the servers hold them)
    kv.save_optimizer_states(states, dump_optimizer=True)
    kv.push("w", mx.nd.ones((4,)) * (rank + 1))
    kv.load_optimizer_states(states)
    kv.push("w", mx.nd.ones((4,)) * (rank + 1))
    kv.pull("w", out=out4)
    m2 = 0.9 * m1 - 0.5 * g
    m3 = 0.9 * m2 - 0.5 * g
    check(
        "optimizer_states_roundtrip",
        np.allclose(out4.asnumpy(), 1 + m1 + m2 + 2 * m3) and kv._updater.optimizer.lr == 0.5,
    )
kv.close()
