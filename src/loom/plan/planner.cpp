#include "loom/plan/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "loom/core/error.h"
#include "loom/core/units.h"
#include "loom/models/registry.h"
#include "loom/schedule/schedule.h"
#include "loom/schedule/stage_cuts.h"

namespace loom::plan {
namespace {

std::vector<int64_t> divisors(int64_t n, int64_t at_most) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= std::min(n, at_most); ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

inline constexpr int64_t kAutoPolicyLayers = 64;

// One way to hold activations: as the config has it, or one of the three the search tries.
enum class MemoryMode : uint8_t { Config, Keep, RecomputeAll, Auto };

struct Candidate {
  Config config;
  double bound_s = 0;  // the estimate its step is searched in order of
  MemoryMode memory = MemoryMode::Config;
  std::string layout;  // every choice but the memory mode's
};

std::string layout_key(const Config& c) {
  const auto& p = c.parallel;
  return fmt::format("{} {} {} {} {} {} {} {} {} {} {} {}", p.dp, p.tp, p.pp, p.sp, p.sp_mode.name(),
                     c.train.micro_batch, p.schedule, p.chunks, p.zero, p.shard_group, p.tp_sequence, p.ep);
}

// A candidate whose estimate exceeds the K-th best simulated step by more than this is not
// simulated: the estimate leaves out communication and imbalance (which only lengthen a step)
// but its fill term is the balanced schedule's, which a simulated schedule may beat a little.
inline constexpr double kEstimateMargin = 0.05;

void apply_memory(Config& c, MemoryMode mode) {
  if (mode == MemoryMode::Config) return;
  c.memory.policy = mode == MemoryMode::Auto ? PolicyMode::Auto : PolicyMode::Manual;
  c.memory.recompute = mode == MemoryMode::RecomputeAll ? Recompute::Full : Recompute::None;
  c.memory.recompute_ratio = 0;
  c.memory.swap = Swap::None;
  c.parallel.partition = mode == MemoryMode::Auto && c.parallel.stage_chunks() == 1 ? Partition::Auto : Partition::Compute;
  c.parallel.pp_cuts.clear();
}

// Bytes every device holds at least: its share of the dense parameters with their gradients,
// product copies and AdamW moments (activations only add).
double weight_bound(const Config& c, double params) {
  const double master = c.model.dtype == DType::Float64 ? 8 : 4, copy = c.model.dtype == DType::BFloat16 ? 2 : 0;
  const double local = params / static_cast<double>(c.parallel.tp * c.parallel.pp);
  const auto& p = c.parallel;
  // ZeRO-2/3 shard over the shard group (NOTE [Fully sharded data parallelism]); ZeRO-1 over dp.
  const auto n = static_cast<double>(p.shard_ranks());  // read by ZeRO-2/3 only
  switch (p.zero) {
    case 0: return local * (4 * master + copy);
    case 1: return local * (2 * master + copy) + local * 2 * master / static_cast<double>(p.dp);
    case 2: return local * (master + copy) + local * 3 * master / n;
    default: return local * 4 * master / n;
  }
}

// Strictly faster, an exact tie broken toward less memory, then by name: a strict weak order.
bool faster(const StepPrediction& a, const StepPrediction& b) {
  return std::tuple{a.step_s, a.largest_peak(), layout_name(a)} < std::tuple{b.step_s, b.largest_peak(), layout_name(b)};
}

bool leaner(const StepPrediction& a, const StepPrediction& b) {
  return std::tuple{a.largest_peak(), layout_name(a)} < std::tuple{b.largest_peak(), layout_name(b)};
}

// The ranking's (rank_predictions orders ties by memory, so the slowest need not be the last).
double slowest_step(const std::vector<StepPrediction>& ranked) {
  double slowest = 0;
  for (const StepPrediction& p : ranked) slowest = std::max(slowest, p.step_s);
  return slowest;
}

// The search's state: the config, the cluster, and the timed chains already built.
class Search {
 public:
  Search(const Config& config, const Cluster& cluster, int64_t gpus, const SearchOptions& options,
         const models::ModelKinds& kinds)
      : base_(searchable(config, cluster)),
        costs_(CostModel::for_config(config, &cluster)),
        gpus_(gpus),
        options_(options),
        kinds_(kinds) {
    Config serial = config;
    serial.parallel = ParallelConfig{};
    const std::vector<LayerPlan> chain = timed_chain(serial, CostModel{}, kinds_);  // its size only
    chain_layers_ = static_cast<int64_t>(chain.size());
    for (const LayerPlan& l : chain)
      for (const ParamInfo& p : l.params) (p.routed ? experts_ : params_) += static_cast<double>(p.numel);
  }

  std::vector<Candidate> enumerate(PlanResult& result);
  std::vector<int64_t> shard_groups(int64_t zero, int64_t dp, int64_t dp_per_node) const;
  std::vector<int64_t> expert_groups(int64_t dp) const;
  void simulate(std::vector<Candidate> candidates, PlanResult& result);

 private:
  bool kept(const char* key) const { return options_.keep.count(key) != 0; }
  template <class T>
  std::vector<T> choices(const char* key, T configured, std::vector<T> all) const {
    return kept(key) ? std::vector<T>{configured} : all;
  }
  void add_schedules(Config c, PlanResult& result, std::vector<Candidate>& out);
  void add(Config c, MemoryMode memory, PlanResult& result, std::vector<Candidate>& out);
  double bound(const Config& c);
  std::vector<MemoryMode> memory_modes() const;

  // The config as the candidates start from: parallel.auto off (they set the degrees it refuses
  // beside it), and the device's memory as budget where none is set (memory.policy = "auto"
  // needs one; simulate_step budgets so anyway).
  static Config searchable(Config c, const Cluster& cluster) {
    c.parallel.auto_layout = false;
    if (c.memory.budget.empty()) c.memory.budget = fmt::format("{}B", static_cast<int64_t>(cluster.memory_bytes));
    return c;
  }

  const Config base_;
  const Cluster& cluster() const { return *costs_.cluster(); }
  const CostModel costs_;  // on the cluster searched, the profile read once (NOTE [Cost model])
  int64_t gpus_;
  SearchOptions options_;
  const models::ModelKinds& kinds_;
  double params_ = 0, experts_ = 0;  // the serial model's elements: the rest, and the routed experts'
  int64_t chain_layers_ = 0;
  using Shape = std::tuple<int64_t, int64_t, int, int64_t, bool>;
  std::map<Shape, std::pair<std::vector<double>, std::vector<double>>> chain_times_;
  // The busiest rank's time per micro-batch, by shape, pp, chunks, placement (a V?) and recompute.
  std::map<std::tuple<Shape, int64_t, int64_t, bool, bool>, double> cuts_;
};

// A step's estimate: each layer's time per micro-batch (all passes, a recomputed forward again),
// the stages cut to balance it (as make_plan cuts on a cluster), the busiest rank's time for every
// micro-batch and the schedule's fill. Chains are timed once per shape (tp, sp, its mode,
// micro-batch, tp_sequence); cuts once per shape, pp, chunks, placement and recompute.
double Search::bound(const Config& c) {
  const auto& p = c.parallel;
  const auto shape = std::tuple{p.tp, p.sp, static_cast<int>(p.sp_mode.value), c.train.micro_batch, p.tp_sequence};
  auto it = chain_times_.find(shape);
  if (it == chain_times_.end()) {
    std::pair<std::vector<double>, std::vector<double>> times;  // all passes; the forward
    for (const LayerPlan& l : timed_chain(c, costs_, kinds_)) {
      times.first.push_back(l.forward_s + l.backward_input_s + l.backward_weight_s);
      times.second.push_back(l.forward_s);
    }
    it = chain_times_.emplace(shape, std::move(times)).first;
  }
  const bool recompute = c.memory.recompute == Recompute::Full;
  const int64_t chunks = p.stage_chunks(), stages = p.pp * chunks;
  // Where each virtual stage runs (NOTE [V-shaped pipelines]).
  const schedule::Schedule placement{.stages = p.pp, .chunks = chunks,
                                     .placement = v_shaped(p.schedule) ? schedule::Placement::V : schedule::Placement::Loop};
  const bool v = placement.placement == schedule::Placement::V;
  auto cut = cuts_.find({shape, p.pp, chunks, v, recompute});
  if (cut == cuts_.end()) {
    std::vector<double> layer = it->second.first;
    if (recompute)
      for (size_t i = 0; i < layer.size(); ++i) layer[i] += it->second.second[i];
    std::vector<double> rank(static_cast<size_t>(p.pp), 0.0);  // per pipeline rank, over its chunks
    const std::vector<int64_t> cuts = schedule::balanced_cuts(layer, stages);  // add() checked stages <= layers
    for (int64_t v = 0; v < stages; ++v)
      for (int64_t i = cuts[v]; i < cuts[v + 1]; ++i) rank[placement.rank_of(v)] += layer[i];
    cut = cuts_.emplace(std::tuple{shape, p.pp, chunks, v, recompute}, *std::max_element(rank.begin(), rank.end())).first;
  }
  // The fill and drain in rank times: (pp - 1) / chunks, about a third of that when W fills
  // the bubbles (zb-h1; zb-v's and dualpipe-v's (pp - 1) / 6 per NOTE [V-shaped pipelines]).
  double fill = static_cast<double>(p.pp - 1) / static_cast<double>(chunks);
  if (p.schedule == "zb-h1" || v_shaped(p.schedule)) fill /= 3;
  return cut->second * (static_cast<double>(c.microbatch_count() / p.dp) + fill);
}

// memory.policy = "auto" replays the pipeline for every layer it considers changing, so it is
// searched on chains of kAutoPolicyLayers layers at most; longer ones try keep and recompute-all.
std::vector<MemoryMode> Search::memory_modes() const {
  if (kept("memory")) return {MemoryMode::Config};
  if (chain_layers_ > kAutoPolicyLayers) return {MemoryMode::Keep, MemoryMode::RecomputeAll};
  return {MemoryMode::Keep, MemoryMode::RecomputeAll, MemoryMode::Auto};
}

void Search::add(Config c, MemoryMode memory, PlanResult& result, std::vector<Candidate>& out) {
  ++result.enumerated;
  try {
    models::validate_config(c, kinds_);
  } catch (const InputError& e) {
    if (result.refused++ == 0) result.first_refusal = e.what();
    return;
  }
  if (c.parallel.pp * c.parallel.stage_chunks() > chain_layers_) {  // a stage without a layer (make_plan refuses it)
    ++result.refused;
    return;
  }
  // ep divides the experts (NOTE [Expert parallelism]); counting them ZeRO-sharded too keeps it a bound.
  if (weight_bound(c, params_ + experts_ / static_cast<double>(c.parallel.ep)) > cluster().memory_bytes) {
    ++result.over_memory;
    return;
  }
  const double b = bound(c);
  std::string layout = layout_key(c);
  out.push_back({std::move(c), b, memory, std::move(layout)});
}

void Search::add_schedules(Config c, PlanResult& result, std::vector<Candidate>& out) {
  auto& p = c.parallel;
  std::vector<std::string> kinds{"1f1b"};
  if (p.pp > 1 && !kept("schedule")) kinds.assign(schedule::kScheduleKinds.begin(), schedule::kScheduleKinds.end());
  if (kept("schedule")) kinds = {base_.parallel.schedule};
  for (const std::string& kind : kinds) {
    p.schedule = kind;
    std::vector<int64_t> chunks{1};
    if (kind == "interleaved") chunks = choices<int64_t>("chunks", base_.parallel.chunks, {2, 3, 4, 5, 6, 7, 8});
    for (int64_t k : chunks) {
      p.chunks = k;
      for (MemoryMode m : memory_modes()) {
        Config with = c;
        apply_memory(with, m);
        add(std::move(with), m, result, out);
      }
    }
  }
}

// ZeRO-2/3's shard groups: all of dp, and, when dp spans nodes, the dp ranks of one node (hybrid:
// the reduce-scatters and gathers stay inside a node, one all-reduce of the shards crosses them).
std::vector<int64_t> Search::shard_groups(int64_t zero, int64_t dp, int64_t dp_per_node) const {
  if (zero < 2) return {0};
  std::vector<int64_t> groups{0};
  if (dp_per_node > 1 && dp_per_node < dp && dp % dp_per_node == 0) groups.push_back(dp_per_node);
  return choices<int64_t>("shard_group", base_.parallel.shard_group, groups);
}

// Expert groups (NOTE [Expert parallelism]): each divisor of dp that divides the experts; 1 for a
// model without them.
std::vector<int64_t> Search::expert_groups(int64_t dp) const {
  const int64_t experts = base_.model.moe_experts;
  if (experts == 0) return {base_.parallel.ep};
  std::vector<int64_t> groups;
  for (int64_t ep : divisors(dp, dp))
    if (experts % ep == 0) groups.push_back(ep);
  return choices<int64_t>("ep", base_.parallel.ep, groups);
}

std::vector<Candidate> Search::enumerate(PlanResult& result) {
  std::vector<Candidate> out;
  const int64_t node = cluster().devices_per_node;
  for (int64_t tp : choices("tp", base_.parallel.tp, divisors(gpus_, node)))
    for (int64_t sp : choices("sp", base_.parallel.sp, divisors(gpus_ / tp, node / tp)))
      for (int64_t pp : choices("pp", base_.parallel.pp, divisors(gpus_ / (tp * sp), gpus_))) {
        if (gpus_ % (tp * sp * pp) != 0) continue;
        const int64_t dp = gpus_ / (tp * sp * pp);
        if ((kept("dp") && dp != base_.parallel.dp) || base_.train.global_batch % dp != 0) continue;
        const int64_t replica_batch = base_.train.global_batch / dp;
        for (int64_t mb : choices("micro_batch", base_.train.micro_batch, divisors(replica_batch, replica_batch)))
          for (SpMode mode : sp > 1 ? choices<SpMode>("sp_mode", base_.parallel.sp_mode,
                                                      {SpMode::AllGather, SpMode::Ring, SpMode::Ulysses})
                                    : std::vector{base_.parallel.sp_mode.value})
            for (int64_t zero : dp > 1 ? choices<int64_t>("zero", base_.parallel.zero, {0, 1, 2, 3}) : std::vector<int64_t>{0})
              for (int64_t group : shard_groups(zero, dp, node % (tp * sp * pp) == 0 ? node / (tp * sp * pp) : 1))
                for (bool seq : tp > 1 ? choices("tp_sequence", base_.parallel.tp_sequence, {false, true})
                                       : std::vector{false})
                  for (int64_t ep : expert_groups(dp)) {
                    if (zero >= 2 && seq) continue;  // not run together yet (core/config_validate.cpp)
                    Config c = base_;
                    c.parallel.dp = dp, c.parallel.tp = tp, c.parallel.pp = pp, c.parallel.sp = sp;
                    c.parallel.sp_mode = mode, c.parallel.zero = zero, c.parallel.shard_group = group;
                    c.parallel.tp_sequence = seq, c.parallel.ep = ep;
                    c.train.micro_batch = mb;
                    add_schedules(std::move(c), result, out);
                  }
      }
  return out;
}

void Search::simulate(std::vector<Candidate> candidates, PlanResult& result) {
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.bound_s < b.bound_s; });
  std::set<std::string> kept_fits;  // layouts that fit with every activation kept
  for (size_t i = 0; i < candidates.size(); ++i) {
    auto& best = result.best;
    if (static_cast<int64_t>(best.size()) == options_.top &&
        candidates[i].bound_s >= (1 + kEstimateMargin) * slowest_step(best)) {
      result.bounded += static_cast<int64_t>(candidates.size() - i);
      return;
    }
    // Keeping every activation is the fastest way to hold them: where it fits, recomputing or
    // letting the cost model choose (which then keeps) cannot be faster.
    if (candidates[i].memory != MemoryMode::Keep && kept_fits.count(candidates[i].layout)) {
      ++result.dominated;
      continue;
    }
    ++result.simulated;
    StepPrediction p;
    try {
      p = simulate_step(candidates[i].config, costs_, gpus_, kinds_);
    } catch (const InputError& e) {  // the plan's own checks: stages against the chain, a schedule's counts
      if (result.refused++ == 0) result.first_refusal = e.what();
      continue;
    }
    if (!p.fits) {
      ++result.unfit;
      const double need = p.largest_peak();
      if (result.least_need_bytes == 0 || need < result.least_need_bytes) result.least_need_bytes = need;
      continue;
    }
    if (candidates[i].memory == MemoryMode::Keep) kept_fits.insert(candidates[i].layout);
    best.push_back(std::move(p));
    if (static_cast<int64_t>(best.size()) > options_.top)  // the slowest goes (NOTE [Ties in the ranking])
      best.erase(std::max_element(best.begin(), best.end(), faster));
    rank_predictions(best);
  }
}

}  // namespace

std::string layout_name(const StepPrediction& p) {
  const Config& c = p.plan.config;
  const auto& q = c.parallel;
  std::string layout =
      fmt::format("dp{} tp{} pp{} sp{} mb{} {}", q.dp, q.tp, q.pp, q.sp, c.train.micro_batch, q.schedule);
  if (q.chunks > 1) layout += fmt::format("x{}", q.chunks);
  if (q.sp > 1) layout += fmt::format(" {}", q.sp_mode.name());
  if (q.zero > 0) layout += fmt::format(" zero{}", q.zero);
  if (q.shard_group > 0 && q.shard_group < q.dp) layout += fmt::format("/{}", q.shard_group);
  if (q.tp_sequence) layout += " tp-seq";
  if (q.ep > 1) layout += fmt::format(" ep{}", q.ep);
  layout += c.memory.policy == PolicyMode::Auto ? " mem-auto"
            : c.memory.recompute == Recompute::Full ? " recompute" : "";
  return layout;
}

void rank_predictions(std::vector<StepPrediction>& predictions) {
  std::sort(predictions.begin(), predictions.end(), faster);
  for (auto group = predictions.begin(); group != predictions.end();) {  // NOTE [Ties in the ranking]
    const double limit = group->step_s * (1 + kTieShare);
    const auto end = std::find_if(group, predictions.end(), [&](const StepPrediction& p) { return p.step_s > limit; });
    std::sort(group, end, leaner);
    group = end;
  }
}

PlanResult plan_layouts(const Config& config, const Cluster& cluster, int64_t gpus, const SearchOptions& options,
                        const models::ModelKinds& kinds) {
  check_gpus(cluster, gpus);
  for (const std::string& key : options.keep)
    LOOM_CHECK_INPUT(std::find_if(std::begin(kLayoutKeys), std::end(kLayoutKeys),
                                  [&](const char* k) { return key == k; }) != std::end(kLayoutKeys),
                     "--keep {} is not a layout key; hint: one of dp, tp, pp, sp, sp_mode, micro_batch, schedule, "
                     "chunks, zero, shard_group, tp_sequence, ep, memory",
                     key);
  PlanResult result;
  Search search(config, cluster, gpus, options, kinds);
  search.simulate(search.enumerate(result), result);
  LOOM_CHECK_INPUT(!result.best.empty() || result.refused < result.enumerated,
                   "none of the {} layouts of {} on {} devices is valid; the first refused: {}", result.enumerated,
                   config.model.kind, gpus, result.first_refusal);
  LOOM_CHECK_INPUT(!result.best.empty(),
                   "no layout of {} on {} x {} fits its {} per device: the smallest needs {} ({} layouts tried, {} "
                   "over memory by their weights alone); hint: more devices, a smaller train.micro_batch or "
                   "global_batch, or fewer --keep keys",
                   config.model.kind, gpus, cluster.name, format_bytes(cluster.memory_bytes),
                   result.least_need_bytes > 0 ? format_bytes(result.least_need_bytes) : "more than the weights alone",
                   result.enumerated, result.over_memory);
  return result;
}

}  // namespace loom::plan
