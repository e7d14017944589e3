#pragma once
// A Chrome-trace (Trace Event Format) recorder: complete events ("ph": "X") with microsecond
// timestamps, one process per rank and one thread track per stream of work. The file opens in
// Perfetto and chrome://tracing.
//
// NOTE [Streamed trace]: a long run must not hold its trace in memory, and an interrupted run
// must still leave a readable one. Each rank keeps only the events since the last flush; at the
// end of every step `flush_gathered` sends them to rank 0 (one collective over the world), which
// appends them to a TraceFile: the JSON array form of the format, one event per line, written in
// place (NOTE [Live output files]). A reader accepts that form without its closing bracket, so the
// file opens at any moment, even after its run was killed; close() writes the bracket.
#include <chrono>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/live_file.h"
#include "loom/dist/communicator.h"

namespace loom::trace {

// The tracks of a rank: its compute thread's actions and messages, and the swap tier's copies
// (NOTE [Swap tier]), which run beside them.
inline constexpr int kComputeTrack = 0;
inline constexpr int kSwapTrack = 1;
// The replicas' gradient reduction, drawn by `loom simulate`; in a real run ZeRO-2/3's gathers and
// reduce-scatters, from issue to completion (the buckets' all-reduce shows inside the compute
// track's actions).
inline constexpr int kGradientTrack = 2;

// A trace's beginning: "[" and the metadata naming each rank's process and tracks; then come the
// events, each line after a ",\n", and kTraceEnd.
std::string trace_head(int ranks);
inline constexpr std::string_view kTraceEnd = "\n]\n";

// Rank 0's trace file: the head, then the events as they arrive.
class TraceFile {
 public:
  TraceFile(LiveFile file, int ranks);  // `file` LiveFile::open'ed: started here
  void append(std::string_view events);  // events as ChromeTrace::take_events returns them
  void close() { out_.close(kTraceEnd); }  // the closing bracket; thread-safe, idempotent

 private:
  LiveFile out_;
};

class ChromeTrace {
 public:
  using Clock = std::chrono::steady_clock;

  explicit ChromeTrace(int rank = 0);
  // Thread-safe: the pipeline's message thread records too.
  void add(std::string name, std::string category, Clock::time_point start, Clock::time_point end, int track = 0);
  // An event at `start_s` seconds from the origin, lasting `duration_s` (a predicted timeline).
  void add_at(std::string name, std::string category, double start_s, double duration_s, int track = 0);
  size_t pending() const;
  // The events since the last take, one JSON object per line ("" when none), and forgets them.
  std::string take_events();
  // Collective over `world`: every rank's pending events to rank 0, which appends them to `file`
  // (null on the other ranks).
  void flush_gathered(dist::Communicator& world, TraceFile* file);

 private:
  struct Event {
    std::string name, category;
    double start_us, duration_us;
    int track;
  };
  int rank_;
  Clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<Event> events_;
};

}  // namespace loom::trace
