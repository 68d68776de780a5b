"""The ranks that take their steps together, and a private communicator among them."""

from functools import lru_cache
from typing import Any, Callable, Optional

import numpy as np

from ..capabilities import steps_together
from ..config import Config
from . import stall
from .topology import groups, world


def in_lockstep(config: Config) -> bool:
    """Whether all ranks (not only a group) take their steps together in this mode."""
    return steps_together(config.mode, config.easgd_sync)


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


# Separate group jobs that step together (mode sync): how this group's agreement meets the
# other groups' (through the parameter server; set by the mode, once per process).
_across_groups: Optional[Callable[[bool], bool]] = None


def tie_groups(agree: Callable[[bool], bool]) -> None:
    """Makes all_agree span the separate group jobs: `agree(flag)`, called by every rank of
    this group with the group's result, returns the result over all groups."""
    global _across_groups
    if _across_groups is None:
        _across_groups = agree


def all_agree(flag: bool, what: str) -> bool:
    """Collective among the ranks in lockstep: True when `flag` is true on every one of them
    (a 4-byte buffer Allreduce: 5.5 us a call on 2 ranks here; pickled: 10 us)."""
    from mpi4py import MPI

    comm = lockstep_comm()
    result = np.array([flag], np.int32)
    if comm is not None:
        with stall.waiting(what):
            comm.Allreduce(np.array([flag], np.int32), result, op=MPI.MIN)
    if _across_groups is not None:
        return _across_groups(bool(result[0]))
    return bool(result[0])
