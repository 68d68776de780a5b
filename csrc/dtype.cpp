#include "dtype.h"

#include "kernels.h"

namespace mxkv {

namespace {
template <typename T>
void sum_16bit(void* in, void* inout, int* len, MPI_Datatype*) {
  accumulate(static_cast<T*>(inout), static_cast<const T*>(in), static_cast<size_t>(*len));
}

MPI_Op create_sum(MPI_User_function* fn) {
  MPI_Op created;
  MPI_Op_create(fn, /*commute=*/1, &created);
  return created;
}
}  // namespace

MpiSum mpi_sum_for(int dtype) {
  switch (dtype) {
    case kFloat32: return {MPI_FLOAT, MPI_SUM};
    case kFloat64: return {MPI_DOUBLE, MPI_SUM};
    case kFloat16: {
      static MPI_Op op = create_sum(&sum_16bit<half>);
      return {MPI_UINT16_T, op};
    }
    case kBfloat16: {
      static MPI_Op op = create_sum(&sum_16bit<bfloat16>);
      return {MPI_UINT16_T, op};
    }
  }
  dtype_size(dtype);  // throws the user-facing error
  return {MPI_DATATYPE_NULL, MPI_OP_NULL};
}

}  // namespace mxkv
