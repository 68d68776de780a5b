"""Element-wise work on MXNet arrays that MXNet's operators would do in several passes,
fused in C++ (csrc/elastic_step.h)."""

from typing import List, Sequence

import mxnet as mx
import numpy as np

from .collectives import HOST_DEVICES
from .extension import extension

FUSED_DTYPES = ("float32", "float64")


def elastic_step(
    alpha: float,
    weights: Sequence[mx.nd.NDArray],
    centres: Sequence[mx.nd.NDArray],
    elastic: Sequence[mx.nd.NDArray],
    ready: bool = False,
) -> None:
    """EASGD's elastic step for every i: elastic[i] = alpha (weights[i] - centres[i]);
    weights[i] -= elastic[i]. float32/float64 host arrays in one fused pass each (after
    all of MXNet's engine, unless `ready`: no operation is pending on these arrays), other
    arrays with MXNet's operators (three passes)."""
    fused: List[tuple] = []
    other: List[tuple] = []
    for entry in zip(weights, centres, elastic):
        host = entry[0].context.device_type in HOST_DEVICES
        (fused if host and np.dtype(entry[0].dtype).name in FUSED_DTYPES else other).append(entry)
    if fused:
        extension().elastic_step(
            alpha, [tuple(a.handle.value for a in entry) for entry in fused], ready
        )
    for weight, centre, difference in other:
        mx.nd.elemwise_sub(weight, centre, out=difference)
        difference *= alpha
        weight -= difference
