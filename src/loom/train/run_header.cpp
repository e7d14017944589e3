// The run's first console lines (rank 0 prints them, RunReport::header): the model, the whole
// layout, what loom is built on (core/build_info.h), the memory policy's choices, the data,
// validation and what a resume continues.
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <nlohmann/json.hpp>

#include "loom/core/build_info.h"
#include "loom/core/units.h"
#include "loom/dist/gather_text.h"
#include "loom/train/trainer.h"

namespace loom::train {
namespace {

std::string counted(int64_t n, const char* one, const char* many) { return fmt::format("{} {}", n, n == 1 ? one : many); }

// "1.23M": a parameter count as people read it.
std::string short_count(int64_t n) {
  const auto x = static_cast<double>(n);
  if (x >= 1e9) return fmt::format("{:.2f}B", x / 1e9);
  if (x >= 1e6) return fmt::format("{:.2f}M", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.1f}k", x / 1e3);
  return fmt::format("{}", n);
}

// Per stage, the layers the plan does not keep (NOTE [Memory cost model]); "" when every layer keeps
// its activations under memory.policy = "manual".
std::string policy_words(const plan::RunPlan& plan) {
  std::string stages;
  bool all_kept = true;
  for (const plan::LayerPlan& layer : plan.chain) all_kept = all_kept && layer.policy == nn::MemoryPolicy::Keep;
  if (all_kept && plan.config.memory.policy == PolicyMode::Manual) return "";
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const auto [recomputed, swapped] = plan::policy_counts(plan, plan.stages[s]);
    stages += fmt::format("{}{}: {} recomputed, {} swapped of {} layers", s == 0 ? "" : "; ",
                          plan.stages.size() == 1 ? "all stages" : fmt::format("stage {}", s), recomputed, swapped,
                          plan.stages[s].layers.size());
  }
  return fmt::format("loom: memory.policy = \"{}\": {}\n", plan.config.memory.policy.name(), stages);
}

// ", ZeRO-3" and, for a hybrid layout, its shard groups.
std::string zero_words(const ParallelConfig& p) {
  if (p.zero == 0) return "";
  if (p.shard_group == 0 || p.shard_group == p.dp) return fmt::format(", ZeRO-{}", p.zero);
  return fmt::format(", ZeRO-{} in {} groups of {} dp ranks", p.zero, p.dp / p.shard_group, p.shard_group);
}

// Collective over `world`: the path each rank's bfloat16 products take (NOTE [bf16 products]), one
// line when every rank took the same, else one per path with its ranks.
std::string products_words(dist::Communicator& world, const nn::Bf16Choice& mine) {
  std::map<std::string, std::vector<int>> ranks;
  const std::vector<std::string> all = dist::all_gather_text(world, mine.reason);
  for (size_t r = 0; r < all.size(); ++r) ranks[all[r]].push_back(static_cast<int>(r));
  if (ranks.size() == 1) return fmt::format("loom: bf16 products: {}\n", all.front());
  std::string text;
  for (const auto& [reason, which] : ranks) text += fmt::format("loom: bf16 products on ranks {}: {}\n", fmt::join(which, ","), reason);
  return text;
}

}  // namespace

// Collective over the world: every rank's parameters by name, so the count is the model's (each
// parameter once, whole, without vocabulary padding), not one rank's shard.
int64_t Trainer::model_param_count() const {
  nlohmann::json mine = nlohmann::json::object();
  for (const nn::Param* p : model_.params()) {
    int64_t n = 1;
    for (int64_t d : p->model_shape()) n *= d;
    mine[p->name] = n;
  }
  std::map<std::string, int64_t> all;
  for (const std::string& text : dist::all_gather_text(*base_world_, mine.dump())) {
    const nlohmann::json theirs = nlohmann::json::parse(text);
    for (auto it = theirs.begin(); it != theirs.end(); ++it) all[it.key()] = it.value().get<int64_t>();
  }
  int64_t total = 0;
  for (const auto& entry : all) total += entry.second;
  return total;
}

std::string Trainer::header() const {
  const auto& p = config_.parallel;
  const int64_t total = model_param_count(), mine = model_.param_count();
  std::string text = fmt::format(
      "loom: {} parameters ({}){}, {}; {} = dp {} x tp {} x pp {} x sp {}{}{}, {} per rank; data: {}\n",
      short_count(total), total, mine == total ? "" : fmt::format(", {} on rank 0", short_count(mine)),
      config_.model.dtype.name(), counted(mesh_->world().size(), "rank", "ranks"), p.dp, p.tp, p.pp, p.sp,
      zero_words(p), p.pp > 1 ? fmt::format(", schedule {}", plan_.schedule.kind) : "", counted(at::get_num_threads(), "thread", "threads"),
      data_->describe());
  text += fmt::format("loom: {}\n", build_line(build_info()));
  if (config_.model.dtype == DType::BFloat16) text += products_words(*base_world_, products_);
  text += policy_words(plan_);
  if (const std::string tables = optimizer_->tables().describe(); !tables.empty()) text += fmt::format("loom: {}\n", tables);
  if (valid_ != nullptr && config_.train.eval_every > 0) {
    const int64_t samples = eval_steps() * config_.train.global_batch;
    const models::Throughput unit = kind_->throughput(config_.model);
    text += fmt::format("loom: validation every {} steps on {} held-out samples ({} {}); valid: {}\n",
                        config_.train.eval_every, samples, samples * unit.per_sample, unit.items, valid_->describe());
  }
  for (const std::string& note : resume_.notes) text += fmt::format("loom: {}\n", note);
  if (resume_.manifest)
    text += fmt::format(
        "loom: resumed from {} at step {} (saved with {}, dp={} tp={} pp={} sp={}; rank 0 read {:.1f} MB in "
        "{:.3f} s)\n",
        resume_.dir, resume_.start_step, counted(resume_.manifest->layout.value("ranks", 0), "rank", "ranks"),
        resume_.manifest->layout.value("dp", 0), resume_.manifest->layout.value("tp", 0), resume_.manifest->layout.value("pp", 0),
        resume_.manifest->layout.value("sp", 0), static_cast<double>(resume_.bytes) / 1e6, resume_.seconds);
  return text;
}

}  // namespace loom::train
