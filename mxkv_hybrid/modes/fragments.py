"""The model cut into fragments for Streaming DiLoCo's partial averages (MXKV_FRAGMENTS):
the weights, in key order, read as one vector of elements, cut into P ranges of equal
length (to one element). A fragment is the pieces of the keys its range covers; a piece
is a key's elements [start, stop), reached through zero-copy views of each device's copy.
With P = 1 every piece is a whole key, and its view is the array itself."""

from dataclasses import dataclass
from typing import List, Sequence

import mxnet as mx

from ..comm.collectives import Key
from ..errors import ConfigError


@dataclass(frozen=True)
class Piece:
    """Elements [start, stop) of the flattened weight `key` (`size` elements in all)."""

    key: Key
    start: int
    stop: int
    size: int

    @property
    def name(self) -> Key:
        """The collectives' key: the weight's own for a whole key, else 'key[start:stop]'."""
        return self.key if self.whole else f"{self.key}[{self.start}:{self.stop}]"

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.stop == self.size

    def view(self, array: mx.nd.NDArray) -> mx.nd.NDArray:
        """These elements of `array` (a copy of the weight, or an array shaped like it),
        sharing its memory."""
        return array if self.whole else array.reshape(-1)[self.start : self.stop]


def cut_into_fragments(keys: Sequence[Key], sizes: Sequence[int], count: int) -> List[List[Piece]]:
    """`count` fragments of the keys' elements (sizes[i] for keys[i]), in key order;
    fragment f holds elements [f * total // count, (f + 1) * total // count)."""
    total = sum(sizes)
    if total < count:
        raise ConfigError(
            f"MXKV_FRAGMENTS={count} is more than the model's {total} elements: "
            "lower MXKV_FRAGMENTS"
        )
    bounds = [f * total // count for f in range(count + 1)]
    fragments: List[List[Piece]] = [[] for _ in range(count)]
    offset = 0
    for key, size in zip(keys, sizes):
        for f in range(count):
            start, stop = max(bounds[f], offset), min(bounds[f + 1], offset + size)
            if start < stop:
                fragments[f].append(Piece(key, start - offset, stop - offset, size))
        offset += size
    return fragments
