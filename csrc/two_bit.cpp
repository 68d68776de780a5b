#include "two_bit.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "allreduce_ring.h"
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

namespace {

// The sum of a tensor's per-device copies (the one copy itself when there is one).
const float* device_sum(const Tensor& tensor, Workspace& ws) {
  if (tensor.inputs.size() == 1) return reinterpret_cast<const float*>(tensor.inputs.front());
  float* sum = reinterpret_cast<float*>(ws.scratch(tensor.count * sizeof(float)));
  combine_inputs(sum, tensor.inputs, 0, tensor.count);
  return sum;
}

}  // namespace

Status TensorCollectives::allreduce_2bit(const std::vector<TensorRequest>& requests,
                                         uint64_t key_signature,
                                         const std::vector<uint64_t>& residual_keys,
                                         float threshold, bool average) {
  overlap_.drain();
  TensorSet set = resolve_tensors(requests, key_signature);
  uint32_t threshold_bits;
  std::memcpy(&threshold_bits, &threshold, sizeof(threshold_bits));
  if (!signatures_agree((set.signature ^ threshold_bits) & ((uint64_t{1} << 62) - 1)))
    return Status::kMismatch;
  for (size_t t = 0; t < set.tensors.size(); ++t) {
    if (set.tensors[t].dtype != kFloat32)
      throw EntryError(t, "2-bit compression takes float32 arrays only");
  }
  if (hierarchical()) {
    allreduce_2bit_of_group_sums(set, residual_keys, threshold, average);
    return Status::kOk;
  }
  const int p = size();
  std::vector<int64_t> first_code(set.tensors.size() + 1, 0);  // whole bytes per tensor
  for (size_t t = 0; t < set.tensors.size(); ++t)
    first_code[t + 1] = first_code[t] + static_cast<int64_t>(two_bit_bytes(set.tensors[t].count));
  const int64_t block = first_code.back();
  std::vector<uint8_t> all(p * block);
  uint8_t* mine = all.data() + rank() * block;
  {
    TimelineSpan span(timeline_, "quantize 2bit", block * 16);
    for (size_t t = 0; t < set.tensors.size(); ++t) {
      const Tensor& tensor = set.tensors[t];
      std::vector<float>& residual = residuals_[residual_keys[t]];
      residual.resize(tensor.count, 0.0f);
      quantize_2bit(device_sum(tensor, workspace_), residual.data(), tensor.count, threshold,
                    mine + first_code[t]);
    }
  }
  {
    TimelineSpan span(timeline_, "allgather 2bit codes", p * block);
    std::vector<int64_t> offsets(p + 1);
    for (int r = 0; r <= p; ++r) offsets[r] = r * block;
    ring_allgatherv(comm_, workspace_, reinterpret_cast<const char*>(mine), offsets,
                    reinterpret_cast<char*>(all.data()));
  }
  TimelineSpan span(timeline_, "dequantize 2bit", block * 16);
  const DequantizeTable table(threshold);
  const double scale = average ? 1.0 / p : 1.0;
  constexpr int64_t kChunk = 4096;  // the sum of a chunk stays in cache while every rank adds
  for (size_t t = 0; t < set.tensors.size(); ++t) {
    const Tensor& tensor = set.tensors[t];
    float* out = reinterpret_cast<float*>(tensor.outputs.front());
    for (int64_t first = 0; first < tensor.count; first += kChunk) {
      const int64_t n = std::min(kChunk, tensor.count - first);
      std::memset(out + first, 0, n * sizeof(float));
      for (int r = 0; r < p; ++r)
        add_dequantized_2bit(table, all.data() + r * block + first_code[t], first, n, out + first);
      scale_in_place(out + first, n, scale);
    }
    for (size_t o = 1; o < tensor.outputs.size(); ++o)
      std::memcpy(tensor.outputs[o], out, tensor.count * sizeof(float));
  }
  return Status::kOk;
}

void TensorCollectives::allreduce_2bit_of_group_sums(const TensorSet& set,
                                                     const std::vector<uint64_t>& residual_keys,
                                                     float threshold, bool average) {
  // The tensors as one vector, each its sum over this rank's devices.
  int64_t total = 0;
  std::vector<int64_t> first(set.tensors.size() + 1, 0);  // each tensor's place in it
  for (size_t t = 0; t < set.tensors.size(); ++t) first[t + 1] = total += set.tensors[t].count;
  group_sum_.resize(total);
  float* flat = group_sum_.data();
  for (size_t t = 0; t < set.tensors.size(); ++t)
    combine_inputs(flat + first[t], set.tensors[t].inputs, 0, set.tensors[t].count);
  {
    TimelineSpan span(timeline_, "reduce-scatter in group", total * 4);
    ring_reduce_scatter<float, float>(*local_, workspace_, flat, total, 1.0);
  }
  // This rank's slice of its group's sum, quantised piece by piece (one piece per tensor
  // it crosses, its codes from a whole byte on): the same pieces on every rank of `cross`.
  const RingBlock slice = ring_owned_block(total, local_->size(), local_->rank());
  struct Piece {
    size_t tensor;
    int64_t from, to, code;  // [from, to) of the whole vector; its codes' first byte
  };
  std::vector<Piece> pieces;
  int64_t block = 0;
  for (size_t t = 0; t < set.tensors.size(); ++t) {
    const int64_t from = std::max(first[t], slice.first);
    const int64_t to = std::min(first[t + 1], slice.first + slice.length);
    if (from >= to) continue;
    pieces.push_back({t, from, to, block});
    block += static_cast<int64_t>(two_bit_bytes(to - from));
  }
  const int groups = cross_->size();
  group_codes_.resize(groups * block);
  uint8_t* mine = group_codes_.data() + cross_->rank() * block;
  {
    TimelineSpan span(timeline_, "quantize 2bit", block * 16);
    for (const Piece& piece : pieces) {
      std::vector<float>& residual = residuals_[residual_keys[piece.tensor]];
      residual.resize(set.tensors[piece.tensor].count, 0.0f);
      quantize_2bit(flat + piece.from, residual.data() + (piece.from - first[piece.tensor]),
                    piece.to - piece.from, threshold, mine + piece.code);
    }
  }
  {
    TimelineSpan span(timeline_, "allgather 2bit codes across groups", groups * block);
    std::vector<int64_t> offsets(groups + 1);
    for (int g = 0; g <= groups; ++g) offsets[g] = g * block;
    ring_allgatherv(*cross_, workspace_, reinterpret_cast<const char*>(mine), offsets,
                    reinterpret_cast<char*>(group_codes_.data()));
  }
  {
    TimelineSpan span(timeline_, "dequantize 2bit", block * 16);
    const DequantizeTable table(threshold);
    const double scale = average ? 1.0 / size() : 1.0;
    for (const Piece& piece : pieces) {
      float* out = flat + piece.from;
      const int64_t n = piece.to - piece.from;
      std::memset(out, 0, n * sizeof(float));
      for (int g = 0; g < groups; ++g)  // in group order: the same bits on every rank
        add_dequantized_2bit(table, group_codes_.data() + g * block + piece.code, 0, n, out);
      scale_in_place(out, n, scale);
    }
  }
  {
    TimelineSpan span(timeline_, "allgather in group", total * 4);
    ring_allgather<float, float>(*local_, workspace_, flat, total);
  }
  for (size_t t = 0; t < set.tensors.size(); ++t)
    for (void* out : set.tensors[t].outputs)
      std::memcpy(out, flat + first[t], set.tensors[t].count * sizeof(float));
}

std::vector<float> TensorCollectives::residual_2bit(uint64_t residual_key) const {
  const auto found = residuals_.find(residual_key);
  return found == residuals_.end() ? std::vector<float>() : found->second;
}

}  // namespace mxkv
