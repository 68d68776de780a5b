#include "two_bit.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace mxkv {

void quantize_2bit(const float* values, float* residual, size_t n, float threshold,
                   uint8_t* codes) {
  // Two passes over chunks that stay in cache: a code a value, then four codes a byte. The
  // first is arithmetic on the comparisons, without branches, so that it vectorises: 1 ns a
  // value here, where selects (not vectorised, mispredicted as residuals spread) took 2-5.
  constexpr size_t kChunk = 4096;  // a multiple of 4
  int32_t code[kChunk];
  for (size_t start = 0; start < n; start += kChunk) {
    const size_t m = std::min(kChunk, n - start);
    float* r = residual + start;
    const float* v = values + start;
    for (size_t i = 0; i < m; ++i) {  // x - t, x + t or x, as MXNet's branches compute it
      const float x = r[i] + v[i];
      const int32_t up = x >= threshold, down = x <= -threshold;
      r[i] = (x - static_cast<float>(up) * threshold) + static_cast<float>(down) * threshold;
      code[i] = up | (down << 1);
    }
    uint8_t* out = codes + start / 4;
    const size_t whole = m / 4;
    for (size_t b = 0; b < whole; ++b)
      out[b] = static_cast<uint8_t>(code[4 * b] | (code[4 * b + 1] << 2) | (code[4 * b + 2] << 4) |
                                    (code[4 * b + 3] << 6));
    if (whole * 4 < m) {
      uint8_t byte = 0;
      for (size_t i = whole * 4; i < m; ++i) byte |= static_cast<uint8_t>(code[i] << (2 * (i % 4)));
      out[whole] = byte;
    }
  }
}

DequantizeTable::DequantizeTable(float threshold) {
  const float value_of[4] = {0.0f, threshold, -threshold, 0.0f};
  for (int byte = 0; byte < 256; ++byte)
    for (int k = 0; k < 4; ++k) values[byte][k] = value_of[(byte >> (2 * k)) & 3];
}

void decode_sum_2bit(const DequantizeTable& table, const std::vector<const uint8_t*>& codes,
                     size_t n, double scale, float* out) {
  const float s = static_cast<float>(scale);
  const size_t whole = n / 4;
  for (size_t b = 0; b < whole; ++b) {  // four values a byte, summed in registers
    float sum[4];
    std::memcpy(sum, table.values[codes[0][b]], sizeof(sum));
    for (size_t k = 1; k < codes.size(); ++k) {
      const float* v = table.values[codes[k][b]];
      for (int j = 0; j < 4; ++j) sum[j] += v[j];
    }
    if (scale != 1.0)
      for (int j = 0; j < 4; ++j) sum[j] *= s;
    std::memcpy(out + 4 * b, sum, sizeof(sum));
  }
  for (size_t i = whole * 4; i < n; ++i) {
    float sum = table.values[codes[0][whole]][i % 4];
    for (size_t k = 1; k < codes.size(); ++k) sum += table.values[codes[k][whole]][i % 4];
    out[i] = scale != 1.0 ? sum * s : sum;
  }
}

}  // namespace mxkv
