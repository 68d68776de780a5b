// One host's emulated link, shared by the ranks of its group on this machine: for
// each direction, when it is next free (nanoseconds of the steady clock, which is
// CLOCK_MONOTONIC, the same in every process), in POSIX shared memory. A transfer
// reserves its time after whatever the other ranks of the host already put on the
// link, as their packets would queue in one network card.
#pragma once

#include <atomic>
#include <chrono>
#include <string>

namespace mxkv {

class SharedLinkClock {
 public:
  using Clock = std::chrono::steady_clock;
  enum Direction { kOut = 0, kIn = 1 };

  // Opens (creating if needed) the shared segment `name` ("/..."); throws on failure.
  explicit SharedLinkClock(const std::string& name);
  ~SharedLinkClock();
  SharedLinkClock(const SharedLinkClock&) = delete;
  SharedLinkClock& operator=(const SharedLinkClock&) = delete;

  // Books `seconds` of `direction` from `from` on, or from when it is free if later;
  // returns when the booked time ends.
  Clock::time_point reserve(Direction direction, Clock::time_point from, double seconds);

  // Removes the segment's name (the ranks that opened it keep their mapping).
  static void unlink(const std::string& name);

 private:
  struct Shared {
    std::atomic<int64_t> free_at[2];
  };
  static_assert(std::atomic<int64_t>::is_always_lock_free, "a lock-free 64-bit atomic is needed");
  Shared* shared_ = nullptr;
};

}  // namespace mxkv
