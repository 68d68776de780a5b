// Three stages over n items, the middle one on the calling thread and the outer ones
// on a helper thread, so that item i's middle stage overlaps item i+1's first stage
// and item i-1's last (the hierarchical allreduce: a bucket crosses the slow link
// while the next one is reduced inside the group and the last one gathered).
// The helper's order is fixed, first(0) first(1) last(0) first(2) last(1) ...
// last(n-1), so ranks whose stages call collectives call them in the same order. An
// exception in either thread stops both and is rethrown here.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>

namespace mxkv {

template <typename First, typename Middle, typename Last>
void run_stage_pipeline(int64_t n, First&& first, Middle&& middle, Last&& last) {
  std::mutex mutex;
  std::condition_variable changed;
  int64_t firsts_done = 0, middles_done = 0;
  bool stop = false;
  std::exception_ptr helper_error, caller_error;
  auto publish = [&](int64_t& counter, int64_t value) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      counter = value;
    }
    changed.notify_all();
  };
  auto wait_for = [&](const int64_t& counter, int64_t above) {  // false: stopped
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return counter > above || stop; });
    return !stop;
  };
  auto fail = [&](std::exception_ptr& error) {
    error = std::current_exception();
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    changed.notify_all();
  };

  std::thread helper([&] {
    try {
      for (int64_t i = 0; i < std::min<int64_t>(2, n); ++i) {
        first(i);
        publish(firsts_done, i + 1);
      }
      for (int64_t i = 0; i < n; ++i) {
        if (!wait_for(middles_done, i)) return;
        last(i);
        if (i + 2 < n) {
          first(i + 2);
          publish(firsts_done, i + 3);
        }
      }
    } catch (...) {
      fail(helper_error);
    }
  });
  try {
    for (int64_t i = 0; i < n; ++i) {
      if (!wait_for(firsts_done, i)) break;
      middle(i);
      publish(middles_done, i + 1);
    }
  } catch (...) {
    fail(caller_error);
  }
  helper.join();
  if (helper_error) std::rethrow_exception(helper_error);
  if (caller_error) std::rethrow_exception(caller_error);
}

}  // namespace mxkv
