#include "allreduce.h"

#include <climits>
#include <stdexcept>

#include "allreduce_halving_doubling.h"
#include "allreduce_recursive_doubling.h"
#include "allreduce_ring.h"
#include "dtype.h"
#include "kernels.h"

namespace mxkv {

namespace {

// What MPI sends is not visible here: the link counts it as a ring would send it.
template <typename T>
void allreduce_mpi(const Communicator& comm, T* data, int64_t count, int dtype, double scale) {
  const auto started = GroupLink::Clock::now();
  const MpiSum sum = mpi_sum_for(dtype);
  for (int64_t done = 0; done < count; done += INT_MAX) {
    const int n = static_cast<int>(std::min<int64_t>(INT_MAX, count - done));
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, data + done, n, sum.type, sum.op, comm.comm()),
              "MPI_Allreduce");
  }
  const int p = comm.size(), r = comm.rank();
  const int64_t ring_bytes = 2 * (p - 1) * count * static_cast<int64_t>(sizeof(T)) / p;
  comm.link().finish_step(started, (r + 1) % p, ring_bytes, (r + p - 1) % p, ring_bytes);
  scale_in_place(data, count, scale);
}

template <typename T, typename W>
void run(const Communicator& comm, Workspace& ws, T* data, int64_t count, Algorithm algorithm,
         double scale) {
  switch (algorithm) {
    case Algorithm::kRing: return allreduce_ring<T, W>(comm, ws, data, count, scale);
    case Algorithm::kHalvingDoubling:
      return allreduce_halving_doubling<T, W>(comm, ws, data, count, scale);
    case Algorithm::kRecursiveDoubling:
      return allreduce_recursive_doubling<T, W>(comm, ws, data, count, scale);
    default: throw std::logic_error("allreduce: no algorithm chosen");
  }
}

}  // namespace

Algorithm algorithm_from_name(const std::string& name) {
  if (name == "auto") return Algorithm::kAuto;
  if (name == "mpi") return Algorithm::kMpi;
  if (name == "ring") return Algorithm::kRing;
  if (name == "rhd") return Algorithm::kHalvingDoubling;
  if (name == "rd") return Algorithm::kRecursiveDoubling;
  throw std::invalid_argument("unknown allreduce algorithm '" + name +
                              "': use auto, mpi, ring, rhd or rd");
}

const char* algorithm_name(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kMpi: return "mpi";
    case Algorithm::kRing: return "ring";
    case Algorithm::kHalvingDoubling: return "rhd";
    case Algorithm::kRecursiveDoubling: return "rd";
  }
  return "unknown";
}

Algorithm choose_algorithm(const AllreduceOptions& options, int dtype, int64_t bytes) {
  Algorithm chosen = options.algorithm;
  if (chosen == Algorithm::kAuto) {
    chosen = Algorithm::kRing;
    for (const AlgorithmRule& rule : options.table) {
      if (rule.max_bytes < 0 || bytes <= rule.max_bytes) {
        chosen = rule.algorithm;
        break;
      }
    }
  }
  const bool compressed = options.compress >= 0 && dtype == kFloat32;
  if (compressed && chosen == Algorithm::kMpi) chosen = Algorithm::kRecursiveDoubling;
  return chosen;
}

void allreduce_vector(const Communicator& comm, Workspace& ws, void* data, int64_t count, int dtype,
                      Algorithm algorithm, int compress, double scale) {
  if (count == 0) return;
  if (algorithm == Algorithm::kMpi)
    return dispatch_dtype(dtype, [&]<typename T>() {
      allreduce_mpi(comm, static_cast<T*>(data), count, dtype, scale);
    });
  dispatch_wire_types(dtype, compress, data, [&]<typename T, typename W>(T* values) {
    run<T, W>(comm, ws, values, count, algorithm, scale);
  });
}

}  // namespace mxkv
