"""The bytes a rank holds on its device, against its budget: the shards of the tasks it
runs and loads (parameters, gradients, optimizer state, activations, as footprint.py
measured them), and the arrays it keeps for reuse. Holding more than the budget is
refused, never done. Arrays a task gives back are kept for the next task of the same
shapes and dropped when room is needed: fresh memory costs its first touch (about 2 GB/s
here, against 12 GB/s reused), as a GPU's allocator knows. Only the rank's main thread
calls it."""

from collections import OrderedDict
from math import prod
from typing import Dict, Iterable, List, Tuple

import mxnet as mx

from ..errors import MXKVError
from .footprint import FLOAT, describe

Shape = Tuple[int, ...]


class DeviceBudget:
    def __init__(self, limit_bytes: int, ctx: mx.Context):
        self.limit, self.ctx = limit_bytes, ctx
        self.held = 0  # reserved by tasks
        self.kept = 0  # arrays given back, kept for reuse
        self.peak = 0
        self._kept: OrderedDict[int, Tuple[Shape, mx.nd.NDArray]] = OrderedDict()
        self._by_shape: Dict[Shape, List[int]] = {}

    @property
    def resident(self) -> int:
        return self.held + self.kept

    def fits(self, nbytes: int) -> bool:
        return self.held + nbytes <= self.limit

    def reserve(self, nbytes: int, what: str) -> int:
        """Counts `nbytes` as held until release(nbytes), dropping kept arrays to make room;
        refuses beyond the budget."""
        if not self.fits(nbytes):
            raise MXKVError(
                f"{what} needs {describe(nbytes)} but {describe(self.held)} of the "
                f"device budget of {describe(self.limit)} are held"
            )
        while self.resident + nbytes > self.limit:
            self._drop_oldest()
        self.held += nbytes
        self.peak = max(self.peak, self.resident)
        return nbytes

    def release(self, nbytes: int) -> None:
        self.held -= nbytes

    def take(self, shape: Shape) -> mx.nd.NDArray:
        """An array of `shape` on the device (contents undefined): a kept one if there is
        one (its bytes move from kept to the caller's reservation), else a new one."""
        shape = tuple(shape)
        keys = self._by_shape.get(shape)
        if keys:
            _, array = self._kept.pop(keys.pop())
            self.kept -= FLOAT * prod(shape)
            return array
        return mx.nd.empty(shape, self.ctx)

    def give_back(self, arrays: Iterable[mx.nd.NDArray]) -> None:
        """Arrays a task no longer uses (after release of its reservation): kept for reuse
        while they fit beside what is held."""
        for array in arrays:
            nbytes = FLOAT * array.size
            if self.resident + nbytes > self.limit:
                continue
            key = id(array)
            self._kept[key] = (tuple(array.shape), array)
            self._by_shape.setdefault(tuple(array.shape), []).append(key)
            self.kept += nbytes

    def _drop_oldest(self) -> None:
        key, (shape, array) = self._kept.popitem(last=False)
        self._by_shape[shape].remove(key)
        self.kept -= FLOAT * array.size
