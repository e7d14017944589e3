// What `loom plan` hands its user: the table of the fastest layouts and the config of the chosen
// one (declared in planner.h).
#include "loom/plan/planner.h"

#include <fmt/format.h>

#include "loom/core/units.h"

namespace loom::plan {

std::string describe(const PlanResult& r) {
  std::string out = fmt::format(
      "loom plan: {} layouts, {} refused by the model or schedule, {} over memory by weights alone, {} simulated "
      "({} did not fit), {} not simulated (keeping activations fitted: {}; estimated slower than the top {}: {})\n",
      r.enumerated, r.refused, r.over_memory, r.simulated, r.unfit, r.dominated + r.bounded, r.dominated,
      r.best.size(), r.bounded);
  out += fmt::format("{:>3} {:<58} {:>10} {:>12} {:>6} {}\n", "#", "layout", "step s", "tokens/s", "MFU",
                     "peak per stage");
  for (size_t i = 0; i < r.best.size(); ++i) {
    const StepPrediction& p = r.best[i];
    std::string peaks;
    if (p.peak_bytes_by_stage.size() <= 4)
      for (double b : p.peak_bytes_by_stage) peaks += fmt::format("{}{}", peaks.empty() ? "" : " ", format_bytes(b));
    else peaks = fmt::format("max {} over {} stages", format_bytes(p.largest_peak()), p.peak_bytes_by_stage.size());
    out += fmt::format("{:>3} {:<58} {:>10.4g} {:>12.6g} {:>5.1f}% {}\n", i + 1, layout_name(p), p.step_s,
                       p.tokens_per_s, 100 * p.mfu, peaks);
  }
  return out;
}

Config apply_layout(const Config& user, const Config& chosen) {
  Config out = user;
  out.parallel = chosen.parallel;
  out.parallel.auto_layout = false;  // the layout is now written: the trainer runs it as any other
  out.train.micro_batch = chosen.train.micro_batch;
  out.memory = chosen.memory;
  const bool needs_budget = chosen.memory.policy == PolicyMode::Auto || chosen.parallel.partition == Partition::Auto;
  if (!user.memory.budget.empty() || !needs_budget) out.memory.budget = user.memory.budget;
  return out;
}

std::string layout_toml(const Config& user, const Config& chosen) {
  return "# written by `loom plan` (docs/planner.md): the config with the chosen layout\n" +
         to_toml(apply_layout(user, chosen));
}

}  // namespace loom::plan
