#pragma once
// NOTE [Memory cost model]
// Which layers keep, recompute or swap their saved activations, and where the stages are cut, so
// that every pipeline rank fits memory.budget at the lowest predicted step time (DawnPiper, Peng
// et al. 2025; the per-layer rule after Capuchin, Peng et al. 2020: swap where the copy hides
// between a micro-batch's forward and backward, recompute where it cannot, keep the rest).
//
// Time: the schedule simulator replays every rank's actions with each virtual stage's summed
// layer times (from a `loom profile` file, or each layer's FLOPs at a nominal rate); a
// recomputing layer adds its forward to its stage's backward (or to an R); a swapped layer's
// copies (out, then back) run on one copy engine per rank; a forward starts once the last copy out
// has ended (the executor waits, so one micro-batch's state at most is on its way out), and a
// backward once its copy back has (queued one compute action ahead, as the executor prefetches):
// those waits are added to the forward and the backward.
// Memory: a rank's activations over time, replayed from the same timed actions: a forward adds
// what its layers keep (saved state, a recomputing layer's input, a swapped layer's state until
// its copy out ends); the copy back adds the swapped state again; R adds the recomputed state;
// the last backward action (W or BW) frees the micro-batch. The peak of that replay is the
// stage's activation memory: the simulated stash, not micro-batches x bytes. The messages
// between stages are in it too (NOTE [Stage boundaries in the replay]).
//
// NOTE [Stage boundaries in the replay]: what the executor holds at a stage boundary, which no
// layer's saved state contains (issue 33). A forward's output (the last layer's, a new tensor)
// stays from the forward's end until the next stage has received it: the send is asynchronous
// and its buffer is the message's until the receiver takes it, just before its own forward of that
// micro-batch (the simulated start of that action; it cannot be later than this stage's backward of
// the micro-batch, which needs it). An input gradient sent back likewise, until the previous stage's
// backward of the micro-batch starts. A received output gradient (dy) is allocated when the
// backward starts and stays in the first layer's state, so it is held with the micro-batch until
// its last backward action. Each is MemoryModel::boundary_bytes.
//
// The policy per rank is greedy: while the rank does not fit, take the change (keep -> swap,
// keep or swap -> recompute) with the least added time per byte it frees. Stage cuts
// (parallel.partition): "compute" balances the layers' time, "memory" balances each rank's
// peak with every layer kept, "auto" binary-searches the bottleneck stage time between the two:
// a cut is feasible for T when every stage fits with its best policy and its time per
// micro-batch, that policy's extra included, is at most T.
#include <cstdint>
#include <string>
#include <vector>

#include "loom/nn/memory_policy.h"
#include "loom/schedule/schedule.h"
#include "loom/schedule/simulator.h"

namespace loom::plan {

// One chain layer on one rank for one micro-batch.
struct LayerCosts {
  double forward_s = 0, backward_input_s = 0, backward_weight_s = 0;
  double saved_bytes = 0;      // kept from forward to backward
  double input_bytes = 0;      // what a recomputing layer keeps instead: its input
  double workspace_bytes = 0;  // temporaries at the layer's busiest moment
  double fixed_bytes = 0;      // what no policy changes: parameters, gradients, moments, table rows
  // ZeRO-2/3: what the rank holds of this layer only while it runs (its gathered values and their
  // compute copy under ZeRO-3, its micro-batch gradients until reduced: NOTE [Fully sharded data
  // parallelism]); a rank's stage adds its largest layer's, once.
  double working_bytes = 0;
};

// What a rank's layers hold whatever their policy: every layer's fixed_bytes, and the largest
// working_bytes once (ZeRO-2/3 hold one layer's working set at a time).
struct FixedBytes {
  double sum = 0, working = 0;
  void add(const LayerCosts& layer) {
    sum += layer.fixed_bytes;
    working = working > layer.working_bytes ? working : layer.working_bytes;
  }
  double total() const { return sum + working; }
};

// A recomputing layer's busiest moment: its state rebuilt, and its backward's gradients of that
// state (about as large: 0.7 of it measured on gpt-small's blocks at micro-batch 4) or its own
// temporaries where larger (the head's logits). A layer that keeps finds that room in the state
// its backward frees as it goes.
double recompute_moment(const LayerCosts& layer);

struct MemoryModel {
  std::vector<LayerCosts> layers;       // the chain
  schedule::Schedule schedule;          // pp x chunks virtual stages
  double budget = 0;                    // bytes per rank; 0 = none
  double copy_bytes_per_s = 5e9;        // the swap tier, each way
  double p2p_s = 0;                     // a dependency between ranks: the boundary's send
  // An activation, or its gradient, between virtual stages (NOTE [Stage boundaries in the
  // replay]); 0 counts none.
  double boundary_bytes = 0;
};

struct StagePrediction {
  double activation_bytes = 0;  // the replay's peak
  double boundary_bytes = 0;    // the stage boundaries' messages: the replay's peak with them, beyond activation_bytes
  double transient_bytes = 0;   // the busiest layer's moment beyond it
  double host_bytes = 0;        // the swap tier's peak
  double total() const { return activation_bytes + boundary_bytes + transient_bytes; }
};

struct Prediction {
  double step_s = 0;  // the pipeline's makespan
  std::vector<StagePrediction> stages;  // per pipeline rank, without the layers' fixed_bytes
  // Per virtual stage: copy time each forward waits (for the last copy out, which the executor
  // lets finish first) and each backward waits (for its copy back).
  std::vector<double> swap_wait_forward_s, swap_wait_backward_s;
  schedule::Simulation simulation;  // the timed actions of the last pass
};

// Time and memory of `cuts` (pp x chunks + 1 boundaries) under `policy` (per chain layer).
Prediction predict(const MemoryModel& model, const std::vector<int64_t>& cuts,
                   const std::vector<nn::MemoryPolicy>& policy);

// (plan/policy_search.cpp) The cheapest policies under which every rank fits model.budget (all keep when it does or when
// there is no budget). `fits` reports whether they do; when not, the result is the policy that
// needs least (every layer recomputed or swapped, whichever frees more).
struct PolicyChoice {
  std::vector<nn::MemoryPolicy> policy;
  Prediction prediction;
  bool fits = true;
};
PolicyChoice choose_policies(const MemoryModel& model, const std::vector<int64_t>& cuts);

// Bytes each pipeline rank needs beyond model.budget under `prediction` (<= 0 where it fits),
// and the sum of the positive ones.
std::vector<double> bytes_over_budget(const MemoryModel& model, const std::vector<int64_t>& cuts,
                                      const Prediction& prediction);
double total_over_budget(const MemoryModel& model, const std::vector<int64_t>& cuts, const Prediction& prediction);

// (plan/cut_search.cpp) Cuts by the layers' summed times; by peak memory with every layer kept; and the fastest
// feasible one between them (falls back to the memory cut, which then may not fit). One slice
// per pipeline rank (chunks = 1) for "memory" and "auto".
std::vector<int64_t> compute_cuts(const MemoryModel& model);
std::vector<int64_t> memory_cuts(const MemoryModel& model);
std::vector<int64_t> auto_cuts(const MemoryModel& model);

}  // namespace loom::plan
