#include "loom/api/training.h"

#include <cstdlib>

#include "loom/train/auto_layout.h"
#include "loom/train/trainer.h"

namespace loom {
namespace {

StepMetrics metrics_of(const train::StepRecord& r) {
  return {.step = r.step, .loss = r.loss, .lr = r.lr, .grad_norm = r.grad_norm, .items_per_s = r.tokens_per_s,
          .step_ms = r.step_ms, .peak_bytes = r.peak_bytes, .val_loss = r.val_loss};
}

// parallel.auto, as `loom train` resolves it (NOTE [parallel.auto]): collective.
Config with_layout(Config config, dist::Communicator& world, const models::ModelKinds& kinds) {
  if (!config.parallel.auto_layout) return config;
  return train::choose_layout(config, world,
                              train::local_cluster_cache(std::getenv("XDG_CACHE_HOME"), std::getenv("HOME")), kinds)
      .config;
}

}  // namespace

Training::Training(Config config, dist::Communicator& world, const models::ModelKinds& kinds, const std::string& resume,
                   const dist::DeviceBackend* devices)
    : trainer_(std::make_unique<train::Trainer>(with_layout(std::move(config), world, kinds), world, resume, kinds,
                                                devices)) {}

Training::~Training() = default;
Training::Training(Training&&) noexcept = default;
Training& Training::operator=(Training&&) noexcept = default;

std::vector<StepMetrics> Training::run(const RunOptions& options) {
  train::TrainOptions o{.metrics_path = options.metrics_path, .trace_path = options.trace_path,
                        .progress = options.progress, .stop_after = options.stop_after};
  if (options.on_step) o.on_step = [&options](const train::StepRecord& r) { options.on_step(metrics_of(r)); };
  std::vector<StepMetrics> out;
  for (const train::StepRecord& r : trainer_->run(o)) out.push_back(metrics_of(r));
  return out;
}

double Training::validation_loss() { return trainer_->validation_loss(); }
const Config& Training::config() const { return trainer_->config(); }
std::string Training::plan() const { return trainer_->plan().describe(); }
int64_t Training::start_step() const { return trainer_->start_step(); }

std::vector<ParameterValue> Training::parameters() const {
  std::vector<ParameterValue> out;
  for (nn::Param* p : trainer_->model().params())
    out.push_back({.name = p->name, .full_shape = p->full_shape, .shard = p->part(), .value = trainer_->value_of(*p)});
  return out;
}

}  // namespace loom
