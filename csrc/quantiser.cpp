#include "quantiser.h"

#include "one_bit.h"
#include "two_bit.h"

namespace mxkv {

size_t Quantiser::code_bytes(size_t n) const {
  return kind == Kind::kTwoBit ? two_bit_bytes(n) : one_bit_bytes(n);
}

void Quantiser::encode(const float* values, float* residual, size_t n, uint8_t* codes) const {
  if (kind == Kind::kTwoBit) {
    quantize_2bit(values, residual, n, threshold, codes);
  } else {
    quantize_1bit(values, residual, n, codes);
  }
}

void Quantiser::decode_sum(const std::vector<const uint8_t*>& codes, size_t n, double scale,
                           float* out) const {
  if (kind == Kind::kTwoBit) {
    decode_sum_2bit(DequantizeTable(threshold), codes, n, scale, out);
  } else {
    decode_sum_1bit(codes, n, scale, out);
  }
}

}  // namespace mxkv
