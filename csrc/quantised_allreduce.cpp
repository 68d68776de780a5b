#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "allreduce_ring.h"
#include "kernels.h"
#include "quantiser.h"
#include "tensor_collectives.h"

namespace mxkv {

namespace {

// The sum of a tensor's per-device copies (the one copy itself when there is one).
const float* device_sum(const Tensor& tensor, Workspace& ws) {
  if (tensor.inputs.size() == 1) return reinterpret_cast<const float*>(tensor.inputs.front());
  float* sum = reinterpret_cast<float*>(ws.scratch(tensor.count * sizeof(float)));
  combine_inputs(sum, tensor.inputs, 0, tensor.count);
  return sum;
}

// Elements [at, at + n) of every output of `tensor` = scale * the sum of what `codes` sent.
void decode_into(const Quantiser& quantiser, const std::vector<const uint8_t*>& codes,
                 const Tensor& tensor, int64_t at, int64_t n, double scale) {
  float* out = reinterpret_cast<float*>(tensor.outputs.front()) + at;
  quantiser.decode_sum(codes, n, scale, out);
  for (size_t o = 1; o < tensor.outputs.size(); ++o)
    std::memcpy(reinterpret_cast<float*>(tensor.outputs[o]) + at, out, n * sizeof(float));
}

}  // namespace

float* TensorCollectives::residual_of(uint64_t residual_key, int64_t count) {
  std::vector<float>& residual = residuals_[residual_key];
  residual.resize(count, 0.0f);
  return residual.data();
}

Status TensorCollectives::allreduce_quantised(const std::vector<TensorRequest>& requests,
                                              uint64_t key_signature,
                                              const std::vector<uint64_t>& residual_keys,
                                              const Quantiser& quantiser, bool average) {
  overlap_.drain();
  TensorSet set = resolve_tensors(requests, key_signature);
  uint32_t threshold_bits;
  std::memcpy(&threshold_bits, &quantiser.threshold, sizeof(threshold_bits));
  const uint64_t setting = (uint64_t{threshold_bits} << 1) | static_cast<uint64_t>(quantiser.kind);
  if (!signatures_agree((set.signature ^ setting) & ((uint64_t{1} << 62) - 1)))
    return Status::kMismatch;
  for (size_t t = 0; t < set.tensors.size(); ++t) {
    if (set.tensors[t].dtype != kFloat32)
      throw EntryError(t, std::string(quantiser.name()) + " compression takes float32 arrays only");
  }
  if (hierarchical()) {
    allreduce_quantised_group_sums(set, residual_keys, quantiser, average);
    return Status::kOk;
  }
  const int p = size();
  std::vector<int64_t> first_code(set.tensors.size() + 1, 0);  // whole bytes per tensor
  for (size_t t = 0; t < set.tensors.size(); ++t)
    first_code[t + 1] =
        first_code[t] + static_cast<int64_t>(quantiser.code_bytes(set.tensors[t].count));
  const int64_t block = first_code.back();
  std::vector<uint8_t> all(p * block);
  uint8_t* mine = all.data() + rank() * block;
  {
    TimelineSpan span(timeline_, "quantize", block);
    for (size_t t = 0; t < set.tensors.size(); ++t) {
      const Tensor& tensor = set.tensors[t];
      quantiser.encode(device_sum(tensor, workspace_), residual_of(residual_keys[t], tensor.count),
                       tensor.count, mine + first_code[t]);
    }
  }
  {
    TimelineSpan span(timeline_, "allgather codes", p * block);
    std::vector<int64_t> offsets(p + 1);
    for (int r = 0; r <= p; ++r) offsets[r] = r * block;
    ring_allgatherv(comm_, workspace_, reinterpret_cast<const char*>(mine), offsets,
                    reinterpret_cast<char*>(all.data()));
  }
  TimelineSpan span(timeline_, "decode and sum", p * block);
  std::vector<const uint8_t*> codes(p);
  for (size_t t = 0; t < set.tensors.size(); ++t) {
    for (int r = 0; r < p; ++r) codes[r] = all.data() + r * block + first_code[t];
    decode_into(quantiser, codes, set.tensors[t], 0, set.tensors[t].count, average ? 1.0 / p : 1.0);
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
                                const Quantiser& quantiser, int64_t* code_bytes) {
  std::vector<SlicePart> parts;
  int64_t bytes = 0;
  for (size_t t = 0; t + 1 < first.size(); ++t) {
    const int64_t from = std::max(first[t], slice.first);
    const int64_t to = std::min(first[t + 1], slice.first + slice.length);
    if (from >= to) continue;
    parts.push_back({t, from, to, bytes});
    bytes += static_cast<int64_t>(quantiser.code_bytes(to - from));
  }
  *code_bytes = bytes;
  return parts;
}

}  // namespace

void TensorCollectives::allreduce_quantised_group_sums(const TensorSet& set,
                                                       const std::vector<uint64_t>& residual_keys,
                                                       const Quantiser& quantiser, bool average) {
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
    parts[s] = parts_of(ring_owned_block(total, g_size, s), first, quantiser, &bytes[s]);
    base[s + 1] = base[s] + groups * bytes[s];
  }
  group_codes_.resize(base[g_size]);
  uint8_t* slice_codes = group_codes_.data() + base[me];  // this slice's, every group's
  uint8_t* mine = slice_codes + cross_->rank() * bytes[me];
  {
    TimelineSpan span(timeline_, "quantize", bytes[me]);
    for (const SlicePart& part : parts[me]) {
      float* residual = residual_of(residual_keys[part.tensor], set.tensors[part.tensor].count);
      quantiser.encode(flat + part.from, residual + (part.from - first[part.tensor]),
                       part.to - part.from, mine + part.code);
    }
  }
  {
    TimelineSpan span(timeline_, "allgather codes across groups", groups * bytes[me]);
    std::vector<int64_t> offsets(groups + 1);
    for (int g = 0; g <= groups; ++g) offsets[g] = g * bytes[me];
    ring_allgatherv(*cross_, workspace_, reinterpret_cast<const char*>(mine), offsets,
                    reinterpret_cast<char*>(slice_codes));
  }
  {  // the codes, not the decoded sums, go around the group: 2 bits a value per group
    TimelineSpan span(timeline_, "allgather codes in group", base[g_size]);
    ring_allgatherv(*local_, workspace_, reinterpret_cast<const char*>(slice_codes), base,
                    reinterpret_cast<char*>(group_codes_.data()));
  }
  TimelineSpan span(timeline_, "decode and sum", base[g_size]);
  std::vector<const uint8_t*> codes(groups);
  for (int s = 0; s < g_size; ++s) {
    for (const SlicePart& part : parts[s]) {
      for (int g = 0; g < groups; ++g)  // in group order: the same bits on every rank
        codes[g] = group_codes_.data() + base[s] + g * bytes[s] + part.code;
      decode_into(quantiser, codes, set.tensors[part.tensor], part.from - first[part.tensor],
                  part.to - part.from, average ? 1.0 / size() : 1.0);
    }
  }
}

std::vector<float> TensorCollectives::quantiser_residual(uint64_t residual_key) const {
  const auto found = residuals_.find(residual_key);
  return found == residuals_.end() ? std::vector<float>() : found->second;
}

void TensorCollectives::set_quantiser_residual(uint64_t residual_key, std::vector<float> residual) {
  residuals_[residual_key] = std::move(residual);
}

}  // namespace mxkv
