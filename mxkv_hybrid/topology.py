"""The MPI world this process belongs to, created on first use."""
import socket
import sys
import traceback
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .errors import MXKVError


@dataclass(frozen=True)
class World:
    """All ranks of the job, and where this process sits among them."""

    comm: Any  # mpi4py.MPI.Comm
    rank: int
    size: int
    local_rank: int  # rank among the processes sharing this host's memory
    local_size: int
    host: str


@lru_cache(maxsize=None)
def world() -> World:
    """Initialises MPI (once) and describes COMM_WORLD."""
    from mpi4py import MPI  # initialises MPI on import

    comm = MPI.COMM_WORLD
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    described = World(comm=comm, rank=comm.Get_rank(), size=comm.Get_size(),
                      local_rank=node.Get_rank(), local_size=node.Get_size(),
                      host=socket.gethostname())
    node.Free()
    if described.size > 1:
        _end_job_on_uncaught_exception(described)
    return described


def _end_job_on_uncaught_exception(this: World) -> None:
    """An exception on one rank must not leave the others blocked in a collective:
    print it with the rank, then abort the whole job (unless every rank raised it)."""
    previous_hook = sys.excepthook

    def hook(kind, value, tb):
        sys.stderr.write(f"mxkv_hybrid: rank {this.rank} on {this.host} failed:\n")
        previous_hook(kind, value, tb)
        sys.stderr.flush()
        sys.stdout.flush()
        if isinstance(value, MXKVError) and value.on_every_rank:
            return  # all ranks raised it together: a normal exit (MPI_Finalize) is safe
        try:
            this.comm.Abort(1)
        except Exception:  # pragma: no cover - Abort does not return
            traceback.print_exc()

    sys.excepthook = hook
