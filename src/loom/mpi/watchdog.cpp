#include "loom/mpi/watchdog.h"

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace loom::dist::detail {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Watchdog::Watchdog(double timeout_s, int rank, bool thread_multiple)
    : timeout_s_(timeout_s), rank_(rank), thread_multiple_(thread_multiple), thread_([this] { loop(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::arm(const std::string& what) {
  std::lock_guard<std::mutex> lock(what_mutex_);
  const size_t n = std::min(what.size(), sizeof(what_) - 1);
  std::memcpy(what_, what.data(), n);
  what_[n] = '\0';
  since_ns_.store(now_ns(), std::memory_order_release);
}

void Watchdog::disarm() {
  std::lock_guard<std::mutex> lock(what_mutex_);
  since_ns_.store(0, std::memory_order_release);
}

void Watchdog::loop() {
  const auto poll = std::chrono::duration<double>(std::clamp(timeout_s_ / 10, 0.05, 1.0));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!cv_.wait_for(lock, poll, [this] { return stop_; })) {
    const int64_t since = since_ns_.load(std::memory_order_acquire);
    if (since == 0 || static_cast<double>(now_ns() - since) < timeout_s_ * 1e9) continue;
    char what[sizeof(what_)];
    {
      // Re-check under the lock: the call may have returned (and disarmed) in the meantime.
      std::lock_guard<std::mutex> guard(what_mutex_);
      if (since_ns_.load(std::memory_order_acquire) != since) continue;
      std::memcpy(what, what_, sizeof(what));
    }
    std::fprintf(stderr,
                 "loom: error: [rank %d] %s did not complete within %.0f s; a peer rank has probably failed or is "
                 "stuck\n",
                 rank_, what, timeout_s_);
    std::fflush(stderr);
    if (thread_multiple_) MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();
  }
}

Deadline::Deadline(Watchdog* watchdog, std::string what) : watchdog_(watchdog), what_(std::move(what)) {
  if (watchdog_ != nullptr) watchdog_->arm(what_);
}

Deadline::~Deadline() {
  if (watchdog_ != nullptr) watchdog_->disarm();
}

}  // namespace loom::dist::detail
