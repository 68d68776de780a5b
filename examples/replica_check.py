"""The examples' end-of-training check that every rank of the MPI job holds the same model,
made through plain MPI (mpi4py), never through the store under test."""

import hashlib

import mxkv_hybrid


def replica_scope() -> str:
    """Which ranks replicas_identical compares: all, or under separate group jobs (async,
    easgd) those of this group's MPI job (tests/jobs/test_group_jobs.py compares the groups'
    final models through files)."""
    return "all ranks" if mxkv_hybrid.world().spans_all_ranks else "the ranks of this group job"


def replicas_identical(net) -> bool:
    """Whether every rank of this MPI job holds the same trained parameters, bit for bit: a
    digest of their bytes, allgathered. BatchNorm's running statistics are not trained:
    they stay per rank, as with MXNet's dist stores."""
    digest = hashlib.sha256()
    for name, parameter in sorted(net.collect_params().items()):
        if parameter.grad_req != "null":
            digest.update(name.encode() + parameter.data().asnumpy().tobytes())
    return len(set(mxkv_hybrid.world().comm.allgather(digest.hexdigest()))) == 1
