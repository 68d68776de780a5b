// Collectives over a set of tensors treated as one object: the per-device
// copies are combined locally, the tensors are fused into buckets (see
// bucket_plan.h), and each bucket takes one allreduce (see allreduce.h).
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "allreduce.h"
#include "bucket_plan.h"
#include "communicator.h"
#include "engine_overlap.h"
#include "quantiser.h"
#include "segmented_exchange.h"
#include "sparse_rows.h"
#include "tensor_set.h"
#include "timeline.h"

namespace mxkv {

enum class Status : int { kOk = 0, kMismatch = 1 };

class TensorCollectives {
 public:
  TensorCollectives(MPI_Comm comm, size_t bucket_bytes, AllreduceOptions options,
                    size_t segment_bytes);

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  size_t bucket_bytes() const { return bucket_bytes_; }
  const AllreduceOptions& options() const { return options_; }

  // outputs = scale * sum over ranks of (sum of this rank's inputs);
  // scale = 1/size when `average`, else 1.
  Status allreduce(const std::vector<TensorRequest>& requests, uint64_t key_signature,
                   bool average);

  // The same result as allreduce(), computed behind MXNet's engine: returns
  // once the buckets are pushed (see engine_overlap.h). The call signature is
  // still compared across ranks before anything is pushed.
  Status allreduce_overlapped(const std::vector<TensorRequest>& requests, uint64_t key_signature,
                              bool average);

  // Waits for every overlapped bucket; ends the communication thread when `stop`.
  void finish_overlapped(bool stop);
  uint64_t overlapped_buckets() const { return overlap_.pushed(); }
  size_t overlapped_buckets_pending() { return overlap_.pending(); }
  double overlapped_bucket_seconds() const { return overlap_.running_seconds(); }

  // outputs = root's inputs[0], on every rank.
  Status broadcast(const std::vector<TensorRequest>& requests, uint64_t key_signature, int root);

  // result = scale * the sum over ranks of each rank's `count` rows (ids sorted and
  // distinct, `row_len` values of `dtype` each): sparse_rows.h. `signature` names the
  // key, its shape and dtype, so that ranks passing different arrays are told.
  Status sparse_row_sum(const int64_t* ids, const void* rows, int64_t count, int64_t row_len,
                        int dtype, uint64_t signature, bool average, SparseRows& result);

  // outputs = the sum (average) over ranks of each rank's inputs (float32) as `quantiser`
  // sends them, with error feedback: the residual of tensor i is kept here under
  // residual_keys[i] (quantiser.h). Flat: each rank's sum over its devices is quantised and
  // every rank's codes go around all ranks. Hierarchical (set_hierarchy): each group's sum
  // is quantised instead, slice by slice at the rank that holds it after the
  // reduce-scatter inside the group (its residual covers that slice of each tensor); only
  // the codes cross between groups, and the codes of every slice go around the group,
  // where every rank decodes them all. Every rank decodes the same codes in the same order.
  Status allreduce_quantised(const std::vector<TensorRequest>& requests, uint64_t key_signature,
                             const std::vector<uint64_t>& residual_keys, const Quantiser& quantiser,
                             bool average);
  // This rank's residual under `residual_key` (empty if none yet).
  std::vector<float> quantiser_residual(uint64_t residual_key) const;
  // Replaces this rank's residual under `residual_key` (a checkpoint's, loaded).
  void set_quantiser_residual(uint64_t residual_key, std::vector<float> residual);

  // One contiguous vector (for tests and benchmarks): data = scale * sum over ranks.
  void allreduce_vector(void* data, int64_t count, int dtype, Algorithm algorithm, double scale);

  // The communicator's ranks belong to groups (group_of_rank[i] for rank i): bytes
  // sent to other groups are counted apart, and go through an emulated link of
  // `megabits_per_second` (0: none) and `latency_seconds` per step (group_link.h),
  // shared by the group's ranks through the shared segment `shared_link` ("": one
  // link per rank).
  void span_groups(std::vector<int> group_of_rank, double megabits_per_second,
                   double latency_seconds, const std::string& shared_link);

  // From now on every allreduce is hierarchical (allreduce_hierarchical.h): `local` is
  // this rank's group, `cross` the ranks with its index in every group. Under kAuto the
  // step across groups takes the ring: the algorithm table is measured on one machine,
  // and between hosts the ring reached the link's limit with fewer slow repetitions than
  // the table's rhd (examples/benchmarks/hierarchy.py --hosts). Call after span_groups.
  void set_hierarchy(MPI_Comm local, MPI_Comm cross);
  bool hierarchical() const { return cross_ != nullptr; }

  // Bytes this rank has sent (as they travel: compressed float32 counts 2 bytes a
  // value) to ranks of its own group and of other groups, for MXKV_SUMMARY_EVERY.
  // MPI's own calls (MXKV_ALGO=mpi, broadcasts) are counted as a ring / pipeline sends.
  uint64_t bytes_sent_inside() const;
  uint64_t bytes_sent_across() const;

  // Per-bucket events (MXKV_TIMELINE): enable, then drain after calls.
  Timeline& timeline() { return timeline_; }

  // The plan a call with these (dtype, count) tensors would follow.
  std::vector<Bucket> plan(const std::vector<Tensor>& tensors) const {
    return plan_buckets(tensors, bucket_bytes_);
  }

 private:
  bool signatures_agree(uint64_t signature);
  char* staging(int dtype, int slot);
  // A bucket's vector: fused, packed into staging buffer `slot`; else its tensor's
  // devices summed into its first output, in place.
  char* gather_in(const Bucket& bucket, const std::vector<Tensor>& tensors, int slot);
  // The reduced vector to every output.
  void scatter_out(const Bucket& bucket, const std::vector<Tensor>& tensors, const char* vector);
  void run_bucket(const Bucket& bucket, const std::vector<Tensor>& tensors, double scale);
  // Hierarchical, in pieces of at most a bucket's bytes, in a pipeline
  // (stage_pipeline.h): one piece crosses the groups while the next is reduced inside
  // the group and the one before gathered. Two threads call MPI at once: only where
  // MPI_THREAD_MULTIPLE was given (mpi4py's default), else the stages run in turn.
  void allreduce_pipelined(const std::vector<Bucket>& buckets, const std::vector<Tensor>& tensors,
                           double scale);
  // The algorithm across groups for a bucket of `bytes` (the slice is 1/g of it).
  Algorithm cross_algorithm(int dtype, int64_t bytes, Algorithm algorithm) const;
  void broadcast_bucket(const Bucket& bucket, const std::vector<Tensor>& tensors, int root);
  // The residual kept under `residual_key`, `count` values (zeros at first).
  float* residual_of(uint64_t residual_key, int64_t count);
  void allreduce_quantised_group_sums(const TensorSet& set,
                                      const std::vector<uint64_t>& residual_keys,
                                      const Quantiser& quantiser, bool average);
  const char* algorithm_name_for(int dtype, int64_t bytes) const;

  Communicator comm_;
  Communicator check_comm_;  // signature checks, from the caller's thread
  Workspace workspace_;
  size_t bucket_bytes_;
  AllreduceOptions options_;
  std::map<std::pair<int, int>, std::vector<char>> staging_;  // by (dtype, slot)
  Timeline timeline_;
  std::unique_ptr<Communicator> local_, cross_;  // set_hierarchy
  Workspace local_workspace_;                    // the pipeline's group stages, on their own thread
  std::unordered_map<uint64_t, std::vector<float>> residuals_;  // allreduce_quantised's, per key
  std::vector<float> group_sum_;  // allreduce_quantised_group_sums' buffers, kept between calls
  std::vector<uint8_t> group_codes_;
  OverlapQueue overlap_;  // last: its thread stops before what it uses is destroyed
};

}  // namespace mxkv
