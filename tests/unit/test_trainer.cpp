// Single-process training end to end: the loss falls, runs are bit-reproducible, and the way a
// global batch is split into micro-batches or whether activations are recomputed does not change
// the model (float64, relative 1e-9).
#include <fmt/ranges.h>
#include <gmock/gmock.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "loom/data/markov_source.h"
#include "loom/dist/null_communicator.h"
#include "loom/memory/accounting_allocator.h"
#include "loom/train/progress.h"
#include "loom/train/trainer.h"
#include "tiny_configs.h"
#include "unit/layer_check.h"

namespace loom::train {
namespace {

// small_gpt (attention tiles of 8: several per sequence) as a user runs it: float32, the default
// learning rate, gradient buckets and table path (auto), 4 steps.
Config small_config() {
  Config c = test::small_gpt(/*vocab=*/64, /*n_layers=*/2, /*seq_len=*/24, /*global_batch=*/4, /*micro_batch=*/2);
  c.train.steps = 4;
  c.model.dtype = "float32";
  c.train.lr = 1e-3;
  c.parallel.bucket_mb = 25;
  c.parallel.sparse = SparseMode::Auto;
  return c;
}

struct RunResult {
  std::vector<StepRecord> records;
  std::vector<at::Tensor> weights;
};

RunResult run(const Config& c, const TrainOptions& options = {.peak_flops = 1e9}) {
  dist::NullCommunicator world;
  Trainer trainer(c, world);
  RunResult r;
  r.records = trainer.run(options);
  for (nn::Param* p : trainer.model().params()) r.weights.push_back(trainer.value_of(*p).clone());
  return r;
}

void expect_same_model(const RunResult& a, const RunResult& b, double tol) {
  ASSERT_EQ(a.records.size(), b.records.size());
  for (size_t i = 0; i < a.records.size(); ++i)
    EXPECT_NEAR(a.records[i].loss, b.records[i].loss, tol * std::abs(b.records[i].loss)) << "step " << i;
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (size_t i = 0; i < a.weights.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TENSOR_NEAR(a.weights[i], b.weights[i], tol);
  }
}

TEST(Trainer, LossFallsOnTheSyntheticChain) {
  Config c = small_config();
  c.train.steps = 40;
  c.train.lr = 1e-2;
  c.train.warmup = 4;
  const auto r = run(c).records;
  const double first = r.front().loss;
  EXPECT_NEAR(first, std::log(64.0), 0.3) << "an untrained model predicts about uniformly";
  double last = 0;
  for (size_t i = r.size() - 5; i < r.size(); ++i) last += r[i].loss / 5;
  EXPECT_LT(last, first - 1.0) << "the chain's entropy is " << data::MarkovSource::entropy_nats();
  // Each step's figures agree with one another (a positive rate or peak could not fail): the rate
  // is the step's tokens over its time, and the peak holds at least the parameters, gradients and
  // moments the step kept.
  const double tokens_per_step = static_cast<double>(c.train.global_batch * c.model.seq_len);
  for (const auto& s : r) {
    EXPECT_TRUE(std::isfinite(s.grad_norm));
    EXPECT_NEAR(s.tokens_per_s, tokens_per_step / (s.step_ms / 1e3), 1e-9 * s.tokens_per_s);
    EXPECT_GT(s.model_state_bytes, 0);
    EXPECT_GE(s.peak_bytes, s.model_state_bytes);
  }
}

TEST(Trainer, TwoRunsAreBitIdentical) {
  Config c = small_config();
  const auto a = run(c), b = run(c);
  for (size_t i = 0; i < a.records.size(); ++i) EXPECT_EQ(a.records[i].loss, b.records[i].loss);
  for (size_t i = 0; i < a.weights.size(); ++i) EXPECT_TRUE(at::equal(a.weights[i], b.weights[i])) << i;
}

TEST(Trainer, MicroBatchSplitDoesNotChangeTheModelInFloat64) {
  Config c = small_config();
  c.model.dtype = "float64";
  c.train.micro_batch = 4;
  const auto one = run(c);
  c.train.micro_batch = 1;
  expect_same_model(run(c), one, 1e-9);
}

TEST(Trainer, FullRecomputeGivesTheSameModelWithLessActivationMemory) {
  Config c = small_config();
  c.model.dtype = "float64";
  c.model.seq_len = 96;  // activations, not parameters, dominate the peak
  c.train.steps = 2;
  const auto kept = run(c);
  c.memory.recompute = "full";
  const auto recomputed = run(c);
  expect_same_model(recomputed, kept, 1e-12);
  EXPECT_LT(recomputed.records.back().peak_bytes, 0.8 * kept.records.back().peak_bytes)
      << recomputed.records.back().peak_bytes << " vs " << kept.records.back().peak_bytes;
}

TEST(Trainer, WritesMetricsLinesAndAChromeTrace) {
  const auto dir = std::filesystem::temp_directory_path() / ("loom_trainer_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  Config c = small_config();
  c.train.steps = 2;
  run(c, {.metrics_path = (dir / "m.jsonl").string(), .trace_path = (dir / "t.json").string(), .peak_flops = 1e9});
  std::ifstream metrics(dir / "m.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(metrics, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j.at("step").get<int>(), ++lines);  // counted from 1, as the progress line
    for (const char* key : {"loss", "lr", "grad_norm", "tokens_per_s", "step_ms", "mfu", "peak_bytes"})
      EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(lines, 2);
  const auto trace = nlohmann::json::parse(std::ifstream(dir / "t.json"));
  std::set<std::string> kinds;
  ASSERT_TRUE(trace.is_array());  // the streamed form (NOTE [Streamed trace])
  for (const auto& e : trace)
    if (e.at("ph") == "X") kinds.insert(e.at("cat").get<std::string>() + ":" + e.at("name").get<std::string>());
  for (const char* k : {"forward:embedding", "backward_input:blocks.1.mlp", "backward_weight:head_loss",
                        "forward:blocks.0.attn", "optimizer:adamw", "communication:sparse_pull",
                        "communication:sparse_push", "optimizer:sparse_adamw"})
    EXPECT_TRUE(kinds.count(k)) << k;
  std::vector<std::string> left;  // no temporaries (NOTE [Output files])
  for (const auto& entry : std::filesystem::directory_iterator(dir)) left.push_back(entry.path().filename());
  EXPECT_EQ(left.size(), 2u) << fmt::format("{}", fmt::join(left, " "));
  std::filesystem::remove_all(dir);
}

// A step whose loss or gradient norm is not finite stops the run before the optimizer changes a
// weight (NOTE [Non-finite guard]): an infinite learning rate gives NaN weights after one update,
// so the first step's update is applied, and the second step stops with the weights of step 1.
TEST(Trainer, StopsOnANonFiniteLossBeforeTheUpdate) {
  Config c = small_config();
  c.train.steps = 3;
  c.train.warmup = 0;
  c.train.lr = 1e300;
  c.train.clip = 0;
  dist::NullCommunicator world;
  Trainer trainer(c, world);
  try {
    trainer.run({.peak_flops = 1e9});
    FAIL() << "a non-finite step trained on";
  } catch (const AgreedError& e) {
    EXPECT_EQ(e.exit_code(), 1);
    EXPECT_THAT(e.what(), ::testing::HasSubstr("stopped before the optimizer applied it"));
  }
}

// A DLRM on the synthetic clicks: the loss starts near log 2 and falls well below it (the clicks
// follow a planted logistic model), and the tables train on the sparse path by default.
TEST(Trainer, DlrmLossFallsOnSyntheticClicks) {
  Config c;
  c.model.kind = "dlrm";
  c.model.d_model = 8;
  c.model.tables = 4;
  c.model.table_rows = 50;
  c.model.dense_features = 6;
  c.model.bottom_mlp = {32};
  c.model.top_mlp = {32};
  c.train.steps = 40;
  c.train.global_batch = 256;
  c.train.micro_batch = 128;
  c.train.lr = 1e-2;
  c.train.warmup = 4;
  c.train.threads = 1;
  c.parallel.sparse = "on";  // "auto" keeps a single replica's tables dense
  dist::NullCommunicator world;
  Trainer trainer(c, world);
  const auto r = trainer.run({.peak_flops = 1e9});
  EXPECT_EQ(trainer.sparse_partitions(), 1);
  int sparse = 0;
  for (nn::Param* p : trainer.model().params()) sparse += p->sparse != nullptr;
  EXPECT_EQ(sparse, 4) << "every table on the sparse path";
  EXPECT_NEAR(r.front().loss, std::log(2.0), 0.15);
  double last = 0;
  for (size_t i = r.size() - 5; i < r.size(); ++i) last += r[i].loss / 5;
  EXPECT_LT(last, r.front().loss - 0.1);
}

TEST(Trainer, RefusesABudgetTooSmallBeforeAllocatingParameters) {
  Config c = small_config();
  c.memory.budget = "64KiB";
  memory::install_accounting_allocator();
  const int64_t before = memory::live_bytes();
  try {
    dist::NullCommunicator world;
    Trainer t(c, world);
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("memory.budget = 64.00 KiB is too small"));
  }
  EXPECT_EQ(memory::live_bytes(), before);
  EXPECT_EQ(memory::budget(), 0);
}

// The ETA is this process's pace over the steps it ran, times the steps it has left: a run
// resumed at step 100 of 150 that took 10 s for step 101 has 49 steps, 490 s, to go (the old
// line divided by the global step and said 0:04); --stop-after ends it earlier; hours are shown.
TEST(Progress, TheEtaCountsThisProcessStepsToItsLastStep) {
  EXPECT_EQ(eta_text(10, 1, 49), "8:10");
  EXPECT_EQ(eta_text(10, 0, 49), "?");
  EXPECT_EQ(eta_text(7200, 1, 1), "2:00:00");
  EXPECT_EQ(eta_text(3599, 1, 1), "59:59");
  // A clock of the test's own: 10 s pass between the start and the step's line, whatever the
  // machine does meanwhile (the wall clock made the ETA depend on how long the test itself took).
  const auto line = [](int64_t first, int64_t last, int64_t step) {
    std::ostringstream out;
    std::chrono::steady_clock::time_point clock{};
    ProgressPrinter printer(&out, first, last, 150, "tok", [&clock] { return clock; });
    clock += std::chrono::seconds(10);
    StepRecord r;
    r.step = step;
    printer.print(r);
    return out.str();
  };
  EXPECT_THAT(line(100, 150, 101), ::testing::HasSubstr("step 101/150 |"));
  EXPECT_THAT(line(100, 150, 101), ::testing::EndsWith("| eta 8:10\n"));
  EXPECT_THAT(line(100, 120, 101), ::testing::EndsWith("| eta 3:10\n"));  // --stop-after 120
}

}  // namespace
}  // namespace loom::train
