// The compressions an allreduce can quantise with, error feedback in each: MXNet's 2-bit
// (two_bit.h) and 1-bit SGD's (one_bit.h), behind one interface for
// TensorCollectives::allreduce_quantised.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mxkv {

struct Quantiser {
  enum class Kind : int { kTwoBit = 0, kOneBit = 1 };
  Kind kind;
  float threshold;  // 2-bit's

  // The bytes the codes of n values take (a whole number of bytes per call of encode).
  size_t code_bytes(size_t n) const;
  // codes = the codes of residual += values (the residual updated: what was not sent).
  void encode(const float* values, float* residual, size_t n, uint8_t* codes) const;
  // out[i] = scale * the sum over k of what codes[k] sent for element i (k's order).
  void decode_sum(const std::vector<const uint8_t*>& codes, size_t n, double scale,
                  float* out) const;
  const char* name() const { return kind == Kind::kTwoBit ? "2bit" : "1bit"; }
};

}  // namespace mxkv
