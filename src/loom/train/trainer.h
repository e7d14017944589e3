#pragma once
// The training loop of one process: micro-batches with gradient accumulation through the layer
// chain, global-norm clipping, AdamW with warmup + cosine LR, a console progress line, per-step
// metrics (JSON Lines) and a Chrome trace of every layer's forward / backward halves.
//
// Construction does every check that can fail on bad input (config, data, memory budget) and
// throws InputError before any parameter is allocated.
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/config.h"
#include "loom/data/token_source.h"
#include "loom/models/model.h"
#include "loom/optim/adamw.h"
#include "loom/trace/chrome_trace.h"

namespace loom::train {

struct TrainOptions {
  std::string metrics_path;     // "" = none
  std::string trace_path;       // "" = none
  std::ostream* progress = nullptr;  // progress lines; nullptr = quiet
  double peak_flops = 0;        // GEMM peak for MFU; 0 = measure at start
};

struct StepRecord {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double tokens_per_s = 0, step_ms = 0, mfu = 0;
  int64_t peak_bytes = 0;
};

class Trainer {
 public:
  explicit Trainer(Config config);
  ~Trainer();

  std::vector<StepRecord> run(const TrainOptions& options);
  models::Model& model() { return model_; }
  const Config& config() const { return config_; }
  // Bytes the run needs at least: parameters, gradients, optimizer moments, one micro-batch's
  // saved activations (or only layer inputs under full recompute).
  double estimated_bytes() const;

 private:
  double train_microbatch(int64_t step, int64_t microbatch_index);
  template <class Fn>
  auto timed(const std::string& name, const char* category, Fn&& fn);

  Config config_;
  at::ScalarType dtype_;
  std::unique_ptr<data::TokenSource> source_;
  models::Model model_;
  std::unique_ptr<optim::AdamW> optimizer_;
  std::unique_ptr<trace::ChromeTrace> trace_;  // set while a run records a trace
};

}  // namespace loom::train
