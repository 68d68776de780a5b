#include "holder_progress.h"

#include <stdexcept>

namespace mxkv {

HolderProgress::HolderProgress(MPI_Comm comm, std::chrono::microseconds period) : period_(period) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    throw std::runtime_error(
        "a progress thread for remote memory needs MPI initialised with "
        "MPI_THREAD_MULTIPLE");
  }
  if (period.count() <= 0) throw std::invalid_argument("the progress period must be positive");
  MPI_Comm_dup(comm, &comm_);
  thread_ = std::thread(&HolderProgress::run, this);
}

void HolderProgress::stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  thread_.join();
  MPI_Comm_free(&comm_);
}

void HolderProgress::run() {
  while (!stop_.load(std::memory_order_relaxed)) {
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, MPI_STATUS_IGNORE);
    std::this_thread::sleep_for(period_);
  }
}

}  // namespace mxkv
