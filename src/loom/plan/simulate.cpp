#include "loom/plan/simulate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

#include "loom/core/error.h"
#include "loom/core/units.h"
#include "loom/models/registry.h"
#include "loom/plan/element_bytes.h"
#include "loom/plan/mfu.h"

namespace loom::plan {
namespace {

using schedule::Op;

// Bytes the optimizer moves per dense parameter it updates, in elements of the master's width: the
// fused AdamW loop reads value, gradient and both moments and writes value and moments (7), the
// global norm reads the gradient (1), clipping scales it (2), the next step's zeroing writes it (1).
// Where the products have a copy of their own (bfloat16's), it is rewritten from the value. So 44
// bytes in float32, 50 in bfloat16 (float32 masters), 88 in float64.
double optimizer_bytes_per_param(const ModelConfig& m) {
  const int64_t copy = compute_copy_bytes(m);
  return static_cast<double>(11 * master_bytes(m) + (copy > 0 ? master_bytes(m) + copy : 0));
}

// When each layer of pipeline rank `rank` has its final weight gradient: its virtual stage's last
// W (or BW) ends, the stage's layers finishing back to front in proportion to their W time.
std::vector<std::pair<int64_t, double>> gradient_ready(const RunPlan& plan, int64_t rank) {
  const schedule::Schedule& s = plan.schedule;
  std::vector<std::pair<int64_t, double>> ready;  // (layer, time)
  std::vector<std::pair<double, double>> last(static_cast<size_t>(s.chunks), {0.0, -1.0});  // per chunk
  for (const schedule::TimedAction& t : plan.prediction.simulation.ranks[rank])
    if ((t.action.op == Op::W || t.action.op == Op::BW) && t.end > last[t.action.chunk].second)
      last[t.action.chunk] = {t.start, t.end};
  for (int64_t chunk = 0; chunk < s.chunks; ++chunk) {
    const auto [start, end] = last[chunk];
    const int64_t v = s.virtual_stage(rank, chunk), first = plan.cuts[v], last = plan.cuts[v + 1];
    double total = 0, done = 0;
    for (int64_t i = first; i < last; ++i) total += plan.chain[i].backward_weight_s;
    for (int64_t i = last - 1; i >= first; --i) {
      done += plan.chain[i].backward_weight_s;
      ready.emplace_back(i, start + (total > 0 ? done / total : 1.0) * (end - start));
    }
  }
  std::sort(ready.begin(), ready.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return ready;
}

// NOTE [Overlap]: from `from` on, the rank's compute (its actions' time inside [from, until]) and
// `busy` seconds of communication side by side: when both are done. The pipeline's idle time (its
// bubble) takes communication without slowing the compute.
double side_by_side_end(const RunPlan& plan, const Cluster& cluster, int64_t rank, double from, double until,
                        double busy) {
  double computing = 0;
  for (const schedule::TimedAction& t : plan.prediction.simulation.ranks[rank])
    computing += std::max(0.0, std::min(t.end, until) - std::max(t.start, from));
  // One after the other, the actions fill at most the window (the sum may round past it).
  const double window = std::max(0.0, until - from);
  return from + std::max(window, cluster.beside(std::min(computing, window), busy));
}

// A group inside rank 0's dp x sp group (ZeRO's shard group and its groups across the shard
// groups, the experts' replicas): the members at the positions `keep` takes (dp x sp order, sp
// inner), over their links, not the levels, which run over the whole group's hosts (NOTE [Node
// link]: as many such groups share a node as it holds).
GroupSpan subgroup_span(const RunPlan& plan, const Cluster& cluster, const std::function<bool(int64_t)>& keep) {
  const std::vector<int64_t> whole = group_of_rank0(plan.mesh, {"dp", "sp"});
  std::vector<int64_t> members;
  for (size_t pos = 0; pos < whole.size(); ++pos)
    if (keep(static_cast<int64_t>(pos))) members.push_back(whole[pos]);
  return members_span(members, cluster);
}

struct RankTail {
  double end = 0;       // when the rank's step ends
  double reduced = 0;   // when its last bucket was reduced
  double optimizer = 0;
};

// NOTE [Experts beside ZeRO]: the rank's experts sharded over ep, whatever the ZeRO stage: their
// gradients summed over tp (under tp each rank ran its share of the tokens: NOTE [Experts over
// tensor parallelism]) and all-reduced over their replicas (dp x sp / ep ranks; after the dense
// ones, on the same channel), and their AdamW over the whole ep shard.
struct ExpertTail {
  double reduce = 0, update = 0;
};
ExpertTail expert_tail(const RunPlan& plan, const Cluster& cluster, int64_t rank) {
  const Config& c = plan.config;
  double experts = 0;
  for (const auto& [layer, at] : gradient_ready(plan, rank)) experts += expert_numel(plan.chain[layer]);
  const int64_t replicas = c.parallel.dp * c.parallel.sp / c.parallel.ep;
  ExpertTail t;
  t.update = experts * optimizer_bytes_per_param(c.model) / (cluster.memory_bytes_per_s * cluster.memory_efficiency);
  // NOTE [Expert parallelism]: an expert's replicas are the dp x sp ranks at its place in their group.
  const int64_t sp = c.parallel.sp, ep = c.parallel.ep;
  const GroupSpan replica_span = subgroup_span(plan, cluster, [sp, ep](int64_t pos) { return pos / sp % ep == 0; });
  if (experts > 0 && replicas > 1)
    t.reduce = cluster.collective_seconds(CommOp::AllReduce, replicas, experts * grad_wire_bytes(c), replica_span);
  if (experts > 0 && c.parallel.tp > 1)
    t.reduce += cluster.collective_seconds(CommOp::AllReduce, static_cast<int>(c.parallel.tp),
                                           experts * master_bytes(c.model),
                                           group_span(plan.mesh, {"tp"}, cluster));
  return t;
}

// ZeRO-2/3 (NOTE [Fully sharded data parallelism]): each micro-batch's gradient of each layer is
// reduce-scattered over the shard group as its backward ends, and under ZeRO-3 each layer is
// gathered before its forward and again before its backward. That traffic runs on one channel
// beside the compute, from the rank's first action on; what it cannot hide lengthens the step, and
// the last micro-batch's reduce-scatter of the rank's first layer always follows its backward.
// Then the hybrid groups' all-reduce of the owned sums, the update of the owned ranges and (ZeRO-2)
// the gather of every layer.
RankTail finish_sharded(const RunPlan& plan, const Cluster& cluster, int64_t rank, std::vector<Span>& timeline) {
  const Config& c = plan.config;
  const auto& p = c.parallel;
  const int64_t group = p.shard_ranks(), across = p.dp * p.sp / group;
  // The shard group: the first `group` of rank 0's dp x sp ranks.
  const GroupSpan spans = subgroup_span(plan, cluster, [group](int64_t pos) { return pos < group; });
  const auto m = static_cast<double>(plan.schedule.microbatches);
  const std::vector<std::pair<int64_t, double>> ready = gradient_ready(plan, rank);
  double params = 0;
  for (const auto& [layer, at] : ready) params += dense_numel(plan.chain[layer]);
  const auto& actions = plan.prediction.simulation.ranks[rank];
  const double first = actions.empty() ? 0 : actions.front().start, end = actions.empty() ? 0 : actions.back().end;
  const double scatter = cluster.collective_seconds(CommOp::ReduceScatter, group, params * grad_wire_bytes(c), spans);
  const double gather = cluster.collective_seconds(CommOp::AllGather, group, params * master_bytes(c.model), spans);
  const double channel = m * scatter + (p.zero == 3 ? 2 * m * gather : 0);
  const double last = ready.empty() ? 0 : cluster.collective_seconds(CommOp::ReduceScatter, group,
                                                                      dense_numel(plan.chain[ready.back().first]) *
                                                                          grad_wire_bytes(c), spans);
  const ExpertTail experts = expert_tail(plan, cluster, rank);
  RankTail tail{.reduced = std::max(side_by_side_end(plan, cluster, rank, first, end, channel), end + last) +
                           experts.reduce};
  timeline.push_back({rank, "gradients", fmt::format("reduce_scatter x{:g}{}", m, p.zero == 3 ? ", all_gather" : ""),
                      first, tail.reduced});
  const double owned = params / static_cast<double>(group);
  tail.optimizer = owned * optimizer_bytes_per_param(c.model) / (cluster.memory_bytes_per_s * cluster.memory_efficiency) +
                   experts.update;
  if (across > 1) {  // the ranks at rank 0's place in every shard group
    const GroupSpan span = subgroup_span(plan, cluster, [group](int64_t pos) { return pos % group == 0; });
    tail.optimizer += cluster.collective_seconds(CommOp::AllReduce, across, owned * master_bytes(c.model), span);
  }
  if (p.zero == 2) tail.optimizer += gather;
  const double start = std::max(end, tail.reduced);
  tail.end = start + tail.optimizer;
  timeline.push_back({rank, "compute", "optimizer", start, tail.end});
  return tail;
}

// The replicas' buckets in reverse chain order, each reduced once ready on one channel, then the
// optimizer (and ZeRO-1's all-gather of the updated shard). From the first bucket on, the compute
// left and the channel's busy time run side by side (NOTE [Overlap]).
RankTail finish_rank(const RunPlan& plan, const Cluster& cluster, int64_t rank, std::vector<Span>& timeline) {
  const Config& c = plan.config;
  const int64_t replicas = c.parallel.dp * c.parallel.sp;
  if (c.parallel.zero >= 2 && replicas > 1) return finish_sharded(plan, cluster, rank, timeline);
  const GroupSpan spans = group_span(plan.mesh, {"dp", "sp"}, cluster);
  const CommOp reduce = c.parallel.zero == 1 ? CommOp::ReduceScatter : CommOp::AllReduce;
  const double bucket_bytes = c.parallel.bucket_mb * 1024 * 1024;
  const double pipeline_end = plan.prediction.simulation.ranks[rank].empty()
                                  ? 0
                                  : plan.prediction.simulation.ranks[rank].back().end;
  double channel = 0, pending = 0, pending_ready = 0, params = 0, busy = 0, first = -1;
  auto occupy = [&](double start, double seconds, std::string what) {
    if (first < 0) first = start;
    channel = start + seconds, busy += seconds;
    timeline.push_back({rank, "gradients", std::move(what), start, channel});
  };
  auto send = [&]() {
    if (pending <= 0 || replicas <= 1) return;
    occupy(std::max(channel, pending_ready), cluster.collective_seconds(reduce, replicas, pending, spans),
           fmt::format("{} {}", name_of(reduce), format_bytes(pending)));
    pending = 0;
  };
  for (const auto& [layer, ready] : gradient_ready(plan, rank)) {
    const double n = dense_numel(plan.chain[layer]);
    params += n;
    pending += n * grad_wire_bytes(c), pending_ready = std::max(pending_ready, ready);
    if (pending >= bucket_bytes) send();
  }
  send();
  const ExpertTail experts = expert_tail(plan, cluster, rank);
  if (experts.reduce > 0) occupy(std::max(channel, pending_ready), experts.reduce, "all_reduce experts");
  RankTail tail{.reduced = channel};
  const double updated = c.parallel.zero == 1 ? params / static_cast<double>(c.parallel.dp) : params;
  tail.optimizer = updated * optimizer_bytes_per_param(c.model) /
                       (cluster.memory_bytes_per_s * cluster.memory_efficiency) +
                   experts.update;
  if (c.parallel.zero == 1 && replicas > 1)
    tail.optimizer += cluster.collective_seconds(CommOp::AllGather, replicas, params * master_bytes(c.model), spans);
  // side_by_side_end is past the pipeline's end, and past the channel's where that ends later.
  const double start =
      first < 0 ? pipeline_end : std::max(side_by_side_end(plan, cluster, rank, first, pipeline_end, busy), channel);
  tail.end = start + tail.optimizer;
  timeline.push_back({rank, "compute", "optimizer", start, tail.end});
  return tail;
}

// The sparse path's exchange per step: the rows looked up pulled from their owners before the
// step, and their gradients pushed back after it (NOTE [Sparse exchange]).
double sparse_exchange_s(const RunPlan& plan, const Cluster& cluster) {
  const Config& c = plan.config;
  const int64_t replicas = c.parallel.dp * c.parallel.sp;
  if (replicas <= 1) return 0;
  const int64_t samples = c.train.global_batch / c.parallel.dp;
  const int64_t lookups = samples * plan.kind->lookups_per_sample(c.model, plan.local_tokens);
  double bytes = 0;
  for (const LayerPlan& layer : plan.chain)
    for (const ParamInfo& p : layer.params)
      if (p.table) bytes += static_cast<double>(std::min(lookups, p.numel / p.row_width) * p.row_width) * master_bytes(c.model);
  return 2 * cluster.collective_seconds(CommOp::AllToAll, replicas, bytes, group_span(plan.mesh, {"dp", "sp"}, cluster));
}

// FLOPs of one step on pipeline rank `rank` beyond the model's (NOTE [MFU]): the forwards its
// recomputing layers run again, for every micro-batch.
double recomputed_flops(const RunPlan& plan, int64_t rank) {
  const auto mbs = static_cast<double>(plan.schedule.microbatches);
  double recomputed = 0;
  for (int64_t i : plan.stages[rank].layers)
    if (plan.chain[i].policy == nn::MemoryPolicy::Recompute) recomputed += mbs * plan.chain[i].cost.forward_flops;
  return recomputed;
}

std::vector<std::pair<std::string, std::string>> sources(const RunPlan& plan, const Cluster& cluster) {
  const std::string device =
      fmt::format("modelled: cluster {} (GEMM efficiency curve, attention efficiency, memory bandwidth)", cluster.name);
  return {
      {"layer compute", plan.profiled ? fmt::format("measured: memory.profile {}", plan.config.memory.profile) : device},
      {"tp/sp collectives", plan.profiled ? "measured: inside the profile's layer times"
                            : cluster.collectives.empty()
                                ? fmt::format("modelled: ring/tree over {}'s links", cluster.name)
                                : fmt::format("measured: {}'s [[collective]] alpha/beta", cluster.name)},
      {"pipeline", "simulated: every rank's schedule actions replayed with these times (schedule simulator)"},
      {"gradient reduction", cluster.collectives.empty()
                                 ? fmt::format("modelled: buckets over {}'s links, overlapping the backward", cluster.name)
                                 : fmt::format("measured alpha/beta of {}, buckets overlapping the backward", cluster.name)},
      {"optimizer", "modelled: AdamW's state read and written at the memory bandwidth"},
      {"memory", "modelled: the plan's analytic bytes and the replayed stash (NOTE [Memory cost model])"}};
}

}  // namespace

StepPrediction simulate_step(const Config& config, const Cluster& cluster, int64_t gpus,
                             const models::ModelKinds& kinds) {
  return simulate_step(config, CostModel::for_config(config, &cluster), gpus, kinds);
}

StepPrediction simulate_step(const Config& config, const CostModel& costs, int64_t gpus,
                             const models::ModelKinds& kinds) {
  LOOM_CHECK(costs.cluster() != nullptr, "simulate_step needs a cluster's costs");
  const Cluster& cluster = *costs.cluster();
  check_gpus(cluster, gpus);
  const auto& q = config.parallel;
  LOOM_CHECK_INPUT(q.dp * q.tp * q.pp * q.sp == gpus,
                   "the layout parallel.dp x tp x pp x sp = {} x {} x {} x {} = {} ranks, but --gpus {}; hint: --gpus {}, "
                   "or set the degrees (--set parallel.dp=...), or let `loom plan` choose them",
                   q.dp, q.tp, q.pp, q.sp, q.dp * q.tp * q.pp * q.sp, gpus, q.dp * q.tp * q.pp * q.sp);
  Config c = config;
  // Without a budget, a stage must fit the device (memory.policy = "auto" plans for it).
  if (c.memory.budget.empty()) c.memory.budget = fmt::format("{}B", static_cast<int64_t>(cluster.memory_bytes));
  StepPrediction out{.plan = make_plan(c, static_cast<int>(gpus), costs, kinds), .cluster = cluster.name, .gpus = gpus};
  RunPlan& plan = out.plan;
  plan.cluster = nullptr;  // the cluster is the caller's: do not keep its address
  out.device_bytes = static_cast<double>(c.budget_bytes());
  const double sparse = sparse_exchange_s(plan, cluster);
  const double model_flops = step_model_flops(plan) / static_cast<double>(gpus);  // per device
  double hardware_flops = model_flops;
  for (int64_t r = 0; r < c.parallel.pp; ++r) {
    const RankTail tail = finish_rank(plan, cluster, r, out.after_pipeline);
    out.step_s = std::max(out.step_s, tail.end + sparse);
    out.optimizer_s = std::max(out.optimizer_s, tail.optimizer);
    hardware_flops += recomputed_flops(plan, r) / static_cast<double>(c.parallel.pp);
    out.peak_bytes_by_stage.push_back(plan.stages[r].memory.total());
    out.fits = out.fits && plan.stages[r].memory.total() <= out.device_bytes;
  }
  out.pipeline_s = plan.prediction.simulation.makespan;
  out.gradient_tail_s = std::max(0.0, out.step_s - sparse - out.optimizer_s - out.pipeline_s);
  out.bubble_fraction = plan.prediction.simulation.bubble_fraction;
  const models::Throughput items = plan.kind->throughput(c.model);
  out.tokens_per_s = static_cast<double>(c.train.global_batch * items.per_sample) / out.step_s;
  out.model_flops_per_device = model_flops / out.step_s;
  out.hardware_flops_per_device = hardware_flops / out.step_s;
  out.mfu = model_flops_utilisation(step_model_flops(plan), out.step_s, cluster.peak(c.model.dtype), gpus);
  out.sources = sources(plan, cluster);
  return out;
}

std::vector<Span> timeline(const StepPrediction& p) {
  std::vector<Span> spans;
  const bool chunks = p.plan.schedule.chunks > 1;
  const auto& ranks = p.plan.prediction.simulation.ranks;
  for (size_t r = 0; r < ranks.size(); ++r)
    for (const schedule::TimedAction& t : ranks[r])
      spans.push_back({static_cast<int64_t>(r), "compute", t.action.text(chunks), t.start, t.end});
  spans.insert(spans.end(), p.after_pipeline.begin(), p.after_pipeline.end());
  return spans;
}

void refuse_unfit(const StepPrediction& p) {
  if (p.fits) return;
  std::string needs;
  for (size_t s = 0; s < p.plan.stages.size(); ++s)
    needs += fmt::format("{}stage {} needs {} ({})", s == 0 ? "" : "; ", s, format_bytes(p.plan.stages[s].memory.total()),
                         memory_text(p.plan, p.plan.stages[s].memory));
  throw InputError(fmt::format(
      "the layout does not fit {}'s {} per device: {}; hint: more pipeline or tensor stages, a smaller "
      "train.micro_batch, memory.recompute = \"full\" or memory.policy = \"auto\" (or let `loom plan` choose)",
      p.cluster, format_bytes(p.device_bytes), needs));
}

std::string describe(const StepPrediction& p) {
  const Config& c = p.plan.config;
  std::string out = fmt::format(
      "loom simulate: {} on {} x {} (dp {} x tp {} x pp {} x sp {}, {} schedule, {} micro-batches of {} per replica)\n",
      c.model.kind, p.gpus, p.cluster, c.parallel.dp, c.parallel.tp, c.parallel.pp, c.parallel.sp, c.parallel.schedule,
      p.plan.schedule.microbatches, c.train.micro_batch);
  out += fmt::format("  step        {:.4g} s (pipeline {:.4g} s, gradient reduction not hidden {:.4g} s, optimizer {:.4g} s)\n",
                     p.step_s, p.pipeline_s, p.gradient_tail_s, p.optimizer_s);
  out += fmt::format("  throughput  {:.6g} {}/s; {:.4g} TFLOP/s model and {:.4g} with recompute per device; MFU {:.1f}%\n",
                     p.tokens_per_s, p.plan.kind->throughput(c.model).items,
                     p.model_flops_per_device / 1e12, p.hardware_flops_per_device / 1e12, 100 * p.mfu);
  out += fmt::format("  bubble      {:.1f}% of the pipeline\n", 100 * p.bubble_fraction);
  for (size_t s = 0; s < p.peak_bytes_by_stage.size(); ++s)
    out += fmt::format("  stage {:<5} peak {} of {}{}\n", s, format_bytes(p.peak_bytes_by_stage[s]),
                       format_bytes(p.device_bytes), p.peak_bytes_by_stage[s] <= p.device_bytes ? "" : "  DOES NOT FIT");
  for (const auto& [cost, how] : p.sources) out += fmt::format("  {:<19} {}\n", cost, how);
  return out;
}

nlohmann::json to_json(const StepPrediction& p) {
  nlohmann::json sources = nlohmann::json::object();
  for (const auto& [cost, how] : p.sources) sources[cost] = how;
  const auto& par = p.plan.config.parallel;
  return {{"cluster", p.cluster},
          {"gpus", p.gpus},
          {"layout",
           {{"dp", par.dp}, {"tp", par.tp}, {"pp", par.pp}, {"sp", par.sp}, {"schedule", par.schedule},
            {"chunks", par.chunks}, {"micro_batch", p.plan.config.train.micro_batch}}},
          {"step_s", p.step_s},
          {"pipeline_s", p.pipeline_s},
          {"gradient_tail_s", p.gradient_tail_s},
          {"optimizer_s", p.optimizer_s},
          {"tokens_per_s", p.tokens_per_s},
          {"model_tflops_per_device", p.model_flops_per_device / 1e12},
          {"hardware_tflops_per_device", p.hardware_flops_per_device / 1e12},
          {"mfu", p.mfu},
          {"bubble_fraction", p.bubble_fraction},
          {"peak_bytes_by_stage", p.peak_bytes_by_stage},
          {"device_bytes", p.device_bytes},
          {"fits", p.fits},
          {"sources", sources}};
}

}  // namespace loom::plan
