"""Mode sync with set_gradient_compression (COMPRESSION=2bit, the default, or 1bit), step
by step against numpy: each group's float32 sum (its ranks' gradients, fused in call
order) is quantised with the residual kept per group, and the quantised sums of all
groups are summed (the servers add the codes' words) and averaged over the ranks
(pushpull_gradients, MXKV_AVERAGE=1). Each rank pushes its own random gradients, so no
group alone can produce the result. One CHECK line per verified fact."""

import os

import mxnet as mx
import numpy as np

from mxkv_hybrid.errors import MXKVError
from mxkv_hybrid.ps.client import traffic

from quantisers import quantise_1bit, quantise_2bit

KIND = os.environ.get("COMPRESSION", "2bit")
THRESHOLD = 0.5
SHAPES = {"a": (1000,), "b": (37, 3)}  # fused: 1111 float32 values, blocks across keys
STEPS = 5

kv = mx.kv.create("hybrid")
rank, size = kv.rank, kv.num_workers
group_size = kv.config.group_size
groups = [list(range(g, g + group_size)) for g in range(0, size, group_size)]


def check(name, condition):
    print(f"CHECK {name} {'ok' if condition else 'FAILED'}", flush=True)


def gradient(r, step, key):
    return (
        np.random.default_rng([r, step, ord(key)]).standard_normal(SHAPES[key]).astype(np.float32)
    )


def quantised(x, residual):
    """(sent, new residual) of flat float32 x + residual."""
    total = (residual + x).astype(np.float32)
    return quantise_2bit(total, THRESHOLD) if KIND == "2bit" else quantise_1bit(total)


def sum_of_quantised_group_sums(step, keys, residuals):
    """{key: the sum over groups of their quantised sums}, residuals updated per group."""
    total = 0
    for g, members in enumerate(groups):
        fused = np.concatenate(
            [sum(gradient(r, step, k) for r in members).ravel() for k in keys]
        ).astype(np.float32)
        sent, residuals[g] = quantised(fused, residuals[g])
        total = total + sent.astype(np.float64)
    sizes = np.cumsum([0] + [int(np.prod(SHAPES[k])) for k in keys])
    return {k: total[a:b].reshape(SHAPES[k]) for k, a, b in zip(keys, sizes, sizes[1:])}


try:
    kv.set_gradient_compression({"type": "4bit"})
    check("other_types_refused", False)
except MXKVError as err:
    check("other_types_refused", "'2bit'" in str(err))
kv.set_gradient_compression(
    {"type": "2bit", "threshold": THRESHOLD} if KIND == "2bit" else {"type": "1bit"}
)

keys = list(SHAPES)
floats = sum(int(np.prod(s)) for s in SHAPES.values())
residuals = {g: np.zeros(floats, np.float32) for g in range(len(groups))}
equal, moved = True, False
pushed_before = traffic()[0]
for step in range(STEPS):
    grads = [mx.nd.array(gradient(rank, step, k)) for k in keys]
    kv.pushpull_gradients(keys, grads)
    expected = sum_of_quantised_group_sums(step, keys, residuals)
    for key, out in zip(keys, grads):
        equal &= np.allclose(out.asnumpy(), expected[key] / size, rtol=1e-6, atol=1e-7)
        moved |= bool(np.any(expected[key]))
check("sum_of_quantised_group_sums", equal and moved)
# words a leader pushes a step (csrc/code_sums.h): 2bit, one per 10 values (2 groups);
# 1bit, each group's slot of 40 bytes per 256 values, 3 bytes a word
words = -(-floats // 10) if KIND == "2bit" else len(groups) * -(-(-(-floats // 256) * 40) // 3)
pushed = traffic()[0] - pushed_before
check("bytes_pushed", pushed == (0 if rank % group_size else STEPS * 4 * words))

# the optimizer stays on the workers and updates with the decoded sums
kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.1))
kv.init("w", mx.nd.ones(SHAPES["a"]))
kv.push_gradients("w", mx.nd.array(gradient(rank, 99, "a")))
weight = mx.nd.zeros(SHAPES["a"])
kv.pull("w", out=weight)
fresh = {g: np.zeros(SHAPES["a"][0], np.float32) for g in range(len(groups))}
expected = sum_of_quantised_group_sums(99, ["a"], fresh)["a"]
check(
    "optimizer_on_the_workers",
    np.allclose(weight.asnumpy(), 1 - 0.1 * expected / size, rtol=1e-6, atol=1e-7),
)
kv.close()
