// One training step: the rows the tables look up, the schedule's micro-batches through this rank's
// stages, the loss over the replicas, the guarded optimizer update and the step's measures.
#include <chrono>
#include <cmath>

#include "loom/core/error.h"
#include "loom/memory/accounting_allocator.h"
#include "loom/plan/run_plan.h"
#include "loom/train/expert_measures.h"
#include "loom/train/step_measures.h"
#include "loom/train/trainer.h"

namespace loom::train {

using Clock = std::chrono::steady_clock;

// NOTE [Non-finite guard]: a step whose loss or gradient norm is not finite is stopped after the
// norm is known and before any parameter changes (an infinite learning rate, a diverged run, bad
// data): the weights stay those of the last good step and the outputs are closed. The loss is
// summed over the replicas and the norm over every group, so all ranks see the same values and
// stop together.
void Trainer::check_finite(int64_t step, double loss, double norm) const {
  if (std::isfinite(loss) && std::isfinite(norm)) return;
  throw AgreedError(fmt::format("step {}: the loss is {} and the gradient norm {}; stopped before the optimizer "
                                "applied it (the weights are {}); hint: lower train.lr (now {}), set train.clip, or "
                                "check the data",
                                step, loss, norm, step == 1 ? std::string("the initial ones") : fmt::format("those after step {}", step - 1),
                                config_.train.lr),
                    1);
}

// Every segment's and replica's share of the loss, summed (and over pp from the last stage).
double Trainer::summed_loss(double local) {
  at::Tensor loss = at::full({1}, local, at::TensorOptions().dtype(at::kDouble));
  replicas().all_reduce(loss, dist::ReduceOp::Sum);
  if (mesh_->pp().size() > 1) mesh_->pp().all_reduce(loss, dist::ReduceOp::Sum);  // only the last stage has it
  return loss.item<double>();
}

// One optimizer step: the schedule's micro-batches, the loss summed over the replicas (and over pp
// from the last stage), the guarded optimizer update, the peak memory over ranks; with pp > 1 also
// the bubbles and each stage's peak.
StepRecord Trainer::train_step(int64_t step, double lr) {
  const auto start = Clock::now();
  comm_stats_.clear();  // keep one step's records: a long run must not grow them without bound
  StepRecord r;
  r.step = step + 1;
  r.lr = lr;
  optimizer_->zero_grad();
  const std::vector<nn::MicroBatch> microbatches = local_microbatches(step);
  replicas::Timeline timeline;
  if (trace_) timeline = [&](const char* name, const char* category, auto begin, auto end) {
    const bool beside = std::string_view(category) == replicas::kShardedTraffic;
    trace_->add(name, category, begin, end, beside ? trace::kGradientTrack : trace::kComputeTrack);
  };
  optimizer_->pull(microbatches, timeline);  // the rows this step's tables look up
  pipeline::ExecutorHooks hooks;
  hooks.microbatch = [&](int64_t i) { return microbatches[static_cast<size_t>(i)]; };
  // A layer's gradients are final once the rank's last micro-batch has passed it: under
  // tp_sequence its norms' partial gradients are summed over tp, then dp may reduce them.
  hooks.layer_done = [&](size_t layer) {
    sequence_grads_->layer_done(layer);
    optimizer_->layer_done(layer);
  };
  if (trace_) hooks.trace = [&](const std::string& name, const char* category, auto begin, auto end) {
    const bool copy = std::string_view(category) == pipeline::kSwapCategory;
    trace_->add(name, category, begin, end, copy ? trace::kSwapTrack : trace::kComputeTrack);
  };
  hooks.clock = clock_.get();
  hooks.params = optimizer_->residency();
  const pipeline::StepResult result = executor_->run_step(hooks);
  // The loss is summed once the gradients are (a blocking collective among the buckets' in-flight
  // all-reduces would hold them up), and checked before the update.
  if (checkpointer_) checkpointer_->before_update();  // an async save's copy of the state is taken
  r.grad_norm = optimizer_->step(lr, [&](double norm) {
    r.loss = summed_loss(result.loss);
    check_finite(r.step, r.loss, norm);
  }, timeline);
  refresh_compute_values();
  r.experts = measure_experts(model_, config_.model, mesh_->world());
  balance_experts(model_, config_.model, r.experts);
  r.comm_bytes = comm_stats_.bytes_by_axis();
  measure_step(r, result, *mesh_, plan_.schedule,
               {.peak = peak_bytes(), .host_peak = executor_->host_peak_bytes(), .state = live_bytes(),
                .model_state = optimizer_->model_state_bytes(), .working = optimizer_->working_peak_bytes()});
  r.step_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  return r;
}

// A step whose allocation fails names the memory estimate and the keys that size it.
StepRecord Trainer::guarded_step(int64_t step, double lr) {
  try {
    StepRecord r = train_step(step, lr);
    r.sparse_partitions = sparse_partitions();
    r.tables = table_choices();
    return r;
  } catch (const memory::OutOfMemory& e) {
    throw Error(fmt::format("{} in step {}; {}", e.what(), step + 1, plan::memory_text(plan_, estimate())));
  } catch (const c10::OutOfMemoryError& e) {
    throw Error(fmt::format("{} in step {}; {}", gpu_out_of_memory(e), step + 1, plan::memory_text(plan_, estimate())));
  }
}

}  // namespace loom::train
