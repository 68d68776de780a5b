"""What each layer of a model holds on a device, measured by running it once on a batch:
its parameters' shapes (trainable, and fixed: frozen arguments and auxiliary states such
as batch norm's running statistics), the optimizer's state per trainable parameter (as
the optimizer creates it), its input and output shapes for the batch, its forward time."""

import time
from dataclasses import dataclass
from math import prod
from typing import List, Sequence, Tuple

from .model_task import ModelTask

Shape = Tuple[int, ...]
FLOAT = 4  # bytes; shards keep float32 state


@dataclass(frozen=True)
class LayerFootprint:
    label: str  # "3 (Dense dense2)" : index, class, prefix
    trainable: Tuple[Tuple[str, Shape], ...]  # (parameter name, shape)
    indices: Tuple[int, ...]  # of the trainable ones, as gluon.Trainer's
    fixed: Tuple[Tuple[str, Shape], ...]  # parameters without gradient (auxiliary too)
    states: Tuple[Tuple[Shape, ...], ...]  # per trainable parameter, its state arrays
    input_shape: Shape
    output_shape: Shape
    forward_seconds: float

    @property
    def parameter_bytes(self) -> int:
        return FLOAT * sum(prod(shape) for _, shape in self.trainable)

    @property
    def fixed_bytes(self) -> int:
        return FLOAT * sum(prod(shape) for _, shape in self.fixed)

    @property
    def state_bytes(self) -> int:
        return FLOAT * sum(prod(shape) for shapes in self.states for shape in shapes)

    @property
    def output_bytes(self) -> int:
        return FLOAT * prod(self.output_shape)

    @property
    def input_bytes(self) -> int:
        return FLOAT * prod(self.input_shape)


def measure(task: ModelTask) -> List[LayerFootprint]:
    """Runs the model's first batch through its layers one by one (on the CPU, where the
    user initialised it), recording each layer's footprint."""
    import mxnet as mx

    optimizer = mx.optimizer.create(task.optimizer, **task.optimizer_params)
    x = task.batches[0][0]
    index, footprints = 0, []
    for position, layer in enumerate(task.layers()):
        started = time.perf_counter()
        y = layer(x)
        y.wait_to_read()
        seconds = time.perf_counter() - started
        trainable, indices, fixed, states = [], [], [], []
        for param in layer.collect_params().values():
            shape = tuple(param.shape)
            if param.grad_req == "null":
                fixed.append((param.name, shape))
            else:
                state = optimizer.create_state_multi_precision(index, param.data())
                trainable.append((param.name, shape))
                indices.append(index)
                states.append(tuple(tuple(a.shape) for a in flatten_state(state)))
            index += 1
        footprints.append(
            LayerFootprint(
                f"{position} ({type(layer).__name__} {layer.prefix.rstrip('_')})",
                tuple(trainable),
                tuple(indices),
                tuple(fixed),
                tuple(states),
                tuple(x.shape),
                tuple(y.shape),
                seconds,
            )
        )
        x = y
    return footprints


def describe(nbytes: int) -> str:
    """Bytes as a person reads them: KiB below one MiB."""
    return f"{nbytes / 2**20:.1f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:.1f} KiB"


def flatten_state(state) -> list:
    """An optimizer's state (None, an array, or nested tuples of them) as a flat list."""
    if state is None:
        return []
    if isinstance(state, (tuple, list)):
        return [a for part in state for a in flatten_state(part)]
    return [state]


def shard_bytes(layers: Sequence[LayerFootprint], label_bytes: int = 0) -> int:
    """What a shard of these layers holds while it trains one batch: parameters, their
    gradients, the optimizer's state, fixed parameters, its input and the input's
    gradient, every layer's output and that output's gradient, and the label when it ends
    in the loss."""
    parameters = sum(f.parameter_bytes for f in layers)
    state = sum(f.state_bytes + f.fixed_bytes for f in layers)
    activations = 2 * layers[0].input_bytes + 2 * sum(f.output_bytes for f in layers)
    return 2 * parameters + state + activations + label_bytes


def forward_bytes(layers: Sequence[LayerFootprint]) -> int:
    """What a shard holds while it only runs forward: parameters, fixed ones, its input,
    every layer's output, and its output once more (copied out for the next shard)."""
    return (
        sum(f.parameter_bytes + f.fixed_bytes + f.output_bytes for f in layers)
        + layers[0].input_bytes
        + layers[-1].output_bytes
    )
