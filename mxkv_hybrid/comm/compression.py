"""Gradient compression on the allreduce (Hybrid.set_gradient_compression): every dense
float32 value a rank pushes (the sum over its devices, as a dist_sync worker pushes it;
under the hierarchical allreduce, its group's sum) is quantised with its residual kept
(error feedback), and the codes are summed (csrc/quantiser.h, reading and writing the
NDArrays in place), the same bits on every rank. '2bit' is MXNet's compression, whose flat
result is the sum dist_sync's servers compute; '1bit' (this package's, 1-bit SGD's
quantiser) sends a sign a value and, per 256 values, the mean of each sign's values.
Other dtypes and row_sparse values go through uncompressed."""

from typing import Sequence

import numpy as np

from . import row_sparse
from .collectives import Arrays, Key, TensorCollectives
from .compression_params import KINDS, Compression


class QuantisedReducer:
    """Reduces like TensorCollectives.allreduce, dense float32 values compressed."""

    def __init__(self, collectives: TensorCollectives, compression: Compression):
        self._collectives = collectives
        self.compression = compression

    def residual(self, key: Key) -> np.ndarray:
        """This rank's residual of `key` (what quantisation has not sent yet), flat."""
        return self._collectives.quantiser_residual(key)

    def allreduce(
        self,
        op: str,
        keys: Sequence[Key],
        inputs: Sequence[Arrays],
        outputs: Sequence[Arrays],
        average: bool,
    ) -> None:
        compressed = [
            i
            for i, copies in enumerate(inputs)
            if copies[0].dtype == np.float32 and not row_sparse.is_row_sparse(copies[0])
        ]
        others = [i for i in range(len(keys)) if i not in set(compressed)]
        if others:
            self._collectives.allreduce(
                op,
                [keys[i] for i in others],
                [inputs[i] for i in others],
                [outputs[i] for i in others],
                average,
            )
        if compressed:
            self._collectives.allreduce_quantised(
                op,
                [keys[i] for i in compressed],
                [inputs[i] for i in compressed],
                [outputs[i] for i in compressed],
                average,
                KINDS[self.compression.type],
                self.compression.threshold,
            )
