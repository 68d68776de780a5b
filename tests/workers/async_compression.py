"""Mode async with set_gradient_compression (COMPRESSION=2bit, the default, or 1bit), 2
groups of 2 in one job, step by step against numpy: the groups push in turn (group 0,
then group 1, each step), each its ranks' summed gradients, quantised by its leader with
the residual kept per group, part by part as MXNet splits a weight over the servers; the
servers decode each push and apply SGD with momentum at once. Each rank's gradients are
its own, so the weights the servers keep match only when both groups' codes were applied
in turn. One CHECK line per verified fact."""

import os

import mxnet as mx
import numpy as np
from mpi4py import MPI

import mxkv_hybrid
from mxkv_hybrid.ps.client import traffic
from mxkv_hybrid.ps.layout import bigarray_bound

from compressed_trainer import train_with_compression
from quantisers import quantise_1bit, quantise_2bit

KIND = os.environ.get("COMPRESSION", "2bit")
THRESHOLD = 0.5
PARAMS = {"type": "2bit", "threshold": THRESHOLD} if KIND == "2bit" else {"type": "1bit"}
SHAPES = {10: (1250, 2), 11: (37, 3)}  # key 10 above the test's big-array bound: split in 2
STEPS = 4

kv = mx.kv.create("hybrid")
rank, size = kv.rank, kv.num_workers
group_size = kv.config.group_size
group, groups = rank // group_size, size // group_size
leader = rank % group_size == 0
assert bigarray_bound() < SHAPES[10][0] * SHAPES[10][1], "the test sets a small bound"


def check(name, condition):
    print(f"CHECK {name} {'ok' if condition else 'FAILED'}", flush=True)


# The Trainer sets compression_params on the store before the optimizer, as for dist_async,
# and its weights (keys 0, 1) cross as codes
net, trainer = train_with_compression(kv, PARAMS, rank)
mxkv_hybrid.consensus(trainer)  # every rank: the servers' weights once both groups are done
found = MPI.COMM_WORLD.allgather(net.weight.data().asnumpy())
coder = kv._weights._coder
check(
    "trainer_compression_params",
    all(np.array_equal(w, found[0]) for w in found)
    and (coder.residual(0).any() if leader else coder is None),
)


def gradient(r, step, key):
    return np.random.default_rng([r, step, key]).standard_normal(SHAPES[key]).astype(np.float32)


def parts(n):
    """MXNet's split of n values over the 2 servers, as numpy slices."""
    if n < bigarray_bound():
        return [slice(0, n)]
    return [slice(0, n // 2), slice(n // 2, n)]


def quantised(x):
    return quantise_2bit(x, THRESHOLD) if KIND == "2bit" else quantise_1bit(x)


# Keys initialised after set_optimizer cross as codes too; the Trainer's SGD (no momentum)
# with its rescale_grad, 1 / batch size, updates them
step_size = np.float32(trainer.learning_rate * trainer._optimizer.rescale_grad)
initial = {
    k: np.random.default_rng(k).standard_normal(s).astype(np.float32) for k, s in SHAPES.items()
}
kv.init(list(SHAPES), [mx.nd.array(initial[k]) for k in SHAPES])
weights = {k: initial[k].ravel().copy() for k in SHAPES}
residuals = {(g, k): np.zeros_like(w) for g in range(groups) for k, w in weights.items()}
equal, pushed = True, []
for step in range(STEPS):
    for turn in range(groups):
        pushed_before = traffic()[0]
        if group == turn:
            kv.push(list(SHAPES), [mx.nd.array(gradient(rank, step, k)) for k in SHAPES])
        pushed.append(traffic()[0] - pushed_before)
        kv.barrier()
        for k in SHAPES:  # the servers: decode group `turn`'s codes, part by part, and update
            total = sum(
                gradient(r, step, k) for r in range(turn * group_size, (turn + 1) * group_size)
            ).ravel()
            sent = np.empty_like(total)
            for part in parts(total.size):
                sent[part], residuals[turn, k][part] = quantised(
                    (residuals[turn, k][part] + total[part]).astype(np.float32)
                )
            weights[k] = weights[k] - step_size * sent
        outs = [mx.nd.zeros(s) for s in SHAPES.values()]
        kv.pull(list(SHAPES), out=outs)
        kv.barrier()  # every group has read the weights before the next group pushes
        for k, out in zip(SHAPES, outs):
            found = out.asnumpy().ravel()
            if not np.allclose(found, weights[k], rtol=1e-5, atol=1e-6):
                equal = False
                off = np.flatnonzero(~np.isclose(found, weights[k], rtol=1e-5, atol=1e-6))
                print(
                    f"step {step}, after group {turn}'s push, key {k}: {off.size} values "
                    f"off, first {off[:5].tolist()}: {found[off[:5]].tolist()} vs "
                    f"{weights[k][off[:5]].tolist()}",
                    flush=True,
                )
check(
    "servers_apply_each_groups_decoded_codes",
    equal and not np.allclose(weights[10], initial[10].ravel()),
)

# per push a leader sends only the codes (csrc/code_sums.h: 2bit 15 values a word; 1bit
# a part's 40 bytes per 256 values, 3 bytes a word) and the servers' push counter
words = sum(
    -(-(p.stop - p.start) // 15)
    if KIND == "2bit"
    else -(-(-(-(p.stop - p.start) // 256) * 40) // 3)
    for s in SHAPES.values()
    for p in parts(int(np.prod(s)))
)
mine = [b for i, b in enumerate(pushed) if i % groups == group]
check("bytes_pushed", all(b == (4 * words + 4 if leader else 0) for b in mine))

# a float16 weight is pushed as it is (MXNet compresses float32 only): one update per group
kv.init(7, mx.nd.ones((10,), dtype="float16"))
kv.push(7, mx.nd.ones((10,), dtype="float16"))
kv.barrier()
half = mx.nd.zeros((10,), dtype="float16")
kv.pull(7, out=half)
check(
    "float16_uncompressed",
    np.allclose(half.asnumpy(), 1 - groups * step_size * group_size, rtol=1e-3),
)
kv.close()
