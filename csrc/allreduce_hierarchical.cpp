#include "allreduce_hierarchical.h"

#include "allreduce_ring.h"
#include "dtype.h"
#include "kernels.h"

namespace mxkv {

void hierarchical_reduce_scatter(const Communicator& local, Workspace& ws, void* data,
                                 int64_t count, int dtype, int compress) {
  if (count == 0) return;
  dispatch_wire_types(dtype, compress, data, [&]<typename T, typename W>(T* values) {
    ring_reduce_scatter<T, W>(local, ws, values, count, 1.0);
  });
}

void hierarchical_across(const Communicator& local, const Communicator& cross, Workspace& ws,
                         void* data, int64_t count, int dtype, Algorithm cross_algorithm,
                         int compress, double scale) {
  if (count == 0) return;
  dispatch_wire_types(dtype, compress, data, [&]<typename T, typename W>(T* values) {
    const RingBlock slice = ring_owned_block(count, local.size(), local.rank());
    allreduce_vector(cross, ws, values + slice.first, slice.length, dtype, cross_algorithm,
                     compress, scale);
    if (local.size() > 1) quantize<T, W>(values + slice.first, slice.length);  // as it travels
  });
}

void hierarchical_allgather(const Communicator& local, Workspace& ws, void* data, int64_t count,
                            int dtype, int compress) {
  if (count == 0 || local.size() == 1) return;
  dispatch_wire_types(dtype, compress, data, [&]<typename T, typename W>(T* values) {
    ring_allgather<T, W>(local, ws, values, count);
  });
}

void allreduce_hierarchical(const Communicator& local, const Communicator& cross, Workspace& ws,
                            void* data, int64_t count, int dtype, Algorithm cross_algorithm,
                            int compress, double scale) {
  hierarchical_reduce_scatter(local, ws, data, count, dtype, compress);
  hierarchical_across(local, cross, ws, data, count, dtype, cross_algorithm, compress, scale);
  hierarchical_allgather(local, ws, data, count, dtype, compress);
}

}  // namespace mxkv
