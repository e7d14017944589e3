// The trainer's validation passes (NOTE [Validation]): data.valid opened as the training data is,
// a forward-only pass over its fixed held-out batches in the run's layout, and when one runs.
#include <chrono>

#include "loom/core/error.h"
#include "loom/memory/accounting_allocator.h"
#include "loom/plan/run_plan.h"
#include "loom/train/trainer.h"

namespace loom::train {

using Clock = std::chrono::steady_clock;

// data.valid read as a model kind reads data.source: the same forms and checks. "synthetic" takes
// other samples of the synthetic source (another seed), so they are held out.
std::unique_ptr<data::Batches> Trainer::open_valid(const models::ModelKind& kind, const Config& config) {
  if (config.data.valid.empty()) return nullptr;
  Config valid = config;
  valid.data.source = config.data.valid;
  if (valid.data.source == "synthetic") valid.train.seed = config.train.seed ^ 0x5eedL;
  try {
    return kind.open_data(valid);
  } catch (const InputError& e) {
    throw InputError(fmt::format("data.valid: {}", e.what()));
  }
}

// NOTE [Validation]: a validation pass reads whole global batches of data.valid, "steps" 0, 1, ...
// of its sampler, so the held-out set is the same every time and in every layout (each micro-batch's
// loss_scale is 1 / the tokens of a global batch, as in training). Each rank takes its dp share
// and sp segments as in a step, the pipeline runs forward only (NOTE [Forward-only pass]), tables
// on the sparse path pull their rows without noting them for an update, and the losses are summed
// over the replicas and the pipeline as a step's are: the mean over the set, whatever the layout.
// Nothing of the pass reaches the weights, the optimizer or the data order of training.
int64_t Trainer::eval_steps() const {
  const int64_t per_sample = kind_->throughput(config_.model).per_sample;
  const int64_t samples = (config_.train.eval_tokens + per_sample - 1) / per_sample;
  return (samples + config_.train.global_batch - 1) / config_.train.global_batch;
}

double Trainer::validation_loss() {
  LOOM_CHECK(valid_ != nullptr, "validation_loss needs data.valid");
  double local = 0;
  const int64_t steps = eval_steps();
  try {
    for (int64_t e = 0; e < steps; ++e) {
      const std::vector<nn::MicroBatch> microbatches = local_microbatches(e, valid_.get());
      optimizer_->pull_for_forward(microbatches);
      local += executor_->run_forward(static_cast<int64_t>(microbatches.size()),
                                      [&](int64_t i) { return microbatches[static_cast<size_t>(i)]; },
                                      optimizer_->residency());
    }
  } catch (const memory::OutOfMemory& e) {
    throw Error(fmt::format("{} in a validation pass; {}", e.what(), plan::memory_text(plan_, estimate())));
  }
  return summed_loss(local) / static_cast<double>(steps);
}

// A validation pass after the step of `record`, timed and traced, its loss in the record.
void Trainer::validate_after(StepRecord& record) {
  const auto begin = Clock::now();
  record.val_loss = validation_loss();
  if (trace_) trace_->add("validation", "validation", begin, Clock::now());
  record.eval_s = std::chrono::duration<double>(Clock::now() - begin).count();
}

bool Trainer::eval_due(int64_t done, int64_t last) const {
  const int64_t every = config_.train.eval_every;
  return valid_ != nullptr && every > 0 && (done % every == 0 || done == last);
}

}  // namespace loom::train
