// Ring allreduce (as in Gloo's allreduce_ring_chunked / Baidu's ring): the
// vector is cut into one block per rank; in p-1 reduce-scatter steps each
// rank sends a block to its right neighbour and adds the block arriving from
// its left, so that rank r ends up owning the full sum of block r+1; p-1
// allgather steps then pass the finished blocks around the ring. Every rank
// sends 2(p-1)/p of the vector: bandwidth-optimal, latency 2(p-1) messages.
// The two halves are also stages of the hierarchical allreduce.
#pragma once

#include <cstring>
#include <vector>

#include "segmented_exchange.h"

namespace mxkv {

// Block b of a vector of `count` cut into p blocks: [first, first + length).
struct RingBlock {
  int64_t first, length;
};

inline RingBlock ring_block(int64_t count, int p, int b) {
  b = ((b % p) + p) % p;
  return {block_offset(count, p, b), block_offset(count, p, b + 1) - block_offset(count, p, b)};
}

// The block rank r owns after ring_reduce_scatter.
inline RingBlock ring_owned_block(int64_t count, int p, int r) {
  return ring_block(count, p, r + 1);
}

// After it, this rank's owned block holds scale * the sum over ranks of that block
// (other blocks hold partial sums). One rank: only the scale.
template <typename T, typename W>
void ring_reduce_scatter(const Communicator& comm, Workspace& ws, T* data, int64_t count,
                         double scale) {
  const int p = comm.size(), r = comm.rank();
  if (p == 1) {
    scale_in_place(data, count, scale);
    return;
  }
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  for (int s = 0; s < p - 1; ++s) {
    const RingBlock send = ring_block(count, p, r - s), recv = ring_block(count, p, r - s - 1);
    exchange<T, W>(comm, ws, right, data + send.first, send.length, left, data + recv.first,
                   recv.length, OnReceive::kReduce, s == p - 2 ? scale : 1.0);
  }
}

// Every rank's owned block reaches every rank (the owners' values, bit for bit:
// the caller quantizes its owned block first when values travel compressed).
template <typename T, typename W>
void ring_allgather(const Communicator& comm, Workspace& ws, T* data, int64_t count) {
  const int p = comm.size(), r = comm.rank();
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  for (int s = 0; s < p - 1; ++s) {
    const RingBlock send = ring_block(count, p, r + 1 - s), recv = ring_block(count, p, r - s);
    exchange<T, W>(comm, ws, right, data + send.first, send.length, left, data + recv.first,
                   recv.length, OnReceive::kCopy);
  }
}

// all[offsets[r] .. offsets[r + 1]) = rank r's `mine` (bytes, blocks of any size), on
// every rank: p-1 steps around the ring, each sending the block received in the step
// before. `mine` may already sit at its place in `all`.
inline void ring_allgatherv(const Communicator& comm, Workspace& ws, const char* mine,
                            const std::vector<int64_t>& offsets, char* all) {
  const int p = comm.size(), r = comm.rank();
  if (mine != all + offsets[r]) std::memcpy(all + offsets[r], mine, offsets[r + 1] - offsets[r]);
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  for (int s = 0; s < p - 1; ++s) {
    const int send = ((r - s) % p + p) % p, recv = ((r - s - 1) % p + p) % p;
    exchange<char, char>(comm, ws, right, all + offsets[send], offsets[send + 1] - offsets[send],
                         left, all + offsets[recv], offsets[recv + 1] - offsets[recv],
                         OnReceive::kCopy);
  }
}

template <typename T, typename W>
void allreduce_ring(const Communicator& comm, Workspace& ws, T* data, int64_t count, double scale) {
  ring_reduce_scatter<T, W>(comm, ws, data, count, scale);
  if (comm.size() == 1) return;
  const RingBlock mine = ring_owned_block(count, comm.size(), comm.rank());
  quantize<T, W>(data + mine.first, mine.length);  // keep what the others will receive
  ring_allgather<T, W>(comm, ws, data, count);
}

}  // namespace mxkv
