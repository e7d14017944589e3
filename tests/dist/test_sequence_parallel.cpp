// Sequence parallelism (LSS, sp_mode "allgather") against the serial model (float64, relative
// 1e-9) on sequences that span several attention tiles per segment: sp alone, with dp, with tp
// (and tp_sequence), with pp; and the collectives it runs per step against the analytic count,
// including the one all-reduce over dp x sp that sums the weight gradients.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "layout_harness.h"
#include "world.h"

namespace loom::test {
namespace {

// Segments of 32 and 16 tokens at sp = 2 and 4: several attention tiles of 8 each.
Config sp_config() { return small_gpt(97, /*n_layers=*/2, /*seq_len=*/64, 4, 2); }

struct SpCase {
  int dp = 1, tp = 1, pp = 1;  // sp = world / (dp x tp x pp)
  int zero = 0;  // parallel.zero
  bool sequence = false;
  int64_t overlap = 1;
  std::string mode = "allgather";
  std::string schedule = "1f1b";  // with pp > 1
};

class SequenceParallelGpt : public ::testing::TestWithParam<SpCase> {};

TEST_P(SequenceParallelGpt, MatchesTheSerialRunInFloat64) {
  const SpCase sc = GetParam();
  const int n = world().size(), others = sc.dp * sc.tp * sc.pp;
  if (n % others != 0 || n / others < 2) GTEST_SKIP() << "needs sp >= 2";
  Config c = sp_config();
  c.parallel.dp = sc.dp;
  c.parallel.tp = sc.tp;
  c.parallel.pp = sc.pp;
  c.parallel.sp = n / others;
  c.parallel.zero = sc.zero;
  c.parallel.tp_sequence = sc.sequence;
  c.parallel.tp_overlap = sc.overlap;
  c.parallel.sp_mode = sc.mode;
  c.parallel.schedule = sc.schedule;
  if (v_shaped(sc.schedule)) c.train.micro_batch = 1;  // 2 x pp micro-batches fill the V
  if (sc.mode == "ulysses" && c.model.n_heads % (sc.tp * c.parallel.sp) != 0) GTEST_SKIP() << "heads over tp x sp";
  const TrainedRun serial = run_serial(c);
  const TrainedRun layout = train_run(c, world());
  expect_same_training(layout, serial, 1e-9, 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Layouts, SequenceParallelGpt,
                         ::testing::Values(SpCase{}, SpCase{1, 1, 1, true}, SpCase{2}, SpCase{2, 1, 1, true},
                                           SpCase{1, 2}, SpCase{1, 2, 1, false, true, 2}, SpCase{1, 1, 2},
                                           SpCase{2, 2, 1, true, true}, SpCase{1, 1, 1, false, false, 1, "ulysses"},
                                           SpCase{2, 1, 1, true, false, 1, "ulysses"},
                                           SpCase{1, 2, 1, false, true, 2, "ulysses"},
                                           SpCase{1, 1, 2, false, false, 1, "ulysses"},
                                           SpCase{1, 1, 1, false, false, 1, "ring"},
                                           SpCase{2, 1, 1, true, false, 1, "ring"},
                                           SpCase{1, 2, 1, false, true, 2, "ring"},
                                           SpCase{1, 1, 2, false, false, 1, "ring"},
                                           // ZeRO-3 over the dp x sp replicas
                                           SpCase{1, 1, 1, 3}, SpCase{2, 1, 1, 3}, SpCase{1, 2, 1, 3},
                                           SpCase{1, 1, 2, 3}, SpCase{2, 1, 1, 3, false, 1, "ulysses"},
                                           SpCase{1, 1, 1, 3, false, 1, "ring"},
                                           // A V of two ranks (NOTE [V-shaped pipelines]) over sp.
                                           SpCase{1, 1, 2, 0, false, 1, "ring", "zb-v"},
                                           SpCase{1, 1, 2, 0, false, 1, "allgather", "zb-v"},
                                           SpCase{1, 1, 2, 0, false, 1, "ring", "dualpipe-v"}),
                         [](const auto& info) {
                           const SpCase& s = info.param;
                           std::string name = fmt::format("{}_dp{}_tp{}_pp{}{}{}_overlap{}{}", s.mode, s.dp, s.tp, s.pp,
                                              s.zero == 0 ? "" : s.zero == 1 ? std::string("_zero") : fmt::format("_zero{}", s.zero), s.sequence ? "_sequence" : "", s.overlap,
                                              s.schedule == "1f1b" ? "" : "_" + s.schedule);
                           std::erase(name, '-');
                           return name;
                         });

// The Llama in every sp mode: rotary at each rank's global positions (its segment, or the ring's
// two chunks), and grouped kv heads that the cores move unexpanded (ulysses splits the 8 query
// heads and the 4 kv heads over sp each in their own groups).
class SequenceParallelLlama : public ::testing::TestWithParam<SpCase> {};

TEST_P(SequenceParallelLlama, MatchesTheSerialRunInFloat64) {
  const SpCase sc = GetParam();
  const int n = world().size(), others = sc.dp * sc.tp * sc.pp;
  if (n % others != 0 || n / others < 2) GTEST_SKIP() << "needs sp >= 2";
  Config c = small_llama(97, /*n_layers=*/2, /*seq_len=*/64, 4, 2);
  c.parallel.dp = sc.dp;
  c.parallel.tp = sc.tp;
  c.parallel.pp = sc.pp;
  c.parallel.sp = n / others;
  c.parallel.zero = sc.zero;
  c.parallel.tp_sequence = sc.sequence;
  c.parallel.tp_overlap = sc.overlap;
  c.parallel.sp_mode = sc.mode;
  if (sc.mode == "ulysses" && c.model.n_kv_heads % (sc.tp * c.parallel.sp) != 0) GTEST_SKIP() << "kv heads over tp x sp";
  expect_same_training(train_run(c, world()), run_serial(c), 1e-9, 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Layouts, SequenceParallelLlama,
                         ::testing::Values(SpCase{}, SpCase{2, 1, 1, true}, SpCase{1, 2, 1, false, true, 2},
                                           SpCase{1, 1, 1, false, false, 1, "ulysses"},
                                           SpCase{1, 2, 1, false, true, 1, "ulysses"},
                                           SpCase{2, 1, 1, true, false, 1, "ulysses"},
                                           SpCase{1, 1, 1, false, false, 1, "ring"},
                                           SpCase{1, 2, 1, false, true, 2, "ring"},
                                           SpCase{1, 1, 2, false, false, 1, "ring"}, SpCase{2, 1, 1, 3},
                                           SpCase{1, 1, 1, 2, false, 1, "ulysses"}),
                         [](const auto& info) {
                           const SpCase& s = info.param;
                           return fmt::format("{}_dp{}_tp{}_pp{}{}{}_overlap{}", s.mode, s.dp, s.tp, s.pp,
                                              s.zero == 0 ? "" : s.zero == 1 ? std::string("_zero") : fmt::format("_zero{}", s.zero), s.sequence ? "_sequence" : "", s.overlap);
                         });

// Ulysses moves the kv heads, not their expansion: per block one all-to-all of q, k, v (8 query
// heads + 2 x 4 kv heads) and one of the output in forward, one of dout and one of dq, dk, dv in
// backward; each tensor [B, heads, Ts, hd] of the segment.
TEST(SequenceParallelLlamaComm, UlyssesMovesTheGroupedKvHeads) {
  const int n = world().size();
  if (n < 2 || 4 % n != 0) GTEST_SKIP() << "4 kv heads over sp";
  Config c = small_llama(97, 2, 64, 2, 2);
  c.parallel.sp = n;
  c.parallel.sp_mode = "ulysses";
  c.train.steps = 1;
  train::Trainer trainer(c, world());
  trainer.run({.peak_flops = 1e9});
  const auto& m = c.model;
  const int64_t head = c.train.micro_batch * (m.seq_len / n) * (m.d_model / m.n_heads) * 8;  // one head's bytes
  const int64_t qkv = (m.n_heads + 2 * m.n_kv_heads) * head, out = m.n_heads * head;
  auto sp = ops_on(trainer.comm_stats(), "sp");
  EXPECT_EQ(sp["all_to_all"], std::pair(4 * m.n_layers, m.n_layers * 2 * (qkv + out)));
  EXPECT_EQ(sp.size(), 1u) << "nothing else over sp";
}

// The communication tests' run: sp = the world in `mode`, one step of one micro-batch.
Config one_step_config(const std::string& mode) {
  Config c = sp_config();
  c.parallel.sp = world().size();
  c.parallel.sp_mode = mode;
  c.train.steps = 1;
  c.train.global_batch = 2;
  return c;
}

// Per step with one micro-batch: per transformer block the sp axis carries one fused all-gather
// of this segment's k and v in forward ([2, B, H, Ts, hd] handed in), the same again in backward,
// and one fused reduce-scatter of the visible segments' dk and dv (sp blocks of that size handed
// in). Weight gradients: all-reduces over dp x sp only (one per bucket), none over sp or dp.
TEST(SequenceParallelGptComm, FusedKvCollectivesAndOneGradientAllReduceOverDpTimesSp) {
  const int n = world().size();
  if (n < 2) GTEST_SKIP();
  Config c = one_step_config("allgather");
  c.parallel.sparse = "off";  // every weight gradient in the buckets
  train::Trainer trainer(c, world());
  trainer.run({.peak_flops = 1e9});
  const auto& m = c.model;
  const int64_t kv = 2 * c.train.micro_batch * (m.seq_len / n) * m.d_model * 8;
  auto sp = ops_on(trainer.comm_stats(), "sp");  // op -> (count, bytes)
  int64_t replica_all_reduces = 0, replica_bytes = 0;
  for (const auto& r : trainer.comm_stats().records) {
    EXPECT_FALSE(r.axis == "dp" && r.op == "all_reduce") << "weight gradients travel over dp x sp only";
    if (r.axis == "dp_sp" && r.op == "all_reduce" && r.bytes > 8) ++replica_all_reduces, replica_bytes += r.bytes;
  }
  EXPECT_EQ(sp["all_gather"], std::pair(2 * m.n_layers, 2 * m.n_layers * kv)) << "k and v fused, forward and backward";
  EXPECT_EQ(sp["reduce_scatter"], std::pair(m.n_layers, m.n_layers * kv * n)) << "dk and dv fused";
  EXPECT_EQ(sp.size(), 2u) << "nothing else over sp";
  // The buckets tile the flat gradient (padded to a multiple of the group) once: one pass.
  int64_t numel = 0;
  for (nn::Param* p : trainer.model().params()) numel += p->numel();
  EXPECT_GE(replica_all_reduces, 2) << "several buckets at bucket_mb = 0.02";
  EXPECT_EQ(replica_bytes, (numel + n - 1) / n * n * 8);
}

// Ring per step with one micro-batch: per transformer block sp - 1 rotations of the [2, B, H, Ts,
// hd] k/v block in forward; in backward sp - 1 rotations of the block and sp of its gradients;
// each a send and a receive; nothing else over sp.
TEST(SequenceParallelGptComm, RingRotatesKvBlocks) {
  const int n = world().size();
  if (n < 2) GTEST_SKIP();
  Config c = one_step_config("ring");
  train::Trainer trainer(c, world());
  trainer.run({.peak_flops = 1e9});
  const auto& m = c.model;
  const int64_t block = 2 * c.train.micro_batch * (m.seq_len / n) * m.d_model * 8;
  auto sp = ops_on(trainer.comm_stats(), "sp");
  const int64_t rotations = m.n_layers * ((n - 1) + (n - 1) + n);
  EXPECT_EQ(sp["send"], std::pair(rotations, rotations * block));
  EXPECT_EQ(sp["recv"], std::pair(rotations, rotations * block));
  EXPECT_EQ(sp.size(), 2u) << "nothing else over sp";
}

// Ulysses per step with one micro-batch: per transformer block two all-to-alls in forward (q, k, v
// to heads; the output back) and two in backward (dout to heads; dq, dk, dv back), each moving
// the tensor's whole size; nothing else over sp.
TEST(SequenceParallelGptComm, UlyssesTwoAllToAllsEachWay) {
  const int n = world().size();
  if (n < 2 || 4 % n != 0) GTEST_SKIP() << "4 heads over sp";
  Config c = one_step_config("ulysses");
  train::Trainer trainer(c, world());
  trainer.run({.peak_flops = 1e9});
  const auto& m = c.model;
  const int64_t one = c.train.micro_batch * (m.seq_len / n) * m.d_model * 8;  // one tensor of the segment
  auto sp = ops_on(trainer.comm_stats(), "sp");
  EXPECT_EQ(sp["all_to_all"], std::pair(4 * m.n_layers, m.n_layers * (3 + 1 + 1 + 3) * one));
  EXPECT_EQ(sp.size(), 1u) << "nothing else over sp";
}

}  // namespace
}  // namespace loom::test
