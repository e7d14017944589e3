#pragma once
// The training loop: each step runs this rank's pipeline schedule (pipeline/executor.h; with
// pp = 1 a one-stage schedule of its micro-batches) over its slice of the layer chain, with data
// parallelism over the mesh's dp axis (bucketed all-reduce overlapping backward, or ZeRO-1),
// tensor parallelism inside the layers, global-norm clipping, AdamW with warmup + cosine LR, a
// console progress line, per-step metrics (JSON Lines) and a Chrome trace of every action.
//
// Construction runs every check that can fail on bad input (config, layout against the world,
// data, memory budget), agrees on the outcome with all ranks (dist/input_agreement.h), and only
// then allocates parameters or communicates. Every rank of `world` constructs and runs it.
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/config.h"
#include "loom/data/clicks.h"
#include "loom/data/token_source.h"
#include "loom/dist/interrupt.h"
#include "loom/dist/mesh.h"
#include "loom/dist/null_communicator.h"
#include "loom/dist/recording_communicator.h"
#include "loom/models/model.h"
#include "loom/optim/adamw.h"
#include "loom/parallel/flat_params.h"
#include "loom/parallel/gradient_reducer.h"
#include "loom/parallel/sharded_adamw.h"
#include "loom/parallel/sparse_tables.h"
#include "loom/parallel/tp_region.h"
#include "loom/parallel/sequence_parallel.h"
#include "loom/pipeline/executor.h"
#include "loom/trace/chrome_trace.h"

namespace loom::train {

struct TrainOptions {
  std::string metrics_path;          // "" = none; written by world rank 0
  std::string trace_path;            // "" = none; rank 0 writes every rank's events, one track each
  std::ostream* progress = nullptr;  // progress lines (rank 0); nullptr = quiet
  double peak_flops = 0;             // GEMM peak for MFU; 0 = measure at start
  // Polled at the end of every step (NOTE [Interrupts]); every rank must pass one or none. On a
  // signal every rank stops after the same step, the outputs are closed, and run() throws
  // AgreedError with exit code 128 + signal.
  dist::InterruptHandler* interrupts = nullptr;
  // Called on every rank before each step (rank, 0-based step): the failure tests' fault hook
  // (NOTE [Fault injection], tools/loom/cmd_train.cpp).
  std::function<void(int, int64_t)> before_step;
};

// What the up-front memory check counts per rank, in bytes.
struct MemoryEstimate {
  double weights = 0;      // parameters, gradients and AdamW moments (dense)
  double activations = 0;  // saved activations of the micro-batches a stage holds at once
  double sparse = 0;       // a sparse table's owned rows, their moments and the pulled rows
  int64_t stashed = 1;     // micro-batches held at once (the schedule's peak)
  double total() const { return weights + activations + sparse; }
};

struct StepRecord {
  int64_t step = 0;  // the step completed, counted from 1 (as the progress line and metrics say)
  double loss = 0, lr = 0, grad_norm = 0;
  double tokens_per_s = 0, step_ms = 0, mfu = 0;  // tokens_per_s: samples per second for a DLRM
  int64_t peak_bytes = 0;                       // largest over ranks
  double bubble_fraction = 0;                   // pp > 1: 1 - compute time / pipeline time, mean over ranks
  double predicted_bubble_fraction = 0;         // pp > 1: the simulator's, for the measured action times
  std::vector<int64_t> peak_bytes_by_stage;     // pp > 1: each pipeline stage's peak (this dp/tp slice)
  std::map<std::string, int64_t> comm_bytes;    // this rank's bytes by mesh axis
};

class Trainer {
 public:
  Trainer(Config config, dist::Communicator& world);
  ~Trainer();
  // Every check the constructor runs on bad input (config, data, layout against `world_size`
  // ranks, schedule, memory against the budget or against this machine shared by `local_ranks`),
  // for every pipeline stage, with no communicator and nothing allocated. Throws InputError.
  static void check(const Config& config, int world_size, int local_ranks);

  std::vector<StepRecord> run(const TrainOptions& options);
  models::Model& model() { return model_; }
  const Config& config() const { return config_; }
  dist::Mesh& mesh() { return *mesh_; }
  // The communication of the last step run (each step starts a fresh record).
  const dist::CommStats& comm_stats() const { return comm_stats_; }
  // Bytes the run needs at least: parameters, gradients, optimizer moments, one micro-batch's
  // saved activations (or only layer inputs under full recompute); a sparse table's owned rows,
  // their moments and the step's pulled rows.
  double estimated_bytes() const { return estimate().total(); }
  MemoryEstimate estimate() const;
  // A parameter's value as the serial model would hold it on this rank (its tp shard): a table on
  // the sparse path is gathered from its owners (collective over the replicas, in params() order).
  at::Tensor value_of(nn::Param& param) const;
  // The sparse tables' partition count (0: no table on the sparse path), and the trials that
  // chose it when parallel.sparse_partitions = 0: (P, seconds) per candidate.
  int64_t sparse_partitions() const { return sparse_ ? sparse_->partitions() : 0; }
  const std::vector<std::pair<int64_t, double>>& partition_trials() const {
    static const std::vector<std::pair<int64_t, double>> none;
    return sparse_ ? sparse_->trials() : none;
  }

 private:
  Trainer(Config config, int world_size, int rank, int local_ranks);  // check() only
  void check_input(int world_size, int local_ranks);
  void check_memory(int local_ranks) const;
  void allocate();
  std::string memory_keys(const MemoryEstimate& need) const;  // the estimate's parts and their keys
  StepRecord train_step(int64_t step, double lr);
  double summed_loss(double local);
  void print_header(std::ostream& console);
  void print_summary(std::ostream& console, const std::vector<StepRecord>& records, double seconds,
                     const TrainOptions& options) const;
  void check_finite(int64_t step, double loss, double norm) const;
  models::Model build_model(dist::Communicator& tp, parallel::SpOptions sp) const;
  bool is_dlrm() const { return config_.model.kind == "dlrm"; }
  // Sample `index` of the global micro-batch order of `step`, cut to this rank's sp chunks.
  nn::MicroBatch microbatch(int64_t step, int64_t index) const;
  std::vector<nn::MicroBatch> local_microbatches(int64_t step) const;
  // parallel.sparse = "auto": every embedding table goes on the sparse path (NOTE [Sparse exchange]).
  void attach_sparse_tables(const optim::AdamWOptions& adamw);
  int64_t lookups_per_step() const;  // row lookups of one table by this rank in a step
  // This rank's slice of the full chain `model_` (the layers of its virtual stages, in chunk
  // order) and how its chunks run; `model_` keeps only those layers.
  std::vector<pipeline::StageChunk> take_stage_layers();
  pipeline::Schedule make_schedule() const;
  double predicted_bubble(const pipeline::StepResult& result);
  int64_t pp_rank_of(int rank) const;
  double optimizer_step(double lr, const std::function<void(double)>& before_update);
  parallel::TpOptions tp_options() const;
  parallel::SpOptions sp_options() const;
  int64_t local_seq() const;  // the tokens of each sequence this rank holds (its sp segment)
  dist::Communicator& replicas();  // the group weight gradients are summed over: dp, or dp x sp
  template <class Fn>
  auto timed(const std::string& name, const char* category, Fn&& fn);

  Config config_;
  at::ScalarType dtype_;
  int world_rank_;
  dist::Communicator* base_world_ = nullptr;  // unrecorded: the trainer's own agreements
  std::unique_ptr<data::TokenSource> source_;  // a GPT's tokens
  std::unique_ptr<data::ClickData> clicks_;    // a DLRM's samples
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
  std::vector<nn::Param*> dense_params_;  // every parameter not on the sparse path
  std::unique_ptr<parallel::SparseTables> sparse_;  // this rank's tables on the sparse path, if any
  std::unique_ptr<trace::ChromeTrace> trace_;              // set while a run records a trace
  pipeline::Schedule schedule_;
  std::unique_ptr<pipeline::PipelineExecutor> executor_;
  std::vector<int64_t> stage_stashed_;  // each pipeline rank's peak of stashed micro-batches (memory check)
};

}  // namespace loom::train
