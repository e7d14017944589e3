#pragma once
// NOTE [Step simulator]: one training step of a config's layout on a cluster, predicted from the
// run plan (symbolic: layers sized against sizing communicators, nothing allocated, so a
// trillion-parameter model on thousands of devices simulates here) and the cluster's costs
// (NOTE [Cluster cost model]):
//   1. every chain layer's pass times: its GEMMs, attention and elementwise bytes on the device,
//      plus its tp/sp collectives by the links its group spans (overlapped ones hidden under the
//      compute where shorter)
//   2. the plan's choices made with those times (memory.policy / parallel.partition = "auto"
//      see the cluster's times and, without memory.budget, the device's memory)
//   3. the pipeline: every rank's lowered actions replayed by the memory cost model's
//      discrete-event simulation (schedule simulator + stash replay + swap copies), with the
//      boundary's send time on each cross-rank dependency
//   4. the replicas' gradient reduction: buckets of parallel.bucket_mb in reverse chain order, each
//      ready when its layers' last backward ends, reduced one after another on one channel (ZeRO-1:
//      a reduce-scatter, then the parameters' all-gather after the update); the sparse exchange
//      (rows pulled before the step, their gradients pushed after the backward)
//   5. the optimizer: AdamW reads and writes its state at the device's memory bandwidth
// Ranks of one pipeline stage are alike, so the simulation runs one rank per stage.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "loom/plan/cluster.h"
#include "loom/plan/run_plan.h"

namespace loom::plan {

// A span of the predicted timeline, on pipeline rank `rank`'s track `track` ("compute", "p2p",
// "gradients", "optimizer"), for a trace that opens beside a real run's.
struct Span {
  int64_t rank = 0;
  std::string track, name;
  double start = 0, end = 0;
};

struct StepPrediction {
  RunPlan plan;                  // as simulated (the device's memory as budget when none was set)
  std::string cluster;
  int64_t gpus = 0;
  double step_s = 0;             // the whole step
  double pipeline_s = 0;         // the slowest pipeline rank's last action
  double gradient_tail_s = 0;    // the gradient reduction not hidden under the backward
  double optimizer_s = 0;
  double tokens_per_s = 0;       // the model kind's items per second (tokens or samples)
  double model_flops_per_device = 0;     // FLOP/s: forward + backward, recompute not counted
  double hardware_flops_per_device = 0;  // FLOP/s: recomputed forwards counted too
  double mfu = 0;                        // NOTE [MFU] against the cluster's peak for model.dtype
  double bubble_fraction = 0;            // the pipeline's idle share
  std::vector<double> peak_bytes_by_stage;
  // The largest stage's peak (0 with no stages).
  double largest_peak() const {
    return peak_bytes_by_stage.empty() ? 0 : *std::max_element(peak_bytes_by_stage.begin(), peak_bytes_by_stage.end());
  }
  double device_bytes = 0;  // the budget each stage must fit (memory.budget, else the device's)
  bool fits = true;
  // Which costs were measured and which modelled: (cost, how it was obtained).
  std::vector<std::pair<std::string, std::string>> sources;
  std::vector<Span> after_pipeline;  // the gradient buckets and the optimizer (timeline() adds the rest)
};

// The predicted timeline: every pipeline action, the gradient buckets and the optimizer.
std::vector<Span> timeline(const StepPrediction& prediction);

// Simulates `config` on `gpus` devices of `cluster`. InputError for a layout that does not use
// exactly `gpus` ranks or is otherwise invalid (the run plan's checks); a layout that does not fit
// is predicted with fits = false (refuse_unfit names the numbers). `kinds`: what model.kind may
// name (NOTE [Model kinds are a value]); the prediction's plan points into it.
StepPrediction simulate_step(const Config& config, const Cluster& cluster, int64_t gpus,
                             const models::ModelKinds& kinds = models::ModelKinds::builtin());
// The same with the costs given (NOTE [Cost model]; they must be a cluster's): what a planner
// simulating many layouts passes, so that a profile is read once.
StepPrediction simulate_step(const Config& config, const CostModel& costs, int64_t gpus,
                             const models::ModelKinds& kinds = models::ModelKinds::builtin());

// InputError naming each stage's need against the device's memory.
void refuse_unfit(const StepPrediction& prediction);

std::string describe(const StepPrediction& prediction);  // the text `loom simulate` prints
nlohmann::json to_json(const StepPrediction& prediction);

}  // namespace loom::plan
