"""Known gradients through the Gluon Trainer in an averaging mode (easgd or lasgd):
rank r's loss is 0.5 |w - target(r)|^2, so its gradient is w - target(r). Rank 0 prints
every rank's weights (and, in mode easgd, the centre) after every step, as JSON, for the
test to compare with the formulas. Optionally saves a checkpoint after step K and stops,
or resumes from one; writes the final weights to OUT/rank<r>.npz.
With --consensus, the ranks then agree on one model (mxkv_hybrid.consensus), which
rank 0 prints as CONSENSUS.
argv: OUT STEPS OPTIMIZER(sgd|nag) [--save K DIR | --resume DIR] [--consensus] [--offset D]
({rank} in DIR: a checkpoint directory per rank, as on disks local to each host)."""

import argparse
import json
import os

import mxnet as mx
import numpy as np
from mpi4py import MPI
from mxnet import autograd, gluon

import mxkv_hybrid

START = [2.0, -1.0, 0.5]
LEARNING_RATE, MOMENTUM = 0.1, 0.5


def target(rank: int, offset: float = 0.0) -> mx.nd.NDArray:
    return mx.nd.array([rank + 1.0, -2.0 * rank, 0.5 * rank]) + offset


class Point(gluon.Block):
    """One parameter w; forward gives 0.5 |w - target|^2."""

    def __init__(self, offset: float = 0.0):
        super().__init__()
        self.w = self.params.get(
            "w", shape=(3,), init=mx.init.Constant(mx.nd.array(START) + offset)
        )

    def forward(self, goal):
        return 0.5 * ((self.w.data() - goal) ** 2).sum()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("steps", type=int)
    parser.add_argument("optimizer", choices=["sgd", "nag"])
    parser.add_argument("--save", nargs=2, metavar=("K", "DIR"))
    parser.add_argument("--resume", metavar="DIR")
    parser.add_argument("--consensus", action="store_true")
    parser.add_argument(
        "--offset", type=float, default=0.0, help="moves the start and every target by this much"
    )
    args = parser.parse_args()

    comm = MPI.COMM_WORLD
    kv = mx.kv.create("hybrid")
    net = Point(args.offset)
    net.initialize()
    trainer = gluon.Trainer(
        net.collect_params(),
        args.optimizer,
        {"learning_rate": LEARNING_RATE, "momentum": MOMENTUM},
        kvstore=kv,
    )
    first = 0
    if args.resume:
        mxkv_hybrid.checkpoint.load(args.resume.format(rank=comm.rank), net, trainer)
        first = kv.averaging.steps
    centre = mx.nd.zeros((3,))
    stop = int(args.save[0]) if args.save else args.steps
    for step in range(first, stop):
        with autograd.record():
            loss = net(target(comm.rank, args.offset))
        loss.backward()
        trainer.step(1)
        record = {"step": step + 1, "weights": comm.gather(net.w.data().asnumpy().tolist())}
        if kv.config.mode == "easgd" and comm.rank == 0:
            kv.averaging.centre([0], [centre])
            record["centre"] = centre.asnumpy().tolist()
        if comm.rank == 0:
            print("STEP " + json.dumps(record), flush=True)
    if args.save:
        mxkv_hybrid.checkpoint.save(args.save[1].format(rank=comm.rank), net, trainer)
    if args.consensus:
        mxkv_hybrid.consensus(trainer)
        everyone = comm.gather(net.w.data().asnumpy().tolist())
        if comm.rank == 0:
            print("CONSENSUS " + json.dumps(everyone), flush=True)
    os.makedirs(args.out, exist_ok=True)
    np.savez(
        os.path.join(args.out, f"rank{comm.rank}.npz"),
        w=net.w.data().asnumpy(),
        rounds=kv.averaging.rounds,
    )
    kv.close()


if __name__ == "__main__":
    main()
