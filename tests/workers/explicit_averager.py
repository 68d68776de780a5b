"""mxkv_hybrid.PeriodicModelAverager with a local Trainer (kvstore=None): known
gradients as in averaging_steps.py, a different start on every rank until
broadcast_parameters. Rank 0 prints every rank's weights after every step (STEP) and
after consensus (CONSENSUS). argv: STEPS PERIOD OVERLAP(0|1)"""

import json
import sys

from mpi4py import MPI
from mxnet import autograd, gluon

import mxkv_hybrid

from averaging_steps import LEARNING_RATE, MOMENTUM, Point, target

steps, period, overlap = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
comm = MPI.COMM_WORLD
net = Point()
net.initialize()
net.w.set_data(net.w.data() * (comm.rank + 1))  # differs until the broadcast
mxkv_hybrid.broadcast_parameters(net.collect_params())
trainer = gluon.Trainer(
    net.collect_params(),
    "sgd",
    {"learning_rate": LEARNING_RATE, "momentum": MOMENTUM},
    kvstore=None,
)
averager = mxkv_hybrid.PeriodicModelAverager(period=period, overlap=overlap)
for _ in range(steps):
    with autograd.record():
        loss = net(target(comm.rank))
    loss.backward()
    trainer.step(1)
    averager.average_parameters(net.collect_params())
    record = {"step": averager.step, "weights": comm.gather(net.w.data().asnumpy().tolist())}
    if comm.rank == 0:
        print("STEP " + json.dumps(record), flush=True)
averager.consensus(net.collect_params())
everyone = comm.gather(net.w.data().asnumpy().tolist())
if comm.rank == 0:
    print("CONSENSUS " + json.dumps(everyone), flush=True)
    print(f"averagings {averager.averagings}", flush=True)
