// A private duplicate of an MPI communicator, with the few point-to-point
// calls the allreduce algorithms need. Duplicating keeps the algorithms'
// messages apart from anything the user sends on the original communicator.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "group_link.h"

namespace mxkv {

// An MPI call that failed at run time: in practice a rank of the job ended or the link
// to it broke (Python sees it as _C.MPIFailure).
struct MPIFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws MPIFailure naming `what` and MPI's error text.
void check_mpi(int rc, const char* what);

// Whether MPI was initialised for calls from several threads at once (MPI_THREAD_MULTIPLE).
bool threads_may_call_mpi_at_once();

class Communicator {
 public:
  explicit Communicator(MPI_Comm comm);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  MPI_Comm comm() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Byte messages; counts above INT_MAX are not used (segments are small).
  void isend(const void* data, size_t bytes, int to, MPI_Request* request) const;
  void irecv(void* data, size_t bytes, int from, MPI_Request* request) const;
  static void wait(MPI_Request* request);
  // MPI_Bcast of any number of bytes. What MPI sends is not visible here: the
  // link counts it as a pipeline from the root along the ranks (each rank sends
  // the bytes to the next), which is what large broadcasts approach.
  void broadcast(void* data, size_t bytes, int root) const;

  // Where the peers sit (groups), the bytes sent to them, the emulated slow link.
  GroupLink& link() const { return link_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  mutable GroupLink link_;  // counters only: the communicator's calls stay const
};

}  // namespace mxkv
