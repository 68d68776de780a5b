// Vectorised conversions between float32 and the 16-bit float types, the
// cost of sending gradients compressed. float16 uses the F16C instructions
// when the CPU has them (checked once at run time; a scalar loop otherwise);
// bfloat16 is integer arithmetic the compiler vectorises. Both round to
// nearest even, so every rank produces the same bits on any x86-64 CPU.
#pragma once

#include <cstddef>

#include "bfloat16.h"

namespace mxkv {

using half = _Float16;

void to_float(float* dst, const half* src, size_t n);
void to_float(float* dst, const bfloat16* src, size_t n);
void from_float(half* dst, const float* src, size_t n);
void from_float(bfloat16* dst, const float* src, size_t n);

}  // namespace mxkv
