#include "elastic_step.h"

#include <stdexcept>
#include <string>

#include "dtype.h"

namespace mxkv {
namespace {

template <typename T>
void step(T alpha, T* weight, const T* centre, T* elastic, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const T e = alpha * (weight[i] - centre[i]);
    elastic[i] = e;
    weight[i] -= e;
  }
}

}  // namespace

void elastic_step(double alpha, const std::vector<ElasticArrays>& entries, bool ready) {
  if (!ready) wait_for_engine();
  for (size_t i = 0; i < entries.size(); ++i) {
    const ArrayView x = resolve_array(entries[i].weight);
    const ArrayView c = resolve_array(entries[i].centre);
    const ArrayView e = resolve_array(entries[i].elastic);
    if (c.dtype != x.dtype || e.dtype != x.dtype || c.count != x.count || e.count != x.count) {
      throw std::invalid_argument("elastic step: entry " + std::to_string(i) +
                                  ": weight, centre and difference differ in dtype or size");
    }
    if (x.dtype == kFloat32) {
      step(static_cast<float>(alpha), static_cast<float*>(x.data),
           static_cast<const float*>(c.data), static_cast<float*>(e.data), x.count);
    } else if (x.dtype == kFloat64) {
      step(alpha, static_cast<double*>(x.data), static_cast<const double*>(c.data),
           static_cast<double*>(e.data), x.count);
    } else {
      throw std::invalid_argument(std::string("elastic step: ") + dtype_name(x.dtype) +
                                  " arrays take MXNet's operators");
    }
  }
}

}  // namespace mxkv
