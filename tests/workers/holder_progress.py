"""A holder of remote memory outside MPI (asleep) while a rank on another host reads its
chunk. Rank 1 holds the array, says it is asleep (a file in DIRECTORY), and sleeps until
rank 0 says its read completed (another file) or HOLDER_LIMIT seconds pass: with a progress
thread (MXKV_RMA_PROGRESS_US > 0) the read completes while it sleeps; without one it waits
until the holder enters MPI again. Prints HOLDER woke ... and CHECK lines."""

import os
import sys
import time

import mxnet as mx
import numpy as np
from mpi4py import MPI

import mxkv_hybrid  # noqa: F401  (binds MXNet's C API for the extension)
from mxkv_hybrid.comm.remote_memory import RemoteArray, holder_progress
from mxkv_hybrid.config import read_knob

HOLDER_LIMIT = 8.0  # seconds
TOTAL = 1 << 18  # float32 elements: 1 MiB


def wait_for(path: str, limit: float) -> bool:
    """Sleeps (outside MPI) until `path` exists or `limit` seconds pass; whether it exists."""
    deadline = time.monotonic() + limit
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)
    return os.path.exists(path)


directory = sys.argv[1]
asleep, read = os.path.join(directory, "holder_asleep"), os.path.join(directory, "read_done")
comm = MPI.COMM_WORLD
array = RemoteArray(comm, TOTAL, "float32", [1])
progress = holder_progress(comm, int(read_knob("MXKV_RMA_PROGRESS_US")))
print(f"CHECK progress thread {'started' if progress is not None else 'none'}", flush=True)
values = np.arange(TOTAL, dtype=np.float32)
if comm.rank == 1:
    array.write([(0, mx.nd.array(values))])  # its own chunk: no message
comm.Barrier()
if comm.rank == 0:
    wait_for(asleep, 60.0)
    out = mx.nd.zeros(TOTAL)
    array.read([(0, out)])
    open(read, "w").close()
    print(
        f"CHECK read values {'ok' if np.array_equal(out.asnumpy(), values) else 'FAILED'}",
        flush=True,
    )
else:
    open(asleep, "w").close()
    woke = "signalled" if wait_for(read, HOLDER_LIMIT) else "at its limit"
    print(f"HOLDER woke {woke}", flush=True)
comm.Barrier()
if progress is not None:
    progress.stop()
array.close()
