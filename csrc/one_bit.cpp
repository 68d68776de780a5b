#include "one_bit.h"

#include <algorithm>
#include <cstring>

namespace mxkv {

namespace {

constexpr size_t kLanes = 8;  // each side's sum is taken in 8 float lanes (vectorised), whose
                              // sums are then added in double

// Four float lanes, in the vector registers GCC and Clang map them to (SSE, NEON).
typedef float Lanes4 __attribute__((vector_size(16)));

// sums[1][l] = the sum of the values x[i] >= 0 with i % 8 == l, in i's order; sums[0][l] the
// same of the negative ones (a tail that is not a whole 8 as if zeros followed).
void side_sums(const float* x, size_t m, float sums[2][kLanes]) {
  const Lanes4 zero = {0.0f, 0.0f, 0.0f, 0.0f};
  Lanes4 positive[2] = {zero, zero}, negative[2] = {zero, zero};
  size_t i = 0;
  for (; i + kLanes <= m; i += kLanes) {
    for (int half = 0; half < 2; ++half) {
      Lanes4 v;
      std::memcpy(&v, x + i + 4 * half, sizeof(v));
      positive[half] += v >= zero ? v : zero;
      negative[half] += v >= zero ? zero : v;
    }
  }
  for (int half = 0; half < 2; ++half)
    for (int l = 0; l < 4; ++l) {
      sums[1][4 * half + l] = positive[half][l];
      sums[0][4 * half + l] = negative[half][l];
    }
  for (size_t lane = 0; i < m; ++i, ++lane) sums[x[i] >= 0.0f][lane] += x[i];
}

// Eight 0/1 bytes -> one byte, bit k from byte k.
inline uint8_t pack_bits(const uint8_t* flags) {
  uint64_t eight;
  std::memcpy(&eight, flags, sizeof(eight));
  return static_cast<uint8_t>((eight * 0x0102040810204080ULL) >> 56);
}

}  // namespace

void quantize_1bit(const float* values, float* residual, size_t n, uint8_t* codes) {
  alignas(16) uint8_t positive[kOneBitBlock];
  for (size_t start = 0; start < n; start += kOneBitBlock) {
    const size_t m = std::min(kOneBitBlock, n - start);
    float* __restrict r = residual + start;
    const float* __restrict v = values + start;
    for (size_t i = 0; i < m; ++i) r[i] += v[i];
    for (size_t i = 0; i < m; ++i) positive[i] = r[i] >= 0.0f;
    float sums[2][kLanes];  // of the negative values, of the others: lane by lane
    side_sums(r, m, sums);
    size_t positives = 0;
    for (size_t j = 0; j < m; ++j) positives += positive[j];
    const size_t counts[2] = {m - positives, positives};
    float sent[2];  // each side's mean: what its values are sent as
    for (int side = 0; side < 2; ++side) {
      double total = sums[side][0];
      for (size_t lane = 1; lane < kLanes; ++lane) total += static_cast<double>(sums[side][lane]);
      sent[side] =
          counts[side] ? static_cast<float>(total / static_cast<double>(counts[side])) : 0.0f;
    }
    for (size_t i = 0; i < m; ++i) r[i] -= positive[i] ? sent[1] : sent[0];
    std::fill(positive + m, positive + ((m + 7) / 8) * 8, uint8_t{0});
    uint8_t* block = codes + start / kOneBitBlock * kOneBitBlockBytes;
    std::memcpy(block, sent, sizeof(sent));
    uint8_t* bits = block + sizeof(sent);
    std::memset(bits, 0, kOneBitBlock / 8);
    for (size_t b = 0; b < (m + 7) / 8; ++b) bits[b] = pack_bits(positive + 8 * b);
  }
}

void decode_sum_1bit(const std::vector<const uint8_t*>& codes, size_t n, double scale, float* out) {
  typedef int32_t Ints4 __attribute__((vector_size(16)));
  const Ints4 low_bits = {1, 2, 4, 8}, high_bits = {16, 32, 64, 128};
  const float s = static_cast<float>(scale);
  Lanes4 sum[kOneBitBlock / 4];
  for (size_t start = 0; start < n; start += kOneBitBlock) {
    const size_t m = std::min(kOneBitBlock, n - start);
    const size_t offset = start / kOneBitBlock * kOneBitBlockBytes;
    for (size_t k = 0; k < codes.size(); ++k) {  // each value its side's mean, in k's order
      float sent[2];
      std::memcpy(sent, codes[k] + offset, sizeof(sent));
      const Lanes4 negative = {sent[0], sent[0], sent[0], sent[0]};
      const Lanes4 positive = {sent[1], sent[1], sent[1], sent[1]};
      const uint8_t* bits = codes[k] + offset + sizeof(sent);
      for (size_t b = 0; b < (m + 7) / 8; ++b) {
        const Ints4 byte = {bits[b], bits[b], bits[b], bits[b]};
        const Lanes4 low = (byte & low_bits) != 0 ? positive : negative;
        const Lanes4 high = (byte & high_bits) != 0 ? positive : negative;
        sum[2 * b] = k == 0 ? low : sum[2 * b] + low;
        sum[2 * b + 1] = k == 0 ? high : sum[2 * b + 1] + high;
      }
    }
    if (scale != 1.0) {
      const Lanes4 by = {s, s, s, s};
      for (size_t q = 0; q < (m + 3) / 4; ++q) sum[q] *= by;
    }
    std::memcpy(out + start, sum, m * sizeof(float));
  }
}

}  // namespace mxkv
