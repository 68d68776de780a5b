// The step every allreduce algorithm here is made of: send a range of this
// rank's vector to one peer while receiving a range from another (or the
// same) peer. Both ranges are cut into segments of a few hundred KiB, two in
// flight at a time, so a received segment is reduced while it is still in
// cache and the next one is already on the wire: a 100 MB exchange runs at
// the speed of a small one instead of streaming through main memory twice.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "communicator.h"
#include "kernels.h"

namespace mxkv {

// Scratch memory reused across calls: two receive and two send slots.
class Workspace {
 public:
  explicit Workspace(size_t segment_bytes) : segment_bytes_(segment_bytes) {}
  size_t segment_bytes() const { return segment_bytes_; }
  // Slot `i` (0..3), large enough for one segment.
  char* slot(int i) {
    if (slots_.empty()) slots_.resize(4 * segment_bytes_);
    return slots_.data() + i * segment_bytes_;
  }
  // A buffer of at least `bytes` (for algorithms that need a copy of their input).
  char* scratch(size_t bytes) {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return scratch_.data();
  }

 private:
  size_t segment_bytes_;
  std::vector<char> slots_;
  std::vector<char> scratch_;
};

enum class OnReceive { kReduce, kCopy };

// Sends send[0, send_count) to rank `to` and receives recv_count values from
// rank `from` into recv: kReduce: recv = (recv + received) * scale; kCopy:
// recv = received. Values travel as W. A count of 0 skips that direction.
// send and recv must not overlap.
template <typename T, typename W>
void exchange(const Communicator& comm, Workspace& ws, int to, const T* send, int64_t send_count,
              int from, T* recv, int64_t recv_count, OnReceive on_receive, double scale = 1.0) {
  const auto started = GroupLink::Clock::now();
  constexpr int kDepth = 2;
  constexpr bool kSameType = std::is_same_v<T, W>;
  const int64_t seg = std::max<int64_t>(1, ws.segment_bytes() / sizeof(W));
  const int64_t num_send = (send_count + seg - 1) / seg;
  const int64_t num_recv = (recv_count + seg - 1) / seg;
  const bool direct_recv = kSameType && on_receive == OnReceive::kCopy;
  std::array<MPI_Request, kDepth> recv_req, send_req;
  recv_req.fill(MPI_REQUEST_NULL);
  send_req.fill(MPI_REQUEST_NULL);
  auto length = [seg](int64_t total, int64_t k) { return std::min(seg, total - k * seg); };

  auto post_recv = [&](int64_t k) {
    void* into = direct_recv ? static_cast<void*>(recv + k * seg) : ws.slot(k % kDepth);
    comm.irecv(into, length(recv_count, k) * sizeof(W), from, &recv_req[k % kDepth]);
  };
  auto post_send = [&](int64_t k) {
    const int64_t n = length(send_count, k);
    const void* data = send + k * seg;
    if constexpr (!kSameType) {
      W* encoded = reinterpret_cast<W*>(ws.slot(kDepth + k % kDepth));
      convert_all(encoded, send + k * seg, n);
      data = encoded;
    }
    comm.isend(data, n * sizeof(W), to, &send_req[k % kDepth]);
  };
  auto consume = [&](int64_t k) {
    if (direct_recv) return;
    const W* received = reinterpret_cast<const W*>(ws.slot(k % kDepth));
    T* dst = recv + k * seg;
    const int64_t n = length(recv_count, k);
    if (on_receive == OnReceive::kReduce)
      reduce_received(dst, received, n, scale);
    else
      convert_all(dst, received, n);
  };

  for (int64_t k = 0; k < std::min<int64_t>(kDepth, num_recv); ++k) post_recv(k);
  for (int64_t k = 0; k < std::min<int64_t>(kDepth, num_send); ++k) post_send(k);
  for (int64_t k = 0; k < std::max(num_send, num_recv); ++k) {
    if (k < num_recv) {
      Communicator::wait(&recv_req[k % kDepth]);
      consume(k);
      if (k + kDepth < num_recv) post_recv(k + kDepth);
    }
    if (k < num_send) {
      Communicator::wait(&send_req[k % kDepth]);
      if (k + kDepth < num_send) post_send(k + kDepth);
    }
  }
  comm.link().finish_step(started, to, send_count * static_cast<int64_t>(sizeof(W)), from,
                          recv_count * static_cast<int64_t>(sizeof(W)));
}

// Element offset of block `b` when `count` elements are split into `blocks`
// blocks whose sizes differ by at most one.
inline int64_t block_offset(int64_t count, int blocks, int b) {
  return static_cast<int64_t>(static_cast<__int128>(count) * b / blocks);
}

}  // namespace mxkv
