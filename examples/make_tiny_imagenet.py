"""Generates a small ImageNet-like data set offline: C classes of RGB JPEG images with
learnable structure, as an image folder (train/<class>/*.jpg, val/<class>/*.jpg, the
layout gluon.data.vision.ImageFolderDataset and MXNet's im2rec read) and as RecordIO
(train.rec/.idx/.lst, val.rec/.idx/.lst, what mx.io.ImageRecordIter reads).

Each class has its own colour, stripe orientation and stripe frequency; every image
draws a random phase, position jitter, brightness and pixel noise, so the classes are
separable but no two images are the same. The records are packed with
mx.recordio (the format im2rec writes: an IRHeader with the label, then the JPEG),
with Pillow encoding the JPEGs, so no OpenCV is needed.

    python examples/make_tiny_imagenet.py --out data/tiny-imagenet [--classes 10] [--size 64]
"""

import argparse
import os
from typing import List, Tuple

import mxnet as mx
import numpy as np
from PIL import Image


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, help="directory to write (created)")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--train-per-class", type=int, default=64)
    parser.add_argument("--val-per-class", type=int, default=16)
    parser.add_argument("--size", type=int, default=64, help="image side in pixels")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.classes < 2 or args.train_per_class < 1 or args.val_per_class < 1 or args.size < 8:
        parser.error("need --classes >= 2, --train/val-per-class >= 1 and --size >= 8")
    return args


def class_styles(classes: int, rng: np.random.RandomState) -> List[Tuple[np.ndarray, float, float]]:
    """(RGB colour in [0, 1], stripe angle, stripe frequency) of every class."""
    angles = np.linspace(0, np.pi, classes, endpoint=False)
    frequencies = 2 + 4 * rng.rand(classes)
    colours = rng.rand(classes, 3) * 0.7 + 0.15
    return [(colours[c], angles[(3 * c) % classes], frequencies[c]) for c in range(classes)]


def draw(
    style: Tuple[np.ndarray, float, float], size: int, rng: np.random.RandomState
) -> np.ndarray:
    """One size x size x 3 uint8 image of a class."""
    colour, angle, frequency = style
    ys, xs = np.mgrid[0:size, 0:size] / size
    shift = rng.uniform(-0.1, 0.1, 2)
    along = (xs + shift[0]) * np.cos(angle) + (ys + shift[1]) * np.sin(angle)
    stripes = 0.5 + 0.5 * np.sin(2 * np.pi * frequency * along + rng.uniform(0, 2 * np.pi))
    brightness = rng.uniform(0.7, 1.1)
    image = brightness * stripes[..., None] * colour[None, None, :]
    image += rng.normal(0, 0.08, image.shape)
    return (np.clip(image, 0, 1) * 255).astype(np.uint8)


def write_split(
    root: str, split: str, per_class: int, styles, size: int, rng: np.random.RandomState
) -> int:
    """Writes <root>/<split>/<class>/*.jpg and <root>/<split>.{lst,rec,idx}; returns the count."""
    images = []
    for label, style in enumerate(styles):
        folder = os.path.join(root, split, f"class{label:03d}")
        os.makedirs(folder, exist_ok=True)
        for i in range(per_class):
            path = os.path.join(folder, f"{i:05d}.jpg")
            Image.fromarray(draw(style, size, rng)).save(path, quality=90)
            images.append((label, path))
    # records in random order, so that ImageRecordIter's contiguous parts (num_parts,
    # part_index: one per rank) each hold every class
    order = rng.permutation(len(images))
    records = mx.recordio.MXIndexedRecordIO(
        os.path.join(root, f"{split}.idx"), os.path.join(root, f"{split}.rec"), "w"
    )
    with open(os.path.join(root, f"{split}.lst"), "w") as listing:
        for index, position in enumerate(order):
            label, path = images[position]
            with open(path, "rb") as f:
                jpeg = f.read()
            header = mx.recordio.IRHeader(0, float(label), index, 0)
            records.write_idx(index, mx.recordio.pack(header, jpeg))
            relative = os.path.relpath(path, os.path.join(root, split))
            listing.write(f"{index}\t{label:.1f}\t{relative}\n")
    records.close()
    return len(images)


def main() -> None:
    args = parse_arguments()
    rng = np.random.RandomState(args.seed)
    styles = class_styles(args.classes, rng)
    os.makedirs(args.out, exist_ok=True)
    for split, per_class in (("train", args.train_per_class), ("val", args.val_per_class)):
        count = write_split(args.out, split, per_class, styles, args.size, rng)
        print(
            f"{split}: {count} images of {args.size}x{args.size} in {args.classes} classes -> "
            f"{args.out}/{split}/ and {args.out}/{split}.rec",
            flush=True,
        )


if __name__ == "__main__":
    main()
