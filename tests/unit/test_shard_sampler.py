"""ShardSampler (what --auto gives a shuffled DataLoader) and the one-rank pass-through of
even_batches / EvenBatchesIter, in one process."""

import mxnet as mx
import numpy as np
import pytest

import mxkv_hybrid
from mxkv_hybrid import EvenBatchesIter, ShardSampler, even_batches


@pytest.mark.parametrize("length,ranks", [(10, 3), (12, 4), (5, 8), (1, 1)])
def test_shards_cover_the_data_set_evenly(length, ranks):
    shards = [list(ShardSampler(length, rank, ranks)) for rank in range(ranks)]
    per_rank = -(-length // ranks)
    assert all(len(shard) == per_rank == len(ShardSampler(length, 0, ranks)) for shard in shards)
    dealt = [sample for shard in shards for sample in shard]
    assert set(dealt) == set(range(length))  # every sample is read ...
    assert len(dealt) - len(set(dealt)) == per_rank * ranks - length  # ... the padding repeated


def test_each_epoch_is_a_new_permutation_shared_by_the_ranks():
    samplers = [ShardSampler(100, rank, 2) for rank in range(2)]
    epochs = [[list(s) for s in samplers] for _ in range(3)]
    for shards in epochs:
        assert not set(shards[0]) & set(shards[1])  # 100 / 2: no padding, disjoint
    assert epochs[0][0] != epochs[1][0] != epochs[2][0]
    again = ShardSampler(100, 0, 2)
    assert list(again) == epochs[0][0]  # seed + epoch: the same sequence on every rank


def test_a_rank_outside_the_world_is_refused():
    with pytest.raises(ValueError, match="rank 2"):
        ShardSampler(10, 2, 2)


def test_one_rank_reads_every_batch_every_epoch():
    assert mxkv_hybrid.world().size == 1
    data = mx.io.NDArrayIter(
        np.arange(20, dtype=np.float32).reshape(10, 2), batch_size=4, last_batch_handle="discard"
    )
    wrapped = EvenBatchesIter(data)
    assert wrapped.provide_data == data.provide_data
    for _ in range(2):
        seen = [batch.data[0].asnumpy()[0, 0] for batch in wrapped]
        assert seen == [0.0, 8.0]
        wrapped.reset()
    assert list(even_batches(range(5))) == [0, 1, 2, 3, 4]
