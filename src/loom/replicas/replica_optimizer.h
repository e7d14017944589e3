#pragma once
// One rank's optimizer step over parameters replicated on `replicas` (the dp group, or dp x sp:
// NOTE [Sequence parallelism]): the dense gradients summed over the replicas (a bucketed
// all-reduce that overlaps backward, ZeRO-1's reduce-scatter and all-gather, or ZeRO-2/3's
// reduce-scatters per layer: NOTE [Fully sharded data parallelism]), the global
// gradient norm over every group and clipping, AdamW (over the looked-up rows only for lazy dense
// tables: NOTE [Lazy rows of dense tables]); the sparse tables' row gradients pushed to their
// owners, which update them (NOTE [Sparse exchange]).
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "loom/ckpt/checkpointer.h"
#include "loom/models/model.h"
#include "loom/optim/adamw.h"
#include "loom/replicas/expert_optimizer.h"
#include "loom/replicas/flat_params.h"
#include "loom/replicas/gradient_reducer.h"
#include "loom/replicas/sharded_adamw.h"
#include "loom/replicas/sharded_params.h"
#include "loom/replicas/sparse_tables.h"
#include "loom/replicas/timeline.h"

namespace loom::replicas {

struct ReplicaOptions {
  int zero = 0;            // parallel.zero: 0 replicated, 1 ZeRO-1, 2 and 3 sharded
  int64_t shard_group = 0; // ZeRO-2/3: replica ranks per shard group (ParallelConfig::shard_ranks); 0 all
  double bucket_mb = 25;   // the all-reduce's bucket size
  double clip = 0;         // global-norm limit; 0 = off
  optim::AdamWOptions adamw;
  // The type gradients cross the replicas in (parallel.grad_dtype); nullopt: their own.
  std::optional<at::ScalarType> grad_wire;
  at::ScalarType activations = at::kFloat;  // the products' type (ZeRO-3's gathered compute copies)
  // ZeRO-2/3: makes a dense parameter's value as its layer is sharded (ShardedOptions::initialise).
  std::function<void(nn::Param&)> initialise;
  // NOTE [Expert parallelism]: the expert group (the gradient norm sums the experts' parts over
  // it) and the replicas of this rank's experts (their gradients are summed over it); null: none.
  dist::Communicator* ep = nullptr;
  dist::Communicator* expert_replicas = nullptr;
};

class ReplicaOptimizer {
 public:
  // `model`: this rank's layers, initialised; `tables`: its embedding tables on their paths (an
  // empty set when it has none), initialised, owned from here on.
  // `tp`, `pp`: the other groups the gradient norm spans.
  ReplicaOptimizer(models::Model& model, dist::Communicator& replicas, dist::Communicator& tp,
                   dist::Communicator& pp, const ReplicaOptions& options, std::unique_ptr<SparseTables> tables);

  const SparseTables& tables() const { return *sparse_; }
  // Collective over the replicas, before the step's forward: the rows this step's micro-batches
  // look up, fetched from their owners (or noted, for lazy dense tables: SparseTables::pull).
  void pull(const std::vector<nn::MicroBatch>& microbatches, const Timeline& timeline);
  // The same for a forward-only pass, which trains nothing (SparseTables::pull_for_forward).
  void pull_for_forward(const std::vector<nn::MicroBatch>& microbatches) { sparse_->pull_for_forward(microbatches); }

  void zero_grad();
  // Every micro-batch has passed layer `layer` (its index in the model): its bucket may go.
  void layer_done(size_t layer) {
    if (reducer_) reducer_->layer_done(layer);
    if (experts_) experts_->layer_done(layer);
  }
  // ZeRO-2/3's gathers and reductions around the layers' passes (NOTE [Sharded parameters]); null
  // for the other stages.
  nn::ParamResidency* residency() { return fsdp_.get(); }
  // ZeRO-2/3's working set this step at its largest (ShardedParams::working_peak_bytes); 0 otherwise.
  int64_t working_peak_bytes() const { return fsdp_ ? fsdp_->working_peak_bytes() : 0; }
  // The bytes of the tensors that hold this rank's parameters (values and compute copies), their
  // gradients and AdamW moments, and its sparse tables' rows and moments: each storage counted
  // once, whole, from the live tensors (a flat buffer once, however many views of it).
  int64_t model_state_bytes() const;
  // A dense parameter's whole value (its tp part): collective over the shard group under ZeRO-3.
  at::Tensor full_value(const nn::Param& p) {
    return fsdp_ && !expert_sharded(p) ? fsdp_->full_value(p) : p.value;
  }
  // After a resume assigned the state: what is derived from the owned ranges is made again.
  void state_assigned() {
    if (fsdp_) fsdp_->refresh_units();
  }
  // Returns the global gradient norm; `before_update(norm)` runs once it is known and before any
  // weight changes (it may throw to stop the step: NOTE [Non-finite guard]).
  double step(double lr, const std::function<void(double)>& before_update, const Timeline& timeline);

  // Everything this rank holds of the run's state, as pieces of full tensors (NOTE
  // [Checkpoints]): each parameter's value (its tp shard; under ZeRO-2/3 the runs of it inside
  // this rank's owned ranges), its AdamW moments (the whole shard, or under ZeRO-1/2/3 the runs of
  // it inside this rank's optimizer shard), and the sparse tables' owned rows and their moments. Views of the live state. replicas/optimizer_state.cpp.
  std::vector<ckpt::TensorPiece> state_pieces() const;
  // Optimizer steps taken (the bias corrections' count); set when a run resumes.
  int64_t step_count() const;
  void set_step_count(int64_t steps);

 private:
  template <class Fn>
  auto timed(const Timeline& timeline, const char* name, const char* category, Fn&& fn);
  // The global norm over every parameter, each one's square added in model order (a table's at
  // its place, whichever path it took: NOTE [Table norms]), and the dense gradients clipped.
  double clip_replicated(double clip);
  double expert_square();

  dist::Communicator& tp_;
  dist::Communicator& pp_;
  ReplicaOptions options_;
  std::unique_ptr<SparseTables> sparse_;
  std::vector<nn::Param*> params_;  // every parameter of this rank, in model order
  std::vector<nn::Param*> dense_;   // those not on the sparse path, nor experts sharded over ep
  std::unique_ptr<FlatParams> flat_;
  std::unique_ptr<GradientReducer> reducer_;  // replicated AdamW
  std::unique_ptr<ExpertOptimizer> experts_;  // NOTE [Experts beside ZeRO]; null without ep
  std::unique_ptr<optim::AdamW> adamw_;
  std::unique_ptr<ShardedAdamW> sharded_;     // ZeRO-1
  std::unique_ptr<dist::Communicator> shard_group_, across_groups_;  // ZeRO-2/3 hybrid: split from the replicas
  std::unique_ptr<ShardedParams> fsdp_;       // ZeRO-2/3
};

}  // namespace loom::replicas
