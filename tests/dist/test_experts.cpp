// Mixture of experts (NOTE [Mixture-of-experts block]) in the layouts it runs in today (dp, pp
// with its schedules, sp in each mode, tp, ep, ZeRO-1/2/3, recomputation) against the serial run in
// float64 at 1e-9:
// dropless and capacity routing, softmax and sigmoid scores, the balance loss and the bias balance,
// shared experts.
// A micro-batch is routed on one rank, or agreed over its sp ranks, so the layout cannot change a
// choice or a drop.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "layout_harness.h"
#include "loom/dist/mesh.h"
#include "loom/plan/run_plan.h"
#include "world.h"

namespace loom::test {
namespace {

struct ExpertCase {
  std::string name;
  std::string model = "llama";
  int pp = 1;  // the rest of the world is dp
  int sp = 1;
  SpMode sp_mode = SpMode::AllGather;
  int tp = 1;
  bool tp_sequence = false;
  int ep = 1;  // expert groups inside dp (NOTE [Expert parallelism])
  std::string schedule = "1f1b";
  int zero = 0;
  std::string recompute = "none";
  double capacity_factor = 0;
  MoeScore score = MoeScore::Softmax;
  int64_t shared = 0;
  MoeBalance balance = MoeBalance::Aux;
};

// A Llama (or GPT) of 4 blocks with 4 experts of width 16 (top 2) in blocks 1 and 3; 12 micro-batches of
// 1, vocabulary 97, 3 steps with clipping.
Config expert_config(const ExpertCase& ec) {
  Config c = ec.model == "gpt" ? small_gpt(97, /*n_layers=*/4, /*seq_len=*/24, 12, 1)
                               : small_llama(97, /*n_layers=*/4, /*seq_len=*/24, 12, 1);
  c.model.moe_experts = 4;
  c.model.moe_top_k = 2;
  c.model.moe_every = 2;
  c.model.moe_ffn_hidden = 16;
  c.model.moe_aux_loss_coef = 0.05;
  c.model.moe_capacity_factor = ec.capacity_factor;
  c.model.moe_score = ec.score;
  c.model.moe_shared_experts = ec.shared;
  c.model.moe_balance = ec.balance;
  c.model.moe_bias_rate = 0.02;
  c.train.clip = 0.5;
  c.parallel.pp = ec.pp;
  c.parallel.sp = ec.sp;
  c.parallel.sp_mode = ec.sp_mode;
  c.parallel.tp = ec.tp;
  c.parallel.tp_sequence = ec.tp_sequence;
  c.parallel.dp = world().size() / (ec.pp * ec.sp * ec.tp);
  c.parallel.ep = ec.ep;
  c.parallel.schedule = ec.schedule;
  c.parallel.zero = ec.zero;
  c.memory.recompute = ec.recompute;
  return c;
}

// NOTE [Expert parallelism]: the plan's bytes per step on "ep" and "edp" against this step's. A
// rank sends its kept rows (dropless: every assignment, so exactly the plan's) out and its
// experts' rows back; what comes back to one rank is what its experts received, so only the
// world's sum is fixed, and it is the plan's. A capacity sends at most the plan's. The experts'
// gradients cross their replicas whole, as planned.
void expect_planned_expert_bytes(const Config& c, const plan::RunPlan& plan, const std::map<std::string, int64_t>& measured) {
  const dist::MeshCoords at = dist::mesh_coords(dist::mesh_shape(c.parallel), world().rank());
  const auto& predicted = plan.stages[plan.stages.size() > 1 ? static_cast<size_t>(at.pp) : 0].comm_bytes;
  auto get = [](const auto& map, const char* axis) {
    const auto it = map.find(axis);
    return it == map.end() ? 0.0 : static_cast<double>(it->second);
  };
  at::Tensor sums = at::tensor({get(measured, "ep"), get(predicted, "ep"), get(measured, "edp"), get(predicted, "edp")},
                               at::TensorOptions().dtype(at::kDouble));
  world().all_reduce(sums, dist::ReduceOp::Sum);
  const auto s = sums.accessor<double, 1>();
  EXPECT_GT(s[1], 0);
  if (c.model.moe_capacity_factor == 0) EXPECT_EQ(s[0], s[1]) << "dropless: the world's ep bytes are the plan's";
  else EXPECT_LE(s[0], s[1]);
  EXPECT_EQ(s[2], s[3]) << "edp";
}

class MixtureOfExperts : public ::testing::TestWithParam<ExpertCase> {};

TEST_P(MixtureOfExperts, MatchesTheSerialRunInFloat64) {
  const ExpertCase& ec = GetParam();
  const int n = world().size();
  const int dp = n / (ec.pp * ec.sp * ec.tp);
  if (n % (ec.pp * ec.sp * ec.tp) != 0 || 12 % dp != 0)
    GTEST_SKIP() << "pp x sp x tp must divide the world, dp the 12 micro-batches";
  if (dp % ec.ep != 0) GTEST_SKIP() << "ep must divide dp";
  const Config c = expert_config(ec);
  const TrainedRun serial = run_serial(c);
  EXPECT_GT(serial.records.front().grad_norm, c.train.clip) << "clipping must be active";
  const char* dense = ec.model == "gpt" ? "blocks.0.mlp.up.weight" : "blocks.0.mlp.gate_up.weight";
  for (const char* name : {"blocks.1.moe.router.weight", "blocks.3.moe.experts.gate_up.weight", dense})
    EXPECT_NE(std::find(serial.names.begin(), serial.names.end(), name), serial.names.end()) << name;
  plan::RunPlan plan;
  const TrainedRun layout = train_run(c, world(), [&](train::Trainer& trainer) { plan = trainer.plan(); });
  expect_same_training(layout, serial, 1e-9, 1e-9);
  if (ec.ep > 1) {  // NOTE [Expert parallelism]: a rank holds E / ep experts, and rows travel over "ep"
    const auto it = std::find_if(layout.names.begin(), layout.names.end(),  // this stage's block's
                                 [](const std::string& name) { return name.ends_with(".experts.gate_up.weight"); });
    ASSERT_NE(it, layout.names.end());
    const Shard part = layout.shards[static_cast<size_t>(it - layout.names.begin())];
    EXPECT_EQ(part.dim, 0);
    EXPECT_EQ(part.length, 4 / ec.ep);
    EXPECT_GT(ops_on(layout.comm, "ep").at("all_to_allv").first, 0);
    if (c.parallel.dp > ec.ep)  // the experts' replicas sum their gradients
      EXPECT_GT(ops_on(layout.comm, "edp").count("all_reduce"), 0u);
    expect_planned_expert_bytes(c, plan, layout.records.back().comm_bytes);
  }
  if (ec.balance == MoeBalance::Bias) {  // NOTE [Expert balance]: the bias changed the choices
    Config aux = c;
    aux.model.moe_balance = MoeBalance::Aux;
    const TrainedRun unbiased = run_serial(aux);
    EXPECT_EQ(unbiased.records.front().experts[0].tokens, serial.records.front().experts[0].tokens)
        << "the first step routes with a bias of zero";
    bool moved = false;
    for (size_t b = 0; b < 2; ++b) moved |= unbiased.records.back().experts[b].tokens != serial.records.back().experts[b].tokens;
    EXPECT_TRUE(moved) << "the last step's loads must differ from the unbiased run's";
  }
  // NOTE [Expert measures]: the router's loads and drops are the serial run's, step by step.
  ASSERT_EQ(layout.records.size(), serial.records.size());
  for (size_t s = 0; s < serial.records.size(); ++s) {
    const auto &got = layout.records[s].experts, &want = serial.records[s].experts;
    ASSERT_EQ(got.size(), 2u) << "blocks 1 and 3";
    ASSERT_EQ(want.size(), 2u);
    for (size_t b = 0; b < want.size(); ++b) {
      EXPECT_EQ(got[b].block, want[b].block);
      EXPECT_EQ(got[b].tokens, want[b].tokens) << "step " << s + 1 << " block " << want[b].block;
      EXPECT_EQ(got[b].dropped, want[b].dropped) << "step " << s + 1 << " block " << want[b].block;
      EXPECT_NEAR(got[b].aux_loss, want[b].aux_loss, 1e-9 * want[b].aux_loss);
      EXPECT_EQ(want[b].dropped > 0, ec.capacity_factor > 0) << "a capacity of 0.75 drops, dropless never";
      int64_t kept = 0;
      for (int64_t t : want[b].tokens) kept += t;
      EXPECT_EQ(kept + want[b].dropped, 12 * 24 * 2) << "every token's two assignments, kept or dropped";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, MixtureOfExperts,
    ::testing::Values(ExpertCase{.name = "dp"}, ExpertCase{.name = "dp_capacity", .capacity_factor = 0.75},
                      ExpertCase{.name = "dp_sigmoid_shared", .score = MoeScore::Sigmoid, .shared = 1},
                      ExpertCase{.name = "dp_zero1", .zero = 1}, ExpertCase{.name = "dp_zero3", .zero = 3},
                      ExpertCase{.name = "pp_1f1b", .pp = 2},
                      ExpertCase{.name = "pp_zbh1_capacity", .pp = 2, .schedule = "zb-h1", .capacity_factor = 0.75},
                      ExpertCase{.name = "pp_recompute", .pp = 2, .recompute = "full"},
                      ExpertCase{.name = "gpt_dp_capacity", .model = "gpt", .capacity_factor = 0.75},
                      ExpertCase{.name = "gpt_pp_zero1", .model = "gpt", .pp = 2, .zero = 1},
                      ExpertCase{.name = "ep2", .ep = 2}, ExpertCase{.name = "ep4", .ep = 4},
                      ExpertCase{.name = "ep2_capacity_sigmoid_shared", .ep = 2, .capacity_factor = 0.75,
                                 .score = MoeScore::Sigmoid, .shared = 1},
                      ExpertCase{.name = "ep2_pp_zbh1_recompute", .pp = 2, .ep = 2, .schedule = "zb-h1",
                                 .recompute = "full"},
                      ExpertCase{.name = "gpt_ep2_pp", .model = "gpt", .pp = 2, .ep = 2},
                      ExpertCase{.name = "dp_bias", .balance = MoeBalance::Bias},
                      ExpertCase{.name = "ep2_bias_capacity", .ep = 2, .capacity_factor = 0.75,
                                 .balance = MoeBalance::Bias},
                      ExpertCase{.name = "pp_ep2_bias", .pp = 2, .ep = 2, .balance = MoeBalance::Bias},
                      // NOTE [Experts over sequence parallelism]: a micro-batch's chunks on sp ranks
                      ExpertCase{.name = "sp2_capacity", .sp = 2, .capacity_factor = 0.75},
                      ExpertCase{.name = "sp2_ring_capacity_bias", .sp = 2, .sp_mode = SpMode::Ring,
                                 .capacity_factor = 0.75, .balance = MoeBalance::Bias},
                      ExpertCase{.name = "sp2_ulysses_ep2_capacity", .sp = 2, .sp_mode = SpMode::Ulysses, .ep = 2,
                                 .capacity_factor = 0.75},
                      ExpertCase{.name = "gpt_sp2_ring_pp", .model = "gpt", .pp = 2, .sp = 2, .sp_mode = SpMode::Ring,
                                 .capacity_factor = 0.75},
                      // NOTE [Experts beside ZeRO]: the dense parameters sharded, the experts by ep
                      ExpertCase{.name = "ep2_zero1", .ep = 2, .zero = 1},
                      ExpertCase{.name = "ep2_zero2_capacity", .ep = 2, .zero = 2, .capacity_factor = 0.75},
                      ExpertCase{.name = "ep4_zero3_bias", .ep = 4, .zero = 3, .balance = MoeBalance::Bias},
                      ExpertCase{.name = "pp_ep2_zero3_zbh1", .pp = 2, .ep = 2, .schedule = "zb-h1", .zero = 3},
                      ExpertCase{.name = "sp2_ep2_zero1_ring", .sp = 2, .sp_mode = SpMode::Ring, .ep = 2, .zero = 1},
                      // NOTE [Experts over tensor parallelism]: each tp rank runs its share of the tokens
                      ExpertCase{.name = "tp2_capacity_bias", .tp = 2, .capacity_factor = 0.75,
                                 .balance = MoeBalance::Bias},
                      ExpertCase{.name = "tp2_sequence_sigmoid_shared", .tp = 2, .tp_sequence = true,
                                 .score = MoeScore::Sigmoid, .shared = 1},
                      ExpertCase{.name = "tp2_ep2", .tp = 2, .ep = 2},
                      ExpertCase{.name = "tp2_ep2_zero3_capacity", .tp = 2, .ep = 2, .zero = 3, .capacity_factor = 0.75},
                      ExpertCase{.name = "tp2_zero2", .tp = 2, .zero = 2},
                      ExpertCase{.name = "gpt_tp2_pp_recompute", .model = "gpt", .pp = 2, .tp = 2, .recompute = "full"},
                      ExpertCase{.name = "sp2_tp2_ring", .sp = 2, .sp_mode = SpMode::Ring, .tp = 2,
                                 .capacity_factor = 0.75}),
    [](const auto& info) { return info.param.name; });

// NOTE [Expert parallelism]: experts without tokens. A router of zeros scores every expert alike
// and the tie sends every token to expert 0 (top 1); with top 1 the weight is 1 whatever the
// scores and the balance loss is off, so the router's gradient is zero and it stays so. Experts
// 1-3 get no token on any rank for every step: the group's other ranks receive nothing and still
// join every exchange. Equal to the serial run, and nothing hangs.
TEST(MixtureOfExpertsEmpty, ExpertsWithoutTokensForEveryStepMatchTheSerialRun) {
  const int n = world().size();
  if (n < 2 || n % 2 != 0 || 12 % n != 0) GTEST_SKIP() << "expert groups of two";
  Config c = expert_config({.name = "empty", .ep = 2});
  c.model.moe_top_k = 1;
  c.model.moe_aux_loss_coef = 0;
  const auto zero_routers = [](train::Trainer& trainer) {
    for (nn::Param* p : trainer.model().params())
      if (p->name.ends_with(".router.weight")) p->value.zero_();
  };
  const TrainedRun serial = run_serial(c, zero_routers);
  const TrainedRun layout = train_run(c, world(), zero_routers);
  expect_same_training(layout, serial, 1e-9, 1e-9);
  for (const auto& record : layout.records)
    for (const auto& load : record.experts)
      EXPECT_EQ(load.tokens, (std::vector<int64_t>{12 * 24, 0, 0, 0})) << "step " << record.step;
}

}  // namespace
}  // namespace loom::test
