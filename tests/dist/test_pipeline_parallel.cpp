// Pipeline parallelism against the serial model (float64, relative 1e-9): every schedule (the
// V-shaped zb-v and dualpipe-v too) at pp = world, pp with dp, pp with tp (and tp_sequence), dp x tp x pp = 2 x 2 x 2, with and
// without recomputation; and the messages a stage sends per step against the analytic count.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <map>

#include "layout_harness.h"
#include "world.h"

namespace loom::test {
namespace {

// A chain of 11 layers (4 transformer blocks): up to pp x chunks = 8 slices.
Config pp_config() { return small_gpt(97, /*n_layers=*/4, /*seq_len=*/24, 8, 1); }

struct PpCase {
  std::string schedule;
  int dp = 1, tp = 1;          // pp = world / (dp x tp)
  int64_t chunks = 1;
  std::string recompute = "none";
  int zero = 0;  // parallel.zero
  bool sequence = false;
  int64_t overlap = 1;  // parallel.tp_overlap (micro-batches of 2 samples when > 1)
};

class PipelineGpt : public ::testing::TestWithParam<PpCase> {};

TEST_P(PipelineGpt, MatchesTheSerialRunInFloat64) {
  const PpCase pc = GetParam();
  const int n = world().size();
  if (n % (pc.dp * pc.tp) != 0 || n / (pc.dp * pc.tp) < 2) GTEST_SKIP() << "needs pp >= 2";
  Config c = pp_config();
  c.parallel.dp = pc.dp;
  c.parallel.tp = pc.tp;
  c.parallel.pp = n / (pc.dp * pc.tp);
  c.parallel.schedule = pc.schedule;
  c.parallel.chunks = pc.chunks;
  c.parallel.zero = pc.zero;
  c.parallel.tp_sequence = pc.sequence;
  c.parallel.tp_overlap = pc.overlap;
  if (pc.overlap > 1) c.train.micro_batch = 2;
  c.memory.recompute = pc.recompute;
  c.memory.recompute_ratio = 0.5;
  if (c.parallel.pp * c.parallel.stage_chunks() > 2 * c.model.n_layers + 3) GTEST_SKIP() << "more slices than the chain's layers";
  if (v_shaped(pc.schedule) && c.microbatch_count() / pc.dp < 2 * c.parallel.pp) GTEST_SKIP() << "too few micro-batches for the V";
  const TrainedRun serial = run_serial(c);
  const TrainedRun layout = train_run(c, world());
  expect_same_training(layout, serial, 1e-9, 1e-9);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, PipelineGpt,
    ::testing::Values(PpCase{"gpipe"}, PpCase{"1f1b"}, PpCase{"interleaved", 1, 1, 2}, PpCase{"zb-h1"},
                      PpCase{"scp", 1, 1, 1, "stage-aware"}, PpCase{"1f1b", 1, 1, 1, "full"},
                      PpCase{"1f1b", 1, 1, 1, "stage-aware"}, PpCase{"zb-h1", 1, 1, 1, "full"},
                      PpCase{"1f1b", 2, 1}, PpCase{"zb-h1", 2, 1, 1, "none", true}, PpCase{"1f1b", 1, 2},
                      PpCase{"interleaved", 1, 2, 2, "none", false, true}, PpCase{"1f1b", 2, 2},
                      PpCase{"scp", 2, 2, 1, "stage-aware", true, true},
                      PpCase{"zb-h1", 1, 2, 1, "full", false, true, 2},
                      // ZeRO-3 (NOTE [Fully sharded data parallelism]): each stage shards its own
                      // layers; gathers per micro-batch and pass, under split and joint backwards.
                      PpCase{"1f1b", 1, 1, 1, "none", 3}, PpCase{"zb-h1", 1, 1, 1, "none", 3},
                      PpCase{"1f1b", 2, 1, 1, "none", 3}, PpCase{"zb-h1", 2, 1, 1, "full", 3},
                      PpCase{"interleaved", 2, 1, 2, "none", 3}, PpCase{"1f1b", 1, 2, 1, "stage-aware", 3},
                      PpCase{"1f1b", 2, 1, 1, "none", 2},
                      // NOTE [V-shaped pipelines]: two chunks per rank in a V, the turn handed over
                      // within the rank; with dp, tp (tp_sequence), recomputation and ZeRO-3.
                      PpCase{"zb-v"}, PpCase{"zb-v", 2, 1}, PpCase{"zb-v", 1, 2, 1, "full", 0, true},
                      PpCase{"zb-v", 1, 1, 1, "stage-aware"}, PpCase{"zb-v", 2, 1, 1, "none", 3},
                      // NOTE [Overlapped pairs]: the V with F&B pairs, each pair's receives posted
                      // before its forward.
                      PpCase{"dualpipe-v"}, PpCase{"dualpipe-v", 2, 1}, PpCase{"dualpipe-v", 1, 2, 1, "full", 0, true},
                      PpCase{"dualpipe-v", 1, 1, 1, "stage-aware"}, PpCase{"dualpipe-v", 2, 1, 1, "none", 3}),
    [](const auto& info) {
      const PpCase& p = info.param;
      std::string name = fmt::format("{}_dp{}_tp{}_chunks{}_{}{}{}_overlap{}", p.schedule, p.dp, p.tp, p.chunks,
                                     p.recompute, p.zero == 0 ? "" : p.zero == 1 ? std::string("_zero") : fmt::format("_zero{}", p.zero), p.sequence ? "_sequence" : "",
                                     p.overlap);
      std::erase(name, '-');
      return name;
    });

// The Llama's chain cut into stages (its head separate: a tied head needs pp = 1) under two
// schedules of each kind of pipeline, alone, with recomputation, and with tp (tp_sequence).
class PipelineLlama : public ::testing::TestWithParam<PpCase> {};

TEST_P(PipelineLlama, MatchesTheSerialRunInFloat64) {
  const PpCase pc = GetParam();
  const int n = world().size();
  if (n % (pc.dp * pc.tp) != 0 || n / (pc.dp * pc.tp) < 2) GTEST_SKIP() << "needs pp >= 2";
  Config c = small_llama(97, /*n_layers=*/4, /*seq_len=*/24, 8, 1);
  c.parallel.dp = pc.dp;
  c.parallel.tp = pc.tp;
  c.parallel.pp = n / (pc.dp * pc.tp);
  c.parallel.schedule = pc.schedule;
  c.parallel.chunks = pc.chunks;
  c.parallel.tp_sequence = pc.sequence;
  c.parallel.zero = pc.zero;
  c.memory.recompute = pc.recompute;
  if (c.parallel.pp * c.parallel.stage_chunks() > 2 * c.model.n_layers + 3) GTEST_SKIP() << "more slices than the chain's layers";
  if (v_shaped(pc.schedule) && c.microbatch_count() / pc.dp < 2 * c.parallel.pp) GTEST_SKIP() << "too few micro-batches for the V";
  expect_same_training(train_run(c, world()), run_serial(c), 1e-9, 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Layouts, PipelineLlama,
                         ::testing::Values(PpCase{"1f1b"}, PpCase{"interleaved", 1, 1, 2}, PpCase{"zb-h1"},
                                           PpCase{"1f1b", 1, 1, 1, "full"}, PpCase{"zb-h1", 1, 2, 1, "none", false, true},
                                           PpCase{"interleaved", 2, 1, 2}, PpCase{"1f1b", 2, 1, 1, "none", 3},
                                           PpCase{"zb-h1", 1, 1, 1, "full", 3}, PpCase{"zb-v"},
                                           PpCase{"zb-v", 1, 1, 1, "full"}, PpCase{"zb-v", 1, 2}, PpCase{"dualpipe-v"},
                                           PpCase{"dualpipe-v", 1, 2, 1, "full"}),
                         [](const auto& info) {
                           const PpCase& p = info.param;
                           std::string name = fmt::format("{}_dp{}_tp{}_chunks{}_{}{}{}", p.schedule, p.dp, p.tp,
                                                          p.chunks, p.recompute, p.sequence ? "_sequence" : "",
                                                          p.zero ? fmt::format("_zero{}", p.zero) : "");
                           std::erase(name, '-');
                           return name;
                         });

// A schedule read from CSV, in which the second stage takes the micro-batches in the opposite
// order to the one the first stage sends them in (the messages' tags keep them apart).
TEST(PipelineGptCsv, AScheduleFromCsvWithReorderedMicroBatches) {
  if (world().size() != 2) GTEST_SKIP() << "a two-stage schedule";
  const std::string path = fmt::format("{}/loom_pp_schedule.csv", ::testing::TempDir());
  if (world().rank() == 0) {
    std::ofstream out(path);
    out << "step,rank0,rank1\n0,F0,\n1,F1,F1\n2,BW1,BW1\n3,BW0,F0\n4,,BW0\n";
  }
  world().barrier();
  Config c = pp_config();
  c.parallel.pp = 2;
  c.parallel.schedule = "csv:" + path;
  c.train.global_batch = 2;
  const TrainedRun serial = run_serial(c);
  const TrainedRun layout = train_run(c, world());
  expect_same_training(layout, serial, 1e-9, 1e-9);
  world().barrier();
  if (world().rank() == 0) std::remove(path.c_str());
}

// Per step a stage sends one activation per micro-batch forward (unless it is last) and one
// gradient backward (unless it is first), each [micro_batch, seq, d_model], and receives the
// matching ones.
TEST(PipelineGptComm, OneActivationAndOneGradientPerMicroBatchAndBoundary) {
  const int n = world().size();
  if (n < 2) GTEST_SKIP();
  Config c = pp_config();
  c.parallel.pp = n;
  c.train.steps = 1;
  train::Trainer trainer(c, world());
  trainer.run({.peak_flops = 1e9});
  const int64_t m = c.train.global_batch / c.train.micro_batch, r = trainer.mesh().pp_rank();
  const int64_t boundary = c.train.micro_batch * c.model.seq_len * c.model.d_model * 8;
  int64_t sends = 0, recvs = 0;
  for (const auto& rec : trainer.comm_stats().records) {
    if (rec.axis != "pp" || (rec.op != "send" && rec.op != "recv")) continue;
    EXPECT_EQ(rec.bytes, boundary) << rec.op;
    (rec.op == "send" ? sends : recvs) += 1;
  }
  const int64_t neighbours = (r > 0 ? 1 : 0) + (r + 1 < n ? 1 : 0);
  EXPECT_EQ(sends, m * neighbours);
  EXPECT_EQ(recvs, m * neighbours);
}

}  // namespace
}  // namespace loom::test

namespace loom::test {
namespace {

// --trace: rank 0 writes one file with a track per rank, each holding that rank's schedule
// actions (and its messages), on one time axis; the metrics carry the bubble, measured and
// predicted.
TEST(PipelineGptTrace, OneFileWithATrackPerRank) {
  const int n = world().size();
  if (n < 2) GTEST_SKIP();
  Config c = pp_config();
  c.parallel.pp = n;
  c.train.steps = 1;
  const std::string path = fmt::format("{}/loom_pp_trace_{}.json", ::testing::TempDir(), n);
  train::Trainer trainer(c, world());
  const auto records = trainer.run({.trace_path = path, .peak_flops = 1e9});
  // 1F1B over p stages and m micro-batches idles at least (p - 1) / (m + p - 1) of the time for any
  // stage costs (a stage's m micro-batches plus the others' first forward and last backward lie on
  // one path; the bound is met when the stages are equal): the simulator's bubble for the measured
  // costs obeys it exactly; a measured bubble lies in (0, 1).
  const double stages = n, micro = static_cast<double>(c.train.global_batch / c.train.micro_batch);
  ASSERT_EQ(c.parallel.schedule, "1f1b");
  EXPECT_GE(records[0].predicted_bubble_fraction, (stages - 1) / (micro + stages - 1) - 1e-12);
  EXPECT_LT(records[0].predicted_bubble_fraction, 1);
  EXPECT_GT(records[0].bubble_fraction, 0);
  EXPECT_LT(records[0].bubble_fraction, 1);
  if (world().rank() != 0) return;
  std::ifstream in(path);
  ASSERT_TRUE(in.good());
  const auto trace = nlohmann::json::parse(in);
  std::map<int, int> actions;  // pid -> F and BW actions
  for (const auto& e : trace)
    if (e.value("cat", "") == "pipeline") actions[e["pid"].get<int>()] += 1;
  ASSERT_EQ(static_cast<int>(actions.size()), n);
  const int m = static_cast<int>(c.train.global_batch / c.train.micro_batch);
  for (auto [pid, count] : actions) EXPECT_EQ(count, 2 * m) << "rank " << pid;
  std::remove(path.c_str());
}

}  // namespace
}  // namespace loom::test
