// The run plan's memory estimate against the peak the accounting allocator measures, per pipeline
// stage, for several layouts (NOTE [Run plan]). The estimate counts parameters, gradients and
// AdamW moments, the saved activations of the micro-batches a stage holds at once (simulated from
// its schedule), a sparse table's rows, and its busiest layer's moment (a recomputed layer's saved
// state and the head's logits); the measured peak is everything loom allocated in the step.
// Measured on gpt-tiny's shapes (2026-11-30): within 4% for dp, pp (keep and full recompute),
// sp, ZeRO-1 and the serial run; tp = 2 is over by 7% (13% with the sparse path, whose pulled
// rows the estimate counts as if every lookup were a distinct row). In bfloat16 (float32 masters,
// bfloat16 copies and activations, float32 logits) the measured peak is 2% over the estimate
// serial, 4% over at dp = 2, 7% and 9% over at pp = 2 (the schedule's stashed activations are
// smaller, so temporaries the estimate leaves out weigh more). ZeRO-2/3 (2026-12-04): the estimate
// 5-6% over at dp 2 and 4 (hybrid groups of 2 too, and bfloat16), 11% over at pp 2 x dp 2 (the
// largest layer's working set is added to the activations' peak, which it does not meet).
// Experts over ep (2026-12-05): the estimate counts the rows a rank's experts may receive at the
// worst (ep x T x k), so it is 13-15% over at dp 2 x ep 2 (ZeRO 0 and 1) and dp 4 x ep 2 x ZeRO-3;
// their bound is 20%. The bound below is 15%.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "dist/world.h"
#include "loom/plan/run_plan.h"
#include "loom/train/trainer.h"

namespace loom::test {
namespace {

constexpr double kTolerance = 0.15;
// memory.swap: the replay counts a swapped micro-batch's state whole from its copy back to the end
// of its backward, and no backward temporaries. Measured (2026-11-30, gpt-tiny, 4 micro-batches
// of 4): pp = 2's last stage (its forward straight before its backward) 15% below the estimate
// (the state leaves layer by layer as the forward goes and returns as the backward consumes it);
// pp = 4's stage 1 17% above it (a backward's temporaries while the next micro-batch's state comes
// back), its others within 4%. The bound for swap is 20%.
constexpr double kSwapTolerance = 0.20;
constexpr double kExpertTolerance = 0.20;  // the worst-case count of received rows (above)

// gpt-tiny (configs/gpt-tiny.toml): activations and weights large enough that the estimate's
// terms, not allocator rounding, decide the peak.
Config tiny() {
  Config c;
  c.model.vocab = 4096, c.model.d_model = 256, c.model.n_layers = 4, c.model.n_heads = 4;
  c.model.seq_len = 256;
  c.train.steps = 2, c.train.global_batch = 8, c.train.micro_batch = 4, c.train.threads = 1;
  c.parallel.sparse = SparseMode::On;  // the estimate's path, whatever "auto" would measure
  return c;
}

void with_experts(Config& c) {
  c.model.moe_experts = 4, c.model.moe_top_k = 2, c.model.moe_every = 2;
}

struct PlanLayout {
  std::string name;
  int ranks;
  std::function<void(Config&)> set;
  double tolerance = kTolerance;
};

std::vector<PlanLayout> layouts() {
  return {
      {"serial", 1, [](Config&) {}},
      {"dp2", 2, [](Config& c) { c.parallel.dp = 2; }},
      {"dp2_zero1", 2, [](Config& c) { c.parallel.dp = 2, c.parallel.zero = 1; }},
      {"tp2", 2, [](Config& c) { c.parallel.tp = 2; }},
      {"tp2_sequence_dense", 2,
       [](Config& c) { c.parallel.tp = 2, c.parallel.tp_sequence = true, c.parallel.sparse = SparseMode::Off; }},
      {"sp2", 2, [](Config& c) { c.parallel.sp = 2; }},
      {"pp2", 2, [](Config& c) { c.parallel.pp = 2; }},
      {"pp2_recompute", 2, [](Config& c) { c.parallel.pp = 2, c.memory.recompute = Recompute::Full; }},
      {"pp2_dp2", 4, [](Config& c) { c.parallel.pp = 2, c.parallel.dp = 2, c.train.global_batch = 16; }},
      // Swapped layers: held until their copy out ends and again from their copy back
      // (NOTE [Memory cost model]); the host tier is not in the budget.
      {"pp2_swap", 2, [](Config& c) { c.parallel.pp = 2, c.memory.swap = Swap::All, c.train.global_batch = 16; },
       kSwapTolerance},
      {"pp4_swap", 4, [](Config& c) { c.parallel.pp = 4, c.memory.swap = Swap::All, c.train.global_batch = 16; },
       kSwapTolerance},
      {"pp4_gpipe", 4,
       [](Config& c) { c.parallel.pp = 4, c.parallel.schedule = "gpipe", c.train.global_batch = 16; }},
      // Mixed precision: float32 masters, gradients and moments, their bfloat16 copies, bfloat16
      // activations (NOTE [Mixed precision]).
      {"serial_bf16", 1, [](Config& c) { c.model.dtype = DType::BFloat16; }},
      {"dp2_bf16", 2, [](Config& c) { c.model.dtype = DType::BFloat16, c.parallel.dp = 2; }},
      {"pp2_bf16", 2, [](Config& c) { c.model.dtype = DType::BFloat16, c.parallel.pp = 2; }},
      // ZeRO-2/3: the owned ranges and the largest layer's working set (NOTE [Fully sharded data
      // parallelism]).
      {"dp2_zero2", 2, [](Config& c) { c.parallel.dp = 2, c.parallel.zero = 2; }},
      {"dp2_zero3", 2, [](Config& c) { c.parallel.dp = 2, c.parallel.zero = 3; }},
      {"dp4_zero3", 4, [](Config& c) { c.parallel.dp = 4, c.parallel.zero = 3, c.train.global_batch = 16; }},
      {"dp4_zero3_groups2", 4,
       [](Config& c) { c.parallel.dp = 4, c.parallel.zero = 3, c.parallel.shard_group = 2, c.train.global_batch = 16; }},
      {"pp2_dp2_zero3", 4,
       [](Config& c) { c.parallel.pp = 2, c.parallel.dp = 2, c.parallel.zero = 3, c.train.global_batch = 16; }},
      {"dp2_zero3_bf16", 2, [](Config& c) { c.model.dtype = DType::BFloat16, c.parallel.dp = 2, c.parallel.zero = 3; }},
      // Experts in blocks 1 and 3 (NOTE [Experts beside ZeRO]): whole on their ranks under ZeRO.
      {"moe_dp2_ep2", 2, [](Config& c) { with_experts(c), c.parallel.dp = 2, c.parallel.ep = 2; }, kExpertTolerance},
      {"moe_dp2_ep2_zero1", 2, [](Config& c) { with_experts(c), c.parallel.dp = 2, c.parallel.ep = 2, c.parallel.zero = 1; },
       kExpertTolerance},
      {"moe_dp4_ep2_zero3", 4,
       [](Config& c) {
         with_experts(c), c.parallel.dp = 4, c.parallel.ep = 2, c.parallel.zero = 3, c.train.global_batch = 16;
       },
       kExpertTolerance},
  };
}

class PlanMemory : public ::testing::TestWithParam<PlanLayout> {};

TEST_P(PlanMemory, EstimatePerStageIsWithinToleranceOfTheMeasuredPeak) {
  const PlanLayout& layout = GetParam();
  if (world().size() != layout.ranks) GTEST_SKIP() << "runs at " << layout.ranks << " ranks";
  Config c = tiny();
  layout.set(c);
  train::Trainer trainer(c, world());
  const auto records = trainer.run({.peak_flops = 1e9});
  const plan::RunPlan& plan = trainer.plan();
  std::vector<int64_t> measured = records.back().peak_bytes_by_stage;
  if (measured.empty()) measured = {records.back().peak_bytes};
  ASSERT_EQ(measured.size(), plan.stages.size());
  for (size_t s = 0; s < measured.size(); ++s) {
    const double estimate = plan.stages[s].memory.total();
    const double ratio = static_cast<double>(measured[s]) / estimate;
    if (world().rank() == 0)
      fmt::print("[ measured ] {} stage {}: measured / estimate {:.3f}\n", layout.name, s, ratio);
    EXPECT_NEAR(ratio, 1.0, layout.tolerance) << layout.name << " stage " << s << ": estimate " << estimate
                                        << " B, measured " << measured[s] << " B";
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, PlanMemory, ::testing::ValuesIn(layouts()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace loom::test
