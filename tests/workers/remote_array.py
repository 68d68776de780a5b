"""RemoteArray (comm/remote_memory.py) against numpy on every rank: writes, reads (atomic,
and plain copies) of ranges that cross chunk boundaries, accumulates from every rank at
once (no barrier between them), reads while others accumulate, and the errors. Prints one
CHECK line per fact."""

import mxnet as mx
import numpy as np
from mpi4py import MPI

import mxkv_hybrid  # noqa: F401  (binds MXNet's C API for the extension)
from mxkv_hybrid.comm.remote_memory import RemoteArray
from mxkv_hybrid.errors import MXKVError

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size


def check(name: str, condition: bool) -> None:
    print(f"CHECK {name} {'ok' if condition else 'FAILED'}", flush=True)


def ranges(seed: int, total: int, count: int):
    """`count` random (start, stop) ranges of [0, total), the same for a seed on every rank."""
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, total, count)
    return [(int(s), int(rng.integers(s + 1, total + 1))) for s in starts]


LAYOUTS = {
    "every rank": list(range(size)),
    "one holder": [size - 1],
    "two chunks on rank 1": [1, 1],
}
for dtype in ("float32", "float64"):
    for total in (1, 7, 1000, 65537):
        for layout, holders in LAYOUTS.items():
            name = f"{dtype} {total} {layout}"
            remote = RemoteArray(comm, total, dtype, holders)
            chunks = remote.chunks
            covered = [c for _, s, n in chunks for c in range(s, s + n)]
            check(
                f"balanced chunks: {name}",
                covered == list(range(total))
                and max(n for *_, n in chunks) - min(n for *_, n in chunks) <= 1,
            )
            start = np.arange(total, dtype=dtype) * 0.5
            if rank == 0:
                remote.write([(0, mx.nd.array(start, dtype=dtype))])
            remote.barrier()
            whole = mx.nd.zeros((total,), dtype=dtype)
            remote.read([(0, whole)])
            parts = ranges(total, total, 3)
            pieces = [(s, mx.nd.zeros((e - s,), dtype=dtype)) for s, e in parts]
            remote.read(pieces)
            check(
                f"write then read: {name}",
                np.array_equal(whole.asnumpy(), start)
                and all(np.array_equal(p.asnumpy(), start[s : s + p.size]) for s, p in pieces),
            )
            copies = [(s, mx.nd.zeros((e - s,), dtype=dtype)) for s, e in parts]
            for _, array in copies:
                array.wait_to_read()  # (ready=True: the caller makes sure nothing is pending)
            remote.copy_out(copies, ready=True)
            check(
                f"copy_out as read: {name}",
                all(np.array_equal(p.asnumpy(), start[s : s + p.size]) for s, p in copies),
            )
            remote.barrier()
            for s, e in ranges(100 + rank, total, 20):  # every rank at once
                remote.accumulate([(s, mx.nd.full((e - s,), rank + 1, dtype=dtype))])
            remote.barrier()
            expected = start.copy()
            for r in range(size):
                for s, e in ranges(100 + r, total, 20):
                    expected[s:e] += r + 1
            remote.read([(0, whole)])
            check(f"concurrent accumulates: {name}", np.array_equal(whole.asnumpy(), expected))
            remote.barrier()
            remote.close()

# reads while the other ranks accumulate: every element is one of the values it passes
# through (base + a whole number of 1s), and never goes back
remote = RemoteArray(comm, 4096, "float32", list(range(size)))
one, seen = mx.nd.ones((4096,)), mx.nd.zeros((4096,))
rounds, previous, whole_values, monotone = 200, np.zeros(4096), True, True
for _ in range(rounds):
    if rank == 0:
        remote.read([(0, seen)])
        values = seen.asnumpy()
        whole_values &= bool(np.all(values == np.round(values)))
        monotone &= bool(np.all(values >= previous))
        previous = values
    else:
        remote.accumulate([(0, one)])
remote.barrier()
remote.read([(0, seen)])
check("reads during accumulates see whole values, never going back", whole_values and monotone)
check("accumulates during reads all land", np.all(seen.asnumpy() == rounds * (size - 1)))
remote.barrier()
remote.close()

# a pipelined exchange: reads started, then accumulates elsewhere, then complete()
remote = RemoteArray(comm, 3000, "float32", list(range(size)))
if rank == 0:
    remote.write([(0, mx.nd.arange(3000))])
remote.barrier()
started, later = mx.nd.zeros((1500,)), mx.nd.zeros((1500,))
remote.start_read([(0, started)])
remote.accumulate([(1500, mx.nd.ones((1500,)))])
remote.complete()
check(
    "started reads are complete after complete()",
    np.array_equal(started.asnumpy(), np.arange(1500, dtype=np.float32)),
)
remote.barrier()
remote.read([(1500, later)])
check(
    "accumulates beside started reads all land",
    np.array_equal(later.asnumpy(), np.arange(1500, 3000, dtype=np.float32) + size),
)
remote.barrier()
remote.close()

# a stream: several reads in flight, finished oldest first, and accumulates started only,
# landing at complete()
remote = RemoteArray(comm, 4000, "float32", list(range(size)))
if rank == 0:
    remote.write([(0, mx.nd.arange(4000))])
remote.barrier()
quarters = [mx.nd.zeros((1000,)) for _ in range(4)]
for q in range(3):
    remote.start_read([(1000 * q, quarters[q])])
remote.finish_read()
check(
    "the oldest started read is complete after finish_read()",
    np.array_equal(quarters[0].asnumpy(), np.arange(1000, dtype=np.float32)),
)
remote.start_accumulate([(3000, mx.nd.ones((1000,)))])
remote.start_read([(3000, quarters[3])])  # ordered after this rank's accumulate (MPI)
remote.complete()
check(
    "every started read is complete after complete()",
    all(
        np.array_equal(quarters[q].asnumpy(), np.arange(1000 * q, 1000 * (q + 1), dtype=np.float32))
        for q in (1, 2)
    ),
)
seen_mine = quarters[3].asnumpy() - np.arange(3000, 4000, dtype=np.float32)
check(
    "a read started after this rank's accumulate sees it (and whole values of others')",
    np.all(seen_mine >= 1) and np.all(seen_mine <= size) and np.all(seen_mine % 1 == 0),
)
remote.barrier()
remote.read([(3000, quarters[3])])
check(
    "started accumulates all land at complete()",
    np.array_equal(quarters[3].asnumpy(), np.arange(3000, 4000, dtype=np.float32) + size),
)
try:
    remote.finish_read()
    check("finish_read() with no read started refused", False)
except RuntimeError as err:
    check("finish_read() with no read started refused", "no read started" in str(err))
remote.barrier()
remote.close()

try:
    RemoteArray(comm, 8, "float16", [0])
    check("float16 refused", False)
except MXKVError as err:
    check("float16 refused", "float32 or float64" in str(err))
remote = RemoteArray(comm, 8, "float32", [0])
try:
    remote.read([(6, mx.nd.zeros((4,)))])
    check("out of range refused", False)
except Exception as err:  # noqa: BLE001  (the C++ range check)
    check("out of range refused", "outside the array of 8 elements" in str(err))
try:
    remote.read([(0, mx.nd.zeros((4,), dtype="float64"))])
    check("dtype mismatch refused", False)
except Exception as err:  # noqa: BLE001
    check(
        "dtype mismatch refused",
        "float64 cannot move to or from a remote array of float32" in str(err),
    )
remote.barrier()
remote.close()
