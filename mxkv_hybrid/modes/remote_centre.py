"""easgd's centre variable in remote memory (MXKV_TRANSPORT=rma): MPI windows on the group
leaders, each holding 1/groups of every dtype's flat centre, read and moved by one-sided
MPI (comm/remote_memory.py) instead of ps-lite's push and pull: no server processes, no
messages, and a leader holding a chunk does nothing while another group exchanges."""

import functools
import time
from collections import deque
from typing import Callable, Deque, Dict, List, Optional, Sequence, Tuple

import mxnet as mx
import numpy as np

from ..comm.collectives import HOST_DEVICES, Key
from ..comm.link_throttle import LinkThrottle
from ..comm.pacing import BATCHES_AHEAD, paced
from ..comm.remote_memory import RemoteArray, holder_progress
from ..comm.topology import Groups, World
from ..errors import MXKVError


class RemoteCentre:
    """Created on every rank (it splits the world into the leaders' communicator); used on
    the group leaders, collectively where noted."""

    def __init__(
        self,
        world: World,
        groups: Groups,
        throttle: Optional[LinkThrottle] = None,
        progress_us: int = 0,
    ):
        """throttle: the emulated link between groups (every chunk another leader holds is
        across it), charged for the bytes each read, add or write moves; progress_us: a
        leader's progress thread's period where the leaders span hosts (0: none)."""
        from mpi4py import MPI

        self._throttle = throttle
        self._leaders = world.comm.Split(0 if groups.is_leader else MPI.UNDEFINED, key=world.rank)
        self._progress = holder_progress(self._leaders, progress_us) if groups.is_leader else None
        self._arrays: List[RemoteArray] = []
        self._places: Dict[Key, Tuple[RemoteArray, int]] = {}  # key -> (array, first element)

    def create(self, keys: Sequence[Key], values: Sequence[mx.nd.NDArray]) -> None:
        """Leaders, collectively: the centre of `keys` starts at `values` (the first leader's
        are written; every group starts from the same weights in one MPI job)."""
        by_dtype: Dict[str, List[int]] = {}
        for key, value in zip(keys, values):
            if value.context.device_type not in HOST_DEVICES:
                raise MXKVError(
                    f"MXKV_TRANSPORT=rma reads and moves the centre in host memory, "
                    f"and the weights of key {key!r} are on {value.context}: use "
                    "MXKV_TRANSPORT=ps for weights on GPUs"
                )
        for i, value in enumerate(values):
            by_dtype.setdefault(np.dtype(value.dtype).name, []).append(i)
        for dtype, chosen in sorted(by_dtype.items()):
            starts = np.cumsum([0] + [values[i].size for i in chosen])
            array = RemoteArray(self._leaders, int(starts[-1]), dtype, range(self._leaders.size))
            self._arrays.append(array)
            for i, start in zip(chosen, starts):
                self._places[keys[i]] = (array, int(start))
            if self._leaders.rank == 0:
                pieces = [(int(s), values[i]) for i, s in zip(chosen, starts)]
                self._charged(functools.partial(array.write, pieces))
            array.barrier()

    def read(self, keys: Sequence[Key], outs: Sequence[mx.nd.NDArray]) -> None:
        """outs = the centre of each key (each element as it is now)."""
        self._charged(lambda: sum(a.read(p) for a, p in self._pieces(keys, outs)))

    def read_then_add(
        self,
        keys: Sequence[Key],
        outs: Sequence[mx.nd.NDArray],
        differences: Callable[[List[int]], List[mx.nd.NDArray]],
    ) -> None:
        """outs = the centre of each key, then the centre += what `differences(indices)`
        makes of each read batch (about PACE_BYTES, arrays shaped as `outs`, not touched
        again until this returns). A stream both ways: BATCHES_AHEAD batches' reads are in
        flight while the differences of the batches read so far go out, and nothing waits
        for the holders before the end (waiting after each batch cost a round trip through
        the link's queue, full of the other direction's data, every batch). For
        asynchronous EASGD (another group may move a key between its read and its add,
        pipelined or not); the differences are computed on arrays nothing else touches."""
        batches = paced(outs)

        def of(batch: List[int], arrays: Sequence[mx.nd.NDArray]):
            return self._pieces([keys[i] for i in batch], [arrays[i] for i in batch])

        def transfers() -> int:
            # the remote arrays of each batch whose reads are in flight
            reading: Deque[list] = deque()

            def start_reading(b: int) -> int:
                pieces = of(batches[b], outs)
                reading.append([a for a, _ in pieces])
                # the first waits for MXNet's engine; later ones overlap the differences
                return sum(a.start_read(p, ready=b > 0) for a, p in pieces)

            moved = sum(start_reading(b) for b in range(min(BATCHES_AHEAD, len(batches))))
            for b, batch in enumerate(batches):
                for array in reading.popleft():
                    array.finish_read()
                if b + BATCHES_AHEAD < len(batches):
                    moved += start_reading(b + BATCHES_AHEAD)
                added = differences(batch)
                moved += sum(
                    a.start_accumulate(p, ready=True)
                    for a, p in self._pieces([keys[i] for i in batch], added)
                )
            for array in self._arrays:
                array.complete()
            return moved

        self._charged(transfers)

    def add(self, keys: Sequence[Key], values: Sequence[mx.nd.NDArray]) -> None:
        """The centre of each key += values (element-wise atomic)."""
        self._charged(lambda: sum(a.accumulate(p) for a, p in self._pieces(keys, values)))

    def write(self, keys: Sequence[Key], values: Sequence[mx.nd.NDArray]) -> None:
        """The centre of each key = values (restoring a checkpoint: nobody else moves it)."""
        self._charged(lambda: sum(a.write(p) for a, p in self._pieces(keys, values)))

    def barrier(self) -> None:
        """Leaders: waits for the other leaders (synchronous EASGD's phases)."""
        self._leaders.Barrier()

    def _charged(self, transfer: Callable[[], int]) -> None:
        """Runs `transfer` (which returns the bytes it moved across groups), then waits out
        what the emulated link would still take for them."""
        started = time.monotonic()
        moved = transfer()
        if self._throttle is not None:
            self._throttle.wait_since(started, moved)

    def close(self) -> None:
        """Leaders, collectively: frees the windows (after the progress thread ended)."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        for array in self._arrays:
            array.close()
        self._arrays, self._places = [], {}
        if self._leaders:  # (MPI.COMM_NULL, false, elsewhere)
            self._leaders.Free()

    def _pieces(self, keys: Sequence[Key], arrays: Sequence[mx.nd.NDArray]):
        """[(remote array, [(start, local array), ...]), ...] grouped by remote array."""
        grouped: Dict[int, Tuple[RemoteArray, list]] = {}
        for key, local in zip(keys, arrays):
            remote, start = self._places[key]
            grouped.setdefault(id(remote), (remote, []))[1].append((start, local))
        return list(grouped.values())
