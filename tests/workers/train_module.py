"""Trains a small symbolic conv net with Module.fit(kvstore='hybrid') for one epoch of
STEPS batches, then writes the weights to OUT/rank<r>.npz (different seed per rank).
--reference N: one process, batches that are the union of N ranks' batches.
--kvstore dist_sync: MXNet's own store (run as a worker of a ps-lite job).
--averaging-checks (modes easgd/lasgd): after training, mxkv_hybrid.consensus(module),
then the optimizer states (and the averaging state beside them) are saved, the step
counter is zeroed and the states are loaded back; prints the counter then."""

import argparse
import os

import mxnet as mx
import numpy as np

from common import (
    BATCH,
    CLASSES,
    LEARNING_RATE,
    MOMENTUM,
    STEPS,
    averaging_rounds,
    overlapped_buckets,
    rank_batch,
    staged_bytes,
    union_batch,
)

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--devices", type=int, default=1)
parser.add_argument("--context", choices=["cpu", "cpu_pinned"], default="cpu")
parser.add_argument("--reference", type=int, default=0, help="number of ranks to emulate")
parser.add_argument("--averaging-checks", action="store_true")
parser.add_argument("--kvstore", choices=["hybrid", "dist_sync"], default="hybrid")
args = parser.parse_args()

store = None if args.reference else mx.kv.create(args.kvstore)
rank = store.rank if store is not None else 0
batches = [
    union_batch(args.reference, s) if args.reference else rank_batch(rank, s) for s in range(STEPS)
]
x = np.concatenate([b[0] for b in batches])
y = np.concatenate([b[1] for b in batches])
batch_size = BATCH * (args.reference or 1)
data = mx.io.NDArrayIter(x, y, batch_size=batch_size, shuffle=False, label_name="softmax_label")

net = mx.sym.Variable("data")
net = mx.sym.Activation(mx.sym.Convolution(net, num_filter=6, kernel=(3, 3), name="conv1"), "relu")
net = mx.sym.Activation(mx.sym.FullyConnected(net, num_hidden=16, name="fc1"), "relu")
net = mx.sym.SoftmaxOutput(
    mx.sym.FullyConnected(net, num_hidden=CLASSES, name="fc2"), name="softmax"
)

mx.random.seed(rank)
module = mx.mod.Module(net, context=[getattr(mx, args.context)(i) for i in range(args.devices)])
module.fit(
    data,
    num_epoch=1,
    kvstore=None if args.reference else "hybrid" if args.kvstore == "hybrid" else store,
    optimizer="sgd",
    optimizer_params={"learning_rate": LEARNING_RATE, "momentum": MOMENTUM},
    initializer=mx.init.Xavier(magnitude=2.0),
)
os.makedirs(args.out, exist_ok=True)
if args.averaging_checks:
    import mxkv_hybrid

    mxkv_hybrid.consensus(module)
    states = os.path.join(args.out, f"rank{rank}.states")
    module.save_optimizer_states(states)
    module._kvstore.averaging.steps = 0
    module.load_optimizer_states(states)
    print(f"rank {rank}: averaging steps after load={module._kvstore.averaging.steps}")
arg_params, _ = module.get_params()
np.savez(
    os.path.join(args.out, f"rank{rank}.npz"), **{k: v.asnumpy() for k, v in arg_params.items()}
)
print(
    f"rank {rank}: kvstore={module._kvstore.type if module._kvstore else None}",
    f"update_on_kvstore={module._update_on_kvstore}",
    f"overlapped_buckets={overlapped_buckets(module._kvstore)}",
    f"averaging_rounds={averaging_rounds(module._kvstore)}",
    f"staged_bytes={staged_bytes()}",
)
