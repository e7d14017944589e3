// Memory policies and memory-aware stage cuts train the same model (float64, relative 1e-9):
// swapping saved activations to the host tier and back, the cost model's per-layer choice under a
// budget, and the memory-balanced and searched cuts, under every pipeline schedule, with dp and tp.
// Moving bytes and recomputing change where activations live, never what is computed.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <set>

#include "layout_harness.h"
#include "loom/plan/run_plan.h"
#include "loom/trace/chrome_trace.h"
#include "world.h"

namespace loom::test {
namespace {

struct MemoryCase {
  std::string schedule;
  int dp = 1, tp = 1;  // pp = world / (dp x tp)
  int64_t chunks = 1;
  std::string swap = "all", policy = "manual", partition = "compute", recompute = "none";
  bool budget = false;  // policy "auto": a budget that binds (binding_budget)
  int zero = 0;         // parallel.zero
};

// A budget that binds but can be met: the cost model aims halfway between the largest stage's
// estimate with every layer kept and with every layer recomputed (the budget's planned share).
int64_t binding_budget(Config c, int ranks) {
  c.memory = MemoryConfig{};
  c.parallel.partition = Partition::Compute;
  auto largest = [&](const Config& config) {
    double most = 0;
    for (const plan::StagePlan& s : plan::make_plan(config, ranks, plan::CostModel{}).stages) most = std::max(most, s.memory.total());
    return most;
  };
  const double keep = largest(c);
  c.memory.recompute = Recompute::Full;
  return static_cast<int64_t>((keep + largest(c)) / 2 / plan::kPlannedBudgetShare);
}

int64_t policies(const plan::RunPlan& plan, nn::MemoryPolicy which) {
  int64_t n = 0;
  for (const plan::LayerPlan& l : plan.chain) n += l.policy == which;
  return n;
}

class PipelineMemory : public ::testing::TestWithParam<MemoryCase> {};

TEST_P(PipelineMemory, MatchesTheSerialRunInFloat64) {
  const MemoryCase mc = GetParam();
  const int n = world().size();
  if (n % (mc.dp * mc.tp) != 0 || n / (mc.dp * mc.tp) < 2) GTEST_SKIP() << "needs pp >= 2";
  Config c = small_gpt(97, /*n_layers=*/4, /*seq_len=*/24, 16, 2);
  c.parallel.dp = mc.dp, c.parallel.tp = mc.tp, c.parallel.pp = n / (mc.dp * mc.tp);
  c.parallel.schedule = mc.schedule;
  c.parallel.chunks = mc.chunks;
  c.parallel.zero = mc.zero;
  if (c.parallel.pp * c.parallel.stage_chunks() > 2 * c.model.n_layers + 3) GTEST_SKIP() << "more slices than the chain's layers";
  if (v_shaped(mc.schedule) && c.microbatch_count() / mc.dp < 2 * c.parallel.pp) GTEST_SKIP() << "too few micro-batches for the V";
  c.memory.swap = mc.swap, c.memory.policy = mc.policy, c.memory.recompute = mc.recompute;
  c.memory.recompute_ratio = 0.5;
  c.parallel.partition = mc.partition;
  if (mc.budget) c.memory.budget = fmt::format("{}", binding_budget(c, n));
  TrainedRun layout;
  {  // the layout's budget ends with its trainer, before the serial run
    train::Trainer trainer(c, world());
    const plan::RunPlan& plan = trainer.plan();
    if (mc.swap == "all") EXPECT_GT(policies(plan, nn::MemoryPolicy::Swap), 0);
    if (mc.budget)  // the budget binds: the cost model moved or recomputed something
      EXPECT_LT(policies(plan, nn::MemoryPolicy::Keep), static_cast<int64_t>(plan.chain.size()));
    layout.records = trainer.run({.peak_flops = 1e9});
    for (nn::Param* p : trainer.model().params()) {
      layout.names.push_back(p->name);
      layout.weights.push_back(trainer.value_of(*p).clone());
      layout.shards.push_back(p->part());
    }
  }
  if (mc.swap == "all") EXPECT_GT(layout.records.back().host_peak_bytes, 0);
  expect_same_training(layout, run_serial(c), 1e-9, 1e-9);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, PipelineMemory,
    ::testing::Values(
        // memory.swap = "all" under every schedule, mixed with recomputation, with dp and tp.
        MemoryCase{"gpipe"}, MemoryCase{"1f1b"}, MemoryCase{"interleaved", 1, 1, 2}, MemoryCase{"zb-h1"},
        MemoryCase{"scp", 1, 1, 1, "all", "manual", "compute", "stage-aware"},
        MemoryCase{"1f1b", 2, 1}, MemoryCase{"zb-h1", 1, 2}, MemoryCase{"zb-v"}, MemoryCase{"zb-v", 2, 1},
        MemoryCase{"zb-v", 1, 1, 1, "none", "auto", "compute", "none", true}, MemoryCase{"dualpipe-v"},
        MemoryCase{"dualpipe-v", 1, 1, 1, "none", "auto", "compute", "none", true},
        // The cost model's choice under a budget that binds, on each partition.
        MemoryCase{"1f1b", 1, 1, 1, "none", "auto", "compute", "none", true},
        MemoryCase{"gpipe", 1, 1, 1, "none", "auto", "auto", "none", true},
        MemoryCase{"zb-h1", 1, 1, 1, "none", "auto", "memory", "none", true},
        MemoryCase{"scp", 1, 1, 1, "none", "auto", "auto", "none", true},
        MemoryCase{"interleaved", 1, 1, 2, "none", "auto", "compute", "none", true},
        MemoryCase{"1f1b", 2, 1, 1, "none", "auto", "auto", "none", true},
        MemoryCase{"1f1b", 1, 2, 1, "none", "auto", "memory", "none", true},
        MemoryCase{"1f1b", 1, 1, 1, "none", "manual", "memory"},
        // ZeRO-3 beside the swap tier and recomputation: gathers around the moved and rebuilt state.
        MemoryCase{"1f1b", 2, 1, 1, "all", "manual", "compute", "none", false, 3},
        MemoryCase{"scp", 1, 1, 1, "all", "manual", "compute", "stage-aware", false, 3}),
    [](const auto& info) {
      const MemoryCase& m = info.param;
      std::string name = fmt::format("{}_dp{}_tp{}_chunks{}_swap{}_{}_{}_{}{}", m.schedule, m.dp, m.tp, m.chunks, m.swap,
                                     m.policy, m.partition, m.recompute, m.zero ? fmt::format("_zero{}", m.zero) : "");
      std::erase(name, '-');
      return name;
    });

// Issue 33: an auto plan never passes its budget. At pp = the world's size, for GPTs from small to
// large, the budget binds halfway between the all-keep and all-recompute estimates; the
// accounting allocator enforces it for the whole run (a run that passes it throws), and every
// stage's measured peak stays within the budget and within the margin the plan keeps beside its
// estimate (kPlannedBudgetShare). One case also measures the GEMM peak for MFU, as `loom train`
// does without --peak-flops: that probe runs outside the budget (NOTE [Measurements outside the
// budget]); in issue 33 its 2.00 MiB matrix failed every rank.
struct BudgetCase {
  std::string name;
  int64_t vocab, d_model, n_layers, seq_len, global_batch, micro_batch;
  std::string schedule = "1f1b";
  bool probe = false;  // measure the GEMM peak (no TrainOptions::peak_flops)
};

class AutoPlanBudget : public ::testing::TestWithParam<BudgetCase> {};

TEST_P(AutoPlanBudget, MeasuredPeakNeverPassesTheBudget) {
  const BudgetCase bc = GetParam();
  const int n = world().size();
  if (n < 2) GTEST_SKIP() << "needs pp >= 2";
  Config c = small_gpt(bc.vocab, bc.n_layers, bc.seq_len, bc.global_batch, bc.micro_batch);
  c.model.d_model = bc.d_model;
  c.train.steps = 2;
  c.parallel.pp = n;
  c.parallel.schedule = bc.schedule;
  c.memory.policy = PolicyMode::Auto;
  const int64_t budget = binding_budget(c, n);
  c.memory.budget = fmt::format("{}", budget);
  train::Trainer trainer(c, world());
  const plan::RunPlan& plan = trainer.plan();
  EXPECT_LT(policies(plan, nn::MemoryPolicy::Keep), static_cast<int64_t>(plan.chain.size())) << "the budget binds";
  train::TrainOptions options;
  if (!bc.probe) options.peak_flops = 1e9;
  const std::vector<train::StepRecord> records = trainer.run(options);
  const std::vector<int64_t>& measured = records.back().peak_bytes_by_stage;
  ASSERT_EQ(measured.size(), plan.stages.size());
  for (size_t s = 0; s < measured.size(); ++s) {
    const double estimate = plan.stages[s].memory.total();
    EXPECT_LE(measured[s], budget) << bc.name << " stage " << s << ": estimate " << estimate << " B";
    EXPECT_LE(static_cast<double>(measured[s]), estimate / plan::kPlannedBudgetShare)
        << bc.name << " stage " << s << ": the estimate misses more than the plan's margin";
    // Nor so far above that the plan recomputes for nothing (issue 33's runs: 0.89 to 1.05).
    EXPECT_GE(static_cast<double>(measured[s]), 0.75 * estimate)
        << bc.name << " stage " << s << ": estimate " << estimate << " B, measured " << measured[s] << " B";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, AutoPlanBudget,
    ::testing::Values(BudgetCase{"small", 97, 32, 4, 24, 16, 2, "1f1b", true},
                      BudgetCase{"small_zbh1", 97, 32, 4, 24, 16, 2, "zb-h1"},
                      BudgetCase{"medium", 256, 64, 4, 64, 16, 4},
                      BudgetCase{"large", 1024, 128, 4, 128, 16, 4},
                      BudgetCase{"large_gpipe", 1024, 128, 4, 128, 16, 4, "gpipe"}),
    [](const auto& info) { return info.param.name; });

// --trace: each swapped layer's copy out and copy back appear on the rank's own "swap copies"
// track, one pair per layer and micro-batch.
TEST(PipelineMemoryTrace, SwapCopiesOnTheirOwnTrack) {
  const int n = world().size();
  if (n < 2) GTEST_SKIP();
  Config c = small_gpt(97, /*n_layers=*/2, /*seq_len=*/24, 8, 2);
  c.parallel.pp = n;
  c.train.steps = 1;
  c.memory.swap = Swap::All;
  const std::string path = fmt::format("{}/loom_swap_trace_{}.json", ::testing::TempDir(), n);
  { train::Trainer(c, world()).run({.trace_path = path, .peak_flops = 1e9}); }
  if (world().rank() != 0) return;
  std::ifstream in(path);
  ASSERT_TRUE(in.good());
  const auto trace = nlohmann::json::parse(in);
  std::set<std::pair<int, int>> named;  // (pid, tid) named "swap copies"
  std::map<int, int> outs, ins;         // pid -> copies
  for (const auto& e : trace) {
    if (e.value("name", "") == "thread_name" && e["args"]["name"] == "swap copies")
      named.insert({e["pid"].get<int>(), e["tid"].get<int>()});
    if (e.value("cat", "") != "swap") continue;
    EXPECT_EQ(e["tid"].get<int>(), trace::kSwapTrack);
    const std::string name = e["name"];
    (name.starts_with("out ") ? outs : ins)[e["pid"].get<int>()] += 1;
  }
  const int microbatches = 4, layers = 2 * 2 + 3;  // every chain layer swaps, on some rank
  int total_out = 0, total_in = 0;
  for (auto [pid, count] : outs) {
    total_out += count;
    EXPECT_EQ(count, ins[pid]) << "rank " << pid;
  }
  for (auto [pid, count] : ins) total_in += count;
  EXPECT_EQ(total_out, layers * microbatches);
  EXPECT_EQ(total_in, layers * microbatches);
  EXPECT_EQ(static_cast<int>(named.size()), n);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace loom::test
