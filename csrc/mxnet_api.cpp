#include "mxnet_api.h"

#include <sstream>

namespace mxkv {

namespace {
constexpr int kDefaultStorage = 0;
constexpr int kCpu = 1;
constexpr int kCpuPinned = 3;
constexpr int kCpuShared = 5;
}  // namespace

MXNetApi& mxnet_api() {
  static MXNetApi api;
  return api;
}

void wait_for_engine() {
  const MXNetApi& api = mxnet_api();
  api.check(api.wait_all(), "MXNDArrayWaitAll");
}

ArrayView resolve_array(NDArrayHandle handle) {
  const MXNetApi& api = mxnet_api();
  if (!api.bound()) throw std::logic_error("mxkv_hybrid._C: MXNet C API not bound");

  int storage = -1;
  api.check(api.get_storage_type(handle, &storage), "MXNDArrayGetStorageType");
  if (storage != kDefaultStorage)
    throw std::invalid_argument(
        "csr arrays (and row_sparse ones under a key whose other arrays are dense) are not "
        "supported by the hybrid kvstore; use row_sparse or dense arrays");

  int dev_type = 0, dev_id = 0;
  api.check(api.get_context(handle, &dev_type, &dev_id), "MXNDArrayGetContext");
  if (dev_type != kCpu && dev_type != kCpuPinned && dev_type != kCpuShared) {
    std::ostringstream msg;
    msg << "array on device type " << dev_type << " (id " << dev_id
        << ") reached the C++ collectives, which read host memory only: device arrays "
           "are staged through pinned host buffers first (mxkv_hybrid/comm/device_staging.py)";
    throw std::invalid_argument(msg.str());
  }

  ArrayView view;
  api.check(api.get_dtype(handle, &view.dtype), "MXNDArrayGetDType");
  int ndim = 0;
  const int* dims = nullptr;
  api.check(api.get_shape(handle, &ndim, &dims), "MXNDArrayGetShapeEx");
  view.count = 1;
  for (int i = 0; i < ndim; ++i) {
    view.shape.push_back(dims[i]);
    view.count *= dims[i];
  }
  api.check(api.get_data(handle, &view.data), "MXNDArrayGetData");
  return view;
}

}  // namespace mxkv
