"""Mode sync's gradient compression across groups (set_gradient_compression): each leader
quantises its group's float32 sum, the residual kept (error feedback), and writes the
codes into float32 words whose sum over the groups, which is all the dist_sync servers
compute, still decodes exactly (csrc/code_sums.h):
- 2bit (MXNet's arithmetic): digits in base 2 groups + 1, summed without carry; with 2
  groups a word carries 10 values, 10x fewer bytes than float32, both ways;
- 1bit (1-bit SGD's): each group's code bytes, 3 a word, in its own slot of the words
  (zeros elsewhere), so the sum is every group's codes; 2 groups: 3.3 bits a value.
Every leader pulls the summed words and decodes the sum over groups of the quantised
group sums."""

from typing import Dict, Tuple

import mxnet as mx
import numpy as np

from ..comm import _C
from ..comm.compression_params import Compression
from .client import ParameterServer


class SummedCodes:
    def __init__(self, compression: Compression, group: int, groups: int):
        self.compression = compression
        self._residuals: Dict[Tuple, np.ndarray] = {}
        self._words: Dict[Tuple, mx.nd.NDArray] = {}
        if compression.type == "2bit":
            threshold = compression.threshold
            self._word_count = lambda n: -(-n // _C.digits_per_word(groups))
            self._pack = lambda values, residual, words: _C.pack_2bit_digits(
                values, residual, threshold, groups, words
            )
            self._unpack = lambda words, out: _C.unpack_2bit_digit_sums(
                words, threshold, groups, 1.0, out
            )
        else:
            self._word_count = lambda n: groups * _C.one_bit_slot_words(n)
            self._pack = lambda values, residual, words: _C.pack_1bit_slot(
                values, residual, group, groups, words
            )
            self._unpack = lambda words, out: _C.unpack_1bit_slots(words, groups, 1.0, out)

    def sum_across_groups(
        self, ps: ParameterServer, layout_id: Tuple, buffer: mx.nd.NDArray
    ) -> None:
        """`buffer` (float32, this group's sum) becomes the sum over all groups of their
        quantised sums; `layout_id` names the buffer (its residual and server keys). The
        kernels read and write the NDArrays in place."""
        if layout_id not in self._words:
            self._residuals[layout_id] = np.zeros(buffer.size, np.float32)
            self._words[layout_id] = mx.nd.zeros((self._word_count(buffer.size),), dtype=np.float32)
        words = self._words[layout_id]
        self._pack(buffer.handle.value, self._residuals[layout_id], words.handle.value)
        ps.sum_across_groups(ps.chunks_for(layout_id, [words]))
        self._unpack(words.handle.value, buffer.handle.value)
