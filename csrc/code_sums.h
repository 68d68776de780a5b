// 2-bit codes that a parameter server can sum although it only adds floats (mode sync's
// compression across groups). Each value is quantised as MXNet's 2-bit does (two_bit.h:
// +t, -t or 0, the rest kept in the residual), its code c in {-1, 0, +1} becomes the digit
// c + 1, and the digits of `digits_per_word(groups)` consecutive values are written in
// base B = 2 groups + 1 into one float32, an integer below 2^24. The servers add the
// groups' words: digit sums stay below B (no carry) and every partial sum is an integer
// below 2^24, exact in float32, so each word of the sum holds, digit by digit, the sum of
// the groups' digits, which decodes to the sum of their quantised values:
// (digit sum - groups) t. Two groups: 10 values a word (3.2 bits a value, 10x less than
// float32, both ways); three: 8; five: 6.
//
// 1-bit codes (one_bit.h: a sign a value and two means per block) cannot be summed so:
// decoding needs each group's own means. Each group writes its code bytes, 3 to a float32
// word (an integer below 2^24), into its own slot of the words and zeros elsewhere; the
// servers' sum of the groups' words is then every group's slot at once, and every leader
// decodes all of them (the sum over groups of their 1-bit values, in group order). Two
// groups: 2 x 1.25 x 4/3 = 3.3 bits a value, pushed and pulled.
#pragma once

#include <cstddef>

namespace mxkv {

// Values one float32 word carries when `groups` groups' words are summed.
size_t digits_per_word(int groups);

inline size_t packed_words(size_t n, int groups) {
  const size_t k = digits_per_word(groups);
  return (n + k - 1) / k;
}

// packed[0 .. packed_words(n, groups)) = the digits of residual += values, quantised with
// `threshold` (residual updated).
void pack_2bit_digits(const float* values, float* residual, size_t n, float threshold, int groups,
                      float* packed);

// out[i] = scale * (the digit sum of value i in `summed` - groups) * threshold, i < n.
void unpack_2bit_digit_sums(const float* summed, size_t n, float threshold, int groups,
                            double scale, float* out);

// Words of one group's slot of 1-bit codes of n values.
size_t one_bit_slot_words(size_t n);

// words[0 .. groups x one_bit_slot_words(n)) = zeros, but for `group`'s slot: the 1-bit
// codes of residual += values (residual updated).
void pack_1bit_slot(const float* values, float* residual, size_t n, int group, int groups,
                    float* words);

// out[i] = scale * the sum over the groups' slots of the 1-bit values they encode, i < n.
void unpack_1bit_slots(const float* summed, size_t n, int groups, double scale, float* out);

}  // namespace mxkv
