// The elastic step of EASGD, fused: e = alpha (x - c); x -= e, one pass over each array.
#pragma once

#include <cstdint>
#include <vector>

#include "mxnet_api.h"

namespace mxkv {

struct ElasticArrays {
  NDArrayHandle weight;   // x, updated in place
  NDArrayHandle centre;   // c, read
  NDArrayHandle elastic;  // e, written
};

// For every entry (after MXNet's engine is done with the arrays): e = alpha (x - c) and
// x -= e, element by element, in the arrays' dtype (float32 or float64; the three of an
// entry alike). Throws std::invalid_argument naming the entry that does not fit.
void elastic_step(double alpha, const std::vector<ElasticArrays>& entries);

}  // namespace mxkv
