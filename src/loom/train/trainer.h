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
#include <c10/util/Exception.h>

#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/ckpt/checkpointer.h"
#include "loom/ckpt/manifest.h"
#include "loom/core/config.h"
#include "loom/data/batches.h"
#include "loom/dist/interrupt.h"
#include "loom/cuda/placement.h"
#include "loom/dist/device_backend.h"
#include "loom/dist/host_staging.h"
#include "loom/dist/mesh.h"
#include "loom/dist/null_communicator.h"
#include "loom/dist/recording_communicator.h"
#include "loom/models/registry.h"
#include "loom/nn/precision.h"
#include "loom/nn/products.h"
#include "loom/optim/adamw.h"
#include "loom/replicas/replica_optimizer.h"
#include "loom/replicas/sparse_tables.h"
#include "loom/parallel/tp_region.h"
#include "loom/parallel/sequence_parallel.h"
#include "loom/pipeline/executor.h"
#include "loom/plan/run_plan.h"
#include "loom/trace/chrome_trace.h"
#include "loom/train/run_report.h"

namespace loom::train {

// A GPU allocation refused (past the GPU's memory or memory.budget's share of it), in one line.
std::string gpu_out_of_memory(const c10::OutOfMemoryError& e);

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
  // End the run after this step (counted from 1) as a preemption would, writing a checkpoint when
  // checkpoint.dir is set; the LR schedule stays that of train.steps. 0 = run to the end.
  int64_t stop_after = 0;
  // Called on every rank after it wrote its file of a checkpoint (rank, step): the kill test's hook.
  std::function<void(int, int64_t)> after_checkpoint_file;
  // Called on every rank after each step, with the step's record (the figures the metrics file
  // gets; loss and gradient norm are the whole model's, the same on every rank).
  std::function<void(const StepRecord&)> on_step;
};

class Trainer {
 public:
  // `resume`: "" (start fresh), "auto" (the latest complete checkpoint in checkpoint.dir, or fresh
  // when there is none) or a checkpoint directory (NOTE [Resuming]).
  // `kinds`: the model kinds model.kind may name (NOTE [Model kinds are a value]); the trainer
  // keeps a copy of it. `devices`: the backend for GPU tensors (NOTE [NCCL backend]; the
  // runtime's, which must outlive the trainer); null: GPU ranks communicate through `world`'s host
  // buffers (NOTE [Host staging]).
  Trainer(Config config, dist::Communicator& world, const std::string& resume = "",
          const models::ModelKinds& kinds = models::ModelKinds::builtin(),
          const dist::DeviceBackend* devices = nullptr);
  ~Trainer();
  // Every check the constructor runs on bad input (config, data, layout against `world_size`
  // ranks, schedule, memory against the budget or against this machine shared by `local_ranks`),
  // for every pipeline stage, with no communicator and nothing allocated. Throws InputError.
  // Returns the plan those checks ran on (NOTE [Run plan]).
  static plan::RunPlan check(const Config& config, int world_size, int local_ranks, const std::string& resume = "",
                             const models::ModelKinds& kinds = models::ModelKinds::builtin(),
                             const dist::DeviceBackend* devices = nullptr);
  // The step a resumed run starts from (0: a fresh run), and what it loaded.
  int64_t start_step() const { return resume_.start_step; }
  const std::string& resumed_from() const { return resume_.dir; }
  int64_t resumed_bytes() const { return resume_.bytes; }
  // The last checkpoint this run committed ("" none), and the seconds its writing took.
  std::string last_checkpoint() const { return checkpointer_ ? checkpointer_->last_committed() : ""; }
  double last_checkpoint_seconds() const { return checkpointer_ ? checkpointer_->last_seconds() : 0; }

  std::vector<StepRecord> run(const TrainOptions& options);
  // NOTE [Validation]: the mean loss per token (per sample for a DLRM) over data.valid's fixed
  // held-out sequences, forward only, in this layout; every layout gives the serial run's value.
  // Collective over every rank. Needs data.valid.
  double validation_loss();
  // Global batches of held-out samples a validation pass reads (train.eval_tokens, rounded up).
  int64_t eval_steps() const;
  models::Model& model() { return model_; }
  const Config& config() const { return config_; }
  dist::Mesh& mesh() { return *mesh_; }
  // The communication of the last step run (each step starts a fresh record).
  const dist::CommStats& comm_stats() const { return comm_stats_; }
  // Bytes the run needs at least: parameters, gradients, optimizer moments, one micro-batch's
  // saved activations (or only layer inputs under full recompute); a sparse table's owned rows,
  // their moments and the step's pulled rows.
  double estimated_bytes() const { return estimate().total(); }
  const plan::MemoryEstimate& estimate() const { return plan_.stage_of(world_rank_).memory; }
  const plan::RunPlan& plan() const { return plan_; }
  // A parameter's value as the serial model would hold it on this rank (its tp shard): a table on
  // the sparse path is gathered from its owners (collective over the replicas, in params() order).
  // Under ZeRO-3 a dense parameter is gathered (collective over its shard group).
  at::Tensor value_of(nn::Param& param) const {
    return param.sparse != nullptr ? param.sparse->gather_full() : optimizer_->full_value(param);
  }
  // This rank's embedding tables and their paths (NOTE [Table paths]): each one's path and why,
  // the partition count (0: no table on the sparse path), and the trials that chose it when
  // parallel.sparse_partitions = 0: (P, seconds) per candidate.
  const replicas::SparseTables& tables() const { return optimizer_->tables(); }
  int64_t sparse_partitions() const { return tables().partitions(); }
  const std::vector<replicas::TableChoice>& table_choices() const { return tables().choices(); }
  const std::vector<std::pair<int64_t, double>>& partition_trials() const { return tables().trials(); }

 private:
  Trainer(Config config, int world_size, int rank, int local_ranks, const std::string& resume,
          const models::ModelKinds& kinds, const dist::DeviceBackend* devices);  // check() only
  // `local_rank` of `local_ranks` on this node: the device it resolves to (NOTE [Devices]).
  void check_input(int world_size, int local_rank, int local_ranks, const std::string& resume);
  // The communicator the run's tensors cross (NOTE [Devices]): `world` itself for host tensors, the
  // device backend's when every rank resolved to it, else `world` through host buffers. Collective.
  dist::Communicator& device_world(dist::Communicator& world);
  // Checkpoints and resuming (train/checkpointing.cpp).
  void check_resume(const std::string& spec);
  void restore();
  void check_init();
  void initialize();
  std::vector<replicas::TableChoice> saved_table_choices(int64_t* partitions) const;
  ckpt::CheckpointMeta checkpoint_meta(int64_t steps_done);
  double save_checkpoint(int64_t steps_done);  // seconds the save held the run
  // After step `done` (counted from 1): whether this run saves a checkpoint now.
  bool checkpoint_due(int64_t done, bool stopping) const;
  std::unique_ptr<ckpt::Checkpointer> make_checkpointer(const std::function<void(int, int64_t)>& hook);
  std::string saved_text() const;
  int64_t replicas_size() const { return config_.parallel.dp * config_.parallel.sp; }
  void allocate();
  // One step (train/train_step.cpp).
  StepRecord train_step(int64_t step, double lr);
  StepRecord guarded_step(int64_t step, double lr);  // train_step, an allocation failure named
  void check_finite(int64_t step, double loss, double norm) const;
  double summed_loss(double local);
  std::string header() const;       // the run's first console lines (train/run_header.cpp); collective
  const nn::Bf16Choice& bf16_products() const { return products_; }  // this rank's path (NOTE [bf16 products])
  int64_t model_param_count() const;  // the whole model's parameters; collective over the world
  double flops_per_step() const;    // the whole job's model FLOPs in one step (NOTE [MFU])
  double gemm_peak() const;         // for MFU, when TrainOptions::peak_flops is not given
  models::Model build_model(dist::Communicator& tp, parallel::SpOptions sp) const;
  // Sample `index` of the global micro-batch order of `step`, cut to this rank's sp chunks.
  nn::MicroBatch microbatch(const data::Batches& batches, int64_t step, int64_t index) const;
  // This rank's dp share of the micro-batches of `step` (of the training data unless `batches`).
  std::vector<nn::MicroBatch> local_microbatches(int64_t step, const data::Batches* batches = nullptr) const;
  // Validation (train/validation.cpp). data.valid's held-out samples (null: none), read as the
  // model kind reads data.source.
  static std::unique_ptr<data::Batches> open_valid(const models::ModelKind& kind, const Config& config);
  // After step `done` (counted from 1) of a run ending at `last`: whether a validation pass runs.
  bool eval_due(int64_t done, int64_t last) const;
  void validate_after(StepRecord& record);
  std::vector<StepRecord> run_steps(const TrainOptions& options);  // run(), once there is something to run
  // parallel.sparse on this rank's device: "auto" keeps tables dense on a GPU, where the sparse
  // path's exchange does not run yet (cuda::check_trainable refuses "on").
  SparseMode sparse_mode() const { return device_.is_cpu() ? config_.parallel.sparse.value : SparseMode::Off; }
  std::unique_ptr<StepClock> step_clock() const;  // what times a step's work on this rank's device
  std::function<std::unique_ptr<memory::SwapTier>()> swap_tier() const;  // the device's swap tier
  void begin_budgets();            // memory.budget on this rank's device
  void end_budgets() noexcept;
  // The most bytes this rank's tensors held since the run's start: on its device (NOTE [Device
  // memory]) or, on the host, what the accounting allocator counted.
  int64_t peak_bytes() const;
  int64_t live_bytes() const;  // what this rank's tensors hold now, on its device
  // How this rank's embedding tables choose their paths (replicas::SparseTables).
  replicas::TableOptions table_options(const optim::AdamWOptions& adamw) const;
  void refresh_compute_values();
  std::optional<at::ScalarType> grad_wire() const;
  // This rank's slice of the full chain `model_` (the layers of its virtual stages, in chunk
  // order) and how its chunks run; `model_` keeps only those layers.
  std::vector<nn::MemoryPolicy> policies() const;
  parallel::TpOptions tp_options() const {
    return {.overlap = config_.parallel.tp_overlap, .sequence = config_.parallel.tp_sequence};
  }
  parallel::SpOptions sp_options() const;
  int64_t local_seq() const { return plan_.local_tokens; }  // the tokens of each sequence this rank holds (its sp segment)
  dist::Communicator& replicas();  // the group weight gradients are summed over: dp, or dp x sp

  // What --resume found (NOTE [Resuming]): set by check_resume and restore.
  struct Resume {
    std::string dir;                         // the checkpoint resumed from ("" none)
    std::string complete;                    // --resume auto found the last step's checkpoint: nothing to run
    std::optional<ckpt::Manifest> manifest;  // its manifest
    std::vector<std::string> notes;          // for the header
    int64_t start_step = 0;                  // the step the run starts from
    int64_t bytes = 0;                       // what rank 0 read, and in how many seconds
    double seconds = 0;
  };

  at::ScalarType dtype() const { return nn::master_type(config_.model.dtype); }  // the parameters' (master) type
  // The parameters' type on this rank's device (NOTE [Devices]).
  at::TensorOptions param_options() const { return at::TensorOptions().dtype(dtype()).device(device_); }
  // The activations' and products' type (NOTE [Mixed precision]).
  at::ScalarType activations() const { return nn::activation_type(config_.model.dtype); }

  Config config_;
  models::ModelKinds kinds_;    // what model.kind may name; kind_ and plan_.kind point into it
  int world_rank_;
  const dist::DeviceBackend* devices_ = nullptr;  // the backend for GPU tensors (null: none)
  cuda::Placement placement_;    // this rank's device and backend (NOTE [Devices]), set by check_input
  at::Device device_{at::kCPU};  // placement_'s, as libtorch names it
  nn::Bf16Choice products_;      // how this rank multiplies bfloat16 (NOTE [bf16 products]), set by check_input
  dist::Communicator* base_world_ = nullptr;  // unrecorded: the trainer's own agreements
  // What a GPU rank's tensors cross: the device backend's communicator, or the host backend
  // through host buffers (NOTE [Host staging]).
  std::unique_ptr<dist::Communicator> device_world_;
  const models::ModelKind* kind_ = nullptr;  // model.kind
  std::unique_ptr<data::Batches> data_;       // what it trains on
  std::unique_ptr<data::Batches> valid_;      // data.valid's held-out samples (null: none)
  plan::RunPlan plan_;  // what this run does (NOTE [Run plan])
  models::Model model_;
  dist::CommStats comm_stats_;
  std::unique_ptr<dist::RecordingCommunicator> world_;
  std::unique_ptr<dist::Mesh> mesh_;
  std::unique_ptr<parallel::SequenceGradReducer> sequence_grads_;  // tp_sequence's partial gradients
  std::unique_ptr<replicas::ReplicaOptimizer> optimizer_;
  std::unique_ptr<trace::ChromeTrace> trace_;              // set while a run records a trace
  std::unique_ptr<pipeline::PipelineExecutor> executor_;
  std::unique_ptr<StepClock> clock_;  // times the executor's actions (NOTE [Step clock])
  std::unique_ptr<ckpt::Checkpointer> checkpointer_;  // set while a run saves checkpoints
  std::optional<std::string> run_id_;  // the checkpoints' run (NOTE [A checkpoint folder belongs to one run])
  Resume resume_;
  // checkpoint.init's checkpoint, for a run that does not resume (NOTE [Starting from weights]).
  struct Init {
    std::string dir;
    std::optional<ckpt::Manifest> manifest;
  } init_;
};

}  // namespace loom::train
