#pragma once
// The training loop: micro-batches with gradient accumulation through the layer chain, data
// parallelism over the mesh's dp axis (bucketed all-reduce overlapping backward, or ZeRO-1),
// global-norm clipping, AdamW with warmup + cosine LR, a console progress line, per-step metrics
// (JSON Lines) and a Chrome trace of every layer's forward / backward halves.
//
// Construction runs every check that can fail on bad input (config, layout against the world,
// data, memory budget), agrees on the outcome with all ranks (dist/input_agreement.h), and only
// then allocates parameters or communicates. Every rank of `world` constructs and runs it.
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/config.h"
#include "loom/data/token_source.h"
#include "loom/dist/mesh.h"
#include "loom/dist/null_communicator.h"
#include "loom/dist/recording_communicator.h"
#include "loom/models/model.h"
#include "loom/optim/adamw.h"
#include "loom/parallel/flat_params.h"
#include "loom/parallel/gradient_reducer.h"
#include "loom/parallel/sharded_adamw.h"
#include "loom/parallel/tp_region.h"
#include "loom/trace/chrome_trace.h"

namespace loom::train {

struct TrainOptions {
  std::string metrics_path;          // "" = none; written by world rank 0
  std::string trace_path;            // "" = none; rank r > 0 writes PATH.rank<r>
  std::ostream* progress = nullptr;  // progress lines (rank 0); nullptr = quiet
  double peak_flops = 0;             // GEMM peak for MFU; 0 = measure at start
};

struct StepRecord {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double tokens_per_s = 0, step_ms = 0, mfu = 0;
  int64_t peak_bytes = 0;                       // largest over ranks
  std::map<std::string, int64_t> comm_bytes;    // this rank's bytes by mesh axis
};

class Trainer {
 public:
  Trainer(Config config, dist::Communicator& world);
  ~Trainer();

  std::vector<StepRecord> run(const TrainOptions& options);
  models::Model& model() { return model_; }
  const Config& config() const { return config_; }
  dist::Mesh& mesh() { return *mesh_; }
  // The communication of the last step run (each step starts a fresh record).
  const dist::CommStats& comm_stats() const { return comm_stats_; }
  // Bytes the run needs at least: parameters, gradients, optimizer moments, one micro-batch's
  // saved activations (or only layer inputs under full recompute).
  double estimated_bytes() const;

 private:
  void check_input(dist::Communicator& world);
  double train_microbatch(int64_t step, int64_t microbatch_index, bool last_local);
  double optimizer_step(double lr);
  parallel::TpOptions tp_options() const;
  template <class Fn>
  auto timed(const std::string& name, const char* category, Fn&& fn);

  Config config_;
  at::ScalarType dtype_;
  std::unique_ptr<data::TokenSource> source_;
  std::unique_ptr<dist::SizingCommunicator> sizing_tp_;  // shapes the model for the input checks
  models::Model model_;
  dist::CommStats comm_stats_;
  std::unique_ptr<dist::RecordingCommunicator> world_;
  std::unique_ptr<dist::Mesh> mesh_;
  std::unique_ptr<parallel::FlatParams> flat_;
  std::unique_ptr<parallel::SequenceGradReducer> sequence_grads_;  // tp_sequence's partial gradients
  std::unique_ptr<parallel::GradientReducer> reducer_;    // replicated optimizer (zero = 0)
  std::unique_ptr<optim::AdamW> optimizer_;
  std::unique_ptr<parallel::ShardedAdamW> sharded_;        // zero = 1
  std::unique_ptr<trace::ChromeTrace> trace_;              // set while a run records a trace
};

}  // namespace loom::train
