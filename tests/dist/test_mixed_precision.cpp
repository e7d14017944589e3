// Mixed precision across layouts (NOTE [Mixed precision]). The float64 suites prove that every
// layout computes the serial model exactly; in bfloat16 a layout changes where products are cut
// and summed (a row-parallel projection's partial sums are each rounded to bfloat16 before the
// tp all-reduce; dp sums gradients in another order; sp and pp move bfloat16 activations), so
// its losses differ from the serial bfloat16 run's by rounding, never by more.
//
// Tolerance: each such difference is of the order of bfloat16's unit roundoff u = 2^-8 in some
// activations or gradients; through ten steps of training it moves the loss by a small multiple
// of u relative. The bound is 2u ~ 7.8e-3 relative per step's loss (measured 2026-11-30: at most
// 2.3e-3 over every layout here at 2 ranks, 1.7e-3 at 4). A layout bug (a missing sum, a wrong
// slice, a stale bfloat16 weight copy) is caught exactly by the float64 suites; here it would
// move the loss by far more than rounding.
//
// Every layout runs on both bf16 products' paths (NOTE [bf16 products]): "auto" (native on a CPU
// with bfloat16 instructions) and "widened" (float32 GEMMs on widened operands), each against the
// serial run of its own path. On a CPU without bfloat16 instructions both are the widened path:
// native products are refused there (and some 20x slower); the unit tests run every layer on
// both paths on any CPU (tests/unit/test_mixed_precision.cpp).
#include <gtest/gtest.h>

#include "dist/layout_harness.h"

namespace loom::test {
namespace {

constexpr double kLossTolerance = 2.0 / 256;

Config bf16(Config c) {
  c.model.dtype = "bfloat16";
  c.train.steps = 10;
  c.train.warmup = 2;
  return c;
}

void expect_close_losses(const TrainedRun& got, const TrainedRun& want) {
  ASSERT_EQ(got.records.size(), want.records.size());
  for (size_t i = 0; i < want.records.size(); ++i) {
    const double g = got.records[i].loss, w = want.records[i].loss;
    EXPECT_LE(std::abs(g - w), kLossTolerance * std::abs(w)) << "step " << i << ": loss " << g << " vs serial " << w;
  }
  EXPECT_LT(want.records.back().loss, want.records.front().loss) << "the serial bfloat16 run learns";
}

struct PrecisionLayout {
  std::string name;
  std::function<void(Config&, int)> apply;  // sets the layout for a world of n ranks
};

using LayoutCase = std::tuple<std::string, PrecisionLayout, std::string>;  // kind, layout, model.bf16_products

std::string layout_name(const ::testing::TestParamInfo<LayoutCase>& info) {
  return std::get<0>(info.param) + "_" + std::get<1>(info.param).name + "_" + std::get<2>(info.param);
}

class MixedPrecisionLayouts : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(MixedPrecisionLayouts, LossesMatchTheSerialBfloat16Run) {
  const auto& [kind, layout, products] = GetParam();
  const int n = world().size();
  Config c = bf16(kind == "llama" ? small_llama(64, 2, 16, 8, 2) : small_gpt(64, 2, 16, 8, 2));
  c.model.bf16_products = products;
  layout.apply(c, n);
  const auto& p = c.parallel;
  if (p.dp * p.tp * p.pp * p.sp != n || c.microbatch_count() % p.dp != 0) GTEST_SKIP() << "layout needs other ranks";
  expect_close_losses(train_run(c, world()), run_serial(c));
}

const PrecisionLayout kLayouts[] = {
    {"dp", [](Config& c, int n) { c.parallel.dp = n; }},
    {"dp_zero", [](Config& c, int n) { c.parallel.dp = n, c.parallel.zero = 1; }},
    {"dp_bf16_grads", [](Config& c, int n) { c.parallel.dp = n, c.parallel.grad_dtype = "bfloat16"; }},
    // ZeRO-2/3: float32 owned ranges, bfloat16 copies of the gathered values (NOTE [Fully sharded
    // data parallelism]), and their gradients reduce-scattered in bfloat16.
    {"dp_zero2", [](Config& c, int n) { c.parallel.dp = n, c.parallel.zero = 2; }},
    {"dp_zero3", [](Config& c, int n) { c.parallel.dp = n, c.parallel.zero = 3; }},
    {"dp_zero3_bf16_grads",
     [](Config& c, int n) { c.parallel.dp = n, c.parallel.zero = 3, c.parallel.grad_dtype = "bfloat16"; }},
    {"tp", [](Config& c, int n) { c.parallel.tp = n; }},
    {"tp_sequence", [](Config& c, int n) { c.parallel.tp = n, c.parallel.tp_sequence = true; }},
    {"pp", [](Config& c, int n) { c.parallel.pp = n; }},
    {"sp_allgather", [](Config& c, int n) { c.parallel.sp = n; }},
    {"sp_ring", [](Config& c, int n) { c.parallel.sp = n, c.parallel.sp_mode = "ring"; }},
    {"sp_ulysses", [](Config& c, int n) { c.parallel.sp = n, c.parallel.sp_mode = "ulysses"; }},
    {"dp2_tp_pp", [](Config& c, int n) { c.parallel.dp = 2, c.parallel.tp = n / 4, c.parallel.pp = 2; }},
};

INSTANTIATE_TEST_SUITE_P(Layouts, MixedPrecisionLayouts,
                         ::testing::Combine(::testing::Values("gpt", "llama"), ::testing::ValuesIn(kLayouts),
                                            ::testing::Values("auto", "widened")),
                         layout_name);

// Experts in bfloat16 (NOTE [Mixture-of-experts block]): the router in float32 on bfloat16
// activations, the experts' products in bfloat16; dp, pp and, over an even world, expert groups
// of 2 (NOTE [Expert parallelism]), against the serial bfloat16 run.
class MixedPrecisionExperts : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(MixedPrecisionExperts, LossesMatchTheSerialBfloat16Run) {
  const auto& [layout, products] = GetParam();
  const int n = world().size();
  Config c = bf16(small_llama(64, 2, 16, 8, 2));
  c.model.bf16_products = products;
  c.model.moe_experts = 4;
  c.model.moe_every = 2;
  c.model.moe_ffn_hidden = 24;
  if (layout == "pp") c.parallel.pp = n;
  else c.parallel.dp = n;
  if (layout == "ep") c.parallel.ep = 2;
  if (c.microbatch_count() % c.parallel.dp != 0 || c.parallel.dp % c.parallel.ep != 0)
    GTEST_SKIP() << "layout needs other ranks";
  expect_close_losses(train_run(c, world()), run_serial(c));
}

INSTANTIATE_TEST_SUITE_P(Layouts, MixedPrecisionExperts,
                         ::testing::Combine(::testing::Values("dp", "pp", "ep"), ::testing::Values("auto", "widened")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

// parallel.grad_dtype = "bfloat16" halves the bytes of the dp all-reduce: every gradient element
// travels once per step in 2 bytes instead of 4; the buckets are the same; ZeRO's reduce-scatter
// likewise, while its all-gather of the float32 parameters keeps its width.
int64_t bucket_bytes(const train::Trainer& trainer, const char* op) {
  int64_t bytes = 0;
  for (const auto& r : trainer.comm_stats().records)
    if (r.op == op && r.axis == "dp" && r.bytes > 16) bytes += r.bytes;  // not the loss or the norms
  return bytes;
}

class MixedPrecisionComm : public ::testing::TestWithParam<int> {};

TEST_P(MixedPrecisionComm, Bfloat16GradientsHalveTheDataParallelBytes) {
  const int dp = world().size();
  if (dp < 2) GTEST_SKIP() << "needs replicas";
  Config c = bf16(small_gpt(64, 2, 16, 8, 2));
  c.train.steps = 1;
  c.parallel.dp = dp;
  c.parallel.zero = GetParam();
  c.parallel.sparse = "off";  // every gradient in the flat buffer
  if (c.microbatch_count() % dp != 0) GTEST_SKIP();
  const char* op = c.parallel.zero == 1 ? "reduce_scatter" : "all_reduce";
  for (const char* wire : {"float32", "bfloat16"}) {
    SCOPED_TRACE(wire);
    c.parallel.grad_dtype = wire;
    train::Trainer trainer(c, world());
    trainer.run({.peak_flops = 1e9});
    const int64_t padded = (trainer.model().param_count() + dp - 1) / dp * dp;
    EXPECT_EQ(bucket_bytes(trainer, op), padded * (std::string(wire) == "float32" ? 4 : 2));
  }
}

INSTANTIATE_TEST_SUITE_P(Zero, MixedPrecisionComm, ::testing::Values(0, 1));

}  // namespace
}  // namespace loom::test
