"""A Gluon client made of what gluoncv's training scripts use, with no mention of
mxkv_hybrid: a gluoncv model-zoo network, gluoncv's LR scheduler (warm-up then cosine,
handed to the optimizer with no learning_rate, as gluoncv does), `mx.kv.create(
args.kv_store)` passed to the Trainer, several contexts per process (split_and_load),
`--update-on-kvstore` as the user gives it, and RecordIO shards num_parts=kv.num_workers,
part_index=kv.rank. Prints, per epoch, the validation accuracy and a digest of the
trained weights."""

import argparse
import hashlib
import os

import mxnet as mx
from gluoncv.model_zoo import get_model
from gluoncv.utils import LRScheduler, LRSequential
from mxnet import autograd, gluon

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--data-dir", required=True, help="train.rec and val.rec")
parser.add_argument("--kv-store", default="device")
parser.add_argument("--model", default="cifar_resnet20_v1")
parser.add_argument("--classes", type=int, default=10)
parser.add_argument("--contexts", type=int, default=2, help="CPU contexts per process")
parser.add_argument("--batch-size", type=int, default=32, help="per process")
parser.add_argument("--num-epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--warmup-epochs", type=int, default=1)
parser.add_argument(
    "--update-on-kvstore", choices=["unset", "0", "1"], default="unset", help="the Trainer's"
)
args = parser.parse_args()

kv = mx.kv.create(args.kv_store)
contexts = [mx.cpu(i) for i in range(args.contexts)]


def records(split: str, shuffle: bool) -> mx.io.ImageRecordIter:
    return mx.io.ImageRecordIter(
        path_imgrec=os.path.join(args.data_dir, f"{split}.rec"),
        data_shape=(3, 32, 32),
        batch_size=args.batch_size,
        shuffle=shuffle,
        rand_mirror=shuffle,
        scale=1 / 255.0,
        preprocess_threads=1,
        num_parts=kv.num_workers,
        part_index=kv.rank,
        round_batch=shuffle,
    )


train_data, val_data = records("train", True), records("val", False)
steps_per_epoch = sum(1 for _ in train_data)
scheduler = LRSequential(
    [
        LRScheduler(
            "linear",
            base_lr=0,
            target_lr=args.lr,
            nepochs=args.warmup_epochs,
            iters_per_epoch=steps_per_epoch,
        ),
        LRScheduler(
            "cosine",
            base_lr=args.lr,
            target_lr=0,
            nepochs=args.num_epochs - args.warmup_epochs,
            iters_per_epoch=steps_per_epoch,
        ),
    ]
)
net = get_model(args.model, classes=args.classes)
net.initialize(mx.init.Xavier(magnitude=2), ctx=contexts)
net(mx.nd.zeros((1, 3, 32, 32), ctx=contexts[0]))  # the shapes, before the Trainer
update_on_kvstore = None if args.update_on_kvstore == "unset" else args.update_on_kvstore == "1"
trainer = gluon.Trainer(
    net.collect_params(),
    "nag",
    {"lr_scheduler": scheduler, "momentum": 0.9, "wd": 1e-4},
    kvstore=kv,
    update_on_kvstore=update_on_kvstore,
)
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()


def validation_accuracy() -> float:
    metric = mx.metric.Accuracy()
    val_data.reset()
    for batch in val_data:
        images = gluon.utils.split_and_load(batch.data[0], contexts, even_split=False)
        labels = gluon.utils.split_and_load(batch.label[0], contexts, even_split=False)
        metric.update(labels, [net(x) for x in images])
    return metric.get()[1]


def weights_digest() -> str:
    digest = hashlib.sha256()
    for _, param in sorted(net.collect_params().items()):
        if param.grad_req != "null":
            digest.update(param.data(contexts[0]).asnumpy().tobytes())
    return digest.hexdigest()[:16]


for epoch in range(args.num_epochs):
    train_data.reset()
    for batch in train_data:
        images = gluon.utils.split_and_load(batch.data[0], contexts)
        labels = gluon.utils.split_and_load(batch.label[0], contexts)
        with autograd.record():
            losses = [loss_fn(net(x), y) for x, y in zip(images, labels)]
        autograd.backward(losses)
        trainer.step(args.batch_size)
    print(
        f"[client] epoch={epoch} update_on_kvstore={trainer._update_on_kvstore} "
        f"validation-accuracy={validation_accuracy():.4f} weights={weights_digest()}",
        flush=True,
    )
