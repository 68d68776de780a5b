// Overlap of communication with backward (the way Horovod's MXNet binding
// joins MXNet's dependency engine): every bucket of a call becomes an
// asynchronous engine operation that reads its gradients and writes its
// outputs. MXNet starts it as soon as the backward operations that write
// those gradients are done, while the rest of backward still runs; the
// operation hands the bucket to one communication thread and returns at once.
//
// The thread runs buckets strictly in the order they were pushed, which is
// the same on every rank, so MPI calls always match whatever order the
// gradients become ready in on each rank. A bucket's result is the one the
// blocking path computes (same plan, same algorithm): timing never changes
// the numbers. Later MXNet operations on the outputs (the optimizer update)
// wait for the bucket through the engine.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "mxnet_api.h"

namespace mxkv {

class OverlapQueue {
 public:
  using Work = std::function<void()>;

  OverlapQueue() = default;
  ~OverlapQueue() { stop(); }
  OverlapQueue(const OverlapQueue&) = delete;
  OverlapQueue& operator=(const OverlapQueue&) = delete;

  // Pushes `work` into MXNet's engine after the reads of `reads` and writes of
  // `writes`; it runs on the communication thread in push order.
  void push(Work work, std::vector<NDArrayHandle> reads, std::vector<NDArrayHandle> writes);

  // Blocks until every pushed bucket has run.
  void drain();

  // drain(), then ends the thread (idempotent; before MPI_Finalize).
  void stop();

  // Buckets pushed so far.
  uint64_t pushed() const { return pushed_; }

  // Buckets pushed and not yet run to the end.
  size_t pending();

  // Seconds the communication thread has been running its current bucket (0 when it
  // is idle, or waiting for the engine to make a bucket ready): the stall monitor
  // watches it, since the caller's thread does not wait for these buckets.
  double running_seconds() const;

 private:
  struct Job;
  static void on_engine_ready(void* run_context, void* on_complete, void* param);
  void run_jobs();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<Job>> jobs_;
  bool stopping_ = false;
  uint64_t pushed_ = 0;
  std::atomic<int64_t> running_since_ns_{0};  // steady clock; 0: no bucket running
  std::thread thread_;
};

}  // namespace mxkv
