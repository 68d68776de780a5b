"""Cutting a model into consecutive shards that fit a device's budget."""

from dataclasses import dataclass
from typing import List, Sequence

from ..errors import MXKVError
from .footprint import LayerFootprint, describe, shard_bytes


@dataclass(frozen=True)
class Shard:
    index: int
    first: int  # layer positions [first, stop)
    stop: int
    layers: Sequence[LayerFootprint]
    bytes: int  # held while it trains one batch (footprint.shard_bytes)
    last: bool  # ends in the loss

    @property
    def forward_seconds(self) -> float:
        return sum(f.forward_seconds for f in self.layers)


def partition(
    model: str, layers: Sequence[LayerFootprint], limit: int, label_bytes: int
) -> List[Shard]:
    """Greedy from the first layer: each shard takes layers while what it holds stays
    within `limit` bytes. A layer that does not fit alone is refused, by name."""
    shards: List[Shard] = []
    first = 0
    while first < len(layers):
        stop = first + 1
        label = label_bytes if stop == len(layers) else 0
        alone = shard_bytes(layers[first:stop], label)
        if alone > limit:
            raise MXKVError(
                f"model {model!r}: layer {layers[first].label} needs {describe(alone)} "
                f"(parameters, gradients, optimizer state, activations of one batch) but a "
                f"shard may hold {describe(limit)}: raise device_memory_mb, use a smaller "
                "batch, or split the layer"
            )
        while (
            stop < len(layers)
            and shard_bytes(layers[first : stop + 1], label_bytes if stop + 1 == len(layers) else 0)
            <= limit
        ):
            stop += 1
        label = label_bytes if stop == len(layers) else 0
        shards.append(
            Shard(
                len(shards),
                first,
                stop,
                tuple(layers[first:stop]),
                shard_bytes(layers[first:stop], label),
                stop == len(layers),
            )
        )
        first = stop
    return shards
