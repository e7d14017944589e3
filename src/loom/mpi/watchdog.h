#pragma once
// NOTE [Watchdog] (internal to the MPI backend): blocking collectives use MPI's tuned blocking
// algorithms, which cannot time out by themselves. While one runs, the watchdog thread holds its
// deadline; if the call is not back by then, the watchdog prints the error and aborts the job
// (MPI_Abort, legal from another thread under MPI_THREAD_MULTIPLE; without it, std::abort ends
// this rank and the launcher the rest). Non-blocking operations time out in Work::wait instead.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace loom::dist::detail {

// One per MPI Runtime, which owns it: its thread runs from construction to destruction. The
// communicators hold a pointer to it and arm it through a Deadline around each blocking call.
class Watchdog {
 public:
  Watchdog(double timeout_s, int rank, bool thread_multiple);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Arming copies the description and stores the start time; it never wakes the watchdog, which
  // only polls (blocking calls are frequent).
  void arm(const std::string& what);
  void disarm();

 private:
  void loop();

  double timeout_s_;
  int rank_;
  bool thread_multiple_;
  std::mutex what_mutex_;
  char what_[256] = {0};  // fixed storage: copied out under the lock when the deadline passes
  std::atomic<int64_t> since_ns_{0};
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: started once every member above is initialised
};

// Holds `watchdog`'s deadline for the duration of one blocking call. A null watchdog: nothing to
// guard with, the Deadline does nothing.
class Deadline {
 public:
  Deadline(Watchdog* watchdog, std::string what);
  ~Deadline();
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;

 private:
  Watchdog* watchdog_;
  std::string what_;
};

}  // namespace loom::dist::detail
