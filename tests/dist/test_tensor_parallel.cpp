// Tensor parallelism against the serial model (float64): the column- and row-parallel linear
// layers slice by slice, the whole GPT under tp and dp x tp (with vocabulary padding and ZeRO-1)
// step by step, and the collectives each block runs against the analytic count.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "layout_harness.h"
#include "loom/core/rng.h"
#include "loom/dist/recording_communicator.h"
#include "loom/parallel/tensor_parallel_linear.h"
#include "loom/parallel/tp_region.h"
#include "unit/layer_check.h"
#include "world.h"

namespace loom::parallel {
namespace {

using test::world;

constexpr int64_t kIn = 8, kOut = 12, kRows = 10;  // kOut / 3 divisible by tp = 1, 2, 4

// The same values on every rank: drawn from (name, element) like parameters.
at::Tensor shared_randn(const std::string& name, std::vector<int64_t> shape) {
  return normal_tensor(stream_key(99, name), shape, {}, 1.0, at::kDouble);
}

// The serial layer's math on full tensors: y = x W^T + b, dx = dy W, dW = dy^T x, db = sum dy.
struct SerialLinear {
  at::Tensor w, b;
  at::Tensor forward(const at::Tensor& x) const { return at::addmm(b, x, w.t()); }
  at::Tensor backward_input(const at::Tensor& dy) const { return at::mm(dy, w); }
};

// The full weight a layer named "layer" draws its shard from (seed 7, std 0.5).
at::Tensor full_weight(int64_t out, int64_t in) {
  return normal_tensor(stream_key(7, "layer.weight"), {out, in}, {}, 0.5, at::kDouble);
}

class TensorParallelLinear : public ::testing::TestWithParam<int64_t> {};  // groups

TEST_P(TensorParallelLinear, ColumnParallelMatchesSlicesOfTheSerialLayer) {
  const int64_t groups = GetParam(), tp = world().size(), r = world().rank();
  if ((kOut / groups) % tp != 0) GTEST_SKIP();
  const SerialLinear serial{full_weight(kOut, kIn), shared_randn("bias", {kOut})};
  dist::CommStats stats;
  dist::RecordingCommunicator comm(world(), stats);
  ColumnParallelLinear layer("layer", kIn, kOut, true, 0.5, comm, groups);
  for (nn::Param* p : layer.params()) nn::initialise(*p, 7, at::kDouble);
  const int64_t per = kOut / groups, local = per / tp;
  auto my_slice = [&](const at::Tensor& full) {  // this rank's columns of each group
    const auto lead = full.sizes().slice(0, full.dim() - 1).vec();
    std::vector<int64_t> grouped = lead;
    grouped.push_back(groups), grouped.push_back(per);
    std::vector<int64_t> flat = lead;
    flat.push_back(groups * local);
    return full.reshape(grouped).narrow(-1, r * local, local).reshape(flat);
  };
  layer.bias.value.view({-1}).copy_(my_slice(serial.b));  // a non-zero bias, to see it travel

  const at::Tensor x = shared_randn("x", {kRows, kIn}), dy = shared_randn("dy", {kRows, kOut});
  const at::Tensor y = layer.forward(x), dx = layer.backward_input(my_slice(dy));
  layer.backward_weight(x, my_slice(dy));

  EXPECT_TENSOR_NEAR(y, my_slice(serial.forward(x)), 1e-12);
  EXPECT_TENSOR_NEAR(dx, serial.backward_input(dy), 1e-12);
  EXPECT_TENSOR_NEAR(layer.weight.grad.reshape({-1, kIn}), my_slice(dy.t().mm(x).t()).t(), 1e-12);
  EXPECT_TENSOR_NEAR(layer.bias.grad.reshape({-1}), my_slice(dy.sum(0)), 1e-12);
  if (tp > 1) {
    ASSERT_EQ(stats.records.size(), 1u) << "column-parallel: one all-reduce, in backward_input";
    EXPECT_EQ(stats.records[0], (dist::CommRecord{"all_reduce", "world", kRows * kIn * 8}));
  }
}

INSTANTIATE_TEST_SUITE_P(Groups, TensorParallelLinear, ::testing::Values(1, 3),
                         [](const auto& info) { return "groups" + std::to_string(info.param); });

TEST(TensorParallelLinearRow, RowParallelMatchesSlicesOfTheSerialLayer) {
  const int64_t tp = world().size(), r = world().rank();
  // Row-parallel splits the inputs: the serial layer maps kOut features to kIn.
  const SerialLinear serial{full_weight(kIn, kOut), shared_randn("bias", {kIn})};
  dist::CommStats stats;
  dist::RecordingCommunicator comm(world(), stats);
  RowParallelLinear layer("layer", kOut, kIn, true, 0.5, comm);
  for (nn::Param* p : layer.params()) nn::initialise(*p, 7, at::kDouble);
  layer.bias.value.copy_(serial.b);
  const int64_t local = kOut / tp;

  const at::Tensor x = shared_randn("x", {kRows, kOut}), dy = shared_randn("dy", {kRows, kIn});
  const at::Tensor x_local = x.narrow(1, r * local, local).contiguous();
  const at::Tensor y = layer.forward(x_local), dx = layer.backward_input(dy);
  layer.backward_weight(x_local, dy);

  EXPECT_TENSOR_NEAR(y, serial.forward(x), 1e-12);
  EXPECT_TENSOR_NEAR(dx, serial.backward_input(dy).narrow(1, r * local, local), 1e-12);
  EXPECT_TENSOR_NEAR(layer.weight.grad, dy.t().mm(x).narrow(1, r * local, local), 1e-12);
  EXPECT_TENSOR_NEAR(layer.bias.grad, dy.sum(0), 1e-12);
  if (tp > 1) {
    ASSERT_EQ(stats.records.size(), 1u) << "row-parallel: one all-reduce, in forward";
    EXPECT_EQ(stats.records[0], (dist::CommRecord{"all_reduce", "world", kRows * kIn * 8}));
  }
}

// The sequence helpers of tp_sequence against slices of the full tensors: rank r holds tokens
// [r T/n, (r+1) T/n) of every batch row.
TEST(TensorParallelSequence, GatherAndReduceScatterAlongTheSequence) {
  const int64_t n = world().size(), r = world().rank(), batch = 3, seq = 4 * n, d = 5;
  const at::Tensor full = shared_randn("full", {batch, seq, d});
  const int64_t local = seq / n;
  const at::Tensor mine = full.narrow(1, r * local, local).contiguous();
  EXPECT_TENSOR_NEAR(gather_sequence(world(), mine), full, 0);
  PendingSequenceGather pending(world(), mine);
  EXPECT_TENSOR_NEAR(pending.wait(), full, 0);
  // Rank r contributes (r + 1) x full: the sum is n (n + 1) / 2 x full, and rank r keeps its tokens.
  const at::Tensor partial = full * static_cast<double>(r + 1);
  EXPECT_TENSOR_NEAR(reduce_scatter_sequence(world(), partial), mine * static_cast<double>(n * (n + 1) / 2), 1e-12);
}

}  // namespace
}  // namespace loom::parallel

// ---------------------------------------------------------------------------------------------
// The GPT under tensor parallelism (and dp x tp) against the serial run, float64, 1e-9.

namespace loom::test {
namespace {

Config tp_config(int64_t vocab) { return small_gpt(vocab, /*n_layers=*/2, /*seq_len=*/24, 4, 1); }

struct TpCase {
  int64_t vocab;
  int zero;
  bool with_dp;          // dp x tp = 2 x (world / 2) instead of tp = world
  int64_t overlap = 1;   // parallel.tp_overlap (micro-batches of 2 samples when > 1)
  bool sequence = false; // parallel.tp_sequence
};

class TensorParallelGpt : public ::testing::TestWithParam<TpCase> {};

TEST_P(TensorParallelGpt, MatchesTheSerialRunInFloat64) {
  const TpCase tc = GetParam();
  const int n = world().size();
  Config c = tp_config(tc.vocab);
  c.parallel.zero = tc.zero;
  c.parallel.dp = tc.with_dp ? 2 : 1;
  c.parallel.tp = n / c.parallel.dp;
  c.parallel.tp_overlap = tc.overlap;
  c.parallel.tp_sequence = tc.sequence;
  if (tc.overlap > 1) c.train.micro_batch = 2;
  if (n % c.parallel.dp != 0 || 4 % c.parallel.tp != 0 || (tc.with_dp && n < 4)) GTEST_SKIP();
  const TrainedRun serial = run_serial(c);
  const TrainedRun layout = train_run(c, world());
  expect_same_training(layout, serial, 1e-9, 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Layouts, TensorParallelGpt,
                         ::testing::Values(TpCase{96, 0, false}, TpCase{97, 0, false}, TpCase{96, 1, false},
                                           TpCase{97, 1, true}, TpCase{96, 0, true}, TpCase{96, 0, false, 2},
                                           TpCase{97, 1, true, 2}, TpCase{97, 0, false, 1, true},
                                           TpCase{96, 1, false, 1, true}, TpCase{96, 0, false, 2, true},
                                           TpCase{97, 0, true, 1, true}, TpCase{96, 1, true, 2, true},
                                           TpCase{97, 3, false}, TpCase{97, 3, true}, TpCase{97, 2, true, 2}),
                         [](const auto& info) {
                           const TpCase& t = info.param;
                           return fmt::format("vocab{}_zero{}{}_overlap{}{}", t.vocab, t.zero, t.with_dp ? "_dp2" : "",
                                              t.overlap, t.sequence ? "_sequence" : "");
                         });

// The Llama under tp (8 query heads sharing 4 kv heads: each tp rank holds whole kv heads and
// the query heads they serve), with tp_sequence, tp_overlap, dp x tp with ZeRO, and a head tied to
// the vocabulary-parallel token table.
struct LlamaTpCase {
  int64_t vocab;
  bool with_dp = false, sequence = false, tied = false;
  int64_t overlap = 1;
  int zero = 0;
};

class TensorParallelLlama : public ::testing::TestWithParam<LlamaTpCase> {};

TEST_P(TensorParallelLlama, MatchesTheSerialRunInFloat64) {
  const LlamaTpCase tc = GetParam();
  const int n = world().size();
  Config c = small_llama(tc.vocab, 2, 24, 4, tc.overlap > 1 ? 2 : 1, /*kv_heads=*/4, tc.tied);
  c.parallel.dp = tc.with_dp ? 2 : 1;
  c.parallel.tp = n / c.parallel.dp;
  c.parallel.tp_sequence = tc.sequence;
  c.parallel.tp_overlap = tc.overlap;
  c.parallel.zero = tc.zero;
  if (n % c.parallel.dp != 0 || 4 % c.parallel.tp != 0 || (tc.with_dp && n < 4)) GTEST_SKIP();
  expect_same_training(train_run(c, world()), run_serial(c), 1e-9, 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Layouts, TensorParallelLlama,
                         ::testing::Values(LlamaTpCase{96}, LlamaTpCase{97, false, true}, LlamaTpCase{96, false, false, false, 2},
                                           LlamaTpCase{97, false, true, true}, LlamaTpCase{96, false, true, false, 2},
                                           LlamaTpCase{97, true, true, false, 1, 1}, LlamaTpCase{96, true, false, true, 2, 1},
                                           LlamaTpCase{97, true, false, false, 1, 3}, LlamaTpCase{97, true, false, true, 1, 3}),
                         [](const auto& info) {
                           const LlamaTpCase& t = info.param;
                           return fmt::format("vocab{}{}{}{}_overlap{}_zero{}", t.vocab, t.with_dp ? "_dp2" : "",
                                              t.sequence ? "_sequence" : "", t.tied ? "_tied" : "", t.overlap, t.zero);
                         });

// Per step with one micro-batch, the tp axis carries: the embedding's all-reduce of the
// activations; per transformer block four (attention and MLP, forward and backward); the head's
// row maxima and [exp-sum, target] statistics in forward and dx in backward; and the 8-byte
// squared norm of the sharded gradients for clipping.
// With tp_overlap = k the four per block become k chunk all-reduces each, with the same bytes.
class TensorParallelGptComm : public ::testing::TestWithParam<int64_t> {};  // tp_overlap

TEST_P(TensorParallelGptComm, CollectivesPerBlockMatchTheAnalyticCount) {
  const int n = world().size();
  const int64_t k = GetParam();
  if (n == 1) GTEST_SKIP() << "nothing moves with one rank";
  Config c = tp_config(96);
  c.parallel.tp = n;
  c.parallel.tp_overlap = k;
  c.train.steps = 1;
  c.train.global_batch = 2;
  c.train.micro_batch = 2;
  if (4 % n != 0) GTEST_SKIP();
  train::Trainer trainer(c, world());
  trainer.run({.peak_flops = 1e9});
  const int64_t layers = c.model.n_layers, rows = c.train.micro_batch * c.model.seq_len;
  const int64_t activation = rows * c.model.d_model * 8;
  const auto& stats = trainer.comm_stats();
  EXPECT_EQ(stats.count("all_reduce", "tp"), 1 + 4 * layers * k + 3 + 1);
  int64_t activations = 0, block_chunks = 0, small = 0;
  for (const auto& r : stats.records) {
    if (r.axis != "tp") continue;
    if (r.bytes == activation) ++activations;
    else if (k > 1 && r.bytes == activation / k) ++block_chunks;
    else small += r.bytes;
  }
  EXPECT_EQ(activations, 1 + (k == 1 ? 4 * layers : 0) + 1) << "embedding, [four per block], the head's dx";
  EXPECT_EQ(block_chunks, k == 1 ? 0 : 4 * layers * k) << "four per block, cut into k chunks";
  EXPECT_EQ(small, rows * 8 + 2 * rows * 8 + 8) << "row maxima, [exp-sum, target], the norm";
}

INSTANTIATE_TEST_SUITE_P(Overlap, TensorParallelGptComm, ::testing::Values(1, 2),
                         [](const auto& info) { return "overlap" + std::to_string(info.param); });

}  // namespace
}  // namespace loom::test

namespace loom::test {
namespace {

// The same count under tp_sequence (NOTE [Tensor-parallel regions]), with A the bytes of one
// [tokens, d_model] activation and n = tp. Per step with one micro-batch the tp axis carries:
//   reduce-scatters: the embedding's output and the head's dx (A each); per sub-block (two per
//     transformer block) y in forward and dx in backward, k chunks of A / k each;
//   all-gathers: the head's input and the embedding's dy (A / n each); per sub-block its normed
//     input in forward and dy in backward (k chunks of A / (n k)), and the normed input again in
//     backward (A / n, whole);
//   all-reduces: the head's row maxima and [exp-sum, target] (3 floats per token in two), the
//     norm for clipping, and the partial gradients of each sequence-sharded layer once (the
//     position table; each sub-block's norm; the final norm).
class TensorParallelGptSequenceComm : public ::testing::TestWithParam<int64_t> {};  // tp_overlap

TEST_P(TensorParallelGptSequenceComm, CollectivesPerBlockMatchTheAnalyticCount) {
  const int64_t n = world().size(), k = GetParam();
  if (n == 1) GTEST_SKIP() << "nothing moves with one rank";
  Config c = tp_config(96);
  c.parallel.tp = n;
  c.parallel.tp_overlap = k;
  c.parallel.tp_sequence = true;
  c.train.steps = 1;
  c.train.global_batch = 2;
  c.train.micro_batch = 2;
  if (4 % n != 0) GTEST_SKIP();
  train::Trainer trainer(c, world());
  trainer.run({.peak_flops = 1e9});
  const auto& m = c.model;
  const int64_t sub_blocks = 2 * m.n_layers, rows = c.train.micro_batch * m.seq_len;
  const int64_t a = rows * m.d_model * 8;
  auto got = ops_on(trainer.comm_stats(), "tp");  // op -> (count, bytes); not the world's step figures
  EXPECT_EQ(got["reduce_scatter"], std::pair(2 + sub_blocks * 2 * k, 2 * a + sub_blocks * 2 * a));
  EXPECT_EQ(got["all_gather"], std::pair(2 + sub_blocks * (2 * k + 1), (2 + sub_blocks * 3) * a / n));
  const int64_t partial_grads = (m.seq_len * m.d_model + sub_blocks * 2 * m.d_model + 2 * m.d_model) * 8;
  EXPECT_EQ(got["all_reduce"], std::pair(2 + 1 + (1 + sub_blocks + 1), 3 * rows * 8 + 8 + partial_grads));
  EXPECT_EQ(got.size(), 3u) << "no other kind of collective";
}

INSTANTIATE_TEST_SUITE_P(Overlap, TensorParallelGptSequenceComm, ::testing::Values(1, 2),
                         [](const auto& info) { return "overlap" + std::to_string(info.param); });

}  // namespace
}  // namespace loom::test
