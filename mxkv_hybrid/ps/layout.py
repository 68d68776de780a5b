"""Where bytes land on MXNet's parameter servers, and a layout that balances them.

MXNet's dist kvstore sends an array of fewer than MXNET_KVSTORE_BIGARRAY_BOUND elements
whole to server (key * 9973) % S, and splits bigger arrays evenly over all servers
(src/kvstore/kvstore_dist.h, EncodeDefaultKey). Per-parameter keys therefore load the
servers unevenly. The group leaders instead push the fused gradient in equal chunks just
below the bound, a multiple of S of them, with keys chosen so that chunk j lands on
server j % S: every server carries the same bytes, give or take one element per chunk.
"""

import math
import os
from dataclasses import dataclass
from typing import Iterator, List

MXNET_BIGARRAY_BOUND = 1_000_000  # MXNet's default for MXNET_KVSTORE_BIGARRAY_BOUND
KEY_SPREAD = 9973  # the multiplier of MXNet's key -> server hash


def bigarray_bound() -> int:
    return int(os.environ.get("MXNET_KVSTORE_BIGARRAY_BOUND", MXNET_BIGARRAY_BOUND))


def server_of(key: int, num_servers: int) -> int:
    """The server MXNet picks for an array smaller than the big-array bound."""
    return (key * KEY_SPREAD) % num_servers


@dataclass(frozen=True)
class Chunk:
    key: int  # the PS key
    start: int  # its elements in the (fused) array it is part of
    stop: int
    server: int


def keys_for_server(server: int, num_servers: int, first: int) -> Iterator[int]:
    """Keys >= first that MXNet sends to `server`, in increasing order."""
    key = first
    while True:
        if server_of(key, num_servers) == server:
            yield key
        key += 1


def balanced_chunks(total: int, num_servers: int, first_key: int, bound: int) -> List[Chunk]:
    """Equal chunks of `total` elements, each below `bound`, spread round-robin over servers."""
    if total == 0:
        return []
    count = num_servers * math.ceil(total / (num_servers * (bound - 1)))
    count = min(count, total)
    edges = [round(total * i / count) for i in range(count + 1)]
    next_key = first_key
    chunks = []
    for j in range(count):
        server = j % num_servers
        key = next(keys_for_server(server, num_servers, next_key))
        next_key = key + 1
        chunks.append(Chunk(key, edges[j], edges[j + 1], server))
    return chunks


def parts_of(key: int, size: int, num_servers: int, bound: int) -> List[Chunk]:
    """Where MXNet's dist kvstore puts an array of `size` elements pushed under `key`
    (EncodeDefaultKey): whole on server_of(key) below `bound`, else split over every
    server, part i from round(size / S * i), rounded half away from zero as C's round."""
    if size < bound:
        return [Chunk(key, 0, size, server_of(key, num_servers))]
    edges = [math.floor(size / num_servers * i + 0.5) for i in range(num_servers + 1)]
    return [Chunk(key, edges[i], edges[i + 1], i) for i in range(num_servers)]
