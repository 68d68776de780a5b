#include "sparse_rows.h"

#include <algorithm>
#include <cstring>

#include "allreduce_ring.h"
#include "tensor_collectives.h"

namespace mxkv {

std::vector<int64_t> union_of_rows(std::vector<int64_t> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

namespace {

// Byte offsets of each rank's block when rank r sends counts[r] items of `item` bytes.
std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts, int64_t item) {
  std::vector<int64_t> offsets(counts.size() + 1, 0);
  for (size_t r = 0; r < counts.size(); ++r) offsets[r + 1] = offsets[r] + counts[r] * item;
  return offsets;
}

}  // namespace

Status TensorCollectives::sparse_row_sum(const int64_t* ids, const void* rows, int64_t count,
                                         int64_t row_len, int dtype, uint64_t signature,
                                         bool average, SparseRows& result) {
  overlap_.drain();
  if (!signatures_agree(signature)) return Status::kMismatch;
  const int p = size();
  std::vector<int64_t> counts(p);
  check_mpi(MPI_Allgather(&count, 1, MPI_INT64_T, counts.data(), 1, MPI_INT64_T, comm_.comm()),
            "MPI_Allgather (row counts)");
  const std::vector<int64_t> id_offsets = offsets_of(counts, sizeof(int64_t));
  std::vector<int64_t> all_ids(id_offsets.back() / sizeof(int64_t));
  {
    TimelineSpan span(timeline_, "allgather row ids", id_offsets.back());
    ring_allgatherv(comm_, workspace_, reinterpret_cast<const char*>(ids), id_offsets,
                    reinterpret_cast<char*>(all_ids.data()));
  }
  result.indices = union_of_rows(all_ids);
  if (result.indices.empty()) return Status::kOk;  // no rank sent a row
  const int64_t row_bytes = row_len * static_cast<int64_t>(dtype_size(dtype));
  result.values.assign(result.indices.size() * row_bytes, 0);  // zero bits: 0.0 in every dtype
  result.path = cheaper_sparse_path(static_cast<int64_t>(all_ids.size()),
                                    static_cast<int64_t>(result.indices.size()));
  const double scale = average ? 1.0 / p : 1.0;
  dispatch_dtype(dtype, [&]<typename T>() {
    T* out = reinterpret_cast<T*>(result.values.data());
    const int64_t union_count = static_cast<int64_t>(result.indices.size()) * row_len;
    if (result.path == SparsePath::kAllgather) {
      const std::vector<int64_t> row_offsets = offsets_of(counts, row_bytes);
      std::vector<char> all_rows(row_offsets.back());
      {
        TimelineSpan span(timeline_, "allgather rows", row_offsets.back());
        ring_allgatherv(comm_, workspace_, static_cast<const char*>(rows), row_offsets,
                        all_rows.data());
      }
      TimelineSpan span(timeline_, "add rows", row_offsets.back());
      for (int r = 0; r < p; ++r)
        add_rows(out, result.indices, all_ids.data() + id_offsets[r] / sizeof(int64_t),
                 reinterpret_cast<const T*>(all_rows.data() + row_offsets[r]), counts[r], row_len);
      scale_in_place(out, union_count, scale);
    } else {
      add_rows(out, result.indices, ids, static_cast<const T*>(rows), count, row_len);
      TimelineSpan span(timeline_, "allreduce rows", union_count * sizeof(T));
      allreduce_vector(out, union_count, dtype, options_.algorithm, scale);
    }
  });
  return Status::kOk;
}

}  // namespace mxkv
