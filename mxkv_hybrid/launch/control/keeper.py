"""The rank's side of the launcher's link (control/link.py), and all a rank imports of the
control plane: `start_for_this_rank` (at `import mxkv_hybrid`, before MPI_Init) starts the
rank's keeper process (keeper_process.py) when MXKV_LAUNCHER_LINK is set; the rest tells
the launcher what only the rank knows, or asks it what only the launcher knows.

A rank may ask the launcher which ranks it hears from (`ask_launcher`): the stall monitor
sends MPI messages only to those, since MPICH crashes (SIGSEGV in MPI_Isend) when it sends
to a peer on a host cut off long enough for UCX to fail the connection. A group leader
tells the launcher once it has met the others at the parameter server
(`tell_launcher_met`): a group lost before that holds every group back. A rank whose
script ends says with which status (`tell_launcher_exit`, from mxkv_hybrid.run): one that
fails while the others go on would hold them in their next collective, and mpiexec does
not end them. A rank also says when it starts MPI and when its start is through
(`tell_launcher_mpi`): MPI's start waits for every rank of the MPI job, so a rank whose
script ended before it started MPI, even with status 0, holds the others there for ever.
The launcher says which groups it gave up (lost, no restart left: `groups_given_up`), so
that the others' finish line goes on without them at once.
"""

import os
import socket
import subprocess
import sys
import time
from typing import Dict, List, NamedTuple, Optional

from ...config import read_knob
from . import keeper_process
from .channel import receive, send
from .members import Member, rank_member
from .timing import BEAT_SECONDS


class JobAddress(NamedTuple):
    """A launcher's address as ranks and joining groups are given it: TOKEN@HOST:PORT."""

    token: str
    host: str
    port: int

    @classmethod
    def parse(cls, address: str) -> "JobAddress":
        """Raises ValueError naming the expected form."""
        token, _, where = address.rpartition("@")
        host, _, port = where.rpartition(":")
        if not token or not host or not port.isdigit():
            raise ValueError(f"{address!r}: expected TOKEN@HOST:PORT")
        return cls(token, host, int(port))

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"


def _ask(address: str, what: str, timeout: float) -> Optional[dict]:
    """The launcher's answer at `address` (MXKV_LAUNCHER_LINK), `what` of it; None when it
    cannot be asked within `timeout` seconds."""
    try:
        job = JobAddress.parse(address)
        with socket.create_connection((job.host, job.port), timeout=timeout) as connection:
            send(connection, {"token": job.token, "ask": "ranks"})
            reply = receive(connection.makefile("rb"))
        return reply[what] if reply is not None else None
    except (OSError, ValueError, KeyError):
        return None


def ask_launcher(address: str, timeout: float = 2 * BEAT_SECONDS) -> Optional[Dict[int, Member]]:
    """What the launcher at `address` (MXKV_LAUNCHER_LINK) knows of every rank, as seen now
    on this clock; None when it cannot be asked within `timeout` seconds."""
    ranks = _ask(address, "ranks", timeout)
    if ranks is None:
        return None
    now = time.monotonic()
    seen_now = {}
    for rank, seen in ranks.items():
        member = rank_member(int(rank), seen["host"], seen["address"], now - float(seen["silent"]))
        member.left_at = now if seen["left"] else None
        seen_now[int(rank)] = member
    return seen_now


def groups_given_up(address: str, timeout: float = 2 * BEAT_SECONDS) -> List[int]:
    """The groups the launcher at `address` gave up (lost, no restart left); [] when it
    cannot be asked or there is no launcher."""
    given_up = _ask(address, "given_up", timeout) if address else None
    return [int(group) for group in given_up or []]


def _tell_launcher(address: str, message: dict, timeout: float = 2 * BEAT_SECONDS) -> None:
    """Sends `message` to the launcher at `address` (MXKV_LAUNCHER_LINK; "" without one);
    a launcher it cannot reach is the keeper's business."""
    if not address:
        return
    try:
        job = JobAddress.parse(address)
        with socket.create_connection((job.host, job.port), timeout=timeout) as connection:
            send(connection, dict(message, token=job.token))
    except (OSError, ValueError):
        pass


def tell_launcher_met(address: str) -> None:
    """A group leader past ps-lite's start tells the launcher that the groups met."""
    _tell_launcher(address, {"met": True})


def tell_launcher_exit(status: int, environ=os.environ) -> None:
    """This rank's script ended with `status`: tells its launcher, if it has one."""
    rank = rank_in_job(environ)
    if rank is not None:
        _tell_launcher(_link_address(environ), {"exited": rank, "status": status})


def tell_launcher_mpi(stage: str, environ=os.environ) -> None:
    """This rank is `stage` ("starting" or "started") MPI: tells its launcher, if it has one."""
    rank = rank_in_job(environ)
    if rank is not None:
        _tell_launcher(_link_address(environ), {"mpi": stage, "rank": rank})


def _link_address(environ) -> str:
    """MXKV_LAUNCHER_LINK: the launcher's link, '' outside mxkv-launch."""
    return read_knob("MXKV_LAUNCHER_LINK", environ)


def rank_in_job(environ=os.environ) -> Optional[int]:
    """This process's rank, numbered as in the whole job (a group job's first_rank added),
    or None outside an MPI job."""
    local = environ.get("PMI_RANK", environ.get("OMPI_COMM_WORLD_RANK"))
    if local is None:
        return None
    job = read_knob("MXKV_GROUP_JOB", environ)
    return (job.first_rank if job is not None else 0) + int(local)


def ranks_in_job(environ=os.environ) -> Optional[int]:
    """The ranks of the whole job (all group jobs'), or None outside an MPI job."""
    size = environ.get("PMI_SIZE", environ.get("OMPI_COMM_WORLD_SIZE"))
    if size is None:
        return None
    job = read_knob("MXKV_GROUP_JOB", environ)
    return job.ranks if job is not None else int(size)


def start_for_this_rank(environ=os.environ) -> None:
    """A rank started by mxkv-launch (MXKV_LAUNCHER_LINK and an MPI rank set): starts its
    keeper, the rank numbered as in the whole job (a group job's first_rank added)."""
    address = _link_address(environ)
    rank = rank_in_job(environ)
    if not address or rank is None:
        return
    job = JobAddress.parse(address)
    subprocess.Popen(
        [
            sys.executable,
            keeper_process.__file__,
            job.token,
            job.host,
            str(job.port),
            str(rank),
            str(read_knob("MXKV_LOST_SECONDS", environ)),
            str(os.getpid()),
            str(BEAT_SECONDS),
        ],
        stdin=subprocess.DEVNULL,
    )
