"""docs/modes/sync.md's claim on the servers' load ("Balance across servers"): the fused
chunks put the same bytes on every server, where MXNet's one key per array does not; the
ResNet-50 rows of its table, computed from MXNet's placement rule (ps/layout.py)."""

from typing import List, Sequence

import pytest

from mxkv_hybrid.plan.model_sizes import array_bytes
from mxkv_hybrid.ps.layout import MXNET_BIGARRAY_BOUND, Chunk, balanced_chunks, parts_of, server_of


def server_bytes_of_chunks(chunks: Sequence[Chunk], num_servers: int, itemsize: int) -> List[int]:
    """Bytes per server of the fused gradient's chunks."""
    loads = [0] * num_servers
    for c in chunks:
        loads[c.server] += (c.stop - c.start) * itemsize
    return loads


def server_bytes_per_key(
    sizes: Sequence[int], num_servers: int, itemsize: int, bound: int
) -> List[int]:
    """Bytes per server when every array is its own key 0, 1, 2, ... (MXNet's placement)."""
    loads = [0] * num_servers
    for key, n in enumerate(sizes):
        for part in parts_of(key, n, num_servers, bound):
            loads[part.server] += (part.stop - part.start) * itemsize
    return loads


@pytest.mark.parametrize(
    "servers, per_key, chunks", [(2, 1.005, 26), (3, 1.035, 27), (4, 1.025, 28)]
)
def test_fused_chunks_load_every_server_alike_where_keys_per_array_do_not(servers, per_key, chunks):
    sizes = [n // 4 for n in array_bytes("resnet50_v1")]  # float32 elements per array
    total = sum(sizes)
    layout = balanced_chunks(total, servers, 0, MXNET_BIGARRAY_BOUND)
    assert len(layout) == chunks
    assert [c.start for c in layout[1:]] == [c.stop for c in layout[:-1]]  # contiguous
    assert layout[0].start == 0 and layout[-1].stop == total
    assert all(c.stop - c.start < MXNET_BIGARRAY_BOUND for c in layout)
    assert all(server_of(c.key, servers) == c.server for c in layout)  # where MXNet sends it
    loads = server_bytes_of_chunks(layout, servers, 4)
    assert max(loads) - min(loads) <= 4 * len(layout) / servers  # an element per chunk
    assert max(loads) / (sum(loads) / servers) == pytest.approx(1.0, abs=1e-5)
    mxnet = server_bytes_per_key(sizes, servers, 4, MXNET_BIGARRAY_BOUND)
    assert max(mxnet) / (sum(mxnet) / servers) == pytest.approx(per_key, abs=5e-4)


def test_parts_of_an_array_are_where_mxnet_puts_them():
    """MXNet's EncodeDefaultKey: below the bound whole on server (key * 9973) % S; from the
    bound on, part i of n starts at C's round(n / S * i), which rounds halves up (Python's
    round would give 2 for 2.5, and code the wrong values of a part)."""
    assert [(p.start, p.stop, p.server) for p in parts_of(3, 999, 2, 1000)] == [(0, 999, 1)]
    assert [(p.start, p.stop, p.server) for p in parts_of(3, 5, 2, 5)] == [(0, 3, 0), (3, 5, 1)]
    assert [(p.start, p.stop) for p in parts_of(0, 10, 4, 10)] == [(0, 3), (3, 5), (5, 8), (8, 10)]


def test_push_pull_paces_the_keys_in_consecutive_batches_of_at_least_the_pace():
    """push_pull pulls a batch once its pushes are acknowledged, before the next batch is
    pushed: every key once, in order, each batch but the last at least PACE_BYTES."""
    from mxkv_hybrid.comm.pacing import pace_batches

    assert pace_batches([10, 3, 3, 3, 1, 9], 6) == [[0], [1, 2], [3, 4, 5]]
    assert pace_batches([1, 1, 1], 6) == [[0, 1, 2]]
    assert pace_batches([], 6) == []
