"""The MPI world this process belongs to, created on first use."""

import os
import socket
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Optional

from .. import mpi_settings
from ..config import GroupJob, read_knob
from ..errors import ConfigError, MXKVError, RankLostError
from ..launch.control.keeper import tell_launcher_mpi
from . import stall


@dataclass(frozen=True)
class World:
    """All ranks of the job, and where this process sits among them."""

    comm: Any  # mpi4py.MPI.Comm: every rank, or with group_job only this group's ranks
    rank: int  # among all ranks of the training job
    size: int  # all ranks of the training job
    local_rank: int  # rank among the job's processes on this host (picks the GPU)
    local_size: int
    host: str
    group_job: Optional[GroupJob] = None  # set when each group is its own MPI job

    @property
    def spans_all_ranks(self) -> bool:
        """Whether `comm` reaches every rank (else only this group's, through MPI)."""
        return self.group_job is None


@lru_cache(maxsize=None)
def world() -> World:
    """Initialises MPI (once) and describes the job: COMM_WORLD, which is every rank or,
    when each group is its own MPI job (MXKV_GROUP_JOB), this group's ranks. Tells the
    launcher when the start begins and when it is through: it waits for every rank."""
    if "mpi4py.MPI" not in sys.modules:  # (else MPI may have started: too late)
        mpi_settings.choose(read_knob("MXKV_TRANSPORT"))
        tell_launcher_mpi("starting")
    from mpi4py import MPI  # initialises MPI on import

    comm = MPI.COMM_WORLD
    job = read_knob("MXKV_GROUP_JOB")
    if job is not None and job.first_rank + comm.Get_size() > job.ranks:
        raise ConfigError(
            f"MXKV_GROUP_JOB: this MPI job's {comm.Get_size()} rank(s) from rank "
            f"{job.first_rank} on do not fit in the {job.ranks} rank(s) it "
            "declares: let mxkv-launch --group-jobs set it"
        )
    first_rank, size = (job.first_rank, job.ranks) if job else (0, comm.Get_size())
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    local_rank, local_size = node.Get_rank(), node.Get_size()
    if job is not None and job.local_first is not None:  # group jobs sharing this host
        local_rank, local_size = job.local_first + local_rank, job.local_ranks
    described = World(
        comm=comm,
        rank=first_rank + comm.Get_rank(),
        size=size,
        local_rank=local_rank,
        local_size=local_size,
        host=socket.gethostname(),
        group_job=job,
    )
    node.Free()
    if comm.Get_size() > 1:
        _end_job_on_uncaught_exception(described)
        stall.install(
            stall.StallMonitor(
                comm.Dup(),
                described.host,
                read_knob("MXKV_STALL_TIMEOUT"),
                end_job,
                first_rank,
                read_knob("MXKV_LAUNCHER_LINK"),
            )
        )
    tell_launcher_mpi("started")
    return described


@dataclass(frozen=True)
class Groups:
    """The ranks split into groups; each group's rank 0 is its leader (the only rank that
    talks to the parameter server)."""

    group_comm: Any
    group_index: int
    num_groups: int
    is_leader: bool


@lru_cache(maxsize=None)
def groups(group_size: int) -> Groups:
    """Groups of `group_size` consecutive ranks, or (0) the ranks of each host; with
    MXKV_GROUP_JOB, this MPI job."""
    from mpi4py import MPI

    this = world()
    if this.group_job is not None:  # this MPI job is the group
        return Groups(
            group_comm=this.comm.Dup(),
            group_index=this.group_job.group,
            num_groups=this.group_job.groups,
            is_leader=this.comm.Get_rank() == 0,
        )
    if group_size > 0:
        group_comm = this.comm.Split(color=this.rank // group_size, key=this.rank)
    else:
        group_comm = this.comm.Split_type(MPI.COMM_TYPE_SHARED, key=this.rank)
    is_leader = group_comm.Get_rank() == 0
    # number the groups by their leader's world rank, the same on every rank
    leader_ranks = sorted(set(this.comm.allgather(this.rank if is_leader else None)) - {None})
    my_leader = group_comm.bcast(this.rank if is_leader else None, root=0)
    return Groups(
        group_comm=group_comm,
        group_index=leader_ranks.index(my_leader),
        num_groups=len(leader_ranks),
        is_leader=is_leader,
    )


def wait_for_leader(group_comm, is_leader: bool, poll_seconds: float = 2e-4) -> None:
    """A barrier in which the group's other ranks sleep instead of spinning, while their
    leader talks to the parameter server (busy-polling ranks would take the CPU from the
    leader and the servers when processes outnumber cores)."""
    request = group_comm.Ibarrier()  # every rank: a blocking Barrier would not match it
    if is_leader:
        request.Wait()
        return
    while not request.Test():
        time.sleep(poll_seconds)


def end_job() -> None:
    """Ends this rank at once with status 1; mpiexec then ends every other rank.
    Not MPI_Abort: it races with the forwarding of this rank's last output, which
    then goes missing (measured: 1 to 4 lost error messages in 10 runs)."""
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(1)


def _end_job_on_uncaught_exception(this: World) -> None:
    """An exception on one rank must not leave the others blocked in a collective:
    print it with the rank, then abort the whole job (unless every rank raised it)."""
    previous_hook = sys.excepthook

    def hook(kind, value, tb):
        if isinstance(value, RankLostError):
            sys.stderr.write(f"mxkv_hybrid: rank {this.rank} on {this.host} stops: {value}\n")
            end_job()
        sys.stderr.write(f"mxkv_hybrid: rank {this.rank} on {this.host} failed:\n")
        previous_hook(kind, value, tb)
        if isinstance(value, MXKVError) and value.on_every_rank:
            return  # all ranks raised it together: a normal exit (MPI_Finalize) is safe
        end_job()

    sys.excepthook = hook
