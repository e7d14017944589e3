#include "loom/train/trainer.h"

#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <ostream>
#include <thread>

#include "loom/core/error.h"
#include "loom/core/units.h"
#include "loom/data/sampler.h"
#include "loom/memory/accounting_allocator.h"
#include "loom/models/gpt.h"
#include "loom/optim/clip.h"
#include "loom/optim/lr_schedule.h"
#include "loom/plan/gemm_peak.h"
#include "loom/train/progress.h"
#include "loom/trace/metrics_writer.h"

namespace loom::train {
namespace {

using Clock = std::chrono::steady_clock;

at::ScalarType dtype_of(const std::string& name) { return name == "float64" ? at::kDouble : at::kFloat; }

}  // namespace

Trainer::Trainer(Config config) : config_(std::move(config)), dtype_(dtype_of(config_.model.dtype)) {
  validate(config_);
  const int64_t threads = config_.train.threads > 0 ? config_.train.threads
                                                    : static_cast<int64_t>(std::thread::hardware_concurrency());
  at::set_num_threads(static_cast<int>(std::max<int64_t>(1, threads)));
  memory::install_accounting_allocator();
  source_ = data::open_source(config_);
  model_ = models::build_gpt(config_.model);
  const int64_t budget = config_.budget_bytes();
  if (budget > 0) {
    const double need = estimated_bytes();
    const double in_use = static_cast<double>(memory::live_bytes());
    LOOM_CHECK_INPUT(need + in_use <= static_cast<double>(budget),
                     "memory.budget = {} is too small: this run needs at least {} (parameters, gradients, "
                     "AdamW moments and one micro-batch's activations){}; hint: raise memory.budget, lower "
                     "train.micro_batch or set memory.recompute = \"full\"",
                     format_bytes(static_cast<double>(budget)), format_bytes(need),
                     in_use > 0 ? fmt::format(" besides {} already in use", format_bytes(in_use)) : "");
    memory::set_budget(budget);
  }
  model_.initialise(static_cast<uint64_t>(config_.train.seed), dtype_);
  optimizer_ = std::make_unique<optim::AdamW>(
      model_.params(), optim::AdamWOptions{.beta1 = config_.train.beta1, .beta2 = config_.train.beta2,
                                           .weight_decay = config_.train.weight_decay});
}

Trainer::~Trainer() {
  optimizer_.reset();
  model_.chain.clear();
  memory::set_budget(0);  // the budget belongs to this run, not to whatever the process does next
}

double Trainer::estimated_bytes() const {
  const int64_t bytes = dtype_ == at::kDouble ? 8 : 4;
  const auto& m = config_.model;
  const nn::Cost cost = model_.cost(config_.train.micro_batch, m.seq_len, bytes);
  const double activations = config_.memory.recompute == "full"
                                 ? static_cast<double>(config_.train.micro_batch * m.seq_len * m.d_model * bytes) *
                                       static_cast<double>(model_.chain.size())
                                 : cost.saved_bytes;
  return 4 * cost.param_bytes + activations;
}

template <class Fn>
auto Trainer::timed(const std::string& name, const char* category, Fn&& fn) {
  if (!trace_) return fn();
  const auto start = Clock::now();
  auto result = fn();
  trace_->add(name, category, start, Clock::now());
  return result;
}

double Trainer::train_microbatch(int64_t step, int64_t microbatch_index) {
  const data::BatchShape shape{config_.train.global_batch, config_.train.micro_batch, config_.model.seq_len};
  const nn::MicroBatch mb = data::make_microbatch(*source_, shape, step, microbatch_index);
  const bool recompute = config_.memory.recompute == "full";
  auto& chain = model_.chain;
  std::vector<nn::Saved> saved(chain.size());
  std::vector<at::Tensor> inputs(recompute ? chain.size() : 0);

  at::Tensor x = mb.tokens;
  for (size_t i = 0; i < chain.size(); ++i) {
    if (recompute) inputs[i] = x;
    x = timed(chain[i]->name(), "forward", [&] { return chain[i]->forward(x, mb, saved[i]); });
    if (recompute) saved[i].clear();  // keep only the input; forward runs again before backward
  }
  const double loss = x.item<double>();

  at::Tensor dy;
  for (size_t i = chain.size(); i-- > 0;) {
    nn::Layer& layer = *chain[i];
    if (recompute) timed(layer.name(), "recompute", [&] { return layer.forward(inputs[i], mb, saved[i]); });
    dy = timed(layer.name(), "backward_input", [&] { return layer.backward_input(dy, saved[i]); });
    timed(layer.name(), "backward_weight", [&] {
      layer.backward_weight(saved[i]);
      return 0;
    });
    if (recompute) inputs[i].reset();
  }
  return loss;
}

std::vector<StepRecord> Trainer::run(const TrainOptions& options) {
  const auto& t = config_.train;
  const int64_t bytes = dtype_ == at::kDouble ? 8 : 4;
  const double peak_flops = options.peak_flops > 0 ? options.peak_flops : plan::measure_gemm_peak(dtype_, 0.2);
  const nn::Cost cost = model_.cost(t.micro_batch, config_.model.seq_len, bytes);
  const double flops_per_step =
      static_cast<double>(config_.microbatch_count()) *
      (cost.forward_flops + cost.backward_input_flops + cost.backward_weight_flops);
  const double tokens_per_step = static_cast<double>(t.global_batch * config_.model.seq_len);
  const optim::LrSchedule schedule{t.lr, t.min_lr_ratio, t.warmup, t.steps};
  memory::reset_peak();  // the GEMM probe above is not part of the run
  trace::MetricsWriter metrics(options.metrics_path);
  if (!options.trace_path.empty()) trace_ = std::make_unique<trace::ChromeTrace>();
  const auto params = model_.params();
  ProgressPrinter progress(options.progress, t.steps);
  if (options.progress != nullptr) {
    *options.progress << fmt::format("loom: {} parameters, {}, {} threads; data: {}\n", model_.param_count(),
                                     config_.model.dtype, at::get_num_threads(), source_->describe());
  }

  std::vector<StepRecord> records;
  for (int64_t step = 0; step < t.steps; ++step) {
    const auto start = Clock::now();
    StepRecord r;
    r.step = step;
    for (int64_t m = 0; m < config_.microbatch_count(); ++m) r.loss += train_microbatch(step, m);
    r.grad_norm = timed("clip", "optimizer", [&] { return optim::clip_grad_norm(params, t.clip); });
    r.lr = schedule.at(step);
    timed("adamw", "optimizer", [&] {
      optimizer_->step(r.lr);
      for (nn::Param* p : params) nn::zero_grad(*p);
      return 0;
    });
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    r.step_ms = seconds * 1e3;
    r.tokens_per_s = tokens_per_step / seconds;
    r.mfu = flops_per_step / seconds / peak_flops;
    r.peak_bytes = memory::peak_bytes();
    metrics.write({{"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
                   {"tokens_per_s", r.tokens_per_s}, {"step_ms", r.step_ms}, {"mfu", r.mfu},
                   {"peak_bytes", r.peak_bytes}});
    if (step % t.log_every == 0 || step + 1 == t.steps) progress.print(r);
    records.push_back(r);
  }
  if (trace_) {
    trace_->write(options.trace_path);
    trace_.reset();
  }
  return records;
}

}  // namespace loom::train
