// Which peers of a communicator sit in another group (another host), the bytes
// this rank sends to peers inside and across groups, and an emulated slow link
// between groups (MXKV_THROTTLE_*). A group's ranks on this machine share one
// full-duplex link to the other groups, as a host's ranks share its network card
// (shared_link_clock.h): a transfer step that sends s and receives r bytes across
// takes at least latency + the time its s and r take on the link's two
// directions after what the group's other ranks put there first, so each
// algorithm is charged for what it really sends over the boundary, host by host.
// Without a shared clock, each rank has a link of its own: latency + max(s, r) /
// bandwidth.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "shared_link_clock.h"

namespace mxkv {

class GroupLink {
 public:
  using Clock = std::chrono::steady_clock;

  // group_of_rank[i]: the group of rank i of the communicator; empty: one group.
  void set_groups(std::vector<int> group_of_rank, int my_rank) {
    group_of_rank_ = std::move(group_of_rank);
    my_group_ = group_of_rank_.empty() ? 0 : group_of_rank_.at(my_rank);
  }
  // megabits_per_second 0: no emulation.
  void emulate(double megabits_per_second, double latency_seconds) {
    bytes_per_second_ = megabits_per_second * 1e6 / 8;
    latency_seconds_ = latency_seconds;
  }

  // The emulated link is this group's, shared with its other ranks here through
  // the shared segment `name`.
  void share(const std::string& name) { shared_ = std::make_shared<SharedLinkClock>(name); }

  // The same emulated link as `other`'s (the same host's card, when shared).
  void emulate_as(const GroupLink& other) {
    bytes_per_second_ = other.bytes_per_second_;
    latency_seconds_ = other.latency_seconds_;
    shared_ = other.shared_;
  }

  bool crosses(int peer) const {
    return peer >= 0 && !group_of_rank_.empty() && group_of_rank_[peer] != my_group_;
  }

  // After a step begun at `started` that sent `sent` bytes to `to` and received
  // `received` from `from` (-1: no peer): counts the bytes, and sleeps out the
  // rest of the emulated link's time when the step crossed groups.
  void finish_step(Clock::time_point started, int to, int64_t sent, int from, int64_t received) {
    const bool send_across = crosses(to) && sent > 0;
    const bool receive_across = crosses(from) && received > 0;
    if (sent > 0)
      (send_across ? bytes_across_ : bytes_inside_).fetch_add(sent, std::memory_order_relaxed);
    if (bytes_per_second_ <= 0 || !(send_across || receive_across)) return;
    const auto latency = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(latency_seconds_));
    if (shared_) {
      Clock::time_point done = started;
      if (send_across)
        done = std::max(done,
                        shared_->reserve(SharedLinkClock::kOut, started, sent / bytes_per_second_));
      if (receive_across)
        done = std::max(
            done, shared_->reserve(SharedLinkClock::kIn, started, received / bytes_per_second_));
      std::this_thread::sleep_until(done + latency);
      return;
    }
    const int64_t wire = std::max(send_across ? sent : 0, receive_across ? received : 0);
    const auto busy = std::chrono::duration<double>(wire / bytes_per_second_);
    std::this_thread::sleep_until(started + latency +
                                  std::chrono::duration_cast<Clock::duration>(busy));
  }

  uint64_t bytes_inside() const { return bytes_inside_.load(std::memory_order_relaxed); }
  uint64_t bytes_across() const { return bytes_across_.load(std::memory_order_relaxed); }

 private:
  std::vector<int> group_of_rank_;
  int my_group_ = 0;
  double bytes_per_second_ = 0;
  double latency_seconds_ = 0;
  std::shared_ptr<SharedLinkClock> shared_;  // the group's link on this machine, or none
  std::atomic<uint64_t> bytes_inside_{0};
  std::atomic<uint64_t> bytes_across_{0};
};

}  // namespace mxkv
