#include "dtype.h"

#include "kernels.h"

namespace mxkv {

namespace {
void half_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  accumulate(static_cast<half*>(inout), static_cast<const half*>(in), static_cast<size_t>(*len));
}
}  // namespace

MpiSum mpi_sum_for(int dtype) {
  switch (dtype) {
    case kFloat32: return {MPI_FLOAT, MPI_SUM};
    case kFloat64: return {MPI_DOUBLE, MPI_SUM};
    case kFloat16: {
      static MPI_Op op = [] {
        MPI_Op created;
        MPI_Op_create(&half_sum, /*commute=*/1, &created);
        return created;
      }();
      return {MPI_UINT16_T, op};
    }
  }
  dtype_size(dtype);  // throws the user-facing error
  return {MPI_DATATYPE_NULL, MPI_OP_NULL};
}

}  // namespace mxkv
