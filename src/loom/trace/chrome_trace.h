#pragma once
// A Chrome-trace (Trace Event Format) recorder: complete events ("ph": "X") with microsecond
// timestamps, one process per rank and one thread track per stream of work. The file opens in
// Perfetto and chrome://tracing.
#include <chrono>
#include <string>
#include <vector>

#include "loom/dist/communicator.h"

namespace loom::trace {

class ChromeTrace {
 public:
  using Clock = std::chrono::steady_clock;

  explicit ChromeTrace(int rank = 0);
  void add(std::string name, std::string category, Clock::time_point start, Clock::time_point end, int track = 0);
  size_t size() const { return events_.size(); }
  // Writes the whole trace (via a temporary file and rename: never half a file).
  void write(const std::string& path) const;
  // This rank's events as a JSON array (one process track, named "rank R").
  std::string events_json() const;
  // One file from several ranks' events_json(): one track per rank on a shared time axis (the
  // traces' origins must be taken at the same moment, e.g. right after a barrier).
  static void write_merged(const std::string& path, const std::vector<std::string>& ranks_events);
  // Collective over `world`: every rank's events gathered to rank 0, which writes write_merged.
  void write_gathered(dist::Communicator& world, const std::string& path) const;

 private:
  struct Event {
    std::string name, category;
    double start_us, duration_us;
    int track;
  };
  int rank_;
  Clock::time_point origin_;
  std::vector<Event> events_;
};

}  // namespace loom::trace
