// Element types the collectives reduce, keyed by MXNet's dtype codes.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace mxkv {

// mshadow type flags (mxnet/3rdparty/mshadow/mshadow/base.h).
enum DType : int { kFloat32 = 0, kFloat64 = 1, kFloat16 = 2, kBfloat16 = 12 };

inline size_t dtype_size(int dtype) {
  switch (dtype) {
    case kFloat32: return 4;
    case kFloat64: return 8;
    case kFloat16: return 2;
    case kBfloat16: return 2;
  }
  throw std::invalid_argument("dtype code " + std::to_string(dtype) +
                              " is not supported by the hybrid kvstore; "
                              "use float32, float64, float16 or bfloat16 arrays");
}

inline const char* dtype_name(int dtype) {
  switch (dtype) {
    case kFloat32: return "float32";
    case kFloat64: return "float64";
    case kFloat16: return "float16";
    case kBfloat16: return "bfloat16";
  }
  return "unsupported";
}

// The MPI datatype and sum operation for a dtype. float16 and bfloat16 have
// no MPI type: they travel as 16-bit words, summed by a user operation in float32.
struct MpiSum {
  MPI_Datatype type;
  MPI_Op op;
};
MpiSum mpi_sum_for(int dtype);

}  // namespace mxkv
