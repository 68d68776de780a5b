"""MXNet's 2-bit gradient compression on the allreduce (Hybrid.set_gradient_compression):
every dense float32 value a rank pushes (the sum over its devices, as a dist_sync worker
pushes it) is quantised with its residual kept here (error feedback), and the ranks' codes are
summed (csrc/two_bit.h): the sum over ranks of the dequantised values, as dist_sync's
servers compute it, on every rank. Other dtypes and row_sparse values go through uncompressed."""
from typing import Dict, Sequence

import mxnet as mx
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
    """Reduces like TensorCollectives.allreduce, float32 values 2-bit compressed."""

    def __init__(self, collectives: TensorCollectives, threshold: float):
        self._collectives = collectives
        self.threshold = threshold
        self._residuals: Dict[Key, np.ndarray] = {}

    def residual(self, key: Key) -> np.ndarray:
        """This rank's residual of `key` (what quantisation has not sent yet)."""
        return self._residuals[key]

    def allreduce(self, op: str, keys: Sequence[Key], inputs: Sequence[Arrays],
                  outputs: Sequence[Arrays], average: bool) -> None:
        compressed = [i for i, copies in enumerate(inputs)
                      if copies[0].dtype == np.float32 and not row_sparse.is_row_sparse(copies[0])]
        others = [i for i in range(len(keys)) if i not in set(compressed)]
        if others:
            row_sparse.allreduce(self._collectives, op, [keys[i] for i in others],
                                 [inputs[i] for i in others], [outputs[i] for i in others],
                                 average)
        if not compressed:
            return
        values = [_device_sum(inputs[i]) for i in compressed]
        for i, value in zip(compressed, values):
            if keys[i] not in self._residuals:
                self._residuals[keys[i]] = np.zeros(value.size, np.float32)
        flat = np.concatenate([v.ravel() for v in values])
        residual = np.concatenate([self._residuals[keys[i]] for i in compressed])
        scale = 1.0 / self._collectives.comm.size if average else 1.0
        self._collectives.two_bit_sum(op, [keys[i] for i in compressed], flat, residual,
                                      self.threshold, scale)
        start = 0
        for i, value in zip(compressed, values):
            end = start + value.size
            self._residuals[keys[i]] = residual[start:end].copy()
            result = mx.nd.array(flat[start:end].reshape(value.shape), dtype=np.float32)
            for out in outputs[i]:
                result.copyto(out)
            start = end


def _device_sum(copies: Arrays) -> np.ndarray:
    """The sum of a key's per-device arrays, as float32 numpy."""
    total = copies[0] if len(copies) == 1 else mx.nd.add_n(*[c.copyto(mx.cpu()) for c in copies])
    return np.ascontiguousarray(total.asnumpy(), dtype=np.float32)
