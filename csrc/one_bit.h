// 1-bit compression with error feedback (1-bit SGD, Seide et al. 2014): each value is
// added to its residual; every block of kOneBitBlock values sends a sign bit a value and
// two float32s, the mean of the block's negative values and the mean of the others, and
// each value is sent as its side's mean (the least squared error a sign can give); the
// residual keeps the rest. 40 bytes carry 256 values: 1.25 bits a value, 25.6x less than
// float32. Unlike 2-bit's fixed threshold the means follow the gradients' size, so
// nothing waits for a residual to reach a threshold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mxkv {

constexpr size_t kOneBitBlock = 256;
constexpr size_t kOneBitBlockBytes = 2 * sizeof(float) + kOneBitBlock / 8;

inline size_t one_bit_bytes(size_t n) {
  return (n + kOneBitBlock - 1) / kOneBitBlock * kOneBitBlockBytes;
}

// codes[0 .. one_bit_bytes(n)) = the blocks of residual += values (residual updated). A
// side's values are summed in 8 float lanes (element i in lane i % 8, in order), and the
// lanes' sums added in double.
void quantize_1bit(const float* values, float* residual, size_t n, uint8_t* codes);

// out[i] = scale * the sum over k of the value codes[k] encode for element i (its side's
// mean in its block), i < n, added in k's order.
void decode_sum_1bit(const std::vector<const uint8_t*>& codes, size_t n, double scale, float* out);

}  // namespace mxkv
