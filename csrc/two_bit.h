// MXNet's 2-bit gradient compression (src/kvstore/gradient_compression-inl.h), with the
// same arithmetic: each value is added to its residual; a residual at or above the
// threshold t sends +t and keeps residual - t, one at or below -t sends -t and keeps
// residual + t, any other sends 0 and keeps all of it (error feedback). Four values
// travel in a byte (two bits each: 01 is +t, 10 is -t, 00 is 0); the bit layout is this
// package's, the values decoded are MXNet's.
//
// The reduction over ranks (TensorCollectives::allreduce_quantised, quantiser.h) quantises
// each rank's values, passes every rank's codes around a ring (an allgather: each rank
// sends (p-1) n / 4 bytes, against 2 (p-1)/p 4n for a float32 ring allreduce, p/32 of it)
// and decodes and sums them in rank order on every rank: the sum over ranks of the
// dequantised values, as MXNet's dist_sync servers compute it, bit for bit the same on
// every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mxkv {

inline size_t two_bit_bytes(size_t n) { return (n + 3) / 4; }

// codes[0 .. two_bit_bytes(n)) = the codes of residual += values (residual updated).
void quantize_2bit(const float* values, float* residual, size_t n, float threshold, uint8_t* codes);

// The four values each code byte stands for, for one threshold.
struct DequantizeTable {
  explicit DequantizeTable(float threshold);
  float values[256][4];
};

// out[i] = scale * the sum over k of the value codes[k] encode for element i (+t, -t or
// 0), i < n, added in k's order.
void decode_sum_2bit(const DequantizeTable& table, const std::vector<const uint8_t*>& codes,
                     size_t n, double scale, float* out);

}  // namespace mxkv
