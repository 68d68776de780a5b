#include "allreduce_hierarchical.h"

#include "allreduce_ring.h"
#include "dtype.h"
#include "kernels.h"

namespace mxkv {

namespace {

template <typename T, typename W>
void stages(const Communicator& local, const Communicator& cross, Workspace& ws, T* data,
            int64_t count, int dtype, Algorithm cross_algorithm, int compress, double scale) {
  ring_reduce_scatter<T, W>(local, ws, data, count, 1.0);
  const RingBlock slice = ring_owned_block(count, local.size(), local.rank());
  allreduce_vector(cross, ws, data + slice.first, slice.length, dtype, cross_algorithm, compress,
                   scale);
  if (local.size() == 1) return;
  quantize<T, W>(data + slice.first, slice.length);  // what the group will receive
  ring_allgather<T, W>(local, ws, data, count);
}

}  // namespace

void allreduce_hierarchical(const Communicator& local, const Communicator& cross, Workspace& ws,
                            void* data, int64_t count, int dtype, Algorithm cross_algorithm,
                            int compress, double scale) {
  if (count == 0) return;
  dispatch_dtype(dtype, [&]<typename T>() {
    T* values = static_cast<T*>(data);
    if constexpr (std::is_same_v<T, float>) {
      if (compress == kFloat16)
        return stages<float, half>(local, cross, ws, values, count, dtype, cross_algorithm,
                                   compress, scale);
      if (compress == kBfloat16)
        return stages<float, bfloat16>(local, cross, ws, values, count, dtype, cross_algorithm,
                                       compress, scale);
    }
    stages<T, T>(local, cross, ws, values, count, dtype, cross_algorithm, compress, scale);
  });
}

}  // namespace mxkv
