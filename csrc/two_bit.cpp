#include "two_bit.h"

#include <cstring>
#include <vector>

#include "sparse_rows.h"
#include "tensor_collectives.h"

namespace mxkv {

void quantize_2bit(const float* values, float* residual, size_t n, float threshold,
                   uint8_t* codes) {
  std::memset(codes, 0, two_bit_bytes(n));
  for (size_t i = 0; i < n; ++i) {
    float r = residual[i] + values[i];
    uint8_t code = 0;
    if (r >= threshold) {
      code = 1;
      r -= threshold;
    } else if (r <= -threshold) {
      code = 2;
      r += threshold;
    }
    residual[i] = r;
    codes[i / 4] |= static_cast<uint8_t>(code << (2 * (i % 4)));
  }
}

void add_dequantized_2bit(const uint8_t* codes, size_t n, float threshold, float* out) {
  const float value_of[4] = {0.0f, threshold, -threshold, 0.0f};
  for (size_t i = 0; i < n; ++i) out[i] += value_of[(codes[i / 4] >> (2 * (i % 4))) & 3];
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
  std::memset(data, 0, count * sizeof(float));
  for (int r = 0; r < p; ++r) add_dequantized_2bit(all.data() + r * block, count, threshold, data);
  scale_in_place(data, count, scale);
  return Status::kOk;
}

}  // namespace mxkv
