"""The digits CNN of examples/train_digits.py trained by every rank on its shard, each rank
starting from weights of its own (seeded by its rank, so separate group jobs must take
their first weights from the servers), then mxkv_hybrid.consensus. Each rank that gets
to the end writes OUT/rank<r>.npz: its weights after the Trainer's first broadcast
("initial/..."), its final weights ("final/..."), the step it reached, the steps its group
had done before this start (mxkv_hybrid.steps_done: a restarted group skips them), the
steps it trained and the test accuracy. With CHECKPOINT and EVERY it saves a checkpoint
there every EVERY steps (and OUT/rank<r>.step<s>.npz, the weights it saved) and, when one
exists, resumes from it instead ("loaded/...": the weights it loaded). With HOLD_UNTIL
set (a test's gate), every rank waits after its last step until that file exists;
MOMENTUM sets the SGD momentum (0.9 unless set).
argv: OUT EPOCHS LR [CHECKPOINT EVERY]"""

import os
import sys
import time
from pathlib import Path

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import mxkv_hybrid

sys.path.insert(0, str(Path(__file__).parents[2] / "examples"))
from train_digits import accuracy, build_network, load_data

BATCH = 32
out, epochs, lr = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
directory, every = (sys.argv[4], int(sys.argv[5])) if len(sys.argv) > 5 else (None, 0)

os.makedirs(out, exist_ok=True)
kv = mx.kv.create("hybrid")
train_x, train_y, test_x, test_y = load_data(42)
shard_x, shard_y = train_x[kv.rank :: kv.num_workers], train_y[kv.rank :: kv.num_workers]
steps_per_epoch = len(train_x) // kv.num_workers // BATCH

mx.random.seed(kv.rank)
net = build_network()
net.initialize(mx.init.Xavier(magnitude=2.0))
net(mx.nd.array(shard_x[:1]))  # shapes known: the Trainer broadcasts at construction
momentum = float(os.environ.get("MOMENTUM", "0.9"))
trainer = gluon.Trainer(
    net.collect_params(), "sgd", {"learning_rate": lr, "momentum": momentum}, kvstore=kv
)


def weights(prefix):
    return {f"{prefix}/{name}": p.data().asnumpy() for name, p in net.collect_params().items()}


initial = weights("initial")
print(f"rank {kv.rank} of {kv.num_workers} starts", flush=True)
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
done, loaded = mxkv_hybrid.steps_done(trainer), {}
resumed = mxkv_hybrid.checkpoint.load_latest(directory, net, trainer) if directory else None
if resumed is not None:  # a group's own checkpoint wins over the servers' count of its steps
    done, loaded = resumed["step"], weights("loaded")
steps = trained = 0
for epoch in range(epochs):
    order = np.random.RandomState(1000 * epoch + kv.rank).permutation(len(shard_y))
    for step in range(steps_per_epoch):
        steps += 1
        if steps <= done:  # taken before this group was lost
            continue
        batch = order[step * BATCH : (step + 1) * BATCH]
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(shard_x[batch])), mx.nd.array(shard_y[batch]))
        loss.backward()
        trainer.step(len(batch))
        trained += 1
        if every and steps % every == 0:
            mxkv_hybrid.checkpoint.save(directory, net, trainer, progress={"step": steps})
            np.savez(os.path.join(out, f"rank{kv.rank}.step{steps}.npz"), **weights("saved"))

hold = os.environ.get("HOLD_UNTIL")
while hold and not os.path.exists(hold):
    time.sleep(0.1)
mxkv_hybrid.consensus(trainer)
final = weights("final")
found = accuracy(net, test_x, test_y, mx.cpu())
print(f"rank {kv.rank} ran {steps} steps; consensus test accuracy {found:.4f}", flush=True)
np.savez(
    os.path.join(out, f"rank{kv.rank}.npz"),
    steps=steps,
    steps_done=done,
    trained=trained,
    accuracy=found,
    **initial,
    **final,
    **loaded,
)
kv.close()
