// bfloat16: the upper 16 bits of an IEEE float32 (8-bit exponent, 7-bit
// mantissa). GCC 12 has no arithmetic on __bf16, so conversions are written
// out: float -> bfloat16 rounds to nearest even, NaN stays NaN (branch-free,
// so loops of it vectorise).
#pragma once

#include <cstdint>
#include <cstring>

namespace mxkv {

inline uint16_t bfloat16_bits(uint32_t f32_bits) {
  const uint32_t rounded = (f32_bits + 0x7fffu + ((f32_bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (f32_bits >> 16) | 0x40u;
  return static_cast<uint16_t>((f32_bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

struct bfloat16 {
  uint16_t bits;

  bfloat16() = default;
  explicit bfloat16(float value) {
    uint32_t u;
    std::memcpy(&u, &value, sizeof u);
    bits = bfloat16_bits(u);
  }
  explicit operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float value;
    std::memcpy(&value, &u, sizeof value);
    return value;
  }
};
static_assert(sizeof(bfloat16) == 2);

}  // namespace mxkv
