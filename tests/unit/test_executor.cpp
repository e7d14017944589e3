// The pipeline executor on one rank (pp = 1, a null communicator: no messages) with a fake chain
// whose gradients are known by hand: its layer calls against the schedule's action list, the
// gradients and loss summed over micro-batches, the layer_done hook, recomputation and the
// Saved states held between actions. Two or more stages need point-to-point messages between ranks:
// tests/dist/test_pipeline_parallel.cpp runs those end to end against the serial model.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "loom/core/error.h"
#include "loom/dist/null_communicator.h"
#include "loom/pipeline/executor.h"
#include "loom/pipeline/partition.h"

namespace loom::pipeline {
namespace {

using Log = std::vector<std::string>;

// y = w x with a scalar weight w; the last layer returns loss_scale x sum(w x). Every call is
// logged as "F3@1" (forward of micro-batch 3 on layer 1), "B3@1" or "W3@1"; the micro-batch
// index travels in MicroBatch::targets. `live` counts the Saved states not yet released.
class ScaleLayer final : public nn::Layer {
 public:
  ScaleLayer(int index, double w, bool last, Log& log, int& live) : index_(index), last_(last), log_(log), live_(live) {
    weight_.name = fmt::format("layer{}.w", index);
    weight_.value = at::full({}, w, at::kDouble);
    weight_.grad = at::zeros({}, at::kDouble);
  }
  std::string name() const override { return weight_.name; }

  at::Tensor forward(const at::Tensor& x, const nn::MicroBatch& mb, nn::Saved& saved) override {
    State& s = saved.emplace<State>();
    s.live = &++live_;
    s.mb = mb.targets.item<int64_t>();
    s.x = x.to(at::kDouble);  // the first layer gets the token ids
    s.scale = mb.loss_scale;
    log('F', s.mb);
    const at::Tensor y = s.x * weight_.value;
    return last_ ? y.sum() * s.scale : y;
  }
  at::Tensor backward_input(const at::Tensor& dy, nn::Saved& saved) override {
    if (saved.empty()) {  // the executor called B without a (re)computed forward
      ADD_FAILURE() << name() << ": backward_input with nothing saved";
      return dy;
    }
    State& s = saved.get<State>();
    log('B', s.mb);
    EXPECT_EQ(dy.defined(), !last_) << name() << ": the last layer takes no dy, the others do";
    s.dy = last_ ? at::full_like(s.x, s.scale) : dy;  // d(scale x sum y)/dy = scale
    return s.dy * weight_.value;
  }
  void backward_weight(nn::Saved& saved) override {
    if (saved.empty()) {
      ADD_FAILURE() << name() << ": backward_weight with nothing saved";
      return;
    }
    State& s = saved.get<State>();
    log('W', s.mb);
    weight_.grad += (s.dy * s.x).sum();
    saved.clear();
  }
  std::vector<nn::Param*> params() override { return {&weight_}; }
  nn::Cost cost(int64_t, int64_t, int64_t) const override { return {}; }

 private:
  struct State : nn::SavedState {
    at::Tensor x, dy;
    int64_t mb = -1;
    double scale = 0;
    int* live = nullptr;
    ~State() override { --*live; }
    void for_each_tensor(const nn::TensorVisitor& visit) override { visit("x", x), visit("dy", dy); }
  };
  void log(char op, int64_t mb) { log_.push_back(fmt::format("{}{}@{}", op, mb, index_)); }

  int index_;
  bool last_;
  Log& log_;
  int& live_;
  nn::Param weight_;
};

constexpr double kWeights[] = {2, 3, 5};
constexpr double kLossScale = 0.5;
constexpr size_t kModelIndex = 10;  // layer l is model layer 10 + l: layer_done reports these

// Per-layer memory policies of the three layers.
using Policies = std::vector<nn::MemoryPolicy>;
constexpr nn::MemoryPolicy kKeep = nn::MemoryPolicy::Keep, kRecompute = nn::MemoryPolicy::Recompute;
const Policies kKeepAll = {kKeep, kKeep, kKeep};
const Policies kRecomputeOuter = {kRecompute, kKeep, kRecompute};  // layers 0 and 2

// Micro-batch i: tokens [[i + 1, 2i + 3]], whose sum is S_i = 3i + 4.
nn::MicroBatch microbatch(int64_t i) {
  return {.tokens = at::tensor({i + 1, 2 * i + 3}, at::kLong).reshape({1, 2}),
          .targets = at::full({1}, i, at::kLong),
          .loss_scale = kLossScale};
}

// What one step of the executor did.
struct StepLog {
  Log log;                           // layer calls and "done@<model index>", in order
  std::vector<std::string> actions;  // the executor's compute actions, from the trace hook
  std::vector<int> held;             // Saved states held after each of them
  std::vector<double> grads;         // per layer
  double loss = 0;
  int microbatch_calls = 0;
  int live = 0;                      // Saved states not yet released
  double busy_s = 0;                 // by the clock's marks
};

// NOTE [Step clock]: the trace hears of a step's actions once the step is done; this clock tells
// the Saved states held at each mark (mark i is i microseconds after the clock's origin).
class HeldClock final : public StepClock {
 public:
  explicit HeldClock(const int& live) : live_(live) {}
  size_t mark() override {
    held_.push_back(live_);
    return held_.size() - 1;
  }
  std::vector<Clock::time_point> settle() override {
    std::vector<Clock::time_point> at;
    for (size_t i = 0; i < held_.size(); ++i) at.emplace_back(std::chrono::microseconds(i));
    settled_ = std::exchange(held_, {});
    return at;
  }
  void discard() override { held_.clear(); }
  int held_at(Clock::time_point t) const { return settled_.at(static_cast<size_t>(t.time_since_epoch() / std::chrono::microseconds(1))); }

 private:
  const int& live_;
  std::vector<int> held_, settled_;
};

StepLog run(const schedule::Schedule& schedule, const Policies& policy = kKeepAll) {
  StepLog out;
  std::vector<std::unique_ptr<ScaleLayer>> layers;
  StageChunk chunk{.virtual_stage = 0, .policy = policy};
  for (int l = 0; l < 3; ++l) {
    layers.push_back(std::make_unique<ScaleLayer>(l, kWeights[l], l == 2, out.log, out.live));
    chunk.layers.push_back(layers.back().get());
    chunk.model_index.push_back(kModelIndex + l);
  }
  dist::NullCommunicator pp("pp");
  std::vector<StageChunk> chunks;
  chunks.push_back(std::move(chunk));
  PipelineExecutor executor(schedule, pp, std::move(chunks), {1, 2}, at::kDouble);
  ExecutorHooks hooks;
  hooks.microbatch = [&](int64_t i) { return ++out.microbatch_calls, microbatch(i); };
  hooks.layer_done = [&](size_t index) { out.log.push_back(fmt::format("done@{}", index)); };
  HeldClock clock(out.live);
  hooks.clock = &clock;
  hooks.trace = [&](const std::string& name, const char* category, auto, auto end) {
    if (std::string_view(category) != "pipeline") return;
    out.actions.push_back(name);
    out.held.push_back(clock.held_at(end));
  };
  const StepResult result = executor.run_step(hooks);
  out.loss = result.loss;
  out.busy_s = result.busy_s;
  for (auto& layer : layers) out.grads.push_back(layer->params()[0]->grad.item<double>());
  return out;
}

// A one-rank schedule from its actions, through the CSV reader.
schedule::Schedule one_rank(const std::vector<std::string>& actions) {
  std::string csv = "step,rank0\n";
  for (size_t i = 0; i < actions.size(); ++i) csv += fmt::format("{},{}\n", i, actions[i]);
  return schedule::from_csv(csv, "test.csv");
}

// Every generator that runs at one stage, at several micro-batch counts, and hand-written lists:
// B and W apart and out of order (the last W is micro-batch 0's), and R ahead of B mixed with BW.
std::vector<schedule::Schedule> schedules() {
  std::vector<schedule::Schedule> out;
  for (const char* kind : {"gpipe", "1f1b", "zb-h1", "scp"})
    for (int64_t m : {1, 3, 4}) out.push_back(schedule::make_schedule(kind, 1, m));
  out.push_back(one_rank({"F0", "F1", "B1", "F2", "W1", "B0", "B2", "W2", "W0"}));
  out.push_back(one_rank({"F0", "F1", "R1", "B1", "W1", "R0", "BW0", "F2", "BW2"}));
  return out;
}

std::string describe(const schedule::Schedule& s) {
  std::vector<std::string> texts;
  for (const schedule::Action& a : s.ranks[0]) texts.push_back(a.text(false));
  return fmt::format("{} m={}: {}", s.kind, s.microbatches, fmt::join(texts, " "));
}

// The layer calls each action stands for, written from the executor's contract: F runs the
// layers in order; B and BW run them in reverse, a recomputing layer running its forward again
// just before its B unless an R already re-ran every recomputing forward of that micro-batch;
// BW is B then W layer by layer; W runs the layers in reverse.
Log expected_calls(const schedule::Schedule& s, const Policies& policy) {
  const int n = static_cast<int>(policy.size());
  Log out;
  std::set<int64_t> ahead;  // micro-batches recomputed by an R
  auto call = [&](char op, int64_t mb, int l) { out.push_back(fmt::format("{}{}@{}", op, mb, l)); };
  for (const schedule::Action& a : s.ranks[0]) {
    switch (a.op) {
      case schedule::Op::F:
        for (int l = 0; l < n; ++l) call('F', a.mb, l);
        break;
      case schedule::Op::R:
        for (int l = 0; l < n; ++l)
          if (policy[l] == kRecompute) call('F', a.mb, l);
        ahead.insert(a.mb);
        break;
      case schedule::Op::B:
      case schedule::Op::BW:
        for (int l = n - 1; l >= 0; --l) {
          if (policy[l] == kRecompute && !ahead.contains(a.mb)) call('F', a.mb, l);
          call('B', a.mb, l);
          if (a.op == schedule::Op::BW) call('W', a.mb, l);
        }
        break;
      case schedule::Op::W:
        for (int l = n - 1; l >= 0; --l) call('W', a.mb, l);
        break;
      default:
        ADD_FAILURE() << "a message in a one-rank schedule";
    }
  }
  return out;
}

// Saved states held after each action: a micro-batch holds its non-recomputing layers' from its
// F, every layer's from its R or B (recomputed), and none after its W or BW.
std::vector<int> expected_held(const schedule::Schedule& s, const Policies& policy) {
  const int layers = static_cast<int>(policy.size());
  const int kept = static_cast<int>(std::count(policy.begin(), policy.end(), kKeep));
  std::map<int64_t, int> held;  // per micro-batch
  std::vector<int> out;
  for (const schedule::Action& a : s.ranks[0]) {
    held[a.mb] = a.op == schedule::Op::F ? kept : (a.op == schedule::Op::W || a.op == schedule::Op::BW) ? 0 : layers;
    int total = 0;
    for (auto [mb, n] : held) total += n;
    out.push_back(total);
  }
  return out;
}

Log without_done(const Log& log) {
  Log out;
  for (const auto& entry : log)
    if (!entry.starts_with("done@")) out.push_back(entry);
  return out;
}

// A log as one line, so that a failure prints the two logs one above the other.
std::string lines(const Log& log) { return fmt::format("{}", fmt::join(log, " ")); }

// NOTE [Step clock]: marks become times only when settled; a compute action counts in its chunk's
// column, a message and a layer's pass only in the trace, in the order they were recorded.
TEST(ActionTimes, SettlesMarksIntoBusyTimeChunkMeansAndSpans) {
  const int live = 0;
  HeldClock clock(live);  // mark i at i microseconds
  std::vector<std::string> spans;
  const TraceHook trace = [&](const std::string& name, const char* category, auto begin, auto end) {
    spans.push_back(fmt::format("{} {} {}", name, category, (end - begin) / std::chrono::microseconds(1)));
  };
  for (const bool traced : {true, false}) {
    SCOPED_TRACE(traced);
    spans.clear();
    ActionTimes times(clock, 2, traced);
    const size_t f0 = times.mark();
    times.pass("layer", "forward", [] {});  // two marks, when traced
    times.compute("F0", f0, times.mark(), 0, CostColumn::F);  // 3 us traced, else 1 us
    const size_t send = times.mark();
    times.message("SendF0", send, times.mark());
    const size_t f1 = times.mark();
    times.compute("F1", f1, times.mark(), 0, CostColumn::F);  // 1 us
    const size_t b0 = times.mark();
    times.mark();
    times.compute("B0", b0, times.mark(), 1, CostColumn::B);  // 2 us
    const SettledTimes settled = times.settle(trace);
    const double f0_us = traced ? 3 : 1;
    EXPECT_DOUBLE_EQ(settled.busy_s, (f0_us + 1 + 2) * 1e-6);
    ASSERT_EQ(settled.measured.size(), 2u);
    EXPECT_DOUBLE_EQ(settled.measured[0].f, (f0_us + 1) / 2 * 1e-6);
    EXPECT_DOUBLE_EQ(settled.measured[0].b, 0);
    EXPECT_DOUBLE_EQ(settled.measured[1].b, 2e-6);
    EXPECT_DOUBLE_EQ(settled.measured[1].f, 0);
    if (traced)
      EXPECT_EQ(lines(spans), lines({"layer forward 1", "F0 pipeline 3", "SendF0 pipeline message 1",
                                     "F1 pipeline 1", "B0 pipeline 2"}));
    else
      EXPECT_TRUE(spans.empty());
  }
  // A step that failed left marks behind: the next step's times start from mark 0 again.
  clock.mark();
  clock.mark();
  ActionTimes next(clock, 1, false);
  EXPECT_EQ(next.mark(), 0u);
}

TEST(Executor, RunsTheScheduleActionByAction) {
  for (const schedule::Schedule& s : schedules()) {
    SCOPED_TRACE(describe(s));
    const StepLog r = run(s);
    std::vector<std::string> texts;
    for (const schedule::Action& a : s.ranks[0]) texts.push_back(a.text(false));
    EXPECT_EQ(lines(r.actions), lines(texts)) << "the actions run (first) are not the schedule's (second)";
    EXPECT_EQ(lines(without_done(r.log)), lines(expected_calls(s, kKeepAll)))
        << "layer calls (first) against the schedule's actions expanded (second)";
  }
}

// Per (micro-batch, layer): one forward, then one backward_input, then one backward_weight.
TEST(Executor, EachMicroBatchRunsForwardThenInputThenWeightGradient) {
  for (const schedule::Schedule& s : schedules()) {
    SCOPED_TRACE(describe(s));
    const Log log = run(s).log;
    for (int64_t mb = 0; mb < s.microbatches; ++mb)
      for (int l = 0; l < 3; ++l) {
        auto where = [&](char op) {
          std::vector<size_t> at;
          for (size_t i = 0; i < log.size(); ++i)
            if (log[i] == fmt::format("{}{}@{}", op, mb, l)) at.push_back(i);
          return at;
        };
        const auto f = where('F'), b = where('B'), w = where('W');
        ASSERT_TRUE(f.size() == 1 && b.size() == 1 && w.size() == 1)
            << fmt::format("micro-batch {} layer {}: {} F, {} B, {} W in {}", mb, l, f.size(), b.size(), w.size(),
                           lines(log));
        EXPECT_TRUE(f[0] < b[0] && b[0] < w[0])
            << fmt::format("micro-batch {} layer {}: F at {}, B at {}, W at {} in {}", mb, l, f[0], b[0], w[0],
                           lines(log));
      }
  }
}

// With m micro-batches, S_i = 3i + 4 and weights (2, 3, 5), micro-batch i's loss is
// 0.5 x 2 x 3 x 5 x S_i; the gradient of w_l is 0.5 x S_i x the product of the other two weights.
// Every value is a small multiple of 0.5, so the sums are exact whatever their order.
TEST(Executor, GradientsAndLossAreTheHandComputedSumsOverMicroBatches) {
  for (const schedule::Schedule& s : schedules()) {
    SCOPED_TRACE(describe(s));
    double sum_s = 0;
    for (int64_t i = 0; i < s.microbatches; ++i) sum_s += static_cast<double>(3 * i + 4);
    const StepLog r = run(s);
    EXPECT_EQ(r.loss, kLossScale * 30 * sum_s);
    const std::vector<double> want = {kLossScale * 15 * sum_s, kLossScale * 10 * sum_s, kLossScale * 6 * sum_s};
    EXPECT_EQ(r.grads, want) << "per-layer weight gradients";
    EXPECT_EQ(r.microbatch_calls, s.microbatches) << "the micro-batch hook: once per forward";
  }
}

// A layer's gradients are final after its backward for the schedule's last W or BW (micro-batch
// 0 in the out-of-order list): layer_done names its model index once, right after that call, so
// the reducers can start on it while earlier layers still compute.
TEST(Executor, LayerDoneFiresOnceRightAfterEachLayersLastBackward) {
  for (const schedule::Schedule& s : schedules()) {
    SCOPED_TRACE(describe(s));
    const Log log = run(s).log;
    for (int l = 0; l < 3; ++l) {
      const std::string done = fmt::format("done@{}", kModelIndex + l), mine = fmt::format("@{}", l);
      const auto count = std::count(log.begin(), log.end(), done);
      ASSERT_EQ(count, 1) << done << " in " << lines(log);
      const size_t at = std::find(log.begin(), log.end(), done) - log.begin();
      size_t last_call = 0;  // the layer's last call
      for (size_t i = 0; i < log.size(); ++i)
        if (log[i].ends_with(mine) && !log[i].starts_with("done")) last_call = i;
      EXPECT_EQ(at, last_call + 1) << done << " in " << lines(log);
      EXPECT_EQ(log[last_call][0], 'W') << "the layer's last call is not a weight gradient: " << lines(log);
    }
  }
}

// Recomputing layers 0 and 2 run forward again before B (inline, or all at once at an R): the
// same gradients and loss, bit for bit. (What they keep in between: the next test.)
TEST(Executor, RecomputeRunsForwardAgainBeforeBackwardWithIdenticalGradients) {
  for (const schedule::Schedule& s : schedules()) {
    SCOPED_TRACE(describe(s));
    const StepLog plain = run(s), again = run(s, kRecomputeOuter);
    EXPECT_EQ(lines(without_done(again.log)), lines(expected_calls(s, kRecomputeOuter)))
        << "layer calls (first) against the schedule's actions expanded with recomputation (second)";
    EXPECT_EQ(again.grads, plain.grads);
    EXPECT_EQ(again.loss, plain.loss);
  }
}

// What memory planning counts on: activations live from F to the weight gradient, and a
// recomputing layer keeps only its input in between.
TEST(Executor, HoldsSavedStatesOnlyFromForwardToWeightGradient) {
  for (const Policies& policy : {kKeepAll, kRecomputeOuter})
    for (const schedule::Schedule& s : schedules()) {
      SCOPED_TRACE(describe(s) + (policy == kRecomputeOuter ? ", recomputing layers 0 and 2" : ""));
      EXPECT_EQ(run(s, policy).held, expected_held(s, policy)) << "states held after each action";
    }
}

// One chunk, as a one-stage schedule needs: only the stage count is wrong.
TEST(Executor, RefusesAScheduleForAnotherNumberOfStages) {
  dist::NullCommunicator pp("pp");
  const schedule::Schedule two_stages = schedule::make_schedule("1f1b", 2, 2);
  auto build = [&] { PipelineExecutor(two_stages, pp, std::vector<StageChunk>(1), {1, 2}, at::kDouble); };
  using ::testing::HasSubstr, ::testing::ThrowsMessage;
  EXPECT_THAT(build, ThrowsMessage<Error>(HasSubstr("a schedule of 2 stages on 1 pipeline ranks")));
}

// Every layer needs a memory policy: the executor reads it for each layer's forward and backward.
TEST(Executor, RefusesAChunkWithoutAMemoryPolicyPerLayer) {
  Log log;
  int live = 0;
  ScaleLayer layer(0, 1, true, log, live);
  dist::NullCommunicator pp("pp");
  std::vector<StageChunk> chunks(1);
  chunks[0].layers = {&layer, &layer};
  chunks[0].model_index = {0, 1};
  chunks[0].policy = {kKeep};
  auto build = [&] { PipelineExecutor(schedule::make_schedule("1f1b", 1, 1), pp, chunks, {1, 2}, at::kDouble); };
  using ::testing::HasSubstr, ::testing::ThrowsMessage;
  EXPECT_THAT(build, ThrowsMessage<Error>(HasSubstr("virtual stage 0: 1 memory policies for 2 layers")));
}

// take_stages hands each chunk its own layers' policies, in chain order, from the whole chain's:
// chunk c of rank r is virtual stage c x pp + r (or, in a V, 2 pp - 1 - r for chunk 1).
TEST(Executor, TakeStagesGivesEachChunkItsLayersPolicies) {
  Log log;
  int live = 0;
  nn::Chain model;
  for (int l = 0; l < 6; ++l) model.chain.push_back(std::make_unique<ScaleLayer>(l, 1, l == 5, log, live));
  const Policies policy = {kRecompute, kKeep, kKeep, kRecompute, kRecompute, kKeep};
  // pp = 2, chunks = 2: virtual stages [0, 1) [1, 3) [3, 4) [4, 6); rank 1 runs stages 1 and 3.
  const std::vector<StageChunk> chunks =
      take_stages(model, {0, 1, 3, 4, 6}, schedule::Schedule{.stages = 2, .chunks = 2}, 1, policy);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].virtual_stage, 1);
  EXPECT_EQ(chunks[0].policy, (Policies{kKeep, kKeep}));
  EXPECT_EQ(chunks[1].virtual_stage, 3);
  EXPECT_EQ(chunks[1].policy, (Policies{kRecompute, kKeep}));
  std::vector<std::string> names;
  for (const StageChunk& chunk : chunks)
    for (const nn::Layer* layer : chunk.layers) names.push_back(layer->name());
  EXPECT_EQ(names, (std::vector<std::string>{"layer1.w", "layer2.w", "layer4.w", "layer5.w"}));
  EXPECT_EQ(model.chain.size(), 4u) << "the model keeps only this rank's layers";
  nn::Chain v_model;
  for (int l = 0; l < 6; ++l) v_model.chain.push_back(std::make_unique<ScaleLayer>(l, 1, l == 5, log, live));
  const schedule::Schedule v{.stages = 2, .chunks = 2, .placement = schedule::Placement::V};
  const std::vector<StageChunk> v_chunks = take_stages(v_model, {0, 1, 3, 4, 6}, v, 1, policy);
  ASSERT_EQ(v_chunks.size(), 2u);
  EXPECT_EQ(v_chunks[0].virtual_stage, 1);
  EXPECT_EQ(v_chunks[1].virtual_stage, 2) << "the V's turn: stages 1 and 2 on rank 1";
  EXPECT_EQ(v_chunks[1].policy, (Policies{kRecompute}));
}

}  // namespace
}  // namespace loom::pipeline
