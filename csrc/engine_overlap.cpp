#include "engine_overlap.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>

namespace mxkv {

namespace {

// mxnet::Engine::CallbackOnComplete (include/mxnet/engine.h, MXNet 1.9): a
// function, the engine and a parameter; copied out of the engine's frame.
struct EngineCallback {
  void (*callback)(void* engine, void* param, const void* error);
  void* engine;
  void* param;
  void operator()() const { callback(engine, param, nullptr); }
};

int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// mxnet::Context for the CPU (dev_type kCPU = 1, dev_id 0).
struct CpuContext {
  int32_t dev_type = 1;
  int32_t dev_id = 0;
};
const CpuContext kCpuContext;

}  // namespace

struct OverlapQueue::Job {
  OverlapQueue* queue;
  Work work;
  bool ready = false;
  EngineCallback done{};
};

void OverlapQueue::push(Work work, std::vector<NDArrayHandle> reads,
                        std::vector<NDArrayHandle> writes) {
  auto job = std::make_shared<Job>();
  job->queue = this;
  job->work = std::move(work);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!thread_.joinable()) {
      stopping_ = false;
      thread_ = std::thread(&OverlapQueue::run_jobs, this);
    }
    jobs_.push_back(job);
    ++pushed_;
  }
  const MXNetApi& api = mxnet_api();
  api.check(api.push_async(&OverlapQueue::on_engine_ready, job.get(), nullptr,
                           const_cast<CpuContext*>(&kCpuContext), reads.data(),
                           static_cast<int>(reads.size()), writes.data(),
                           static_cast<int>(writes.size()), nullptr, 0, "mxkv_allreduce", false),
            "MXEnginePushAsyncND");
}

void OverlapQueue::on_engine_ready(void*, void* on_complete, void* param) {
  Job* job = static_cast<Job*>(param);
  std::lock_guard<std::mutex> lock(job->queue->mutex_);
  std::memcpy(&job->done, on_complete, sizeof(EngineCallback));
  job->ready = true;
  job->queue->changed_.notify_all();
}

void OverlapQueue::run_jobs() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] {
        return (!jobs_.empty() && jobs_.front()->ready) || (stopping_ && jobs_.empty());
      });
      if (jobs_.empty()) return;
      job = jobs_.front();
    }
    running_since_ns_.store(steady_now_ns());
    try {
      job->work();
    } catch (const std::exception& e) {
      // The other ranks are inside the same collective: end this rank, and
      // mpiexec ends them (as topology.end_job does for Python errors).
      std::fprintf(stderr, "mxkv_hybrid: overlapped allreduce failed: %s\n", e.what());
      std::fflush(stderr);
      _exit(1);
    }
    running_since_ns_.store(0);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.pop_front();
      changed_.notify_all();
    }
    job->done();
  }
}

double OverlapQueue::running_seconds() const {
  const int64_t since = running_since_ns_.load();
  return since == 0 ? 0.0 : (steady_now_ns() - since) * 1e-9;
}

size_t OverlapQueue::pending() {
  std::lock_guard<std::mutex> lock(mutex_);
  return jobs_.size();
}

void OverlapQueue::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return jobs_.empty(); });
}

void OverlapQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!thread_.joinable()) return;
    stopping_ = true;
    changed_.notify_all();
  }
  thread_.join();
}

}  // namespace mxkv
