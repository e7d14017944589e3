#include "loom/plan/run_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"
#include "loom/core/units.h"
#include "loom/dist/null_communicator.h"
#include "loom/models/registry.h"
#include "loom/schedule/stage_cuts.h"
#include "loom/plan/comm_volume.h"
#include "loom/plan/element_bytes.h"
#include "loom/plan/profile.h"
#include "loom/plan/working_set.h"
#include "loom/schedule/simulator.h"

namespace loom::plan {
namespace {

// Whether the estimate puts embedding tables on the sparse path: "on", or "auto" over more than
// one replica. "auto" then measures both (NOTE [Table paths]) and may choose dense only where the
// plan with every table dense fits as well, so this estimate is the sparse path's.
bool on_sparse_path(const ParallelConfig& p) {
  return p.sparse == SparseMode::On || (p.sparse == SparseMode::Auto && p.dp * p.sp > 1);
}

// The chain as tp rank 0 holds it (every tp rank's shard has the same shape), costed for one
// micro-batch of this rank's tokens; layers only, nothing allocated.
std::vector<LayerPlan> describe_chain(const models::ModelKind& kind, const Config& c, int64_t local_tokens) {
  dist::SizingCommunicator tp(0, static_cast<int>(c.parallel.tp), "tp"), sp(0, static_cast<int>(c.parallel.sp), "sp");
  dist::SizingCommunicator ep(0, static_cast<int>(c.parallel.ep), "ep");  // E / ep experts a rank (NOTE [Expert parallelism])
  const models::Model model = kind.build(c.model, {.tp = tp,
                                                   .tp_options = {.overlap = c.parallel.tp_overlap,
                                                                  .sequence = c.parallel.tp_sequence},
                                                   .sp = {.sp = &sp, .mode = c.parallel.sp_mode},
                                                   .ep = &ep});
  models::check_model(model, kind.name());
  std::vector<LayerPlan> chain;
  for (const auto& layer : model.chain) {
    LayerPlan plan{.name = layer->name(), .cost = layer->cost(c.train.micro_batch, local_tokens, activation_bytes(c.model))};
    plan.cost.param_bytes = 0;  // the layer counted them at the activations' width; masters may be wider
    for (const nn::Param* p : layer->params()) {
      plan.params.push_back({.numel = p->numel(),
                             .row_width = p->full_shape.size() > 1 ? p->full_shape[1] : 1,
                             .table = p->embedding && on_sparse_path(c.parallel),
                             .expert = p->value_on("ep").is_shard(),
                             .routed = p->expert,
                             .sliceable = p->sliceable});
      plan.cost.param_bytes += static_cast<double>(p->numel() * master_bytes(c.model));
    }
    chain.push_back(std::move(plan));
  }
  return chain;
}

// memory.recompute and memory.swap as written, per layer. "stage-aware" (Merak): pipeline rank k
// recomputes the first round(r_k x its layers) of each of its slices, earlier ranks more (they
// stash more). memory.swap = "all" swaps every layer that does not recompute.
std::vector<nn::MemoryPolicy> manual_policies(const Config& config, const schedule::Schedule& schedule,
                                              const std::vector<int64_t>& cuts) {
  const auto& p = config.parallel;
  const Recompute mode = config.memory.recompute;
  const nn::MemoryPolicy rest = config.memory.swap == Swap::All ? nn::MemoryPolicy::Swap : nn::MemoryPolicy::Keep;
  std::vector<nn::MemoryPolicy> policy(static_cast<size_t>(cuts.back()), rest);
  for (int64_t v = 0; v < schedule.virtual_stages(); ++v) {
    double ratio = mode == Recompute::Full ? 1.0 : 0.0;
    if (mode == Recompute::StageAware)
      ratio = schedule::stage_recompute_ratio(config.memory.recompute_ratio, schedule.rank_of(v), p.pp);
    const int64_t begin = cuts[v], end = cuts[v + 1];
    const auto recomputed = static_cast<int64_t>(std::lround(ratio * static_cast<double>(end - begin)));
    for (int64_t i = begin; i < begin + recomputed; ++i) policy[i] = nn::MemoryPolicy::Recompute;
  }
  return policy;
}

// A table on the sparse path: its owner's share of the rows and their two moments, plus the rows
// this rank pulls in a step and their gradient (NOTE [Sparse exchange]). A rank owns ceil(P / n)
// partitions of ceil(rows / P) rows at most (P a multiple of n when chosen automatically); as an
// owner it serves and receives about as many rows as it pulls.
double sparse_bytes(const RunPlan& plan, const ParamInfo& table) {
  const Config& c = plan.config;
  const int64_t n = c.parallel.dp * c.parallel.sp, bytes = master_bytes(c.model);
  const int64_t rows = table.numel / table.row_width;
  const int64_t parts = c.parallel.sparse_partitions > 0 ? c.parallel.sparse_partitions : std::min(rows, n);
  const int64_t owned = (parts + n - 1) / n * ((rows + parts - 1) / parts);
  const int64_t samples = c.train.global_batch / c.parallel.dp;
  const int64_t lookups = samples * plan.kind->lookups_per_sample(c.model, plan.local_tokens);
  return static_cast<double>((3 * std::min(owned, rows) + 4 * std::min(rows, lookups)) * table.row_width * bytes);
}

// A recomputing layer keeps its input: seq/tp tokens of d_model under tp_sequence (what crosses a
// stage boundary too).
double input_bytes(const RunPlan& plan) {
  const Config& c = plan.config;
  const int64_t shards = c.parallel.tp_sequence ? c.parallel.tp : 1;
  return static_cast<double>(c.train.micro_batch * plan.local_tokens / shards * c.model.d_model *
                             activation_bytes(c.model));
}

// ZeRO-2/3's working set of every chain layer (plan/working_set.h), computed once per plan.
std::vector<double> working_set(const RunPlan& plan) {
  const ModelConfig& m = plan.config.model;
  return working_bytes(plan, static_cast<double>(master_bytes(m)), static_cast<double>(compute_copy_bytes(m)));
}

// What `layers` hold whatever their memory policy: weights, table rows, the async checkpoint's
// copy, and the largest of their working sets (`working`: per chain layer, empty for none).
MemoryEstimate fixed_memory(const RunPlan& plan, const std::vector<int64_t>& layers, const std::vector<double>& working_set) {
  const Config& c = plan.config;
  double dense = 0, sparse = 0, experts = 0, working = 0;  // dense, experts: parameter elements
  for (int64_t i : layers) {
    for (const ParamInfo& p : plan.chain[i].params)
      if (p.table) sparse += sparse_bytes(plan, p);
      else (p.expert ? experts : dense) += static_cast<double>(p.numel);
    if (!working_set.empty()) working = std::max(working, working_set[static_cast<size_t>(i)]);
  }
  // Value and gradient (and a product copy under mixed precision) and the two AdamW moments:
  // ZeRO-1 keeps 1/dp of the moments; ZeRO-2 1/n of the gradients too (n: the shard group), ZeRO-3
  // 1/n of the values as well, and no product copy between the layers' passes.
  const auto master = static_cast<double>(master_bytes(c.model));
  const auto copy = static_cast<double>(compute_copy_bytes(c.model));
  const auto n = static_cast<double>(shard_ways(c.parallel));
  const int64_t zero = c.parallel.zero;
  const double params = zero == 3 ? dense * master / n : dense * (master + copy);
  // ZeRO-1 keeps its shard's reduced gradient beside the whole one, and copies the updated shard
  // for its all-gather (replicas/sharded_adamw.cpp): two more dp-th parts.
  const double grads = zero >= 2 ? dense * master / n
                       : zero == 1 ? dense * master * (1 + 2 / static_cast<double>(c.parallel.dp))
                                   : dense * master;
  const double moments = 2 * dense * master / (zero == 1 ? static_cast<double>(c.parallel.dp) : zero >= 2 ? n : 1.0);
  // The experts sharded over ep keep value, copy, gradient and moments whole whatever the stage
  // (NOTE [Experts beside ZeRO]).
  const double expert_params = experts * (master + copy), expert_grads = experts * master;
  const double expert_moments = 2 * experts * master;
  // An async checkpoint copies what this rank writes: the replicas share the stage's values and
  // moments (NOTE [Checkpoints]); a sparse owner writes its own rows.
  const bool async = !c.checkpoint.dir.empty() && c.checkpoint.async;
  const double replicas = static_cast<double>(c.parallel.dp * c.parallel.sp);
  const double expert_replicas = replicas / static_cast<double>(c.parallel.ep);
  return {.weights = params + grads + moments + expert_params + expert_grads + expert_moments,
          .sparse = sparse,
          .params = params + expert_params,
          .grads = grads + expert_grads,
          .moments = moments + expert_moments,
          .checkpoint = async ? 3 * (dense / replicas + experts / expert_replicas) * master + sparse : 0,
          .gathered = working};
}

// The chain as the memory cost model sees it (NOTE [Memory cost model]).
MemoryModel memory_model(const RunPlan& plan) {
  MemoryModel m{.schedule = plan.schedule,
                .budget = kPlannedBudgetShare * static_cast<double>(plan.config.budget_bytes()),
                .copy_bytes_per_s = plan.copy_bytes_per_s,
                .p2p_s = plan.p2p_s,
                .boundary_bytes = input_bytes(plan)};
  const double input = input_bytes(plan);
  const std::vector<double> working = working_set(plan);
  for (size_t i = 0; i < plan.chain.size(); ++i) {
    const LayerPlan& l = plan.chain[i];
    const MemoryEstimate fixed = fixed_memory(plan, {static_cast<int64_t>(i)}, working);
    m.layers.push_back({.forward_s = l.forward_s,
                        .backward_input_s = l.backward_input_s,
                        .backward_weight_s = l.backward_weight_s,
                        .saved_bytes = l.cost.saved_bytes,
                        .input_bytes = input,
                        .workspace_bytes = l.cost.workspace_bytes,
                        .fixed_bytes = fixed.weights + fixed.sparse + fixed.checkpoint,
                        .working_bytes = fixed.gathered});
  }
  return m;
}

struct MemoryDecision {
  std::vector<int64_t> cuts;
  std::vector<nn::MemoryPolicy> policy;
  Prediction prediction;
  bool fits = true;
};

// The config's policies on `cuts`: memory.policy = "auto" by the cost model, else as written.
MemoryDecision policies_on(const RunPlan& plan, const MemoryModel& model, std::vector<int64_t> cuts) {
  if (plan.config.memory.policy == PolicyMode::Auto) {
    PolicyChoice choice = choose_policies(model, cuts);
    return {std::move(cuts), std::move(choice.policy), std::move(choice.prediction), choice.fits};
  }
  std::vector<nn::MemoryPolicy> policy = manual_policies(plan.config, plan.schedule, cuts);
  Prediction prediction = predict(model, cuts, policy);
  return {std::move(cuts), std::move(policy), std::move(prediction), true};
}

// Whether every rank of `d` fits the model's budget (always, without one).
bool fits_budget(const MemoryModel& model, const MemoryDecision& d) {
  return d.fits && (model.budget <= 0 || total_over_budget(model, d.cuts, d.prediction) <= 0);
}

// Stage cuts and memory policies (NOTE [Memory cost model]): parallel.pp_cuts, or
// parallel.partition's cut; under "auto" the fastest of the searched, compute- and
// memory-balanced cuts whose stages all fit.
MemoryDecision decide_memory(const RunPlan& plan, const MemoryModel& model) {
  const auto& p = plan.config.parallel;
  const auto n = static_cast<int64_t>(plan.chain.size());
  const int64_t stages = plan.schedule.virtual_stages();
  if (!p.pp_cuts.empty()) return policies_on(plan, model, schedule::explicit_cuts(p.pp_cuts, n, stages));
  if (p.partition == Partition::Memory) return policies_on(plan, model, memory_cuts(model));
  if (p.partition == Partition::Compute) {
    if (plan.profiled || plan.cluster) return policies_on(plan, model, compute_cuts(model));
    std::vector<double> flops;  // without a profile or a cluster: the FLOPs, exactly as they are
    for (const LayerPlan& layer : plan.chain)
      flops.push_back(layer.cost.forward_flops + layer.cost.backward_input_flops + layer.cost.backward_weight_flops);
    return policies_on(plan, model, schedule::balanced_cuts(flops, stages));
  }
  std::vector<MemoryDecision> tried;
  for (auto cuts : {auto_cuts(model), compute_cuts(model), memory_cuts(model)})
    tried.push_back(policies_on(plan, model, std::move(cuts)));
  const MemoryDecision* best = nullptr;
  for (const MemoryDecision& d : tried)
    if (fits_budget(model, d) && (!best || d.prediction.step_s < best->prediction.step_s)) best = &d;
  return best ? *best : tried.back();  // none fits: the memory cut, whose needs the refusal names
}

// Nothing fits even with every layer recomputed or swapped: each stage's least need, before any
// rank allocates.
void refuse_unfit(const RunPlan& plan) {
  std::string needs;
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const MemoryEstimate& m = plan.stages[s].memory;
    needs += fmt::format("{}stage {} needs {} ({} weights+grads+moments, {} activations, {} transient{})",
                         s == 0 ? "" : "; ", s, format_bytes(m.total()), format_bytes(m.weights + m.sparse),
                         format_bytes(m.activations), format_bytes(m.transient),
                         m.boundary > 0 ? fmt::format(", {} stage-boundary messages", format_bytes(m.boundary)) : "");
  }
  throw InputError(fmt::format(
      "memory.budget = {} is too small for any memory policy (stages are fitted into {:.0f}% of it, {}): at least, "
      "{}; hint: raise memory.budget, lower train.micro_batch, or use more pipeline stages (parallel.pp)",
      format_bytes(static_cast<double>(plan.config.budget_bytes())), kPlannedBudgetShare * 100,
      format_bytes(kPlannedBudgetShare * static_cast<double>(plan.config.budget_bytes())), needs));
}

}  // namespace

PassTimes pass_times(const Cluster& cluster, const nn::Cost& cost, DType dtype, const dist::MeshShape& mesh, int ep) {
  // An expert group is ep consecutive dp ranks, each pp x sp x tp ranks apart (NOTE [Mesh axes]).
  const int64_t ep_stride = int64_t{mesh.size("pp")} * mesh.size("sp") * mesh.size("tp");
  std::vector<int64_t> ep_group;
  for (int64_t i = 0; i < ep; ++i) ep_group.push_back(i * ep_stride);
  const GroupSpan ep_span = members_span(ep_group, cluster);
  const GroupSpan tp_span = group_span(mesh, {"tp"}, cluster), sp_span = group_span(mesh, {"sp"}, cluster);
  double comm[2] = {0, 0}, hidden[2] = {0, 0};  // per pass: serial, and beside the compute
  for (const nn::CommUse& u : cost.comm) {
    const int ranks = u.axis == nn::CommAxis::Tp ? mesh.tp() : u.axis == nn::CommAxis::Sp ? mesh.sp() : ep;
    const GroupSpan& spans = u.axis == nn::CommAxis::Tp ? tp_span : u.axis == nn::CommAxis::Sp ? sp_span : ep_span;
    const double t = static_cast<double>(u.count) * cluster.collective_seconds(u.op, ranks, u.bytes, spans);
    (u.overlapped ? hidden : comm)[u.pass == nn::CommPass::Forward ? 0 : 1] += t;
  }
  // The backward's attention and elementwise kernels do about twice the forward's work.
  auto pass = [&](double flops, double times) {
    return cluster.compute_seconds({.gemm_flops = flops - times * cost.attention_flops,
                                    .gemm_dim = cost.gemm_dim,
                                    .attention_flops = times * cost.attention_flops,
                                    .elementwise_bytes = times * cost.elementwise_bytes,
                                    .fusable_bytes = times * cost.fusable_bytes,
                                    .score_bytes = times * cost.score_bytes},
                                   dtype);
  };
  return {.forward_s = cluster.beside(pass(cost.forward_flops, 1), hidden[0]) + comm[0],
          .backward_input_s = cluster.beside(pass(cost.backward_input_flops, 2), hidden[1]) + comm[1],
          .backward_weight_s = pass(cost.backward_weight_flops, 0)};
}

std::vector<LayerPlan> timed_chain(const Config& config, const CostModel& costs, const models::ModelKinds& kinds) {
  std::vector<LayerPlan> chain = describe_chain(kinds.find(config.model.kind), config, config.model.seq_len / config.parallel.sp);
  costs.time(config, chain);
  return chain;
}

RunPlan make_plan(const Config& config, int world_size, const CostModel& costs, const models::ModelKinds& kinds) {
  const Cluster* cluster = costs.cluster();
  RunPlan plan{.config = config,
               .kind = &kinds.find(config.model.kind),
               .world_size = world_size,
               .mesh = dist::mesh_shape(config.parallel)};
  plan.cluster = cluster;
  const auto& p = config.parallel;
  plan.local_tokens = config.model.seq_len / p.sp;
  plan.chain = describe_chain(*plan.kind, config, plan.local_tokens);
  // Stages against the chain first: a huge parallel.pp must be refused, not simulated.
  schedule::check_stage_count(static_cast<int64_t>(plan.chain.size()), p.pp * p.stage_chunks());
  plan.profiled = costs.profiled();
  plan.profile_threads = costs.profile_threads();
  plan.copy_bytes_per_s = costs.time(config, plan.chain);
  if (cluster != nullptr && p.pp > 1) {
    // Across nodes where a stage's sp x tp ranks fill whole nodes: then every rank of a node sends
    // over its link at once (NOTE [Node link]).
    const int64_t dpn = cluster->devices_per_node;
    const bool crosses = group_spans_nodes(plan.mesh, {"pp"}, dpn) && p.sp * p.tp % dpn == 0;
    plan.p2p_s = cluster->collective_seconds(CommOp::SendRecv, 2, input_bytes(plan),
                                             {.nodes = crosses, .sharing = dpn});
  }
  plan.schedule = schedule::schedule_for(p.schedule, p.pp, config.microbatch_count() / p.dp, p.chunks);
  LOOM_CHECK_INPUT(cluster != nullptr || p.pp == 1 || schedule::message_tags(plan.schedule) <= schedule::kMaxTags,
                   "{} micro-batches per data-parallel rank x {} virtual stages need {} message tags, more than "
                   "the {} MPI guarantees; hint: fewer, larger micro-batches",
                   plan.schedule.microbatches, plan.schedule.virtual_stages(), schedule::message_tags(plan.schedule),
                   schedule::kMaxTags);
  const MemoryModel model = memory_model(plan);
  MemoryDecision decision = decide_memory(plan, model);  // its simulations refuse a bad schedule
  // The micro-batches each rank holds: the schedule's own (unit costs); on a cluster, the timed
  // replay's (a planner simulates thousands of layouts: one replay each, not two).
  const std::vector<int64_t> stashed =
      cluster ? decision.prediction.simulation.peak_stashed : schedule::simulate(plan.schedule).peak_stashed;
  plan.cuts = decision.cuts;
  for (size_t i = 0; i < plan.chain.size(); ++i) plan.chain[i].policy = decision.policy[i];
  plan.predicted_step_s = decision.prediction.step_s;
  plan.prediction = decision.prediction;
  const std::vector<double> working = working_set(plan);
  for (int64_t rank = 0; rank < p.pp; ++rank) {
    StagePlan stage;
    for (int64_t c = 0; c < plan.schedule.chunks; ++c) {
      const int64_t v = plan.schedule.virtual_stage(rank, c);
      stage.virtual_stages.push_back(v);
      for (int64_t i = plan.cuts[v]; i < plan.cuts[v + 1]; ++i) stage.layers.push_back(i);
    }
    const StagePrediction& predicted = decision.prediction.stages[static_cast<size_t>(rank)];
    stage.memory = fixed_memory(plan, stage.layers, working);
    stage.memory.activations = predicted.activation_bytes;
    stage.memory.boundary = predicted.boundary_bytes;
    stage.memory.transient = predicted.transient_bytes;
    stage.memory.host = predicted.host_bytes;
    stage.memory.stashed = stashed[static_cast<size_t>(rank)];
    stage.comm_bytes = comm_volume(plan, rank, stage.layers);
    plan.stages.push_back(std::move(stage));
  }
  if (config.memory.policy == PolicyMode::Auto && !fits_budget(model, decision)) refuse_unfit(plan);
  // Last: the layout's own errors (stages, schedule) say more than a rank count that does not fit.
  dist::check_mesh_shape(plan.mesh, world_size);
  return plan;
}

namespace {

template <class Pred>
double numel_where(const LayerPlan& layer, Pred&& pred) {
  double n = 0;
  for (const ParamInfo& p : layer.params)
    if (pred(p)) n += static_cast<double>(p.numel);
  return n;
}

}  // namespace

double dense_numel(const LayerPlan& layer) {
  return numel_where(layer, [](const ParamInfo& p) { return !p.table && !p.expert; });
}

double expert_numel(const LayerPlan& layer) {
  return numel_where(layer, [](const ParamInfo& p) { return p.expert; });
}

}  // namespace loom::plan
