"""The tasks of the convergence study (examples/convergence.py): the data, the network and
the training budget of each.

  digits    UCI's 8x8 handwritten digits (examples/train_digits.py's CNN, 89 K parameters):
            every method reaches 0.95-0.99, so it tells little apart
  mnist1d   MNIST-1D (Greydanus 2020): 4,000 training and 1,000 test signals of 40
            values, generated offline by the `mnist1d` package's own generator (never its
            download helper; `pip install -e '.[study]'`); a small 1-D CNN (28 K
            parameters) reaches about 0.95 and a linear model about 0.32, so it separates
            good methods from bad ones
"""

from dataclasses import dataclass
from typing import Callable, Tuple

import numpy as np
from mxnet import gluon

import train_digits

Data = Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # train x, y, test x, y


@dataclass(frozen=True)
class Task:
    name: str
    load_data: Callable[[int], Data]
    build_network: Callable[[], gluon.nn.HybridSequential]
    epochs: int
    batch_size: int  # per rank and step
    lr: float
    target: float  # the accuracy "epochs to" counts to


def load_mnist1d(seed: int) -> Data:
    """MNIST-1D as its paper made it (the generator's own seed and settings; `seed` is the
    training's, not the data's): signals N x 1 x 40, float32."""
    from mnist1d.data import get_dataset_args, make_dataset

    data = make_dataset(get_dataset_args())
    return (
        data["x"].astype(np.float32)[:, None, :],
        data["y"].astype(np.float32),
        data["x_test"].astype(np.float32)[:, None, :],
        data["y_test"].astype(np.float32),
    )


def build_mnist1d_network() -> gluon.nn.HybridSequential:
    """Three strided 1-D convolutions of 64 channels and a linear read-out (28,298 weights)."""
    net = gluon.nn.HybridSequential()
    net.add(
        gluon.nn.Conv1D(64, 5, strides=2, padding=1, activation="relu"),
        gluon.nn.Conv1D(64, 3, strides=2, padding=1, activation="relu"),
        gluon.nn.Conv1D(64, 3, strides=2, padding=1, activation="relu"),
        gluon.nn.Flatten(),
        gluon.nn.Dense(10),
    )
    return net


TASKS = {
    "digits": Task(
        "digits",
        train_digits.load_data,
        train_digits.build_network,
        epochs=12,
        batch_size=16,
        lr=0.05,
        target=0.95,
    ),
    "mnist1d": Task(
        "mnist1d",
        load_mnist1d,
        build_mnist1d_network,
        epochs=100,
        batch_size=32,
        lr=0.1,
        target=0.9,
    ),
}
