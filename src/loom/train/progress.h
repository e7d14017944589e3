#pragma once
// The console progress line: step, loss, lr, gradient norm, tokens/s, MFU, peak memory, ETA.
#include <chrono>
#include <iosfwd>

namespace loom::train {

struct StepRecord;

class ProgressPrinter {
 public:
  ProgressPrinter(std::ostream* out, int64_t total_steps);
  void print(const StepRecord& r);

 private:
  std::ostream* out_;
  int64_t total_steps_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace loom::train
