"""Host memory for every model's shards while they do not run: parameters, optimizer
state, fixed parameters, each shard's output and the gradient that comes back for it,
and each epoch's loss sum. One float32 remote array spread over all ranks
(comm/remote_memory.py): any rank loads a shard from it and stores it back with
one-sided MPI, so a shard can run on whichever rank is idle."""

import threading
from math import prod
from typing import Dict, List, Sequence, Tuple

import mxnet as mx

from ..comm.collectives import HOST_DEVICES
from ..comm.remote_memory import RemoteArray
from .footprint import Shape
from .partition import Shard

Region = Tuple[int, Shape]  # (first element, shape)


def shard_arrays(shard: Shard) -> List[Tuple[str, Shape]]:
    """A shard's stored arrays in order: ("param", name), ("state", name, k), ("fixed", name)
    keyed as strings."""
    arrays = []
    for layer in shard.layers:
        for (name, shape), states in zip(layer.trainable, layer.states):
            arrays.append((f"param:{name}", shape))
            arrays.extend((f"state:{name}:{k}", s) for k, s in enumerate(states))
        arrays.extend((f"fixed:{name}", shape) for name, shape in layer.fixed)
    return arrays


class SpillStore:
    """Created collectively by every rank of `comm`, with every model's shards."""

    def __init__(self, comm, models: Sequence[Sequence[Shard]], epochs: Sequence[int]):
        self._regions: List[Dict[str, Region]] = []
        total = 0
        for shards, model_epochs in zip(models, epochs):
            regions: Dict[str, Region] = {}
            arrays = [a for shard in shards for a in shard_arrays(shard)]
            for shard in shards[:-1]:  # its output, and that output's gradient
                shape = shard.layers[-1].output_shape
                arrays += [(f"boundary:{shard.index}", shape), (f"gradient:{shard.index}", shape)]
            arrays.append(("loss", (model_epochs,)))
            for key, shape in arrays:
                regions[key] = (total, shape)
                total += prod(shape)
            self._regions.append(regions)
        self._memory = RemoteArray(comm, total, "float32", list(range(comm.Get_size())))
        self._lock = threading.Lock()  # one transfer at a time (loads run beside compute)
        self.bytes_loaded = 0
        self.bytes_stored = 0

    def shape(self, model: int, key: str) -> Shape:
        return self._regions[model][key][1]

    def load(self, model: int, arrays: Dict[str, mx.nd.NDArray]) -> None:
        """Each array = its stored value (complete on return)."""
        self._move(model, arrays, self._memory.copy_out)  # (the task board keeps writers off)
        self.bytes_loaded += sum(4 * a.size for a in arrays.values())

    def store(self, model: int, arrays: Dict[str, mx.nd.NDArray]) -> None:
        """Each stored value = its array (complete at the holders on return)."""
        self._move(model, arrays, self._memory.write)
        self.bytes_stored += sum(4 * a.size for a in arrays.values())

    def add(self, model: int, arrays: Dict[str, mx.nd.NDArray]) -> None:
        """Each stored value += its array, atomically."""
        self._move(model, arrays, self._memory.accumulate)

    def close(self) -> None:
        """Frees the windows (collective)."""
        self._memory.close()

    def _move(self, model: int, arrays: Dict[str, mx.nd.NDArray], transfer) -> None:
        regions = self._regions[model]
        pieces, staged = [], []
        for key, array in arrays.items():
            start, shape = regions[key]
            if tuple(array.shape) != tuple(shape):
                raise ValueError(f"{key}: array of shape {array.shape}, stored {shape}")
            host = array
            if array.context.device_type not in HOST_DEVICES:  # a GPU: through the host
                host = array.copyto(mx.cpu())
                staged.append((host, array))
            host.wait_to_read()  # its writers are done (and an array loaded into is one a
            #                      finished task gave back: nothing reads it)
            pieces.append((start, host.reshape((-1,))))
        with self._lock:
            transfer(pieces, ready=True)
        if transfer == self._memory.copy_out:
            for host, array in staged:
                host.copyto(array)
