#include "loom/plan/mfu.h"

namespace loom::plan {

double step_model_flops(const RunPlan& plan) {
  const auto microbatches = static_cast<double>(plan.schedule.microbatches);  // per replica
  const auto& p = plan.config.parallel;
  const auto ranks_per_stage = static_cast<double>(p.dp * p.tp * p.sp);      // alike (NOTE [Step simulator])
  double flops = 0;
  for (const StagePlan& stage : plan.stages)
    for (int64_t i : stage.layers) {
      const nn::Cost& cost = plan.chain[static_cast<size_t>(i)].cost;
      flops += microbatches * (cost.forward_flops + cost.backward_input_flops + cost.backward_weight_flops);
    }
  return flops * ranks_per_stage;
}

double model_flops_utilisation(double step_model_flops, double step_s, double peak_flops_per_rank, int64_t ranks) {
  if (step_s <= 0 || peak_flops_per_rank <= 0 || ranks <= 0) return 0;
  return step_model_flops / (step_s * peak_flops_per_rank * static_cast<double>(ranks));
}

}  // namespace loom::plan
