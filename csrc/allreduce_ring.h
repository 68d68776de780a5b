// Ring allreduce (as in Gloo's allreduce_ring_chunked / Baidu's ring): the
// vector is cut into one block per rank; in p-1 reduce-scatter steps each
// rank sends a block to its right neighbour and adds the block arriving from
// its left, so that rank r ends up owning the full sum of block r+1; p-1
// allgather steps then pass the finished blocks around the ring. Every rank
// sends 2(p-1)/p of the vector: bandwidth-optimal, latency 2(p-1) messages.
#pragma once

#include "segmented_exchange.h"

namespace mxkv {

template <typename T, typename W>
void allreduce_ring(const Communicator& comm, Workspace& ws, T* data, int64_t count,
                    double scale) {
  const int p = comm.size(), r = comm.rank();
  if (p == 1) {
    scale_in_place(data, count, scale);
    return;
  }
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  auto block = [&](int b) { b = ((b % p) + p) % p; return data + block_offset(count, p, b); };
  auto length = [&](int b) {
    b = ((b % p) + p) % p;
    return block_offset(count, p, b + 1) - block_offset(count, p, b);
  };
  for (int s = 0; s < p - 1; ++s) {
    const int send = r - s, recv = r - s - 1;
    exchange<T, W>(comm, ws, right, block(send), length(send), left, block(recv), length(recv),
                   OnReceive::kReduce, s == p - 2 ? scale : 1.0);
  }
  quantize<T, W>(block(r + 1), length(r + 1));  // keep what the others will receive
  for (int s = 0; s < p - 1; ++s) {
    const int send = r + 1 - s, recv = r - s;
    exchange<T, W>(comm, ws, right, block(send), length(send), left, block(recv), length(recv),
                   OnReceive::kCopy);
  }
}

}  // namespace mxkv
