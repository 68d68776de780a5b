// Recursive halving / doubling allreduce (Rabenseifner): in log2(q) halving
// steps each rank exchanges half of its current range with a partner at
// distance q/2, q/4, ..., 1 and keeps the sum of the other half, ending with
// one finished block; log2(q) doubling steps then gather the blocks back in
// the reverse order. Bandwidth-optimal like the ring with only 2 log2(q)
// messages, which makes it the choice for mid-sized vectors.
#pragma once

#include "power_of_two_ranks.h"

namespace mxkv {

template <typename T, typename W>
void allreduce_halving_doubling(const Communicator& comm, Workspace& ws, T* data, int64_t count,
                                double scale) {
  on_power_of_two_ranks(comm, ws, data, count, scale, [&](const PowerOfTwoRanks& ranks) {
    const int q = ranks.count(), v = ranks.virtual_rank();
    auto offset = [&](int b) { return block_offset(count, q, b); };
    auto exchange_blocks = [&](int d, int keep, int give, OnReceive on_receive, double s) {
      // keep / give: first block of this rank's and the partner's d-block range
      const int peer = ranks.real_rank(v ^ d);
      exchange<T, W>(comm, ws, peer, data + offset(give), offset(give + d) - offset(give), peer,
                     data + offset(keep), offset(keep + d) - offset(keep), on_receive, s);
    };
    int lo = 0;
    for (int d = q / 2; d >= 1; d /= 2) {
      const bool upper = (v & d) != 0;
      const int keep = upper ? lo + d : lo, give = upper ? lo : lo + d;
      exchange_blocks(d, keep, give, OnReceive::kReduce, d == 1 ? scale : 1.0);
      lo = keep;
    }
    quantize<T, W>(data + offset(v), offset(v + 1) - offset(v));
    for (int d = 1; d < q; d *= 2) {
      const int mine = v & ~(d - 1), theirs = (v ^ d) & ~(d - 1);
      // send mine, receive theirs: the argument order of exchange_blocks is (keep=recv, give=send)
      exchange_blocks(d, theirs, mine, OnReceive::kCopy, 1.0);
    }
  });
}

}  // namespace mxkv
