#pragma once
// The console progress line: step, loss, lr, gradient norm, tokens (or samples)/s, MFU, peak memory, ETA.
#include <chrono>
#include <functional>
#include <cstdint>
#include <iosfwd>
#include <string>

namespace loom::train {

struct StepRecord;

// The time left when `done` steps took `elapsed_s` and `left` steps remain: "m:ss", or "h:mm:ss"
// from an hour on; "?" before any step was timed.
std::string eta_text(double elapsed_s, int64_t done, int64_t left);

class ProgressPrinter {
 public:
  // Steps are counted from 1: this process trains steps first_step + 1 .. last_step (a resumed
  // run starts after its checkpoint, --stop-after ends it early) of the run's total_steps.
  // `unit`: what the throughput counts ("tok" for a GPT, "samples" for a DLRM); `now`: the clock
  // the pace is read from (a test's own), read once here, when this process begins its first step.
  using Now = std::function<std::chrono::steady_clock::time_point()>;
  ProgressPrinter(std::ostream* out, int64_t first_step, int64_t last_step, int64_t total_steps,
                  const char* unit = "tok", Now now = [] { return std::chrono::steady_clock::now(); });
  void print(const StepRecord& r);

 private:
  std::ostream* out_;
  int64_t first_step_, last_step_, total_steps_;
  const char* unit_;
  Now now_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace loom::train
