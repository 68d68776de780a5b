// Recursive algorithms need a power-of-two number of ranks. With p ranks and
// q the largest power of two <= p, the first 2(p-q) ranks pair up: each even
// rank hands its vector to the odd rank after it and sits out, the q
// remaining ranks run the algorithm under "virtual" ranks 0..q-1, and the
// odd ranks hand the result back (in the stored type, bit for bit).
#pragma once

#include "segmented_exchange.h"

namespace mxkv {

class PowerOfTwoRanks {
 public:
  explicit PowerOfTwoRanks(const Communicator& comm) : p_(comm.size()), rank_(comm.rank()) {
    while (q_ * 2 <= p_) q_ *= 2;
    extra_ = p_ - q_;
  }
  int count() const { return q_; }
  bool sits_out() const { return rank_ < 2 * extra_ && rank_ % 2 == 0; }
  int virtual_rank() const { return rank_ < 2 * extra_ ? rank_ / 2 : rank_ - extra_; }
  int real_rank(int v) const { return v < extra_ ? 2 * v + 1 : v + extra_; }

  // Before the algorithm: the odd rank of a pair adds its partner's vector.
  template <typename T>
  void fold_in(const Communicator& comm, Workspace& ws, T* data, int64_t count) const {
    if (rank_ >= 2 * extra_) return;
    if (sits_out())
      exchange<T, T>(comm, ws, rank_ + 1, data, count, rank_, data, 0, OnReceive::kReduce);
    else
      exchange<T, T>(comm, ws, rank_, data, 0, rank_ - 1, data, count, OnReceive::kReduce);
  }

  // After the algorithm: the odd rank of a pair sends the result back.
  template <typename T>
  void hand_back(const Communicator& comm, Workspace& ws, T* data, int64_t count) const {
    if (rank_ >= 2 * extra_) return;
    if (sits_out())
      exchange<T, T>(comm, ws, rank_, data, 0, rank_ + 1, data, count, OnReceive::kCopy);
    else
      exchange<T, T>(comm, ws, rank_ - 1, data, count, rank_, data, 0, OnReceive::kCopy);
  }

 private:
  int p_, rank_;
  int q_ = 1;
  int extra_ = 0;
};

// Runs body(ranks) on the power-of-two ranks, the others folded in before and
// handed the result after; on one rank only the scale is applied.
template <typename T, typename Body>
void on_power_of_two_ranks(const Communicator& comm, Workspace& ws, T* data, int64_t count,
                           double scale, Body&& body) {
  const PowerOfTwoRanks ranks(comm);
  if (ranks.count() == 1) {
    scale_in_place(data, count, scale);
    return;
  }
  ranks.fold_in(comm, ws, data, count);
  if (!ranks.sits_out()) body(ranks);
  ranks.hand_back(comm, ws, data, count);
}

}  // namespace mxkv
