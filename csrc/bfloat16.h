// bfloat16: the upper 16 bits of an IEEE float32 (8-bit exponent, 7-bit
// mantissa). GCC 12 has no arithmetic on __bf16, so conversions are written
// out: float -> bfloat16 rounds to nearest even, NaN stays NaN.
#pragma once

#include <cstdint>
#include <cstring>

namespace mxkv {

struct bfloat16 {
  uint16_t bits;

  bfloat16() = default;
  explicit bfloat16(float value) {
    uint32_t u;
    std::memcpy(&u, &value, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
      bits = static_cast<uint16_t>(u >> 16);
    }
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
