#pragma once
// The console progress line: step, loss, lr, gradient norm, tokens (or samples)/s, MFU, peak memory, ETA.
#include <chrono>
#include <iosfwd>

namespace loom::train {

struct StepRecord;

class ProgressPrinter {
 public:
  // `unit`: what the throughput counts ("tok" for a GPT, "samples" for a DLRM).
  ProgressPrinter(std::ostream* out, int64_t total_steps, const char* unit = "tok");
  void print(const StepRecord& r);

 private:
  std::ostream* out_;
  int64_t total_steps_;
  const char* unit_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace loom::train
