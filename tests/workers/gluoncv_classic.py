"""A Gluon training script in the shape of gluoncv's classic
scripts/classification/imagenet/train_imagenet.py, with no kvstore flag and no mention of
mxkv_hybrid: `gluon.Trainer(params, optimizer, optimizer_params)` (the default store),
whole data sets (ImageRecordIter(shuffle=True) with --use-rec, else
DataLoader(shuffle=True, last_batch='discard')), validation on unshuffled readers.
Prints, per epoch, the batches it trained on, the validation accuracy and a digest
of the trained weights."""

import argparse
import hashlib
import os

import mxnet as mx
from mxnet import autograd, gluon
from mxnet.gluon.data.vision import transforms

parser = argparse.ArgumentParser(description="Train a model for image classification.")
parser.add_argument("--data-dir", type=str, required=True)
parser.add_argument("--use-rec", action="store_true")
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--input-size", type=int, default=32)
parser.add_argument("--num-epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--classes", type=int, default=10)
parser.add_argument(
    "--lr-mode",
    choices=["constant", "cosine"],
    default="constant",
    help="cosine: as gluoncv, the optimizer gets a scheduler and no learning_rate",
)
parser.add_argument(
    "--save-dir", help="as gluoncv: parameters and trainer states whenever validation improves"
)
opt = parser.parse_args()


def get_data_rec(batch_size):
    shape = (3, opt.input_size, opt.input_size)
    train_data = mx.io.ImageRecordIter(
        path_imgrec=os.path.join(opt.data_dir, "train.rec"),
        path_imgidx=os.path.join(opt.data_dir, "train.idx"),
        preprocess_threads=1,
        shuffle=True,
        batch_size=batch_size,
        data_shape=shape,
        rand_mirror=True,
        scale=1 / 255.0,
    )
    val_data = mx.io.ImageRecordIter(
        path_imgrec=os.path.join(opt.data_dir, "val.rec"),
        path_imgidx=os.path.join(opt.data_dir, "val.idx"),
        preprocess_threads=1,
        shuffle=False,
        batch_size=batch_size,
        data_shape=shape,
        round_batch=False,
        scale=1 / 255.0,
    )

    def batch_fn(batch):  # gluoncv: split_and_load onto the contexts (from cpu_pinned)
        data = gluon.utils.split_and_load(batch.data[0], ctx_list=[mx.cpu()], batch_axis=0)
        label = gluon.utils.split_and_load(batch.label[0], ctx_list=[mx.cpu()], batch_axis=0)
        return data[0], label[0]

    return train_data, val_data, batch_fn


def get_data_loader(batch_size):
    transform_train = transforms.Compose([transforms.RandomFlipLeftRight(), transforms.ToTensor()])
    transform_test = transforms.ToTensor()
    train = gluon.data.vision.ImageFolderDataset(os.path.join(opt.data_dir, "train"))
    val = gluon.data.vision.ImageFolderDataset(os.path.join(opt.data_dir, "val"))
    train_data = gluon.data.DataLoader(
        train.transform_first(transform_train),
        batch_size=batch_size,
        shuffle=True,
        last_batch="discard",
    )
    val_data = gluon.data.DataLoader(
        val.transform_first(transform_test), batch_size=batch_size, shuffle=False
    )

    def batch_fn(batch):
        return batch[0], batch[1]

    return train_data, val_data, batch_fn


def small_convnet(classes):
    net = gluon.nn.HybridSequential()
    for filters in (16, 32):
        net.add(
            gluon.nn.Conv2D(filters, 3, padding=1),
            gluon.nn.BatchNorm(),
            gluon.nn.Activation("relu"),
            gluon.nn.MaxPool2D(2),
        )
    net.add(gluon.nn.GlobalAvgPool2D(), gluon.nn.Dense(classes))
    return net


def weights_digest(net):
    digest = hashlib.sha1()
    for _name, param in sorted(net.collect_params().items()):
        if param.grad_req != "null":  # BatchNorm running statistics stay per rank
            digest.update(param.data().asnumpy().tobytes())
    return digest.hexdigest()[:16]


def test(net, val_data, batch_fn):
    metric = mx.metric.Accuracy()
    if opt.use_rec:
        val_data.reset()
    for batch in val_data:
        data, label = batch_fn(batch)
        metric.update([label], [net(data)])
    return metric.get()[1]


def train():
    net = small_convnet(opt.classes)
    net.initialize(mx.init.MSRAPrelu())
    net.hybridize()
    train_data, val_data, batch_fn = (get_data_rec if opt.use_rec else get_data_loader)(
        opt.batch_size
    )
    settings = {"momentum": 0.9, "wd": 1e-4}
    if opt.lr_mode == "cosine":  # gluoncv: 'lr_scheduler': LRSequential([...]), no learning_rate
        steps = opt.num_epochs * 640 // opt.batch_size
        settings["lr_scheduler"] = mx.lr_scheduler.CosineScheduler(steps, base_lr=opt.lr)
    else:
        settings["learning_rate"] = opt.lr
    trainer = gluon.Trainer(net.collect_params(), "nag", settings)
    best = 0.0
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for epoch in range(opt.num_epochs):
        if opt.use_rec:
            train_data.reset()
        batches = 0
        for batch in train_data:
            data, label = batch_fn(batch)
            with autograd.record():
                loss = loss_fn(net(data), label)
            loss.backward()
            trainer.step(opt.batch_size)
            batches += 1
        accuracy = test(net, val_data, batch_fn)
        if opt.save_dir and accuracy > best:  # gluoncv saves the best on every rank
            best = accuracy
            net.save_parameters(os.path.join(opt.save_dir, f"{accuracy:.4f}-best.params"))
            trainer.save_states(os.path.join(opt.save_dir, f"{accuracy:.4f}-best.states"))
        print(
            f"[Epoch {epoch}] batches={batches} validation-accuracy={accuracy:.4f} "
            f"weights={weights_digest(net)}"
        )


if __name__ == "__main__":
    train()
