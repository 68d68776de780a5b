"""numpy references of the quantisers (csrc/two_bit.h, csrc/one_bit.h), for the workers
that check compression step by step."""

import numpy as np

ONE_BIT_BLOCK = 256  # values a pair of means (csrc/one_bit.h)


def quantise_2bit(x, threshold):
    """MXNet's 2-bit quantiser of float32 x = residual + values: (values sent, new residual)."""
    sent = np.where(x >= threshold, threshold, np.where(x <= -threshold, -threshold, 0))
    return sent.astype(np.float32), (x - sent).astype(np.float32)


def side_mean(values, count):
    """csrc/one_bit.cpp's mean of one side's values (zeros elsewhere): float32 sums in 8
    lanes (element i in lane i % 8, in order), the lanes added in double."""
    lanes = np.zeros((-(-len(values) // 8)) * 8, np.float32)
    lanes[: len(values)] = values
    per_lane = np.cumsum(lanes.reshape(-1, 8), axis=0, dtype=np.float32)[-1]
    total = 0.0
    for lane in per_lane:
        total += float(lane)
    return np.float32(total / count) if count else np.float32(0)


def quantise_1bit(x):
    """1-bit SGD's quantiser of float32 x = residual + values: per block of 256, each value
    sent as the mean of its side (the negative values, the others)."""
    sent = np.empty_like(x)
    for start in range(0, len(x), ONE_BIT_BLOCK):
        block = x[start : start + ONE_BIT_BLOCK]
        positive = block >= 0
        means = [
            side_mean(np.where(side, block, np.float32(0)), int(side.sum()))
            for side in (~positive, positive)
        ]
        sent[start : start + ONE_BIT_BLOCK] = np.where(positive, means[1], means[0])
    return sent, (x - sent).astype(np.float32)
