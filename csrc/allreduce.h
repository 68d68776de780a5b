// One contiguous vector, summed over all ranks of a communicator in place,
// by the algorithm the caller names: MPI_Allreduce itself, or one of ours
// (ring, recursive halving/doubling, recursive doubling). Ours can send
// float32 values as float16 or bfloat16 (accumulating in float32), and fold
// the averaging scale into their last reduction instead of a separate pass.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "communicator.h"
#include "segmented_exchange.h"

namespace mxkv {

enum class Algorithm : int {
  kAuto = 0,
  kMpi = 1,
  kRing = 2,
  kHalvingDoubling = 3,
  kRecursiveDoubling = 4
};

Algorithm algorithm_from_name(const std::string& name);  // auto|mpi|ring|rhd|rd
const char* algorithm_name(Algorithm algorithm);

// kAuto: the algorithm of the first rule whose max_bytes >= the vector's bytes.
struct AlgorithmRule {
  int64_t max_bytes;  // -1: no limit
  Algorithm algorithm;
};

struct AllreduceOptions {
  Algorithm algorithm = Algorithm::kAuto;
  std::vector<AlgorithmRule> table;  // used by kAuto; empty means ring
  int compress = -1;  // dtype code float32 values travel in (kFloat16, kBfloat16), -1: none
};

// The algorithm that `options` picks for `bytes` of `dtype`. Compressed
// vectors never take kMpi (MPI cannot sum 16-bit floats into float32):
// recursive doubling stands in for it.
Algorithm choose_algorithm(const AllreduceOptions& options, int dtype, int64_t bytes);

// data[i] = scale * sum over ranks of data[i].
void allreduce_vector(const Communicator& comm, Workspace& ws, void* data, int64_t count, int dtype,
                      Algorithm algorithm, int compress, double scale);

}  // namespace mxkv
