"""Gradient compression in the averaging modes, step by step: mode easgd quantises each
rank's gradients of a weight (its own residual kept) and sums the codes in its group; mode
lasgd, in the warm-up (MXKV_WARMUP_STEPS above the steps here), over all ranks. Each rank
pushes its own random gradients; every step must equal numpy's quantiser summed over the
ranks that share them (tests/workers/quantisers.py), so a rank alone cannot pass; then a
gluon.Trainer with compression_params trains, and the ranks that share gradients keep equal
weights. COMPRESSION=2bit|1bit. One CHECK line per verified fact."""

import os

import mxnet as mx
import numpy as np
from mpi4py import MPI

from compressed_trainer import train_with_compression
from quantisers import quantise_1bit, quantise_2bit

KIND = os.environ.get("COMPRESSION", "2bit")
THRESHOLD = 0.5
PARAMS = {"type": "2bit", "threshold": THRESHOLD} if KIND == "2bit" else {"type": "1bit"}
SHAPES = {10: (300, 7), 11: (1000,)}  # int keys, as the Trainer's below
STEPS = 5

kv = mx.kv.create("hybrid")
rank, size = kv.rank, kv.num_workers
group_size = kv.config.group_size if kv.config.mode == "easgd" else size  # who sums
members = range(rank // group_size * group_size, (rank // group_size + 1) * group_size)
divisor = np.float32(len(members) if kv.config.average else 1)
sharing = MPI.COMM_WORLD.Split(rank // group_size, rank)  # compared outside the store


def check(name, condition):
    print(f"CHECK {name} {'ok' if condition else 'FAILED'}", flush=True)


def gradient(r, step, key):
    rng = np.random.default_rng([r, step, key])
    return (rng.standard_normal(SHAPES[key]) * 0.4).astype(np.float32)


def quantise(x):
    return quantise_2bit(x, THRESHOLD) if KIND == "2bit" else quantise_1bit(x)


weights = [mx.nd.zeros(shape) for shape in SHAPES.values()]
kv.broadcast_weights(list(SHAPES), weights, weights)  # registers them as weights
kv.set_gradient_compression(PARAMS)
residuals = {
    (r, k): np.zeros(int(np.prod(s)), np.float32) for r in members for k, s in SHAPES.items()
}
equal_to_reference, equal_residuals, quantised = True, True, True
for step in range(STEPS):
    outs = [mx.nd.zeros(shape) for shape in SHAPES.values()]
    kv.pushpull_gradients(
        list(SHAPES), [mx.nd.array(gradient(rank, step, k)) for k in SHAPES], out=outs
    )
    for key, out in zip(SHAPES, outs):
        expected = np.zeros(int(np.prod(SHAPES[key])), np.float32)
        for r in members:
            sent, residuals[r, key] = quantise(residuals[r, key] + gradient(r, step, key).ravel())
            expected += sent
        plain = sum(gradient(r, step, key) for r in members) / divisor
        found = out.asnumpy()
        equal_to_reference &= np.allclose(found.ravel(), expected / divisor, rtol=1e-6, atol=0)
        equal_residuals &= np.array_equal(kv._reducer.gradients.residual(key), residuals[rank, key])
        quantised &= not np.allclose(found, plain, atol=1e-3)
check("sum_equals_numpys_quantiser_over_the_ranks_that_share", equal_to_reference)
check("residuals_equal_numpy", equal_residuals)
check("what_is_summed_is_quantised", quantised)

net, _ = train_with_compression(kv, PARAMS, rank)
found = sharing.allgather(net.weight.data().asnumpy())
check(
    "trainer_compression_params",
    kv._reducer.gradients.compression.type == KIND
    and any(kv._reducer.gradients.residual(k).any() for k in range(2))
    and all(np.array_equal(w, found[0]) for w in found),
)
kv.close()
