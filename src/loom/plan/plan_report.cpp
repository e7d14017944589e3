// The run plan in words and as JSON, and the memory check on it.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>

#include "loom/core/error.h"
#include "loom/core/units.h"
#include "loom/memory/host_memory.h"
#include "loom/models/registry.h"
#include "loom/plan/run_plan.h"

namespace loom::plan {

std::string memory_text(const RunPlan& plan, const MemoryEstimate& need) {
  const Config& c = plan.config;
  const models::ModelKind& kind = *plan.kind;
  std::string text = fmt::format(
      "the run needs at least {} per rank: {} for parameters, gradients and AdamW moments ({}), {} for "
      "activations ({} micro-batch{} of train.micro_batch = {}{})",
      format_bytes(need.total()), format_bytes(need.weights), kind.weight_keys(c.model),
      format_bytes(need.activations), need.stashed, need.stashed == 1 ? "" : "es", c.train.micro_batch,
      kind.activation_keys(c.model));
  if (need.boundary > 0)
    text += fmt::format(", {} for messages between pipeline stages", format_bytes(need.boundary));
  if (need.sparse > 0) text += fmt::format(", {} for sparse table rows", format_bytes(need.sparse));
  if (need.transient > 0)
    text += fmt::format(", {} for the busiest layer's temporaries", format_bytes(need.transient));
  if (need.checkpoint > 0)
    text += fmt::format(", {} for the async checkpoint's copy (checkpoint.async)", format_bytes(need.checkpoint));
  return text;
}

namespace {

// The stage that needs the most: the one the check names.
const MemoryEstimate& largest(const RunPlan& plan) {
  return std::max_element(plan.stages.begin(), plan.stages.end(),
                          [](const StagePlan& a, const StagePlan& b) { return a.memory.total() < b.memory.total(); })
      ->memory;
}

std::string stage_words(const RunPlan& plan, const MemoryEstimate& need) {
  if (plan.stages.size() == 1) return "";
  for (size_t s = 0; s < plan.stages.size(); ++s)
    if (&plan.stages[s].memory == &need) return fmt::format(" (pipeline stage {}, the largest)", s);
  return "";
}

}  // namespace

std::string budget_hint(const RunPlan& plan) {
  const MemoryConfig& m = plan.config.memory;
  if (m.policy != PolicyMode::Auto && m.recompute == Recompute::Full)  // the kind's hint would suggest it again
    return "raise memory.budget, lower train.micro_batch, or use more pipeline stages (parallel.pp)";
  if (m.policy != PolicyMode::Auto) return fmt::format("raise memory.budget, {}", plan.kind->memory_hint());
  return fmt::format("memory.policy = \"auto\" fitted each stage's estimate into {:.0f}% of memory.budget "
                     "(`loom config --print` shows it); raise memory.budget, lower train.micro_batch, or use more "
                     "pipeline stages (parallel.pp)",
                     kPlannedBudgetShare * 100);
}

// The estimate against memory.budget, or without one against this machine's memory shared by its
// ranks: an impossible model is refused before anything is allocated.
RankMemory host_rank_memory(int local_ranks) {
  return {.bytes = static_cast<double>(memory::host_memory_bytes()), .sharers = std::max(1, local_ranks)};
}

void check_memory(const RunPlan& plan, const RankMemory& memory, double in_use) {
  const MemoryEstimate& need = largest(plan);
  const int64_t budget = plan.config.budget_bytes();
  const std::string_view hint = plan.kind->memory_hint();
  if (budget > 0) {
    LOOM_CHECK_INPUT(need.total() + in_use <= static_cast<double>(budget),
                     "memory.budget = {} is too small: {}{}{}; hint: {}", format_bytes(static_cast<double>(budget)),
                     memory_text(plan, need), stage_words(plan, need),
                     in_use > 0 ? fmt::format(" besides {} already in use", format_bytes(in_use)) : "",
                     budget_hint(plan));
    return;
  }
  const double per_rank = memory.bytes / std::max(1, memory.sharers);
  LOOM_CHECK_INPUT(need.total() <= per_rank,
                   "the run does not fit {}: {}{}, but each of the {} rank{} there has {} ({} in all); "
                   "hint: {}, or use more ranks",
                   memory.where, memory_text(plan, need), stage_words(plan, need), memory.sharers,
                   memory.sharers == 1 ? "" : "s", format_bytes(per_rank), format_bytes(memory.bytes), hint);
}

bool dense_tables_fit(const RunPlan& plan, const RankMemory& memory, double in_use, const CostModel& costs,
                      const models::ModelKinds& kinds) {
  const auto has_table = [](const LayerPlan& layer) {
    return std::any_of(layer.params.begin(), layer.params.end(), [](const ParamInfo& p) { return p.table; });
  };
  if (std::none_of(plan.chain.begin(), plan.chain.end(), has_table)) return true;
  Config dense = plan.config;
  dense.parallel.sparse = SparseMode::Off;
  try {
    check_memory(make_plan(dense, plan.world_size, costs, kinds), memory, in_use);
  } catch (const InputError&) {
    return false;
  }
  return true;
}

namespace {

// "name policy, name policy, ..." for a stage's layers, wrapped into comment lines.
std::string policy_lines(const RunPlan& plan, const StagePlan& stage) {
  std::string text, line = "#   policy:";
  for (int64_t i : stage.layers) {
    const std::string item = fmt::format(" {} {}", plan.chain[i].name, nn::name_of(plan.chain[i].policy));
    if (line.size() + item.size() > 100) text += line + "\n", line = "#          ";
    line += item;
  }
  return text + line + "\n";
}

std::string memory_words(const RunPlan& plan) {
  const MemoryConfig& m = plan.config.memory;
  const std::string partition = plan.config.parallel.pp_cuts.empty()
                                    ? std::string(plan.config.parallel.partition.name())
                                    : "parallel.pp_cuts";
  return fmt::format("# memory: policy {}{}, partition {}, cuts [{}]; predicted pipeline time {:.1f} ms per step "
                     "({}, swap tier {:.1f} GB/s)\n",
                     m.policy.name(),
                     m.policy == PolicyMode::Manual
                         ? fmt::format(" (recompute {}, swap {})", m.recompute.name(), m.swap.name())
                         : "",
                     partition, fmt::join(plan.cuts, ", "), plan.predicted_step_s * 1e3,
                     plan.profiled ? "profiled layer times" : "analytic layer times", plan.copy_bytes_per_s / 1e9);
}

}  // namespace

PolicyCounts policy_counts(const RunPlan& plan, const StagePlan& stage) {
  PolicyCounts counts;
  for (int64_t i : stage.layers) {
    counts.recomputed += plan.chain[i].policy == nn::MemoryPolicy::Recompute;
    counts.swapped += plan.chain[i].policy == nn::MemoryPolicy::Swap;
  }
  return counts;
}

std::string RunPlan::describe() const {
  std::string text = fmt::format(
      "# plan: {} ranks = dp {} x pp {} x sp {} x tp {}; {} chain layers; schedule {} ({} micro-batches per "
      "dp rank{})\n",
      world_size, mesh.dp(), mesh.pp(), mesh.sp(), mesh.tp(), chain.size(), schedule.kind, schedule.microbatches,
      schedule.chunks > 1 ? fmt::format(", {} chunks per rank", schedule.chunks) : "");
  text += memory_words(*this);
  for (size_t s = 0; s < stages.size(); ++s) {
    const StagePlan& stage = stages[s];
    const auto [recomputed, swapped] = policy_counts(*this, stage);
    const MemoryEstimate& m = stage.memory;
    text += fmt::format(
        "# stage {}: {} layers ({} .. {}), {} recomputed, {} swapped; predicted peak per rank {}: "
        "weights+grads+moments {} ({}), activations {} ({} micro-batch{} in flight), sparse rows {}, transient {}{}{}{}{}\n",
        s, stage.layers.size(), chain[stage.layers.front()].name, chain[stage.layers.back()].name, recomputed, swapped,
        format_bytes(m.total()), format_bytes(m.weights),
        fmt::format("parameters {}, gradients {}, moments {}", format_bytes(m.params), format_bytes(m.grads),
                    format_bytes(m.moments)),
        format_bytes(m.activations), m.stashed,
        m.stashed == 1 ? "" : "es", format_bytes(m.sparse), format_bytes(m.transient),
        m.boundary > 0 ? fmt::format(", stage-boundary messages {}", format_bytes(m.boundary)) : "",
        m.checkpoint > 0 ? fmt::format(", async checkpoint copy {}", format_bytes(m.checkpoint)) : "",
        m.gathered > 0 ? fmt::format(", gathered working set {}", format_bytes(m.gathered)) : "",
        m.host > 0 ? fmt::format("; swap tier (host) {}", format_bytes(m.host)) : "");
    text += policy_lines(*this, stage);
    for (const auto& [axis, bytes] : stage.comm_bytes)
      text += fmt::format("#   comm {}: {} per rank per step\n", axis, format_bytes(bytes));
  }
  return text;
}

nlohmann::json RunPlan::to_json() const {
  nlohmann::json stages_json = nlohmann::json::array();
  for (const StagePlan& stage : stages) {
    nlohmann::json layers = nlohmann::json::array();
    for (int64_t i : stage.layers) {
      const LayerPlan& l = chain[i];
      layers.push_back({{"index", i}, {"name", l.name}, {"policy", nn::name_of(l.policy)},
                        {"forward_flops", l.cost.forward_flops},
                        {"backward_flops", l.cost.backward_input_flops + l.cost.backward_weight_flops},
                        {"param_bytes", l.cost.param_bytes}, {"saved_bytes", l.cost.saved_bytes}});
    }
    const MemoryEstimate& m = stage.memory;
    stages_json.push_back({{"virtual_stages", stage.virtual_stages}, {"layers", layers},
                           {"memory", {{"weights", m.weights}, {"params", m.params}, {"grads", m.grads},
                                       {"moments", m.moments}, {"gathered", m.gathered},
                                       {"activations", m.activations}, {"sparse", m.sparse},
                                       {"transient", m.transient}, {"boundary", m.boundary}, {"checkpoint", m.checkpoint}, {"host", m.host},
                                       {"stashed_microbatches", m.stashed}, {"total", m.total()}}},
                           {"comm_bytes_per_step", stage.comm_bytes}});
  }
  nlohmann::json ranks = nlohmann::json::array(), axes = nlohmann::json::object();
  for (int r = 0; r < world_size; ++r) {
    nlohmann::json rank = {{"rank", r}};
    for (const dist::MeshAxis& a : mesh.axes()) rank[a.name] = mesh.coordinate(r, a.name);
    ranks.push_back(std::move(rank));
  }
  for (const dist::MeshAxis& a : mesh.axes()) axes[a.name] = a.size;
  return {{"world_size", world_size},
          {"mesh", axes},
          {"ranks", ranks},
          {"schedule", {{"kind", schedule.kind}, {"microbatches", schedule.microbatches}, {"chunks", schedule.chunks}}},
          {"cuts", cuts},
          {"memory_policy", config.memory.policy.name()},
          {"partition", config.parallel.partition.name()},
          {"predicted_step_s", predicted_step_s},
          {"copy_bytes_per_s", copy_bytes_per_s},
          {"profiled", profiled},
          {"stages", stages_json}};
}

}  // namespace loom::plan
