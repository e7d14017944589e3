#pragma once
// Runs one rank's schedule with real layers (NOTE [Pipeline schedules are data]): the lowered
// list of this rank, F/R/B/W/BW on its chunks of the chain and point-to-point messages between
// neighbouring stages over the pp communicator. Sends are non-blocking, driven by a helper thread
// while the stage computes (NOTE [Message progress]) and waited for when the step ends; a receive,
// posted as the compute action before it starts, is waited for at its action (an overlapped
// pair's backward's at that backward: NOTE [Overlapped pairs]),
// which is what the simulator's dependencies model, so a
// schedule the simulator accepts cannot deadlock here (sends keep moving while a stage
// computes). One rank alone (pp = 1) runs the same code without messages.
#include <chrono>
#include <functional>
#include <map>

#include "loom/core/step_clock.h"
#include "loom/dist/communicator.h"
#include "loom/memory/swap.h"
#include "loom/pipeline/action_times.h"
#include "loom/pipeline/rank_list.h"
#include "loom/nn/layer.h"
#include "loom/nn/memory_policy.h"
#include "loom/nn/param_residency.h"
#include "loom/schedule/schedule.h"
#include "loom/schedule/simulator.h"

namespace loom::pipeline {

// One virtual stage this rank runs: a contiguous slice of the chain.
struct StageChunk {
  int64_t virtual_stage = 0;
  std::vector<nn::Layer*> layers;
  std::vector<size_t> model_index;        // each layer's index in the rank's model (for layer_done)
  std::vector<nn::MemoryPolicy> policy;   // per layer: what it keeps for backward (NOTE [Memory policy])
};

// The trace category of the swap tier's copies (their own track).
inline constexpr const char* kSwapCategory = "swap";

struct ExecutorHooks {
  std::function<nn::MicroBatch(int64_t)> microbatch;  // this step's local micro-batch i
  std::function<void(size_t)> layer_done;             // a layer's gradients are final this step
  // Optional: called with each action's and layer pass's text, category and interval (Chrome
  // trace), once the step's work is queued.
  TraceHook trace;
  // What times the step's work (NOTE [Step clock]): null for the host clock, a CPU rank's.
  StepClock* clock = nullptr;
  // Told before and after each layer's passes (NOTE [Sharded parameters]); null: the parameters
  // are always whole.
  nn::ParamResidency* params = nullptr;
};

struct StepResult {
  double loss = 0;       // the sum of the losses this rank computed (last stage only)
  double busy_s = 0;     // time in compute actions (F, R, B, W, BW)
  double wall_s = 0;     // the whole step's actions, from the first start to the last send's end
  // Per chunk, the mean measured seconds of its actions, as simulator costs: f, b (a BW's whole
  // time when the backward is not split, w = 0 then), w, r (an explicit R; recomputation inside
  // B is part of b).
  std::vector<schedule::StageCosts> measured;
};

class PipelineExecutor {
 public:
  // `boundary_shape`: the activation passed between stages ([micro_batch, tokens per rank,
  // d_model]) in `boundary`'s type, on its device; `pp`: the pipeline communicator, rank i runs
  // schedule.ranks[i].
  // `swap_tier` makes the swap tier when a layer swaps (NOTE [Swap tier]): the host's by default,
  // a GPU rank's pinned one.
  PipelineExecutor(const schedule::Schedule& schedule, dist::Communicator& pp, std::vector<StageChunk> chunks,
                   std::vector<int64_t> boundary_shape, const at::TensorOptions& boundary,
                   const std::function<std::unique_ptr<memory::SwapTier>()>& swap_tier = memory::make_host_tier);

  StepResult run_step(const ExecutorHooks& hooks);
  // NOTE [Forward-only pass]: `microbatches` micro-batches through this rank's chunks, forward
  // only (validation): nothing is kept for a backward, whatever the memory policy. Returns the sum
  // of the losses this rank computed (last virtual stage only). Every pp rank calls it alike.
  double run_forward(int64_t microbatches, const std::function<nn::MicroBatch(int64_t)>& microbatch,
                     nn::ParamResidency* params = nullptr);
  // The swap tier's peak since the last reset (0 when no layer swaps).
  int64_t host_peak_bytes() const { return tier_ ? tier_->host_peak_bytes() : 0; }
  void reset_host_peak() {
    if (tier_) tier_->reset_host_peak();
  }

 private:
  struct Flight;  // one (micro-batch, chunk) between its F and its last backward action
  struct Step;    // one run_step's flights, sends in progress and measured times
  int peer_of(int64_t virtual_stage) const;
  int tag_of(int64_t mb, int64_t virtual_stage, bool gradient) const;
  void check_boundary(const at::Tensor& t, const char* what) const;
  // A layer's pass, named in its errors, timed for the trace (NOTE [Step clock]).
  void traced(const std::string& layer, const char* pass, const std::function<void()>& fn);

  // The phases of run_step: each action by kind, then the step's end and its measures.
  void run_action(Step& step, const schedule::Action& a, const ExecutorHooks& hooks);
  void receive(Step& step, const schedule::Action& a, Flight& f, bool ahead);
  void arrive(Step& step, const schedule::Action& a, Flight& f);
  void send(Step& step, const schedule::Action& a, Flight& f);
  void forward(Step& step, const schedule::Action& a, Flight& f, const ExecutorHooks& hooks);
  void recompute_ahead(const schedule::Action& a, Flight& f, const ExecutorHooks& hooks);
  void backward(Step& step, const schedule::Action& a, Flight& f, const ExecutorHooks& hooks);
  void weight_gradients(const schedule::Action& a, Flight& f, const ExecutorHooks& hooks);
  // `prefetch`: the layer (model index) whose gather may start once this one's values are freed.
  void weight_gradient(const StageChunk& chunk, size_t layer, bool final_pass, Flight& f,
                       const ExecutorHooks& hooks, std::optional<size_t> prefetch = std::nullopt);
  void forward_again(const StageChunk& chunk, Flight& f, size_t layer, const ExecutorHooks& hooks);
  // NOTE [Swap tier]: a swapping layer's saved tensors out after its forward, back before its backward.
  void swap_out(Flight& f, size_t layer);
  void prefetch(Step& step, size_t action);
  void bring_back(const StageChunk& chunk, Flight& f, size_t layer, const ExecutorHooks& hooks);
  StepResult finish_step(Step& step, const ExecutorHooks& hooks);
  void post_early(Step& step, size_t action);

  schedule::Schedule schedule_;
  dist::Communicator& pp_;
  std::vector<StageChunk> chunks_;
  std::vector<int64_t> virtual_stages_;  // per chunk
  RankList list_;                        // this rank's lowered list, read once
  std::vector<int64_t> boundary_shape_;
  at::ScalarType dtype_;
  at::Device device_;  // where the boundary tensors live: the stage's device
  std::unique_ptr<memory::SwapTier> tier_;     // when a layer swaps
  std::unique_ptr<memory::Swapper> swapper_;
  memory::SwapTicket last_out_;  // the latest copy out queued: a forward starts once it has ended
  std::unique_ptr<StepClock> host_clock_ = make_host_clock();  // when the hooks give no clock
  ActionTimes* times_ = nullptr;                              // the running step's
};

}  // namespace loom::pipeline
