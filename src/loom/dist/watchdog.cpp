#include "loom/dist/watchdog.h"

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

namespace loom::dist::detail {
namespace {

class Watchdog {
 public:
  Watchdog(double timeout_s, int rank, bool thread_multiple)
      : timeout_s_(timeout_s), rank_(rank), thread_multiple_(thread_multiple), thread_([this] { loop(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // Arming is a store, not a wake-up: blocking calls are frequent and the watchdog only polls.
  void arm(const std::string* what) {
    what_.store(what, std::memory_order_relaxed);
    since_ns_.store(now_ns(), std::memory_order_release);
  }
  void disarm() { since_ns_.store(0, std::memory_order_release); }

 private:
  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void loop() {
    const auto poll = std::chrono::duration<double>(std::clamp(timeout_s_ / 10, 0.05, 1.0));
    std::unique_lock<std::mutex> lock(mutex_);
    while (!cv_.wait_for(lock, poll, [this] { return stop_; })) {
      const int64_t since = since_ns_.load(std::memory_order_acquire);
      if (since == 0 || static_cast<double>(now_ns() - since) < timeout_s_ * 1e9) continue;
      const std::string* what = what_.load(std::memory_order_relaxed);
      std::fprintf(stderr,
                   "loom: error: [rank %d] %s did not complete within %.0f s; a peer rank has probably failed or is "
                   "stuck\n",
                   rank_, what != nullptr ? what->c_str() : "a blocking collective", timeout_s_);
      std::fflush(stderr);
      if (thread_multiple_) MPI_Abort(MPI_COMM_WORLD, 1);
      std::abort();
    }
  }

  double timeout_s_;
  int rank_;
  bool thread_multiple_;
  std::atomic<const std::string*> what_{nullptr};
  std::atomic<int64_t> since_ns_{0};
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

std::unique_ptr<Watchdog> g_watchdog;

}  // namespace

void start_watchdog(double timeout_s, int rank, bool thread_multiple) {
  g_watchdog = std::make_unique<Watchdog>(timeout_s, rank, thread_multiple);
}

void stop_watchdog() { g_watchdog.reset(); }

Deadline::Deadline(std::string what) : what_(std::move(what)) {
  if (g_watchdog) g_watchdog->arm(&what_);
}

Deadline::~Deadline() {
  if (g_watchdog) g_watchdog->disarm();
}

}  // namespace loom::dist::detail
