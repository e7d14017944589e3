#pragma once
// Small statistics over measured samples (timings): one home for what trials and profiles share.
#include <algorithm>
#include <vector>

#include "loom/core/error.h"

namespace loom {

// The median of `samples` (the mean of the middle two for an even count); at least one sample.
inline double median(std::vector<double> samples) {
  LOOM_CHECK(!samples.empty(), "median of no samples");
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  return n % 2 == 1 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
}

}  // namespace loom
