"""Remote memory as a device: an array spread over MPI windows on some ranks (its holders),
read and accumulated into by ranges with one-sided MPI (csrc/remote_array.h): no server
process, no messages to build, and the holders' CPUs take no part. MXNet arrays are the
origin buffers, read and written in place.

What is atomic: each element of a read and of an accumulate, against every other read and
accumulate (MPI_Get_accumulate with MPI_NO_OP, MPI_Accumulate with MPI_SUM). A read that
overlaps another rank's accumulate sees, element by element, the value before or after
it. Over TCP between hosts MPICH moves one-sided operations forward only while the holder
is inside MPI: `holder_progress` starts a thread that enters MPI every few hundred
microseconds (MPICH's own progress thread, MPIR_CVAR_ASYNC_PROGRESS=1, spins a core); on
one host (shared memory) and on RDMA fabrics the holder does nothing."""

import warnings
from typing import Any, Callable, List, Sequence, Tuple

import mxnet as mx

from .. import mpi_settings
from ..errors import MXKVError
from .collectives import DTYPE_CODES, HOST_DEVICES
from .extension import extension

Pieces = Sequence[Tuple[int, mx.nd.NDArray]]  # (first element in the remote array, local array)
_moved = [0]  # bytes every RemoteArray of this process moved to or from other ranks


def holder_progress(comm, period_us: int) -> Any:
    """Collective over `comm`: where its ranks are on more than one host, a thread on this
    rank that enters MPI every `period_us` microseconds (0: none), so other ranks' reads
    and adds of the windows it holds move on while it computes; stop() it before the
    windows are freed (collective): the extension's HolderProgress. None where not needed,
    or where MPI was initialised without MPI_THREAD_MULTIPLE (with a warning)."""
    from mpi4py import MPI

    hosts = set(comm.allgather(MPI.Get_processor_name()))
    if len(hosts) > 1 and mpi_settings.eager_limit_missing():
        warnings.warn(
            f"remote memory across hosts: MPI started before mxkv_hybrid could set "
            f"UCX_RNDV_THRESH (mpi4py imported first?), so large reads and adds "
            f"wait for a rendezvous: set UCX_RNDV_THRESH={mpi_settings.EAGER_LIMIT} "
            "for every rank",
            stacklevel=1,
        )
    if period_us <= 0 or len(hosts) < 2:
        return None
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        warnings.warn(
            "remote memory across hosts: MPI was initialised without "
            "MPI_THREAD_MULTIPLE, so no progress thread; reads and adds of this "
            "rank's windows wait until it enters MPI",
            stacklevel=1,
        )
        return None
    return extension().HolderProgress(comm.py2f(), float(period_us))


def traffic() -> int:
    """Bytes this process's remote arrays moved to or from other ranks' chunks so far."""
    return _moved[0]


class RemoteArray:
    """`total` elements of `dtype` (float32 or float64), zeros at first, in balanced chunks:
    chunk i in a window on rank holders[i] of `comm`. Creating and closing it are collective
    over `comm`; reads, accumulates and writes are one-sided, by any rank of `comm`."""

    def __init__(self, comm, total: int, dtype: str, holders: Sequence[int]):
        if dtype not in ("float32", "float64"):
            raise MXKVError(
                f"remote memory holds float32 or float64 arrays, not {dtype} (MPI "
                "has no accumulate for 16-bit floats): keep the weights in float32"
            )
        self.dtype = dtype
        self._impl = extension().RemoteArray(
            comm.py2f(), int(total), DTYPE_CODES[dtype], list(holders)
        )

    @property
    def total(self) -> int:
        return self._impl.total

    @property
    def chunks(self) -> List[Tuple[int, int, int]]:
        """[(holder, start, count)] per chunk."""
        return self._impl.chunks

    @property
    def bytes_read(self) -> int:
        """Bytes this rank read from chunks other ranks hold."""
        return self._impl.bytes_read

    @property
    def bytes_accumulated(self) -> int:
        """Bytes this rank accumulated or wrote into chunks other ranks hold."""
        return self._impl.bytes_accumulated

    def read(self, pieces: Pieces, ready: bool = False) -> int:
        """Each local array = the remote elements from its start (complete on return).
        Returns the bytes moved from other ranks. First waits for every operation MXNet's
        engine holds, unless `ready`: the caller knows none is pending on these arrays
        (then computation on other arrays goes on beside the transfer)."""
        return self._moving(lambda: self._impl.read(self._handles(pieces), ready))

    def start_read(self, pieces: Pieces, ready: bool = False) -> int:
        """As read, started only: done at finish_read() (the earliest started first) or
        complete(); several may be in flight, beside other transfers; the local arrays
        are not to be touched before."""
        return self._moving(lambda: self._impl.start_read(self._handles(pieces), ready))

    def finish_read(self) -> None:
        """The reads of the earliest start_read() not yet finished are complete."""
        if self._impl is None:
            raise MXKVError("this remote array was closed")
        self._impl.finish_read()

    def complete(self) -> None:
        """Every transfer this rank started on the array is done, here and at the holders."""
        if self._impl is None:
            raise MXKVError("this remote array was closed")
        self._impl.complete()

    def copy_out(self, pieces: Pieces, ready: bool = False) -> int:
        """As read, but not atomic against accumulates (a plain MPI_Get, several times
        faster): for ranges no rank writes meanwhile."""
        return self._moving(lambda: self._impl.copy_out(self._handles(pieces), ready))

    def accumulate(self, pieces: Pieces, ready: bool = False) -> int:
        """The remote elements from each start += the local array (done at the holders on
        return). Returns the bytes moved to other ranks. `ready`: as for read."""
        return self._moving(lambda: self._impl.accumulate(self._handles(pieces), ready))

    def start_accumulate(self, pieces: Pieces, ready: bool = False) -> int:
        """As accumulate, started only: done at the holders at complete(); the local
        arrays are not to be touched before."""
        return self._moving(lambda: self._impl.start_accumulate(self._handles(pieces), ready))

    def write(self, pieces: Pieces, ready: bool = False) -> int:
        """The remote elements from each start = the local array; not atomic against
        accumulates (for setting up and restoring, when no other rank touches them).
        Returns the bytes moved to other ranks. `ready`: as for read."""
        return self._moving(lambda: self._impl.write(self._handles(pieces), ready))

    def barrier(self) -> None:
        """Waits for every rank of the array's communicator."""
        self._impl.barrier()

    def close(self) -> None:
        """Frees the windows (collective); the array cannot be used afterwards."""
        self._impl = None

    def _moving(self, transfer: Callable[[], None]) -> int:
        """Runs `transfer`; returns (and counts in traffic()) the bytes it moved to or from
        other ranks."""
        if self._impl is None:
            raise MXKVError("this remote array was closed")
        before = self._impl.bytes_read + self._impl.bytes_accumulated
        transfer()
        moved = self._impl.bytes_read + self._impl.bytes_accumulated - before
        _moved[0] += moved
        return moved

    def _handles(self, pieces: Pieces) -> List[Tuple[int, int]]:
        for _start, array in pieces:
            if array.context.device_type not in HOST_DEVICES:
                raise MXKVError(f"remote memory moves host arrays; this one is on {array.context}")
        return [(int(start), array.handle.value) for start, array in pieces]
