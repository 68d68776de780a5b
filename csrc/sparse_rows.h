// The sum over ranks of row_sparse arrays (MXNet's storage for embedding
// gradients: the ids of the rows a batch touched, sorted, and those rows).
// Every rank first learns every rank's row ids (a ring allgather of the ids),
// so all ranks know the union U of the rows and the total count N of rows
// sent. The values then travel the cheaper of two ways, by the bytes each
// rank sends for rows of b bytes over p ranks:
//   allgather:       each rank's rows pass around the ring: (p-1)/p * N * b
//   union allreduce: each rank scatters its rows into a |U|-row buffer, which
//                    one allreduce sums: 2 (p-1)/p * |U| * b
// so the rows go by allgather while N < 2 |U| (little overlap between the
// ranks' rows), else by allreduce over the union (a dense allreduce when U
// holds every row). Both leave the same rows, summed in rank order, on every
// rank.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels.h"

namespace mxkv {

enum class SparsePath : int { kAllgather = 0, kUnionAllreduce = 1 };

inline const char* sparse_path_name(SparsePath path) {
  return path == SparsePath::kAllgather ? "allgather" : "union allreduce";
}

// The path that sends fewer bytes (see above): `sent_rows` is N, `union_rows` |U|.
inline SparsePath cheaper_sparse_path(int64_t sent_rows, int64_t union_rows) {
  return sent_rows < 2 * union_rows ? SparsePath::kAllgather : SparsePath::kUnionAllreduce;
}

// The rows summed over ranks: `indices` sorted, `values` indices.size() rows.
struct SparseRows {
  std::vector<int64_t> indices;
  std::vector<char> values;
  SparsePath path = SparsePath::kAllgather;
};

// The sorted, distinct ids among `ids`.
std::vector<int64_t> union_of_rows(std::vector<int64_t> ids);

// out rows (one per id of `into_ids`, row_len values each) += the rows `rows` whose ids
// are `ids` (sorted, each one of into_ids).
template <typename T>
void add_rows(T* out, const std::vector<int64_t>& into_ids, const int64_t* ids, const T* rows,
              int64_t count, int64_t row_len) {
  size_t at = 0;
  for (int64_t i = 0; i < count; ++i) {
    while (into_ids[at] != ids[i]) ++at;  // both sorted: one walk along the union
    accumulate(out + at * row_len, rows + i * row_len, row_len);
  }
}

}  // namespace mxkv
