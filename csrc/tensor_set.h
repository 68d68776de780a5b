// The arrays of one collective call, resolved to raw memory and described by a
// signature that must be equal on every rank before any data moves.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "mxnet_api.h"

namespace mxkv {

// What Python asks for, per key: the per-device copies to combine and the
// arrays that receive the result (an output may be one of the inputs).
struct TensorRequest {
  std::vector<NDArrayHandle> inputs;
  std::vector<NDArrayHandle> outputs;
};

struct Tensor {
  int dtype = -1;
  int64_t count = 0;
  std::vector<char*> inputs;
  std::vector<char*> outputs;
};

struct TensorSet {
  std::vector<Tensor> tensors;
  uint64_t signature = 0;  // 62-bit: fits an int64 and its negation
};

// An error about one entry of the request list; Python maps index -> key.
class EntryError : public std::invalid_argument {
 public:
  EntryError(size_t index, const std::string& what) : std::invalid_argument(what), index(index) {}
  size_t index;
};

// Waits for MXNet's engine to finish all pending work (unless `wait_engine`
// is false: the caller then orders its reads through the engine), checks that
// the arrays of each entry agree in dtype and shape, and hashes
// (key_signature, dtype, shape) of all entries. When `read_inputs` is false
// (broadcast on a non-root rank) the inputs are skipped: they are never read.
TensorSet resolve_tensors(const std::vector<TensorRequest>& requests, uint64_t key_signature,
                          bool read_inputs = true, bool wait_engine = true);

}  // namespace mxkv
