// The few MXNet C API functions the collectives need, resolved at run time.
//
// libmxnet.so is loaded by MXNet's Python package with RTLD_LOCAL, so its symbols
// cannot be linked against or found with dlsym(RTLD_DEFAULT). Python hands us the
// function addresses (ctypes) once; everything after that is plain C calls.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace mxkv {

using NDArrayHandle = void*;

// MXNet's engine callbacks (c_api.h: EngineAsyncFunc, EngineFuncParamDeleter).
using EngineAsyncFunc = void (*)(void* run_context, void* on_complete, void* param);
using EngineParamDeleter = void (*)(void* param);

struct MXNetApi {
  int (*get_data)(NDArrayHandle, void**) = nullptr;
  int (*get_shape)(NDArrayHandle, int*, const int**) = nullptr;
  int (*get_dtype)(NDArrayHandle, int*) = nullptr;
  int (*get_context)(NDArrayHandle, int*, int*) = nullptr;
  int (*get_storage_type)(NDArrayHandle, int*) = nullptr;
  int (*wait_all)() = nullptr;
  // MXEnginePushAsyncND: runs `fn` once the const arrays are written and
  // nothing reads the mutable ones, i.e. in order with MXNet's own operations.
  int (*push_async)(EngineAsyncFunc fn, void* param, EngineParamDeleter deleter, void* context,
                    NDArrayHandle* const_arrays, int num_const, NDArrayHandle* mutable_arrays,
                    int num_mutable, void* property, int priority, const char* name,
                    bool wait) = nullptr;
  const char* (*get_last_error)() = nullptr;

  bool bound() const { return get_data != nullptr; }
  void check(int rc, const char* what) const {
    if (rc != 0) throw std::runtime_error(std::string(what) + " failed: " + get_last_error());
  }
};

// The process-wide table, filled by bind_mxnet_api() from Python.
MXNetApi& mxnet_api();

// A dense NDArray in host memory (cpu, cpu_pinned, cpu_shared) seen through a raw pointer.
struct ArrayView {
  void* data = nullptr;
  int dtype = -1;
  std::vector<int64_t> shape;
  int64_t count = 0;
};

// Waits until MXNet's engine has finished every pushed operation, so no array
// is being read or written by it. One call costs about as much as one
// MXNDArrayWaitToRead (a sync op through the engine), so a collective calls it
// once rather than once per array.
void wait_for_engine();

// The array's memory; call wait_for_engine() before touching it. Throws
// std::invalid_argument for arrays the collectives cannot use in place.
ArrayView resolve_array(NDArrayHandle handle);

}  // namespace mxkv
