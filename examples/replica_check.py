"""The examples' end-of-training check that every rank holds rank 0's model."""
import mxnet as mx
import numpy as np

CHECKSUM_KEY = 10 ** 6 + 1  # an int key like the Trainer's (a dist store takes one key type)


def replica_scope() -> str:
    """Which ranks replicas_identical compares: all, or under separate easgd group jobs
    those of this group's MPI job (a broadcast of a value the servers do not hold stays
    inside the group there; in async the servers hold it, and every group gets theirs)."""
    import mxkv_hybrid
    if mxkv_hybrid.world().spans_all_ranks or mxkv_hybrid.Config.from_environment().mode == "async":
        return "all ranks"
    return "the ranks of this group job"


def replicas_identical(kv, net) -> bool:
    """Compares this rank's checksums of the trained parameters with rank 0's (broadcast
    through the store). Each float64 checksum travels as two float32 numbers (its float32
    value and the rest), since the dist_async servers hand values back in float32 (seen:
    a float64 checksum came back rounded). BatchNorm's running statistics are not trained:
    they stay per rank, as with MXNet's dist stores."""
    sums = np.array([p.data().asnumpy().astype(np.float64).sum()
                     for p in net.collect_params().values() if p.grad_req != "null"])
    high = sums.astype(np.float32)
    mine = mx.nd.array(np.concatenate([high, (sums - high).astype(np.float32)]), dtype="float32")
    rank0 = mx.nd.zeros(mine.shape, dtype="float32")
    kv.broadcast(CHECKSUM_KEY, mine, out=rank0)
    return bool((mine == rank0).asnumpy().all())
