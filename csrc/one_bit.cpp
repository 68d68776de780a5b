#include "one_bit.h"

#include <algorithm>
#include <cstring>

namespace mxkv {

void quantize_1bit(const float* values, float* residual, size_t n, uint8_t* codes) {
  for (size_t start = 0; start < n; start += kOneBitBlock) {
    const size_t m = std::min(kOneBitBlock, n - start);
    float* r = residual + start;
    const float* v = values + start;
    double sums[2] = {0.0, 0.0};  // of the negative values, of the others
    size_t counts[2] = {0, 0};
    for (size_t i = 0; i < m; ++i) {
      r[i] += v[i];
      const bool positive = r[i] >= 0.0f;
      sums[positive] += r[i];
      counts[positive] += 1;
    }
    float sent[2];  // each side's mean: what its values are sent as
    for (int side = 0; side < 2; ++side)
      sent[side] = counts[side] ? static_cast<float>(sums[side] / static_cast<double>(counts[side]))
                                : 0.0f;
    uint8_t* block = codes + start / kOneBitBlock * kOneBitBlockBytes;
    std::memcpy(block, sent, sizeof(sent));
    uint8_t* bits = block + sizeof(sent);
    std::memset(bits, 0, kOneBitBlock / 8);
    for (size_t i = 0; i < m; ++i) {
      const bool positive = r[i] >= 0.0f;
      r[i] -= sent[positive];
      bits[i / 8] |= static_cast<uint8_t>(positive << (i % 8));
    }
  }
}

void decode_sum_1bit(const std::vector<const uint8_t*>& codes, size_t n, double scale,
                     float* out) {
  const float s = static_cast<float>(scale);
  for (size_t start = 0; start < n; start += kOneBitBlock) {
    const size_t m = std::min(kOneBitBlock, n - start);
    const size_t offset = start / kOneBitBlock * kOneBitBlockBytes;
    float* o = out + start;
    for (size_t k = 0; k < codes.size(); ++k) {
      float sent[2];
      std::memcpy(sent, codes[k] + offset, sizeof(sent));
      const uint8_t* bits = codes[k] + offset + sizeof(sent);
      if (k == 0) {
        for (size_t i = 0; i < m; ++i) o[i] = sent[(bits[i / 8] >> (i % 8)) & 1];
      } else {
        for (size_t i = 0; i < m; ++i) o[i] += sent[(bits[i / 8] >> (i % 8)) & 1];
      }
    }
    if (scale != 1.0)
      for (size_t i = 0; i < m; ++i) o[i] *= s;
  }
}

}  // namespace mxkv
