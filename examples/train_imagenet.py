"""Trains an ImageNet classifier data-parallel, in the shape MXNet users know (Gluon, a
model zoo network, RecordIO or an image folder, --kv-store), with any kvstore:

    mxkv-launch -n 4 -- python examples/train_imagenet.py --data-dir DATA --kv-store hybrid
    python examples/train_imagenet.py --data-dir DATA --kv-store local      # one process

DATA holds train.rec/.idx and val.rec/.idx (im2rec's output), or train/ and val/
folders of class folders (--data-format picks; default: RecordIO when train.rec is
there). `python examples/make_tiny_imagenet.py --out DATA` generates a small one.

- Each rank reads its own shard (ImageRecordIter num_parts/part_index; a sampler over
  the folder data set), and every rank runs the same number of steps per epoch
  (floor(images / (ranks x batch))): ranks never wait for a rank with an extra batch.
- The learning rate is --lr per 256 images, scaled by the global batch (batch per
  device x devices x ranks / 256), with --warmup-epochs of linear warm-up, then a
  cosine or step schedule.
- Optional label smoothing and mixup. Top-1/top-5 validation on every rank's shard,
  combined through the store.
- A checkpoint every epoch in --save-dir (mxkv_hybrid.checkpoint: every rank's weights
  and optimizer state, and the averaging state in modes easgd/lasgd); --auto-resume keeps
  one, replaced every epoch, and starts from it (mxkv-launch --restarts); --resume-epoch N
  continues from epoch N's.
- Models: MXNet's model zoo (resnet18_v1, resnet50_v1, mobilenet1.0, mobilenetv2_1.0,
  ...), or gluoncv's (resnet50_v1b, ...) when gluoncv is installed (pip install -e
  '.[cpu,imagenet]'). CPU by default; --gpus for GPUs: `mxkv-launch -n 8 -- python
  train_imagenet.py --gpus 0 ...` gives each of 8 ranks on a host its own GPU (its local
  rank's), `mxkv-launch -n 1 -- ... --gpus 0,1,2,3` drives four GPUs from one rank.
"""

import argparse
import os
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from mxnet.gluon.data.vision import transforms

import mxkv_hybrid
from mxkv_hybrid.capabilities import CAPABILITIES

from replica_check import replica_scope, replicas_identical

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # ImageNet RGB, in [0, 1]
VALIDATION_KEY = 10**6  # an int key like the Trainer's (a dist store takes one key type)


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    data = parser.add_argument_group("data")
    data.add_argument("--data-dir", required=True)
    data.add_argument("--data-format", choices=["auto", "rec", "folder"], default="auto")
    data.add_argument("--image-size", type=int, default=224)
    data.add_argument(
        "--num-classes",
        type=int,
        default=0,
        help="default: the class folders, or the labels of train.lst",
    )
    data.add_argument("--data-workers", type=int, default=2, help="decoding threads/processes")
    training = parser.add_argument_group("training")
    training.add_argument("--model", default="resnet18_v1")
    training.add_argument("--kv-store", default="hybrid")
    training.add_argument(
        "--gpus",
        default="",
        help="GPU ids of every rank on a host, e.g. 0,1,2,3: each rank "
        "takes its share (4 ranks: one each; 1 rank: all four); one id "
        "with several ranks: each its own from it (default: CPU)",
    )
    training.add_argument("--batch-size", type=int, default=32, help="images per device and step")
    training.add_argument("--num-epochs", type=int, default=90)
    training.add_argument("--lr", type=float, default=0.1, help="learning rate per 256 images")
    training.add_argument("--lr-mode", choices=["cosine", "step"], default="cosine")
    training.add_argument("--lr-steps", default="30,60,80", help="epochs (step mode)")
    training.add_argument("--lr-factor", type=float, default=0.1)
    training.add_argument("--warmup-epochs", type=float, default=5)
    training.add_argument("--momentum", type=float, default=0.9)
    training.add_argument("--wd", type=float, default=1e-4)
    training.add_argument("--label-smoothing", type=float, default=0.0)
    training.add_argument("--mixup", type=float, default=0.0, help="mixup alpha (0: off)")
    training.add_argument("--seed", type=int, default=0)
    saving = parser.add_argument_group("checkpoints and output")
    saving.add_argument("--save-dir", default="", help="a checkpoint per epoch (default: none)")
    saving.add_argument("--resume-epoch", type=int, default=0)
    saving.add_argument(
        "--auto-resume",
        action="store_true",
        help="keep one checkpoint, --save-dir/latest, replaced every epoch, "
        "and start from it when it exists: a job that mxkv-launch "
        "--restarts started again goes on by itself",
    )
    saving.add_argument("--log-interval", type=int, default=20, help="steps between lines")
    args = parser.parse_args()
    if (args.resume_epoch or args.auto_resume) and not args.save_dir:
        parser.error("--resume-epoch and --auto-resume need --save-dir")
    if args.resume_epoch and args.auto_resume:
        parser.error("--resume-epoch and --auto-resume exclude each other")
    mode = os.environ.get("MXKV_MODE", "")
    if args.save_dir and mode in CAPABILITIES and not CAPABILITIES[mode].checkpoints:
        parser.error(
            f"MXKV_MODE={mode} keeps the optimizer state on the parameter servers, "
            "which cannot be saved: drop --save-dir or use another mode"
        )
    return args


# ---- data -----------------------------------------------------------------------------
def data_format(args) -> str:
    if args.data_format != "auto":
        return args.data_format
    return "rec" if os.path.exists(os.path.join(args.data_dir, "train.rec")) else "folder"


def count_classes(args, fmt: str) -> int:
    if args.num_classes:
        return args.num_classes
    if fmt == "folder":
        folder = gluon.data.vision.ImageFolderDataset(os.path.join(args.data_dir, "train"))
        return len(folder.synsets)
    listing = os.path.join(args.data_dir, "train.lst")
    if not os.path.exists(listing):
        raise SystemExit(f"{listing} is missing: pass --num-classes")
    with open(listing) as f:
        return int(max(float(line.split("\t")[1]) for line in f)) + 1


def count_records(index_path: str) -> int:
    with open(index_path) as f:
        return sum(1 for _ in f)


class RecordData:
    """ImageRecordIter shards (num_parts = ranks), the same number of steps on every rank."""

    def __init__(self, args, split: str, batch: int, kv, steps: int = 0):
        size = args.image_size
        self.train = split == "train"
        self.settings = dict(
            path_imgrec=os.path.join(args.data_dir, f"{split}.rec"),
            path_imgidx=os.path.join(args.data_dir, f"{split}.idx"),
            data_shape=(3, size, size),
            batch_size=batch,
            resize=int(size / 0.875),
            shuffle=self.train,
            rand_crop=self.train,
            rand_mirror=self.train,
            round_batch=True,  # with False the last batch's padding is not reported
            mean_r=255 * MEAN[0],
            mean_g=255 * MEAN[1],
            mean_b=255 * MEAN[2],
            std_r=255 * STD[0],
            std_g=255 * STD[1],
            std_b=255 * STD[2],
            num_parts=kv.num_workers,
            part_index=kv.rank,
            seed=args.seed + kv.rank,
            preprocess_threads=args.data_workers,
        )
        self.records = mx.io.ImageRecordIter(**self.settings) if self.train else None
        self.steps = steps

    def epoch(self, epoch: int):
        """(data, label, valid images) per step. Validation reads from a new iterator each
        time: after a padded last batch, a reset iterator starts past the images it
        borrowed (round_batch), so a reused one would skip some."""
        if self.train:
            self.records.reset()
        records = self.records if self.train else mx.io.ImageRecordIter(**self.settings)
        for step, batch in enumerate(records):
            if self.steps and step == self.steps:
                break
            yield batch.data[0], batch.label[0], batch.data[0].shape[0] - batch.pad


class IndexSampler(gluon.data.Sampler):
    """Yields the given indices in order (this rank's shard)."""

    def __init__(self, indices):
        self._indices = indices

    def __iter__(self):
        return iter(self._indices)

    def __len__(self) -> int:
        return len(self._indices)


class FolderData:
    """An image folder; every rank takes every ranks-th image of a per-epoch permutation."""

    def __init__(self, args, split: str, batch: int, kv, steps: int = 0):
        size, train = args.image_size, split == "train"
        augment = (
            [transforms.RandomResizedCrop(size), transforms.RandomFlipLeftRight()]
            if train
            else [transforms.Resize(int(size / 0.875)), transforms.CenterCrop(size)]
        )
        self.dataset = gluon.data.vision.ImageFolderDataset(
            os.path.join(args.data_dir, split)
        ).transform_first(
            transforms.Compose(augment + [transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
        )
        self.batch, self.steps, self.kv, self.train = batch, steps, kv, train
        self.workers, self.seed = args.data_workers, args.seed

    def epoch(self, epoch: int):
        order = np.arange(len(self.dataset))
        if self.train:
            order = np.random.RandomState(self.seed + epoch).permutation(order)
        mine = order[self.kv.rank :: self.kv.num_workers]
        if self.steps:
            mine = mine[: self.steps * self.batch]
        loader = gluon.data.DataLoader(
            self.dataset,
            batch_size=self.batch,
            sampler=IndexSampler(mine.tolist()),
            last_batch="keep",
            num_workers=self.workers,
        )
        for data, label in loader:
            yield data, label, data.shape[0]


def train_images(args, fmt: str) -> int:
    if fmt == "rec":
        return count_records(os.path.join(args.data_dir, "train.idx"))
    return len(gluon.data.vision.ImageFolderDataset(os.path.join(args.data_dir, "train")))


# ---- model and optimizer ----------------------------------------------------------------
def build_model(name: str, classes: int) -> gluon.HybridBlock:
    try:
        return gluon.model_zoo.vision.get_model(name, classes=classes)
    except ValueError:
        pass
    try:
        from gluoncv.model_zoo import get_model
    except ImportError:
        raise SystemExit(
            f"model {name!r} is not in MXNet's model zoo; for gluoncv's models "
            "install the extra: pip install -e '.[cpu,imagenet]'"
        ) from None
    return get_model(name, classes=classes)


def lr_scheduler(args, base_lr: float, steps_per_epoch: int) -> mx.lr_scheduler.LRScheduler:
    warmup = int(args.warmup_epochs * steps_per_epoch)
    total = args.num_epochs * steps_per_epoch
    if args.lr_mode == "cosine":
        return mx.lr_scheduler.CosineScheduler(
            max_update=max(total, warmup + 1), base_lr=base_lr, final_lr=0, warmup_steps=warmup
        )
    steps = [int(e) * steps_per_epoch for e in args.lr_steps.split(",") if e.strip()]
    steps = [s for s in steps if s > warmup] or [total + 1]
    return mx.lr_scheduler.MultiFactorScheduler(
        step=steps, factor=args.lr_factor, base_lr=base_lr, warmup_steps=warmup
    )


def soft_targets(label: mx.nd.NDArray, classes: int, smoothing: float) -> mx.nd.NDArray:
    on, off = 1 - smoothing + smoothing / classes, smoothing / classes
    return mx.nd.one_hot(label, classes, on_value=on, off_value=off)


# ---- validation -------------------------------------------------------------------------
def validate(net, data, contexts, kv, classes: int):
    """(top-1, top-5, images) over all ranks' validation shards."""
    top1 = mx.metric.Accuracy()
    top5 = (
        mx.metric.TopKAccuracy(top_k=min(5, classes - 1)) if classes > 2 else mx.metric.Accuracy()
    )
    for images, labels, valid in data.epoch(0):
        outputs = net(images[:valid].as_in_context(contexts[0]))
        for metric in (top1, top5):
            metric.update([labels[:valid]], [outputs])
    # the counts summed over ranks: the accuracy over all shards
    counts = mx.nd.array([top1.sum_metric, top5.sum_metric, top1.num_inst], dtype="float64")
    if isinstance(kv, mxkv_hybrid.Hybrid) or "dist" in kv.type:
        kv.pushpull(VALIDATION_KEY, counts)
    right1, right5, seen = counts.asnumpy()
    return right1 / max(seen, 1), right5 / max(seen, 1), round(seen)


# ---- training ---------------------------------------------------------------------------
def main() -> None:
    args = parse_arguments()
    kv = mx.kv.create(args.kv_store)
    say = print if kv.rank == 0 else (lambda *a, **k: None)
    # --gpus lists the GPUs of every rank on a host: a rank takes its share (one per rank:
    # its local rank's; a rank alone on its host: all of them); none listed: the CPU
    contexts = [mx.gpu(i) for i in mxkv_hybrid.rank_gpus(args.gpus)] or [mx.cpu()]
    fmt = data_format(args)
    classes = count_classes(args, fmt)
    rank_batch = args.batch_size * len(contexts)
    steps = train_images(args, fmt) // (kv.num_workers * rank_batch)
    if steps == 0:
        raise SystemExit(
            f"fewer training images than one step of {kv.num_workers} ranks x "
            f"{rank_batch}: lower --batch-size"
        )
    Data = RecordData if fmt == "rec" else FolderData
    train_data = Data(args, "train", rank_batch, kv, steps)
    val_data = Data(args, "val", rank_batch, kv)

    global_batch = rank_batch * kv.num_workers
    base_lr = args.lr * global_batch / 256
    mx.random.seed(args.seed)
    net = build_model(args.model, classes)
    net.initialize(mx.init.MSRAPrelu(), ctx=contexts)
    net(mx.nd.zeros((1, 3, args.image_size, args.image_size), ctx=contexts[0]))  # shapes
    net.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(
        net.collect_params(),
        "nag",
        {
            "learning_rate": base_lr,
            "momentum": args.momentum,
            "wd": args.wd,
            "lr_scheduler": lr_scheduler(args, base_lr, steps),
        },
        kvstore=kv,
    )
    dense_labels = args.label_smoothing > 0 or args.mixup > 0
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss(sparse_label=not dense_labels)
    mode = f", MXKV_MODE={kv.config.mode}" if isinstance(kv, mxkv_hybrid.Hybrid) else ""
    say(
        f"{args.model}, {classes} classes, {fmt} data, {kv.num_workers} rank(s) x "
        f"{len(contexts)} device(s) ({kv.type}{mode}); {steps} steps/epoch of {global_batch} "
        f"images; lr {base_lr:g} (= {args.lr:g} x {global_batch}/256), {args.lr_mode}, "
        f"{args.warmup_epochs:g} warm-up epochs",
        flush=True,
    )

    first = 1
    if args.auto_resume:
        progress = mxkv_hybrid.checkpoint.load_latest(
            os.path.join(args.save_dir, "latest"), net, trainer
        )
        if progress:
            first = progress["epoch"] + 1
            say(f"resumed from the latest checkpoint, after epoch {progress['epoch']}", flush=True)
    elif args.resume_epoch:
        mxkv_hybrid.checkpoint.load(
            os.path.join(args.save_dir, f"epoch{args.resume_epoch:04d}"), net, trainer
        )
        first = args.resume_epoch + 1
        top1, top5, _ = validate(net, val_data, contexts, kv, classes)
        say(
            f"resumed from epoch {args.resume_epoch}: validation top-1 {top1:.4f} "
            f"top-5 {top5:.4f} (rank 0's model)",
            flush=True,
        )
    mix = np.random.RandomState(args.seed + kv.rank)
    for epoch in range(first, args.num_epochs + 1):
        started = tick = time.time()
        loss_sum, images_done = 0.0, 0
        for step, (images, labels, _) in enumerate(train_data.epoch(epoch), start=1):
            targets = (
                soft_targets(labels, classes, args.label_smoothing) if dense_labels else labels
            )
            if args.mixup > 0:
                lam = mix.beta(args.mixup, args.mixup)
                images = lam * images + (1 - lam) * images[::-1]
                targets = lam * targets + (1 - lam) * targets[::-1]
            xs = gluon.utils.split_and_load(images, contexts)
            ys = gluon.utils.split_and_load(targets, contexts)
            with autograd.record():
                losses = [loss_fn(net(x), y) for x, y in zip(xs, ys)]
            autograd.backward(losses)
            trainer.step(rank_batch)
            loss_sum += sum(float(loss.sum().asscalar()) for loss in losses)
            images_done += rank_batch
            if step % args.log_interval == 0 or step == steps:
                now = time.time()
                rate = global_batch * (step % args.log_interval or args.log_interval) / (now - tick)
                say(
                    f"epoch {epoch} step {step}/{steps}  loss {loss_sum / images_done:.4f}  "
                    f"lr {trainer.learning_rate:.5f}  {rate:.1f} images/s",
                    flush=True,
                )
                tick = now
        top1, top5, _ = validate(net, val_data, contexts, kv, classes)
        say(
            f"epoch {epoch} done in {time.time() - started:.1f} s: validation top-1 {top1:.4f} "
            f"top-5 {top5:.4f} (rank 0's model)",
            flush=True,
        )
        if args.auto_resume:
            mxkv_hybrid.checkpoint.save(
                os.path.join(args.save_dir, "latest"), net, trainer, progress={"epoch": epoch}
            )
        elif args.save_dir:
            mxkv_hybrid.checkpoint.save(
                os.path.join(args.save_dir, f"epoch{epoch:04d}"), net, trainer
            )

    if isinstance(kv, mxkv_hybrid.Hybrid):
        mxkv_hybrid.consensus(trainer)
    top1, top5, images = validate(net, val_data, contexts, kv, classes)
    identical = replicas_identical(net)
    say(
        f"final validation top-1 {top1:.4f} top-5 {top5:.4f} on {images} images; weights "
        f"identical on {replica_scope()}: {identical}",
        flush=True,
    )
    if not identical:
        raise SystemExit(
            f"rank {kv.rank}: the weights differ between the ranks ({replica_scope()})"
        )


if __name__ == "__main__":
    main()
