"""ShardSampler: one rank's share of a shuffled data set (what `--auto` gives a
`gluon.data.DataLoader(shuffle=True)`)."""

import math
from typing import Iterator

import numpy as np
from mxnet.gluon.data import Sampler


class ShardSampler(Sampler):
    """Every epoch, one permutation of range(length), the same on every rank (seeded by
    seed + epoch), wrapped around to a multiple of num_ranks and dealt out: rank r gets
    positions r, r + num_ranks, ... So the ranks read disjoint samples (except the few
    repeated to even out the shards), and every rank has ceil(length / num_ranks) of them."""

    def __init__(self, length: int, rank: int, num_ranks: int, seed: int = 0):
        if not 0 <= rank < num_ranks:
            raise ValueError(f"rank {rank} is not in [0, {num_ranks})")
        self._length = length
        self._rank = rank
        self._num_ranks = num_ranks
        self._seed = seed
        self._epoch = 0

    def __len__(self) -> int:
        return math.ceil(self._length / self._num_ranks)

    def __iter__(self) -> Iterator[int]:
        order = np.random.RandomState(self._seed + self._epoch).permutation(self._length)
        self._epoch += 1
        padded = np.resize(order, len(self) * self._num_ranks)  # np.resize repeats from the start
        return iter(padded[self._rank :: self._num_ranks].tolist())
