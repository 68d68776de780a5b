#include "shared_link_clock.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace mxkv {

SharedLinkClock::SharedLinkClock(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0) throw std::runtime_error("shm_open(" + name + "): " + std::strerror(errno));
  // a new segment is zero-filled: both directions free since the clock's epoch
  if (ftruncate(fd, sizeof(Shared)) != 0) {
    const int error = errno;
    close(fd);
    throw std::runtime_error("ftruncate(" + name + "): " + std::strerror(error));
  }
  void* mapped = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (mapped == MAP_FAILED) throw std::runtime_error("mmap(" + name + "): " + std::strerror(errno));
  shared_ = static_cast<Shared*>(mapped);
}

SharedLinkClock::~SharedLinkClock() { munmap(shared_, sizeof(Shared)); }

SharedLinkClock::Clock::time_point SharedLinkClock::reserve(Direction direction,
                                                            Clock::time_point from,
                                                            double seconds) {
  const int64_t wanted =
      std::chrono::duration_cast<std::chrono::nanoseconds>(from.time_since_epoch()).count();
  const auto length = static_cast<int64_t>(seconds * 1e9);
  std::atomic<int64_t>& free_at = shared_->free_at[direction];
  int64_t current = free_at.load(std::memory_order_relaxed);
  int64_t end = 0;
  do {
    end = std::max(current, wanted) + length;
  } while (!free_at.compare_exchange_weak(current, end, std::memory_order_acq_rel));
  return Clock::time_point(
      std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(end)));
}

void SharedLinkClock::unlink(const std::string& name) { shm_unlink(name.c_str()); }

}  // namespace mxkv
