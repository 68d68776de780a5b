// Collectives over a set of tensors treated as one object: the per-device
// copies are combined locally, the tensors are fused into buckets (see
// bucket_plan.h), and each bucket takes one MPI collective.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <map>
#include <vector>

#include "bucket_plan.h"
#include "tensor_set.h"

namespace mxkv {

enum class Status : int { kOk = 0, kMismatch = 1 };

class TensorCollectives {
 public:
  TensorCollectives(MPI_Comm comm, size_t bucket_bytes);

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t bucket_bytes() const { return bucket_bytes_; }

  // outputs = scale * sum over ranks of (sum of this rank's inputs);
  // scale = 1/size when `average`, else 1.
  Status allreduce(const std::vector<TensorRequest>& requests, uint64_t key_signature,
                   bool average);

  // outputs = root's inputs[0], on every rank.
  Status broadcast(const std::vector<TensorRequest>& requests, uint64_t key_signature, int root);

  // The plan a call with these (dtype, count) tensors would follow.
  std::vector<Bucket> plan(const std::vector<Tensor>& tensors) const {
    return plan_buckets(tensors, bucket_bytes_);
  }

 private:
  bool signatures_agree(uint64_t signature);
  char* staging(int dtype);
  void allreduce_fused(const Bucket& bucket, const std::vector<Tensor>& tensors, double scale);
  void allreduce_in_place(const Bucket& bucket, const std::vector<Tensor>& tensors, double scale);
  void broadcast_bucket(const Bucket& bucket, const std::vector<Tensor>& tensors, int root);

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  size_t bucket_bytes_;
  std::map<int, std::vector<char>> staging_;  // one bucket buffer per dtype
};

}  // namespace mxkv
