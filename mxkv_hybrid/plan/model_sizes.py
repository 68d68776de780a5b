"""The sizes of a model's gradient arrays: a model-zoo name, or a saved parameter list."""

import json
import os
from typing import List, Tuple

import numpy as np

from ..errors import ConfigError

ZOO_INPUT = (1, 3, 224, 224)  # the shape a model-zoo network infers its parameters from


def array_bytes(model: str) -> List[int]:
    """Bytes of every trainable array of `model`: a file (.params/.npz saved by MXNet or
    numpy, or .json: a list of shapes or of element counts), else a Gluon model-zoo name."""
    if os.path.exists(model):
        return _from_file(model)
    import mxnet as mx

    try:
        net = mx.gluon.model_zoo.vision.get_model(model)
    except ValueError:
        raise ConfigError(
            f"{model!r} is neither a file nor a Gluon model-zoo name (e.g. "
            "resnet50_v1, resnet18_v1, vgg16, mobilenet1.0)"
        ) from None
    return trainable_bytes(net, ZOO_INPUT)


def trainable_bytes(net, input_shape: Tuple[int, ...]) -> List[int]:
    """Bytes of every trainable array of a Gluon `net`, its shapes inferred from one input."""
    import mxnet as mx

    net.initialize()
    net(mx.nd.zeros(input_shape))
    return [
        int(np.prod(p.shape)) * np.dtype(p.dtype).itemsize
        for p in net.collect_params().values()
        if p.grad_req != "null"
    ]


def _from_file(path: str) -> List[int]:
    if path.endswith(".json"):
        with open(path) as f:
            entries = json.load(f)
        return [4 * (int(np.prod(e)) if isinstance(e, list) else int(e)) for e in entries]
    if path.endswith(".npz"):
        with np.load(path) as arrays:
            return [arrays[k].nbytes for k in arrays.files]
    import mxnet as mx

    saved = mx.nd.load(path)
    values = saved.values() if isinstance(saved, dict) else saved
    return [int(v.size) * np.dtype(v.dtype).itemsize for v in values]
