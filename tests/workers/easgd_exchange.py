"""Elastic exchanges checked against the formulas. One rank per group, MXKV_EASGD_ALPHA
set: the centre starts at the broadcast weights, each group then moves its weights (as
local steps would), and for a few rounds the groups exchange one after the other
(asynchronous EASGD), or all at once with argv[1] == "together" (MXKV_EASGD_SYNC=1).
Rank 0 prints the weights and the centre after every exchange."""

import json
import sys

import mxnet as mx
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
kv = mx.kv.create("hybrid")
start = np.array([2.0, -1.0, 0.5], dtype=np.float32)
x = mx.nd.array(start)
kv.broadcast_weights(0, mx.nd.array(start * (comm.rank + 1)), out=x)  # rank 0's value wins
x += mx.nd.array([4.0 * comm.rank, 2.0 * comm.rank, -comm.rank])  # "local steps"
centre = mx.nd.zeros(start.shape)
together = sys.argv[1:] == ["together"]
for round_ in range(3):
    for group in [None] if together else range(comm.size):
        if together or comm.rank == group:
            kv.averaging.exchange([0], [[x]])
        comm.Barrier()
        if comm.rank == 0:
            kv.averaging.centre([0], [centre])
        weights = comm.gather(x.asnumpy().tolist())
        if comm.rank == 0:
            print(
                "EXCHANGE "
                + json.dumps(
                    {
                        "round": round_,
                        "group": group,
                        "weights": weights,
                        "centre": centre.asnumpy().tolist(),
                    }
                ),
                flush=True,
            )
kv.close()
