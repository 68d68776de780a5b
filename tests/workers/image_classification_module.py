"""A Module-API training script in the shape of MXNet's example/image-classification
(train_imagenet.py + common/fit.py + common/data.py), with no mention of mxkv_hybrid:
`--kv-store` names the store (default 'device'), `--benchmark 1` trains on synthetic
data, the RecordIO readers take the shard num_parts=kv.num_workers, part_index=kv.rank,
Speedometer logs throughput, every rank checkpoints with do_checkpoint, and `--gc-type
2bit` sets MXNet's gradient compression as fit.py does."""

import argparse
import logging

import mxnet as mx
import numpy as np


class SyntheticDataIter(mx.io.DataIter):
    """common/fit.py's benchmark data: one random batch, served max_iter times an epoch."""

    def __init__(self, num_classes, data_shape, max_iter):
        super().__init__(data_shape[0])
        self.cur_iter = 0
        self.max_iter = max_iter
        label = np.random.randint(0, num_classes, [data_shape[0]])
        self.data = mx.nd.array(np.random.uniform(-1, 1, data_shape))
        self.label = mx.nd.array(label)

    @property
    def provide_data(self):
        return [mx.io.DataDesc("data", self.data.shape, np.float32)]

    @property
    def provide_label(self):
        return [mx.io.DataDesc("softmax_label", (self.batch_size,), np.float32)]

    def next(self):
        self.cur_iter += 1
        if self.cur_iter > self.max_iter:
            raise StopIteration
        return mx.io.DataBatch(data=(self.data,), label=(self.label,), pad=0)

    def reset(self):
        self.cur_iter = 0


def get_rec_iter(args, kv):
    image_shape = tuple(int(i) for i in args.image_shape.split(","))
    if args.benchmark:
        shape = (args.batch_size,) + image_shape
        steps = args.num_examples // args.batch_size // kv.num_workers
        return SyntheticDataIter(args.num_classes, shape, steps), None
    train = mx.io.ImageRecordIter(
        path_imgrec=args.data_train,
        label_width=1,
        data_name="data",
        label_name="softmax_label",
        data_shape=image_shape,
        batch_size=args.batch_size,
        rand_mirror=True,
        shuffle=True,
        scale=1 / 255.0,
        preprocess_threads=1,
        num_parts=kv.num_workers,
        part_index=kv.rank,
    )
    val = mx.io.ImageRecordIter(
        path_imgrec=args.data_val,
        label_width=1,
        data_name="data",
        label_name="softmax_label",
        data_shape=image_shape,
        batch_size=args.batch_size,
        round_batch=False,
        scale=1 / 255.0,
        preprocess_threads=1,
        num_parts=kv.num_workers,
        part_index=kv.rank,
    )
    return train, val


def get_symbol(num_classes):
    net = mx.sym.Variable("data")
    for index, filters in enumerate((16, 32)):
        net = mx.sym.Convolution(
            net, num_filter=filters, kernel=(3, 3), pad=(1, 1), name=f"conv{index}"
        )
        net = mx.sym.BatchNorm(net, name=f"bn{index}")
        net = mx.sym.Activation(net, act_type="relu")
        net = mx.sym.Pooling(net, kernel=(2, 2), stride=(2, 2), pool_type="max")
    net = mx.sym.Pooling(net, global_pool=True, kernel=(1, 1), pool_type="avg")
    net = mx.sym.FullyConnected(mx.sym.flatten(net), num_hidden=num_classes, name="fc")
    return mx.sym.SoftmaxOutput(net, name="softmax")


def fit(args, network, data_loader):
    kv = mx.kvstore.create(args.kv_store)
    if args.gc_type != "none":  # common/fit.py's gradient compression
        kv.set_gradient_compression({"type": args.gc_type, "threshold": args.gc_threshold})
    logging.basicConfig(level=logging.DEBUG, format=f"%(asctime)-15s Node[{kv.rank}] %(message)s")
    logging.info("start with arguments %s", args)  # noqa: LOG015  (as MXNet's common/fit.py)
    train, val = data_loader(args, kv)
    epoch_size = max(args.num_examples // args.batch_size // kv.num_workers, 1)
    steps = [epoch_size * int(e) for e in args.lr_step_epochs.split(",")]
    lr_scheduler = mx.lr_scheduler.MultiFactorScheduler(step=steps, factor=0.1)
    checkpoint = mx.callback.do_checkpoint(
        args.model_prefix if kv.rank == 0 else f"{args.model_prefix}-{kv.rank}"
    )
    model = mx.mod.Module(context=[mx.cpu()], symbol=network)
    model.fit(
        train,
        begin_epoch=0,
        num_epoch=args.num_epochs,
        eval_data=val,
        eval_metric=["accuracy"],
        kvstore=kv,
        optimizer="sgd",
        optimizer_params={
            "learning_rate": args.lr,
            "momentum": 0.9,
            "wd": 1e-4,
            "lr_scheduler": lr_scheduler,
        },
        initializer=mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2),
        batch_end_callback=[mx.callback.Speedometer(args.batch_size, args.disp_batches)],
        epoch_end_callback=checkpoint,
        allow_missing=True,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="train an image classifier on ImageNet")
    parser.add_argument("--data-train", type=str)
    parser.add_argument("--data-val", type=str)
    parser.add_argument("--image-shape", type=str, default="3,32,32")
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--num-examples", type=int, default=640)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--num-epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--lr-step-epochs", type=str, default="2")
    parser.add_argument("--kv-store", type=str, default="device")
    parser.add_argument("--benchmark", type=int, default=0)
    parser.add_argument("--model-prefix", type=str, required=True)
    parser.add_argument("--disp-batches", type=int, default=5)
    parser.add_argument("--gc-type", type=str, default="none")
    parser.add_argument("--gc-threshold", type=float, default=0.5)
    args = parser.parse_args()
    fit(args, get_symbol(args.num_classes), get_rec_iter)
