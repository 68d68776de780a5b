"""Mode sync with set_gradient_compression 2bit, step by step against numpy: each group's
float32 sum (its 2 ranks' gradients) is quantised with MXNet's 2-bit arithmetic, the
residual kept per group, and the quantised sums of all groups are summed (the servers add
the codes as digits) and averaged over the ranks (pushpull_gradients, MXKV_AVERAGE=1).
Each rank pushes its own random gradients, so no group alone can produce the result. One
CHECK line per verified fact."""
import mxnet as mx
import numpy as np

from mxkv_hybrid.errors import MXKVError
from mxkv_hybrid.ps.client import traffic

THRESHOLD = 0.5
SHAPES = {"a": (1000,), "b": (37, 3)}
STEPS = 5

kv = mx.kv.create("hybrid")
rank, size = kv.rank, kv.num_workers
group_size = kv.config.group_size
groups = [list(range(g, g + group_size)) for g in range(0, size, group_size)]


def check(name, condition):
    print(f"CHECK {name} {'ok' if condition else 'FAILED'}", flush=True)


def gradient(r, step, key):
    return np.random.default_rng([r, step, ord(key)]).standard_normal(SHAPES[key]).astype(
        np.float32)


def quantised(x, residual):
    """MXNet's 2-bit step on float32 x + residual: (sent, new residual)."""
    total = (residual + x).astype(np.float32)
    sent = np.where(total >= THRESHOLD, THRESHOLD,
                    np.where(total <= -THRESHOLD, -THRESHOLD, 0)).astype(np.float32)
    return sent, (total - sent).astype(np.float32)


try:
    kv.set_gradient_compression({"type": "1bit"})
    check("one_bit_refused", False)
except MXKVError as err:
    check("one_bit_refused", "MXKV_MODE=sync takes {'type': '2bit'}" in str(err))
kv.set_gradient_compression({"type": "2bit", "threshold": THRESHOLD})

residuals = {(g, k): np.zeros(s, np.float32) for g in range(len(groups)) for k, s in SHAPES.items()}
equal, moved = True, False
pushed_before = traffic()[0]
for step in range(STEPS):
    grads = [mx.nd.array(gradient(rank, step, k)) for k in SHAPES]
    kv.pushpull_gradients(list(SHAPES), grads)
    for key, out in zip(SHAPES, grads):
        total = np.zeros(SHAPES[key], np.float64)
        for g, members in enumerate(groups):
            group_sum = sum(gradient(r, step, key) for r in members).astype(np.float32)
            sent, residuals[(g, key)] = quantised(group_sum, residuals[(g, key)])
            total += sent
        equal &= np.allclose(out.asnumpy(), total / size, rtol=1e-6, atol=0)
        moved |= bool(np.any(total))
check("sum_of_quantised_group_sums", equal and moved)
# a leader pushes a word of 10 values (2 groups) where float32 takes 10 words
floats = sum(int(np.prod(s)) for s in SHAPES.values())
pushed = traffic()[0] - pushed_before
check("bytes_pushed", pushed == 0 if rank % group_size else
      pushed == STEPS * 4 * sum(-(-int(np.prod(s)) // 10) for s in [(floats,)]))

# the optimizer stays on the workers and updates with the decoded sums
kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.1))
kv.init("w", mx.nd.ones(SHAPES["a"]))
kv.push_gradients("w", mx.nd.array(gradient(rank, 99, "a")))
weight = mx.nd.zeros(SHAPES["a"])
kv.pull("w", out=weight)
total = np.zeros(SHAPES["a"])
for g, members in enumerate(groups):
    group_sum = sum(gradient(r, 99, "a") for r in members).astype(np.float32)
    total += quantised(group_sum, np.zeros(SHAPES["a"], np.float32))[0]
check("optimizer_on_the_workers", np.allclose(weight.asnumpy(), 1 - 0.1 * total / size,
                                              rtol=1e-6))
kv.close()
