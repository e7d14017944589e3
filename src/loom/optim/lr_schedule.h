#pragma once
// Learning rate for 0-based step s: linear warmup over `warmup` steps to `peak`, then cosine decay
// to peak * min_ratio at the last step.
#include <cstdint>

namespace loom::optim {

struct LrSchedule {
  double peak;
  double min_ratio;
  int64_t warmup;
  int64_t total_steps;

  double at(int64_t step) const;
};

}  // namespace loom::optim
