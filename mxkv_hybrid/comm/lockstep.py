"""The ranks that take their steps together, and a private communicator among them."""
from functools import lru_cache
from typing import Any

import numpy as np

from ..config import Config
from . import stall
from .topology import groups, world


def in_lockstep(config: Config) -> bool:
    """Whether all ranks (not only a group) take their steps together in this mode."""
    return config.mode not in ("async", "easgd") or (config.mode == "easgd" and config.easgd_sync)


@lru_cache(maxsize=None)
def lockstep_comm() -> Any:
    """A private duplicate of the communicator of the ranks that step together: all ranks,
    or in modes async and asynchronous easgd this rank's group (collective, so create it
    at a point every rank reaches, such as the first step); None when this rank is alone."""
    if world().size == 1:
        return None
    config = Config.from_environment()
    tied = world().comm if in_lockstep(config) else groups(config.group_size).group_comm
    return tied.Dup() if tied.Get_size() > 1 else None


def all_agree(flag: bool, what: str) -> bool:
    """Collective among the ranks in lockstep: True when `flag` is true on every one of them
    (a 4-byte buffer Allreduce: 5.5 us a call on 2 ranks here; pickled: 10 us)."""
    from mpi4py import MPI

    comm = lockstep_comm()
    if comm is None:
        return flag
    result = np.empty(1, np.int32)
    with stall.waiting(what):
        comm.Allreduce(np.array([flag], np.int32), result, op=MPI.MIN)
    return bool(result[0])
