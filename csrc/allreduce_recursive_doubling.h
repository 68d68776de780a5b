// Recursive doubling allreduce: in log2(q) steps each rank swaps its whole
// vector with the partner at distance 1, 2, 4, ... and adds. Fewest messages
// and no extra pass, at log2(q) times the bytes: the choice for small vectors.
// Both partners add the same two values (a + b == b + a), so every rank ends
// with the same bits; when values travel compressed, each rank first rounds
// its own vector to the wire type, so both add exactly what the other sees.
#pragma once

#include "power_of_two_ranks.h"

namespace mxkv {

template <typename T, typename W>
void allreduce_recursive_doubling(const Communicator& comm, Workspace& ws, T* data, int64_t count,
                                  double scale) {
  on_power_of_two_ranks(comm, ws, data, count, scale, [&](const PowerOfTwoRanks& ranks) {
    const int q = ranks.count(), v = ranks.virtual_rank();
    T* sent = reinterpret_cast<T*>(ws.scratch(count * sizeof(T)));
    for (int d = 1; d < q; d *= 2) {
      quantize<T, W>(data, count);
      convert_all(sent, data, count);  // data is reduced into while the copy is on the wire
      const int peer = ranks.real_rank(v ^ d);
      exchange<T, W>(comm, ws, peer, sent, count, peer, data, count, OnReceive::kReduce,
                     2 * d == q ? scale : 1.0);
    }
  });
}

}  // namespace mxkv
