// Per-bucket events for MXKV_TIMELINE: what ran (pack, allreduce, unpack, ...), on which
// thread, from when and for how long, on CLOCK_MONOTONIC (the clock of Python's
// time.monotonic, so C++ and Python events line up). Recording is off unless enabled;
// the events are taken out by drain().
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace mxkv {

struct TimelineEvent {
  std::string name;
  std::string algorithm;  // empty unless the event is an allreduce
  int64_t start_us;
  int64_t duration_us;
  int64_t bytes;
  uint64_t thread;  // a number per OS thread
};

class Timeline {
 public:
  static int64_t now_us();

  void enable(bool on) { enabled_ = on; }
  bool enabled() const { return enabled_; }
  void record(TimelineEvent event);
  std::vector<TimelineEvent> drain();

 private:
  bool enabled_ = false;
  std::mutex mutex_;  // the overlap thread records too
  std::vector<TimelineEvent> events_;
};

// Records [construction, destruction) as one event when the timeline is enabled.
class TimelineSpan {
 public:
  TimelineSpan(Timeline& timeline, const char* name, int64_t bytes, const char* algorithm = "");
  ~TimelineSpan();
  TimelineSpan(const TimelineSpan&) = delete;
  TimelineSpan& operator=(const TimelineSpan&) = delete;

 private:
  Timeline& timeline_;
  const char* name_;
  const char* algorithm_;
  int64_t bytes_;
  int64_t start_us_;
};

}  // namespace mxkv
