"""MXNet's 2-bit gradient compression on the allreduce (Hybrid.set_gradient_compression):
every dense float32 value a rank pushes (the sum over its devices, as a dist_sync worker
pushes it) is quantised with its residual kept (error feedback), and the ranks' codes are
summed (csrc/two_bit.h, reading and writing the NDArrays in place): the sum over ranks of
the dequantised values, as dist_sync's servers compute it, on every rank. Other dtypes
and row_sparse values go through uncompressed."""
from typing import Sequence

import numpy as np

from ..errors import MXKVError
from . import row_sparse
from .collectives import Arrays, Key, TensorCollectives

DEFAULT_THRESHOLD = 0.5  # MXNet's


def parse_compression(params: dict) -> float:
    """MXNet's compression_params -> the 2-bit threshold; a clear error for anything else."""
    if not isinstance(params, dict) or "type" not in params:
        raise MXKVError("set_gradient_compression takes a dict with a 'type', e.g. "
                        "{'type': '2bit', 'threshold': 0.5}")
    unknown = set(params) - {"type", "threshold"}
    if params["type"] != "2bit" or unknown:
        raise MXKVError(f"set_gradient_compression: {params!r}: the hybrid kvstore takes "
                        "MXNet's {'type': '2bit', 'threshold': t} (t > 0, default 0.5)")
    threshold = float(params.get("threshold", DEFAULT_THRESHOLD))
    if not threshold > 0:
        raise MXKVError(f"set_gradient_compression: threshold {threshold} must be above 0")
    return threshold


class TwoBitReducer:
    """Reduces like TensorCollectives.allreduce, dense float32 values 2-bit compressed."""

    def __init__(self, collectives: TensorCollectives, threshold: float):
        self._collectives = collectives
        self.threshold = threshold

    def residual(self, key: Key) -> np.ndarray:
        """This rank's residual of `key` (what quantisation has not sent yet), flat."""
        return self._collectives.residual_2bit(key)

    def allreduce(self, op: str, keys: Sequence[Key], inputs: Sequence[Arrays],
                  outputs: Sequence[Arrays], average: bool) -> None:
        compressed = [i for i, copies in enumerate(inputs)
                      if copies[0].dtype == np.float32 and not row_sparse.is_row_sparse(copies[0])]
        others = [i for i in range(len(keys)) if i not in set(compressed)]
        if others:
            self._collectives.allreduce(op, [keys[i] for i in others], [inputs[i] for i in others],
                                        [outputs[i] for i in others], average)
        if compressed:
            self._collectives.allreduce_2bit(op, [keys[i] for i in compressed],
                                             [inputs[i] for i in compressed],
                                             [outputs[i] for i in compressed], average,
                                             self.threshold)
