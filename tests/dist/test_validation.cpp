// Validation (NOTE [Validation]) in every layout: the validation loss after each step equals the
// serial run's (float64, relative 1e-9), and the pass leaves training alone: the losses and weights
// of a layout that validates equal the serial run's, and a serial run that validates is bit for
// bit the run that does not.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "layout_harness.h"
#include "world.h"

namespace loom::test {
namespace {

struct ValidCase {
  std::string name;
  int ranks;
  std::function<void(Config&)> set;
};

// A GPT of 4 layers (so interleaved pipelines have a chunk per layer pair), 2 validation batches
// of 4 sequences: 2 micro-batches of 2 per batch.
Config valid_gpt() {
  Config c = small_gpt(97, /*n_layers=*/4, /*seq_len=*/32, 4, 2);
  c.data.valid = "synthetic";
  c.train.eval_every = 1;
  c.train.eval_tokens = 2 * 4 * 32;
  return c;
}

Config valid_dlrm() {
  Config c = small_dlrm(/*global_batch=*/8, /*micro_batch=*/2);
  c.data.valid = "synthetic";
  c.train.eval_every = 1;
  c.train.eval_tokens = 20;  // 20 samples: 3 batches of 8
  return c;
}

std::vector<ValidCase> cases() {
  auto gpt = [](auto set) { return [set](Config& c) { c = valid_gpt(), set(c); }; };
  return {
      {"dp2", 2, gpt([](Config& c) { c.parallel.dp = 2; })},
      {"dp2_zero1", 2, gpt([](Config& c) { c.parallel.dp = 2, c.parallel.zero = 1; })},
      {"tp2", 2, gpt([](Config& c) { c.parallel.tp = 2; })},
      {"tp2_sequence", 2, gpt([](Config& c) { c.parallel.tp = 2, c.parallel.tp_sequence = true; })},
      {"pp2_1f1b", 2, gpt([](Config& c) { c.parallel.pp = 2; })},
      {"pp2_interleaved", 2,
       gpt([](Config& c) { c.parallel.pp = 2, c.parallel.schedule = "interleaved", c.parallel.chunks = 2; })},
      {"pp2_zb_recompute", 2,
       gpt([](Config& c) { c.parallel.pp = 2, c.parallel.schedule = "zb-h1", c.memory.recompute = Recompute::Full; })},
      // A V (NOTE [V-shaped pipelines]): the forward-only pass hands the turn over within a rank.
      {"pp2_zbv", 2, gpt([](Config& c) { c.parallel.pp = 2, c.parallel.schedule = "zb-v", c.train.micro_batch = 1; })},
      {"pp2_dualpipev", 2,
       gpt([](Config& c) { c.parallel.pp = 2, c.parallel.schedule = "dualpipe-v", c.train.micro_batch = 1; })},
      // ZeRO-3's forward-only pass reads the head in row slices (NOTE [Sliced reads]).
      {"dp2_zero3", 2, gpt([](Config& c) { c.parallel.dp = 2, c.parallel.zero = 3; })},
      {"sp2_allgather", 2, gpt([](Config& c) { c.parallel.sp = 2; })},
      {"sp2_ring", 2, gpt([](Config& c) { c.parallel.sp = 2, c.parallel.sp_mode = SpMode::Ring; })},
      {"sp2_ulysses", 2, gpt([](Config& c) { c.parallel.sp = 2, c.parallel.sp_mode = SpMode::Ulysses; })},
      {"dp2_sparse", 2, gpt([](Config& c) { c.parallel.dp = 2, c.parallel.sparse = SparseMode::On; })},
      {"llama_tp2", 2,
       [](Config& c) {
         Config base = valid_gpt();
         c = small_llama(97, 2, 32, 4, 2, 4, /*tied=*/true);
         c.data = base.data, c.train.eval_every = 1, c.train.eval_tokens = base.train.eval_tokens;
         c.parallel.tp = 2;
       }},
      {"dlrm_dp2_sparse", 2, [](Config& c) { c = valid_dlrm(), c.parallel.dp = 2, c.parallel.sparse = SparseMode::On; }},
      {"dp2_pp2", 4, gpt([](Config& c) { c.parallel.dp = 2, c.parallel.pp = 2, c.train.global_batch = 8; })},
      {"tp2_pp2", 4, gpt([](Config& c) { c.parallel.tp = 2, c.parallel.pp = 2; })},
      {"pp4", 4, gpt([](Config& c) { c.parallel.pp = 4; })},
      {"pp4_zbv", 4,
       gpt([](Config& c) {
         c.parallel.pp = 4, c.parallel.schedule = "zb-v", c.train.global_batch = 8, c.train.micro_batch = 1;
       })},
      {"pp2_interleaved_dp2", 4,
       gpt([](Config& c) {
         c.parallel.pp = 2, c.parallel.dp = 2, c.parallel.schedule = "interleaved", c.parallel.chunks = 2;
         c.train.global_batch = 8;
       })},
      {"sp2_tp2_ring", 4,
       gpt([](Config& c) { c.parallel.sp = 2, c.parallel.tp = 2, c.parallel.sp_mode = SpMode::Ring; })},
      {"dp2_tp2_zero1", 4, gpt([](Config& c) { c.parallel.dp = 2, c.parallel.tp = 2, c.parallel.zero = 1; })},
  };
}

class Validation : public ::testing::TestWithParam<ValidCase> {};

TEST_P(Validation, EqualsTheSerialValidationLoss) {
  const ValidCase& vc = GetParam();
  if (world().size() != vc.ranks) GTEST_SKIP() << "needs " << vc.ranks << " ranks";
  Config c;
  vc.set(c);
  const TrainedRun serial = run_serial(c);
  const TrainedRun layout = train_run(c, world());
  expect_same_training(layout, serial, 1e-9, 1e-9);
  ASSERT_EQ(layout.records.size(), serial.records.size());
  for (size_t i = 0; i < serial.records.size(); ++i) {
    ASSERT_TRUE(serial.records[i].val_loss && layout.records[i].val_loss) << "step " << i << ": no validation";
    const double want = *serial.records[i].val_loss, got = *layout.records[i].val_loss;
    EXPECT_GT(want, 0);
    EXPECT_LE(std::abs(got - want), 1e-9 * std::abs(want)) << "step " << i << ": val_loss " << got << " vs " << want;
  }
  // Training changes the model, so the held-out loss moves from step to step.
  EXPECT_NE(*serial.records.front().val_loss, *serial.records.back().val_loss);
}

INSTANTIATE_TEST_SUITE_P(Layouts, Validation, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// The pass reads, never writes: validating after every step leaves the losses, gradient norms and
// weights of training exactly as they are without it (and eval_every = 2 validates after steps 2
// and 3, the last).
TEST(ValidationSerial, LeavesTrainingUntouched) {
  if (world().size() != 1) GTEST_SKIP() << "one rank";
  for (const Config& with : {valid_gpt(), valid_dlrm()}) {
    Config without = with;
    without.train.eval_every = 0;
    Config every2 = with;
    every2.train.eval_every = 2;
    const TrainedRun a = run_serial(with), b = run_serial(without), e = run_serial(every2);
    ASSERT_EQ(a.records.size(), b.records.size());
    for (size_t i = 0; i < a.records.size(); ++i) {
      EXPECT_EQ(a.records[i].loss, b.records[i].loss) << "step " << i;
      EXPECT_EQ(a.records[i].grad_norm, b.records[i].grad_norm) << "step " << i;
      EXPECT_FALSE(b.records[i].val_loss.has_value());
    }
    for (size_t p = 0; p < a.weights.size(); ++p) EXPECT_TRUE(a.weights[p].equal(b.weights[p])) << a.names[p];
    ASSERT_EQ(e.records.size(), 3u);
    EXPECT_FALSE(e.records[0].val_loss.has_value());
    ASSERT_TRUE(e.records[1].val_loss && e.records[2].val_loss);
    EXPECT_EQ(*e.records[1].val_loss, *a.records[1].val_loss);
    EXPECT_EQ(*e.records[2].val_loss, *a.records[2].val_loss);
  }
}

// The validation loss is the mean loss per token over the held-out set: a model that predicts
// uniformly (all weights of the head zero) scores log(vocab).
TEST(ValidationSerial, IsTheMeanLossPerToken) {
  if (world().size() != 1) GTEST_SKIP() << "one rank";
  Config c = valid_gpt();
  c.train.steps = 1;
  dist::NullCommunicator alone;
  train::Trainer trainer(c, alone);
  for (nn::Param* p : trainer.model().params())
    if (p->name.find("head") != std::string::npos || p->name.find("lm_") != std::string::npos) p->value.zero_();
  EXPECT_EQ(trainer.eval_steps(), 2);
  EXPECT_NEAR(trainer.validation_loss(), std::log(97.0), 1e-12);
}

}  // namespace
}  // namespace loom::test
