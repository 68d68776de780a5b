// Element-wise kernels of the collectives, written as simple loops over
// contiguous memory so the compiler vectorises them (-O3). 16-bit values
// (float16, bfloat16) are widened to float32 for arithmetic.
//
// T is the type an array is stored in; W the type its values travel in on
// the wire (W == T, or float16/bfloat16 for a compressed float32 array).
#pragma once

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "bfloat16.h"

namespace mxkv {

using half = _Float16;

template <typename T> struct Accum { using type = T; };
template <> struct Accum<half> { using type = float; };
template <> struct Accum<bfloat16> { using type = float; };
template <typename T> using accum_t = typename Accum<T>::type;

template <typename To, typename From>
inline To convert(From value) {
  if constexpr (std::is_same_v<To, From>) {
    return value;
  } else {
    return static_cast<To>(static_cast<accum_t<From>>(value));
  }
}

// dst[i] = src[i] * scale   (a plain copy when scale == 1)
template <typename T>
void copy_scaled(T* __restrict dst, const T* __restrict src, size_t n, double scale) {
  if (scale == 1.0) {
    if (dst != src) std::memcpy(dst, src, n * sizeof(T));
    return;
  }
  using A = accum_t<T>;
  const A s = static_cast<A>(scale);
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(static_cast<A>(src[i]) * s);
}

// x[i] *= scale, in place.
template <typename T>
void scale_in_place(T* x, size_t n, double scale) {
  if (scale == 1.0) return;
  using A = accum_t<T>;
  const A s = static_cast<A>(scale);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<T>(static_cast<A>(x[i]) * s);
}

// dst[i] += src[i]
template <typename T>
void accumulate(T* __restrict dst, const T* __restrict src, size_t n) {
  using A = accum_t<T>;
  for (size_t i = 0; i < n; ++i)
    dst[i] = static_cast<T>(static_cast<A>(dst[i]) + static_cast<A>(src[i]));
}

// dst[i] = (dst[i] + received[i]) * scale, in the accumulation type of T.
template <typename T, typename W>
void reduce_received(T* __restrict dst, const W* __restrict received, size_t n, double scale) {
  using A = accum_t<T>;
  if (scale == 1.0) {
    for (size_t i = 0; i < n; ++i)
      dst[i] = static_cast<T>(static_cast<A>(dst[i]) + convert<A>(received[i]));
    return;
  }
  const A s = static_cast<A>(scale);
  for (size_t i = 0; i < n; ++i)
    dst[i] = static_cast<T>((static_cast<A>(dst[i]) + convert<A>(received[i])) * s);
}

// dst[i] = To(src[i]): encoding for the wire, or decoding from it.
template <typename To, typename From>
void convert_all(To* __restrict dst, const From* __restrict src, size_t n) {
  if constexpr (std::is_same_v<To, From>) {
    std::memcpy(dst, src, n * sizeof(To));
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = convert<To>(src[i]);
  }
}

// x[i] = T(W(x[i])): what the other ranks will decode from the wire, so that
// the rank that owns a value keeps exactly the copy the others receive.
template <typename T, typename W>
void quantize(T* x, size_t n) {
  if constexpr (!std::is_same_v<T, W>) {
    for (size_t i = 0; i < n; ++i) x[i] = convert<T>(convert<W>(x[i]));
  }
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
    case kBfloat16: fn.template operator()<bfloat16>(); return;
  }
  dtype_size(dtype);  // throws the user-facing error
}
}  // namespace mxkv
