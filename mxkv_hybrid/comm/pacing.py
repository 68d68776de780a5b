"""Exchanges across a link in batches, so that both of its directions carry data at once:
one batch's pulls (or reads) cross while the next batch's pushes (or adds) do. ps-lite
sends a request down the one connection to a server that carries the pushes, behind all
of them, so without batches nothing comes back until everything went out."""

from typing import List, Sequence

import numpy as np

# bytes a batch holds at the least. Measured on 2 emulated hosts at 1000 Mbit/s: a sync
# training step alike from 2 to 16 MiB; easgd's exchange over ps-lite 1150, 1116, 1061
# and 1095 ms at 2, 4, 8 and 16 MiB.
PACE_BYTES = 8 * 2**20

# batches whose pulls (or reads) are in flight at once: the requests for a batch go down
# the connection that carries the earlier batches' pushes, behind them, and must come
# back before that batch is needed. Measured with examples/benchmarks/remote_centre.py
# --hosts (2 hosts at 1000 Mbit/s, ResNet-50 weights, easgd over ps-lite, 2 servers, one
# group / every group at once): 1 ahead 1058 / 1060 ms, 2 ahead 1007 / 1033, 4 ahead
# 1102 / 1155.
BATCHES_AHEAD = 2


def pace_batches(sizes: Sequence[int], at_least: int) -> List[List[int]]:
    """Consecutive indices of `sizes` in batches that reach `at_least` (the last may not)."""
    batches: List[List[int]] = [[]]
    total = 0
    for i, size in enumerate(sizes):
        if total >= at_least:
            batches.append([])
            total = 0
        batches[-1].append(i)
        total += size
    return [b for b in batches if b]


def paced(arrays: Sequence) -> List[List[int]]:
    """The indices of `arrays` (NDArrays) in batches of at least PACE_BYTES of them."""
    return pace_batches([a.size * np.dtype(a.dtype).itemsize for a in arrays], PACE_BYTES)
