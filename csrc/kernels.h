// Element-wise kernels of the collectives, written as simple loops over
// contiguous memory so the compiler vectorises them (-O3). float16 values are
// widened to float32 for arithmetic.
#pragma once

#include <cstddef>
#include <cstring>

namespace mxkv {

using half = _Float16;

template <typename T> struct Accum { using type = T; };
template <> struct Accum<half> { using type = float; };

// dst[i] = src[i] * scale   (a plain copy when scale == 1)
template <typename T>
void copy_scaled(T* __restrict dst, const T* __restrict src, size_t n, double scale) {
  if (scale == 1.0) {
    if (dst != src) std::memcpy(dst, src, n * sizeof(T));
    return;
  }
  using A = typename Accum<T>::type;
  const A s = static_cast<A>(scale);
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(static_cast<A>(src[i]) * s);
}

// x[i] *= scale, in place.
template <typename T>
void scale_in_place(T* x, size_t n, double scale) {
  if (scale == 1.0) return;
  using A = typename Accum<T>::type;
  const A s = static_cast<A>(scale);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<T>(static_cast<A>(x[i]) * s);
}

// dst[i] += src[i]
template <typename T>
void accumulate(T* __restrict dst, const T* __restrict src, size_t n) {
  using A = typename Accum<T>::type;
  for (size_t i = 0; i < n; ++i)
    dst[i] = static_cast<T>(static_cast<A>(dst[i]) + static_cast<A>(src[i]));
}

// Calls fn.template operator()<T>() with T the C++ type of an MXNet dtype code.
template <typename Fn>
void dispatch_dtype(int dtype, Fn&& fn);

}  // namespace mxkv

#include "dtype.h"

namespace mxkv {
template <typename Fn>
void dispatch_dtype(int dtype, Fn&& fn) {
  switch (dtype) {
    case kFloat32: fn.template operator()<float>(); return;
    case kFloat64: fn.template operator()<double>(); return;
    case kFloat16: fn.template operator()<half>(); return;
  }
  dtype_size(dtype);  // throws the user-facing error
}
}  // namespace mxkv
