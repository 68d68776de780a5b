// Element-wise kernels of the collectives, written as simple loops over
// contiguous memory so the compiler vectorises them (-O3). 16-bit values
// (float16, bfloat16) are widened to float32 in cache-sized blocks by the
// vectorised converters of float16_convert.h, computed on in float32, and
// narrowed back.
//
// T is the type an array is stored in; W the type its values travel in on
// the wire (W == T, or float16/bfloat16 for a compressed float32 array).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "bfloat16.h"
#include "float16_convert.h"

namespace mxkv {

template <typename T>
constexpr bool is_16bit = std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

template <typename T>
using accum_t = std::conditional_t<is_16bit<T>, float, T>;

constexpr size_t kBlock = 1024;  // elements widened at a time (4 KiB of float32)

// dst = float32 values of src (a copy when T is float).
template <typename T>
inline void widen(float* dst, const T* src, size_t n) {
  if constexpr (std::is_same_v<T, float>)
    std::memcpy(dst, src, n * sizeof(float));
  else
    to_float(dst, src, n);
}

template <typename T>
inline void narrow(T* dst, const float* src, size_t n) {
  if constexpr (std::is_same_v<T, float>)
    std::memcpy(dst, src, n * sizeof(float));
  else
    from_float(dst, src, n);
}

// fn(float* values, offset, count) on float32 copies of x, block by block, written back.
template <typename T, typename Fn>
inline void in_float_blocks(T* x, size_t n, Fn&& fn) {
  float block[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    widen(block, x + i, m);
    fn(block, i, m);
    narrow(x + i, block, m);
  }
}

// x[i] *= scale, in place.
template <typename T>
void scale_in_place(T* x, size_t n, double scale) {
  if (scale == 1.0) return;
  const accum_t<T> s = static_cast<accum_t<T>>(scale);
  if constexpr (is_16bit<T>) {
    in_float_blocks(x, n, [s](float* v, size_t, size_t m) {
      for (size_t j = 0; j < m; ++j) v[j] *= s;
    });
  } else {
    for (size_t i = 0; i < n; ++i) x[i] *= s;
  }
}

// dst[i] = src[i] * scale   (a plain copy when scale == 1)
template <typename T>
void copy_scaled(T* __restrict dst, const T* __restrict src, size_t n, double scale) {
  if (dst != src) std::memcpy(dst, src, n * sizeof(T));
  scale_in_place(dst, n, scale);
}

// dst[i] = (dst[i] + received[i]) * scale, in the accumulation type of T.
template <typename T, typename W>
void reduce_received(T* __restrict dst, const W* __restrict received, size_t n, double scale) {
  using A = accum_t<T>;
  const A s = static_cast<A>(scale);
  if constexpr (!is_16bit<T> && !is_16bit<W>) {
    if (scale == 1.0) {
      for (size_t i = 0; i < n; ++i) dst[i] += received[i];
    } else {
      for (size_t i = 0; i < n; ++i) dst[i] = (dst[i] + received[i]) * s;
    }
  } else if constexpr (std::is_same_v<T, float>) {  // a compressed float32 vector
    float other[kBlock];
    for (size_t i = 0; i < n; i += kBlock) {
      const size_t m = std::min(kBlock, n - i);
      widen(other, received + i, m);
      float* v = dst + i;
      if (scale == 1.0) {
        for (size_t j = 0; j < m; ++j) v[j] += other[j];
      } else {
        for (size_t j = 0; j < m; ++j) v[j] = (v[j] + other[j]) * s;
      }
    }
  } else {
    float other[kBlock];
    in_float_blocks(dst, n, [&](float* v, size_t offset, size_t m) {
      widen(other, received + offset, m);
      if (scale == 1.0) {
        for (size_t j = 0; j < m; ++j) v[j] += other[j];
      } else {
        for (size_t j = 0; j < m; ++j) v[j] = (v[j] + other[j]) * s;
      }
    });
  }
}

// dst[i] += src[i]
template <typename T>
void accumulate(T* __restrict dst, const T* __restrict src, size_t n) {
  reduce_received(dst, src, n, 1.0);
}

// dst = sum of the inputs' [offset, offset+count) ranges (the per-device copies of one
// tensor), without reading dst first unless dst is one of the inputs (then the others
// are added to it).
template <typename T>
void combine_inputs(T* dst, const std::vector<char*>& inputs, int64_t offset, int64_t count) {
  auto range = [offset](char* base) { return reinterpret_cast<T*>(base) + offset; };
  const T* alias = nullptr;
  for (char* in : inputs)
    if (range(in) == dst) alias = dst;
  bool started = alias != nullptr;
  for (char* in : inputs) {
    const T* src = range(in);
    if (src == alias) continue;
    if (!started) {
      std::memcpy(dst, src, count * sizeof(T));
      started = true;
    } else {
      accumulate(dst, src, count);
    }
  }
}

// dst[i] = To(src[i]): encoding for the wire (float -> 16 bits) or decoding.
template <typename To, typename From>
void convert_all(To* __restrict dst, const From* __restrict src, size_t n) {
  if constexpr (std::is_same_v<To, From>) {
    std::memcpy(dst, src, n * sizeof(To));
  } else if constexpr (std::is_same_v<From, float>) {
    narrow(dst, src, n);
  } else {
    static_assert(std::is_same_v<To, float>, "the wire converts to and from float32 only");
    widen(dst, src, n);
  }
}

// x[i] = T(W(x[i])): what the other ranks will decode from the wire, so that
// the rank that owns a value keeps exactly the copy the others receive.
template <typename T, typename W>
void quantize(T* x, size_t n) {
  if constexpr (!std::is_same_v<T, W>) {
    static_assert(std::is_same_v<T, float>, "only float32 values are sent compressed");
    W wire[kBlock];
    for (size_t i = 0; i < n; i += kBlock) {
      const size_t m = std::min(kBlock, n - i);
      from_float(wire, x + i, m);
      to_float(x + i, wire, m);
    }
  }
}

// Calls fn.template operator()<T>() with T the C++ type of an MXNet dtype code.
template <typename Fn>
void dispatch_dtype(int dtype, Fn&& fn);

// Calls fn.template operator()<T, W>(values) with T the C++ type of `dtype`, `values` its
// pointer to `data`, and W the type the values travel as: float32 compressed to
// kFloat16 / kBfloat16 (`compress`), else T.
template <typename Fn>
void dispatch_wire_types(int dtype, int compress, void* data, Fn&& fn);

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

template <typename Fn>
void dispatch_wire_types(int dtype, int compress, void* data, Fn&& fn) {
  dispatch_dtype(dtype, [&]<typename T>() {
    T* values = static_cast<T*>(data);
    if constexpr (std::is_same_v<T, float>) {
      if (compress == kFloat16) return fn.template operator()<float, half>(values);
      if (compress == kBfloat16) return fn.template operator()<float, bfloat16>(values);
    }
    fn.template operator()<T, T>(values);
  });
}
}  // namespace mxkv
