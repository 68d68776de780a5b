#include "tensor_collectives.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>

#include "allreduce_hierarchical.h"
#include "dtype.h"
#include "kernels.h"
#include "stage_pipeline.h"

namespace mxkv {

namespace {

template <typename T>
T* at(char* base, int64_t offset) {
  return reinterpret_cast<T*>(base) + offset;
}

}  // namespace

TensorCollectives::TensorCollectives(MPI_Comm comm, size_t bucket_bytes, AllreduceOptions options,
                                     size_t segment_bytes)
    : comm_(comm), check_comm_(comm), workspace_(segment_bytes), bucket_bytes_(bucket_bytes),
      options_(std::move(options)), local_workspace_(segment_bytes) {
  if (bucket_bytes_ < 8) throw std::invalid_argument("bucket size must be at least 8 bytes");
  if (segment_bytes < 64) throw std::invalid_argument("segment size must be at least 64 bytes");
}

bool TensorCollectives::signatures_agree(uint64_t signature) {
  TimelineSpan span(timeline_, "signature", 16);
  int64_t mine = static_cast<int64_t>(signature);
  int64_t extremes[2] = {mine, -mine};  // max and -min in one call
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, extremes, 2, MPI_INT64_T, MPI_MAX, check_comm_.comm()),
            "MPI_Allreduce (signature check)");
  return extremes[0] == mine && -extremes[1] == mine;
}

char* TensorCollectives::staging(int dtype, int slot) {
  std::vector<char>& buffer = staging_[{dtype, slot}];
  if (buffer.empty()) buffer.resize(bucket_bytes_ + dtype_size(dtype));
  return buffer.data();
}

Status TensorCollectives::allreduce(const std::vector<TensorRequest>& requests,
                                    uint64_t key_signature, bool average) {
  overlap_.drain();
  TensorSet set = resolve_tensors(requests, key_signature);
  if (!signatures_agree(set.signature)) return Status::kMismatch;
  const double scale = average ? 1.0 / size() : 1.0;
  const std::vector<Bucket> buckets = plan(set.tensors);
  if (cross_ && local_->size() > 1 && threads_may_call_mpi_at_once())
    allreduce_pipelined(buckets, set.tensors, scale);
  else
    for (const Bucket& bucket : buckets) run_bucket(bucket, set.tensors, scale);
  return Status::kOk;
}

Status TensorCollectives::allreduce_overlapped(const std::vector<TensorRequest>& requests,
                                               uint64_t key_signature, bool average) {
  auto set = std::make_shared<TensorSet>(
      resolve_tensors(requests, key_signature, /*read_inputs=*/true, /*wait_engine=*/false));
  if (!signatures_agree(set->signature)) return Status::kMismatch;
  const double scale = average ? 1.0 / size() : 1.0;
  for (const Bucket& bucket : plan(set->tensors)) {
    std::vector<NDArrayHandle> reads, writes;
    for (const Segment& s : bucket.segments) {
      const TensorRequest& request = requests[s.tensor];
      writes.insert(writes.end(), request.outputs.begin(), request.outputs.end());
      for (NDArrayHandle in : request.inputs)
        if (std::find(request.outputs.begin(), request.outputs.end(), in) == request.outputs.end())
          reads.push_back(in);
    }
    overlap_.push([this, set, bucket, scale] { run_bucket(bucket, set->tensors, scale); },
                  std::move(reads), std::move(writes));
  }
  return Status::kOk;
}

void TensorCollectives::finish_overlapped(bool stop) {
  if (stop)
    overlap_.stop();
  else
    overlap_.drain();
}

void TensorCollectives::run_bucket(const Bucket& bucket, const std::vector<Tensor>& tensors,
                                   double scale) {
  char* vector = gather_in(bucket, tensors, 0);
  {
    const int64_t bytes = bucket.elements() * static_cast<int64_t>(dtype_size(bucket.dtype));
    TimelineSpan span(timeline_, "allreduce", bytes, algorithm_name_for(bucket.dtype, bytes));
    allreduce_vector(vector, bucket.elements(), bucket.dtype, options_.algorithm, scale);
  }
  scatter_out(bucket, tensors, vector);
}

void TensorCollectives::span_groups(std::vector<int> group_of_rank, double megabits_per_second,
                                    double latency_seconds, const std::string& shared_link) {
  if (static_cast<int>(group_of_rank.size()) != size())
    throw std::invalid_argument("span_groups: one group per rank of the communicator is needed");
  comm_.link().set_groups(std::move(group_of_rank), rank());
  comm_.link().emulate(megabits_per_second, latency_seconds);
  if (!shared_link.empty()) comm_.link().share(shared_link);
}

void TensorCollectives::set_hierarchy(MPI_Comm local, MPI_Comm cross) {
  local_ = std::make_unique<Communicator>(local);
  cross_ = std::make_unique<Communicator>(cross);
  if (local_->size() * cross_->size() != size())
    throw std::invalid_argument("set_hierarchy: groups of " + std::to_string(local_->size()) +
                                " ranks times " + std::to_string(cross_->size()) +
                                " groups is not the communicator's " + std::to_string(size()) +
                                " ranks");
  std::vector<int> each_its_own(cross_->size());
  std::iota(each_its_own.begin(), each_its_own.end(), 0);
  cross_->link().set_groups(std::move(each_its_own), cross_->rank());
  cross_->link().emulate_as(comm_.link());
}

uint64_t TensorCollectives::bytes_sent_inside() const {
  uint64_t sent = comm_.link().bytes_inside();
  if (local_) sent += local_->link().bytes_inside() + cross_->link().bytes_inside();
  return sent;
}

uint64_t TensorCollectives::bytes_sent_across() const {
  uint64_t sent = comm_.link().bytes_across();
  if (local_) sent += local_->link().bytes_across() + cross_->link().bytes_across();
  return sent;
}

void TensorCollectives::allreduce_vector(void* data, int64_t count, int dtype, Algorithm algorithm,
                                         double scale) {
  const int64_t bytes = count * static_cast<int64_t>(dtype_size(dtype));
  if (cross_) {
    allreduce_hierarchical(*local_, *cross_, workspace_, data, count, dtype,
                           cross_algorithm(dtype, bytes, algorithm), options_.compress, scale);
    return;
  }
  const Algorithm chosen =
      choose_algorithm({algorithm, options_.table, options_.compress}, dtype, bytes);
  mxkv::allreduce_vector(comm_, workspace_, data, count, dtype, chosen, options_.compress, scale);
}

Algorithm TensorCollectives::cross_algorithm(int dtype, int64_t bytes, Algorithm algorithm) const {
  return choose_algorithm({algorithm, {}, options_.compress}, dtype, bytes / local_->size());
}

const char* TensorCollectives::algorithm_name_for(int dtype, int64_t bytes) const {
  if (cross_) return "hierarchical";
  return algorithm_name(
      choose_algorithm({options_.algorithm, options_.table, options_.compress}, dtype, bytes));
}

char* TensorCollectives::gather_in(const Bucket& bucket, const std::vector<Tensor>& tensors,
                                   int slot) {
  char* vector = nullptr;
  dispatch_dtype(bucket.dtype, [&]<typename T>() {
    const int64_t bytes = bucket.elements() * static_cast<int64_t>(sizeof(T));
    if (!bucket.fused) {  // in place, in the first output
      const Segment& s = bucket.segments.front();
      const Tensor& t = tensors[s.tensor];
      TimelineSpan span(timeline_, "combine devices", bytes);
      T* dst = at<T>(t.outputs.front(), s.offset);
      combine_inputs(dst, t.inputs, s.offset, s.count);
      vector = reinterpret_cast<char*>(dst);
      return;
    }
    TimelineSpan span(timeline_, "pack", bytes);
    T* buffer = reinterpret_cast<T*>(staging(bucket.dtype, slot));
    int64_t pos = 0;
    for (const Segment& s : bucket.segments) {
      combine_inputs(buffer + pos, tensors[s.tensor].inputs, s.offset, s.count);
      pos += s.count;
    }
    vector = reinterpret_cast<char*>(buffer);
  });
  return vector;
}

void TensorCollectives::scatter_out(const Bucket& bucket, const std::vector<Tensor>& tensors,
                                    const char* vector) {
  dispatch_dtype(bucket.dtype, [&]<typename T>() {
    const T* values = reinterpret_cast<const T*>(vector);
    const int64_t bytes = bucket.elements() * static_cast<int64_t>(sizeof(T));
    TimelineSpan span(timeline_, bucket.fused ? "unpack" : "copy to devices", bytes);
    int64_t pos = 0;
    for (const Segment& s : bucket.segments) {
      const std::vector<char*>& outputs = tensors[s.tensor].outputs;
      for (size_t k = bucket.fused ? 0 : 1; k < outputs.size(); ++k)
        copy_scaled(at<T>(outputs[k], s.offset), values + pos, s.count, 1.0);
      pos += s.count;
    }
  });
}

void TensorCollectives::allreduce_pipelined(const std::vector<Bucket>& buckets,
                                            const std::vector<Tensor>& tensors, double scale) {
  struct Piece {  // of at most one bucket's bytes: a large tensor crosses in several
    size_t bucket;
    int64_t first, count;
    bool opens, closes;  // the bucket's first and last piece
  };
  std::vector<Piece> pieces;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const int64_t n = buckets[b].elements();
    const int64_t most =
        std::max<int64_t>(1, bucket_bytes_ / static_cast<size_t>(dtype_size(buckets[b].dtype)));
    for (int64_t at = 0; at < n; at += most)
      pieces.push_back({b, at, std::min(most, n - at), at == 0, at + most >= n});
  }
  if (pieces.size() == 1) return run_bucket(buckets[pieces.front().bucket], tensors, scale);
  std::vector<char*> vectors(buckets.size());
  auto data_of = [&](const Piece& p) {
    return vectors[p.bucket] + p.first * dtype_size(buckets[p.bucket].dtype);
  };
  auto bytes_of = [&](const Piece& p) {
    return p.count * static_cast<int64_t>(dtype_size(buckets[p.bucket].dtype));
  };
  run_stage_pipeline(
      static_cast<int64_t>(pieces.size()),
      [&](int64_t i) {  // at most three pieces are alive at once: three staging buffers
        const Piece& p = pieces[i];
        const Bucket& bucket = buckets[p.bucket];
        if (p.opens) vectors[p.bucket] = gather_in(bucket, tensors, static_cast<int>(i % 3));
        TimelineSpan span(timeline_, "reduce-scatter in the group", bytes_of(p));
        hierarchical_reduce_scatter(*local_, local_workspace_, data_of(p), p.count, bucket.dtype,
                                    options_.compress);
      },
      [&](int64_t i) {
        const Piece& p = pieces[i];
        const int dtype = buckets[p.bucket].dtype;
        TimelineSpan span(timeline_, "allreduce across groups", bytes_of(p));
        hierarchical_across(*local_, *cross_, workspace_, data_of(p), p.count, dtype,
                            cross_algorithm(dtype, bytes_of(p), options_.algorithm),
                            options_.compress, scale);
      },
      [&](int64_t i) {
        const Piece& p = pieces[i];
        const Bucket& bucket = buckets[p.bucket];
        {
          TimelineSpan span(timeline_, "allgather in the group", bytes_of(p));
          hierarchical_allgather(*local_, local_workspace_, data_of(p), p.count, bucket.dtype,
                                 options_.compress);
        }
        if (p.closes) scatter_out(bucket, tensors, vectors[p.bucket]);
      });
}

Status TensorCollectives::broadcast(const std::vector<TensorRequest>& requests,
                                    uint64_t key_signature, int root) {
  if (root < 0 || root >= size())
    throw std::invalid_argument("broadcast root " + std::to_string(root) + " is not a rank of " +
                                std::to_string(size()));
  overlap_.drain();
  TensorSet set = resolve_tensors(requests, key_signature, /*read_inputs=*/rank() == root);
  if (!signatures_agree(set.signature)) return Status::kMismatch;
  for (const Bucket& bucket : plan(set.tensors)) broadcast_bucket(bucket, set.tensors, root);
  return Status::kOk;
}

void TensorCollectives::broadcast_bucket(const Bucket& bucket, const std::vector<Tensor>& tensors,
                                         int root) {
  const bool is_root = rank() == root;
  int64_t count = 0;
  for (const Segment& s : bucket.segments) count += s.count;
  const int64_t bytes = count * static_cast<int64_t>(dtype_size(bucket.dtype));
  TimelineSpan span(timeline_, "broadcast", bytes);
  dispatch_dtype(bucket.dtype, [&]<typename T>() {
    if (!bucket.fused) {
      const Segment& s = bucket.segments.front();
      const Tensor& t = tensors[s.tensor];
      T* dst = at<T>(t.outputs.front(), s.offset);
      if (is_root) copy_scaled(dst, at<T>(t.inputs.front(), s.offset), s.count, 1.0);
      comm_.broadcast(dst, s.count * sizeof(T), root);
      for (size_t k = 1; k < t.outputs.size(); ++k)
        copy_scaled(at<T>(t.outputs[k], s.offset), dst, s.count, 1.0);
      return;
    }
    T* buffer = reinterpret_cast<T*>(staging(bucket.dtype, 0));
    int64_t pos = 0;
    for (const Segment& s : bucket.segments) {
      if (is_root)
        copy_scaled(buffer + pos, at<T>(tensors[s.tensor].inputs.front(), s.offset), s.count, 1.0);
      pos += s.count;
    }
    comm_.broadcast(buffer, pos * sizeof(T), root);
    pos = 0;
    for (const Segment& s : bucket.segments) {
      for (char* out : tensors[s.tensor].outputs)
        copy_scaled(at<T>(out, s.offset), buffer + pos, s.count, 1.0);
      pos += s.count;
    }
  });
}

}  // namespace mxkv
