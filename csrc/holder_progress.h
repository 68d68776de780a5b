// Progress for the holders of remote memory. Over TCP (UCX's tcp transport) MPICH
// emulates one-sided reads and accumulates with active messages that the holder's MPI
// serves only while it is inside MPI: a group leader computing its next tau steps held
// up every other leader's exchange with it until its own next exchange (easgd over rma
// across emulated hosts: 44 ms a step where ps-lite's took 25). A HolderProgress is a
// thread that enters MPI every `period` (MPI_Iprobe on a communicator of its own, which
// matches nothing and drives the progress engine), sleeping in between: a small,
// bounded cost, where MPICH's own progress thread (MPIR_CVAR_ASYNC_PROGRESS) spins a core.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace mxkv {

class HolderProgress {
 public:
  // Collective over `comm` (it is duplicated). Needs MPI_THREAD_MULTIPLE.
  HolderProgress(MPI_Comm comm, std::chrono::microseconds period);
  ~HolderProgress() { stop(); }
  // Ends the thread and frees the duplicate communicator (collective over the comm); once.
  void stop();
  HolderProgress(const HolderProgress&) = delete;
  HolderProgress& operator=(const HolderProgress&) = delete;

 private:
  void run();

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::chrono::microseconds period_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace mxkv
