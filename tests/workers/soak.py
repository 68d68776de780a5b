"""Load and soak for one job: 10,000 small keys (1-100 floats each) in one pushpull,
4 huge keys of 64 MiB each (256 MiB), then 1,000 steps of a small Gluon model.
Prints JSON lines: the sums' largest error, the memory (RSS) after warm-up and at the
end of the steps, and the final weights' digest (the test compares the ranks)."""

import hashlib
import json

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

MANY_KEYS, HUGE_KEYS, HUGE_FLOATS, STEPS, WARMUP = 10_000, 4, 16 << 20, 1_000, 100


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def report(**fields) -> None:
    print(json.dumps(fields), flush=True)


store = mx.kv.create("hybrid")
rank, size = store.rank, store.num_workers
rng = np.random.RandomState(0)  # the same lengths on every rank
lengths = rng.randint(1, 101, MANY_KEYS)
values = [mx.nd.full((n,), rank + 1 + k % 7, dtype="float32") for k, n in enumerate(lengths)]
store.pushpull(list(range(MANY_KEYS)), values)
expected = [
    np.full(n, np.sum(np.arange(1, size + 1)) + size * (k % 7)) for k, n in enumerate(lengths)
]
report(
    test="many_keys",
    keys=MANY_KEYS,
    max_error=max(float(np.abs(v.asnumpy() - e).max()) for v, e in zip(values, expected)),
)
del values

huge = [mx.nd.full((HUGE_FLOATS,), float(rank + k), dtype="float32") for k in range(HUGE_KEYS)]
store.pushpull([f"huge{k}" for k in range(HUGE_KEYS)], huge)
report(
    test="huge_keys",
    mib=HUGE_KEYS * HUGE_FLOATS * 4 / 2**20,
    max_error=max(
        float(np.abs(h.asnumpy() - (size * (size - 1) / 2 + size * k)).max())
        for k, h in enumerate(huge)
    ),
)
del huge
store.close()

net = gluon.nn.HybridSequential()
net.add(gluon.nn.Dense(32, activation="relu"), gluon.nn.Dense(4))
net.initialize(mx.init.Xavier())
net.hybridize()
trainer = gluon.Trainer(
    net.collect_params(), "sgd", {"learning_rate": 0.05, "momentum": 0.9}, kvstore="hybrid"
)
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
data_rng = np.random.RandomState(rank)
for step in range(STEPS):
    x = mx.nd.array(data_rng.rand(16, 10))
    y = mx.nd.array(data_rng.randint(0, 4, 16))
    with autograd.record():
        loss = loss_fn(net(x), y)
    loss.backward()
    trainer.step(16)
    if step + 1 == WARMUP:
        mx.nd.waitall()
        rss_after_warmup = rss_mib()
    if (step + 1) % 250 == 0:
        print(f"rank {rank}: step {step + 1}/{STEPS}", flush=True)
mx.nd.waitall()
digest = hashlib.sha1()
for _name, param in sorted(net.collect_params().items()):
    digest.update(param.data().asnumpy().tobytes())
report(
    test="steps",
    steps=STEPS,
    rss_after_warmup_mib=rss_after_warmup,
    rss_end_mib=rss_mib(),
    weights=digest.hexdigest(),
)
