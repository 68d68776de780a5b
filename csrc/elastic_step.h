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

// For every entry: e = alpha (x - c) and x -= e, element by element, in the arrays' dtype
// (float32 or float64; the three of an entry alike), once MXNet's whole engine is done
// (unless `ready`: the caller knows no operation is pending on these arrays, and other
// transfers go on meanwhile). Throws std::invalid_argument naming the entry that does not fit.
void elastic_step(double alpha, const std::vector<ElasticArrays>& entries, bool ready);

}  // namespace mxkv
