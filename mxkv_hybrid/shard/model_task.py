"""One model to train: its layers in order, its loss, its batches and its optimizer."""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from ..errors import MXKVError

Batch = Tuple[Any, Any]  # (data, label) NDArrays


@dataclass
class ModelTask:
    """`net`: a HybridSequential (or a list of HybridBlocks run in order), initialised the
    same on every rank; `loss`: a Gluon loss of (output, label); `batches`: one epoch of
    (data, label) in order, the same on every rank; the optimizer by name with its
    parameters, as gluon.Trainer takes them (gradients are divided by the batch size)."""

    net: Any
    loss: Any
    batches: Sequence[Batch]
    optimizer: str = "sgd"
    optimizer_params: Dict[str, Any] = field(default_factory=dict)
    epochs: int = 1
    name: str = ""

    def layers(self) -> List[Any]:
        """The blocks run in order."""
        from mxnet import gluon

        layers = (
            list(self.net._children.values())
            if isinstance(self.net, gluon.nn.HybridSequential)
            else list(self.net)
        )
        for index, layer in enumerate(layers):
            if not isinstance(layer, gluon.HybridBlock):
                raise MXKVError(
                    f"model {self.name!r}: layer {index} ({type(layer).__name__}) is "
                    "not a HybridBlock; shards run as symbols: use Gluon's hybrid "
                    "layers (or hybridizable blocks of your own)"
                )
        if not layers:
            raise MXKVError(f"model {self.name!r} has no layers")
        return layers

    def parameters(self) -> List[Any]:
        """Every parameter in the order gluon.Trainer numbers them."""
        params = []
        for layer in self.layers():
            params.extend(layer.collect_params().values())
        return params

    @property
    def batch_size(self) -> int:
        return int(self.batches[0][0].shape[0])

    def check(self) -> None:
        """Refuses what the orchestrator cannot train exactly, saying what to change."""
        if self.epochs < 1 or not len(self.batches):
            raise MXKVError(f"model {self.name!r}: needs at least one epoch and one batch")
        sizes = {int(x.shape[0]) for x, _ in self.batches}
        if len(sizes) > 1:
            raise MXKVError(
                f"model {self.name!r}: batches of sizes {sorted(sizes)}; every batch "
                "must have the same size (drop or pad the last one)"
            )
        for param in self.parameters():
            if np.dtype(param.dtype) != np.float32:
                raise MXKVError(
                    f"model {self.name!r}: parameter {param.name} is "
                    f"{np.dtype(param.dtype)}; shards keep float32 state: cast the "
                    "model to float32"
                )
