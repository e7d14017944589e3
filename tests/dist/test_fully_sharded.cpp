// ZeRO-2 and ZeRO-3 (NOTE [Fully sharded data parallelism]) against the serial run in float64 at
// 1e-9: GPT and Llama (untied and tied), a vocabulary no group divides, hybrid shard groups, and
// outputs delivered late (a missing wait would read NaN); and what they keep and move per step.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "late_communicator.h"
#include "layout_harness.h"
#include "world.h"

namespace loom::test {
namespace {

struct ShardCase {
  std::string model;  // "gpt", "llama", "llama_tied"
  int zero;
};

// 12 micro-batches of 1 (dp = 1, 2, 3, 4 all divide them), vocabulary 97, 3 steps with clipping.
Config sharded_config(const ShardCase& sc) {
  Config c = sc.model == "gpt" ? small_gpt(97, 2, 24, 12, 1) : small_llama(97, 2, 24, 12, 1, 4, sc.model == "llama_tied");
  c.train.clip = 0.5;
  c.parallel.dp = world().size();
  c.parallel.zero = sc.zero;
  return c;
}

class FullySharded : public ::testing::TestWithParam<ShardCase> {};

TEST_P(FullySharded, MatchesTheSerialRunInFloat64) {
  if (12 % world().size() != 0) GTEST_SKIP() << "dp must divide the 12 micro-batches";
  const Config c = sharded_config(GetParam());
  const TrainedRun serial = run_serial(c);
  EXPECT_GT(serial.records.front().grad_norm, c.train.clip) << "clipping must be active";
  expect_same_training(train_run(c, world()), serial, 1e-9, 1e-9);
}

// Every reduction and gather delivers its output only when waited for; before, the output holds
// NaN. Equal numbers mean every output is waited for before it is read.
TEST_P(FullySharded, LateOutputsGiveTheSameRun) {
  if (12 % world().size() != 0) GTEST_SKIP() << "dp must divide the 12 micro-batches";
  const Config c = sharded_config(GetParam());
  LateCommunicator late(world());
  expect_same_training(train_run(c, late), run_serial(c), 1e-9, 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Models, FullySharded,
                         ::testing::Values(ShardCase{"gpt", 2}, ShardCase{"gpt", 3}, ShardCase{"llama", 2},
                                           ShardCase{"llama", 3}, ShardCase{"llama_tied", 3}),
                         [](const auto& info) { return fmt::format("{}_zero{}", info.param.model, info.param.zero); });

// The late communicator itself: an output read before its wait is NaN, and right after it.
TEST(FullyShardedTools, LateCommunicatorHoldsOutputsBackUntilTheWait) {
  LateCommunicator late(world(), 0);
  const at::Tensor mine = at::full({3}, 1.0 + world().rank(), at::kDouble);
  at::Tensor all = at::zeros({3 * world().size()}, at::kDouble);
  dist::WorkPtr work = late.all_gather_async(mine, all);
  EXPECT_TRUE(all.isnan().all().item<bool>()) << "an output read before the wait must show";
  work->wait();
  for (int r = 0; r < world().size(); ++r) EXPECT_EQ(all[3 * r].item<double>(), 1.0 + r);
}

// Hybrid: shard within groups of 2 dp ranks, replicate across the groups.
class FullyShardedHybrid : public ::testing::TestWithParam<int> {};

TEST_P(FullyShardedHybrid, GroupsOfTwoMatchTheSerialRun) {
  const int n = world().size();
  if (n < 4 || n % 2 != 0 || 12 % n != 0) GTEST_SKIP() << "needs at least two groups of two";
  Config c = sharded_config({"gpt", GetParam()});
  c.parallel.shard_group = 2;
  const TrainedRun layout = train_run(c, world());
  expect_same_training(layout, run_serial(c), 1e-9, 1e-9);
  const auto shard = ops_on(layout.comm, "dp_shard"), across = ops_on(layout.comm, "dp_across");
  EXPECT_GT(shard.at("reduce_scatter").first, 0) << "gradients reduce-scatter within a group";
  EXPECT_EQ(across.at("all_reduce").first, 1) << "and their shards are summed across the groups once a step";
  EXPECT_EQ(ops_on(layout.comm, "dp").count("reduce_scatter"), 0u);
}

INSTANTIATE_TEST_SUITE_P(Zero, FullyShardedHybrid, ::testing::Values(2, 3),
                         [](const auto& info) { return fmt::format("Zero{}", info.param); });

// What a step moves and what stays: each micro-batch's gradient of each layer is reduce-scattered
// once (every element once per local micro-batch, plus padding); ZeRO-3 gathers every parameter
// at least twice per micro-batch (forward and backward) and keeps none whole after the step;
// ZeRO-2 gathers each layer once after the update and keeps no gradient. (The records count what a
// rank puts in: the whole gradient of a reduce-scatter, its 1/n part of a gather.)
class FullyShardedComm : public ::testing::TestWithParam<int> {};

TEST_P(FullyShardedComm, EachMicroBatchIsReduceScatteredAndParametersGathered) {
  const int n = world().size();
  if (n < 2 || 12 % n != 0) GTEST_SKIP() << "needs dp >= 2";
  Config c = sharded_config({"gpt", GetParam()});
  c.train.steps = 2;
  train::Trainer trainer(c, world());
  const auto records = trainer.run({.peak_flops = 1e9});
  const auto dp = ops_on(trainer.comm_stats(), "dp");
  const int64_t params = trainer.model().param_count(), layers = static_cast<int64_t>(trainer.model().chain.size());
  // Each unit's vector pads to a multiple of n: a unit per layer, and under ZeRO-3 the head's
  // matrix in row slices of their own (NOTE [Sliced reads]).
  int64_t units = layers;
  for (nn::Param* p : trainer.model().params())
    if (p->sliceable && GetParam() == 3) units += nn::RowSlices(p->part_shape()[0]).count() - 1;
  const int64_t local = 12 / n, padding = units * (n - 1);
  const auto [scatters, scatter_bytes] = dp.at("reduce_scatter");
  EXPECT_GE(scatter_bytes, local * params * 8);
  EXPECT_LE(scatter_bytes, local * (params + padding) * 8);
  EXPECT_EQ(scatters % local, 0) << "the same layers in every micro-batch";
  const auto [gathers, gather_bytes] = dp.at("all_gather");
  if (GetParam() == 3) {
    EXPECT_GE(gather_bytes * n, 2 * local * params * 8) << "forward and backward of every micro-batch";
    for (nn::Param* p : trainer.model().params())
      EXPECT_FALSE(p->value.defined()) << p->name << " is whole on a rank after the step";
  } else {
    EXPECT_EQ(gathers, scatters / local) << "one gather per layer, after the update";
    EXPECT_LE(gather_bytes * n, (params + padding) * 8);
    EXPECT_GE(gather_bytes * n, params * 8);
    for (nn::Param* p : trainer.model().params()) {
      EXPECT_TRUE(p->value.defined());
      EXPECT_FALSE(p->grad.defined()) << p->name << " keeps a whole gradient";
    }
  }
  EXPECT_EQ(dp.count("all_reduce") ? dp.at("all_reduce").second : 0, 16 + 8) << "the norms' sums and the loss only";
  // The working set (gathered values, gradients not yet reduced) is held, and within what the plan
  // counts for it.
  EXPECT_GT(records.back().working_bytes, 0);
  // The model state counted from the tensors: float64 values (whole under ZeRO-2, the owned share
  // under ZeRO-3), and the owned share's gradient sums and two moments; within all the rank holds.
  const int64_t owned = 3 * 8 * params / n, values = GetParam() == 3 ? 8 * params / n : 8 * params;
  EXPECT_GE(records.back().model_state_bytes, owned + values);
  EXPECT_LE(records.back().model_state_bytes, records.back().state_bytes);
  EXPECT_LE(static_cast<double>(records.back().working_bytes), trainer.plan().stages.front().memory.gathered);
}

INSTANTIATE_TEST_SUITE_P(Zero, FullyShardedComm, ::testing::Values(2, 3),
                         [](const auto& info) { return fmt::format("Zero{}", info.param); });

// ZeRO-3 in pipeline stages: whatever the schedule (joint or split backward, a loop or a V of
// chunks), the working set a rank holds stays within the plan's count for its stage.
class ShardedStages : public ::testing::TestWithParam<std::string> {};

TEST_P(ShardedStages, TheWorkingSetStaysWithinThePlan) {
  const int n = world().size();
  if (n != 4) GTEST_SKIP() << "dp = 2 x pp = 2";
  Config c = small_gpt(97, 4, 24, 16, 1);
  c.parallel.dp = 2, c.parallel.pp = 2, c.parallel.zero = 3;
  c.parallel.schedule = GetParam();
  c.train.steps = 2;
  train::Trainer trainer(c, world());
  const auto records = trainer.run({.peak_flops = 1e9});
  double planned = 0;
  for (const plan::StagePlan& s : trainer.plan().stages) planned = std::max(planned, s.memory.gathered);
  EXPECT_GT(records.back().working_bytes, 0);
  EXPECT_LE(static_cast<double>(records.back().working_bytes), planned);
}

INSTANTIATE_TEST_SUITE_P(Schedules, ShardedStages, ::testing::Values("1f1b", "zb-h1", "zb-v", "dualpipe-v"), [](const auto& info) {
  std::string name = info.param;
  std::erase(name, '-');
  return name;
});

}  // namespace
}  // namespace loom::test
