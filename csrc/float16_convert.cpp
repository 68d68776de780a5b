#include "float16_convert.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mxkv {

namespace {

#if defined(__x86_64__)
const bool kHasF16C = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");

__attribute__((target("avx,f16c"))) void to_float_f16c(float* dst, const half* src, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

__attribute__((target("avx,f16c"))) void from_float_f16c(half* dst, const float* src, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) dst[i] = static_cast<half>(src[i]);
}
#else
const bool kHasF16C = false;
void to_float_f16c(float*, const half*, size_t) {}
void from_float_f16c(half*, const float*, size_t) {}
#endif

}  // namespace

void to_float(float* dst, const half* src, size_t n) {
  if (kHasF16C) return to_float_f16c(dst, src, n);
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

void from_float(half* dst, const float* src, size_t n) {
  if (kHasF16C) return from_float_f16c(dst, src, n);
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<half>(src[i]);
}

// clang-format off: the attribute on its own line
__attribute__((target_clones("avx2", "default")))
void to_float(float* dst, const bfloat16* src, size_t n) {
  // clang-format on
  uint32_t* out = reinterpret_cast<uint32_t*>(dst);
  const uint16_t* in = reinterpret_cast<const uint16_t*>(src);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint32_t>(in[i]) << 16;
}

// clang-format off: the attribute on its own line
__attribute__((target_clones("avx2", "default")))
void from_float(bfloat16* dst, const float* src, size_t n) {
  // clang-format on
  const uint32_t* in = reinterpret_cast<const uint32_t*>(src);
  uint16_t* out = reinterpret_cast<uint16_t*>(dst);
  for (size_t i = 0; i < n; ++i) out[i] = bfloat16_bits(in[i]);
}

}  // namespace mxkv
