"""Mode sync's gradient compression across groups (set_gradient_compression 2bit): each
leader quantises its group's float32 sum with MXNet's 2-bit quantiser, the residual kept
(error feedback), and writes the codes as digits in base 2 groups + 1 into float32 words
that the dist_sync servers, which only add floats, sum exactly (csrc/code_sums.h). Every
leader pulls the summed words and decodes the sum over groups of the quantised group
sums: with 2 groups a word carries 10 values, 10x fewer bytes than float32, both ways."""
from typing import Dict, Tuple

import mxnet as mx
import numpy as np

from ..comm import _C
from .client import ParameterServer


class SummedCodes:
    def __init__(self, threshold: float, groups: int):
        self.threshold = threshold
        self._groups = groups
        self._residuals: Dict[Tuple, np.ndarray] = {}
        self._words: Dict[Tuple, mx.nd.NDArray] = {}

    def sum_across_groups(self, ps: ParameterServer, layout_id: Tuple,
                          buffer: mx.nd.NDArray) -> None:
        """`buffer` (float32, this group's sum) becomes the sum over all groups of their
        quantised sums; `layout_id` names the buffer (its residual and server keys). The
        kernels read and write the NDArrays in place."""
        if layout_id not in self._words:
            words = -(-buffer.size // _C.digits_per_word(self._groups))
            self._residuals[layout_id] = np.zeros(buffer.size, np.float32)
            self._words[layout_id] = mx.nd.zeros((words,), dtype=np.float32)
        words = self._words[layout_id]
        _C.pack_2bit_digits(buffer.handle.value, self._residuals[layout_id], self.threshold,
                            self._groups, words.handle.value)
        ps.sum_across_groups(ps.chunks_for(layout_id, [words]))
        _C.unpack_2bit_digit_sums(words.handle.value, self.threshold, self._groups, 1.0,
                                  buffer.handle.value)

    def residual(self, layout_id: Tuple) -> np.ndarray:
        """This leader's residual of a buffer (what quantisation has not sent yet)."""
        return self._residuals[layout_id]
