#include "loom/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace loom::optim {

double LrSchedule::at(int64_t step) const {
  if (step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup - 1);
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(decay_steps));
  const double floor = peak * min_ratio;
  return floor + 0.5 * (peak - floor) * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace loom::optim
