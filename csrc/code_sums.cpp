#include "code_sums.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "one_bit.h"

namespace mxkv {

namespace {

constexpr uint32_t kExactIntegers = 1u << 24;  // float32 holds every integer below this

uint32_t base_of(int groups) { return 2 * static_cast<uint32_t>(groups) + 1; }

}  // namespace

size_t digits_per_word(int groups) {
  if (groups < 1) throw std::invalid_argument("digits_per_word: groups must be >= 1");
  const uint32_t base = base_of(groups);
  size_t digits = 0;
  for (uint64_t span = base; span <= kExactIntegers; span *= base) ++digits;
  if (digits == 0) throw std::invalid_argument("digits_per_word: too many groups for a word");
  return digits;
}

void pack_2bit_digits(const float* values, float* residual, size_t n, float threshold, int groups,
                      float* packed) {
  const size_t k = digits_per_word(groups);
  const uint32_t base = base_of(groups);
  for (size_t word = 0, start = 0; start < n; ++word, start += k) {
    const size_t m = std::min(k, n - start);
    uint32_t packed_digits = 0, place = 1;
    for (size_t j = 0; j < m; ++j) {  // the arithmetic of quantize_2bit (two_bit.cpp)
      const float x = residual[start + j] + values[start + j];
      const uint32_t up = x >= threshold, down = x <= -threshold;
      residual[start + j] =
          (x - static_cast<float>(up) * threshold) + static_cast<float>(down) * threshold;
      packed_digits += (1 + up - down) * place;
      place *= base;
    }
    packed[word] = static_cast<float>(packed_digits);
  }
}

void unpack_2bit_digit_sums(const float* summed, size_t n, float threshold, int groups,
                            double scale, float* out) {
  const size_t k = digits_per_word(groups);
  const uint32_t base = base_of(groups);
  const float step = static_cast<float>(threshold * scale);
  for (size_t word = 0, start = 0; start < n; ++word, start += k) {
    uint32_t digits = static_cast<uint32_t>(std::lround(summed[word]));
    const size_t m = std::min(k, n - start);
    for (size_t j = 0; j < m; ++j) {
      out[start + j] = static_cast<float>(static_cast<int>(digits % base) - groups) * step;
      digits /= base;
    }
  }
}

size_t one_bit_slot_words(size_t n) { return (one_bit_bytes(n) + 2) / 3; }

void pack_1bit_slot(const float* values, float* residual, size_t n, int group, int groups,
                    float* words) {
  const size_t slot = one_bit_slot_words(n);
  std::vector<uint8_t> codes(slot * 3, 0);
  quantize_1bit(values, residual, n, codes.data());
  std::fill(words, words + slot * static_cast<size_t>(groups), 0.0f);
  float* mine = words + slot * static_cast<size_t>(group);
  for (size_t w = 0; w < slot; ++w)
    mine[w] = static_cast<float>(codes[3 * w] | (codes[3 * w + 1] << 8) |
                                 (static_cast<uint32_t>(codes[3 * w + 2]) << 16));
}

void unpack_1bit_slots(const float* summed, size_t n, int groups, double scale, float* out) {
  const size_t slot = one_bit_slot_words(n);
  std::vector<std::vector<uint8_t>> codes(static_cast<size_t>(groups),
                                          std::vector<uint8_t>(slot * 3));
  std::vector<const uint8_t*> sources;
  for (int g = 0; g < groups; ++g) {
    const float* words = summed + slot * static_cast<size_t>(g);
    uint8_t* bytes = codes[static_cast<size_t>(g)].data();
    for (size_t w = 0; w < slot; ++w) {
      const uint32_t word = static_cast<uint32_t>(std::lround(words[w]));
      bytes[3 * w] = static_cast<uint8_t>(word);
      bytes[3 * w + 1] = static_cast<uint8_t>(word >> 8);
      bytes[3 * w + 2] = static_cast<uint8_t>(word >> 16);
    }
    sources.push_back(bytes);
  }
  decode_sum_1bit(sources, n, scale, out);
}

}  // namespace mxkv
