#include "remote_array.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>

#include "dtype.h"

namespace mxkv {
namespace {

// Bytes one operation moves at the most; larger pieces go in several. Over TCP a one-sided
// operation is an active message, which UCX sends eagerly up to UCX_RNDV_THRESH (set above
// this for easgd over rma, comm/remote_memory.py) and beyond it by rendezvous: a round trip
// through link queues full of the other direction's data before any byte moves.
constexpr int64_t kMaxPieceBytes = 8 << 20;

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(rc, text, &length);
    throw std::runtime_error(std::string(what) + " failed: " + std::string(text, length));
  }
}

MPI_Datatype accumulable_type(int dtype) {
  if (dtype == kFloat32) return MPI_FLOAT;
  if (dtype == kFloat64) return MPI_DOUBLE;
  throw std::invalid_argument(std::string("remote memory holds float32 or float64 arrays, not ") +
                              dtype_name(dtype) +
                              " (MPI has no accumulate for 16-bit floats): "
                              "keep the weights in float32 (multi_precision keeps a float32 copy)");
}

}  // namespace

RemoteArray::RemoteArray(MPI_Comm comm, int64_t total, int dtype, const std::vector<int>& holders)
    : dtype_(dtype), type_(accumulable_type(dtype)), itemsize_(dtype_size(dtype)), total_(total) {
  if (holders.empty()) throw std::invalid_argument("a remote array needs at least one holder");
  check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
  MPI_Comm_rank(comm_, &rank_);
  const int64_t parts = static_cast<int64_t>(holders.size());
  std::map<int, int64_t> held;  // elements each holder's window holds so far
  for (int64_t i = 0; i < parts; ++i) {
    const int64_t start = total * i / parts, count = total * (i + 1) / parts - start;
    chunks_.push_back({holders[i], start, count, held[holders[i]]});
    held[holders[i]] += count;
  }
  const int64_t mine = held[rank_];
  void* base = nullptr;
  check(MPI_Win_allocate(static_cast<MPI_Aint>(mine * itemsize_), static_cast<int>(itemsize_),
                         MPI_INFO_NULL, comm_, &base, &window_),
        "MPI_Win_allocate");
  if (mine > 0) std::memset(base, 0, mine * itemsize_);
  check(MPI_Win_lock_all(0, window_), "MPI_Win_lock_all");  // passive target, shared
  MPI_Barrier(comm_);  // every window zeroed before anyone reads
}

RemoteArray::~RemoteArray() {
  for (std::vector<MPI_Request>& requests : started_reads_) {  // (no throwing here)
    MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
  }
  if (window_ != MPI_WIN_NULL) {
    MPI_Win_unlock_all(window_);
    MPI_Win_free(&window_);
  }
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void RemoteArray::barrier() const { check(MPI_Barrier(comm_), "MPI_Barrier"); }

void RemoteArray::read(const Ranges& ranges, const Counts& counts) {
  transfer(Kind::kRead, ranges, counts, true);
}

void RemoteArray::start_read(const Ranges& ranges, const Counts& counts) {
  started_reads_.emplace_back();
  transfer(Kind::kRead, ranges, counts, false, &started_reads_.back());
}

void RemoteArray::finish_read() {
  if (started_reads_.empty()) throw std::logic_error("finish_read() with no read started");
  std::vector<MPI_Request>& requests = started_reads_.front();
  check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
        "MPI_Waitall");
  started_reads_.pop_front();
}

void RemoteArray::complete() {
  while (!started_reads_.empty()) finish_read();
  check(MPI_Win_flush_all(window_), "MPI_Win_flush_all");
}

void RemoteArray::copy_out(const Ranges& ranges, const Counts& counts) {
  transfer(Kind::kCopyOut, ranges, counts, true);
}

void RemoteArray::accumulate(const Ranges& ranges, const Counts& counts) {
  transfer(Kind::kAccumulate, ranges, counts, true);
}

void RemoteArray::start_accumulate(const Ranges& ranges, const Counts& counts) {
  transfer(Kind::kAccumulate, ranges, counts, false);
}

void RemoteArray::write(const Ranges& ranges, const Counts& counts) {
  transfer(Kind::kWrite, ranges, counts, true);
}

void RemoteArray::transfer(Kind kind, const Ranges& ranges, const Counts& counts,
                           bool wait_until_done, std::vector<MPI_Request>* requests) {
  if (ranges.size() != counts.size())
    throw std::invalid_argument("ranges and counts differ in length");
  for (size_t r = 0; r < ranges.size(); ++r) {
    const int64_t start = ranges[r].first, count = counts[r];
    if (start < 0 || count < 0 || start + count > total_) {
      throw std::out_of_range("remote range [" + std::to_string(start) + ", " +
                              std::to_string(start + count) + ") is outside the array of " +
                              std::to_string(total_) + " elements");
    }
    char* memory = static_cast<char*>(ranges[r].second);
    for (const RemoteChunk& chunk : chunks_) {
      int64_t from = std::max(start, chunk.start);
      const int64_t to = std::min(start + count, chunk.start + chunk.count);
      const int64_t most = kMaxPieceBytes / static_cast<int64_t>(itemsize_);
      for (; from < to; from += most) {
        const int n = static_cast<int>(std::min(most, to - from));
        char* origin = memory + (from - start) * itemsize_;
        const MPI_Aint where = chunk.offset + (from - chunk.start);
        if (kind == Kind::kRead && requests != nullptr) {
          requests->emplace_back();
          check(MPI_Rget_accumulate(nullptr, 0, type_, origin, n, type_, chunk.holder, where, n,
                                    type_, MPI_NO_OP, window_, &requests->back()),
                "MPI_Rget_accumulate");
        } else if (kind == Kind::kRead) {
          check(MPI_Get_accumulate(nullptr, 0, type_, origin, n, type_, chunk.holder, where, n,
                                   type_, MPI_NO_OP, window_),
                "MPI_Get_accumulate");
        } else if (kind == Kind::kCopyOut) {
          check(MPI_Get(origin, n, type_, chunk.holder, where, n, type_, window_), "MPI_Get");
        } else if (kind == Kind::kAccumulate) {
          check(MPI_Accumulate(origin, n, type_, chunk.holder, where, n, type_, MPI_SUM, window_),
                "MPI_Accumulate");
        } else {
          check(MPI_Put(origin, n, type_, chunk.holder, where, n, type_, window_), "MPI_Put");
        }
        if (chunk.holder != rank_) {
          const bool in = kind == Kind::kRead || kind == Kind::kCopyOut;
          (in ? bytes_read_ : bytes_accumulated_) += n * itemsize_;
        }
      }
    }
  }
  if (wait_until_done) complete();  // here and at the holders
}

}  // namespace mxkv
