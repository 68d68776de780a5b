"""Asynchronous elastic exchanges at every group's own pace: one rank per group, each moves
its weights by its own random "local steps" and exchanges with the centre argv[1] times,
no barrier between groups. Rank 0 then prints, as JSON, the sum of every group's weights
and the centre, what that sum started at (groups + 1 copies of the start), and the sum of
all moves: the exchanges must conserve it."""

import json
import sys

import mxnet as mx
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
kv = mx.kv.create("hybrid")
rounds = int(sys.argv[1])
rng = np.random.default_rng(comm.rank)
start = np.linspace(-1.0, 1.0, 64).astype(np.float32)  # one short output line
x = mx.nd.array(start)
kv.broadcast_weights(0, mx.nd.array(start), out=x)
moved = np.zeros_like(start, dtype=np.float64)
for _ in range(rounds):
    step = rng.normal(0, 0.1, start.shape).astype(np.float32)
    x += mx.nd.array(step)
    moved += step
    kv.averaging.exchange([0], [[x]])
comm.Barrier()  # every group's last exchange landed
centre = mx.nd.zeros(start.shape)
if comm.rank == 0:
    kv.averaging.centre([0], [centre])
weights = comm.gather(x.asnumpy().astype(np.float64))
moves = comm.gather(moved)
if comm.rank == 0:
    print(
        "CONSERVED "
        + json.dumps(
            {
                "total": (np.sum(weights, axis=0) + centre.asnumpy()).tolist(),
                "start": ((comm.size + 1) * start.astype(np.float64)).tolist(),
                "moves": np.sum(moves, axis=0).tolist(),
                "exchanges": kv.averaging.rounds,
            }
        ),
        flush=True,
    )
kv.close()
