#include "loom/replicas/replica_optimizer.h"

#include "loom/core/error.h"
#include "loom/optim/clip.h"

namespace loom::replicas {

ReplicaOptimizer::ReplicaOptimizer(models::Model& model, dist::Communicator& replicas, dist::Communicator& tp,
                                   dist::Communicator& pp, const ReplicaOptions& options,
                                   std::unique_ptr<SparseTables> tables)
    : tp_(tp), pp_(pp), options_(options), sparse_(std::move(tables)) {
  // Lazy dense tables update only their looked-up rows (NOTE [Lazy rows of dense tables]).
  options_.adamw.lazy_rows = sparse_->row_filter();
  params_ = model.params();
  for (nn::Param* p : params_)
    if (p->sparse == nullptr && !expert_sharded(*p)) dense_.push_back(p);
  if (ExpertOptimizer::needed(model)) {
    LOOM_CHECK(options.expert_replicas != nullptr && options.ep != nullptr,
               "[replicas] experts sharded over ep need their replicas' group");
    experts_ = std::make_unique<ExpertOptimizer>(model, *options.ep, *options.expert_replicas, options.bucket_mb,
                                                 options.grad_wire, options_.adamw, options.initialise);
  }
  if (options.zero >= 2) {
    dist::Communicator* shard = &replicas;
    const int group = options.shard_group > 0 ? static_cast<int>(options.shard_group) : replicas.size();
    if (group < replicas.size()) {  // hybrid: shard within groups of consecutive replicas, sum across them
      const int r = replicas.rank();
      shard_group_ = replicas.split(r / group, r % group, "dp_shard");
      across_groups_ = replicas.split(r % group, r / group, "dp_across");
      shard = shard_group_.get();
    }
    fsdp_ = std::make_unique<ShardedParams>(model, *shard, across_groups_.get(), tp, pp,
                                            ShardedOptions{.zero = options.zero, .adamw = options_.adamw,
                                                           .wire = options.grad_wire, .activations = options.activations,
                                                           .initialise = options.initialise});
    return;
  }
  flat_ = std::make_unique<FlatParams>(model, replicas.size());
  if (options.zero == 1) {
    sharded_ = std::make_unique<ShardedAdamW>(*flat_, replicas, tp, pp, options_.adamw, options.grad_wire);
  } else {
    reducer_ = std::make_unique<GradientReducer>(*flat_, replicas, options.bucket_mb, options.grad_wire);
    adamw_ = std::make_unique<optim::AdamW>(dense_, options_.adamw);
  }
}

template <class Fn>
auto ReplicaOptimizer::timed(const Timeline& timeline, const char* name, const char* category, Fn&& fn) {
  if (!timeline) return fn();
  const auto start = std::chrono::steady_clock::now();
  auto result = fn();
  timeline(name, category, start, std::chrono::steady_clock::now());
  return result;
}

void ReplicaOptimizer::pull(const std::vector<nn::MicroBatch>& microbatches, const Timeline& timeline) {
  if (fsdp_) fsdp_->set_timeline(timeline);  // the step's gathers and reduce-scatters
  timed(timeline, "sparse_pull", "communication", [&] {
    sparse_->pull(microbatches);
    return 0;
  });
}

void ReplicaOptimizer::zero_grad() {
  if (fsdp_) fsdp_->zero_grad();
  else flat_->grads.zero_();
  if (experts_) experts_->zero_grad();
}

double ReplicaOptimizer::clip_replicated(double clip) {
  double replicated = 0, sharded = 0;
  for (const nn::Param* p : params_) {
    if (p->sparse == nullptr && expert_sharded(*p)) continue;  // the experts' squares, over ep, below
    const double square = p->sparse != nullptr ? sparse_->norm_square(*p) : optim::grad_norm_square(*p);
    (p->value_on("tp").is_shard() ? sharded : replicated) += square;
  }
  const double norm = optim::combine_norm_squares(replicated + expert_square(), sharded, tp_, &pp_);
  const double factor = optim::clip_factor(norm, clip);
  if (factor != 1.0)
    for (nn::Param* p : dense_) p->grad.mul_(factor);
  return norm;
}

// NOTE [Experts beside ZeRO]: the experts' gradients summed over their replicas, and their
// squares over the expert group (counted once over tp: under tp the experts' partial gradients
// were summed over it when their layer finished, so every tp rank holds the same).
double ReplicaOptimizer::expert_square() {
  if (!experts_) return 0;
  experts_->finish();
  return experts_->norm_square();
}

double ReplicaOptimizer::step(double lr, const std::function<void(double)>& before_update,
                              const Timeline& timeline) {
  const double clip = options_.clip;
  // Sparse tables: row gradients to their owners, and their part of the global norm (and the
  // lazy dense tables' looked-up rows, before AdamW reads them).
  const std::pair<double, double> sparse = timed(timeline, "sparse_push", "communication", [&] {
    return sparse_->push();
  });
  double norm = 0;
  if (fsdp_ || sharded_) {
    const double experts =
        experts_ ? timed(timeline, "expert_all_reduce_wait", "communication", [&] { return expert_square(); }) : 0.0;
    const std::pair<double, double> extra{sparse.first + experts, sparse.second};
    norm = timed(timeline, "zero_step", "optimizer", [&] {
      return fsdp_ ? fsdp_->step(lr, clip, extra, before_update) : sharded_->step(lr, clip, extra, before_update);
    });
  } else {
    timed(timeline, "all_reduce_wait", "communication", [&] {
      reducer_->finish();
      return 0;
    });
    norm = timed(timeline, "clip", "optimizer", [&] { return clip_replicated(clip); });
    before_update(norm);
    timed(timeline, "adamw", "optimizer", [&] {
      adamw_->step(lr);
      return 0;
    });
  }
  if (experts_) timed(timeline, "expert_adamw", "optimizer", [&] {
    experts_->step(lr, optim::clip_factor(norm, clip));
    return 0;
  });
  timed(timeline, "sparse_adamw", "optimizer", [&] {  // train.table_update: every owned row, or the touched ones
    sparse_->step(lr, optim::clip_factor(norm, clip));
    return 0;
  });
  return norm;
}

}  // namespace loom::replicas
