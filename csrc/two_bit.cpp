#include "two_bit.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "sparse_rows.h"
#include "tensor_collectives.h"

namespace mxkv {

void quantize_2bit(const float* values, float* residual, size_t n, float threshold,
                   uint8_t* codes) {
  auto code_of = [threshold](float& r) -> uint8_t {  // branch-free: the loop vectorises
    const bool up = r >= threshold, down = r <= -threshold;
    r -= up ? threshold : (down ? -threshold : 0.0f);
    return static_cast<uint8_t>(up | (down << 1));
  };
  const size_t whole = n / 4;
  for (size_t b = 0; b < whole; ++b) {
    uint8_t byte = 0;
    for (int k = 0; k < 4; ++k) {
      float r = residual[4 * b + k] + values[4 * b + k];
      byte |= static_cast<uint8_t>(code_of(r) << (2 * k));
      residual[4 * b + k] = r;
    }
    codes[b] = byte;
  }
  if (whole * 4 < n) {
    uint8_t byte = 0;
    for (size_t i = whole * 4; i < n; ++i) {
      float r = residual[i] + values[i];
      byte |= static_cast<uint8_t>(code_of(r) << (2 * (i % 4)));
      residual[i] = r;
    }
    codes[whole] = byte;
  }
}

DequantizeTable::DequantizeTable(float threshold) {
  const float value_of[4] = {0.0f, threshold, -threshold, 0.0f};
  for (int byte = 0; byte < 256; ++byte)
    for (int k = 0; k < 4; ++k) values[byte][k] = value_of[(byte >> (2 * k)) & 3];
}

void add_dequantized_2bit(const DequantizeTable& table, const uint8_t* codes, size_t first,
                          size_t n, float* out) {
  // first is a multiple of 4: whole bytes from codes[first / 4]
  const uint8_t* byte = codes + first / 4;
  size_t i = 0;
  for (; i + 4 <= n; i += 4, ++byte) {
    const float* v = table.values[*byte];
    out[i] += v[0];
    out[i + 1] += v[1];
    out[i + 2] += v[2];
    out[i + 3] += v[3];
  }
  for (size_t k = 0; i < n; ++i, ++k) out[i] += table.values[*byte][k];
}

Status TensorCollectives::allreduce_2bit(float* data, float* residual, int64_t count,
                                         float threshold, double scale, uint64_t signature) {
  overlap_.drain();
  if (!signatures_agree(signature)) return Status::kMismatch;
  const int p = size();
  const int64_t block = static_cast<int64_t>(two_bit_bytes(count));
  std::vector<int64_t> offsets(p + 1);
  for (int r = 0; r <= p; ++r) offsets[r] = r * block;
  std::vector<uint8_t> mine(block), all(p * block);
  {
    TimelineSpan span(timeline_, "quantize 2bit", count * 4);
    quantize_2bit(data, residual, count, threshold, mine.data());
  }
  {
    TimelineSpan span(timeline_, "allgather 2bit codes", p * block);
    ring_allgatherv(comm_, workspace_, reinterpret_cast<const char*>(mine.data()), offsets,
                    reinterpret_cast<char*>(all.data()));
  }
  TimelineSpan span(timeline_, "dequantize 2bit", count * 4);
  const DequantizeTable table(threshold);
  constexpr int64_t kChunk = 4096;  // the sum of a chunk stays in cache while every rank adds
  for (int64_t first = 0; first < count; first += kChunk) {
    const int64_t n = std::min(kChunk, count - first);
    std::memset(data + first, 0, n * sizeof(float));
    for (int r = 0; r < p; ++r)
      add_dequantized_2bit(table, all.data() + r * block, first, n, data + first);
  }
  scale_in_place(data, count, scale);
  return Status::kOk;
}

}  // namespace mxkv
