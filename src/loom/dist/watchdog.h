#pragma once
// NOTE [Watchdog] (internal to the MPI backend): blocking collectives use MPI's tuned blocking
// algorithms, which cannot time out by themselves. While one runs, the watchdog thread holds its
// deadline; if the call is not back by then, the watchdog prints the error and aborts the job
// (MPI_Abort, legal from another thread under MPI_THREAD_MULTIPLE; without it, std::abort ends
// this rank and the launcher the rest). Non-blocking operations time out in Work::wait instead.
#include <string>

namespace loom::dist::detail {

// Process-wide; started and stopped by the MPI Runtime. Without a started watchdog a Deadline
// does nothing (a world of one never blocks on a peer).
void start_watchdog(double timeout_s, int rank, bool thread_multiple);
void stop_watchdog();

// Holds the watchdog's deadline for the duration of one blocking call.
class Deadline {
 public:
  explicit Deadline(std::string what);
  ~Deadline();
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;

 private:
  std::string what_;
};

}  // namespace loom::dist::detail
