// Remote memory as a device: one array spread over MPI windows on some ranks (its
// holders), read and accumulated into by ranges with one-sided MPI under passive-target
// locks, so the holders' CPUs take no part (on shared memory and RDMA fabrics; over
// TCP, MPICH needs its asynchronous progress thread, MPIR_CVAR_ASYNC_PROGRESS=1).
//
// What is atomic: every element of a read (MPI_Get_accumulate with MPI_NO_OP) and of
// an accumulate (MPI_Accumulate with MPI_SUM) on its own, against every other read and
// accumulate. A read that overlaps another rank's accumulate sees, element by element,
// either the value before it or after it; nothing spans more than one element.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

namespace mxkv {

// [start, start + count) of the array, kept by rank `holder` of the window's comm at
// element `offset` of its window (after the chunks it holds before this one).
struct RemoteChunk {
  int holder;
  int64_t start;
  int64_t count;
  int64_t offset;
};

class RemoteArray {
 public:
  // Collective over `comm`: `total` elements of MXNet dtype `dtype` (float32 or
  // float64: MPI accumulates them natively) in balanced chunks, chunk i on comm rank
  // holders[i]; zero-filled.
  RemoteArray(MPI_Comm comm, int64_t total, int dtype, const std::vector<int>& holders);
  ~RemoteArray();  // collective over the comm: frees the window
  RemoteArray(const RemoteArray&) = delete;
  RemoteArray& operator=(const RemoteArray&) = delete;

  // Each (start, memory) pair: `count` elements of the array from `start`.
  using Ranges = std::vector<std::pair<int64_t, void*>>;
  using Counts = std::vector<int64_t>;
  // memory = array[start:start+count], every range, complete on return.
  void read(const Ranges& ranges, const Counts& counts);
  // The same reads, started only (MPI_Rget_accumulate): finish_read() waits for those of
  // the earliest start_read() not yet finished, complete() for all; the memory is not to
  // be touched before. Several may be in flight at once, beside other transfers.
  void start_read(const Ranges& ranges, const Counts& counts);
  void finish_read();
  // Every transfer of this rank on the array is complete, here and at the holders.
  void complete();
  // The same, not atomic against accumulates (MPI_Get: a plain copy, several times
  // faster), for ranges nobody writes meanwhile.
  void copy_out(const Ranges& ranges, const Counts& counts);
  // array[start:start+count] += memory, every range, complete at the holders on return.
  void accumulate(const Ranges& ranges, const Counts& counts);
  // The same accumulates, started only: done at the holders at complete(); the memory is
  // not to be touched before.
  void start_accumulate(const Ranges& ranges, const Counts& counts);
  // array[start:start+count] = memory (not atomic against accumulates: for set-up and
  // restore, when nobody else touches the array).
  void write(const Ranges& ranges, const Counts& counts);
  void barrier() const;

  const std::vector<RemoteChunk>& chunks() const { return chunks_; }
  int64_t total() const { return total_; }
  int dtype() const { return dtype_; }  // MXNet's dtype code
  // Bytes this rank moved from / into chunks other ranks hold (its own chunks are local).
  int64_t bytes_read() const { return bytes_read_; }
  int64_t bytes_accumulated() const { return bytes_accumulated_; }  // accumulated or written

 private:
  enum class Kind { kRead, kCopyOut, kAccumulate, kWrite };
  // Starts the operations (reads with a request each in `requests`, if given); waits until
  // they are done if `wait_until_done`.
  void transfer(Kind kind, const Ranges& ranges, const Counts& counts, bool wait_until_done,
                std::vector<MPI_Request>* requests = nullptr);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  MPI_Win window_ = MPI_WIN_NULL;
  int dtype_;
  MPI_Datatype type_;
  size_t itemsize_;
  int64_t total_;
  std::vector<RemoteChunk> chunks_;
  int64_t bytes_read_ = 0;
  int64_t bytes_accumulated_ = 0;
  std::deque<std::vector<MPI_Request>> started_reads_;  // per start_read() not yet finished
};

}  // namespace mxkv
