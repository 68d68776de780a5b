#include "timeline.h"

#include <pthread.h>
#include <time.h>

#include <utility>

namespace mxkv {

int64_t Timeline::now_us() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000 + now.tv_nsec / 1000;
}

void Timeline::record(TimelineEvent event) {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(std::move(event));
}

std::vector<TimelineEvent> Timeline::drain() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(events_, {});
}

TimelineSpan::TimelineSpan(Timeline& timeline, const char* name, int64_t bytes,
                           const char* algorithm)
    : timeline_(timeline), name_(name), algorithm_(algorithm), bytes_(bytes),
      start_us_(timeline.enabled() ? Timeline::now_us() : 0) {}

TimelineSpan::~TimelineSpan() {
  if (!timeline_.enabled()) return;
  timeline_.record({name_, algorithm_, start_us_, Timeline::now_us() - start_us_, bytes_,
                    static_cast<uint64_t>(pthread_self())});
}

}  // namespace mxkv
