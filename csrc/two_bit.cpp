#include "two_bit.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "allreduce_ring.h"
#include "tensor_collectives.h"

namespace mxkv {

void quantize_2bit(const float* values, float* residual, size_t n, float threshold,
                   uint8_t* codes) {
  // Two passes over chunks that stay in cache: a code a value, then four codes a byte. The
  // first is arithmetic on the comparisons, without branches, so that it vectorises: 1 ns a
  // value here, where selects (not vectorised, mispredicted as residuals spread) took 2-5.
  constexpr size_t kChunk = 4096;  // a multiple of 4
  int32_t code[kChunk];
  for (size_t start = 0; start < n; start += kChunk) {
    const size_t m = std::min(kChunk, n - start);
    float* r = residual + start;
    const float* v = values + start;
    for (size_t i = 0; i < m; ++i) {  // x - t, x + t or x, as MXNet's branches compute it
      const float x = r[i] + v[i];
      const int32_t up = x >= threshold, down = x <= -threshold;
      r[i] = (x - static_cast<float>(up) * threshold) + static_cast<float>(down) * threshold;
      code[i] = up | (down << 1);
    }
    uint8_t* out = codes + start / 4;
    const size_t whole = m / 4;
    for (size_t b = 0; b < whole; ++b)
      out[b] = static_cast<uint8_t>(code[4 * b] | (code[4 * b + 1] << 2) |
                                    (code[4 * b + 2] << 4) | (code[4 * b + 3] << 6));
    if (whole * 4 < m) {
      uint8_t byte = 0;
      for (size_t i = whole * 4; i < m; ++i) byte |= static_cast<uint8_t>(code[i] << (2 * (i % 4)));
      out[whole] = byte;
    }
  }
}

DequantizeTable::DequantizeTable(float threshold) {
  const float value_of[4] = {0.0f, threshold, -threshold, 0.0f};
  for (int byte = 0; byte < 256; ++byte)
    for (int k = 0; k < 4; ++k) values[byte][k] = value_of[(byte >> (2 * k)) & 3];
}

void decode_sum_2bit(const DequantizeTable& table, const std::vector<const uint8_t*>& codes,
                     size_t n, double scale, float* out) {
  const float s = static_cast<float>(scale);
  const size_t whole = n / 4;
  for (size_t b = 0; b < whole; ++b) {  // four values a byte, summed in registers
    float sum[4];
    std::memcpy(sum, table.values[codes[0][b]], sizeof(sum));
    for (size_t k = 1; k < codes.size(); ++k) {
      const float* v = table.values[codes[k][b]];
      for (int j = 0; j < 4; ++j) sum[j] += v[j];
    }
    if (scale != 1.0)
      for (int j = 0; j < 4; ++j) sum[j] *= s;
    std::memcpy(out + 4 * b, sum, sizeof(sum));
  }
  for (size_t i = whole * 4; i < n; ++i) {
    float sum = table.values[codes[0][whole]][i % 4];
    for (size_t k = 1; k < codes.size(); ++k) sum += table.values[codes[k][whole]][i % 4];
    out[i] = scale != 1.0 ? sum * s : sum;
  }
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
  std::vector<const uint8_t*> codes(p);
  for (size_t t = 0; t < set.tensors.size(); ++t) {
    const Tensor& tensor = set.tensors[t];
    for (int r = 0; r < p; ++r) codes[r] = all.data() + r * block + first_code[t];
    float* out = reinterpret_cast<float*>(tensor.outputs.front());
    decode_sum_2bit(table, codes, tensor.count, average ? 1.0 / p : 1.0, out);
    for (size_t o = 1; o < tensor.outputs.size(); ++o)
      std::memcpy(tensor.outputs[o], out, tensor.count * sizeof(float));
  }
  return Status::kOk;
}

namespace {

// A slice's part in one tensor: [from, to) of the tensors as one vector, its codes from
// byte `code` of the slice's codes on (a whole byte: each part decodes on its own).
struct SlicePart {
  size_t tensor;
  int64_t from, to, code;
};

// The parts of `slice` (tensor t spans [first[t], first[t + 1])) and its codes' bytes.
std::vector<SlicePart> parts_of(const RingBlock& slice, const std::vector<int64_t>& first,
                                int64_t* code_bytes) {
  std::vector<SlicePart> parts;
  int64_t bytes = 0;
  for (size_t t = 0; t + 1 < first.size(); ++t) {
    const int64_t from = std::max(first[t], slice.first);
    const int64_t to = std::min(first[t + 1], slice.first + slice.length);
    if (from >= to) continue;
    parts.push_back({t, from, to, bytes});
    bytes += static_cast<int64_t>(two_bit_bytes(to - from));
  }
  *code_bytes = bytes;
  return parts;
}

}  // namespace

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
  // The codes of every slice (s, the group rank holding it) from every group (g), in
  // one buffer: slice s's block of groups x bytes[s] from base[s] on, group by group.
  const int g_size = local_->size(), groups = cross_->size(), me = local_->rank();
  std::vector<std::vector<SlicePart>> parts(g_size);
  std::vector<int64_t> bytes(g_size), base(g_size + 1, 0);
  for (int s = 0; s < g_size; ++s) {
    parts[s] = parts_of(ring_owned_block(total, g_size, s), first, &bytes[s]);
    base[s + 1] = base[s] + groups * bytes[s];
  }
  group_codes_.resize(base[g_size]);
  uint8_t* slice_codes = group_codes_.data() + base[me];  // this slice's, every group's
  uint8_t* mine = slice_codes + cross_->rank() * bytes[me];
  {
    TimelineSpan span(timeline_, "quantize 2bit", bytes[me] * 16);
    for (const SlicePart& part : parts[me]) {
      std::vector<float>& residual = residuals_[residual_keys[part.tensor]];
      residual.resize(set.tensors[part.tensor].count, 0.0f);
      quantize_2bit(flat + part.from, residual.data() + (part.from - first[part.tensor]),
                    part.to - part.from, threshold, mine + part.code);
    }
  }
  {
    TimelineSpan span(timeline_, "allgather 2bit codes across groups", groups * bytes[me]);
    std::vector<int64_t> offsets(groups + 1);
    for (int g = 0; g <= groups; ++g) offsets[g] = g * bytes[me];
    ring_allgatherv(*cross_, workspace_, reinterpret_cast<const char*>(mine), offsets,
                    reinterpret_cast<char*>(slice_codes));
  }
  {  // the codes, not the decoded sums, go around the group: 2 bits a value per group
    TimelineSpan span(timeline_, "allgather 2bit codes in group", base[g_size]);
    ring_allgatherv(*local_, workspace_, reinterpret_cast<const char*>(slice_codes), base,
                    reinterpret_cast<char*>(group_codes_.data()));
  }
  TimelineSpan span(timeline_, "dequantize 2bit", base[g_size] * 4);
  const DequantizeTable table(threshold);
  std::vector<const uint8_t*> codes(groups);
  for (int s = 0; s < g_size; ++s) {
    for (const SlicePart& part : parts[s]) {
      const Tensor& tensor = set.tensors[part.tensor];
      const int64_t n = part.to - part.from, at = part.from - first[part.tensor];
      float* out = reinterpret_cast<float*>(tensor.outputs.front()) + at;
      for (int g = 0; g < groups; ++g)  // in group order: the same bits on every rank
        codes[g] = group_codes_.data() + base[s] + g * bytes[s] + part.code;
      decode_sum_2bit(table, codes, n, average ? 1.0 / size() : 1.0, out);
      for (size_t o = 1; o < tensor.outputs.size(); ++o)
        std::memcpy(reinterpret_cast<float*>(tensor.outputs[o]) + at, out, n * sizeof(float));
    }
  }
}

std::vector<float> TensorCollectives::residual_2bit(uint64_t residual_key) const {
  const auto found = residuals_.find(residual_key);
  return found == residuals_.end() ? std::vector<float>() : found->second;
}

}  // namespace mxkv
