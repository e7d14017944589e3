#include "loom/train/step_measures.h"

#include "loom/schedule/simulator.h"

namespace loom::train {
namespace {

// The simulator's bubble for this step's measured action times: every stage's mean F, B, W, R and
// BW (one all-reduce over pp of a [virtual stages, 5] table), replayed through the same schedule.
double predicted_bubble(const pipeline::StepResult& result, dist::Mesh& mesh, const schedule::Schedule& schedule) {
  at::Tensor table = at::zeros({schedule.virtual_stages(), 5}, at::TensorOptions().dtype(at::kDouble));
  for (size_t c = 0; c < result.measured.size(); ++c) {
    const schedule::StageCosts& m = result.measured[c];
    const int64_t v = schedule.virtual_stage(mesh.pp_rank(), static_cast<int64_t>(c));
    table[v].copy_(at::tensor({m.f, m.b, m.w, m.r, m.bw}, table.options()));
  }
  mesh.pp().all_reduce(table, dist::ReduceOp::Sum);
  schedule::Costs costs;
  const auto rows = table.accessor<double, 2>();
  for (int64_t v = 0; v < schedule.virtual_stages(); ++v)
    costs.stages.push_back({rows[v][0], rows[v][1], rows[v][2], rows[v][3], rows[v][4]});
  return schedule::simulate(schedule, costs).bubble_fraction;
}

}  // namespace

void measure_step(StepRecord& r, const pipeline::StepResult& result, dist::Mesh& mesh,
                  const schedule::Schedule& schedule, const StepBytes& bytes) {
  at::Tensor peak = at::tensor({bytes.peak, bytes.host_peak, bytes.state, bytes.model_state, bytes.working}, at::kLong);
  mesh.world().all_reduce(peak, dist::ReduceOp::Max);
  r.peak_bytes = peak[0].item<int64_t>();
  r.host_peak_bytes = peak[1].item<int64_t>();
  r.state_bytes = peak[2].item<int64_t>();
  r.model_state_bytes = peak[3].item<int64_t>();
  r.working_bytes = peak[4].item<int64_t>();
  if (mesh.pp().size() == 1) return;
  // Idle time in the pipeline's part of the step, averaged over the ranks. The part ends with its
  // last rank's last action, as the simulator's makespan does: a rank done earlier idles until
  // then (its next step waits for the others' messages), which its own wall time leaves out.
  at::Tensor span = at::full({1}, result.wall_s, at::TensorOptions().dtype(at::kDouble));
  mesh.pp().all_reduce(span, dist::ReduceOp::Max);
  at::Tensor bubble = at::full({1}, 1.0 - result.busy_s / span.item<double>(), at::TensorOptions().dtype(at::kDouble));
  mesh.world().all_reduce(bubble, dist::ReduceOp::Sum);
  r.bubble_fraction = bubble.item<double>() / mesh.world().size();
  r.predicted_bubble_fraction = predicted_bubble(result, mesh, schedule);
  const int64_t pp = mesh.pp().size();
  at::Tensor mine = at::full({1}, bytes.peak, at::kLong), stages = at::empty({pp}, at::kLong);
  mesh.pp().all_gather(mine, stages);
  for (int64_t i = 0; i < pp; ++i) r.peak_bytes_by_stage.push_back(stages[i].item<int64_t>());
}

}  // namespace loom::train
