"""Elastic exchanges in a fixed order, checked against the formulas. One rank per group,
MXKV_EASGD_ALPHA set: the centre starts at the broadcast weights, each group then moves its
weights (as local steps would), and the groups exchange one after the other for a few
rounds. Rank 0 prints the weights, the centre and their sum after every exchange."""
import json

import mxnet as mx
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
kv = mx.kv.create("hybrid")
start = np.array([2.0, -1.0, 0.5], dtype=np.float32)
x = mx.nd.array(start)
kv.broadcast(0, mx.nd.array(start * (comm.rank + 1)), out=x)  # rank 0's value wins
x += mx.nd.array([4.0 * comm.rank, 2.0 * comm.rank, -comm.rank])  # "local steps"
centre = mx.nd.zeros(start.shape)
for round_ in range(3):
    for group in range(comm.size):
        if comm.rank == group:
            kv.elastic.exchange([0], [[x]])
        comm.Barrier()
        if comm.rank == 0:
            kv.elastic.centre([0], [centre])
        weights = comm.gather(x.asnumpy().tolist())
        if comm.rank == 0:
            print("EXCHANGE " + json.dumps({"round": round_, "group": group, "weights": weights,
                                            "centre": centre.asnumpy().tolist()}), flush=True)
kv.close()
