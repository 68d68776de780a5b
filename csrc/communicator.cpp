#include "communicator.h"

#include <algorithm>
#include <climits>

namespace mxkv {

namespace {
constexpr int kTag = 7001;
}  // namespace

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw MPIFailure(std::string(what) + " failed: " + std::string(text, len));
}

bool threads_may_call_mpi_at_once() {
  int level = MPI_THREAD_SINGLE;
  check_mpi(MPI_Query_thread(&level), "MPI_Query_thread");
  return level == MPI_THREAD_MULTIPLE;
}

Communicator::Communicator(MPI_Comm comm) {
  check_mpi(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

Communicator::~Communicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void Communicator::isend(const void* data, size_t bytes, int to, MPI_Request* request) const {
  check_mpi(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, to, kTag, comm_, request),
            "MPI_Isend");
}

void Communicator::irecv(void* data, size_t bytes, int from, MPI_Request* request) const {
  check_mpi(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, from, kTag, comm_, request),
            "MPI_Irecv");
}

void Communicator::wait(MPI_Request* request) {
  if (*request != MPI_REQUEST_NULL) check_mpi(MPI_Wait(request, MPI_STATUS_IGNORE), "MPI_Wait");
}

void Communicator::broadcast(void* data, size_t bytes, int root) const {
  const auto started = GroupLink::Clock::now();
  const int position = (rank_ - root + size_) % size_;  // along the pipeline from the root
  const int next = position + 1 < size_ ? (rank_ + 1) % size_ : -1;
  const int previous = position > 0 ? (rank_ + size_ - 1) % size_ : -1;
  char* bytes_at = static_cast<char*>(data);
  for (size_t done = 0; done < bytes; done += INT_MAX) {
    const int n = static_cast<int>(std::min<size_t>(INT_MAX, bytes - done));
    check_mpi(MPI_Bcast(bytes_at + done, n, MPI_BYTE, root, comm_), "MPI_Bcast");
  }
  link_.finish_step(started, next, next < 0 ? 0 : bytes, previous, previous < 0 ? 0 : bytes);
}

}  // namespace mxkv
