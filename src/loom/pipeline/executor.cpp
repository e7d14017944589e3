#include "loom/pipeline/executor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "loom/core/error.h"
#include "loom/pipeline/layer_pass.h"
#include "loom/pipeline/send_progress.h"

namespace loom::pipeline {

using Clock = std::chrono::steady_clock;

namespace {

// The input gradient a layer's backward_input returned, against the input its forward took: the
// same shape for a floating-point input (a layer of one's own that gets it wrong would otherwise
// fail later, in another layer or a send, far from the cause). The chain's first layer takes
// token ids and returns no gradient that is used.
void check_input_gradient(const nn::Layer& layer, const at::Tensor& dx, at::IntArrayRef input_shape, bool floating) {
  if (!floating) return;
  LOOM_CHECK(dx.defined(), "layer \"{}\": backward_input returned no gradient for its input of shape [{}]; hint: it "
             "returns dL/dx, shaped like forward's input", layer.name(), fmt::join(input_shape, ", "));
  LOOM_CHECK(dx.sizes() == input_shape,
             "layer \"{}\": backward_input returned a gradient of shape [{}] for its input of shape [{}]; hint: it "
             "returns dL/dx, shaped like forward's input", layer.name(), fmt::join(dx.sizes(), ", "),
             fmt::join(input_shape, ", "));
}

// NOTE [Memory policy]: the one place the executor reads a layer's memory policy
// (nn/memory_policy.h). It answers what stays from the layer's forward until its backward, and
// what runs just before that backward:
//   keep       the saved state stays; nothing runs before backward
//   recompute  only the layer's input stays (its saved state is dropped after forward); forward
//              runs again from that input, for every such layer of the chunk at an R
//              (NOTE [Shifted critical path]) or else for each layer just before its own backward
//   swap       the saved state moves to the swap tier after forward (a background copy) and is
//              brought back before backward: queued one compute action ahead, waited for at the
//              layer (NOTE [Swap tier])
enum class AfterForward : uint8_t { KeepSaved, KeepInput, MoveOut };
enum class BeforeBackward : uint8_t { Nothing, ForwardAgain, MoveIn };
struct LayerMemory {
  AfterForward after_forward;
  BeforeBackward before_backward;
};

LayerMemory memory_of(const StageChunk& chunk, size_t layer) {
  switch (chunk.policy[layer]) {
    case nn::MemoryPolicy::Keep: return {AfterForward::KeepSaved, BeforeBackward::Nothing};
    case nn::MemoryPolicy::Recompute: return {AfterForward::KeepInput, BeforeBackward::ForwardAgain};
    case nn::MemoryPolicy::Swap: return {AfterForward::MoveOut, BeforeBackward::MoveIn};
  }
  throw Error(fmt::format("[pp] memory policy {} of {} has no executor rule", static_cast<int>(chunk.policy[layer]),
                          chunk.layers[layer]->name()));
}

// The column of a chunk's measured costs an action counts in.
CostColumn cost_column(schedule::Op op) {
  switch (op) {
    case schedule::Op::F: return CostColumn::F;
    case schedule::Op::W: return CostColumn::W;
    case schedule::Op::R: return CostColumn::R;
    case schedule::Op::BW: return CostColumn::BW;
    default: return CostColumn::B;
  }
}

}  // namespace

struct PipelineExecutor::Flight {
  // Its receive posted ahead, for an overlapped pair's backward (NOTE [Overlapped pairs]): the
  // message in flight, or the tag of one handed over within the rank.
  dist::WorkPtr arriving;
  std::optional<int> arriving_handed;
  nn::MicroBatch mb;
  std::vector<nn::Saved> saved;
  std::vector<c10::DimVector> input_shapes;  // each layer's input, for its gradient's check (no allocation)
  std::vector<char> floating_inputs;
  std::vector<at::Tensor> inputs;  // inputs of the layers that recompute, until R
  at::Tensor input;                // received activation
  at::Tensor output;               // activation to send
  at::Tensor dy;                   // received gradient
  at::Tensor dx;                   // gradient to send
  int64_t mb_index = 0;
  bool recomputed = false;
  bool weights_done = false;       // after BW or W: gone once its gradient is sent
  // Swapping layers: the copy's ticket, and which of the state's visited slots held which tensor.
  std::vector<memory::SwapTicket> swapped;
  std::vector<std::vector<int>> slots;
};

struct PipelineExecutor::Step {
  Step(bool helper, StepClock& clock, size_t chunks, bool spans) : sends(helper), times(clock, chunks, spans) {}

  const Clock::time_point start = Clock::now();  // before the helper thread starts
  std::map<std::pair<int64_t, int64_t>, Flight> flights;  // (micro-batch, chunk)
  std::map<int, at::Tensor> handed;  // messages to this rank itself, by tag: the V's turn (NOTE [V-shaped pipelines])
  // The message handed over under `tag`; `what` names it if it was not.
  at::Tensor take_handed(int tag, const std::string& what) {
    const auto it = handed.find(tag);
    LOOM_CHECK(it != handed.end(), "[pp] {} was not handed over", what);
    at::Tensor t = std::move(it->second);
    handed.erase(it);
    return t;
  }
  SendProgress sends;                                      // NOTE [Message progress]
  std::vector<char> posted_early;                          // per action: a receive posted by post_early
  ActionTimes times;                                       // NOTE [Step clock]
  StepResult result;
};

PipelineExecutor::PipelineExecutor(const schedule::Schedule& schedule, dist::Communicator& pp, std::vector<StageChunk> chunks,
                                   std::vector<int64_t> boundary_shape, const at::TensorOptions& boundary,
                                   const std::function<std::unique_ptr<memory::SwapTier>()>& swap_tier)
    : schedule_(schedule), pp_(pp), chunks_(std::move(chunks)), boundary_shape_(std::move(boundary_shape)),
      dtype_(at::typeMetaToScalarType(boundary.dtype())), device_(boundary.device()) {
  LOOM_CHECK(schedule.stages == pp.size(), "[pp] a schedule of {} stages on {} pipeline ranks", schedule.stages,
             pp.size());
  LOOM_CHECK(static_cast<int64_t>(chunks_.size()) == schedule.chunks, "[pp] {} chunks built, the schedule has {}",
             chunks_.size(), schedule.chunks);
  for (const StageChunk& chunk : chunks_)
    LOOM_CHECK(chunk.policy.size() == chunk.layers.size(), "[pp] virtual stage {}: {} memory policies for {} layers",
               chunk.virtual_stage, chunk.policy.size(), chunk.layers.size());
  for (const StageChunk& chunk : chunks_) virtual_stages_.push_back(chunk.virtual_stage);
  list_ = read_rank_list(schedule, pp.rank(), virtual_stages_);
  for (const StageChunk& chunk : chunks_)
    for (nn::MemoryPolicy p : chunk.policy)
      if (p == nn::MemoryPolicy::Swap && !swapper_) {
        tier_ = swap_tier();
        swapper_ = std::make_unique<memory::Swapper>(*tier_);
      }
  LOOM_CHECK(schedule.virtual_stages() == 1 || schedule::message_tags(schedule) <= schedule::kMaxTags,
             "[pp] {} micro-batches x {} virtual stages exceed the message tags", schedule.microbatches,
             schedule.virtual_stages());
}

int PipelineExecutor::peer_of(int64_t virtual_stage) const {
  return static_cast<int>(schedule_.rank_of(virtual_stage));
}

// A message is named by its sender's (micro-batch, virtual stage) and direction.
int PipelineExecutor::tag_of(int64_t mb, int64_t virtual_stage, bool gradient) const {
  return static_cast<int>((mb * schedule_.virtual_stages() + virtual_stage) * 2 + (gradient ? 1 : 0));
}

// The receiver allocates exactly this; a message of another size would not be caught by MPI.
void PipelineExecutor::check_boundary(const at::Tensor& t, const char* what) const {
  LOOM_CHECK(t.sizes().vec() == boundary_shape_ && t.scalar_type() == dtype_,
             "[pp] a stage boundary {} of shape [{}] ({}), expected [{}] ({})", what, fmt::join(t.sizes(), ", "),
             c10::toString(t.scalar_type()), fmt::join(boundary_shape_, ", "), c10::toString(dtype_));
}

StepResult PipelineExecutor::run_step(const ExecutorHooks& hooks) {
  Step step(pp_.concurrent_progress(), hooks.clock ? *hooks.clock : *host_clock_, chunks_.size(),
            static_cast<bool>(hooks.trace));
  step.posted_early.assign(list_.actions.size(), 0);
  times_ = &step.times;
  struct Forget {  // a step that fails leaves no pointer to its times
    ActionTimes*& times;
    ~Forget() { times = nullptr; }
  } forget{times_};
  for (const schedule::Action& a : list_.actions) run_action(step, a, hooks);
  return finish_step(step, hooks);
}

void PipelineExecutor::traced(const std::string& layer, const char* pass, const std::function<void()>& fn) {
  if (times_) times_->pass(layer, pass, [&] { named(layer, pass, fn); });
  else named(layer, pass, fn);
}

// One action, timed: compute actions count as busy time and towards their chunk's measured costs.
void PipelineExecutor::run_action(Step& step, const schedule::Action& a, const ExecutorHooks& hooks) {
  using schedule::Op;
  Flight& f = step.flights[{a.mb, a.chunk}];
  if ((f.arriving || f.arriving_handed) && !a.is_message()) arrive(step, a, f);
  const size_t start = step.times.mark();
  const auto index = static_cast<size_t>(&a - list_.actions.data());
  post_early(step, index);
  if (swapper_) prefetch(step, index);
  switch (a.op) {
    case Op::RecvF:
    case Op::RecvB:
      if (!step.posted_early[index]) receive(step, a, f, list_.posted_ahead[index]);
      break;
    case Op::SendF:
    case Op::SendB: send(step, a, f); break;
    case Op::F: forward(step, a, f, hooks); break;
    case Op::R: recompute_ahead(a, f, hooks); break;
    case Op::B:
    case Op::BW: backward(step, a, f, hooks); break;
    case Op::W: weight_gradients(a, f, hooks); break;
  }
  if (hooks.params && !a.is_message()) hooks.params->action_done();
  if (swapper_) prefetch(step, index);  // the flight this forward made may be the next backward's
  const size_t end = step.times.mark();
  const std::string text = hooks.trace ? a.text(schedule_.chunks > 1) : std::string();
  if (a.is_message()) step.times.message(text, start, end);
  else step.times.compute(text, start, end, static_cast<size_t>(a.chunk), cost_column(a.op));
  // A (micro-batch, chunk) whose weight gradients are done and whose gradient has left holds
  // nothing any more.
  if (f.weights_done && !f.dx.defined()) step.flights.erase({a.mb, a.chunk});
}

// The receives list_.early_receives gives this compute action, each waited for at its own: but one
// whose flight still waits for another message is left to its place in the list.
void PipelineExecutor::post_early(Step& step, size_t action) {
  for (const size_t i : list_.early_receives[action]) {
    const schedule::Action& r = list_.actions[i];
    Flight& g = step.flights[{r.mb, r.chunk}];
    if (g.arriving || g.arriving_handed) continue;
    receive(step, r, g, true);
    step.posted_early[i] = true;
  }
}

// RecvF: the activation from the previous virtual stage; RecvB: the gradient from the next. From
// this rank itself (the V's turn) it is handed over, not sent: its send came earlier in the list.
// Posted `ahead`, it is waited for at its action.
void PipelineExecutor::receive(Step& step, const schedule::Action& a, Flight& f, bool ahead) {
  const bool gradient = a.op == schedule::Op::RecvB;
  const int64_t from = sender_of(a, virtual_stages_);
  at::Tensor& into = gradient ? f.dy : f.input;
  const int tag = tag_of(a.mb, from, gradient);
  if (peer_of(from) == pp_.rank()) {
    if (ahead) f.arriving_handed = tag;  // taken at the wait: its sender may come later in the list
    else into = step.take_handed(tag, a.text(true));
    return;
  }
  into = at::empty(boundary_shape_, at::TensorOptions().dtype(dtype_).device(device_));
  dist::WorkPtr work = pp_.recv_async(into, peer_of(from), tag);
  if (ahead) f.arriving = std::move(work);
  else work->wait();
}

// The wait for a receive posted ahead, timed as the message it is.
void PipelineExecutor::arrive(Step& step, const schedule::Action& a, Flight& f) {
  const size_t start = step.times.mark();
  const schedule::Action receive{a.op == schedule::Op::F ? schedule::Op::RecvF : schedule::Op::RecvB, a.mb, a.chunk};
  if (const std::optional<int> tag = std::exchange(f.arriving_handed, std::nullopt))
    (receive.op == schedule::Op::RecvF ? f.input : f.dy) = step.take_handed(*tag, receive.text(true));
  if (f.arriving) std::exchange(f.arriving, nullptr)->wait();
  step.times.message(step.times.spans() ? receive.text(schedule_.chunks > 1) : std::string(), start, step.times.mark());
}

// SendF: the activation to the next virtual stage; SendB: the gradient to the previous.
void PipelineExecutor::send(Step& step, const schedule::Action& a, Flight& f) {
  const bool gradient = a.op == schedule::Op::SendB;
  const int64_t v = chunks_[a.chunk].virtual_stage;
  at::Tensor& out = gradient ? f.dx : f.output;
  check_boundary(out, gradient ? "gradient" : "activation");
  const int to = peer_of(gradient ? v - 1 : v + 1);
  if (to == pp_.rank()) step.handed[tag_of(a.mb, v, gradient)] = std::move(out);
  else step.sends.add(pp_.send_async(out, to, tag_of(a.mb, v, gradient)));
  out.reset();  // the Work keeps it until sent
}

// F: the chunk's layers in order on the micro-batch's tokens or the received activation; the last
// virtual stage adds its loss, the others keep the activation to send.
void PipelineExecutor::forward(Step& step, const schedule::Action& a, Flight& f, const ExecutorHooks& hooks) {
  const StageChunk& chunk = chunks_[a.chunk];
  const int64_t v = chunk.virtual_stage;
  f.mb = hooks.microbatch(a.mb);
  f.mb_index = a.mb;
  const size_t n = chunk.layers.size();
  f.saved.resize(n);
  f.input_shapes.resize(n);
  f.floating_inputs.resize(n);
  f.inputs.resize(n);
  f.swapped.resize(n);
  f.slots.resize(n);
  at::Tensor x = v == 0 ? f.mb.tokens : std::move(f.input);
  // At most one micro-batch's swapped state is on its way out at once: what the cost model
  // counts (a copy slower than the compute waits here rather than piling up in memory).
  if (last_out_) swapper_->wait_out(std::exchange(last_out_, nullptr));
  for (size_t l = 0; l < n; ++l) {
    const bool input_only = memory_of(chunk, l).after_forward == AfterForward::KeepInput;
    if (input_only) f.inputs[l] = x;
    f.input_shapes[l] = c10::DimVector(x.sizes());
    f.floating_inputs[l] = x.is_floating_point();
    if (hooks.params) hooks.params->need(chunk.model_index[l], next_layer(chunk, l, +1));
    traced(chunk.layers[l]->name(), "forward", [&] { x = chunk.layers[l]->forward(x, f.mb, f.saved[l]); });
    step.sends.drive();
    if (input_only) f.saved[l].clear();  // only the input stays until it is recomputed
    if (memory_of(chunk, l).after_forward == AfterForward::MoveOut) swap_out(f, l);
  }
  if (v == schedule_.virtual_stages() - 1) step.result.loss += x.item<double>();
  else f.output = x.contiguous();
}

// R: ahead of B, every recomputing layer of the chunk at once (NOTE [Shifted critical path]).
void PipelineExecutor::recompute_ahead(const schedule::Action& a, Flight& f, const ExecutorHooks& hooks) {
  const StageChunk& chunk = chunks_[a.chunk];
  for (size_t l = 0; l < chunk.layers.size(); ++l)
    if (memory_of(chunk, l).before_backward == BeforeBackward::ForwardAgain) forward_again(chunk, f, l, hooks);
  f.recomputed = true;
}

// B and BW: the chunk's layers in reverse; BW also takes each layer's weight gradient right after
// its input gradient.
void PipelineExecutor::backward(Step& step, const schedule::Action& a, Flight& f, const ExecutorHooks& hooks) {
  const StageChunk& chunk = chunks_[a.chunk];
  const int64_t v = chunk.virtual_stage;
  at::Tensor dy = v == schedule_.virtual_stages() - 1 ? at::Tensor() : std::move(f.dy);
  const bool weights = a.op == schedule::Op::BW, final_pass = weights && list_.last_backward[a.chunk] == a.mb;
  for (size_t l = chunk.layers.size(); l-- > 0;) {
    nn::Layer& layer = *chunk.layers[l];
    // Not recomputed ahead: each layer just before its backward, so one layer's activations
    // are rebuilt at a time.
    if (memory_of(chunk, l).before_backward == BeforeBackward::ForwardAgain && !f.recomputed)
      forward_again(chunk, f, l, hooks);
    if (memory_of(chunk, l).before_backward == BeforeBackward::MoveIn) bring_back(chunk, f, l, hooks);
    // With a weight gradient to follow, the next layer's gather waits for it (NOTE [Sharded parameters]).
    const std::optional<size_t> next = next_layer(chunk, l, -1);
    if (hooks.params) hooks.params->need(chunk.model_index[l], weights ? std::nullopt : next);
    traced(layer.name(), "backward_input", [&] { dy = layer.backward_input(dy, f.saved[l]); });
    check_input_gradient(layer, dy, f.input_shapes[l], f.floating_inputs[l]);
    step.sends.drive();
    if (weights) weight_gradient(chunk, l, final_pass, f, hooks, next);
  }
  if (v > 0) f.dx = dy.contiguous();
  f.weights_done = weights;
}

// W: the chunk's weight gradients, layers in reverse.
void PipelineExecutor::weight_gradients(const schedule::Action& a, Flight& f, const ExecutorHooks& hooks) {
  const StageChunk& chunk = chunks_[a.chunk];
  const bool final_pass = list_.last_backward[a.chunk] == a.mb;
  for (size_t l = chunk.layers.size(); l-- > 0;) weight_gradient(chunk, l, final_pass, f, hooks);
  f.weights_done = true;
}

// One layer's weight gradient; on the schedule's last one for the chunk, its gradients are final.
void PipelineExecutor::weight_gradient(const StageChunk& chunk, size_t layer, bool final_pass, Flight& f,
                                       const ExecutorHooks& hooks, std::optional<size_t> prefetch) {
  nn::Layer& l = *chunk.layers[layer];
  if (hooks.params) hooks.params->before_weight_gradient(chunk.model_index[layer]);
  if (hooks.params && prefetch) hooks.params->prefetch(*prefetch);
  traced(l.name(), "backward_weight", [&] { l.backward_weight(f.saved[layer]); });
  if (hooks.params) hooks.params->after_weight_gradient(chunk.model_index[layer]);
  if (final_pass && hooks.layer_done) hooks.layer_done(chunk.model_index[layer]);
}

void PipelineExecutor::forward_again(const StageChunk& chunk, Flight& f, size_t layer, const ExecutorHooks& hooks) {
  nn::Layer& l = *chunk.layers[layer];
  if (hooks.params) hooks.params->need(chunk.model_index[layer], std::nullopt);
  traced(l.name(), "recompute", [&] { l.forward(f.inputs[layer], f.mb, f.saved[layer]); });
  f.inputs[layer].reset();
}

// The layer's saved tensors leave for the swap tier; the visited slots are emptied (the copy job
// holds the tensors until copied) and remembered, so the same tensors return to the same slots.
// A tensor visited twice (one object in two slots) travels once.
void PipelineExecutor::swap_out(Flight& f, size_t layer) {
  std::vector<at::Tensor> tensors;
  std::vector<int>& slots = f.slots[layer];
  slots.clear();
  f.saved[layer].for_each_tensor([&](std::string_view, at::Tensor& t) {
    int item = -1;
    for (size_t k = 0; k < tensors.size() && t.defined(); ++k)
      if (tensors[k].unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) item = static_cast<int>(k);
    if (t.defined() && item < 0) {
      item = static_cast<int>(tensors.size());
      tensors.push_back(t);
    }
    slots.push_back(item);
    t.reset();
  });
  f.swapped[layer] = last_out_ = swapper_->swap_out(std::move(tensors));
}

// Before compute action `action` and after it: the copy back of every swapped layer of the
// micro-batch whose backward is the next compute action, last layer first (backward's order).
void PipelineExecutor::prefetch(Step& step, size_t action) {
  const int64_t next = list_.next_backward[action];
  if (next < 0) return;
  const auto it = step.flights.find({list_.actions[next].mb, list_.actions[next].chunk});
  if (it == step.flights.end()) return;
  for (size_t l = it->second.swapped.size(); l-- > 0;)
    if (it->second.swapped[l]) swapper_->swap_in(it->second.swapped[l]);
}

// Waits for the layer's tensors and puts them back where they were; the copies go to the trace.
void PipelineExecutor::bring_back(const StageChunk& chunk, Flight& f, size_t layer, const ExecutorHooks& hooks) {
  memory::SwapTicket ticket = std::move(f.swapped[layer]);
  std::vector<at::Tensor> tensors = swapper_->take(ticket);
  size_t slot = 0;
  f.saved[layer].for_each_tensor([&](std::string_view, at::Tensor& t) {
    const int item = f.slots[layer][slot++];
    if (item >= 0) t = tensors[static_cast<size_t>(item)];
  });
  if (hooks.trace) {
    const std::string what = fmt::format("{} mb{}", chunk.layers[layer]->name(), f.mb_index);
    hooks.trace("out " + what, kSwapCategory, ticket->out_start, ticket->out_end);
    hooks.trace("in " + what, kSwapCategory, ticket->in_start, ticket->in_end);
  }
}

// Waits for the sends, then the step's wall time and each chunk's mean action times.
StepResult PipelineExecutor::finish_step(Step& step, const ExecutorHooks& hooks) {
  step.sends.finish();
  if (swapper_) swapper_->drain();
  SettledTimes times = step.times.settle(hooks.trace);
  step.result.wall_s = std::chrono::duration<double>(Clock::now() - step.start).count();
  step.result.busy_s = times.busy_s;
  step.result.measured = std::move(times.measured);
  return std::move(step.result);
}

}  // namespace loom::pipeline
