#include "loom/schedule/stage_cuts.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "loom/core/error.h"

namespace loom::schedule {

void check_stage_count(int64_t layers, int64_t parts) {
  LOOM_CHECK_INPUT(parts >= 1 && parts <= layers,
                   "the model's chain has {} layers (embedding, 2 per transformer block, final norm, head), fewer "
                   "than the {} pipeline stages x chunks; hint: lower parallel.pp or parallel.chunks",
                   layers, parts);
}

std::vector<int64_t> balanced_cuts(const std::vector<double>& layer_costs, int64_t parts) {
  const auto n = static_cast<int64_t>(layer_costs.size());
  check_stage_count(n, parts);
  std::vector<double> prefix(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + layer_costs[i];
  return balanced_cuts(n, parts, [&](int64_t, int64_t j, int64_t i) { return prefix[i] - prefix[j]; });
}

std::vector<int64_t> balanced_cuts(int64_t n, int64_t parts, const SliceCost& slice_cost) {
  check_stage_count(n, parts);
  if (parts == 1)  // nothing to choose (and n may be large: the search below is O(parts n^2))
    return std::isinf(slice_cost(0, 0, n)) ? std::vector<int64_t>{} : std::vector<int64_t>{0, n};
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[k][i]: the smallest largest-slice cost of the first i layers in k slices.
  std::vector<std::vector<double>> best(parts + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int64_t>> from(parts + 1, std::vector<int64_t>(n + 1, 0));
  best[0][0] = 0;
  for (int64_t k = 1; k <= parts; ++k)
    for (int64_t i = k == parts ? n : k; i <= n - (parts - k); ++i)  // the last slice ends at n
      for (int64_t j = k - 1; j < i; ++j) {
        if (best[k - 1][j] == kInf) continue;
        const double cost = std::max(best[k - 1][j], slice_cost(k - 1, j, i));
        if (cost < best[k][i]) best[k][i] = cost, from[k][i] = j;
      }
  if (best[parts][n] == kInf) return {};
  std::vector<int64_t> cuts(parts + 1);
  cuts[parts] = n;
  for (int64_t k = parts; k > 0; --k) cuts[k - 1] = from[k][cuts[k]];
  return cuts;
}

std::vector<int64_t> explicit_cuts(const std::vector<int64_t>& pp_cuts, int64_t layers, int64_t parts) {
  LOOM_CHECK_INPUT(static_cast<int64_t>(pp_cuts.size()) == parts - 1,
                   "parallel.pp_cuts has {} entries; {} stages x chunks need {} (the first chain index of every "
                   "slice but the first)",
                   pp_cuts.size(), parts, parts - 1);
  std::vector<int64_t> cuts{0};
  for (int64_t c : pp_cuts) {
    LOOM_CHECK_INPUT(c > cuts.back() && c < layers,
                     "parallel.pp_cuts must increase strictly within (0, {}) (the chain's {} layers), got {} after {}",
                     layers, layers, c, cuts.back());
    cuts.push_back(c);
  }
  cuts.push_back(layers);
  return cuts;
}

double stage_recompute_ratio(double first_stage_ratio, int64_t stage, int64_t stages) {
  if (stage + 1 >= stages) return 0.0;
  const double r = 1.0 - (1.0 - first_stage_ratio) * static_cast<double>(stages - 1) /
                             static_cast<double>(stages - 1 - stage);
  return std::clamp(r, 0.0, 1.0);
}

}  // namespace loom::schedule
