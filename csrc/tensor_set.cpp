#include "tensor_set.h"

#include <sstream>

#include "dtype.h"

namespace mxkv {

namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;

void fnv_mix(uint64_t& h, uint64_t value) {
  for (int i = 0; i < 8; ++i) {
    h ^= (value >> (8 * i)) & 0xff;
    h *= kFnvPrime;
  }
}

std::string describe(const ArrayView& v) {
  std::ostringstream out;
  out << dtype_name(v.dtype) << " (";
  for (size_t i = 0; i < v.shape.size(); ++i) out << (i ? ", " : "") << v.shape[i];
  if (v.shape.size() == 1) out << ",";
  out << ")";
  return out.str();
}

}  // namespace

TensorSet resolve_tensors(const std::vector<TensorRequest>& requests, uint64_t key_signature,
                          bool read_inputs, bool wait_engine) {
  if (wait_engine) wait_for_engine();
  TensorSet set;
  uint64_t h = kFnvOffset;
  fnv_mix(h, key_signature);
  set.tensors.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const TensorRequest& req = requests[i];
    if (req.inputs.empty() || req.outputs.empty())
      throw EntryError(i, "needs at least one input and one output array");
    try {
      Tensor t;
      ArrayView first;
      auto add = [&](NDArrayHandle handle, std::vector<char*>& into) {
        ArrayView v = resolve_array(handle);
        if (first.dtype < 0) {
          dtype_size(v.dtype);  // rejects unsupported dtypes with a clear message
          first = v;
        } else if (v.dtype != first.dtype || v.shape != first.shape) {
          throw std::invalid_argument("its arrays disagree on this rank: " + describe(first) +
                                      " vs " + describe(v));
        }
        into.push_back(static_cast<char*>(v.data));
      };
      for (NDArrayHandle out : req.outputs) add(out, t.outputs);
      if (read_inputs)
        for (NDArrayHandle in : req.inputs) add(in, t.inputs);
      t.dtype = first.dtype;
      t.count = first.count;
      fnv_mix(h, static_cast<uint64_t>(first.dtype));
      fnv_mix(h, first.shape.size());
      for (int64_t d : first.shape) fnv_mix(h, static_cast<uint64_t>(d));
      set.tensors.push_back(std::move(t));
    } catch (const EntryError&) {
      throw;
    } catch (const std::exception& e) {
      throw EntryError(i, e.what());
    }
  }
  set.signature = h & ((1ull << 62) - 1);
  return set;
}

}  // namespace mxkv
