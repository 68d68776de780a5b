// How the tensors of one call travel: small tensors are packed together into
// fused buckets of at most `bucket_bytes`; a tensor of `bucket_bytes` or more
// travels whole, in place (zero copy): the allreduce algorithms cut it into
// cache-sized segments themselves.
//
// The plan depends only on the (dtype, count) sequence, so every rank that
// passed the signature check computes the same plan and calls the same MPI
// collectives in the same order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensor_set.h"

namespace mxkv {

struct Segment {
  size_t tensor;   // index into the call's tensors
  int64_t offset;  // first element of the tensor covered
  int64_t count;   // number of elements
};

struct Bucket {
  int dtype;
  bool fused;                     // packed into a staging buffer, else in place
  std::vector<Segment> segments;  // fused: many whole tensors; in place: one tensor
  int64_t elements() const;
};

std::vector<Bucket> plan_buckets(const std::vector<Tensor>& tensors, size_t bucket_bytes);

}  // namespace mxkv
