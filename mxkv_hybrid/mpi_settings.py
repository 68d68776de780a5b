"""Settings of MPI's transport that this product chooses before MPI starts (UCX reads its
environment once, in MPI_Init): by the launcher for the ranks it starts, and by a rank
that starts MPI itself; a value the user set is kept."""

import os
from typing import MutableMapping

# easgd over rma between hosts: over TCP, MPICH's one-sided operations are UCX active
# messages, sent eagerly below UCX_RNDV_THRESH and by rendezvous above it (a request and
# an answer through link queues full of the other direction's data before the bytes
# move); csrc/remote_array.cpp cuts operations to 8 MiB, so all of them go eagerly.
# Measured with examples/benchmarks/remote_centre.py --hosts (2 hosts at 1000 Mbit/s,
# ResNet-50 weights, every group at once): 1164 ms with UCX's default, 991 with 16m,
# 973 with inf; a flat and a hierarchical allreduce of the same set alike with either.
EAGER_LIMIT = "16m"


def choose(transport: str, environ: MutableMapping[str, str] = os.environ) -> None:
    """The eager limit for easgd over rma (MXKV_TRANSPORT), into `environ` (of the
    processes whose MPI has not started yet)."""
    if transport == "rma":
        environ.setdefault("UCX_RNDV_THRESH", EAGER_LIMIT)


def eager_limit_missing() -> bool:
    """Whether UCX runs with its own eager limit (MPI started before choose() could set it,
    and the user set none)."""
    return "UCX_RNDV_THRESH" not in os.environ
