#include "bucket_plan.h"

#include <algorithm>
#include <map>

#include "dtype.h"

namespace mxkv {

int64_t Bucket::elements() const {
  int64_t n = 0;
  for (const Segment& s : segments) n += s.count;
  return n;
}

std::vector<Bucket> plan_buckets(const std::vector<Tensor>& tensors, size_t bucket_bytes) {
  std::vector<Bucket> plan;
  std::map<int, Bucket> open;  // one open fused bucket per dtype, flushed in dtype order
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (t.count == 0) continue;
    const size_t esize = dtype_size(t.dtype);
    const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>(bucket_bytes / esize));
    if (t.count >= cap) {
      plan.push_back({t.dtype, false, {{i, 0, t.count}}});
      continue;
    }
    auto it = open.find(t.dtype);
    if (it != open.end() && it->second.elements() + t.count > cap) {
      plan.push_back(std::move(it->second));
      open.erase(it);
      it = open.end();
    }
    if (it == open.end()) it = open.emplace(t.dtype, Bucket{t.dtype, true, {}}).first;
    it->second.segments.push_back({i, 0, t.count});
  }
  for (auto& [dtype, bucket] : open) plan.push_back(std::move(bucket));
  return plan;
}

}  // namespace mxkv
