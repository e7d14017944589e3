#pragma once
// NOTE [Layout planner]: `loom plan` searches the layouts of a config for a cluster with the step
// simulator (NOTE [Step simulator]):
//   enumerate  tp (dividing the heads, inside one node), sp (+ mode) with tp x sp inside a node,
//              pp up to the chain's length, dp the rest; the micro-batch (dividing a replica's
//              batch); the schedule (+ chunks for interleaved); ZeRO-1 where dp > 1; tp_sequence
//              where tp > 1; memory as keep / recompute all / memory.policy = "auto" (on chains
//              of at most 64 layers: its greedy replays the pipeline per change). Keys named
//              in `keep` stay as the config has them.
//   prune      a candidate the model kind refuses; one whose weights, gradients and moments alone
//              exceed the device (a bound: activations only add); then, candidates visited in
//              order of an estimate of their step (every layer's time spread evenly over the
//              stages, the schedule's fill, no communication), stop once the estimate exceeds the
//              K-th best simulated step by 5% (the estimate's fill is the balanced schedule's: a
//              simulated one may beat it a little, so this is a heuristic, not a bound); and a
//              recomputing (or "auto") candidate whose keep-everything twin fitted (it cannot be
//              faster)
//   simulate   the rest; a layout that does not fit is dropped
// The result is the top K, fastest first (ties toward less memory: NOTE [Ties in the ranking]); the
// best as a config fragment `loom train -c` accepts.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "loom/plan/simulate.h"

namespace loom::plan {

// The layout keys a search may change; `keep` holds those it must not.
inline constexpr const char* kLayoutKeys[] = {"dp", "tp", "pp", "sp", "sp_mode", "micro_batch", "schedule",
                                              "chunks", "zero", "shard_group", "tp_sequence", "ep", "memory"};

struct SearchOptions {
  int64_t top = 5;
  std::set<std::string> keep;  // of kLayoutKeys; InputError for another name
};

struct PlanResult {
  std::vector<StepPrediction> best;  // fastest first, at most `top`
  int64_t enumerated = 0, refused = 0, over_memory = 0, dominated = 0, bounded = 0, simulated = 0, unfit = 0;
  // Nothing fitted: the least memory a candidate needed (its largest stage), for the refusal.
  double least_need_bytes = 0;
  std::string first_refusal;  // the first candidate's refusal, for the error when all were
};

// NOTE [Ties in the ranking]: two predicted steps within kTieShare of each other are a tie: the
// cost model's error is far larger (docs/planner.md, "How close the predictions are"), so neither
// is known to be faster, and the one that needs less memory leaves more room for what the memory
// estimate leaves out. The ranking is fastest first; a group of ties (every step within kTieShare
// of the group's fastest) is ordered by its largest stage's peak bytes, the smaller first, then by
// layout_name, so equal inputs always give the same order. The top K are the K fastest (an exact
// tie at the K-th place keeps the smaller peak).
inline constexpr double kTieShare = 0.005;

// "dp2 tp1 pp1 sp1 mb4 1f1b zero1 recompute": the layout a prediction is for, as the table names it.
std::string layout_name(const StepPrediction& prediction);

// Orders `predictions` as NOTE [Ties in the ranking] says.
void rank_predictions(std::vector<StepPrediction>& predictions);

// InputError when no layout fits the cluster (naming the smallest memory a layout needed and the
// device's), or for a bad `keep` name. `kinds`: what model.kind may name; the result's plans point
// into it.
PlanResult plan_layouts(const Config& config, const Cluster& cluster, int64_t gpus, const SearchOptions& options,
                        const models::ModelKinds& kinds = models::ModelKinds::builtin());

// (plan/planner_output.cpp, with the two below) The table `loom plan` prints.
std::string describe(const PlanResult& result);

// The user's config with the layout of `chosen` (a plan's config): [parallel] and the memory
// keys but memory.budget, and train.micro_batch; parallel.auto false. The user's memory.budget
// stays; an empty one takes the plan's (the device's memory) only where the chosen layout needs a
// budget (memory.policy or parallel.partition "auto"): a plan for a GPU must not bind this host.
Config apply_layout(const Config& user, const Config& chosen);

// apply_layout's config as TOML `loom train -c` accepts, under a line saying where it came from.
std::string layout_toml(const Config& user, const Config& chosen);

}  // namespace loom::plan
