"""The examples' end-of-training check that every rank holds rank 0's model."""
import mxnet as mx
import numpy as np

CHECKSUM_KEY = 10 ** 6 + 1  # an int key like the Trainer's (a dist store takes one key type)


def replica_scope() -> str:
    """Which ranks replicas_identical compares: all, or under mxkv-launch --group-jobs
    those of this group's MPI job (a broadcast of a value the servers do not hold stays
    inside the group there)."""
    import mxkv_hybrid
    return "all ranks" if mxkv_hybrid.world().spans_all_ranks else "the ranks of this group job"


def replicas_identical(kv, net) -> bool:
    """Compares this rank's checksums of the trained parameters with rank 0's (broadcast
    through the store). BatchNorm's running statistics are not trained: they stay per
    rank, as with MXNet's dist stores."""
    mine = mx.nd.array([p.data().asnumpy().astype(np.float64).sum()
                        for p in net.collect_params().values() if p.grad_req != "null"],
                       dtype="float64")
    rank0 = mx.nd.zeros(mine.shape, dtype="float64")
    kv.broadcast(CHECKSUM_KEY, mine, out=rank0)
    return bool((mine == rank0).asnumpy().all())
