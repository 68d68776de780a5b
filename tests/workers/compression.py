"""Gradient compression through the hybrid store, step by step: MXNet's 2-bit against
MXNet's own quantiser (its 'device' store over one CPU context per rank, compression set:
what dist_sync's servers sum) and a numpy quantiser (this rank's residuals); with
COMPRESSION=1bit, 1-bit SGD's quantiser against a numpy one. Each rank pushes its own
random gradients; one CHECK line per verified fact. With a hierarchical allreduce
(MXKV_HIERARCHY=on, groups of MXKV_GROUP_SIZE) what is quantised is each group's sum, one
slice at each of its ranks: the reference is then numpy's quantiser of every group's sum
(1-bit's blocks restarting where the slices cut the keys), and a group's residual is the
sum of its ranks' (the slices). Gradients go the Trainer hooks' way (pushpull_gradients,
push_gradients: averaged when MXKV_AVERAGE=1)."""

import os

import mxnet as mx
import numpy as np
from mpi4py import MPI

from mxkv_hybrid.errors import MXKVError

from compressed_trainer import train_with_compression
from quantisers import quantise_1bit, quantise_2bit

KIND = os.environ.get("COMPRESSION", "2bit")
THRESHOLD = 0.5
PARAMS = {"type": "2bit", "threshold": THRESHOLD} if KIND == "2bit" else {"type": "1bit"}
SHAPES = {"a": (300, 7), "b": (1000,)}
STEPS = 6

kv = mx.kv.create("hybrid")
rank, size = kv.rank, kv.num_workers
divisor = size if kv.config.average else 1
per_rank = np.float32(1 / divisor)  # the store multiplies the float32 sum by it
per_group = kv._active().hierarchical
group_size = int(os.environ["MXKV_GROUP_SIZE"]) if per_group else 1
groups = [list(range(g, g + group_size)) for g in range(0, size, group_size)]
my_group = MPI.COMM_WORLD.Split(rank // group_size, rank)  # compared outside the store


def check(name, condition):
    print(f"CHECK {name} {'ok' if condition else 'FAILED'}", flush=True)


def gradient(r, step, key):
    rng = np.random.default_rng([r, step, ord(key)])
    return (rng.standard_normal(SHAPES[key]) * 0.4).astype(np.float32)


def cuts(key, call):
    """Where quantisation starts afresh in `key` when a pushpull of the keys `call` holds
    it: the key's start, and per group the slices' bounds (csrc/segmented_exchange.h)."""
    size_of = {k: int(np.prod(SHAPES.get(k, SHAPES["b"]))) for k in call}
    first = sum(size_of[k] for k in call[: call.index(key)])
    total = sum(size_of.values())
    bounds = {total * b // group_size for b in range(group_size + 1)} if per_group else set()
    return sorted({0, size_of[key]} | {b - first for b in bounds if 0 < b - first < size_of[key]})


def quantise(values, residual, where):
    """(values sent, new residual) of flat float32 `values`, quantised from each cut on."""
    x = (residual + values).astype(np.float32)
    parts = [
        (quantise_2bit(x[a:b], THRESHOLD) if KIND == "2bit" else quantise_1bit(x[a:b]))
        for a, b in zip(where, where[1:])
    ]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def compressed_sum(values_of_rank, where, residuals=None):
    """The sum over the quantisers (each rank's, or each group's of its ranks' sum) of
    what they send, and their new residuals (fresh ones unless given, {quantiser: r})."""
    total, kept = 0, {}
    for g, members in enumerate(groups):
        quantiser = g if per_group else members[0]
        values = sum(values_of_rank(r).astype(np.float32) for r in members).ravel()
        start = residuals[quantiser] if residuals else np.zeros_like(values)
        sent, kept[quantiser] = quantise(values, start, where)
        total = total + sent
    return total, kept


def my_residual(key):
    """This rank's residual of `key`; per group: its group's (the sum of its slices)."""
    mine = kv._reducer.residual(key)
    if not per_group:
        return mine
    slices = mine if mine.size else np.zeros(np.prod(SHAPES[key]), np.float32)  # none held
    return my_group.allreduce(slices, op=MPI.SUM)


mine = rank // group_size if per_group else rank  # this rank's quantiser


try:
    kv.set_gradient_compression({"type": "4bit"})
    check("other_types_refused", False)
except MXKVError as err:
    print(err, flush=True)
    check("other_types_refused", "'2bit'" in str(err))
kv.set_gradient_compression(PARAMS)

mxnet_store = mx.kv.create("device")  # the reference: one CPU context per rank
mxnet_store.set_gradient_compression({"type": "2bit", "threshold": THRESHOLD})
for key, shape in SHAPES.items():
    mxnet_store.init(key, mx.nd.zeros(shape))
residuals = dict.fromkeys(SHAPES)
equal_to_reference, equal_residuals, moved = True, True, False
for step in range(STEPS):
    outs = [mx.nd.zeros(shape) for shape in SHAPES.values()]
    kv.pushpull_gradients(
        list(SHAPES), [mx.nd.array(gradient(rank, step, k)) for k in SHAPES], out=outs
    )
    for key, out in zip(SHAPES, outs):
        # compressed_sum calls it at once, in this iteration
        expected, residuals[key] = compressed_sum(
            lambda r: gradient(r, step, key),  # noqa: B023
            cuts(key, list(SHAPES)),
            residuals[key],
        )
        expected = expected.reshape(SHAPES[key])
        if KIND == "2bit" and not per_group:  # MXNet's own quantiser sums the same
            mxnet_store.push(
                key, [mx.nd.array(gradient(r, step, key), ctx=mx.cpu(r)) for r in range(size)]
            )
            expected = mx.nd.zeros(SHAPES[key])
            mxnet_store.pull(key, out=expected)
            expected = expected.asnumpy()
        equal_to_reference &= np.allclose(out.asnumpy(), expected * per_rank, rtol=1e-7, atol=0)
        equal_residuals &= np.array_equal(my_residual(key), residuals[key][mine].ravel())
        moved |= bool(np.any(expected))
check("sum_equals_the_reference_quantiser", equal_to_reference and moved)
check("residuals_equal_numpy", equal_residuals)

# two devices per rank: what is quantised is the rank's sum over its devices (as a
# dist_sync worker pushes it), here on cpu_pinned, which travels through staging buffers
copies = [
    mx.nd.array(gradient(rank, 50, "b"), ctx=mx.cpu_pinned(0)),
    mx.nd.array(gradient(rank, 51, "b"), ctx=mx.cpu_pinned(1)),
]
kv.pushpull_gradients("devices", copies)
sent, _ = compressed_sum(
    lambda r: gradient(r, 50, "b") + gradient(r, 51, "b"), cuts("devices", ["devices"])
)
check(
    "devices_summed_then_quantised",
    all(np.allclose(c.asnumpy(), sent / divisor, atol=1e-7) for c in copies),
)

kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.1))
kv.init("w", mx.nd.ones(SHAPES["b"]))
kv.push_gradients("w", mx.nd.array(gradient(rank, 99, "b")))
weight = mx.nd.zeros(SHAPES["b"])
kv.pull("w", out=weight)
sent, _ = compressed_sum(lambda r: gradient(r, 99, "b"), cuts("w", ["w"]))
check(
    "optimizer_gets_the_compressed_sum",
    np.allclose(weight.asnumpy(), 1 - 0.1 * sent / divisor, atol=1e-7),
)

net, trainer = train_with_compression("hybrid", PARAMS, rank)
weights = MPI.COMM_WORLD.allgather(net.weight.data().asnumpy())  # compared outside the store
reducer = trainer._kvstore._reducer
check(
    "trainer_compression_params",
    reducer.compression.type == KIND
    and any(reducer.residual(k).any() for k in range(2))
    and all(np.array_equal(w, weights[0]) for w in weights),
)
kv.close()
